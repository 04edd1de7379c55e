//go:build race

package sluice

// raceEnabled: the race detector's instrumentation allocates, so
// allocation counts are not asserted under it.
const raceEnabled = true
