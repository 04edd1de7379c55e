package sluice

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/internal/testsize"
)

// A limit whose numbers change keeps its name, and so its state: what the
// next decisions see is defined per algorithm in internal/model (and
// docs/algorithms.md, "When a limit changes"). The tests below hold the
// scripts, run through a Limiter, to those models, on miniredis and on a
// real redis-server, with a virtual clock.
//
// Every time is a whole second after a whole-second start, and every
// period and lease a whole number of seconds, so a state written lives at
// least a second: on the real server, whose TTLs run on the wall clock,
// no key expires while the virtual clock has not reached its end (the
// scripts themselves must treat a state past its end as gone, and the
// real server checks that they do; miniredis expires keys on the virtual
// clock).

// changeBackend is a Limiter on one backend, with its virtual clock.
type changeBackend struct {
	name string
	l    *Limiter
	clk  *clock
	mini *miniredis.Miniredis // nil on the real server
}

func (b *changeBackend) advance(d time.Duration) {
	b.clk.add(d)
	if b.mini != nil {
		b.clk.set(b.mini)
	}
}

func (b *changeBackend) now() int64 { return b.clk.now().UnixMicro() }

// changeEnv starts one redis-server for a test; backends gives Limiters
// on it and on miniredis.
type changeEnv struct {
	t    *testing.T
	addr string
}

func newChangeEnv(t *testing.T) *changeEnv {
	t.Helper()
	return &changeEnv{t: t, addr: redisserver.Start(t).Addr}
}

