// Package model holds plain-Go reference models of sluice's built-in
// limiting algorithms, written straight from their textbook definitions, for
// tests to compare the Lua scripts in scripts/ against.
//
// The models favour obviousness over speed. Fractional quantities (tokens,
// theoretical arrival times, weighted counts) are exact rationals from
// math/big, logs keep every admitted unit, and the reply values are not
// computed by formula but found by searching each definition's predicate:
//
//   - remaining is the largest cost in [0, capacity] the definition admits
//     right after the decision;
//   - retry_after is the smallest wait w >= 1 after which the definition
//     admits the same cost (state unchanged), or -1 when cost > capacity;
//   - reset_after is the smallest wait w >= 0 after which the state is
//     empty (or, for a bucket, full).
//
// The searches assume that admission only gets easier as time passes and as
// cost shrinks, which holds for every algorithm here; tests probe the exact
// boundary of retry_after on the scripts independently of that assumption.
//
// Times are integer microseconds; costs are integers. The models are not
// safe for concurrent use.
package model

import "fmt"

// Decision is the reply of one limiting decision, as the scripts give it.
type Decision struct {
	Allowed    bool
	Remaining  int64 // largest cost admitted right after the decision
	RetryAfter int64 // µs; 0 when allowed, -1 when the cost never fits
	ResetAfter int64 // µs until the state is empty (a bucket: full)
	Limiting   int   // multi-limit decisions only: 1-based index of the deciding limit
}

func (d Decision) String() string {
	return fmt.Sprintf("{allowed:%v remaining:%d retry:%d reset:%d limiting:%d}",
		d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Limiting)
}

// Algorithm is the state of one limit together with its defining predicate.
type Algorithm interface {
	// Admits reports whether the definition admits cost at now, without
	// changing the state.
	Admits(now, cost int64) bool
	// Charge records an admitted cost at now.
	Charge(now, cost int64)
	// Empty reports whether the state at now is the initial one (nothing
	// counted, or a full bucket).
	Empty(now int64) bool
	// Capacity is the largest cost that can ever be admitted.
	Capacity() int64
}

// maxWait bounds the searches; every wait in the models is far below it.
const maxWait = int64(1) << 56

// firstTrue returns the smallest w >= lo with pred(w), for a predicate that
// stays true once true. It panics when there is none below maxWait, which
// would be a bug in a model.
func firstTrue(lo int64, pred func(int64) bool) int64 {
	if pred(lo) {
		return lo
	}
	bad, step := lo, int64(1)
	for {
		hi := lo + step
		if hi > maxWait {
			panic(fmt.Sprintf("model: no wait up to %d satisfies the predicate", maxWait))
		}
		if pred(hi) {
			for hi-bad > 1 { // pred(bad) false, pred(hi) true
				mid := bad + (hi-bad)/2
				if pred(mid) {
					hi = mid
				} else {
					bad = mid
				}
			}
			return hi
		}
		bad, step = hi, step*2
	}
}

// Remaining returns the largest cost in [0, a.Capacity()] that a admits at
// now.
func Remaining(a Algorithm, now int64) int64 {
	lo, hi := int64(0), a.Capacity() // a.Admits(now, 0) always holds
	if a.Admits(now, hi) {
		return hi
	}
	for hi-lo > 1 { // admits lo, not hi
		mid := lo + (hi-lo)/2
		if a.Admits(now, mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// RetryAfter returns the smallest wait w >= 1 after which a admits cost,
// or 0 when it admits cost now, or -1 when cost exceeds its capacity. A
// cost of 0 only reports: it is always admitted, also by a state that
// holds more than a lowered limit.
func RetryAfter(a Algorithm, now, cost int64) int64 {
	if cost > a.Capacity() {
		return -1
	}
	if cost == 0 || a.Admits(now, cost) {
		return 0
	}
	return firstTrue(1, func(w int64) bool { return a.Admits(now+w, cost) })
}

// ResetAfter returns the smallest wait w >= 0 after which a is empty.
func ResetAfter(a Algorithm, now int64) int64 {
	return firstTrue(0, func(w int64) bool { return a.Empty(now + w) })
}

// Decide makes one decision on a: it charges cost when it is admitted and
// positive, and reports the reply the scripts give.
func Decide(a Algorithm, now, cost int64) Decision {
	d := Decision{RetryAfter: RetryAfter(a, now, cost)}
	if d.RetryAfter == 0 {
		d.Allowed = true
		if cost > 0 {
			a.Charge(now, cost)
		}
	}
	d.Remaining = Remaining(a, now)
	d.ResetAfter = ResetAfter(a, now)
	return d
}

// DecideAll makes one all-or-nothing decision over several limits: cost is
// admitted only when every limit admits it, and then charged to all of
// them. RetryAfter is the smallest wait after which all of them admit cost;
// Remaining the smallest remaining; ResetAfter the largest reset. Limiting
// is the 1-based index of the deciding limit: the first whose capacity is
// below cost; else, when denied, the first with the largest own retry;
// else the first with the smallest remaining.
func DecideAll(as []Algorithm, now, cost int64) Decision {
	var d Decision
	for i, a := range as {
		if cost > a.Capacity() {
			d.RetryAfter, d.Limiting = -1, i+1
			break
		}
	}
	if d.RetryAfter == 0 {
		all := func(t int64) bool {
			if cost == 0 {
				return true // it only reports
			}
			for _, a := range as {
				if !a.Admits(t, cost) {
					return false
				}
			}
			return true
		}
		if all(now) {
			d.Allowed = true
			if cost > 0 {
				for _, a := range as {
					a.Charge(now, cost)
				}
			}
		} else {
			d.RetryAfter = firstTrue(1, func(w int64) bool { return all(now + w) })
			var worst int64
			for i, a := range as {
				if w := RetryAfter(a, now, cost); w > worst {
					worst, d.Limiting = w, i+1
				}
			}
		}
	}
	for i, a := range as {
		r := Remaining(a, now)
		if i == 0 || r < d.Remaining {
			d.Remaining = r
			if d.Allowed {
				d.Limiting = i + 1
			}
		}
		if w := ResetAfter(a, now); w > d.ResetAfter {
			d.ResetAfter = w
		}
	}
	return d
}
