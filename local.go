package sluice

import (
	"sync"
	"time"
)

// localFallback is the in-process quota used by the FailLocal policy while
// Redis is unreachable. Each replica admits its share of every limit
// (Rate/replicas per Period, burst likewise, at least 1) with a GCRA kept in
// memory, so the fleet as a whole stays near the configured quota without
// any shared state. Concurrency limits count this process's holders only.
type localFallback struct {
	replicas int64

	mu        sync.Mutex
	tat       map[string]time.Time // GCRA theoretical arrival time per key
	held      map[string]int64     // concurrency holders per key
	lastSweep time.Time
}

func newLocalFallback(replicas int) *localFallback {
	if replicas < 1 {
		replicas = 1
	}
	return &localFallback{replicas: int64(replicas), tat: map[string]time.Time{}, held: map[string]int64{}}
}

// share is this replica's part of n, at least 1.
func (f *localFallback) share(n int64) int64 {
	if s := n / f.replicas; s > 0 {
		return s
	}
	return 1
}

// decide admits or denies cost against lim for key at now.
func (f *localFallback) decide(key string, lim Limit, cost int64, now time.Time) Result {
	rate := f.share(lim.Rate)
	burst := rate
	if lim.Algorithm == AlgTokenBucket || lim.Algorithm == AlgGCRA {
		burst = f.share(lim.Burst)
	}
	interval := lim.Period / time.Duration(rate) // emission interval
	if interval <= 0 {
		interval = 1
	}
	tolerance := interval * time.Duration(burst)

	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweep(now)
	tat := f.tat[key]
	if tat.Before(now) {
		tat = now
	}
	res := Result{Limit: lim, Degraded: true}
	if cost > burst {
		res.RetryAfter = RetryNever
		res.Remaining = remainingAt(tat, now, tolerance, interval)
		res.ResetAfter = tat.Sub(now)
		return res
	}
	newTAT := tat.Add(interval * time.Duration(cost))
	if wait := newTAT.Sub(now) - tolerance; wait > 0 {
		res.RetryAfter = wait
		res.Remaining = remainingAt(tat, now, tolerance, interval)
		res.ResetAfter = tat.Sub(now)
		return res
	}
	res.Allowed = true
	if cost > 0 {
		f.tat[key] = newTAT
		tat = newTAT
	}
	res.Remaining = remainingAt(tat, now, tolerance, interval)
	res.ResetAfter = tat.Sub(now)
	return res
}

func remainingAt(tat, now time.Time, tolerance, interval time.Duration) int64 {
	free := tolerance - tat.Sub(now)
	if free < 0 {
		return 0
	}
	return int64(free / interval)
}

// acquire takes a local concurrency slot.
func (f *localFallback) acquire(key string, lim Limit) Result {
	n := f.share(lim.Rate)
	f.mu.Lock()
	defer f.mu.Unlock()
	res := Result{Limit: lim, Degraded: true}
	if f.held[key] >= n {
		res.RetryAfter = lim.Period
		return res
	}
	f.held[key]++
	res.Allowed = true
	res.Remaining = n - f.held[key]
	return res
}

// release gives a local concurrency slot back.
func (f *localFallback) release(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held[key] > 1 {
		f.held[key]--
	} else {
		delete(f.held, key)
	}
}

// sweep drops idle GCRA entries once a minute so memory stays bounded by
// the keys active in the last minute or so.
func (f *localFallback) sweep(now time.Time) {
	if now.Sub(f.lastSweep) < time.Minute {
		return
	}
	f.lastSweep = now
	for k, tat := range f.tat {
		if !tat.After(now) {
			delete(f.tat, k)
		}
	}
}
