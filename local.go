package sluice

import (
	"sync"
	"time"
)

// localFallback is the in-process quota used by the FailLocal policy while
// Redis is unreachable. Each replica admits its share of every limit
// (Rate/replicas per Period, burst likewise, at least 1) with a GCRA kept in
// memory, so the fleet as a whole stays near the configured quota without
// any shared state. Concurrency limits count this process's holders only,
// and each local lease expires after the limit's Period like a Redis one.
type localFallback struct {
	replicas int64

	mu        sync.Mutex
	tat       map[string]time.Time            // GCRA theoretical arrival time per key
	leases    map[string]map[string]time.Time // concurrency: key → holder ID → lease expiry
	lastSweep time.Time
}

func newLocalFallback(replicas int) *localFallback {
	return &localFallback{replicas: int64(max(replicas, 1)), tat: map[string]time.Time{}, leases: map[string]map[string]time.Time{}}
}

// share is this replica's part of n, at least 1.
func (f *localFallback) share(n int64) int64 {
	return max(n/f.replicas, 1)
}

// gcraOf is the local GCRA standing in for lim: emission interval and
// tolerance (burst × interval).
func (f *localFallback) gcraOf(lim Limit) (interval, tolerance time.Duration, burst int64) {
	rate := f.share(lim.Rate)
	burst = rate
	if lim.Algorithm == AlgTokenBucket || lim.Algorithm == AlgGCRA {
		burst = f.share(lim.Burst)
	}
	interval = max(lim.Period/time.Duration(rate), 1)
	return interval, interval * time.Duration(burst), burst
}

// decide admits cost against every limit, each under its key, or against
// none (all-or-nothing, like AllowAll in Redis). With peek it charges
// nothing and reports what the decision would be. The Result is the
// binding limit's: the one denying with the longest wait (RetryNever
// first), or when allowed the one with the least remaining.
func (f *localFallback) decide(keys []string, lims []Limit, cost int64, peek bool, now time.Time) Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweep(now)
	var bind Result
	allowed := true
	tats := make([]time.Time, len(lims))
	for i, lim := range lims {
		interval, tolerance, burst := f.gcraOf(lim)
		tat := f.tat[keys[i]]
		if tat.Before(now) {
			tat = now
		}
		tats[i] = tat
		r := Result{Limit: lim, Degraded: true, Allowed: true}
		switch wait := tat.Add(interval*time.Duration(cost)).Sub(now) - tolerance; {
		case cost > burst:
			r.Allowed, r.RetryAfter = false, RetryNever
		case wait > 0:
			r.Allowed, r.RetryAfter = false, max(ceilMicros(wait), time.Microsecond)
		}
		if !r.Allowed {
			r.Remaining = remainingAt(tat, now, tolerance, interval)
			r.ResetAfter = ceilMicros(tat.Sub(now))
			if allowed || r.RetryAfter == RetryNever && bind.RetryAfter != RetryNever || bind.RetryAfter != RetryNever && r.RetryAfter > bind.RetryAfter {
				bind = r
			}
			allowed = false
		}
	}
	if !allowed {
		return bind
	}
	for i, lim := range lims {
		interval, tolerance, _ := f.gcraOf(lim)
		tat := tats[i].Add(interval * time.Duration(cost))
		if cost > 0 && !peek {
			f.tat[keys[i]] = tat
		}
		r := Result{Allowed: true, Limit: lim, Degraded: true,
			Remaining: remainingAt(tat, now, tolerance, interval), ResetAfter: ceilMicros(tat.Sub(now))}
		if i == 0 || r.Remaining < bind.Remaining {
			bind = r
		}
	}
	return bind
}

func remainingAt(tat, now time.Time, tolerance, interval time.Duration) int64 {
	free := tolerance - tat.Sub(now)
	if free < 0 {
		return 0
	}
	return int64(free / interval)
}

// acquire takes (or, for a holder that has one, renews) a local
// concurrency slot for id until now + lim.Period.
func (f *localFallback) acquire(key, id string, lim Limit, now time.Time) Result {
	n := f.share(lim.Rate)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweep(now)
	held := f.live(key, now)
	res := Result{Limit: lim, Degraded: true}
	if _, mine := held[id]; !mine && int64(len(held)) >= n {
		first := time.Time{}
		for _, exp := range held {
			if first.IsZero() || exp.Before(first) {
				first = exp
			}
		}
		res.RetryAfter = max(ceilMicros(first.Sub(now)), time.Microsecond)
		res.Remaining = 0
		res.ResetAfter = ceilMicros(lastExpiry(held).Sub(now))
		return res
	}
	if held == nil {
		held = map[string]time.Time{}
		f.leases[key] = held
	}
	held[id] = now.Add(lim.Period)
	res.Allowed = true
	res.Remaining = n - int64(len(held))
	res.ResetAfter = ceilMicros(lastExpiry(held).Sub(now))
	return res
}

// release gives a local concurrency slot back.
func (f *localFallback) release(key, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if held := f.leases[key]; held != nil {
		delete(held, id)
		if len(held) == 0 {
			delete(f.leases, key)
		}
	}
}

// live returns key's holders after dropping expired leases.
func (f *localFallback) live(key string, now time.Time) map[string]time.Time {
	held := f.leases[key]
	for id, exp := range held {
		if !exp.After(now) {
			delete(held, id)
		}
	}
	if held != nil && len(held) == 0 {
		delete(f.leases, key)
		return nil
	}
	return held
}

func lastExpiry(held map[string]time.Time) time.Time {
	var last time.Time
	for _, exp := range held {
		if exp.After(last) {
			last = exp
		}
	}
	return last
}

// sweep drops idle GCRA entries and expired leases once a minute so memory
// stays bounded by the keys active in the last minute or so.
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
	for k := range f.leases {
		f.live(k, now)
	}
}

// forget drops key's local state (Reset).
func (f *localFallback) forget(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tat, key)
	delete(f.leases, key)
}
