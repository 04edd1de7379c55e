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

func (failOpen) release(_, _ string) {}
func (failOpen) forget(string)       {}

// failClosed denies everything, until the breaker's next probe.
type failClosed struct{}

func (failClosed) decide(_ []string, lims []Limit, _ int64, _ bool, _ time.Time, b *breaker) Result {
	return Result{Limit: lims[0], RetryAfter: b.retryAfter(), Degraded: true}
}

func (failClosed) acquire(_, _ string, lim Limit, _ time.Time, b *breaker) Result {
	return Result{Limit: lim, RetryAfter: b.retryAfter(), Degraded: true}
}

func (failClosed) release(_, _ string) {}
func (failClosed) forget(string)       {}
