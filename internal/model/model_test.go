package model

import (
	"math/rand"
	"testing"
)

// TestGCRAEqualsTokenBucket checks the claim the scripts rely on: GCRA with
// emission interval period/limit and tolerance (burst-1)*T decides exactly
// as a token bucket of burst tokens refilled at limit per period, for
// random rates (fractional intervals included), costs and gaps.
func TestGCRAEqualsTokenBucket(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	steps := 0
	for ep := 0; ep < 200; ep++ {
		l := int64(1 + r.Intn(10))
		p := []int64{1, 7, 1000, 999_983, 1_000_000}[r.Intn(5)]
		b := int64(1 + r.Intn(12))
		g, tb := NewGCRA(l, p, b), NewTokenBucket(l, p, b)
		now := int64(r.Intn(1_000_000))
		for i := 0; i < 100; i++ {
			steps++
			now += r.Int63n(2*p/l + 2)
			cost := r.Int63n(b + 2)
			dg, dt := Decide(g, now, cost), Decide(tb, now, cost)
			if dg != dt {
				t.Fatalf("limit %d period %d burst %d, step %d at %d cost %d: GCRA %v, token bucket %v", l, p, b, i, now, cost, dg, dt)
			}
		}
	}
	t.Logf("%d decisions agree", steps)
}

func TestFirstTrue(t *testing.T) {
	for _, edge := range []int64{0, 1, 2, 3, 17, 1000, 1 << 40} {
		got := firstTrue(0, func(w int64) bool { return w >= edge })
		if got != edge {
			t.Errorf("edge %d: got %d", edge, got)
		}
	}
	if got := firstTrue(5, func(w int64) bool { return w >= 3 }); got != 5 {
		t.Errorf("a predicate true at lo: got %d, want 5", got)
	}
}

// TestDecisions checks each model on a few hand-computed decisions:
// {allowed, remaining, retry_after, reset_after}.
func TestDecisions(t *testing.T) {
	type step struct {
		at, cost int64
		want     Decision
	}
	d := func(allowed bool, remaining, retry, reset int64) Decision {
		return Decision{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
	}
	cases := []struct {
		name  string
		alg   Algorithm
		steps []step
	}{
		{"fixed window 3/s", NewFixedWindow(3, 1_000_000), []step{
			{0, 2, d(true, 1, 0, 1_000_000)},
			{400_000, 2, d(false, 1, 600_000, 600_000)},
			{400_000, 4, d(false, 1, -1, 600_000)},
			{1_000_000, 3, d(true, 0, 0, 1_000_000)},
		}},
		{"sliding log 2/s", NewSlidingLog(2, 1_000_000), []step{
			{0, 1, d(true, 1, 0, 1_000_000)},
			{300_000, 1, d(true, 0, 0, 1_000_000)},
			{500_000, 1, d(false, 0, 500_000, 800_000)},
			{1_000_000, 0, d(true, 1, 0, 300_000)},
		}},
		{"sliding window 4/s", NewSlidingWindow(4, 1_000_000), []step{
			{0, 4, d(true, 0, 0, 2_000_000)},
			{1_250_000, 1, d(true, 0, 0, 1_750_000)},
			{1_500_000, 2, d(false, 1, 250_000, 1_500_000)},
		}},
		{"token bucket 3/s burst 5", NewTokenBucket(3, 1_000_000, 5), []step{
			{0, 5, d(true, 0, 0, 1_666_667)},
			{100_000, 1, d(false, 0, 233_334, 1_566_667)},
			{333_334, 1, d(true, 0, 0, 1_666_666)},
		}},
		{"gcra 3/s burst 5", NewGCRA(3, 1_000_000, 5), []step{
			{0, 5, d(true, 0, 0, 1_666_667)},
			{100_000, 1, d(false, 0, 233_334, 1_566_667)},
			{333_334, 1, d(true, 0, 0, 1_666_666)},
		}},
	}
	for _, c := range cases {
		for i, s := range c.steps {
			if got := Decide(c.alg, s.at, s.cost); got != s.want {
				t.Errorf("%s step %d: %v, want %v", c.name, i+1, got, s.want)
			}
		}
	}
}

// TestDecideAll checks all-or-nothing: a denial by one limit charges none.
func TestDecideAll(t *testing.T) {
	fast, slow := NewFixedWindow(2, 1_000_000), NewFixedWindow(3, 10_000_000)
	all := []Algorithm{fast, slow}
	want := []Decision{
		{Allowed: true, Remaining: 1, ResetAfter: 10_000_000, Limiting: 1},
		{Allowed: true, Remaining: 0, ResetAfter: 10_000_000, Limiting: 1},
		{Allowed: false, Remaining: 0, RetryAfter: 1_000_000, ResetAfter: 10_000_000, Limiting: 1},
	}
	for i, w := range want {
		if got := DecideAll(all, 0, 1); got != w {
			t.Errorf("call %d: %v, want %v", i+1, got, w)
		}
	}
	// At 1 s the fast window is empty, the slow one holds 2 of 3.
	if got := DecideAll(all, 1_000_000, 2); got.Allowed || got.Limiting != 2 || got.RetryAfter != 9_000_000 {
		t.Errorf("cost 2 at 1 s: %v, want denied by limit 2 for 9 s", got)
	}
	if fast.count(1_000_000) != 0 {
		t.Error("a denied call charged the limit that admitted it")
	}
	if got := DecideAll(all, 1_000_000, 4); got.RetryAfter != -1 || got.Limiting != 1 {
		t.Errorf("cost 4: %v, want -1 from limit 1", got)
	}
}

func TestConcurrency(t *testing.T) {
	c := NewConcurrency(2)
	if d := c.Acquire(0, 1000, "a"); !d.Allowed || d.Remaining != 1 || d.ResetAfter != 1000 {
		t.Fatalf("first acquire: %v", d)
	}
	c.Acquire(100, 1000, "b")
	if d := c.Acquire(200, 1000, "c"); d.Allowed || d.RetryAfter != 800 || d.ResetAfter != 900 {
		t.Fatalf("third acquire: %v, want denied for 800 µs", d)
	}
	if d := c.Acquire(300, 1000, "a"); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("renewal: %v", d)
	}
	if released, holders, reset := c.Release(400, "b"); !released || holders != 1 || reset != 900 {
		t.Fatalf("release: %v %d %d", released, holders, reset)
	}
	if released, _, _ := c.Release(400, "b"); released {
		t.Fatal("second release reported released")
	}
}
