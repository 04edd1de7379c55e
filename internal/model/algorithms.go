package model

import (
	"math/big"
	"sort"
)

// A limit's numbers can change between decisions while its state stays
// (a reloaded policy file or an override keeps a Limit's name, and so its
// Redis key): set a model's exported fields, or call Retune, and the next
// decision runs under the new numbers on the state the earlier ones left.
// The scripts can only see a change when it reaches them, and a state's TTL
// is set by its last write, so every model follows two rules:
//
//   - what a decision sees depends only on the state, the current numbers
//     and the time, never on when the numbers changed;
//   - until the next admission, the state lasts no longer than it would have
//     under the numbers it was written under (its key's TTL), and an
//     admission writes it under the current numbers.
//
// Each type's comment says what that means for its algorithm.

// FixedWindow is the fixed-window definition: epoch-aligned windows
// [k*Period, (k+1)*Period); cost is admitted iff count + cost <= Limit,
// where count is the cost admitted in the window holding now.
//
// When Limit changes, the count of the current window carries over and is
// compared with the new Limit. When Period changes, the count is placed at
// the time of the last admission: it counts while the new window holding
// now also holds that time, and at most until the window it was counted in
// would have ended under the old period; the next admission writes it, with
// its own cost, into the new window holding now.
type FixedWindow struct {
	Limit, Period int64
	at, n, wp     int64 // the last admission, the count of its window, the period it was counted under
}

// NewFixedWindow returns an empty fixed window of limit per period.
func NewFixedWindow(limit, period int64) *FixedWindow {
	return &FixedWindow{Limit: limit, Period: period}
}

// count is the cost counted in the window holding now.
func (f *FixedWindow) count(now int64) int64 {
	if f.n == 0 || now >= (f.at/f.wp+1)*f.wp || f.at/f.Period != now/f.Period {
		return 0
	}
	return f.n
}

// Admits implements Algorithm.
func (f *FixedWindow) Admits(now, cost int64) bool { return f.count(now)+cost <= f.Limit }

// Charge implements Algorithm.
func (f *FixedWindow) Charge(now, cost int64) {
	f.n, f.at, f.wp = f.count(now)+cost, now, f.Period
}

// Empty implements Algorithm.
func (f *FixedWindow) Empty(now int64) bool { return f.count(now) == 0 }

// Capacity implements Algorithm.
func (f *FixedWindow) Capacity() int64 { return f.Limit }

// SlidingLog is the sliding-log definition: cost is admitted iff the cost
// admitted in (now-Period, now] plus cost is at most Limit.
//
// When Limit changes, the logged cost is compared with the new Limit. When
// Period changes, the window (now-Period, now] takes the new length at
// once, over the entries the log still holds (an admission drops those at
// or before now-Period, with the Period of that admission); but the whole
// log is forgotten once its newest entry has left the window of the period
// it was admitted under, unless an admission under the new period came
// first.
type SlidingLog struct {
	Limit, Period int64
	log           []stamp // admitted cost by time, in time order
}

// stamp is one admission: its time, cost, and the period it was admitted
// under.
type stamp struct{ at, cost, period int64 }

// NewSlidingLog returns an empty sliding log of limit per period.
func NewSlidingLog(limit, period int64) *SlidingLog {
	return &SlidingLog{Limit: limit, Period: period}
}

// gone reports whether the log is forgotten at now: its newest entry has
// left the window of the period it was admitted under.
func (s *SlidingLog) gone(now int64) bool {
	if len(s.log) == 0 {
		return true
	}
	last := s.log[len(s.log)-1]
	return now >= last.at+last.period
}

// Count returns the cost admitted in (now-Period, now].
func (s *SlidingLog) Count(now int64) int64 {
	if s.gone(now) {
		return 0
	}
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
	if s.gone(now) {
		s.log = s.log[:0]
	}
	keep := s.log[:0]
	for _, e := range s.log {
		if e.at > now-s.Period {
			keep = append(keep, e)
		}
	}
	s.log = append(keep, stamp{now, cost, s.Period})
}

