package sluice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/verify"
)

func TestLimitValidation(t *testing.T) {
	cases := []struct {
		name string
		make func() (Limit, error)
		want string // "" = valid
	}{
		{"gcra ok", func() (Limit, error) { return GCRA(100, time.Minute, 10) }, ""},
		{"rate 0", func() (Limit, error) { return GCRA(0, time.Minute, 10) }, "rate must be at least 1, got 0"},
		{"rate negative", func() (Limit, error) { return FixedWindow(-5, time.Minute) }, "rate must be at least 1, got -5"},
		{"rate huge", func() (Limit, error) { return SlidingLog(1<<50, time.Minute) }, "above the maximum"},
		{"period 0", func() (Limit, error) { return SlidingWindow(10, 0) }, "period must be at least 1µs, got 0s"},
		{"period negative", func() (Limit, error) { return TokenBucket(10, -time.Second, 5) }, "period must be at least 1µs"},
		{"period sub-µs", func() (Limit, error) { return FixedWindow(10, 1500*time.Nanosecond) }, "not a whole number of microseconds"},
		{"period huge", func() (Limit, error) { return FixedWindow(10, 200*365*24*time.Hour) }, "above the maximum"},
		{"gcra million per day", func() (Limit, error) { return GCRA(1_000_000, 24*time.Hour, 1_000_000) }, ""},
		{"gcra burst×period too big", func() (Limit, error) { return GCRA(7, 24*time.Hour, 1_000_000) }, "burst × period / gcd(rate, period) must not exceed 2^52"},
		{"bucket burst×period too big", func() (Limit, error) { return TokenBucket(1, 24*time.Hour, 60_000) }, "burst × period / gcd(rate, period) must not exceed 2^52"},
		{"sliding window rate×period too big", func() (Limit, error) { return SlidingWindow(100_000, 24*time.Hour) }, "rate × period must not exceed 2^52"},
		{"gcra at the bound", func() (Limit, error) { return GCRA(50_000, 24*time.Hour, 50_000) }, ""},
		{"burst 0", func() (Limit, error) { return GCRA(10, time.Second, 0) }, "burst must be at least 1, got 0"},
		{"capacity 0", func() (Limit, error) { return TokenBucket(10, time.Second, 0) }, "burst must be at least 1"},
		{"concurrency 0", func() (Limit, error) { return Concurrency(0, time.Second) }, "rate must be at least 1"},
		{"zero limit", func() (Limit, error) { return Limit{}, Limit{}.Validate() }, "no algorithm"},
		{"unknown algorithm", func() (Limit, error) {
			l := Limit{Algorithm: "leaky", Rate: 1, Period: time.Second, Name: "x"}
			return l, l.Validate()
		}, `unknown algorithm "leaky"`},
		{"bad name", func() (Limit, error) {
			l := Must(GCRA(1, time.Second, 1)).Named("a b{c}")
			return l, l.Validate()
		}, `name "a b{c}" must be 1 to 64`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.make()
			if c.want == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrInvalidLimit containing %q", err, c.want)
			}
		})
	}
	if got := Must(GCRA(100, time.Minute, 10)).Name; got != "gcra-100-60s-10" {
		t.Errorf("default name %q", got)
	}
	if got := Must(SlidingLog(3, 1500*time.Millisecond)).Name; got != "sliding_log-3-1500ms" {
		t.Errorf("default name %q", got)
	}
}

func TestMustPanicsOnError(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Must did not panic on an invalid limit")
		}
	}()
	Must(GCRA(0, time.Second, 1))
}

