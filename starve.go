package sluice

import (
	"runtime"
	rtmetrics "runtime/metrics"
	"time"
)

// sched is what the runtime says of this process's goroutines waiting for
// a core: a process starved of CPU looks, from inside, like a silent Redis
// node (replies arrive and wait to be read), so the watchdog asks before
// it takes a node for silent.
type sched struct {
	// longWaits is how many goroutines have waited at least the asked
	// duration, runnable, for a core since the process started (the
	// runtime samples one scheduling in eight): a rise between two looks
	// means some waited that long in between.
	longWaits uint64
	// runnable is how many goroutines wait for a core now (0 where the
	// runtime does not say, before Go 1.26).
	runnable uint64
}

// starved reports whether, since the look that found s0, goroutines of
// this process have waited for a core long enough to hold replies unread:
// some waited the asked duration, or more than 64 per core wait now.
func (s sched) starved(s0 sched) bool {
	return s.longWaits > s0.longWaits || s.runnable > 64*uint64(runtime.GOMAXPROCS(0))
}

// readSched reads sched from runtime/metrics, long waits being those of
// at least d.
func readSched(d time.Duration) sched {
	s := []rtmetrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/goroutines/runnable:goroutines"}}
	rtmetrics.Read(s)
	var out sched
	if s[0].Value.Kind() == rtmetrics.KindFloat64Histogram {
		h := s[0].Value.Float64Histogram()
		for i, c := range h.Counts {
			if h.Buckets[i] >= d.Seconds() {
				out.longWaits += c
			}
		}
	}
	if s[1].Value.Kind() == rtmetrics.KindUint64 {
		out.runnable = s[1].Value.Uint64()
	}
	return out
}
