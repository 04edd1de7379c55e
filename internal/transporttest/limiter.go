package transporttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/redisserver"
)

// Limiter checks a Limiter over the transport: random batches against the
// plain-Go models, concurrent callers, leases, refunds on the server's
// clock, reservations, Reset, a key of the wrong type and scripts the
// server has forgotten.
func Limiter(t *testing.T, e *Env) {
	t.Run("models", func(t *testing.T) { models(t, e) })
	t.Run("concurrent", func(t *testing.T) { concurrent(t, e) })
	t.Run("refund", func(t *testing.T) { refund(t, e) })
	t.Run("reserve", func(t *testing.T) { reserve(t, e) })
	t.Run("reset_wrongtype_noscript", func(t *testing.T) { resetWrongTypeNoScript(t, e) })
}

// modelOf is the plain-Go model of lim, fresh.
func modelOf(lim sluice.Limit) model.Algorithm {
	p := lim.Period.Microseconds()
	switch lim.Algorithm {
	case sluice.AlgFixedWindow:
		return model.NewFixedWindow(lim.Rate, p)
	case sluice.AlgSlidingLog:
		return model.NewSlidingLog(lim.Rate, p)
	case sluice.AlgSlidingWindow:
		return model.NewSlidingWindow(lim.Rate, p)
	case sluice.AlgTokenBucket:
		return model.NewTokenBucket(lim.Rate, p, lim.Burst)
	default:
		return model.NewGCRA(lim.Rate, p, lim.Burst)
	}
}

// tracked is one state's charges, replayed into a fresh model for each
// decision: a denied batch must leave it as it was.
type tracked struct {
	lim     sluice.Limit
	charges [][2]int64
}

func (tr *tracked) model() model.Algorithm {
	m := modelOf(tr.lim)
	for _, c := range tr.charges {
		m.Charge(c[0], c[1])
	}
	return m
}