func TestIdentityTag(t *testing.T) {
	cases := map[string]string{
		"user-42":               "user-42",
		"10.0.0.1":              "10.0.0.1",
		"2001:db8::/64":         "2001:db8::/64",
		"a@b.example":           "a@b.example",
		"":                      "~e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"{x}":                   "~",
		"user 42":               "~",
		"line\nbreak":           "~",
		strings.Repeat("a", 65): "~",
	}
	for in, want := range cases {
		got := identityTag(in)
		if strings.HasSuffix(want, "~") && want == "~" {
			if !strings.HasPrefix(got, "~") || len(got) != 65 {
				t.Errorf("identityTag(%q) = %q, want a ~sha256 tag", in, got)
			}
			continue
		}
		if got != want {
			t.Errorf("identityTag(%q) = %q, want %q", in, got, want)
		}
	}
	// The hashed form of one identity never equals the literal form of another.
	h := identityTag("{x}")
	if identityTag(h) == h {
		t.Errorf("the literal identity %q maps to itself, colliding with the hash of {x}", h)
	}
}

func FuzzKey(f *testing.F) {
	for _, s := range []string{"user-1", "", "{", "}", "{a}", "a}{b", "\x00\xff", "~abc", strings.Repeat("z", 100)} {
		f.Add(s, "other")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := key("sluice", a, "lim"), key("sluice", b, "lim")
		if a != b && ka == kb {
			t.Fatalf("identities %q and %q share key %q", a, b, ka)
		}
		tag := identityTag(a)
		if strings.ContainsAny(tag, "{}") || len(tag) > 65 {
			t.Fatalf("tag %q of %q has braces or is too long", tag, a)
		}
		// Every key of one identity lands in the slot of its tag.
		if verify.Slot(ka) != verify.Slot(key("sluice", a, "all:x+y")) || verify.Slot(ka) != verify.Slot("{"+tag+"}") {
			t.Fatalf("keys of %q are in different slots", a)
		}
	})
}

func TestOptionsValidation(t *testing.T) {
	m := miniredis.RunT(t)
	c := miniClient(t, m)
	bad := map[string]Option{
		"prefix with brace": WithPrefix("a{b"),
		"empty prefix":      WithPrefix(""),
		"policy":            WithFailurePolicy(FailurePolicy(9)),
		"replicas":          WithReplicas(0),
		"timeout":           WithTimeout(-time.Second),
		"breaker":           WithBreaker(3, 0),
		"clock":             WithClock(nil),
	}
	// Options that configure FailLocal only, beside another policy, in
	// either order: refused, never one silently undoing the other.
	for _, opts := range [][]Option{
		{WithFailurePolicy(FailOpen), WithReplicas(3)},
		{WithReplicas(3), WithFailurePolicy(FailClosed)},
		{WithLocalFallbackSize(1 << 20), WithFailurePolicy(FailOpen)},
	} {
		if _, err := New(c, opts...); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "configures FailLocal") {
			t.Errorf("a FailLocal option beside another policy: %v, want ErrInvalidOption naming it", err)
		}
	}
	if l, err := New(c, WithReplicas(3), WithFailurePolicy(FailLocal)); err != nil || l.e.cfg.replicas != 3 {
		t.Errorf("WithReplicas(3) and FailLocal: %v", err)
	}
	for name, opt := range bad {
		if _, err := New(c, opt); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := New(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil client: got %v", err)
	}
}

func miniClient(t *testing.T, m *miniredis.Miniredis) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// clock is a settable test clock.
type clock struct{ t atomic.Int64 }

func (c *clock) now() time.Time             { return time.UnixMicro(c.t.Load()) }
func (c *clock) add(d time.Duration)        { c.t.Add(int64(d / time.Microsecond)) }
func newClock(t0 time.Time) *clock          { c := &clock{}; c.t.Store(t0.UnixMicro()); return c }
func (c *clock) set(m *miniredis.Miniredis) { m.SetTime(c.now()) }

