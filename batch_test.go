package sluice

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/keyslot"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/runtime/luart"
)

// TestDecideMatchesModels drives random batches — the six algorithms,
// shuffled identities, shadow checks, costs 0 to 3 — on a Limiter with a
// virtual clock, and checks each against the plain-Go models: a check
// admits exactly when its model does, the batch exactly when every
// enforced check does, only an admitted batch's checks are charged (a
// denied batch's charges are refunded: every later decision still matches
// the models, which never saw them), and each Remaining is the model's.
func TestDecideMatchesModels(t *testing.T) {
	ctx := context.Background()
	pool := []Limit{
		Must(GCRA(3, time.Second, 2)), Must(GCRA(7, 3*time.Second, 7)),
		Must(TokenBucket(2, time.Second, 3)), Must(TokenBucket(5, 700*time.Millisecond, 4)),
		Must(FixedWindow(4, time.Second)), Must(SlidingWindow(3, time.Second)), Must(SlidingWindow(5, 2*time.Second)),
		Must(SlidingLog(4, time.Second)), Must(Concurrency(2, time.Hour)),
	}
	ids := []string{"alice", "bob", "{carol}"}
	for seed := uint64(1); seed <= 6; seed++ {
		cache := WithDenialCache(int(seed%2) * 10_000)
		l, m, clk, _ := miniLimiter(t, cache)
		rng := rand.New(rand.NewPCG(seed, 17))
		tr := map[string]*tracked{}
		holders := map[string][]Lease{}
		denied, admitted, refunded := 0, 0, 0
		for step := 0; step < 400; step++ {
			// Time moves on at least 1µs per batch: a refunded gcra or
			// token bucket charge on an empty state may leave up to 1µs
			// behind (the documented bound), which reads as empty once
			// that µs has passed.
			clk.add(time.Duration(1+rng.Int64N(250_000)) * time.Microsecond)
			clk.set(m)
			now := clk.now().UnixMicro()
			if rng.IntN(4) == 0 { // release a slot
				for k, ls := range holders {
					if len(ls) > 0 {
						if err := l.Release(ctx, ls[0]); err != nil {
							t.Fatal(err)
						}
						holders[k] = ls[1:]
						break
					}
				}
			}
			n := 1 + rng.IntN(5)
			var checks []Check
			seen := map[string]bool{}
			for len(checks) < n {
				c := Check{Identity: ids[rng.IntN(len(ids))], Limit: pool[rng.IntN(len(pool))], Cost: rng.Int64N(4), Shadow: rng.IntN(10) == 0}
				k := l.Key(c.Identity, c.Limit)
				if seen[k] {
					continue
				}
				seen[k] = true
				checks = append(checks, c)
			}
			// What the models say, before anything is charged.
			want := make([]bool, n)
			allowed := true
			for i, c := range checks {
				k := l.Key(c.Identity, c.Limit)
				if c.Limit.Algorithm == AlgConcurrency {
					want[i] = int64(len(holders[k])) < c.Limit.Rate
				} else {
					x := tr[k]
					if x == nil {
						x = &tracked{lim: c.Limit, m: modelOf(c.Limit)}
						tr[k] = x
					}
					want[i] = model.Decide(x.copy(), now, c.Cost).Allowed
				}
				allowed = allowed && (want[i] || c.Shadow)
			}
			d, err := l.Decide(ctx, checks...)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if d.Allowed != allowed {
				t.Fatalf("seed %d step %d: batch %+v: Allowed %v, the models say %v", seed, step, checks, d.Allowed, allowed)
			}
			for i, c := range checks {
				k := l.Key(c.Identity, c.Limit)
				if !d.Asked(i) {
					continue // denied by the cache before this check was asked
				}
				r := d.Results[i]
				if r.Allowed != want[i] {
					t.Fatalf("seed %d step %d check %d (%s %s cost %d): Allowed %v, the model says %v", seed, step, i, c.Identity, c.Limit.Name, c.Cost, r.Allowed, want[i])
				}
				if c.Limit.Algorithm == AlgConcurrency {
					if d.Allowed && r.Allowed {
						holders[k] = append(holders[k], d.Leases[i])
					} else if d.Leases[i].ID != "" {
						t.Fatalf("seed %d step %d: a lease for check %d of a batch that was not admitted or a check that denied", seed, step, i)
					}
					continue
				}
				x := tr[k]
				if d.Allowed && r.Allowed {
					x.charge(now, c.Cost)
				}
				if c.Cost == 0 && r.Allowed {
					continue // a report: Remaining 0 from the cache, exact from Redis
				}
				if wantRem := model.Remaining(x.copy(), now); r.Remaining != wantRem {
					t.Fatalf("seed %d step %d check %d (%s cost %d, batch allowed %v): Remaining %d, the model says %d", seed, step, i, c.Limit.Name, c.Cost, d.Allowed, r.Remaining, wantRem)
				}
			}
			switch {
			case d.Allowed:
				admitted++
			default:
				denied++
				for i := range checks {
					if d.Asked(i) && d.Results[i].Allowed && checks[i].Cost > 0 {
						refunded++
					}
				}
			}
		}
		t.Logf("seed %d: %d batches admitted, %d denied, %d charges refunded", seed, admitted, denied, refunded)
		if denied == 0 || admitted == 0 || refunded == 0 {
			t.Fatalf("seed %d: the batches did not cover admission, denial and refund", seed)
		}
	}
}

