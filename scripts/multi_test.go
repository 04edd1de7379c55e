package scripts_test

import (
	"context"
	"flag"
	"fmt"
	"github.com/sluice-go/sluice/internal/testsize"
	"math/rand"
	"slices"
	"testing"
	"time"
)

// multiPair is a multi-limit script and the single-limit script each of its
// limits must behave as, on the same key.
type multiPair struct {
	multi, single string
	// limit picks the numbers of one limit, as the single script takes
	// them before cost, and returns the capacity (largest admissible cost).
	limit func(r *rand.Rand) (params []string, capacity int64)
}

var multiPairs = []multiPair{
	{
		multi: "gcra_multi", single: "gcra",
		limit: func(r *rand.Rand) ([]string, int64) {
			l, p, b := bucketConfig(r)
			return []string{itoa(l), itoa(p), itoa(b)}, b
		},
	},
	{
		multi: "sliding_window_multi", single: "sliding_window",
		limit: func(r *rand.Rand) ([]string, int64) {
			l, p := pick(r, limits...), pick(r, periods...)
			return []string{itoa(l), itoa(p)}, l
		},
	},
	{
		multi: "fixed_window_multi", single: "fixed_window",
		limit: func(r *rand.Rand) ([]string, int64) {
			l, p := pick(r, limits...), pick(r, periods...)
			return []string{itoa(l), itoa(p)}, l
		},
	},
}

func atoi(t testing.TB, s string) int64 {
	t.Helper()
	var v int64
	if _, err := fmt.Sscan(s, &v); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

// TestMultiEqualsSingles runs random sequences of calls to each multi-limit
// script on one key per limit (set A) and, in lockstep, the single-limit
// script on each limit's twin key (set B), on miniredis, the sandbox and a
// real redis-server. Calls pass all the limits, a random subset or a random
// order; some calls run the single-limit script on one key of A alone, as
// Allow(a) would. For each multi-limit call, the single script is run on a
// copy of every twin key with the same cost: the multi-limit reply must be
// their combination (allowed iff all admit; remaining the least; retry_after
// -1 if any is -1, else the largest; reset_after the largest; limiting the
// first to decide), and when all admit, the single script then charges every
// twin key for real; otherwise each twin key is only peeked (cost 0). Half
// the multi-limit calls set each: the reply then goes on with every
// limit's remaining, retry_after and reset_after, which must be its single
// script's (the final reply's remaining and reset_after, the trial's
// retry_after when the call was denied, else 0). After every call, each
// key of A must equal its twin in B: same fields, values and TTL, and the
// same TTL written by the call.
//
// The run is seeded like TestModels (-seed); on the real server keys are
// pinned as there (see rueidisBackend.pin).
var multiSteps = flag.Int("steps", 600, "TestMultiEqualsSingles: random steps per script and backend")

func TestMultiEqualsSingles(t *testing.T) {
	t.Parallel()
	// 600 random steps per script and backend with SLUICE_TEST_FULL=1
	// (internal/testsize), else 150; -steps sets another number.
	steps := *multiSteps
	if testing.Short() || !testsize.Full() && *multiSteps == 600 {
		steps = 150
	}
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with seed %d; replay with: go test ./scripts -run TestMultiEqualsSingles -seed=%d", seed, seed)
		}
	})
	bs := []backend{newMiniredis(t), newSandbox(t)}
	if real := newRedis(t); real != nil {
		real.pin = true
		bs = append(bs, real)
	}
	for pi, pair := range multiPairs {
		for _, b := range bs {
			t.Run(pair.multi+"/"+b.Name(), func(t *testing.T) {
				r := rand.New(rand.NewSource(seed + int64(pi)))
				st := runMultiEqualsSingles(t, b, pair, r, steps)
				t.Logf("%d steps in %d episodes: %d multi-limit calls (%d allowed), %d single-limit calls on a multi-limit key",
					st.steps, st.episodes, st.multi, st.allowed, st.single)
			})
		}
	}
}

type multiStats struct{ steps, episodes, multi, allowed, single int }