func TestLimiterOnMiniredis(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	m.ClockTTL(true)
	clk := newClock(time.Unix(1_800_000_000, 0))
	clk.set(m)
	l, err := New(miniClient(t, m), opts(WithClock(clk.now))...)
	if err != nil {
		t.Fatal(err)
	}
	limits := []Limit{
		Must(FixedWindow(5, time.Second)), Must(SlidingLog(5, time.Second)), Must(SlidingWindow(5, time.Second)),
		Must(TokenBucket(5, time.Second, 5)), Must(GCRA(5, time.Second, 5)),
	}
	for _, lim := range limits {
		t.Run(string(lim.Algorithm), func(t *testing.T) {
			id := "user:" + string(lim.Algorithm)
			p, err := l.Peek(ctx, id, lim)
			if err != nil || !p.Allowed || p.Remaining != 4 || p.RetryAfter != 0 {
				t.Fatalf("Peek on a fresh identity: %+v, %v", p, err)
			}
			if m.Exists(l.Key(id, lim)) {
				t.Fatalf("Peek wrote %s", l.Key(id, lim))
			}
			for i := 0; i < 5; i++ {
				r, err := l.Allow(ctx, id, lim)
				if err != nil || !r.Allowed || r.Remaining != int64(4-i) || r.Degraded {
					t.Fatalf("request %d: %+v, %v", i, r, err)
				}
			}
			r, _ := l.Allow(ctx, id, lim)
			if r.Allowed || r.RetryAfter <= 0 {
				t.Fatalf("6th request: %+v, want denied with a retry-after", r)
			}
			r, _ = l.AllowN(ctx, id, lim, 6)
			if r.Allowed || r.RetryAfter != RetryNever {
				t.Fatalf("cost above capacity: %+v, want RetryNever", r)
			}
			if _, err := l.AllowN(ctx, id, lim, -1); !errors.Is(err, ErrInvalidCost) {
				t.Fatalf("cost -1: %v", err)
			}
			if _, err := l.AllowN(ctx, id, lim, MaxCost+1); !errors.Is(err, ErrInvalidCost) {
				t.Fatalf("cost 2^52+1: %v", err)
			}
			if err := l.Reset(ctx, id, lim); err != nil {
				t.Fatal(err)
			}
			r, _ = l.Allow(ctx, id, lim)
			if !r.Allowed || r.Remaining != 4 {
				t.Fatalf("after Reset: %+v", r)
			}
			if ttl := m.TTL(l.Key(id, lim)); ttl <= 0 {
				t.Fatalf("key %s has no TTL (%v)", l.Key(id, lim), ttl)
			}
		})
	}
	t.Run("concurrency", func(t *testing.T) {
		lim := Must(Concurrency(2, time.Minute))
		if _, err := l.Allow(ctx, "c", lim); !errors.Is(err, ErrInvalidLimit) {
			t.Fatalf("Allow on a concurrency limit: %v", err)
		}
		a, r, _ := l.Acquire(ctx, "c", lim)
		b, r2, _ := l.Acquire(ctx, "c", lim)
		_, r3, _ := l.Acquire(ctx, "c", lim)
		if !r.Allowed || !r2.Allowed || r3.Allowed || r2.Remaining != 0 {
			t.Fatalf("acquire: %+v %+v %+v", r, r2, r3)
		}
		if err := l.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
		if _, r, _ := l.Acquire(ctx, "c", lim); !r.Allowed {
			t.Fatalf("after release: %+v", r)
		}
		// b crashes: its slot comes back when its lease expires.
		_ = b
		clk.add(time.Minute + time.Microsecond)
		clk.set(m)
		if _, r, _ := l.Acquire(ctx, "c", lim); !r.Allowed {
			t.Fatalf("after lease expiry: %+v", r)
		}
		if err := l.Release(ctx, Lease{}); err != nil {
			t.Fatalf("releasing a zero lease: %v", err)
		}
		if _, _, err := l.Acquire(ctx, "c", Must(GCRA(1, time.Second, 1))); !errors.Is(err, ErrInvalidLimit) {
			t.Fatalf("Acquire with a rate limit: %v", err)
		}
	})
	t.Run("allow all", func(t *testing.T) {
		if _, err := l.AllowAll(ctx, "m", []Limit{Must(GCRA(1, time.Second, 1)), Must(Concurrency(1, time.Second))}, 1); !errors.Is(err, ErrInvalidLimit) {
			t.Fatalf("a concurrency limit: %v", err)
		}
		if _, err := l.AllowAll(ctx, "m", nil, 1); !errors.Is(err, ErrInvalidLimit) {
			t.Fatalf("no limits: %v", err)
		}
		same := Must(GCRA(1, time.Second, 1))
		if _, err := l.AllowAll(ctx, "m", []Limit{same, same}, 1); !errors.Is(err, ErrInvalidLimit) {
			t.Fatalf("repeated limit: %v", err)
		}
		sec := Must(SlidingWindow(3, time.Second)).Named("sec")
		min := Must(SlidingWindow(4, time.Minute)).Named("min")
		var allowed int
		for i := 0; i < 10; i++ {
			r, err := l.AllowAll(ctx, "m", []Limit{sec, min}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				allowed++
			}
			clk.add(400 * time.Millisecond)
			clk.set(m)
		}
		if allowed != 4 {
			t.Fatalf("allowed %d of 10 spread over 4s under 3/s and 4/min; want 4 (the per-minute limit)", allowed)
		}
	})
}