// models drives random batches (Decide) over three identities, each with
// limits of every rate algorithm, with time moving on, and checks every
// check's result against its model: a batch is admitted exactly when every
// check's model admits, and a denied one charges nothing.
//
// The scripts run on the virtual clock, but the server expires their keys
// by its own: a key whose useful life is shorter than the real time to the
// next step could vanish while the virtual clock says it still counts. So
// the periods are hours, time jumps by minutes, and no step is taken
// within a minute of a state's end or a fixed window's boundary: every
// key's TTL outlasts the test.
func models(t *testing.T, e *Env) {
	ctx := context.Background()
	clk := newClock()
	// Without the denial cache: a batch it denies leaves the other
	// checks unasked, and this test compares every check.
	l := e.limiter(t, sluice.WithClock(clk.now), sluice.WithDenialCache(0))
	limits := []sluice.Limit{
		must(sluice.GCRA(5, time.Hour, 3)).Named("g1"),
		must(sluice.GCRA(20, 4*time.Hour, 6)).Named("g2"),
		must(sluice.SlidingWindow(6, time.Hour)).Named("w1"),
		must(sluice.SlidingWindow(15, 4*time.Hour)).Named("w2"),
		must(sluice.FixedWindow(5, time.Hour)).Named("f"),
		must(sluice.SlidingLog(5, time.Hour)).Named("s"),
		must(sluice.TokenBucket(4, time.Hour, 5)).Named("t"),
	}
	const margin = int64(time.Minute / time.Microsecond)
	// steer moves the clock past every moment within a minute of a
	// state's end or of a fixed window's boundary.
	steer := func(states map[string]*tracked) {
		for moved := true; moved; {
			moved = false
			now := clk.now().UnixMicro()
			for _, st := range states {
				if life := model.ResetAfter(st.model(), now); life > 0 && life <= margin {
					clk.add(time.Duration(life+1) * time.Microsecond)
					moved = true
					break
				}
			}
			for _, lim := range limits {
				p := lim.Period.Microseconds()
				if lim.Algorithm == sluice.AlgFixedWindow && p-now%p <= margin {
					clk.add(time.Duration(p-now%p) * time.Microsecond)
					moved = true
					break
				}
			}
		}
	}
	ids := []string{"ip:10.0.0.1", "key:abc", "route:/search"}
	states := map[string]*tracked{}
	state := func(id string, lim sluice.Limit) *tracked {
		k := id + "/" + lim.Name
		if states[k] == nil {
			states[k] = &tracked{lim: lim}
		}
		return states[k]
	}
	rng := rand.New(rand.NewPCG(7, 11))
	admitted, denied := 0, 0
	for step := range 160 {
		// Time moves on at least 1µs per batch: a refunded GCRA charge
		// keeps up to 1µs (the bound docs/limiter.md states), gone 1µs on.
		clk.add(time.Microsecond)
		if rng.IntN(3) == 0 {
			clk.add(time.Duration(rng.Int64N(int64(40 * time.Minute))))
		}
		steer(states)
		now := clk.now().UnixMicro()
		var checks []sluice.Check
		for _, id := range ids {
			if rng.IntN(3) == 0 {
				continue
			}
			set := slices.Clone(limits)
			rng.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
			for _, lim := range set[:1+rng.IntN(3)] {
				checks = append(checks, sluice.Check{Identity: id, Limit: lim, Cost: 1 + rng.Int64N(2)})
			}
		}
		if len(checks) == 0 {
			continue
		}
		d, err := l.Decide(ctx, checks...)
		if err != nil {
			t.Fatalf("step %d: Decide: %v", step, err)
		}
		want := make([]model.Decision, len(checks))
		all := true
		for i, c := range checks {
			want[i] = model.Decide(state(c.Identity, c.Limit).model(), now, c.Cost)
			all = all && want[i].Allowed
		}
		if d.Allowed != all {
			t.Fatalf("step %d: batch allowed %v, the models say %v\nchecks %+v\ngot %+v", step, d.Allowed, all, checks, d.Results)
		}
		for i, c := range checks {
			got, w := d.Results[i], want[i]
			if got.Degraded || got.Allowed != w.Allowed {
				t.Fatalf("step %d check %d (%s %s cost %d): %+v, model %v", step, i, c.Identity, c.Limit.Name, c.Cost, got, w)
			}
			if all && got.Remaining != w.Remaining {
				t.Fatalf("step %d check %d (%s %s): remaining %d, model %d\nchecks %+v\ngot %+v", step, i, c.Identity, c.Limit.Name, got.Remaining, w.Remaining, checks, d.Results)
			}
		}
		if all {
			admitted++
			for _, c := range checks {
				st := state(c.Identity, c.Limit)
				st.charges = append(st.charges, [2]int64{now, c.Cost})
			}
		} else {
			denied++
		}
	}
	if admitted < 10 || denied < 10 {
		t.Fatalf("%d batches admitted, %d denied: the sequence tests too little", admitted, denied)
	}
}