// Empty implements Algorithm; entries later than now (none, when time only
// moves forward) count as present.
func (s *SlidingLog) Empty(now int64) bool {
	if s.gone(now) {
		return true
	}
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
//
// When Limit changes, the estimate is compared with the new Limit. When
// Period changes, the two counts are added up and placed at the time of the
// last admission on the new windows: they count fully while the new window
// holding now holds that time, then as the previous window's count, and at
// most until the newer of them would have left the sliding window under the
// old period; the next admission writes them into the new windows.
type SlidingWindow struct {
	Limit, Period int64
	at, cur, prev int64 // the last admission, the count of its window and of the window before
	wp            int64 // the period they were counted under
}

// NewSlidingWindow returns an empty sliding window counter of limit per
// period.
func NewSlidingWindow(limit, period int64) *SlidingWindow {
	return &SlidingWindow{Limit: limit, Period: period}
}

// counts returns the current and previous window's counts at now, on the
// windows of Period.
func (s *SlidingWindow) counts(now int64) (cur, prev int64) {
	if s.wp == 0 {
		return 0, 0
	}
	w, k := s.at/s.Period, now/s.Period
	x := s.cur
	if s.wp != s.Period {
		if now >= (s.at/s.wp+2)*s.wp {
			return 0, 0
		}
		x = s.cur + s.prev
	}
	switch k {
	case w:
		if s.wp == s.Period {
			return s.cur, s.prev
		}
		return x, 0
	case w + 1:
		return 0, x
	}
	return 0, 0
}

// Estimate returns prev*(Period-e)/Period + cur at now.
func (s *SlidingWindow) Estimate(now int64) *big.Rat {
	cur, prev := s.counts(now)
	e := now - now/s.Period*s.Period
	est := big.NewRat(prev, 1)
	est.Mul(est, big.NewRat(s.Period-e, s.Period))
	return est.Add(est, big.NewRat(cur, 1))
}

// Admits implements Algorithm.
func (s *SlidingWindow) Admits(now, cost int64) bool {
	est := s.Estimate(now)
	est.Add(est, big.NewRat(cost, 1))
	return est.Cmp(big.NewRat(s.Limit, 1)) <= 0
}

// Charge implements Algorithm.
func (s *SlidingWindow) Charge(now, cost int64) {
	cur, prev := s.counts(now)
	s.at, s.cur, s.prev, s.wp = now, cur+cost, prev, s.Period
}

// Empty implements Algorithm.
func (s *SlidingWindow) Empty(now int64) bool { return s.Estimate(now).Sign() == 0 }

// Capacity implements Algorithm.
func (s *SlidingWindow) Capacity() int64 { return s.Limit }

// bucket is the state the token bucket and GCRA share: how far the bucket
// is from full, in tokens, and the rate it refills at. Both algorithms keep
// it in their own form (a level and its time; a theoretical arrival time)
// and decide from it alike.
//
// When Burst changes, the deficit carries over: the bucket holds
// Burst - deficit tokens (none while the deficit is above the new Burst),
// and is full when it would have been. When the rate (Limit per Period)
// changes, what is missing keeps refilling at the old rate until the next
// admission, which rounds it up to whole tokens and writes it under the new
// rate: a lower rate never leaves the bucket fuller than the old one would
// have, and a higher one refills it faster from that admission on.
type bucket struct {
	// deficit is the tokens missing at time last, refilled at wl/wp tokens
	// per µs (the rate in lowest terms); wl is 0 while nothing was taken.
	deficit *big.Rat
	last    int64
	wl, wp  int64
}

// missing returns the tokens missing at now (now >= last).
func (b *bucket) missing(now int64) *big.Rat {
	if b.wl == 0 {
		return new(big.Rat)
	}
	d := big.NewRat(now-b.last, 1)
	d.Mul(d, big.NewRat(b.wl, b.wp))
	d.Sub(b.deficit, d)
	if d.Sign() < 0 {
		return new(big.Rat)
	}
	return d
}

// admits reports whether a bucket of burst tokens holds cost at now.
func (b *bucket) admits(now, cost, burst int64) bool {
	d := b.missing(now)
	return d.Add(d, big.NewRat(cost, 1)).Cmp(big.NewRat(burst, 1)) <= 0
}

// charge takes cost tokens at now and writes the state under limit per
// period.
func (b *bucket) charge(now, cost, limit, period int64) {
	d := b.missing(now)
	l, p := lowest(limit, period)
	if d.Sign() > 0 && (l != b.wl || p != b.wp) {
		d = ceilRat(d)
	}
	b.deficit, b.last, b.wl, b.wp = d.Add(d, big.NewRat(cost, 1)), now, l, p
}

// TokenBucket is the token-bucket definition: a bucket of Burst tokens,
// full at first, refilled continuously at Limit tokens per Period; cost is
// admitted iff the bucket holds at least cost tokens. The bucket is kept as
// the tokens missing at the last admission (see bucket for changed
// numbers).
type TokenBucket struct {
	Limit, Period, Burst int64
	b                    bucket
}

// NewTokenBucket returns a full bucket of burst tokens refilled at limit
// per period.
func NewTokenBucket(limit, period, burst int64) *TokenBucket {
	return &TokenBucket{Limit: limit, Period: period, Burst: burst}
}

// Tokens returns the tokens in the bucket at now (now >= the last charge);
// negative while more than Burst tokens are missing.
func (b *TokenBucket) Tokens(now int64) *big.Rat {
	d := b.b.missing(now)
	return d.Sub(big.NewRat(b.Burst, 1), d)
}

// Admits implements Algorithm.
func (b *TokenBucket) Admits(now, cost int64) bool { return b.b.admits(now, cost, b.Burst) }

// Charge implements Algorithm.
func (b *TokenBucket) Charge(now, cost int64) { b.b.charge(now, cost, b.Limit, b.Period) }

// Empty implements Algorithm: the bucket is full.
func (b *TokenBucket) Empty(now int64) bool { return b.b.missing(now).Sign() == 0 }

// Capacity implements Algorithm.
func (b *TokenBucket) Capacity() int64 { return b.Burst }

// GCRA is the generic cell rate algorithm in its virtual-scheduling form,
// with emission interval T = Period/Limit and tolerance tau = (Burst-1)*T:
// a request of cost c (c cells at once) conforms iff its last cell does,
// max(TAT, now) + (c-1)*T <= now + tau; TAT then moves to
// max(TAT, now) + c*T. TAT is an exact rational.
//
// That is the token bucket with (TAT - now)/T tokens missing, and a change
// of numbers means what it means for the bucket (see bucket): the TAT stays
// where it was, the time it stands ahead of now counts in intervals T of
// the rate it was written under, and the next admission rounds those up to
// whole intervals and moves TAT on under the new rate.
type GCRA struct {
	Limit, Period, Burst int64
	tat                  *big.Rat
	wl, wp               int64 // the rate TAT was written under, in lowest terms
}

// NewGCRA returns an empty GCRA state of limit per period with burst.
func NewGCRA(limit, period, burst int64) *GCRA {
	return &GCRA{Limit: limit, Period: period, Burst: burst, tat: new(big.Rat)}
}

// missing returns (TAT - now)/T of the written rate, 0 when TAT <= now.
func (g *GCRA) missing(now int64) *big.Rat {
	d := new(big.Rat).Sub(g.tat, big.NewRat(now, 1))
	if g.wl == 0 || d.Sign() <= 0 {
		return new(big.Rat)
	}
	return d.Mul(d, big.NewRat(g.wl, g.wp))
}

// Admits implements Algorithm: max(TAT, now) + (c-1)*T <= now + tau, that
// is (TAT - now)/T + c <= Burst.
func (g *GCRA) Admits(now, cost int64) bool {
	d := g.missing(now)
	return d.Add(d, big.NewRat(cost, 1)).Cmp(big.NewRat(g.Burst, 1)) <= 0
}

// Charge implements Algorithm: TAT moves to max(TAT, now) + c*T, with the
// time TAT stood ahead rounded up to whole intervals when the rate changed.
func (g *GCRA) Charge(now, cost int64) {
	d := g.missing(now)
	l, p := lowest(g.Limit, g.Period)
	if d.Sign() > 0 && (l != g.wl || p != g.wp) {
		d = ceilRat(d)
	}
	d.Add(d, big.NewRat(cost, 1))
	g.tat = d.Mul(d, big.NewRat(p, l)).Add(d, big.NewRat(now, 1))
	g.wl, g.wp = l, p
}

// Empty implements Algorithm: TAT is not after now.
func (g *GCRA) Empty(now int64) bool { return g.tat.Cmp(big.NewRat(now, 1)) <= 0 }

// Capacity implements Algorithm.
func (g *GCRA) Capacity() int64 { return g.Burst }

// Concurrency is an in-flight limiter with leases: at most Limit holders
// whose lease has not expired (a lease taken at t for d is live while
// now < t+d). A live holder acquiring again renews its lease without taking
// a second slot.
//
// Limit may change between calls: leases already held stay live until they
// expire or are released, and a lowered Limit admits no new holder until
// fewer than Limit leases are live. The lease length is per call: a changed
// lease applies to the leases taken or renewed after the change.
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

// Retune sets the numbers of a rate model (FixedWindow, SlidingLog,
// SlidingWindow, TokenBucket, GCRA; burst is ignored by the first three)
// or the Limit of a Concurrency model (period and burst ignored): the next
// decision runs under them on the state the earlier ones left.
func Retune(a any, limit, period, burst int64) {
	switch m := a.(type) {
	case *FixedWindow:
		m.Limit, m.Period = limit, period
	case *SlidingLog:
		m.Limit, m.Period = limit, period
	case *SlidingWindow:
		m.Limit, m.Period = limit, period
	case *TokenBucket:
		m.Limit, m.Period, m.Burst = limit, period, burst
	case *GCRA:
		m.Limit, m.Period, m.Burst = limit, period, burst
	case *Concurrency:
		m.Limit = limit
	default:
		panic("model: Retune of an unknown model")
	}
}

// lowest returns limit/period in lowest terms.
func lowest(limit, period int64) (l, p int64) {
	a, b := limit, period
	for b != 0 {
		a, b = b, a%b
	}
	return limit / a, period / a
}

// ceilRat returns the smallest integer not below x, as a rational.
func ceilRat(x *big.Rat) *big.Rat {
	q, m := new(big.Int).DivMod(x.Num(), x.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return new(big.Rat).SetInt(q)
}