// roundTrips counts what a client sends: calls to Do and DoMulti (each
// one round trip to each node it reaches).
type roundTrips struct {
	rueidis.Client
	n atomic.Int64
}

func (c *roundTrips) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *roundTrips) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoMulti(ctx, cmds...)
}

// commandStats reads the calls of each command from the server itself.
func commandStats(t *testing.T, c rueidis.Client) map[string]int64 {
	t.Helper()
	s, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(calls, 10, 64)
	}
	return out
}

func statsDelta(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		// Only the commands sent, not those the scripts called.
		if top := k == "evalsha" || k == "eval" || k == "time" || k == "ping"; top && v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// TestDecideRoundTrips: a request with 3 rate checks on 3 identities (IP,
// API key, route) and a concurrency check costs one round trip when
// admitted, two when denied (the refund), and none when an enforced check
// is in the denial cache; counted by the client and by the server's own
// command statistics.
func TestDecideRoundTrips(t *testing.T) {
	ctx := context.Background()
	s := redisserver.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rt := &roundTrips{Client: c}
	l, err := New(rt, quiet...)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	perIP, perKey, route := Must(GCRA(100, time.Hour, 100)), Must(SlidingWindow(100, time.Hour)), Must(FixedWindow(3, time.Hour))
	conc := Must(Concurrency(10, time.Minute))
	checks := []Check{
		{Identity: "192.0.2.7", Limit: perIP, Cost: 1},
		{Identity: "key-1", Limit: perKey, Cost: 1},
		{Identity: "GET /items", Limit: route, Cost: 1},
		{Identity: "key-1", Limit: conc},
	}
	step := func(what string, wantAllowed bool, wantTrips int64, wantCmds map[string]int64) Decision {
		t.Helper()
		before, n0 := commandStats(t, c), rt.n.Load()
		d, err := l.Decide(ctx, checks...)
		trips := rt.n.Load() - n0
		after := commandStats(t, c)
		if err != nil || d.Allowed != wantAllowed {
			t.Fatalf("%s: %+v, %v", what, d, err)
		}
		got := statsDelta(before, after)
		t.Logf("%s: %d round trips, commands %v", what, trips, got)
		if trips != wantTrips {
			t.Fatalf("%s: %d round trips, want %d", what, trips, wantTrips)
		}
		if fmt.Sprint(got) != fmt.Sprint(wantCmds) {
			t.Fatalf("%s: the server ran %v, want %v", what, got, wantCmds)
		}
		for _, ls := range d.Leases {
			if ls.ID != "" {
				if err := l.Release(ctx, ls); err != nil {
					t.Fatal(err)
				}
			}
		}
		return d
	}
	// TIME counts once per batch sent ahead of the scripts, and once in
	// each script (Redis TIME decides). The scripts are loaded by the
	// first call (NOSCRIPT, then EVAL); each step ends releasing its slot.
	step("first", true, 2, map[string]int64{"eval": 4, "evalsha": 4, "time": 1 + 4})
	step("admitted", true, 1, map[string]int64{"evalsha": 4, "time": 1 + 4})
	step("admitted", true, 1, map[string]int64{"evalsha": 4, "time": 1 + 4})
	peeks := func() []int64 {
		var out []int64
		for _, ch := range checks[:2] {
			r, err := l.AllowN(ctx, ch.Identity, ch.Limit, 0) // a report: the quota left
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r.Remaining)
		}
		return out
	}
	before := peeks()
	// The route's 3 are spent: the others' charges are given back in a
	// second round trip, in one refund script per identity charged (IP and
	// API key) and a release of the slot; the first refunds load their
	// script (NOSCRIPT, then EVAL: a third).
	denied := func(what string, wantTrips int64, wantCmds map[string]int64) {
		t.Helper()
		d := step(what, false, wantTrips, wantCmds)
		if d.Results[2].Allowed || !d.Results[0].Allowed || d.Results[0].Remaining != before[0] || d.Results[1].Remaining != before[1] {
			t.Fatalf("%s: results %+v (remaining before %v)", what, d.Results, before)
		}
		if after := peeks(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("%s: a denied batch left charges: remaining %v, before %v", what, after, before)
		}
	}
	denied("denied", 3, map[string]int64{"evalsha": 4 + 3, "eval": 2, "time": 1 + 4 + 1 + 2})
	l.e.denials.forget(l.Key(checks[2].Identity, route)) // as if the cached denial had run out
	denied("denied", 2, map[string]int64{"evalsha": 4 + 3, "time": 1 + 4 + 3})
	step("denied", false, 0, map[string]int64{}) // the route's denial is cached, and no slot was held
}

