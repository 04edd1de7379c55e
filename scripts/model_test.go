package scripts_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsize"
)

var (
	seedFlag  = flag.Int64("seed", 0, "seed of the model-based tests (0: a new seed per run, printed)")
	stepsFlag = flag.Int("model.steps", 10_000, "random steps per script in the model-based tests")
)

// A sim drives one episode of a model-based test: one configuration of a
// script and its reference model from internal/model.
type sim interface {
	// call picks a random call at now, applies it to the model and says
	// what the script must reply.
	call(r *rand.Rand, now int64) simCall
	// scales returns the algorithm's natural time scales (the period and
	// the interval between admissions), for picking gaps.
	scales() (period, interval int64)
}

// simCall is one call of an episode and the model's verdict on it.
type simCall struct {
	script string
	args   []string // ARGV without now
	// limits, for a multi-limit call, are the episode's limits (0-based)
	// of the call in call order, one key each; nil for a call on the
	// episode's one key.
	limits []int
	want   []int64 // the model's reply
	lives  []int64 // µs each key of the call must live after a write
	write  bool    // the call must write
	// full, for a single-limit rate script, appends peek unset (""), as
	// the generated wrappers send it (the scripts' fast argument path);
	// without it ARGV ends at now (their strict path).
	full bool
	desc string
}

// argv returns the call's ARGV at now: now is last, except for the
// multi-limit scripts, which take cost, now, each (unset), then the limits.
func (c simCall) argv(now int64) []string {
	if c.limits != nil {
		return append([]string{c.args[0], itoa(now), ""}, c.args[1:]...)
	}
	if c.full {
		return append(slices.Clone(c.args), itoa(now), "")
	}
	return append(slices.Clone(c.args), itoa(now))
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// randCost picks a cost for a limit of capacity c: mostly 1, sometimes 0,
// larger, exactly c, or above c.
func randCost(r *rand.Rand, c int64) int64 {
	switch x := r.Intn(100); {
	case x < 10:
		return 0
	case x < 65:
		return 1
	case x < 85:
		return 1 + r.Int63n(c)
	case x < 93:
		return c
	default:
		return c + 1 + r.Int63n(3)
	}
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.Intn(len(xs))] }

// rateSim is a single-limit rate script.
type rateSim struct {
	script   string
	params   []string
	alg      model.Algorithm
	twin     model.Algorithm // a second model that must agree decision for decision (GCRA: the token bucket)
	period   int64
	interval int64
}

func (s *rateSim) scales() (int64, int64) { return s.period, s.interval }

func (s *rateSim) call(r *rand.Rand, now int64) simCall {
	cost := randCost(r, s.alg.Capacity())
	d := model.Decide(s.alg, now, cost)
	if s.twin != nil {
		if d2 := model.Decide(s.twin, now, cost); d2 != d {
			panic(fmt.Sprintf("models disagree at %d cost %d: %v vs %v", now, cost, d, d2))
		}
	}
	return simCall{
		script: s.script,
		args:   append(slices.Clone(s.params), itoa(cost)),
		want:   []int64{b2i(d.Allowed), d.Remaining, d.RetryAfter, d.ResetAfter},
		lives:  []int64{d.ResetAfter},
		write:  d.Allowed && cost > 0,
		full:   r.Intn(2) == 0,
		desc:   fmt.Sprintf("%s %v cost %d", s.script, s.params, cost),
	}
}

// multiSim is a multi-limit script over a set of limits, each with its own
// key; each call passes all of them, reordered, or a subset.
type multiSim struct {
	script   string
	params   [][]string // each limit's numbers, as the script takes them
	algs     []model.Algorithm
	period   int64
	interval int64
}

func (s *multiSim) scales() (int64, int64) { return s.period, s.interval }

func (s *multiSim) call(r *rand.Rand, now int64) simCall {
	idx := make([]int, len(s.params))
	for i := range idx {
		idx[i] = i
	}
	switch x := r.Intn(100); {
	case x < 80:
	case x < 92:
		r.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	default:
		r.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		idx = idx[:1+r.Intn(len(idx))]
	}
	var algs []model.Algorithm
	capacity := int64(1) << 40
	for _, i := range idx {
		algs = append(algs, s.algs[i])
		capacity = min(capacity, s.algs[i].Capacity())
	}
	cost := randCost(r, capacity)
	args := []string{itoa(cost)}
	var specs [][]string
	for _, i := range idx {
		args = append(args, s.params[i]...)
		specs = append(specs, s.params[i])
	}
	d := model.DecideAll(algs, now, cost)
	// Each key lives as long as its own limit's state.
	var lives []int64
	for _, a := range algs {
		lives = append(lives, model.ResetAfter(a, now))
	}
	return simCall{
		script: s.script,
		args:   args,
		limits: idx,
		want:   []int64{b2i(d.Allowed), d.Remaining, d.RetryAfter, d.ResetAfter, int64(d.Limiting)},
		lives:  lives,
		write:  d.Allowed && cost > 0,
		desc:   fmt.Sprintf("%s %v cost %d", s.script, specs, cost),
	}
}

