package ratepolicy

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/overrides"
)

// stubOverrides answers Lookup from a map of policy and identity.
type stubOverrides map[[2]string]overrides.Override

func (s stubOverrides) Lookup(_ context.Context, policy, identity string) (overrides.Override, bool) {
	o, ok := s[[2]string{policy, identity}]
	return o, ok
}

// overrideEngine is an Engine on a miniredis Limiter driven by a virtual
// clock, over the policies "a" (key ka), "b" (key kb) and "c" (key kc),
// each 10 per minute, with ovr; checks records what reached the Limiter.
type overrideEngine struct {
	e      *Engine[string]
	now    time.Time
	checks []sluice.Check
	logs   bytes.Buffer
}

func newOverrideEngine(t *testing.T, ovr Overrides, policies ...Policy[string]) *overrideEngine {
	t.Helper()
	start := time.Unix(1_700_000_040, 0) // on a whole minute
	mr := miniredis.RunT(t)
	mr.SetTime(start)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	oe := &overrideEngine{now: start}
	clock := func() time.Time { return oe.now }
	lim, err := sluice.New(client, sluice.WithLogger(nil), sluice.WithClock(clock), sluice.WithSilenceTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	if policies == nil {
		policies = []Policy[string]{
			{Name: "a", Limit: gcra(10, time.Minute, 10), Key: fixed("ka")},
			{Name: "b", Limit: gcra(10, time.Minute, 10), Key: fixed("kb")},
			{Name: "c", Limit: gcra(10, time.Minute, 10), Key: fixed("kc"), Shadow: true},
		}
	}
	oe.e, err = New(Config[string]{Pkg: "test", Limiter: lim, Policies: policies, Overrides: ovr, Clock: clock,
		Logger: slog.New(slog.NewTextHandler(&oe.logs, nil)),
		Decide: func(ctx context.Context, d *sluice.Decision, checks ...sluice.Check) error {
			oe.checks = append(oe.checks[:0], checks...)
			return lim.DecideInto(ctx, d, checks...)
		}})
	if err != nil {
		t.Fatal(err)
	}
	return oe
}

func (oe *overrideEngine) decide(t *testing.T) *Decision[string] {
	t.Helper()
	oe.checks = oe.checks[:0]
	d := new(Decision[string])
	ctx := context.Background()
	if err := oe.e.Decide(ctx, "req", oe.e.Applicable("req", nil), AllPolicies, d); err != nil {
		t.Fatal(err)
	}
	oe.e.Settle(ctx, d, "/")
	return d
}

func names(d *Decision[string]) string {
	var s []string
	for _, o := range d.Outcomes {
		s = append(s, o.P.Name)
	}
	return strings.Join(s, ",")
}

// TestOverrideExempt: an exempt identity's policy makes no check and is
// not reported; the others are decided as usual.
func TestOverrideExempt(t *testing.T) {
	oe := newOverrideEngine(t, stubOverrides{{"b", "kb"}: {Policy: "b", Identity: "kb", Kind: overrides.Exempt}})
	d := oe.decide(t)
	if names(d) != "a,c" || len(oe.checks) != 2 || oe.checks[0].Identity != "ka" || oe.checks[1].Identity != "kc" {
		t.Fatalf("outcomes %s, checks %+v; want a and c only", names(d), oe.checks)
	}
	b, draft := AppendDraft(nil, d.Outcomes, nil)
	if p, rl := draft.Values(string(b)); p != `"a";q=10;w=60, "c";q=10;w=60` || rl != `"a";r=9;t=6, "c";r=9;t=6` {
		t.Fatalf("RateLimit-Policy %s, RateLimit %s", p, rl)
	}
}

// TestOverrideBlock: a blocked identity is denied without asking Redis,
// with a wait until the override's Until, capped at MaxBlockWait; the
// request's other policies are then neither asked nor charged. Under a
// shadow policy the block is only reported.
func TestOverrideBlock(t *testing.T) {
	ovr := stubOverrides{}
	oe := newOverrideEngine(t, ovr)
	ovr[[2]string{"a", "ka"}] = overrides.Override{Policy: "a", Identity: "ka", Kind: overrides.Block, Until: oe.now.Add(90 * time.Second)}
	oe.checks = append(oe.checks[:0], sluice.Check{Identity: "sentinel"})
	d := oe.decide(t)
	if names(d) != "a" || len(oe.checks) != 0 {
		t.Fatalf("outcomes %s, checks %+v; want a blocked and no check", names(d), oe.checks)
	}
	a := d.Outcomes[0]
	if !a.Denied || a.Override != overrides.Block || a.Result.RetryAfter != 90*time.Second || a.Result.Remaining != 0 || a.Limit != a.P.Limit {
		t.Fatalf("blocked outcome %+v", a)
	}
	if !d.Denied || d.Wait != 90 || d.Unavailable {
		t.Fatalf("decision denied %v wait %d unavailable %v", d.Denied, d.Wait, d.Unavailable)
	}
	b, draft := AppendDraft(nil, d.Outcomes, nil)
	if p, rl := draft.Values(string(b)); p != `"a";q=10;w=60` || rl != `"a";r=0;t=90` {
		t.Fatalf("RateLimit-Policy %s, RateLimit %s", p, rl)
	}

	// No end, or an end past the cap: MaxBlockWait.
	ovr[[2]string{"a", "ka"}] = overrides.Override{Policy: "a", Identity: "ka", Kind: overrides.Block}
	if w := oe.decide(t).Outcomes[0].Result.RetryAfter; w != MaxBlockWait {
		t.Fatalf("endless block waits %v, want %v", w, MaxBlockWait)
	}
	ovr[[2]string{"a", "ka"}] = overrides.Override{Policy: "a", Identity: "ka", Kind: overrides.Block, Until: oe.now.Add(48 * time.Hour)}
	if w := oe.decide(t).Outcomes[0].Result.RetryAfter; w != MaxBlockWait {
		t.Fatalf("a two-day block waits %v, want %v", w, MaxBlockWait)
	}
	// b was never charged: its 10 are whole once the block is gone.
	delete(ovr, [2]string{"a", "ka"})
	if d := oe.decide(t); d.Denied || d.Outcomes[1].Result.Remaining != 9 {
		t.Fatalf("after the block: %+v; want b with 9 left after this request", d.Outcomes)
	}

	// A block under a shadow policy alone is a shadow denial: the others
	// are decided as usual.
	ovr[[2]string{"c", "kc"}] = overrides.Override{Policy: "c", Identity: "kc", Kind: overrides.Block}
	d = oe.decide(t)
	if d.Denied || names(d) != "a,b,c" || len(oe.checks) != 2 || !d.Outcomes[2].Denied || !d.Outcomes[2].Shadow {
		t.Fatalf("shadow policy blocked: denied %v, outcomes %+v, checks %+v", d.Denied, d.Outcomes, oe.checks)
	}
	if !strings.Contains(oe.logs.String(), "shadow policy would deny") {
		t.Fatalf("shadow block not logged: %s", oe.logs.String())
	}
}

// TestOverrideLimit: a Limit override replaces the rate, period and burst
// of its policy's check (algorithm and name kept, so the state in Redis is
// the same), and the headers report the limit applied.
func TestOverrideLimit(t *testing.T) {
	ovr := stubOverrides{{"a", "ka"}: {Policy: "a", Identity: "ka", Kind: overrides.Limit, Rate: 2, Period: 2 * time.Minute}}
	oe := newOverrideEngine(t, ovr, Policy[string]{Name: "a", Limit: gcra(10, time.Minute, 10).Named("plan"), Key: fixed("ka")})
	d := oe.decide(t)
	want := sluice.Limit{Algorithm: sluice.AlgGCRA, Rate: 2, Period: 2 * time.Minute, Burst: 10, Name: "plan"}
	if len(oe.checks) != 1 || oe.checks[0].Limit != want || d.Outcomes[0].Limit != want || d.Outcomes[0].Override != overrides.Limit {
		t.Fatalf("check %+v, outcome %+v; want the limit %+v", oe.checks, d.Outcomes[0], want)
	}
	b, draft := AppendDraft(nil, d.Outcomes, nil)
	if p, _ := draft.Values(string(b)); p != `"a";q=2;w=120` {
		t.Fatalf("RateLimit-Policy %s, want the applied limit's", p)
	}
	// A cost that never fits waits the applied window.
	if got := ResetSecondsOf(d.Outcomes[0].P, sluice.Result{Limit: want, RetryAfter: sluice.RetryNever}, true); got != 120 {
		t.Fatalf("t of a cost that never fits: %d, want 120", got)
	}

	// An override that makes no valid limit of the policy's is ignored
	// (logged once a minute): the plan applies.
	ovr[[2]string{"a", "ka"}] = overrides.Override{Policy: "a", Identity: "ka", Kind: overrides.Limit, Rate: 3, Period: time.Nanosecond}
	for range 3 {
		d = oe.decide(t)
		if oe.checks[0].Limit != oe.e.base[0].Limit || d.Outcomes[0].Override != 0 {
			t.Fatalf("an unusable override applied: %+v", oe.checks[0].Limit)
		}
	}
	if n := strings.Count(oe.logs.String(), "override ignored"); n != 1 {
		t.Fatalf("%d log lines for an unusable override, want 1:\n%s", n, oe.logs.String())
	}
}

// TestOverrideRaisesCachedDenial: raising an identity's limit takes
// effect on its next request even while the Limiter's denial cache holds
// a denial under the old numbers, and removing the override restores the
// plan's limit, cached denial or not.
func TestOverrideRaisesCachedDenial(t *testing.T) {
	ovr := stubOverrides{}
	plan := sluice.Must(sluice.FixedWindow(1, time.Hour)).Named("plan")
	oe := newOverrideEngine(t, ovr, Policy[string]{Name: "a", Limit: plan, Key: fixed("ka")})
	if d := oe.decide(t); d.Denied {
		t.Fatal("first request denied")
	}
	if d := oe.decide(t); !d.Denied {
		t.Fatal("second request of a 1-per-hour plan admitted")
	}
	if d := oe.decide(t); !d.Denied {
		t.Fatal("third request admitted")
	}
	ovr[[2]string{"a", "ka"}] = overrides.Override{Policy: "a", Identity: "ka", Kind: overrides.Limit, Rate: 3}
	for i := range 2 {
		if d := oe.decide(t); d.Denied {
			t.Fatalf("request %d under the raised limit (3 per hour, 1 used) denied: %+v", i+1, d.Outcomes[0].Result)
		}
	}
	if d := oe.decide(t); !d.Denied {
		t.Fatal("a fourth request in the hour admitted under a limit of 3")
	}
	delete(ovr, [2]string{"a", "ka"})
	if d := oe.decide(t); !d.Denied || d.Outcomes[0].Limit != plan {
		t.Fatalf("after removal: %+v; want the plan's denial", d.Outcomes)
	}
}