// TestDecideNeverOverAdmits runs concurrent callers, each deciding random
// batches over shared identities and limits that do not refill during the
// test, on a real redis-server (Redis TIME decides) and on a 3-master
// cluster (identities on every node, each node's part of a batch in its own
// flight): no limit ever admits more than its quota, and at the end every
// quota spent is what admitted batches spent (denied batches left nothing
// behind, up to the documented bound).
func TestDecideNeverOverAdmits(t *testing.T) {
	t.Parallel() // its own servers, hour-long windows: nothing here reads a clock's edge
	ctx := context.Background()
	s := redisserver.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl := redisserver.StartCluster(t, 3)
	cc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	pool := []Limit{
		Must(GCRA(40, time.Hour, 40)), Must(TokenBucket(30, time.Hour, 30)), Must(FixedWindow(35, 24*time.Hour)),
		Must(SlidingWindow(25, 24*time.Hour)), Must(SlidingLog(30, time.Hour)), Must(Concurrency(3, time.Hour)),
	}
	for name, client := range map[string]rueidis.Client{"standalone": c, "cluster": cc} {
		t.Run(name, func(t *testing.T) {
			l, err := New(client, quiet...)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			prefix := fmt.Sprintf("run%d", time.Now().UnixNano())
			ids := []string{prefix + "-a", prefix + "-b", prefix + "-c", prefix + "-d"}
			var mu sync.Mutex
			spent := map[string]int64{} // admitted cost per key
			var admitted, denied atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func(seed uint64) {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(seed, 5))
					for i := 0; i < 60; i++ {
						var checks []Check
						seen := map[string]bool{}
						for n := 1 + rng.IntN(4); len(checks) < n; {
							ch := Check{Identity: ids[rng.IntN(len(ids))], Limit: pool[rng.IntN(len(pool))], Cost: 1 + rng.Int64N(3)}
							if k := l.Key(ch.Identity, ch.Limit); !seen[k] {
								seen[k] = true
								checks = append(checks, ch)
							}
						}
						d, err := l.Decide(ctx, checks...)
						if err != nil {
							t.Error(err)
							return
						}
						if !d.Allowed {
							denied.Add(1)
							continue
						}
						admitted.Add(1)
						mu.Lock()
						for _, ch := range checks {
							if ch.Limit.Algorithm != AlgConcurrency {
								spent[l.Key(ch.Identity, ch.Limit)] += ch.Cost
							} else {
								spent[l.Key(ch.Identity, ch.Limit)]++
							}
						}
						mu.Unlock()
						for _, ls := range d.Leases {
							if ls.ID != "" && rng.IntN(2) == 0 {
								if err := l.Release(ctx, ls); err != nil {
									t.Error(err)
								}
								mu.Lock()
								spent[ls.key]--
								mu.Unlock()
							}
						}
					}
				}(uint64(g))
			}
			wg.Wait()
			t.Logf("%d batches admitted, %d denied", admitted.Load(), denied.Load())
			// The quota left, asked of Redis (not of a cached denial).
			l, err = New(client, opts(WithDenialCache(0))...)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if admitted.Load() == 0 || denied.Load() == 0 {
				t.Fatal("the batches did not cover admission and denial")
			}
			for _, id := range ids {
				for _, lim := range pool {
					k := l.Key(id, lim)
					if lim.Algorithm == AlgConcurrency {
						if spent[k] > lim.Rate {
							t.Errorf("%s: %d slots held, limit %d", k, spent[k], lim.Rate)
						}
						continue
					}
					if spent[k] > capacity(lim) {
						t.Errorf("%s: admitted %d, quota %d", k, spent[k], capacity(lim))
					}
					r, err := l.AllowN(ctx, id, lim, 0)
					if err != nil {
						t.Fatal(err)
					}
					left := capacity(lim) - r.Remaining
					// A gcra or token bucket refund on an empty state may
					// leave up to a few µs of emission: at most one unit.
					slack := int64(0)
					if lim.Algorithm == AlgGCRA || lim.Algorithm == AlgTokenBucket || lim.Algorithm == AlgSlidingLog {
						slack = 3
					}
					if left < spent[k] || left > spent[k]+slack {
						t.Errorf("%s: %d spent in Redis, %d by admitted batches", k, left, spent[k])
					}
				}
			}
		})
	}
}