// concSim drives concurrency_acquire and concurrency_release.
type concSim struct {
	c     *model.Concurrency
	limit int64
	lease int64
	ids   []string
}

func (s *concSim) scales() (int64, int64) { return s.lease, s.lease / s.limit }

func (s *concSim) call(r *rand.Rand, now int64) simCall {
	id := pick(r, s.ids...)
	if r.Intn(100) < 60 {
		lease := s.lease/2 + r.Int63n(s.lease)
		d := s.c.Acquire(now, lease, id)
		return simCall{
			script: "concurrency_acquire",
			args:   []string{itoa(s.limit), itoa(lease), id},
			want:   []int64{b2i(d.Allowed), d.Remaining, d.RetryAfter, d.ResetAfter},
			lives:  []int64{d.ResetAfter},
			write:  d.Allowed,
			desc:   fmt.Sprintf("acquire %s limit %d lease %d", id, s.limit, lease),
		}
	}
	released, holders, reset := s.c.Release(now, id)
	return simCall{
		script: "concurrency_release",
		args:   []string{id},
		want:   []int64{b2i(released), holders, reset},
		lives:  []int64{reset},
		write:  released,
		desc:   "release " + id,
	}
}

// The configurations: periods from 1 µs to an hour, rates with fractional
// intervals, bursts from 1 to several times the rate.
var (
	periods = []int64{1, 7, 1000, 999_983, 1_000_000, 60_000_000, 3_600_000_000}
	limits  = []int64{1, 2, 3, 5, 7, 10, 100}
)

func newFixedWindow(r *rand.Rand) sim {
	l, p := pick(r, limits...), pick(r, periods...)
	return &rateSim{script: "fixed_window", params: []string{itoa(l), itoa(p)}, alg: model.NewFixedWindow(l, p), period: p, interval: max(p/l, 1)}
}

func newSlidingLog(r *rand.Rand) sim {
	l, p := pick(r, limits...), pick(r, periods...)
	return &rateSim{script: "sliding_log", params: []string{itoa(l), itoa(p)}, alg: model.NewSlidingLog(l, p), period: p, interval: max(p/l, 1)}
}

func newSlidingWindow(r *rand.Rand) sim {
	l, p := pick(r, limits...), pick(r, periods...)
	return &rateSim{script: "sliding_window", params: []string{itoa(l), itoa(p)}, alg: model.NewSlidingWindow(l, p), period: p, interval: max(p/l, 1)}
}

func bucketConfig(r *rand.Rand) (l, p, b int64) {
	if r.Intn(8) == 0 {
		// A million per day: burst*period is 8.64e16, beyond exact Lua
		// integers; the scripts take the rate in lowest terms (1 per 86,400 µs).
		return 1_000_000, 86_400_000_000, pick[int64](r, 1, 7, 1_000_000)
	}
	l, p = pick(r, limits...), pick(r, periods...)
	return l, p, pick(r, 1, 2, l, l+3, 3*l)
}

func newTokenBucket(r *rand.Rand) sim {
	l, p, b := bucketConfig(r)
	return &rateSim{script: "token_bucket", params: []string{itoa(l), itoa(p), itoa(b)}, alg: model.NewTokenBucket(l, p, b), period: p, interval: max(p/l, 1)}
}

func newGCRA(r *rand.Rand) sim {
	l, p, b := bucketConfig(r)
	return &rateSim{script: "gcra", params: []string{itoa(l), itoa(p), itoa(b)},
		alg: model.NewGCRA(l, p, b), twin: model.NewTokenBucket(l, p, b), period: p, interval: max(p/l, 1)}
}

func newConcurrency(r *rand.Rand) sim {
	l := pick[int64](r, 1, 2, 3, 10)
	s := &concSim{c: model.NewConcurrency(l), limit: l, lease: pick[int64](r, 10, 1000, 1_000_000)}
	for i := int64(0); i < l+3; i++ {
		s.ids = append(s.ids, fmt.Sprintf("holder-%d", i))
	}
	return s
}

