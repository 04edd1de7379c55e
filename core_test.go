package sluice

import (
	"context"
	"errors"
	"runtime"
	rtmetrics "runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
)

// quiet are the options of tests that are not about timeouts or logging: a
// timeout no loaded machine reaches, and no log output.
var quiet = []Option{WithTimeout(time.Minute), WithLogger(nil)}

func opts(extra ...Option) []Option { return append(append([]Option(nil), quiet...), extra...) }

// switchClient passes commands to Client until fail is set, then answers
// every command with a connection error.
type switchClient struct {
	rueidis.Client
	fail  atomic.Bool
	calls atomic.Int64
}

func (s *switchClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	s.calls.Add(1)
	if s.fail.Load() {
		return rueidis.NewErrorResult(errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
	}
	return s.Client.Do(ctx, cmd)
}

func (s *switchClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	s.calls.Add(1)
	if s.fail.Load() {
		out := make([]rueidis.RedisResult, len(cmds))
		for i := range out {
			out[i] = rueidis.NewErrorResult(errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
		}
		return out
	}
	return s.Client.DoMulti(ctx, cmds...)
}

// miniLimiter is a Limiter on a fresh miniredis whose clock the test drives.
func miniLimiter(t *testing.T, extra ...Option) (*Limiter, *miniredis.Miniredis, *clock, *switchClient) {
	t.Helper()
	m := miniredis.RunT(t)
	m.ClockTTL(true)
	clk := newClock(time.Unix(1_800_000_000, 0))
	clk.set(m)
	sc := &switchClient{Client: miniClient(t, m)}
	l, err := New(sc, opts(append([]Option{WithClock(clk.now)}, extra...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l, m, clk, sc
}

// settle waits until no probe of l's is out (probes run in the
// background); it fails the test after 10s.
func settle(t *testing.T, l *Limiter) {
	t.Helper()
	if _, ok := waitFor(10*time.Second, func() bool {
		for _, n := range l.e.router.all() {
			if n.probing.Load() {
				return false
			}
		}
		return true
	}); !ok {
		t.Fatal("a probe was still out after 10s")
	}
}

// A limit's quota is one state whatever the call shape: AllowAll(a, b),
// AllowAll(b, a) and Allow(a) spend the same quota of a, and Peek, Reset
// and Key address it.
func TestOneStatePerLimit(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []Algorithm{AlgGCRA, AlgSlidingWindow} {
		t.Run(string(alg), func(t *testing.T) {
			l, m, _, _ := miniLimiter(t)
			var a, b Limit
			if alg == AlgGCRA {
				a, b = Must(GCRA(1, time.Hour, 1)), Must(GCRA(5, time.Hour, 5))
			} else {
				a, b = Must(SlidingWindow(1, time.Hour)), Must(SlidingWindow(5, time.Hour))
			}
			if r, err := l.AllowAll(ctx, "u", []Limit{a, b}, 1); err != nil || !r.Allowed {
				t.Fatalf("AllowAll(a, b): %+v, %v", r, err)
			}
			if !m.Exists(l.Key("u", a)) || !m.Exists(l.Key("u", b)) {
				t.Fatalf("AllowAll did not keep its state under Key(a) and Key(b); keys: %v", m.Keys())
			}
			if n := len(m.Keys()); n != 2 {
				t.Fatalf("%d keys after AllowAll of two limits, want 2: %v", n, m.Keys())
			}
			if r, err := l.AllowAll(ctx, "u", []Limit{b, a}, 1); err != nil || r.Allowed || r.Limit.Name != a.Name {
				t.Fatalf("AllowAll(b, a) after a was spent: %+v, %v; want denied by a", r, err)
			}
			if r, err := l.Allow(ctx, "u", a); err != nil || r.Allowed {
				t.Fatalf("Allow(a) after a was spent: %+v, %v; want denied", r, err)
			}
			if r, err := l.Peek(ctx, "u", a); err != nil || r.Allowed || r.RetryAfter <= 0 {
				t.Fatalf("Peek(a) after a was spent: %+v, %v; want denied with a retry-after", r, err)
			}
			// b was charged once (by the first AllowAll only).
			if r, err := l.AllowN(ctx, "u", b, 0); err != nil || r.Remaining != 4 {
				t.Fatalf("b: %+v, %v; want 4 remaining", r, err)
			}
			if err := l.Reset(ctx, "u", a); err != nil {
				t.Fatal(err)
			}
			if r, err := l.AllowAll(ctx, "u", []Limit{b, a}, 1); err != nil || !r.Allowed {
				t.Fatalf("AllowAll(b, a) after Reset(a): %+v, %v", r, err)
			}
		})
	}
}

// Under FailLocal a denied AllowAll charges none of its limits.
func TestFailLocalAllOrNothing(t *testing.T) {
	ctx := context.Background()
	l, _, _, sc := miniLimiter(t, WithReplicas(1), WithBreaker(0, 0))
	sc.fail.Store(true)
	a, b := Must(GCRA(1, time.Hour, 1)).Named("a"), Must(GCRA(1, time.Hour, 1)).Named("b")
	if r, _ := l.Allow(ctx, "u", b); !r.Allowed || !r.Degraded {
		t.Fatalf("Allow(b) from the local quota: %+v", r)
	}
	if r, _ := l.AllowAll(ctx, "u", []Limit{a, b}, 1); r.Allowed || !r.Degraded || r.Limit.Name != "b" || r.RetryAfter <= 0 {
		t.Fatalf("AllowAll(a, b) with b spent: %+v; want denied by b", r)
	}
	if r, _ := l.Allow(ctx, "u", a); !r.Allowed {
		t.Fatalf("Allow(a) after a denied AllowAll: %+v; the denied call must not have charged a", r)
	}
	if r, _ := l.Peek(ctx, "u", a); r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("local Peek(a) with a spent: %+v", r)
	}
}

// Every denial carries a retry-after of at least 1µs, whatever the policy.
func TestFailClosedRetryAfter(t *testing.T) {
	ctx := context.Background()
	lim := Must(GCRA(10, time.Second, 10))
	for name, breaker := range map[string]Option{"no breaker": WithBreaker(0, 0), "breaker": WithBreaker(1, time.Minute)} {
		t.Run(name, func(t *testing.T) {
			l, _, clk, sc := miniLimiter(t, WithFailurePolicy(FailClosed), breaker)
			sc.fail.Store(true)
			for i := 0; i < 3; i++ {
				r, err := l.Allow(ctx, "u", lim)
				if err != nil || r.Allowed || !r.Degraded || r.RetryAfter < time.Microsecond {
					t.Fatalf("call %d: %+v, %v; want a degraded denial with RetryAfter >= 1µs", i, r, err)
				}
				if _, r, err := l.Acquire(ctx, "u", Must(Concurrency(1, time.Minute))); err != nil || r.Allowed || r.RetryAfter < time.Microsecond {
					t.Fatalf("Acquire %d: %+v, %v", i, r, err)
				}
				clk.add(20 * time.Second)
			}
		})
	}
}

// Release is never refused by the breaker: a slot taken before an outage
// is given back after it even while the breaker is still open.
func TestReleaseBypassesBreaker(t *testing.T) {
	ctx := context.Background()
	l, m, _, sc := miniLimiter(t, WithBreaker(1, time.Hour))
	lim := Must(Concurrency(1, time.Hour))
	lease, r, err := l.Acquire(ctx, "u", lim)
	if err != nil || !r.Allowed || r.Degraded {
		t.Fatalf("Acquire: %+v, %v", r, err)
	}
	sc.fail.Store(true)
	if r, _ := l.Allow(ctx, "u", Must(GCRA(1, time.Second, 1))); !r.Degraded {
		t.Fatalf("call during the outage: %+v", r)
	}
	if l.e.router.any.breaker.current() != breakerOpen {
		t.Fatal("breaker not open")
	}
	sc.fail.Store(false)
	if err := l.Release(ctx, lease); err != nil {
		t.Fatalf("Release with the breaker open: %v", err)
	}
	if m.Exists(lease.key) {
		members, _ := m.ZMembers(lease.key)
		t.Fatalf("the holder is still in Redis after Release: %v", members)
	}
}

// Local-fallback leases expire after the limit's Period, as Redis ones do,
// and Extend renews them.
func TestLocalLeasesExpire(t *testing.T) {
	ctx := context.Background()
	l, _, clk, sc := miniLimiter(t, WithReplicas(1), WithBreaker(0, 0))
	sc.fail.Store(true)
	lim := Must(Concurrency(1, time.Minute))
	lease, r, _ := l.Acquire(ctx, "u", lim)
	if !r.Allowed || !r.Degraded {
		t.Fatalf("local Acquire: %+v", r)
	}
	if _, r, _ := l.Acquire(ctx, "u", lim); r.Allowed || r.RetryAfter != time.Minute {
		t.Fatalf("second local Acquire: %+v; want denied until the lease expires (1m)", r)
	}
	clk.add(50 * time.Second)
	if r, err := l.Extend(ctx, lease); err != nil || !r.Allowed {
		t.Fatalf("Extend: %+v, %v", r, err)
	}
	clk.add(50 * time.Second) // 100s after Acquire, 50s after Extend: still held
	if _, r, _ := l.Acquire(ctx, "u", lim); r.Allowed {
		t.Fatalf("Acquire 50s after Extend: %+v; want denied", r)
	}
	clk.add(10*time.Second + time.Microsecond) // the extended lease has expired: a holder that crashed
	if _, r, _ := l.Acquire(ctx, "u", lim); !r.Allowed {
		t.Fatalf("Acquire after the local lease expired: %+v", r)
	}
}

// Extend keeps a Redis lease alive past its Period.
func TestExtend(t *testing.T) {
	ctx := context.Background()
	l, m, clk, _ := miniLimiter(t)
	lim := Must(Concurrency(1, time.Minute))
	lease, r, _ := l.Acquire(ctx, "u", lim)
	if !r.Allowed {
		t.Fatalf("Acquire: %+v", r)
	}
	for i := 0; i < 3; i++ {
		clk.add(50 * time.Second)
		clk.set(m)
		if r, err := l.Extend(ctx, lease); err != nil || !r.Allowed || r.Remaining != 0 {
			t.Fatalf("Extend %d: %+v, %v", i, r, err)
		}
	}
	if _, r, _ := l.Acquire(ctx, "u", lim); r.Allowed {
		t.Fatalf("Acquire while an extended lease is held: %+v", r)
	}
	if err := l.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if _, r, _ := l.Acquire(ctx, "u", lim); !r.Allowed {
		t.Fatalf("Acquire after Release: %+v", r)
	}
	if _, err := l.Extend(ctx, Lease{}); !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("Extend of a zero Lease: %v", err)
	}
}

// A caller whose own deadline passes gets an error at its deadline, and
// the breaker does not move; WithTimeout's bound on a node not yet silent
// gives the failure policy's answer and leaves the breaker closed; a node
// silent for the whole silence timeout opens it. Redis is paused (SIGSTOP)
// throughout, so no call can succeed whatever the machine's load.
func TestCallerDeadlineIsNotRedisFailure(t *testing.T) {
	s := redisserver.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lim := Must(GCRA(10, time.Second, 10))
	// The silence timeout is a minute so that no loaded machine reaches it
	// between the steps below: only the callers' deadlines are at stake.
	l, err := New(c, WithBreaker(1, time.Hour), WithSilenceTimeout(time.Minute), WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	warm, _ := New(c, quiet...)
	defer warm.Close()
	if r, err := warm.Allow(context.Background(), "u", lim); err != nil || r.Degraded {
		t.Fatalf("before the pause: %+v, %v", r, err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()

	for _, d := range []time.Duration{time.Millisecond, 20 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		r, err := l.Allow(ctx, "u", lim)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || r.Degraded {
			t.Fatalf("caller deadline %v: %+v, %v; want a DeadlineExceeded error", d, r, err)
		}
		if st := l.e.router.any.breaker.current(); st != breakerClosed {
			t.Fatalf("caller deadline %v moved the breaker to %v", d, st)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(5 * time.Millisecond); cancel() }()
	if _, err := l.Allow(ctx, "u", lim); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	if st := l.e.router.any.breaker.current(); st != breakerClosed {
		t.Fatalf("a cancelled caller moved the breaker to %v", st)
	}

	// WithTimeout's bound: the policy answers this call; the node is not
	// known to be gone, so the breaker stays closed.
	bounded, err := New(c, WithBreaker(1, time.Hour), WithTimeout(20*time.Millisecond), WithSilenceTimeout(time.Minute), WithLogger(nil), WithFailurePolicy(FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	defer bounded.Close()
	r, err := bounded.Allow(context.Background(), "u", lim)
	if err != nil || !r.Degraded || !r.Allowed {
		t.Fatalf("WithTimeout's bound: %+v, %v; want a degraded fail-open admission", r, err)
	}
	if st := bounded.e.router.any.breaker.current(); st != breakerClosed {
		t.Fatalf("WithTimeout's bound moved the breaker to %v", st)
	}
	// The silence timeout: nothing came back for 50ms, so the node is
	// gone as far as this Limiter knows, and its breaker opens.
	silent, err := New(c, WithBreaker(1, time.Hour), WithSilenceTimeout(50*time.Millisecond), WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if r, err := silent.Allow(ctx, "u", lim); err != nil || !r.Degraded {
		t.Fatalf("silent node: %+v, %v; want the policy's answer", r, err)
	}
	if st := silent.e.router.any.breaker.current(); st != breakerOpen {
		t.Fatalf("silent node left the breaker %v, want open", st)
	}
	if !strings.Contains(errBreakerOpen.Error(), "circuit breaker open") {
		t.Fatal(errBreakerOpen)
	}
}

// A process starved of CPU does not take a node for silent: while its own
// goroutines wait long for a core (the runtime's scheduling latencies,
// here a count the test raises at every look) or a crowd of them waits
// now, the watchdog starts its confirmation again, and only after
// starvedSilences silence timeouts of waiting does it open the breaker.
// Redis is paused throughout; the only bound asserted is a lower one,
// which a loaded machine cannot break.
func TestStarvedProcessIsNotSilentNode(t *testing.T) {
	s := redisserver.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lim := Must(GCRA(10, time.Second, 10))
	const silence = 40 * time.Millisecond
	crowd := 65 * uint64(runtime.GOMAXPROCS(0))
	for _, tc := range []struct {
		name  string
		sched func(look uint64) sched
	}{
		{"long waits", func(look uint64) sched { return sched{longWaits: look} }},
		{"a crowd waiting", func(uint64) sched { return sched{runnable: crowd} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(c, WithBreaker(1, time.Hour), WithSilenceTimeout(silence), WithLogger(nil))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var looks atomic.Uint64
			l.e.sched = func(d time.Duration) sched {
				if d < 50*time.Millisecond {
					t.Errorf("long waits counted from %v; want 50ms or more", d)
				}
				return tc.sched(looks.Add(1))
			}
			if r, err := l.Allow(context.Background(), "u", lim); err != nil || r.Degraded {
				t.Fatalf("before the pause: %+v, %v", r, err)
			}
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			defer s.Resume()
			start := time.Now()
			r, err := l.Allow(context.Background(), "u", lim)
			took := time.Since(start)
			if err != nil || !r.Degraded {
				t.Fatalf("paused node: %+v, %v; want the failure policy's answer", r, err)
			}
			if took < starvedSilences*silence {
				t.Fatalf("the policy answered after %v of a starved process; want %v or more", took, starvedSilences*silence)
			}
			if n := looks.Load(); n < 3 {
				t.Fatalf("%d looks at the scheduler; want the first and at least two confirmations", n)
			}
			if st := l.e.router.any.breaker.current(); st != breakerOpen {
				t.Fatalf("breaker %v after the verdict, want open", st)
			}
			t.Logf("the policy answered after %v (%d looks); the silence timeout is %v", took, looks.Load(), silence)
		})
	}
}

// readSched reads what the runtime has: its metrics are known to the Go
// that builds sluice (the run queue's length from Go 1.26), and this
// test's own goroutines show.
func TestReadSched(t *testing.T) {
	known := map[string]bool{}
	for _, d := range rtmetrics.All() {
		known[d.Name] = true
	}
	names := []string{"/sched/latencies:seconds"}
	if !strings.HasPrefix(runtime.Version(), "go1.25") {
		names = append(names, "/sched/goroutines/runnable:goroutines") // new in Go 1.26
	}
	for _, name := range names {
		if !known[name] {
			t.Errorf("runtime/metrics of %s has no %s", runtime.Version(), name)
		}
	}
	if s := readSched(0); s.longWaits == 0 {
		t.Errorf("readSched(0) = %+v; want every sampled scheduling counted", s)
	}
	base := sched{longWaits: 5}
	for _, tc := range []struct {
		s    sched
		want bool
	}{
		{sched{longWaits: 5}, false},
		{sched{longWaits: 6}, true},
		{sched{longWaits: 5, runnable: 64 * uint64(runtime.GOMAXPROCS(0))}, false},
		{sched{longWaits: 5, runnable: 64*uint64(runtime.GOMAXPROCS(0)) + 1}, true},
	} {
		if got := tc.s.starved(base); got != tc.want {
			t.Errorf("%+v.starved(%+v) = %v, want %v", tc.s, base, got, tc.want)
		}
	}
}

// The denial cache answers a denied identity's cost-1 requests without a
// round trip until the denial's RetryAfter, with Redis's own answer.
func TestDenialCache(t *testing.T) {
	ctx := context.Background()
	l, m, clk, sc := miniLimiter(t)
	lim := Must(GCRA(1, time.Minute, 1))
	if r, _ := l.Allow(ctx, "u", lim); !r.Allowed {
		t.Fatalf("first: %+v", r)
	}
	denied, _ := l.Allow(ctx, "u", lim)
	if denied.Allowed || denied.RetryAfter != time.Minute {
		t.Fatalf("second: %+v", denied)
	}
	calls := sc.calls.Load()
	clk.add(20 * time.Second)
	clk.set(m)
	r, err := l.Allow(ctx, "u", lim)
	if err != nil || r.Allowed || r.RetryAfter != 40*time.Second || r.ResetAfter != 40*time.Second || r.Remaining != 0 {
		t.Fatalf("cached: %+v, %v", r, err)
	}
	if p, _ := l.Peek(ctx, "u", lim); p != r {
		t.Fatalf("cached Peek %+v differs from cached Allow %+v", p, r)
	}
	if n := sc.calls.Load(); n != calls {
		t.Fatalf("%d calls reached Redis while the denial was cached", n-calls)
	}
	if r, _ := l.AllowN(ctx, "u", lim, 2); r.RetryAfter != RetryNever || sc.calls.Load() != calls+1 {
		t.Fatalf("cost 2 must ask Redis: %+v", r)
	}
	clk.add(40 * time.Second)
	clk.set(m)
	if r, _ := l.Allow(ctx, "u", lim); !r.Allowed {
		t.Fatalf("once the retry-after has passed: %+v", r)
	}
	l.Allow(ctx, "u", lim) // denied again, cached
	if err := l.Reset(ctx, "u", lim); err != nil {
		t.Fatal(err)
	}
	if r, _ := l.Allow(ctx, "u", lim); !r.Allowed {
		t.Fatalf("after Reset: %+v", r)
	}

	// Bounded: a tiny cache keeps at most its size.
	c := newDenialCache(denialShards)
	now := time.Unix(1_800_000_000, 0)
	for i := 0; i < 1000; i++ {
		c.put(strings.Repeat("k", i%50)+string(rune('a'+i%26)), Result{RetryAfter: time.Hour, Limit: lim}, now, now)
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].m)
	}
	if n > denialShards {
		t.Fatalf("cache of size %d holds %d entries", denialShards, n)
	}
}

// Health reports each node's breaker without a round trip.
func TestHealth(t *testing.T) {
	ctx := context.Background()
	l, _, clk, sc := miniLimiter(t, WithBreaker(1, time.Minute))
	if err := l.Health().Err(); err != nil {
		t.Fatalf("fresh limiter: %v", err)
	}
	lim := Must(GCRA(10, time.Second, 10))
	l.Allow(ctx, "u", lim)
	h := l.Health()
	if len(h.Nodes) != 1 || h.Nodes[0].Addr != "redis" || h.Nodes[0].Breaker != "closed" || h.Nodes[0].LastReply.IsZero() {
		t.Fatalf("after a call: %+v", h)
	}
	sc.fail.Store(true)
	l.Allow(ctx, "u", lim)
	err := l.Health().Err()
	if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "redis open") {
		t.Fatalf("Redis down: %v", err)
	}
	sc.fail.Store(false)
	clk.add(time.Minute)
	l.Health() // the cooldown has passed: Health starts the probe, whose reply closes the breaker
	settle(t, l)
	if err := l.Health().Err(); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
}

// A release Redis does not answer is retried in the background until the
// lease would have expired on the Limiter's clock (here a virtual one),
// and then dropped: the queue's goroutine ends.
func TestReleaseRetriesOnTheLimitersClock(t *testing.T) {
	ctx := context.Background()
	l, _, clk, sc := miniLimiter(t)
	defer l.Close()
	lim := Must(Concurrency(1, time.Minute))
	lease, r, err := l.Acquire(ctx, "u", lim)
	if err != nil || !r.Allowed || r.Degraded {
		t.Fatalf("Acquire: %+v, %v", r, err)
	}
	sc.fail.Store(true)
	if err := l.Release(ctx, lease); err == nil || !strings.Contains(err.Error(), "retried in the background") {
		t.Fatalf("Release with Redis down: %v", err)
	}
	calls := sc.calls.Load()
	if _, ok := waitFor(10*time.Second, func() bool { return sc.calls.Load() >= calls+3 }); !ok {
		t.Fatalf("the release was not retried: %d calls", sc.calls.Load()-calls)
	}
	if !l.e.undos.running.Load() {
		t.Fatal("the release queue stopped while the lease is still live on the Limiter's clock")
	}
	clk.add(time.Minute) // the lease has expired: nothing left to give back
	if _, ok := waitFor(10*time.Second, func() bool { return !l.e.undos.running.Load() }); !ok {
		t.Fatal("the release queue still retries after the lease expired on the Limiter's clock")
	}
}