// TestDecideDegraded: while Redis cannot answer, each failure policy
// decides a batch's checks (Result.Degraded): FailOpen admits, FailClosed
// denies, FailLocal admits this replica's share and then denies, charging
// nothing locally once an enforced check has denied; a concurrency check
// gets a local slot that a denied batch gives back.
func TestDecideDegraded(t *testing.T) {
	ctx := context.Background()
	small := Must(GCRA(2, time.Hour, 2)).Named("small")
	big := Must(GCRA(100, time.Hour, 100)).Named("big")
	conc := Must(Concurrency(1, time.Hour))
	checks := []Check{{Identity: "a", Limit: big, Cost: 1}, {Identity: "b", Limit: small, Cost: 1}, {Identity: "a", Limit: conc}}
	for _, tc := range []struct {
		policy FailurePolicy
		want   []bool // Allowed of 4 batches in a row
	}{
		{FailOpen, []bool{true, true, true, true}},
		{FailClosed, []bool{false, false, false, false}},
		{FailLocal, []bool{true, false, false, false}}, // the slot is held by the first
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			l, _, _, sc := miniLimiter(t, WithFailurePolicy(tc.policy), WithDenialCache(0))
			sc.fail.Store(true)
			for i, want := range tc.want {
				d, err := l.Decide(ctx, checks...)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed != want {
					t.Fatalf("batch %d: Allowed %v, want %v: %+v", i, d.Allowed, want, d.Results)
				}
				for j, r := range d.Results {
					if !r.Degraded {
						t.Fatalf("batch %d check %d: not degraded: %+v", i, j, r)
					}
				}
				if tc.policy == FailLocal && i == 0 && (d.Leases[2].ID == "" || !d.Leases[2].local) {
					t.Fatalf("batch 0: no local lease: %+v", d.Leases)
				}
			}
			if tc.policy == FailLocal {
				// big was charged once (the first batch), small once: the
				// denied batches charged nothing locally.
				r, _ := l.AllowN(ctx, "b", small, 0)
				if r.Remaining != 1 || !r.Degraded {
					t.Fatalf("small after the batches: %+v, want 1 left", r)
				}
			}
		})
	}
}

