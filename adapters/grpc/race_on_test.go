//go:build race

package grpclimit

// raceEnabled: under the race detector sync.Pool drops items at random and
// the instrumentation allocates, so allocation counts are not asserted.
const raceEnabled = true
