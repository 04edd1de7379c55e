// Package testsize says how big the tests' exhaustive sweeps run. By
// default they run a smaller version that still exercises what they test
// (the README's test command stays short); with SLUICE_TEST_FULL=1, which
// .ci/run sets, they run in full: more repetitions, longer spans, more
// random steps.
package testsize

import "os"

// Env is the variable that selects the full sweeps.
const Env = "SLUICE_TEST_FULL"

// Full reports whether the full sweeps run.
func Full() bool { return os.Getenv(Env) == "1" }

// Pick returns full when the full sweeps run, else short.
func Pick[T any](short, full T) T {
	if Full() {
		return full
	}
	return short
}