func newGCRAMulti(r *rand.Rand) sim {
	s := &multiSim{script: "gcra_multi"}
	for n := 1 + r.Intn(4); len(s.params) < n; {
		l, p, b := bucketConfig(r) // two keys may hold the same limit: they are still two states
		s.params = append(s.params, []string{itoa(l), itoa(p), itoa(b)})
		s.algs = append(s.algs, model.NewGCRA(l, p, b))
		s.period, s.interval = max(s.period, p), max(s.interval, p/l, 1)
	}
	return s
}

func newSlidingWindowMulti(r *rand.Rand) sim {
	s := &multiSim{script: "sliding_window_multi"}
	for n := 1 + r.Intn(4); len(s.params) < n; {
		l, p := pick(r, limits...), pick(r, periods...)
		s.params = append(s.params, []string{itoa(l), itoa(p)})
		s.algs = append(s.algs, model.NewSlidingWindow(l, p))
		s.period, s.interval = max(s.period, p), max(s.interval, p/l, 1)
	}
	return s
}

func newFixedWindowMulti(r *rand.Rand) sim {
	s := &multiSim{script: "fixed_window_multi"}
	for n := 1 + r.Intn(4); len(s.params) < n; {
		l, p := pick(r, limits...), pick(r, periods...)
		s.params = append(s.params, []string{itoa(l), itoa(p)})
		s.algs = append(s.algs, model.NewFixedWindow(l, p))
		s.period, s.interval = max(s.period, p), max(s.interval, p/l, 1)
	}
	return s
}

// gap picks the time to the next call: often none (equal timestamps), or
// a few µs, or on the scale of the interval or the period, or exactly at
// (and 1 µs around) the last retry_after and reset_after, or a ms
// boundary (where TTL rounding shows), or an idle stretch past the TTL.
func gap(r *rand.Rand, now, period, interval, lastRetry, lastReset int64) int64 {
	around := func(v int64) int64 { return max(v+r.Int63n(3)-1, 0) }
	switch x := r.Intn(100); {
	case x < 20:
		return 0
	case x < 32:
		return 1 + r.Int63n(10)
	case x < 50:
		return r.Int63n(period + 1)
	case x < 68:
		return r.Int63n(2*interval + 1)
	case x < 80 && lastRetry > 0:
		return around(lastRetry)
	case x < 88:
		return around(lastReset)
	case x < 94:
		return around(1000 - now%1000)
	default:
		return period*(2+r.Int63n(4)) + r.Int63n(period+1)
	}
}

// TestModels runs every script for random steps against its reference
// model, on miniredis (clock and TTLs following the steps, so keys expire
// during idle stretches) and on a real redis-server, in lockstep. Every
// reply element must equal the model's; after every write the key's PTTL
// must be its useful life rounded up to whole ms; sliding_log must hold at
// most limit members; and one in four denials with retry_after > 0 is
// probed at retry_after-1 (denied) and retry_after (allowed) on a copy of
// the state. GCRA is compared with
// both the GCRA and the token bucket model, which must agree.
//
// On the real server the keys' TTLs are checked and then removed (see
// rueidisBackend.pin), since its clock does not follow the steps; keys there
// never expire, the scripts see stale state instead, and every call must
// restore the TTL.
//
// The run is seeded; a failure prints the seed, and -seed=N replays it.
// -model.steps sets the steps per script: 10,000 with SLUICE_TEST_FULL=1
// (internal/testsize), which .ci/run sets; else 1,000, as with -short.
func TestModels(t *testing.T) {
	t.Parallel()
	steps := *stepsFlag
	if steps == 10_000 && !testsize.Full() {
		steps = 1_000
	}
	if testing.Short() && steps > 1000 {
		steps = 1000
	}
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("model-based test failed with seed %d; replay with: go test ./scripts -run TestModels -seed=%d", seed, seed)
		}
	})
	t.Logf("seed %d, %d steps per script", seed, steps)
	real := newRedis(t)
	if real != nil {
		real.pin = true // simulated time runs much faster than the server's clock
	}
	cases := []struct {
		name string
		new  func(*rand.Rand) sim
	}{
		{"fixed_window", newFixedWindow},
		{"sliding_log", newSlidingLog},
		{"sliding_window", newSlidingWindow},
		{"token_bucket", newTokenBucket},
		{"gcra", newGCRA},
		{"concurrency", newConcurrency},
		{"gcra_multi", newGCRAMulti},
		{"sliding_window_multi", newSlidingWindowMulti},
		{"fixed_window_multi", newFixedWindowMulti},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			bs := []backend{newMiniredis(t), newSandbox(t)}
			if real != nil {
				bs = append(bs, real)
			}
			r := rand.New(rand.NewSource(seed + int64(i)))
			stats := runModel(t, r, c.name, c.new, bs, steps)
			t.Logf("%s on %d backends: %s", c.name, len(bs), stats)
		})
	}
}