func runMultiEqualsSingles(t *testing.T, b backend, pair multiPair, r *rand.Rand, steps int) multiStats {
	ctx := context.Background()
	var st multiStats
	single, multi := source(t, pair.single), source(t, pair.multi)
	// eval runs src and returns the reply and the TTL the call left on (or
	// wrote for) each key.
	eval := func(what, src string, keys, args []string) ([]int64, []int64) {
		t.Helper()
		res, err := b.Eval(ctx, src, keys, args)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, err := res.ints()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return got, res.PTTL
	}
	for ep := 0; st.steps < steps; ep++ {
		st.episodes++
		n := 1 + r.Intn(4)
		var params [][]string
		var caps []int64
		var period int64
		for range n {
			p, c := pair.limit(r)
			params, caps = append(params, p), append(caps, c)
			period = max(period, atoi(t, p[1]))
		}
		keyA := func(j int) string { return fmt.Sprintf("sluice:{multi-%s-%d}:a-%d", pair.multi, ep, j) }
		keyB := func(j int) string { return fmt.Sprintf("sluice:{multi-%s-%d}:b-%d", pair.multi, ep, j) }
		probe := fmt.Sprintf("sluice:{multi-%s-%d}:probe", pair.multi, ep)
		now := base + r.Int63n(1_000_000_000_000)
		var lastRetry, lastReset int64
		for i := 0; i < 200 && st.steps < steps; i++ {
			st.steps++
			now += gap(r, now, period, max(period/int64(1+r.Intn(100)), 1), lastRetry, lastReset)
			b.SetClock(now)
			idx := r.Perm(n)
			switch x := r.Intn(100); {
			case x < 50:
				slices.Sort(idx) // all, in order
			case x < 75: // all, shuffled
			default:
				idx = idx[:1+r.Intn(n)]
			}
			capacity := int64(1) << 40
			for _, j := range idx {
				capacity = min(capacity, caps[j])
			}
			cost := randCost(r, capacity)
			what := fmt.Sprintf("episode %d step %d at %d, limits %v, cost %d", st.episodes, i+1, now, idx, cost)
			singleArgs := func(j int, cost int64) []string {
				if i%2 == 0 { // peek unset, as the wrappers send it; else ARGV ends at now
					return append(slices.Clone(params[j]), itoa(cost), itoa(now), "")
				}
				return append(slices.Clone(params[j]), itoa(cost), itoa(now))
			}

			written := map[int][2]int64{} // key j -> TTL written on A, on B
			if len(idx) == 1 && r.Intn(3) == 0 {
				// Allow(a) alone: the single script on a key of A and on
				// its twin.
				st.single++
				j := idx[0]
				ga, ta := eval(what, single, []string{keyA(j)}, singleArgs(j, cost))
				gb, tb := eval(what, single, []string{keyB(j)}, singleArgs(j, cost))
				if !slices.Equal(ga, gb) {
					t.Fatalf("%s: %s on key A replied %v, on its twin %v", what, pair.single, ga, gb)
				}
				written[j] = [2]int64{ta[0], tb[0]}
				lastRetry, lastReset = ga[2], ga[3]
			} else {
				st.multi++
				// The single script on a copy of each twin key, with cost.
				var trial [][]int64
				for _, j := range idx {
					if _, err := b.Do(ctx, "DEL", probe); err != nil {
						t.Fatal(err)
					}
					if _, err := b.Do(ctx, "COPY", keyB(j), probe); err != nil {
						t.Fatal(err)
					}
					g, _ := eval(what, single, []string{probe}, singleArgs(j, cost))
					trial = append(trial, g)
				}
				all := true
				for _, g := range trial {
					all = all && g[0] == 1
				}
				// Then for real on the twin keys: the same cost when every
				// limit admits it, else a peek.
				charge := int64(0)
				if all {
					charge = cost
				}
				var final [][]int64
				for k, j := range idx {
					g, ttl := eval(what, single, []string{keyB(j)}, singleArgs(j, charge))
					if all && !slices.Equal(g, trial[k]) {
						t.Fatalf("%s: %s on key B %d replied %v, on its copy %v", what, pair.single, j, g, trial[k])
					}
					final = append(final, g)
					written[j] = [2]int64{0, ttl[0]}
				}
				want := combine(trial, final, all)
				// Half the calls ask for each limit's own results too:
				// what its single script replied to what the call did (the
				// charge, or a cost of 0 when another limit denied), with
				// the limit's own retry_after.
				each := r.Intn(2) == 0
				eachArg := ""
				if each {
					eachArg = "1"
					for k := range idx {
						retry := int64(0)
						if !all {
							retry = trial[k][2]
						}
						want = append(want, final[k][1], retry, final[k][3])
					}
				}
				var keys []string
				args := []string{itoa(cost), itoa(now), eachArg}
				for _, j := range idx {
					keys = append(keys, keyA(j))
					args = append(args, params[j]...)
				}
				got, ttls := eval(what, multi, keys, args)
				if !slices.Equal(got, want) {
					t.Fatalf("%s: %s (each %v) replied %v; the single scripts give %v (each: %v, then %v)", what, pair.multi, each, got, want, trial, final)
				}
				for k, j := range idx {
					written[j] = [2]int64{ttls[k], written[j][1]}
				}
				if got[0] == 1 {
					st.allowed++
				}
				lastRetry, lastReset = got[2], got[3]
			}
			for j, w := range written {
				if w[0] != w[1] {
					t.Fatalf("%s: key %d has TTL %d ms after the call, its twin %d ms", what, j, w[0], w[1])
				}
			}
			for j := range n {
				if sa, sb := snapshot(ctx, t, b, keyA(j)), snapshot(ctx, t, b, keyB(j)); sa != sb {
					t.Fatalf("%s: key A %d is %s, its twin %s", what, j, sa, sb)
				}
			}
		}
	}
	return st
}

// combine gives the multi-limit reply from the single-limit replies: trial
// are the replies to the cost (on copies), final those that stand after the
// call (the charge when all admitted, else a peek).
func combine(trial, final [][]int64, all bool) []int64 {
	out := []int64{0, -1, 0, 0, 0} // allowed, remaining, retry, reset, limiting
	if all {
		out[0] = 1
	}
	for k, g := range trial {
		switch {
		case g[2] == -1:
			if out[2] != -1 {
				out[2], out[4] = -1, int64(k+1)
			}
		case out[2] != -1 && g[2] > out[2]:
			out[2], out[4] = g[2], int64(k+1)
		}
	}
	for k, g := range final {
		if out[1] == -1 || g[1] < out[1] {
			out[1] = g[1]
			if all {
				out[4] = int64(k + 1)
			}
		}
		out[3] = max(out[3], g[3])
	}
	return out
}
