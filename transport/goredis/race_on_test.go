//go:build race

package goredis_test

// raceEnabled: the race detector's instrumentation allocates, so
// allocation counts are not asserted under it.
const raceEnabled = true
