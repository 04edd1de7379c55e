package sluice

import "time"

// RetryNever is Result.RetryAfter when the cost asked for can never be
// admitted (it exceeds the limit's capacity).
const RetryNever time.Duration = -1

// Result is one decision.
type Result struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool
	// Limit is the limit that decided; for AllowAll, the binding one: the
	// limit that denied, or the one with the least remaining.
	Limit Limit
	// Remaining is the largest cost that would be admitted right after
	// this decision.
	Remaining int64
	// RetryAfter is 0 when allowed; otherwise the shortest wait after which
	// the same cost is admitted (at least 1µs), or RetryNever.
	RetryAfter time.Duration
	// ResetAfter is the time until the limit's state is empty (or the
	// bucket full): after it, the identity has its whole quota back.
	ResetAfter time.Duration
	// Degraded reports that Redis could not be asked and the decision
	// comes from the failure policy.
	Degraded bool
}

// decision is the reply shared by the rate and concurrency scripts, in µs.
type decision struct {
	allowed                           bool
	remaining, retryAfter, resetAfter int64
	limiting                          int64 // a multi-limit call: 1-based position of the binding limit
}

func (d decision) result(lim Limit) Result {
	r := Result{Allowed: d.allowed, Limit: lim, Remaining: d.remaining, ResetAfter: micros(d.resetAfter)}
	switch {
	case d.allowed:
	case d.retryAfter < 0:
		r.RetryAfter = RetryNever
	default:
		r.RetryAfter = max(micros(d.retryAfter), time.Microsecond)
	}
	return r
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// ceilMicros rounds d up (toward +∞) to a whole number of microseconds:
// 1.2µs is 2µs, -0.3µs is 0.
func ceilMicros(d time.Duration) time.Duration {
	switch r := d % time.Microsecond; {
	case r > 0:
		d += time.Microsecond - r
	case r < 0:
		d -= r
	}
	return d
}
