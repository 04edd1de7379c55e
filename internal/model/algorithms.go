package model

import (
	"math/big"
	"sort"
)

// FixedWindow is the fixed-window definition: epoch-aligned windows
// [k*Period, (k+1)*Period); cost is admitted iff count + cost <= Limit,
// where count is the cost admitted in the window holding now.
type FixedWindow struct {
	Limit, Period int64
	counts        map[int64]int64 // window index -> admitted cost
}

// NewFixedWindow returns an empty fixed window of limit per period.
func NewFixedWindow(limit, period int64) *FixedWindow {
	return &FixedWindow{Limit: limit, Period: period, counts: map[int64]int64{}}
}

func (f *FixedWindow) count(now int64) int64 { return f.counts[now/f.Period] }

// Admits implements Algorithm.
func (f *FixedWindow) Admits(now, cost int64) bool { return f.count(now)+cost <= f.Limit }

// Charge implements Algorithm.
func (f *FixedWindow) Charge(now, cost int64) { f.counts[now/f.Period] += cost }

// Empty implements Algorithm.
func (f *FixedWindow) Empty(now int64) bool { return f.count(now) == 0 }

// Capacity implements Algorithm.
func (f *FixedWindow) Capacity() int64 { return f.Limit }

// SlidingLog is the sliding-log definition: cost is admitted iff the cost
// admitted in (now-Period, now] plus cost is at most Limit.
type SlidingLog struct {
	Limit, Period int64
	log           []stamp // admitted cost by time, in time order
}

type stamp struct{ at, cost int64 }

// NewSlidingLog returns an empty sliding log of limit per period.
func NewSlidingLog(limit, period int64) *SlidingLog {
	return &SlidingLog{Limit: limit, Period: period}
}

// Count returns the cost admitted in (now-Period, now].
func (s *SlidingLog) Count(now int64) int64 {
	var n int64
	for _, e := range s.log {
		if e.at > now-s.Period && e.at <= now {
			n += e.cost
		}
	}
	return n
}

// Admits implements Algorithm.
func (s *SlidingLog) Admits(now, cost int64) bool { return s.Count(now)+cost <= s.Limit }

// Charge implements Algorithm.
func (s *SlidingLog) Charge(now, cost int64) {
	keep := s.log[:0]
	for _, e := range s.log {
		if e.at > now-s.Period {
			keep = append(keep, e)
		}
	}
	s.log = append(keep, stamp{now, cost})
}

// Empty implements Algorithm; entries later than now (none, when time only
// moves forward) count as present.
func (s *SlidingLog) Empty(now int64) bool {
	for _, e := range s.log {
		if e.at > now-s.Period {
			return false
		}
	}
	return true
}

// Capacity implements Algorithm.
func (s *SlidingLog) Capacity() int64 { return s.Limit }

// SlidingWindow is the sliding-window-counter definition: with e the time
// elapsed in the current epoch-aligned window, cost is admitted iff
// prev*(Period-e)/Period + cur + cost <= Limit, evaluated in exact
// rationals.
type SlidingWindow struct {
	Limit, Period int64
	counts        map[int64]int64 // window index -> admitted cost
}

// NewSlidingWindow returns an empty sliding window counter of limit per
// period.
func NewSlidingWindow(limit, period int64) *SlidingWindow {
	return &SlidingWindow{Limit: limit, Period: period, counts: map[int64]int64{}}
}

// Estimate returns prev*(Period-e)/Period + cur at now.
func (s *SlidingWindow) Estimate(now int64) *big.Rat {
	k := now / s.Period
	e := now - k*s.Period
	est := big.NewRat(s.counts[k-1]*(s.Period-e), s.Period)
	return est.Add(est, big.NewRat(s.counts[k], 1))
}

// Admits implements Algorithm.
func (s *SlidingWindow) Admits(now, cost int64) bool {
	est := s.Estimate(now)
	est.Add(est, big.NewRat(cost, 1))
	return est.Cmp(big.NewRat(s.Limit, 1)) <= 0
}

// Charge implements Algorithm.
func (s *SlidingWindow) Charge(now, cost int64) {
	k := now / s.Period
	s.counts[k] += cost
	for w := range s.counts {
		if w < k-1 {
			delete(s.counts, w)
		}
	}
}

// Empty implements Algorithm.
func (s *SlidingWindow) Empty(now int64) bool { return s.Estimate(now).Sign() == 0 }

// Capacity implements Algorithm.
func (s *SlidingWindow) Capacity() int64 { return s.Limit }

// TokenBucket is the token-bucket definition: a bucket of Burst tokens,
// full at first, refilled continuously at Limit tokens per Period; cost is
// admitted iff the bucket holds at least cost tokens.
type TokenBucket struct {
	Limit, Period, Burst int64
	tokens               *big.Rat // at time last
	last                 int64
}

// NewTokenBucket returns a full bucket of burst tokens refilled at limit
// per period.
func NewTokenBucket(limit, period, burst int64) *TokenBucket {
	return &TokenBucket{Limit: limit, Period: period, Burst: burst, tokens: big.NewRat(burst, 1)}
}