// TestResetAfterRefund: a refunded charge's ResetAfter is 0 when the quota
// is whole again, its emission less for gcra (computed in lowest terms,
// where cost × period in µs would overflow), and kept otherwise.
func TestResetAfterRefund(t *testing.T) {
	huge := Must(GCRA(1<<40, (1<<40)*time.Microsecond, 1<<40)) // T = 1µs: cost × period is 2^80
	hour := 2 * (1 << 40) * time.Microsecond
	if got := resetAfterRefund(hour, huge, 1<<40, 0); got != hour-(1<<40)*time.Microsecond {
		t.Errorf("huge gcra: %v, want %v", got, hour-(1<<40)*time.Microsecond)
	}
	gcra := Must(GCRA(3, time.Second, 5)) // T = 333333.3µs
	if got := resetAfterRefund(time.Second, gcra, 1, 3); got != time.Second-333333*time.Microsecond {
		t.Errorf("gcra: %v", got)
	}
	if got := resetAfterRefund(time.Second, gcra, 1, 5); got != 0 {
		t.Errorf("whole again: %v, want 0", got)
	}
	fw := Must(FixedWindow(3, time.Second))
	if got := resetAfterRefund(700*time.Millisecond, fw, 1, 2); got != 700*time.Millisecond {
		t.Errorf("fixed window: %v, want the charge's 700ms", got)
	}
}

// TestDecideFolds: the enforced rate checks of one algorithm and cost on
// one identity (one hash slot) go in one multi-limit script call, and each
// still gets its own Result. Because that call is atomic, a batch one of
// them denies charges the others nothing and needs no refund for them. A
// check of another identity, and a shadow check, keep a call of their own.
func TestDecideFolds(t *testing.T) {
	ctx := context.Background()
	s := redisserver.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rt := &roundTrips{Client: c}
	l, err := New(rt, opts(WithDenialCache(0))...)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	perSecond := Must(GCRA(2, time.Second, 2)).Named("per-second")
	perHour := Must(GCRA(100, time.Hour, 100)).Named("per-hour")
	perTenant := Must(GCRA(1000, time.Hour, 1000)).Named("per-tenant")
	watch := Must(GCRA(1, time.Hour, 1)).Named("watch")
	checks := []Check{
		{Identity: "user-1", Limit: perSecond, Cost: 1},
		{Identity: "user-1", Limit: perHour, Cost: 1},
		{Identity: "tenant-9", Limit: perTenant, Cost: 1},
		{Identity: "user-1", Limit: watch, Cost: 1, Shadow: true},
	}
	report := func(ch Check) int64 {
		t.Helper()
		r, err := l.AllowN(ctx, ch.Identity, ch.Limit, 0)
		if err != nil {
			t.Fatal(err)
		}
		return r.Remaining
	}
	step := func(what string, wantAllowed bool, wantTrips int64, wantCmds map[string]int64) Decision {
		t.Helper()
		before, n0 := commandStats(t, c), rt.n.Load()
		d, err := l.Decide(ctx, checks...)
		trips := rt.n.Load() - n0
		got := statsDelta(before, commandStats(t, c))
		if err != nil || d.Allowed != wantAllowed {
			t.Fatalf("%s: %+v, %v", what, d, err)
		}
		t.Logf("%s: %d round trips, commands %v", what, trips, got)
		if trips != wantTrips || fmt.Sprint(got) != fmt.Sprint(wantCmds) {
			t.Fatalf("%s: %d round trips, the server ran %v; want %d and %v", what, trips, got, wantTrips, wantCmds)
		}
		for i, ch := range checks {
			if r := d.Results[i]; r.Limit.Name != ch.Limit.Name || r.Remaining != report(ch) {
				t.Fatalf("%s: check %d: %+v; a report after says %d remaining", what, i, r, report(ch))
			}
		}
		return d
	}
	// TIME once ahead of the scripts, once in each (Redis TIME decides);
	// the first call loads the scripts (NOSCRIPT, then EVAL).
	step("first", true, 2, map[string]int64{"eval": 3, "evalsha": 3, "time": 1 + 3})
	d := step("second", true, 1, map[string]int64{"evalsha": 3, "time": 1 + 3})
	if d.Results[3].Allowed {
		t.Fatalf("the shadow check: %+v, want it denied (1 per hour, asked twice)", d.Results[3])
	}
	hour, tenant := report(checks[1]), report(checks[2])
	// Denied: the per-hour limit, folded with per-second, was never
	// charged; per-tenant, on its own call, was charged and is refunded in
	// a second round trip (a third here: the refund script's first use
	// loads it).
	d = step("per-second spent", false, 3, map[string]int64{"eval": 1, "evalsha": 3 + 1, "time": 1 + 3 + 1})
	if d.Results[0].Allowed || !d.Results[1].Allowed || !d.Results[2].Allowed {
		t.Fatalf("per-second spent: %+v; want it alone denied", d.Results)
	}
	if report(checks[1]) != hour || report(checks[2]) != tenant {
		t.Fatalf("the denied batch charged the limits that admitted: per-hour %d → %d, per-tenant %d → %d",
			hour, report(checks[1]), tenant, report(checks[2]))
	}
	// One identity's checks alone are one call, which needs no refund, so
	// no TIME ahead of it either; denied, still one round trip.
	checks = []Check{
		{Identity: "user-2", Limit: perSecond, Cost: 1},
		{Identity: "user-2", Limit: perHour, Cost: 1},
	}
	step("one call", true, 1, map[string]int64{"evalsha": 1, "time": 1})
	step("one call", true, 1, map[string]int64{"evalsha": 1, "time": 1})
	step("one call, denied", false, 1, map[string]int64{"evalsha": 1, "time": 1})
}