// failingClient answers every command with an error and counts calls.
type failingClient struct {
	rueidis.Client
	calls atomic.Int64
}

func (f *failingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	f.calls.Add(1)
	return rueidis.NewErrorResult(errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
}

func TestFailurePolicies(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	base := miniClient(t, m)
	lim := Must(GCRA(10, time.Second, 2))
	clk := newClock(time.Unix(1_800_000_000, 0))

	for _, tc := range []struct {
		policy    Option
		wantAllow []bool
	}{
		{WithFailurePolicy(FailOpen), []bool{true, true, true, true}},
		{WithFailurePolicy(FailClosed), []bool{false, false, false, false}},
		// 2 replicas: each admits burst 2/2 = 1 from memory.
		{WithReplicas(2), []bool{true, false, false, false}},
	} {
		fc := &failingClient{Client: base}
		var logs bytes.Buffer
		l, err := New(fc, tc.policy, WithClock(clk.now), WithBreaker(3, time.Second),
			WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if err != nil {
			t.Fatal(err)
		}
		name := l.e.cfg.policy.String()
		for i, want := range tc.wantAllow {
			r, err := l.Allow(ctx, "id", lim)
			if err != nil || !r.Degraded || r.Allowed != want {
				t.Fatalf("%s request %d: %+v, %v; want Degraded and allowed=%v", name, i, r, err, want)
			}
		}
		// After 3 failures the breaker is open: the 4th call never reached Redis.
		if n := fc.calls.Load(); n != 3 {
			t.Fatalf("%s: %d calls reached the client, want 3 (breaker threshold)", name, n)
		}
		if !strings.Contains(logs.String(), "circuit breaker open") {
			t.Fatalf("%s: breaker opening not logged: %q", name, logs.String())
		}
		// Once the cooldown passes, the Limiter sends one probe of its own
		// (a PING) while the callers are answered by the policy; Redis
		// still fails, so the breaker opens again.
		clk.add(time.Second)
		for range 2 {
			if r, _ := l.Allow(ctx, "id", lim); !r.Degraded || r.Allowed != tc.wantAllow[0] && name != "fail-local" {
				t.Fatalf("%s: call after the cooldown: %+v", name, r)
			}
		}
		settle(t, l)
		if n := fc.calls.Load(); n != 4 {
			t.Fatalf("%s: %d calls after the cooldown, want exactly one probe (4)", name, n)
		}
		if st := l.e.router.any.breaker.current(); st != breakerOpen {
			t.Fatalf("%s: breaker %v after a failed probe, want open", name, st)
		}
	}

	// A healthy probe closes the breaker again.
	fc := &failingClient{Client: base}
	l, _ := New(fc, WithClock(clk.now), WithBreaker(1, time.Second), WithLogger(nil))
	l.Allow(ctx, "id", lim)
	if l.e.router.any.breaker.current() != breakerOpen {
		t.Fatal("breaker not open after a failure")
	}
	l.e.client = luart.Rueidis(base)
	clk.add(time.Second)
	clk.set(m)
	if r, _ := l.Allow(ctx, "id", lim); !r.Degraded {
		t.Fatalf("the call that starts the probe waits for nothing: %+v", r)
	}
	settle(t, l)
	if l.e.router.any.breaker.current() != breakerClosed {
		t.Fatal("breaker not closed after a good probe")
	}
	if r, _ := l.Allow(ctx, "id", lim); r.Degraded || !r.Allowed {
		t.Fatalf("after the probe: %+v", r)
	}
}

func TestCallerCancellationIsAnError(t *testing.T) {
	m := miniredis.RunT(t)
	l, _ := New(miniClient(t, m), quiet...)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Allow(ctx, "id", Must(GCRA(1, time.Second, 1))); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if l.e.router.any.breaker.current() != breakerClosed {
		t.Fatal("a caller's cancellation must not count against Redis")
	}

	// While the breaker is open a cancelled caller still gets its own
	// error, and the probe is the Limiter's, not a caller's call: the
	// caller's cancellation cannot cut it short.
	fc := &failingClient{Client: miniClient(t, m)}
	clk := newClock(time.Unix(1_800_000_000, 0))
	l, _ = New(fc, WithClock(clk.now), WithBreaker(1, time.Second), WithLogger(nil))
	lim := Must(GCRA(1, time.Second, 1))
	l.Allow(context.Background(), "id", lim)
	clk.add(time.Second)
	if _, err := l.Allow(ctx, "id", lim); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller with the breaker open: %v", err)
	}
	if r, err := l.Allow(context.Background(), "id", lim); err != nil || !r.Degraded {
		t.Fatalf("call after the cooldown: %+v, %v; want the policy's answer at once", r, err)
	}
	settle(t, l)
	if n := fc.calls.Load(); n != 2 {
		t.Fatalf("%d commands reached the client, want 2 (the failure, the probe's PING)", n)
	}
	if st := l.e.router.any.breaker.current(); st != breakerOpen {
		t.Fatalf("breaker %v after a failed probe, want open", st)
	}
}

func TestDeadRedisOpensBreaker(t *testing.T) {
	// A server that accepts no commands: after the breaker opens, decisions
	// come from the policy without waiting for the timeout.
	m := miniredis.RunT(t)
	c := miniClient(t, m)
	l, _ := New(c, WithTimeout(50*time.Millisecond), WithBreaker(2, time.Hour), WithLogger(nil), WithFailurePolicy(FailOpen))
	m.Close()
	lim := Must(GCRA(1, time.Second, 1))
	for i := 0; i < 2; i++ {
		if r, _ := l.Allow(context.Background(), "id", lim); !r.Degraded || !r.Allowed {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	if l.e.router.any.breaker.current() != breakerOpen {
		t.Fatal("breaker not open after two failures")
	}
	r, err := l.Allow(context.Background(), "id", lim)
	if err != nil || !r.Degraded || !r.Allowed {
		t.Fatalf("with the breaker open: %+v, %v", r, err)
	}
}

func TestLimiterOnRealRedisAndCluster(t *testing.T) {
	t.Parallel() // its own servers; no timing it asserts depends on a quiet machine
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
	for name, client := range map[string]rueidis.Client{"standalone": c, "cluster": cc} {
		t.Run(name, func(t *testing.T) {
			l, err := New(client, quiet...) // Redis TIME decides
			if err != nil {
				t.Fatal(err)
			}
			lim := Must(GCRA(3, time.Hour, 3))
			for i := 0; i < 50; i++ {
				id := fmt.Sprintf("user-{%d}\n", i) // hashed identities, spread over slots
				for j := 0; j < 4; j++ {
					r, err := l.Allow(ctx, id, lim)
					if err != nil || r.Degraded || r.Allowed != (j < 3) {
						t.Fatalf("identity %d request %d: %+v, %v", i, j, r, err)
					}
				}
				r, err := l.AllowAll(ctx, id, []Limit{Must(GCRA(2, time.Second, 2)), Must(GCRA(10, time.Hour, 10))}, 1)
				if err != nil || r.Degraded || !r.Allowed {
					t.Fatalf("AllowAll identity %d: %+v, %v", i, r, err)
				}
				lease, r, err := l.Acquire(ctx, id, Must(Concurrency(1, time.Minute)))
				if err != nil || !r.Allowed {
					t.Fatalf("Acquire identity %d: %+v, %v", i, r, err)
				}
				if err := l.Release(ctx, lease); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestLimitBoundsMatchScripts: every limit Validate accepts near the
// arithmetic bounds is also accepted by its script (a refusal would surface
// as an ErrInvalidLimit error here).
func TestLimitBoundsMatchScripts(t *testing.T) {
	m := miniredis.RunT(t)
	l, _ := New(miniClient(t, m), WithTimeout(time.Minute), WithFailurePolicy(FailClosed), WithClock(func() time.Time { return time.Unix(1_800_000_000, 0) }))
	for _, lim := range []Limit{
		Must(GCRA(1_000_000, 24*time.Hour, 1_000_000)),
		Must(GCRA(3, 24*time.Hour, 52_000)),
		Must(TokenBucket(1_000_000, 24*time.Hour, 1_000_000)),
		Must(SlidingWindow(52_000, 24*time.Hour)),
		Must(FixedWindow(maxRate, maxPeriod)),
		Must(SlidingLog(10, maxPeriod)),
	} {
		r, err := l.AllowN(context.Background(), "bounds", lim, 1)
		if err != nil || r.Degraded || !r.Allowed {
			t.Errorf("%s: %+v, %v", lim.Name, r, err)
		}
	}
}

// commandLog wraps a client and records the name of every command sent.
type commandLog struct {
	rueidis.Client
	mu    sync.Mutex
	names []string
}

func (c *commandLog) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.mu.Lock()
	c.names = append(c.names, cmd.Commands()[0])
	c.mu.Unlock()
	return c.Client.Do(ctx, cmd)
}

func (c *commandLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.names
	c.names = nil
	return out
}

// TestOneEvalshaPerDecision: once the scripts are loaded, every decision is
// exactly one EVALSHA round trip, multi-limit and concurrency calls included.
func TestOneEvalshaPerDecision(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	log := &commandLog{Client: miniClient(t, m)}
	l, _ := New(log, quiet...)
	conc := Must(Concurrency(3, time.Minute))
	var lease Lease
	decisions := []struct {
		name   string
		decide func()
	}{
		{"fixed window", func() { l.Allow(ctx, "u", Must(FixedWindow(5, time.Second))) }},
		{"sliding log", func() { l.Allow(ctx, "u", Must(SlidingLog(5, time.Second))) }},
		{"sliding window", func() { l.AllowN(ctx, "u", Must(SlidingWindow(5, time.Second)), 2) }},
		{"token bucket", func() { l.Peek(ctx, "u", Must(TokenBucket(5, time.Second, 5))) }},
		{"gcra", func() { l.Allow(ctx, "u", Must(GCRA(5, time.Second, 5))) }},
		{"allow all", func() { l.AllowAll(ctx, "u", []Limit{Must(GCRA(5, time.Second, 5)), Must(GCRA(50, time.Hour, 50))}, 1) }},
		{"acquire", func() { lease, _, _ = l.Acquire(ctx, "u", conc) }},
		{"release", func() { l.Release(ctx, lease) }},
	}
	for _, d := range decisions {
		d.decide() // the first call may load the script (EVALSHA, then EVAL)
	}
	log.take()
	for _, d := range decisions {
		d.decide()
		if got := log.take(); len(got) != 1 || got[0] != "EVALSHA" {
			t.Errorf("%s: sent %v, want exactly one EVALSHA", d.name, got)
		}
	}
}

func TestCeilMicros(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{0, 0}, {1, time.Microsecond}, {1200 * time.Nanosecond, 2 * time.Microsecond}, {time.Microsecond, time.Microsecond},
		{-300 * time.Nanosecond, 0}, {-1300 * time.Nanosecond, -time.Microsecond}, {-time.Microsecond, -time.Microsecond},
	} {
		if got := ceilMicros(c.in); got != c.want {
			t.Errorf("ceilMicros(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