// Tokens returns the tokens in the bucket at now (now >= the last charge).
func (b *TokenBucket) Tokens(now int64) *big.Rat {
	t := big.NewRat((now-b.last)*b.Limit, b.Period)
	t.Add(t, b.tokens)
	if full := big.NewRat(b.Burst, 1); t.Cmp(full) > 0 {
		return full
	}
	return t
}

// Admits implements Algorithm.
func (b *TokenBucket) Admits(now, cost int64) bool {
	return b.Tokens(now).Cmp(big.NewRat(cost, 1)) >= 0
}

// Charge implements Algorithm.
func (b *TokenBucket) Charge(now, cost int64) {
	t := b.Tokens(now)
	b.tokens, b.last = t.Sub(t, big.NewRat(cost, 1)), now
}

// Empty implements Algorithm: the bucket is full.
func (b *TokenBucket) Empty(now int64) bool {
	return b.Tokens(now).Cmp(big.NewRat(b.Burst, 1)) == 0
}

// Capacity implements Algorithm.
func (b *TokenBucket) Capacity() int64 { return b.Burst }

// GCRA is the generic cell rate algorithm in its virtual-scheduling form,
// with emission interval T = Period/Limit and tolerance tau = (Burst-1)*T:
// a request of cost c (c cells at once) conforms iff its last cell does,
// max(TAT, now) + (c-1)*T <= now + tau; TAT then moves to
// max(TAT, now) + c*T. TAT is an exact rational.
type GCRA struct {
	Limit, Period, Burst int64
	tat                  *big.Rat
}

// NewGCRA returns an empty GCRA state of limit per period with burst.
func NewGCRA(limit, period, burst int64) *GCRA {
	return &GCRA{Limit: limit, Period: period, Burst: burst, tat: new(big.Rat)}
}

func (g *GCRA) start(now int64) *big.Rat {
	n := big.NewRat(now, 1)
	if g.tat.Cmp(n) > 0 {
		return new(big.Rat).Set(g.tat)
	}
	return n
}

// Admits implements Algorithm.
func (g *GCRA) Admits(now, cost int64) bool {
	t := big.NewRat(g.Period, g.Limit)
	tau := new(big.Rat).Mul(big.NewRat(g.Burst-1, 1), t)
	last := g.start(now)
	last.Add(last, new(big.Rat).Mul(big.NewRat(cost-1, 1), t))
	limit := tau.Add(tau, big.NewRat(now, 1))
	return last.Cmp(limit) <= 0
}

// Charge implements Algorithm.
func (g *GCRA) Charge(now, cost int64) {
	s := g.start(now)
	g.tat = s.Add(s, big.NewRat(cost*g.Period, g.Limit))
}

// Empty implements Algorithm: TAT is not after now.
func (g *GCRA) Empty(now int64) bool { return g.tat.Cmp(big.NewRat(now, 1)) <= 0 }

// Capacity implements Algorithm.
func (g *GCRA) Capacity() int64 { return g.Burst }

// Concurrency is an in-flight limiter with leases: at most Limit holders
// whose lease has not expired (a lease taken at t for d is live while
// now < t+d). A live holder acquiring again renews its lease without taking
// a second slot.
type Concurrency struct {
	Limit  int64
	leases map[string]int64 // holder -> expiry
}

// NewConcurrency returns an empty limiter of limit holders.
func NewConcurrency(limit int64) *Concurrency {
	return &Concurrency{Limit: limit, leases: map[string]int64{}}
}

// Live returns the number of live leases at now.
func (c *Concurrency) Live(now int64) int64 {
	var n int64
	for _, exp := range c.leases {
		if exp > now {
			n++
		}
	}
	return n
}

// Holders returns the ids of the live leases at now, sorted.
func (c *Concurrency) Holders(now int64) []string {
	var ids []string
	for id, exp := range c.leases {
		if exp > now {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

func (c *Concurrency) resetAfter(now int64) int64 {
	return firstTrue(0, func(w int64) bool { return c.Live(now+w) == 0 })
}

// Acquire takes (or renews) a lease of length lease for id at now.
// Remaining is the free slots after the decision; RetryAfter the smallest
// wait after which a slot is free with no release; ResetAfter the time
// until every lease has expired.
func (c *Concurrency) Acquire(now, lease int64, id string) Decision {
	var d Decision
	if c.leases[id] > now || c.Live(now) < c.Limit {
		d.Allowed = true
		for h, exp := range c.leases {
			if exp <= now {
				delete(c.leases, h)
			}
		}
		c.leases[id] = now + lease
	} else {
		d.RetryAfter = firstTrue(1, func(w int64) bool { return c.Live(now+w) < c.Limit })
	}
	d.Remaining = max(c.Limit-c.Live(now), 0)
	d.ResetAfter = c.resetAfter(now)
	return d
}

// Release gives back id's lease at now. It reports whether id held a live
// lease, the live leases left and the time until all of them expire.
func (c *Concurrency) Release(now int64, id string) (released bool, holders, resetAfter int64) {
	exp, ok := c.leases[id]
	released = ok && exp > now
	delete(c.leases, id)
	return released, c.Live(now), c.resetAfter(now)
}