// TestDecideFoldsAcrossSlots: with WithCrossSlotScripts on a standalone
// Redis, the checks of several identities (different hash slots), one
// algorithm and one cost, go in one multi-limit call: one round trip, no
// TIME ahead of it, and a batch one check refuses charges none of the
// others, with no refund. Checks of another algorithm keep their own call.
// Without the option, each identity's check is a call of its own.
func TestDecideFoldsAcrossSlots(t *testing.T) {
	ctx := context.Background()
	s := redisserver.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rt := &roundTrips{Client: c}
	client := Must(FixedWindow(2, time.Hour)).Named("client")
	route := Must(FixedWindow(100, time.Hour)).Named("route")
	tenant := Must(FixedWindow(1000, time.Hour)).Named("tenant")
	user := Must(GCRA(100, time.Hour, 100)).Named("user")
	for _, cross := range []bool{true, false} {
		l, err := New(rt, opts(WithDenialCache(0), WithCrossSlotScripts(cross))...)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		id := fmt.Sprint("c-", cross)
		checks := []Check{
			{Identity: id, Limit: client, Cost: 1},
			{Identity: "/r-" + id, Limit: route, Cost: 1},
			{Identity: "t-" + id, Limit: tenant, Cost: 1},
		}
		if keyslot.Of(l.Key(checks[0].Identity, client)) == keyslot.Of(l.Key(checks[2].Identity, tenant)) {
			t.Fatal("the identities share a hash slot; pick others")
		}
		report := func(ch Check) int64 {
			t.Helper()
			r, err := l.AllowN(ctx, ch.Identity, ch.Limit, 0)
			if err != nil {
				t.Fatal(err)
			}
			return r.Remaining
		}
		step := func(what string, wantAllowed bool, wantTrips int64, wantCmds map[string]int64) {
			t.Helper()
			before, n0 := commandStats(t, c), rt.n.Load()
			d, err := l.Decide(ctx, checks...)
			trips := rt.n.Load() - n0
			got := statsDelta(before, commandStats(t, c))
			if err != nil || d.Allowed != wantAllowed {
				t.Fatalf("cross-slot %v, %s: %+v, %v", cross, what, d, err)
			}
			t.Logf("cross-slot %v, %s: %d round trips, commands %v", cross, what, trips, got)
			if trips != wantTrips || fmt.Sprint(got) != fmt.Sprint(wantCmds) {
				t.Fatalf("cross-slot %v, %s: %d round trips, the server ran %v; want %d and %v", cross, what, trips, got, wantTrips, wantCmds)
			}
			for i, ch := range checks {
				if r := d.Results[i]; r.Limit.Name != ch.Limit.Name || r.Remaining != report(ch) {
					t.Fatalf("cross-slot %v, %s: check %d: %+v; a report after says %d remaining", cross, what, i, r, report(ch))
				}
			}
		}
		if cross {
			step("first", true, 2, map[string]int64{"eval": 1, "evalsha": 1, "time": 1})
			step("second", true, 1, map[string]int64{"evalsha": 1, "time": 1})
			step("client spent", false, 1, map[string]int64{"evalsha": 1, "time": 1})
			if r, t2 := report(checks[1]), report(checks[2]); r != 98 || t2 != 998 {
				t.Fatalf("after a refused batch: route %d, tenant %d remaining; want 98 and 998 (charged twice, not three times)", r, t2)
			}
			// Another algorithm is a call of its own (gcra's first, so its
			// script is loaded: NOSCRIPT, then EVAL), and two calls take a
			// TIME ahead of them, for a refund's bound.
			checks = append(checks[1:], Check{Identity: "u-" + id, Limit: user, Cost: 1})
			step("with a gcra check", true, 2, map[string]int64{"eval": 1, "evalsha": 1 + 1, "time": 1 + 2})
			continue
		}
		step("first", true, 1, map[string]int64{"evalsha": 3, "time": 1 + 3})
	}
}