// backends returns a fresh Limiter on miniredis and one on the
// redis-server (whose keys the callers keep apart by identity), each with
// its own virtual clock, with or without the denial cache.
func (e *changeEnv) backends(cache bool) []*changeBackend {
	t := e.t
	t.Helper()
	dc := WithDenialCache(0)
	if cache {
		dc = WithDenialCache(10_000)
	}
	l, m, clk, _ := miniLimiter(t, dc)
	rclk := newClock(start)
	rl, err := New(standaloneClient(t, e.addr), opts(WithClock(rclk.now), dc)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	return []*changeBackend{{name: "miniredis", l: l, clk: clk, mini: m}, {name: "redis", l: rl, clk: rclk}}
}

// changing is the model of one limit whose numbers change, with the
// charges it took, to rebuild a copy for Peek (which must not change it).
type changing struct {
	lim Limit
	m   model.Algorithm
	ops []charged
}

type charged struct {
	lim       Limit
	now, cost int64
}

func newChanging(lim Limit) *changing { return &changing{lim: lim, m: modelOf(lim)} }

// set changes the numbers, keeping the name and the state.
func (c *changing) set(lim Limit) {
	c.lim = lim
	model.Retune(c.m, lim.Rate, lim.periodMicros(), lim.Burst)
}

func (c *changing) decide(now, cost int64) model.Decision {
	d := model.Decide(c.m, now, cost)
	if d.Allowed && cost > 0 {
		c.ops = append(c.ops, charged{c.lim, now, cost})
	}
	return d
}

// copy is the model as it stands, rebuilt from its charges.
func (c *changing) copy() model.Algorithm {
	m := modelOf(c.lim)
	for _, op := range c.ops {
		model.Retune(m, op.lim.Rate, op.lim.periodMicros(), op.lim.Burst)
		m.Charge(op.now, op.cost)
	}
	model.Retune(m, c.lim.Rate, c.lim.periodMicros(), c.lim.Burst)
	return m
}

func describe(lim Limit) string {
	s := fmt.Sprintf("%d per %v", lim.Rate, lim.Period)
	if lim.Burst > 0 {
		s += fmt.Sprintf(" burst %d", lim.Burst)
	}
	return s
}

// rateOp makes one decision of kind on b and on the model and compares
// them: "allow" (AllowN of cost), "peek" (Peek: what AllowN(…, 1) would
// decide, charging nothing).
func rateOp(t *testing.T, b *changeBackend, id string, c *changing, kind string, cost int64, where string) {
	t.Helper()
	ctx := context.Background()
	now := b.now()
	var got Result
	var err error
	var d model.Decision
	switch kind {
	case "peek":
		got, err = b.l.Peek(ctx, id, c.lim)
		d = model.Decide(c.copy(), now, 1)
	default:
		got, err = b.l.AllowN(ctx, id, c.lim, cost)
		d = c.decide(now, cost)
	}
	if err != nil {
		t.Fatalf("%s: %s %s cost %d under %s: %v", where, b.name, kind, cost, describe(c.lim), err)
	}
	if want := wantResult(d, c.lim); got != want {
		t.Fatalf("%s: %s %s cost %d under %s at +%v:\n got %+v\nwant %+v", where, b.name, kind, cost, describe(c.lim),
			time.Duration(now-start.UnixMicro())*time.Microsecond, got, want)
	}
}

var start = time.Unix(1_800_000_000, 0)

// rateChanges are, per rate algorithm, its numbers before a change and
// each parameter raised and lowered (a rate and a period that do not
// divide the old ones among them).
func rateChanges(alg Algorithm) (base Limit, changes map[string]Limit) {
	mk := func(rate int64, period time.Duration, burst int64) Limit {
		return Limit{Algorithm: alg, Rate: rate, Period: period, Burst: burst, Name: "changing"}
	}
	if alg == AlgGCRA || alg == AlgTokenBucket {
		return mk(6, time.Minute, 4), map[string]Limit{
			"rate raised":   mk(12, time.Minute, 4),
			"rate lowered":  mk(3, time.Minute, 4),
			"rate 7":        mk(7, time.Minute, 4), // an interval of 8.57 s
			"period raised": mk(6, 2*time.Minute, 4),
			"period 45s":    mk(6, 45*time.Second, 4),
			"burst raised":  mk(6, time.Minute, 8),
			"burst lowered": mk(6, time.Minute, 1),
			"all lowered":   mk(2, 30*time.Second, 2),
		}
	}
	return mk(6, time.Minute, 0), map[string]Limit{
		"rate raised":    mk(9, time.Minute, 0),
		"rate lowered":   mk(3, time.Minute, 0),
		"period raised":  mk(6, 2*time.Minute, 0),
		"period lowered": mk(6, 20*time.Second, 0),
		"period 45s":     mk(6, 45*time.Second, 0),
		"both lowered":   mk(2, 30*time.Second, 0),
		"both raised":    mk(20, 5*time.Minute, 0),
	}
}

var rateAlgorithms = []Algorithm{AlgGCRA, AlgTokenBucket, AlgFixedWindow, AlgSlidingWindow, AlgSlidingLog}

// TestLimitChangeMatchesModels raises and lowers each parameter of every
// rate algorithm mid-period: some cost is spent under the old numbers,
// then the numbers change (same name, same state), and reports, peeks and
// admissions at the change and for three periods after it are compared
// with the model, decision by decision.
func TestLimitChangeMatchesModels(t *testing.T) {
	for _, b := range newChangeEnv(t).backends(true) {
		for _, alg := range rateAlgorithms {
			base, changes := rateChanges(alg)
			for name, to := range changes {
				id := string(alg) + "-" + strings.ReplaceAll(name, " ", "-")
				where := fmt.Sprintf("%s, %s -> %s (%s)", alg, describe(base), describe(to), name)
				c := newChanging(base)
				minute := time.Minute.Microseconds()
				b.advance(time.Duration(minute-b.now()%minute)*time.Microsecond + 11*time.Second) // 11 s into the next minute
				for _, s := range []struct {
					gap  time.Duration
					cost int64
				}{{0, 1}, {5 * time.Second, 2}, {7 * time.Second, 1}, {0, 1}} {
					b.advance(s.gap)
					rateOp(t, b, id, c, "allow", s.cost, where+", before")
				}
				b.advance(8 * time.Second) // mid-period
				c.set(to)
				capacity := max(to.Rate, to.Burst)
				rateOp(t, b, id, c, "allow", 0, where)
				rateOp(t, b, id, c, "peek", 1, where)
				rateOp(t, b, id, c, "allow", capacity, where)
				rateOp(t, b, id, c, "allow", capacity+1, where)
				rateOp(t, b, id, c, "allow", 1, where)
				rateOp(t, b, id, c, "allow", 2, where)
				span := 3 * max(base.Period, to.Period)
				for i, elapsed := 0, time.Duration(0); elapsed < span; i++ {
					gap := []time.Duration{3 * time.Second, 7 * time.Second, 13 * time.Second}[i%3]
					b.advance(gap)
					elapsed += gap
					rateOp(t, b, id, c, "peek", 1, where)
					rateOp(t, b, id, c, "allow", 1, where)
					if i%4 == 0 {
						rateOp(t, b, id, c, "allow", 2, where)
					}
				}
			}
		}
	}
}

// randomNumbers picks numbers of alg for a random sequence.
func randomNumbers(r *rand.Rand, alg Algorithm) Limit {
	pick := func(xs ...int64) int64 { return xs[r.IntN(len(xs))] }
	lim := Limit{Algorithm: alg, Name: "random"}
	switch alg {
	case AlgGCRA, AlgTokenBucket:
		lim.Rate = pick(1, 2, 3, 6, 7, 12)
		lim.Period = time.Duration(pick(10, 30, 45, 60)) * time.Second
		lim.Burst = pick(1, 2, 4, 8)
	case AlgConcurrency:
		lim.Rate = pick(1, 2, 3, 5)
		lim.Period = time.Duration(pick(10, 30, 60)) * time.Second
	default:
		lim.Rate = pick(2, 3, 5, 6, 9)
		lim.Period = time.Duration(pick(10, 20, 30, 45, 60)) * time.Second
	}
	return lim
}

// TestLimitChangeRandom runs, per rate algorithm and seed, a random
// sequence of decisions (AllowN of random cost, Peek, and for GCRA and the
// sliding window counter AllowAll with a second limit of their own) with
// time moving on by whole seconds, and the numbers changing at random
// points; every reply must be the model's. Odd seeds keep the denial
// cache, even ones go without. A failure names its seed; the sequence of a
// seed is the same on every run.
func TestLimitChangeRandom(t *testing.T) {
	ctx := context.Background()
	steps := testsize.Pick(150, 600)
	env := newChangeEnv(t)
	for seed := range uint64(testsize.Pick(4, 12)) {
		for _, b := range env.backends(seed%2 == 1) {
			for ai, alg := range rateAlgorithms {
				r := rand.New(rand.NewPCG(seed, uint64(ai)))
				id := fmt.Sprintf("random-%d-%s", seed, alg)
				c := newChanging(randomNumbers(r, alg))
				var other *changing // AllowAll's second limit
				if alg == AlgGCRA || alg == AlgSlidingWindow {
					o := randomNumbers(r, alg)
					o.Name = "other"
					other = newChanging(o)
				}
				for step := 0; step < steps; step++ {
					where := fmt.Sprintf("seed %d step %d, %s", seed, step, alg)
					if r.IntN(4) > 0 {
						b.advance(time.Duration(r.Int64N(int64(c.lim.Period/time.Second)+1)) * time.Second)
					}
					if r.IntN(8) == 0 {
						c.set(randomNumbers(r, alg))
					}
					if other != nil && r.IntN(16) == 0 {
						o := randomNumbers(r, alg)
						o.Name = "other"
						other.set(o)
					}
					capacity := max(c.lim.Rate, c.lim.Burst)
					cost := []int64{0, 1, 1, 1, 2, capacity, capacity + 1}[r.IntN(7)]
					switch x := r.IntN(10); {
					case x < 2:
						rateOp(t, b, id, c, "peek", 1, where)
					case x < 4 && other != nil:
						// All or nothing over both limits; costs 0 and 1
						// may be answered from the denial cache, which
						// TestLimiterMatchesModels covers.
						cost = 2 + r.Int64N(2)
						now := b.now()
						got, err := b.l.AllowAll(ctx, id, []Limit{c.lim, other.lim}, cost)
						d := model.DecideAll([]model.Algorithm{c.m, other.m}, now, cost)
						if d.Allowed {
							c.ops = append(c.ops, charged{c.lim, now, cost})
							other.ops = append(other.ops, charged{other.lim, now, cost})
						}
						want := wantResult(d, []Limit{c.lim, other.lim}[d.Limiting-1])
						if err != nil || got != want {
							t.Fatalf("%s: %s AllowAll cost %d under %s and %s:\n got %+v, %v\nwant %+v", where, b.name, cost,
								describe(c.lim), describe(other.lim), got, err, want)
						}
					default:
						rateOp(t, b, id, c, "allow", cost, where)
					}
				}
			}
		}
	}
}

// TestConcurrencyLimitChange lowers and raises a concurrency limit's slots
// and lease while leases are held, at fixed points and at random ones:
// leases already held stay until they expire or are released, a lowered
// limit admits nobody new until fewer leases are live, and a new lease
// length applies to the leases taken after the change (Extend renews a
// lease with the numbers it was taken under).
func TestConcurrencyLimitChange(t *testing.T) {
	ctx := context.Background()
	env := newChangeEnv(t)
	for seed := range uint64(testsize.Pick(2, 6)) {
		for _, b := range env.backends(false) {
			r := rand.New(rand.NewPCG(seed, 7))
			id := fmt.Sprintf("conc-%d", seed)
			lim := Limit{Algorithm: AlgConcurrency, Rate: 3, Period: time.Minute, Name: "slots"}
			m := model.NewConcurrency(lim.Rate)
			type held struct {
				lease Lease
				lim   Limit
			}
			var leases []held
			acquire := func(where string) {
				t.Helper()
				now := b.now()
				lease, got, err := b.l.Acquire(ctx, id, lim)
				if err != nil {
					t.Fatalf("%s: %s Acquire: %v", where, b.name, err)
				}
				holder := lease.ID
				if !got.Allowed {
					holder = "denied" // a denial returns no lease: a holder that holds nothing
				}
				m.Limit = lim.Rate
				if want := wantResult(m.Acquire(now, lim.periodMicros(), holder), lim); got != want {
					t.Fatalf("%s: %s Acquire under %d slots, lease %v:\n got %+v\nwant %+v", where, b.name, lim.Rate, lim.Period, got, want)
				}
				if got.Allowed {
					leases = append(leases, held{lease, lim})
				}
			}
			steps := []func(string){
				acquire,
				func(where string) { // Release one
					if len(leases) == 0 {
						return
					}
					i := r.IntN(len(leases))
					if err := b.l.Release(ctx, leases[i].lease); err != nil {
						t.Fatalf("%s: %s Release: %v", where, b.name, err)
					}
					m.Release(b.now(), leases[i].lease.ID)
					leases = append(leases[:i], leases[i+1:]...)
				},
				func(where string) { // Extend one, under its own numbers
					if len(leases) == 0 {
						return
					}
					h := leases[r.IntN(len(leases))]
					now := b.now()
					got, err := b.l.Extend(ctx, h.lease)
					m.Limit = h.lim.Rate
					want := wantResult(m.Acquire(now, h.lim.periodMicros(), h.lease.ID), h.lim)
					if err != nil || got != want {
						t.Fatalf("%s: %s Extend of a lease under %d slots, %v:\n got %+v, %v\nwant %+v", where, b.name, h.lim.Rate, h.lim.Period, got, err, want)
					}
				},
			}
			// Fixed: fill 3 slots, lower to 1 (all stay held), raise to 5
			// with a shorter lease, then random steps.
			for i := 0; i < 4; i++ {
				acquire("fill")
				b.advance(5 * time.Second)
			}
			lim.Rate = 1
			acquire("lowered to 1")
			b.advance(20 * time.Second)
			acquire("lowered to 1, 20s later")
			lim.Rate, lim.Period = 5, 10*time.Second
			acquire("raised to 5, lease 10s")
			acquire("raised to 5, lease 10s")
			for step := 0; step < testsize.Pick(150, 600); step++ {
				where := fmt.Sprintf("seed %d step %d", seed, step)
				if r.IntN(3) > 0 {
					b.advance(time.Duration(r.Int64N(int64(lim.Period/time.Second)/2+1)) * time.Second)
				}
				if r.IntN(8) == 0 {
					nl := randomNumbers(r, AlgConcurrency)
					lim.Rate, lim.Period = nl.Rate, nl.Period
				}
				steps[[]int{0, 0, 0, 1, 2}[r.IntN(5)]](where)
			}
		}
	}
}

// A limit keeps its state across a change of its numbers when it keeps its
// name: a policy reloaded with a higher or lower rate goes on from what the
// identity has already spent (docs/algorithms.md, "When a limit changes").
func ExampleLimit_Named() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	now := time.Unix(1_700_000_000, 0)
	limiter, err := New(client, WithClock(func() time.Time { return now }), WithTimeout(time.Minute))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	ctx := context.Background()

	limit := Must(GCRA(2, time.Minute, 2)).Named("api")
	for range 2 {
		r, _ := limiter.Allow(ctx, "user-42", limit)
		fmt.Printf("2 per minute: allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
	}
	// Raised: the 2 requests already admitted still count.
	limit = Must(GCRA(4, time.Minute, 4)).Named("api")
	r, _ := limiter.Allow(ctx, "user-42", limit)
	fmt.Printf("4 per minute: allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
	// Lowered: the 3 admitted refill at 4 per minute before the next one.
	limit = Must(GCRA(1, time.Minute, 1)).Named("api")
	r, _ = limiter.Allow(ctx, "user-42", limit)
	fmt.Printf("1 per minute: allowed=%v retry_after=%v\n", r.Allowed, r.RetryAfter)
	// Output:
	// 2 per minute: allowed=true remaining=1
	// 2 per minute: allowed=true remaining=0
	// 4 per minute: allowed=true remaining=1
	// 1 per minute: allowed=false retry_after=45s
}
