// Package allocs counts a function's allocations in tests that pin them.
//
// testing.AllocsPerRun counts every allocation the process makes while it
// runs, other goroutines' included: a test binary's background work (a
// rueidis client reconnecting to a server an earlier test stopped, a
// breaker's probe, timers) adds to the count, and on a loaded machine
// that work lands in the window more often. It only ever adds, so the
// least of several counts is the function's own.
package allocs

import "testing"

// PerRun returns the least of tries counts of testing.AllocsPerRun(runs, f).
func PerRun(tries, runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for range tries - 1 {
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}