// recording is a Transport that records the commands of every Send.
type recording struct {
	luart.Transport
	mu    sync.Mutex
	sends [][]luart.Cmd
}

func (r *recording) Send(ctx context.Context, cmds []luart.Cmd, replies []luart.Reply) {
	r.mu.Lock()
	sent := make([]luart.Cmd, len(cmds))
	for i, c := range cmds {
		c.Keys = slices.Clone(c.Keys)
		c.Call.Keys = slices.Clone(c.Call.Keys)
		sent[i] = c
	}
	r.sends = append(r.sends, sent)
	r.mu.Unlock()
	r.Transport.Send(ctx, cmds, replies)
}

// TestRefundBoundPerSlot: on a cluster, a batch whose checks span hash
// slots sends a TIME ahead of the first script of each slot, on that
// slot's node, so every charge's refund bound comes from its own node's
// clock and order, even for the first batch, sent before the Limiter
// knows which node holds which slot (all its checks in one flight). And a
// batch refused by one check leaves no charge on any node.
// WithCrossSlotScripts is on, and ignored: a cluster runs no script whose
// keys span slots.
func TestRefundBoundPerSlot(t *testing.T) {
	t.Parallel()
	cl := redisserver.StartCluster(t, 3)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec := &recording{Transport: luart.Rueidis(c)}
	l, err := NewFromTransport(rec, append(quiet, WithCrossSlotScripts(true))...)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	day := Must(SlidingWindow(5, 24*time.Hour)).Named("day")
	one := Must(SlidingWindow(1, 24*time.Hour)).Named("one")
	ids := []string{"alpha", "bravo", "charlie"}
	if keyslot.Of(l.Key(ids[0], day)) == keyslot.Of(l.Key(ids[1], day)) {
		t.Fatal("pick identities of different slots")
	}
	// "charlie" spends its one; then every batch it is in is refused.
	if r, err := l.Allow(ctx, ids[2], one); err != nil || !r.Allowed {
		t.Fatalf("Allow: %+v, %v", r, err)
	}
	rec.mu.Lock()
	rec.sends = nil
	rec.mu.Unlock()
	for range 3 {
		d, err := l.Decide(ctx, Check{Identity: ids[0], Limit: day, Cost: 1}, Check{Identity: ids[1], Limit: day, Cost: 1}, Check{Identity: ids[2], Limit: one, Cost: 1})
		if err != nil || d.Allowed {
			t.Fatalf("Decide: %+v, %v; want refused by %s", d, err, one.Name)
		}
	}
	for _, id := range ids[:2] {
		if r, err := l.AllowN(ctx, id, day, 0); err != nil || r.Remaining != 5 {
			t.Fatalf("%s after refused batches: %+v, %v; want its 5 whole", id, r, err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, cmds := range rec.sends {
		timed := map[int]bool{}
		for _, cmd := range cmds {
			switch cmd.Op {
			case luart.OpTime:
				timed[keyslot.Of(cmd.Keys[0])] = true
			case luart.OpEvalSha, luart.OpEval:
				if cmd.Call.Script.Name != "refund" && len(cmds) > 1 && !timed[keyslot.Of(cmd.Call.Keys[0])] {
					t.Errorf("%s on %s sent with no TIME of its slot ahead of it: %v", cmd.Call.Script.Name, cmd.Call.Keys[0], cmds)
				}
			}
		}
	}
}