type modelStats struct {
	steps, episodes, allowed, denied, never, probes, ttlChecks int64
}

func (s modelStats) String() string {
	return fmt.Sprintf("%d steps in %d episodes: %d allowed, %d denied (%d never fit); %d retry probes and %d TTL checks over all backends",
		s.steps, s.episodes, s.allowed, s.denied, s.never, s.probes, s.ttlChecks)
}

var episodeSeq atomic.Int64

func runModel(t *testing.T, r *rand.Rand, name string, newSim func(*rand.Rand) sim, bs []backend, steps int) modelStats {
	ctx := context.Background()
	var st modelStats
	const perEpisode = 250
	for st.steps < int64(steps) {
		st.episodes++
		s := newSim(r)
		period, interval := s.scales()
		ep := episodeSeq.Add(1)
		key := fmt.Sprintf("sluice:{model-%s-%d}:state", name, ep)
		probe := fmt.Sprintf("sluice:{model-%s-%d}:probe", name, ep)
		// keysOf names the keys of a call: the episode's one key, or one
		// per limit of a multi-limit call.
		keysOf := func(c simCall) (keys, probes []string) {
			if c.limits == nil {
				return []string{key}, []string{probe}
			}
			for _, j := range c.limits {
				keys = append(keys, fmt.Sprintf("sluice:{model-%s-%d}:limit-%d", name, ep, j+1))
				probes = append(probes, fmt.Sprintf("sluice:{model-%s-%d}:probe-%d", name, ep, j+1))
			}
			return keys, probes
		}
		now := base + r.Int63n(1_000_000_000_000)
		var lastRetry, lastReset int64
		for i := 0; i < perEpisode && st.steps < int64(steps); i++ {
			st.steps++
			now += gap(r, now, period, interval, lastRetry, lastReset)
			c := s.call(r, now)
			keys, probes := keysOf(c)
			what := fmt.Sprintf("episode %d step %d at %d: %s", st.episodes, i+1, now, c.desc)
			probeThis := r.Intn(4) == 0 // the tables probe every denial; here a sample, for speed
			for _, b := range bs {
				b.SetClock(now)
				res, err := b.Eval(ctx, source(t, c.script), keys, c.argv(now))
				if err != nil {
					t.Fatalf("%s on %s: %v", what, b.Name(), err)
				}
				got, err := res.ints()
				if err != nil {
					t.Fatalf("%s on %s: %v", what, b.Name(), err)
				}
				if !slices.Equal(got, c.want) {
					t.Fatalf("%s on %s: script replied %v, model %v", what, b.Name(), got, c.want)
				}
				if c.write {
					for k := range keys {
						st.ttlChecks++
						wantTTL(t, what+" on "+b.Name()+" "+keys[k], res.PTTL[k], c.lives[k], res.Spread)
					}
				}
				if c.script == "sliding_log" {
					limit, _ := strconv.ParseInt(c.args[0], 10, 64)
					if n, err := b.Do(ctx, "ZCARD", key); err != nil || n.(int64) > limit {
						t.Fatalf("%s on %s: ZCARD %v (%v), want at most %d", what, b.Name(), n, err, limit)
					}
				}
				if c.script != "concurrency_release" && c.want[2] > 0 && probeThis {
					st.probes++
					probeRetry(ctx, t, b, source(t, c.script), keys, probes, c.argv, c.want[2], now, what+" on "+b.Name())
				}
				if t.Failed() {
					t.FailNow()
				}
			}
			switch {
			case c.script == "concurrency_release":
			case c.want[0] == 1:
				st.allowed++
			case c.want[2] == -1:
				st.denied++
				st.never++
			default:
				st.denied++
			}
			if c.script != "concurrency_release" {
				lastRetry = c.want[2]
			}
			lastReset = c.want[resetIndex(c.script)]
		}
	}
	return st
}
