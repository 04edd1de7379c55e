package model

import (
	"fmt"
	"math/rand"
	"testing"
)

// numbers are a limit's numbers: limit per period, burst (buckets only).
type numbers struct{ limit, period, burst int64 }

// changeStep is one decision, under new numbers when to is set.
type changeStep struct {
	at, cost int64
	to       *numbers
	want     Decision
}

func to(limit, period, burst int64) *numbers { return &numbers{limit, period, burst} }

func dec(allowed bool, remaining, retry, reset int64) Decision {
	return Decision{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

const ms, sec = int64(1000), int64(1_000_000)

// bucketChanges is the same sequence as scripts' bucketChangeSteps: a
// token bucket and GCRA of 3 per s and a burst of 5 give these replies.
var bucketChanges = []changeStep{
	{0, 2, nil, dec(true, 3, 0, 666_667)},
	{0, 0, to(3, sec, 2), dec(true, 0, 0, 666_667)},             // burst 2: the 2 missing leave none
	{0, 1, to(3, sec, 2), dec(false, 0, 333_334, 666_667)},      // until one refills at 3 per s
	{0, 1, to(1, sec, 5), dec(true, 2, 0, 3*sec)},               // 1 per s: 2 + 1 missing, refilled at 1 per s
	{500 * ms, 0, to(1, sec, 10), dec(true, 7, 0, 2500*ms)},     // burst 10: 10 - 2.5 at once
	{500 * ms, 1, to(10, sec, 5), dec(true, 1, 0, 400*ms)},      // 10 per s: ceil(2.5) + 1 missing, refilled at 10 per s
	{500 * ms, 5, to(1, sec, 5), dec(false, 1, 400*ms, 400*ms)}, // 1 per s: what is missing still refills at 10 per s
}

// TestChangedNumbers runs each model through a limit raised and lowered
// mid-period, one parameter at a time: the replies worked out by hand in
// docs/algorithms.md ("When a limit changes").
func TestChangedNumbers(t *testing.T) {
	cases := []struct {
		name  string
		alg   Algorithm
		steps []changeStep
	}{
		{"fixed window 4/s", NewFixedWindow(4, sec), []changeStep{
			{0, 3, nil, dec(true, 1, 0, sec)},
			{200 * ms, 2, to(6, sec, 0), dec(true, 1, 0, 800*ms)},          // quota 6: the 3 admitted still count
			{300 * ms, 0, to(4, sec, 0), dec(true, 0, 0, 700*ms)},          // quota 4: 5 counted, none left
			{300 * ms, 1, to(4, sec, 0), dec(false, 0, 700*ms, 700*ms)},    // until the window ends
			{400 * ms, 4, to(8, 2*sec, 0), dec(false, 3, 600*ms, 600*ms)},  // 8 per 2 s: the 5 count until 1 s, when their window would have ended
			{400 * ms, 3, to(8, 2*sec, 0), dec(true, 0, 0, 1600*ms)},       // an admission writes them into [0, 2 s)
			{600 * ms, 0, to(8, 500*ms, 0), dec(true, 8, 0, 0)},            // 8 per 500 ms: the last admission (400 ms) is in an earlier window
			{600 * ms, 8, to(8, 500*ms, 0), dec(true, 0, 0, 400*ms)},       // ...
			{700 * ms, 1, to(8, 500*ms, 0), dec(false, 0, 300*ms, 300*ms)}, // ...
		}},
		{"sliding window 4/s", NewSlidingWindow(4, sec), []changeStep{
			{0, 3, nil, dec(true, 1, 0, 2*sec)},
			{1500 * ms, 1, to(2, sec, 0), dec(false, 0, 166_667, 500*ms)},   // limit 2: 3 weighted by 1/2 and 1 are over 2
			{1500 * ms, 2, to(4, 2*sec, 0), dec(false, 1, 500*ms, 500*ms)},  // 4 per 2 s: the 3 stand at 0 in [0, 2 s), until 2 s at most
			{1500 * ms, 1, to(4, 2*sec, 0), dec(true, 0, 0, 2500*ms)},       // an admission writes 3 + 1 into [0, 2 s)
			{1600 * ms, 1, to(4, 500*ms, 0), dec(false, 0, 525*ms, 900*ms)}, // 4 per 500 ms: the 4 stand at 1.5 s, in [1.5 s, 2 s)
		}},
		{"sliding log 3/s", NewSlidingLog(3, sec), []changeStep{
			{0, 1, nil, dec(true, 2, 0, sec)},
			{100 * ms, 1, nil, dec(true, 1, 0, sec)},
			{200 * ms, 1, nil, dec(true, 0, 0, sec)},
			{300 * ms, 0, to(2, sec, 0), dec(true, 0, 0, 900*ms)},          // limit 2: 3 logged
			{300 * ms, 1, to(2, sec, 0), dec(false, 0, 800*ms, 900*ms)},    // until those at 0 and 100 ms have left
			{600 * ms, 0, to(2, 500*ms, 0), dec(true, 1, 0, 100*ms)},       // 2 per 500 ms: only the one at 200 ms is in (100 ms, 600 ms]
			{1100 * ms, 2, to(4, 2*sec, 0), dec(false, 1, 100*ms, 100*ms)}, // 4 per 2 s: all 3 count, until the log's TTL (200 ms + 1 s)
			{1100 * ms, 1, to(4, 2*sec, 0), dec(true, 0, 0, 2*sec)},        // an admission keeps them for the new period
		}},
		{"token bucket 3/s burst 5", NewTokenBucket(3, sec, 5), bucketChanges},
		{"gcra 3/s burst 5", NewGCRA(3, sec, 5), bucketChanges},
	}
	for _, c := range cases {
		for i, s := range c.steps {
			if s.to != nil {
				Retune(c.alg, s.to.limit, s.to.period, s.to.burst)
			}
			if got := Decide(c.alg, s.at, s.cost); got != s.want {
				t.Errorf("%s step %d (at %d cost %d): %v, want %v", c.name, i+1, s.at, s.cost, got, s.want)
			}
		}
	}
}

// TestConcurrencyChanged lowers and raises the slots while leases are held.
func TestConcurrencyChanged(t *testing.T) {
	c := NewConcurrency(2)
	c.Acquire(0, sec, "a")
	c.Acquire(100*ms, sec, "b")
	Retune(c, 1, 0, 0)
	if d := c.Acquire(200*ms, sec, "c"); d.Allowed || d.Remaining != 0 || d.RetryAfter != 900*ms || d.ResetAfter != 900*ms {
		t.Fatalf("1 slot, 2 held: %v, want denied until both expire (900 ms)", d)
	}
	if d := c.Acquire(300*ms, 2*sec, "a"); !d.Allowed || d.Remaining != 0 || d.ResetAfter != 2*sec {
		t.Fatalf("a holder renews under a lowered limit: %v", d)
	}
	Retune(c, 3, 0, 0)
	if d := c.Acquire(300*ms, sec, "c"); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("3 slots, 2 held: %v, want allowed with none left", d)
	}
}

// randomNumbers picks numbers for a limit: rates whose intervals are whole
// and fractional, over a few periods.
func randomNumbers(r *rand.Rand) numbers {
	return numbers{
		limit:  int64(1 + r.Intn(12)),
		period: []int64{7, 1000, 999_983, 1_000_000, 2_000_000}[r.Intn(5)],
		burst:  int64(1 + r.Intn(12)),
	}
}

// TestGCRAEqualsTokenBucketAcrossChanges: with the numbers changed at
// random between decisions, GCRA and the token bucket still decide alike.
func TestGCRAEqualsTokenBucketAcrossChanges(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for ep := 0; ep < 120; ep++ {
		n := randomNumbers(r)
		g, tb := NewGCRA(n.limit, n.period, n.burst), NewTokenBucket(n.limit, n.period, n.burst)
		now := int64(r.Intn(1_000_000))
		for i := 0; i < 100; i++ {
			if r.Intn(4) == 0 {
				n = randomNumbers(r)
				Retune(g, n.limit, n.period, n.burst)
				Retune(tb, n.limit, n.period, n.burst)
			}
			now += r.Int63n(2*n.period/n.limit + 2)
			cost := r.Int63n(n.burst + 2)
			if dg, dt := Decide(g, now, cost), Decide(tb, now, cost); dg != dt {
				t.Fatalf("episode %d step %d, %v at %d cost %d: GCRA %v, token bucket %v", ep, i, n, now, cost, dg, dt)
			}
		}
	}
}

// replay builds a model of kind from scratch and charges it as a decision
// sequence under n would.
type history struct {
	kind string
	n    numbers
	ops  [][2]int64 // (now, cost) decided, in order
}

func (h history) build() Algorithm {
	var a Algorithm
	switch h.kind {
	case "fixed_window":
		a = NewFixedWindow(h.n.limit, h.n.period)
	case "sliding_window":
		a = NewSlidingWindow(h.n.limit, h.n.period)
	case "sliding_log":
		a = NewSlidingLog(h.n.limit, h.n.period)
	case "token_bucket":
		a = NewTokenBucket(h.n.limit, h.n.period, h.n.burst)
	default:
		a = NewGCRA(h.n.limit, h.n.period, h.n.burst)
	}
	for _, op := range h.ops {
		Decide(a, op[0], op[1])
	}
	return a
}

// TestChangeNeverOutlivesState checks the rule the scripts' TTLs rest on:
// until the next admission, a state under new numbers is empty (a bucket:
// full) no later than under the numbers it was written under, whatever
// the change. And lowering the limit (or a bucket's rate or burst) never
// admits a cost the old numbers deny.
func TestChangeNeverOutlivesState(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	kinds := []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "gcra"}
	checked := 0
	for ep := 0; ep < 400; ep++ {
		h := history{kind: kinds[ep%len(kinds)], n: randomNumbers(r)}
		now := int64(1_000_000_000) + int64(r.Intn(1_000_000))
		for i := 0; i < 1+r.Intn(20); i++ {
			now += r.Int63n(h.n.period/2 + 2)
			h.ops = append(h.ops, [2]int64{now, int64(r.Intn(3))})
		}
		old := h.build()
		m := randomNumbers(r)
		changed := h.build()
		Retune(changed, m.limit, m.period, m.burst)
		for probe := 0; probe < 5; probe++ {
			at := now + r.Int63n(2*h.n.period+2)
			oldReset, newReset := ResetAfter(old, at), ResetAfter(changed, at)
			if newReset > oldReset {
				t.Fatalf("%s %v -> %v at %d: empty after %d µs, later than under the old numbers (%d µs)", h.kind, h.n, m, at, newReset, oldReset)
			}
			checked++
		}
		lower := h.build()
		Retune(lower, max(h.n.limit-1-int64(r.Intn(3)), 1), h.n.period, max(h.n.burst-int64(r.Intn(3)), 1))
		for probe := 0; probe < 5; probe++ {
			at, cost := now+r.Int63n(2*h.n.period+2), int64(r.Intn(4))
			if lower.Admits(at, cost) && !old.Admits(at, cost) {
				t.Fatalf("%s %v lowered: admits cost %d at %d, which the old numbers deny", h.kind, h.n, cost, at)
			}
		}
	}
	t.Logf("%d resets checked", checked)
}

// TestSameRateOtherTerms: a rate written in other terms (20 per 2 s for 10
// per s) is the same rate: nothing is rounded, and the decisions are those
// of numbers never changed.
func TestSameRateOtherTerms(t *testing.T) {
	for _, kind := range []string{"token_bucket", "gcra"} {
		a, b := history{kind: kind, n: numbers{3, 1_000_000, 4}}.build(), history{kind: kind, n: numbers{3, 1_000_000, 4}}.build()
		r := rand.New(rand.NewSource(4))
		now := int64(0)
		for i := 0; i < 500; i++ {
			if i%2 == 1 {
				Retune(b, 6, 2_000_000, 4)
			} else {
				Retune(b, 9, 3_000_000, 4)
			}
			now += r.Int63n(700_000)
			cost := r.Int63n(5)
			if da, db := Decide(a, now, cost), Decide(b, now, cost); da != db {
				t.Fatalf("%s step %d: %v under 3 per s, %v under the same rate in other terms", kind, i, da, db)
			}
		}
	}
}

func (n numbers) String() string { return fmt.Sprintf("%d/%dµs burst %d", n.limit, n.period, n.burst) }
