package sluice

import "time"

// fallback is the failure policy as the pipeline calls it: the decision
// when Redis cannot make one. FailOpen, FailClosed and FailLocal each
// implement it, and the pipeline knows nothing else of them.
type fallback interface {
	// decide decides cost against lims (keys in the same order), all or
	// nothing; with peek it charges nothing. b is the breaker of the node
	// that could not decide (nil when there is none).
	decide(keys []string, lims []Limit, cost int64, peek bool, now time.Time, b *breaker) Result
	// acquire takes, or for a holder that has one renews, a slot of lim
	// for holder id.
	acquire(key, id string, lim Limit, now time.Time, b *breaker) Result
	// release gives back a slot acquire took.
	release(key, id string)
	// reserve books cost of lim on key at the first moment it conforms,
	// if that is at most maxWait from now: ok, and the delay until then.
	// Not ok: delay is the wait the cost would need (RetryNever when it
	// never fits), or with closed, when to ask again, the policy booking
	// nothing at all.
	reserve(key string, lim Limit, cost int64, maxWait time.Duration, now time.Time, b *breaker) (ok bool, delay time.Duration, closed bool)
	// unreserve gives back, as of now, a booking of reserve that conforms
	// at at.
	unreserve(key string, lim Limit, cost int64, at, now time.Time)
	// forget drops key's state (Reset).
	forget(key string)
}

func newFallback(cfg config) fallback {
	switch cfg.policy {
	case FailOpen:
		return failOpen{}
	case FailClosed:
		return failClosed{}
	}
	return newLocalFallback(cfg.replicas, cfg.localEntries)
}

// failOpen admits everything; Remaining is the capacity left after the
// cost, the binding limit the one with the least.
type failOpen struct{}

func (failOpen) decide(_ []string, lims []Limit, cost int64, _ bool, _ time.Time, _ *breaker) Result {
	res := Result{Allowed: true, Degraded: true}
	for i, lim := range lims {
		if r := max(0, capacity(lim)-cost); i == 0 || r < res.Remaining {
			res.Limit, res.Remaining = lim, r
		}
	}
	return res
}

func (failOpen) acquire(_, _ string, lim Limit, _ time.Time, _ *breaker) Result {
	return Result{Allowed: true, Limit: lim, Remaining: lim.Rate - 1, Degraded: true}
}

func (failOpen) reserve(string, Limit, int64, time.Duration, time.Time, *breaker) (bool, time.Duration, bool) {
	return true, 0, false
}

func (failOpen) release(_, _ string)                                  {}
func (failOpen) unreserve(string, Limit, int64, time.Time, time.Time) {}
func (failOpen) forget(string)                                        {}

// failClosed denies everything, until the breaker's next probe.
type failClosed struct{}

func (failClosed) decide(_ []string, lims []Limit, _ int64, _ bool, _ time.Time, b *breaker) Result {
	return Result{Limit: lims[0], RetryAfter: b.retryAfter(), Degraded: true}
}

func (failClosed) acquire(_, _ string, lim Limit, _ time.Time, b *breaker) Result {
	return Result{Limit: lim, RetryAfter: b.retryAfter(), Degraded: true}
}

func (failClosed) reserve(_ string, _ Limit, _ int64, _ time.Duration, _ time.Time, b *breaker) (bool, time.Duration, bool) {
	return false, b.retryAfter(), true
}

func (failClosed) release(_, _ string)                                  {}
func (failClosed) unreserve(string, Limit, int64, time.Time, time.Time) {}
func (failClosed) forget(string)                                        {}
