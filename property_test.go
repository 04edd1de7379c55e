package sluice

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/model"
)

// modelOf is the plain-Go reference model of lim, fresh.
func modelOf(lim Limit) model.Algorithm {
	p := lim.periodMicros()
	switch lim.Algorithm {
	case AlgFixedWindow:
		return model.NewFixedWindow(lim.Rate, p)
	case AlgSlidingLog:
		return model.NewSlidingLog(lim.Rate, p)
	case AlgSlidingWindow:
		return model.NewSlidingWindow(lim.Rate, p)
	case AlgTokenBucket:
		return model.NewTokenBucket(lim.Rate, p, lim.Burst)
	default:
		return model.NewGCRA(lim.Rate, p, lim.Burst)
	}
}

// tracked is one limit's model, rebuilt from its charges when a copy is
// needed (Peek must not change it).
type tracked struct {
	lim     Limit
	m       model.Algorithm
	charges [][2]int64 // (now, cost) since the last Reset
}

func (tr *tracked) charge(now, cost int64) {
	if cost > 0 {
		tr.charges = append(tr.charges, [2]int64{now, cost})
	}
}

func (tr *tracked) copy() model.Algorithm {
	c := modelOf(tr.lim)
	for _, ch := range tr.charges {
		c.Charge(ch[0], ch[1])
	}
	return c
}

func wantResult(d model.Decision, lim Limit) Result {
	r := Result{Allowed: d.Allowed, Limit: lim, Remaining: d.Remaining, ResetAfter: micros(d.ResetAfter)}
	switch {
	case d.Allowed:
	case d.RetryAfter < 0:
		r.RetryAfter = RetryNever
	default:
		r.RetryAfter = micros(d.RetryAfter)
	}
	return r
}

// TestLimiterMatchesModels drives random call sequences — Allow, AllowN,
// AllowAll over shuffled sets, Peek, Reset, with time moving on — on a
// fresh Limiter and checks every Result against the plain-Go model of each
// limit alone: one state per limit, Peek reporting what AllowN(…, 1) would
// decide without charging, and the Result contract on every decision.
func TestLimiterMatchesModels(t *testing.T) {
	ctx := context.Background()
	gcras := []Limit{Must(GCRA(3, time.Second, 2)), Must(GCRA(10, time.Minute, 5)), Must(GCRA(7, 3*time.Second, 7))}
	windows := []Limit{Must(SlidingWindow(3, time.Second)), Must(SlidingWindow(10, time.Minute)), Must(SlidingWindow(5, 2*time.Second))}
	others := []Limit{Must(FixedWindow(4, time.Second)), Must(SlidingLog(4, time.Second)), Must(TokenBucket(2, time.Second, 3))}
	all := slices.Concat(gcras, windows, others)

	for seed := uint64(1); seed <= 8; seed++ {
		// Odd seeds run with the denial cache (the default), even ones
		// without: its answers must be exactly Redis's.
		cache := WithDenialCache(int(seed%2) * 10_000)
		l, m, clk, _ := miniLimiter(t, cache)
		rng := rand.New(rand.NewPCG(seed, 42))
		tr := map[string]*tracked{}
		for _, lim := range all {
			tr[lim.Name] = &tracked{lim: lim, m: modelOf(lim)}
		}
		check := func(step int, what string, got Result, err error, want Result) {
			t.Helper()
			if err != nil {
				t.Fatalf("seed %d step %d %s: %v", seed, step, what, err)
			}
			if !got.Allowed && got.RetryAfter != RetryNever && got.RetryAfter < time.Microsecond {
				t.Fatalf("seed %d step %d %s: denied with RetryAfter %v", seed, step, what, got.RetryAfter)
			}
			if got != want {
				t.Fatalf("seed %d step %d %s:\n got %+v\nwant %+v", seed, step, what, got, want)
			}
		}
		for step := 0; step < 300; step++ {
			if rng.IntN(3) == 0 {
				clk.add(time.Duration(rng.Int64N(400_000)) * time.Microsecond)
				clk.set(m)
			}
			now := clk.now().UnixMicro()
			lim := all[rng.IntN(len(all))]
			switch op := rng.IntN(10); {
			case op < 4: // Allow / AllowN
				cost := int64(1)
				if op >= 2 {
					cost = rng.Int64N(4)
				}
				got, err := l.AllowN(ctx, "id", lim, cost)
				x := tr[lim.Name]
				d := model.Decide(x.m, now, cost)
				if d.Allowed {
					x.charge(now, cost)
				}
				check(step, "AllowN "+lim.Name, got, err, wantResult(d, lim))
			case op < 7: // AllowAll over a shuffled subset of one algorithm
				group := gcras
				if rng.IntN(2) == 0 {
					group = windows
				}
				set := slices.Clone(group)
				rng.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
				set = set[:1+rng.IntN(len(set))]
				cost := rng.Int64N(3)
				got, err := l.AllowAll(ctx, "id", set, cost)
				ms := make([]model.Algorithm, len(set))
				for i, s := range set {
					ms[i] = tr[s.Name].m
				}
				d := model.DecideAll(ms, now, cost)
				if d.Allowed {
					for _, s := range set {
						tr[s.Name].charge(now, cost)
					}
				}
				want := wantResult(d, set[d.Limiting-1])
				if seed%2 == 1 && cost == 1 && !got.Allowed && got != want {
					// Answered from the denial cache (AllowAll is a batch
					// decision): one denying limit's own answer, exactly
					// as Redis gives it for that limit alone.
					x, ok := tr[got.Limit.Name]
					if !ok || !slices.Contains(set, got.Limit) {
						t.Fatalf("seed %d step %d AllowAll: denied by %s, not one of the set", seed, step, got.Limit.Name)
					}
					want = wantResult(model.Decide(x.copy(), now, 1), got.Limit)
				}
				check(step, "AllowAll", got, err, want)
			case op < 9: // Peek
				before := m.Dump()
				got, err := l.Peek(ctx, "id", lim)
				d := model.Decide(tr[lim.Name].copy(), now, 1)
				check(step, "Peek "+lim.Name, got, err, wantResult(d, lim))
				if after := m.Dump(); after != before {
					t.Fatalf("seed %d step %d: Peek %s wrote to Redis:\n%s\n---\n%s", seed, step, lim.Name, before, after)
				}
			default:
				if err := l.Reset(ctx, "id", lim); err != nil {
					t.Fatal(err)
				}
				tr[lim.Name] = &tracked{lim: lim, m: modelOf(lim)}
			}
		}
	}
}