// concurrent: callers at once on one identity are admitted exactly as far
// as the quota goes, and concurrency slots exactly as far as there are.
func concurrent(t *testing.T, e *Env) {
	ctx := context.Background()
	clk := newClock()
	l := e.limiter(t, sluice.WithClock(clk.now))
	for _, lim := range []sluice.Limit{must(sluice.FixedWindow(100, time.Hour)), must(sluice.GCRA(100, time.Hour, 60))} {
		var ok, errs atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for range 25 {
					r, err := l.Allow(ctx, "many", lim)
					switch {
					case err != nil || r.Degraded:
						errs.Add(1)
					case r.Allowed:
						ok.Add(1)
					}
				}
			})
		}
		wg.Wait()
		want := lim.Rate
		if lim.Algorithm == sluice.AlgGCRA {
			want = lim.Burst
		}
		if errs.Load() != 0 || ok.Load() != want {
			t.Fatalf("%s: %d of 400 admitted (%d errors or degraded), want %d", lim.Name, ok.Load(), errs.Load(), want)
		}
	}

	slots := must(sluice.Concurrency(3, time.Minute))
	for round := range 2 {
		var mu sync.Mutex
		var leases []sluice.Lease
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(func() {
				lease, r, err := l.Acquire(ctx, "worker", slots)
				if err != nil || r.Degraded {
					t.Errorf("Acquire: %+v, %v", r, err)
					return
				}
				if r.Allowed {
					mu.Lock()
					leases = append(leases, lease)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(leases) != 3 {
			t.Fatalf("round %d: %d of 12 acquired a slot, want 3", round, len(leases))
		}
		for _, lease := range leases {
			if err := l.Release(ctx, lease); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
	}
}

// refund: on the server's clock (no WithClock: the flight asks TIME), a
// batch over identities on different slots that one check denies gives
// the others' charges back. A GCRA refund may keep the time from the
// TIME to the charge (µs, up to a few hundred on a cluster): a Peek right
// after may show one unit less than a fresh key's, never more than that
// however many batches are denied.
func refund(t *testing.T, e *Env) {
	ctx := context.Background()
	l := e.limiter(t, sluice.WithDenialCache(0)) // the cache would deny the batches without asking Redis
	roomy := must(sluice.GCRA(5, time.Hour, 5)).Named("roomy")
	tight := must(sluice.GCRA(1, time.Hour, 1)).Named("tight")
	if r, err := l.Allow(ctx, "b", tight); err != nil || !r.Allowed {
		t.Fatalf("first charge: %+v, %v", r, err)
	}
	for i := range 8 {
		d, err := l.Decide(ctx, sluice.Check{Identity: "a", Limit: roomy, Cost: 1}, sluice.Check{Identity: "c", Limit: roomy, Cost: 2}, sluice.Check{Identity: "b", Limit: tight, Cost: 1})
		// Without the refunds c (2 of 5 a batch) would be denied from
		// the third batch on.
		if err != nil || d.Allowed || !d.Results[0].Allowed || !d.Results[1].Allowed || d.Results[2].Allowed {
			t.Fatalf("batch %d: %+v, %v; want denied by its last check alone", i, d, err)
		}
		for _, id := range []string{"a", "c"} {
			// Peek reports the Remaining of a charge of 1: 4 on a fresh key.
			if r, err := l.Peek(ctx, id, roomy); err != nil || r.Degraded || r.Remaining < 3 {
				t.Fatalf("batch %d: %s peeks %d left (%+v, %v), want 3 or 4: the charge was not given back", i, id, r.Remaining, r, err)
			}
		}
	}
}

// reserve: reservations book in turn, and a cancelled one gives its turn
// back.
func reserve(t *testing.T, e *Env) {
	ctx := context.Background()
	clk := newClock()
	l := e.limiter(t, sluice.WithClock(clk.now))
	// (An hour's period: the keys' TTLs, on the server's own clock,
	// outlast the test.)
	lim := must(sluice.GCRA(10, time.Hour, 1))
	turn := 6 * time.Minute
	first, err := l.Reserve(ctx, "r", lim, 10*time.Minute)
	if err != nil || !first.OK || first.Degraded || first.Delay() != 0 {
		t.Fatalf("first reservation: %+v, %v", first, err)
	}
	second, err := l.Reserve(ctx, "r", lim, 10*time.Minute)
	if err != nil || !second.OK || second.DelayFrom(clk.now()) != turn {
		t.Fatalf("second reservation: %+v (delay %v), %v; want %v", second, second.DelayFrom(clk.now()), err, turn)
	}
	if err := second.CancelAt(ctx, clk.now()); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	third, err := l.Reserve(ctx, "r", lim, 10*time.Minute)
	if err != nil || !third.OK || third.DelayFrom(clk.now()) != turn {
		t.Fatalf("after a Cancel: %+v (delay %v), %v; want the cancelled turn, %v", third, third.DelayFrom(clk.now()), err, turn)
	}
	if late, err := l.Reserve(ctx, "r", lim, 9*time.Minute); err != nil || late.OK {
		t.Fatalf("a reservation past maxWait: %+v, %v; want not OK", late, err)
	}
}

// resetWrongTypeNoScript: Reset gives the quota back; a key holding
// another type is that key's error alone; scripts the server forgot are
// sent again, the decisions unchanged.
func resetWrongTypeNoScript(t *testing.T, e *Env) {
	ctx := context.Background()
	clk := newClock()
	l := e.limiter(t, sluice.WithClock(clk.now))
	lim := must(sluice.FixedWindow(2, time.Hour))
	allow := func(id string) sluice.Result {
		t.Helper()
		r, err := l.Allow(ctx, id, lim)
		if err != nil || r.Degraded {
			t.Fatalf("Allow %s: %+v, %v", id, r, err)
		}
		return r
	}
	allow("x")
	allow("x")
	if allow("x").Allowed {
		t.Fatal("third call of 2 admitted")
	}
	if err := l.Reset(ctx, "x", lim); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if r := allow("x"); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("after Reset: %+v", r)
	}

	// (The string-state scripts read a key of another type as empty and
	// replace it; a sliding log keeps a sorted set.)
	logLim := must(sluice.SlidingLog(5, time.Hour))
	bad := l.Key("wrong", logLim)
	if _, err := e.owner(t, bad).Command("SET", bad, "x"); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Allow(ctx, "wrong", logLim); !errors.Is(err, sluice.ErrWrongType) || r.Allowed {
		t.Fatalf("Allow on a string: %+v, %v; want ErrWrongType", r, err)
	}
	if r := allow("y"); !r.Allowed {
		t.Fatalf("another key after a WRONGTYPE: %+v", r)
	}

	for _, n := range e.Nodes {
		if _, err := n.Command("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
	}
	if r := allow("y"); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("after SCRIPT FLUSH: %+v, want the second of 2 admitted", r)
	}
	if r := allow("y"); r.Allowed {
		t.Fatalf("after SCRIPT FLUSH: %+v, want the third denied", r)
	}
}

// Faults checks the failure policy over the transport on a server of its
// own: stopped, the Limiter answers from the policy at once and recovers
// when the server is back; paused (SIGSTOP), callers are answered once
// the node is silent, and exactness returns with it.
func Faults(t *testing.T, mk Maker) {
	ctx := context.Background()
	s := redisserver.Start(t)
	e := &Env{Addrs: []string{s.Addr}, Nodes: []*redisserver.Server{s}, Make: mk}
	l := e.limiter(t, sluice.WithFailurePolicy(sluice.FailClosed), sluice.WithBreaker(1, 50*time.Millisecond))
	lim := must(sluice.GCRA(3, time.Hour, 3))
	exact := func(what string) {
		t.Helper()
		// The server is back: poll until the breaker lets calls through.
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; ; i++ {
			// A fresh identity each time: the denial cache answers one
			// denied before without Redis.
			r, err := l.Peek(ctx, fmt.Sprintf("probe%d", i), lim)
			if err != nil {
				t.Fatalf("%s: Peek: %v", what, err)
			}
			if !r.Degraded {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still degraded 30s after the server came back", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := l.Reset(ctx, "f", lim); err != nil {
			t.Fatalf("%s: Reset: %v", what, err)
		}
		for i := range 4 {
			r, err := l.Allow(ctx, "f", lim)
			if err != nil || r.Degraded || r.Allowed != (i < 3) {
				t.Fatalf("%s: call %d: %+v, %v; want exact (3 of 4 admitted)", what, i, r, err)
			}
		}
	}
	exact("at the start")

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		// (Not "f": its last call was denied, and the denial cache would
		// answer it without Redis.)
		r, err := l.Allow(ctx, "g", lim)
		if err != nil || !r.Degraded || r.Allowed {
			t.Fatalf("server stopped, call %d: %+v, %v; want a FailClosed denial", i, r, err)
		}
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	exact("after a restart")

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = s.Resume()
		}
	}()
	r, err := l.Allow(ctx, "g", lim)
	if err != nil || !r.Degraded || r.Allowed {
		t.Fatalf("server paused: %+v, %v; want a FailClosed denial once the node is silent", r, err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	exact("after a pause")
}
