package httplimit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/allocs"
	"github.com/sluice-go/sluice/internal/canned"
)

// cannedLimiter is a Limiter on miniredis whose script replies are canned
// after the first: what it costs in the process, without the round trip.
func cannedLimiter(t testing.TB) *sluice.Limiter {
	t.Helper()
	mr := miniredis.RunT(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, ForceSingleClient: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	lim, err := sluice.New(canned.New(client),
		sluice.WithTimeout(time.Minute), sluice.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	// Can the replies now (EVALSHA, NOSCRIPT, EVAL, EVALSHA), so that
	// nothing runs in miniredis, in this process, while allocations are
	// counted.
	l := sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named("warm-up")
	for range 3 {
		if _, err := lim.AllowN(context.Background(), "warm-up", l, 1); err != nil {
			t.Fatal(err)
		}
	}
	return lim
}

// headerWriter is a ResponseWriter that keeps only its headers.
type headerWriter struct{ h http.Header }

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerWriter) WriteHeader(int)             {}

// The middleware's own allocations per allowed request, on top of the
// Limiter calls it makes: the IP key, the text of the header values and
// the []string they share (the Decision is recycled).
const (
	allocBudgetOnePolicy   = 3
	allocBudgetTwoPolicies = 3
)

// TestAllocations pins what the middleware allocates itself on the hot
// path (allowed requests), counting the Limiter's own work out: a
// regression here costs every request of every user.
func TestAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	lim := cannedLimiter(t)
	big := func(name string) sluice.Limit { return sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named(name) }
	const tries, runs = 5, 1000 // the least of five counts: background goroutines only add
	ctx := context.Background()
	// What the Limiter allocates for the request's batch: one check per
	// policy, decided into a Decision kept across requests, as the
	// middleware does.
	limiterAllocs := func(limits ...sluice.Limit) float64 {
		var d sluice.Decision
		checks := make([]sluice.Check, len(limits))
		for i, l := range limits {
			checks[i] = sluice.Check{Identity: "ip:192.0.2.1" + strconv.Itoa(i), Limit: l, Cost: 1}
		}
		return allocs.PerRun(tries, runs, func() {
			if err := lim.DecideInto(ctx, &d, checks...); err != nil || !d.Allowed {
				t.Fatalf("%+v %v", d, err)
			}
		})
	}
	one, two := limiterAllocs(big("a")), limiterAllocs(big("a"), big("b"))

	for _, tc := range []struct {
		name     string
		cfg      Config
		wrap     bool // Middleware.Wrap instead of Handler
		two      bool // two policies: the Limiter's batch has two checks
		budget   int
		wantHdrs []string
	}{
		{name: "one policy, draft headers", budget: allocBudgetOnePolicy,
			cfg:      Config{Policies: []Policy{{Name: "a", Limit: big("a"), Key: RemoteIP()}}},
			wantHdrs: []string{"Ratelimit", "Ratelimit-Policy"}},
		{name: "one policy, both header sets, Wrap", budget: allocBudgetOnePolicy, wrap: true,
			cfg:      Config{Policies: []Policy{{Name: "a", Limit: big("a"), Key: RemoteIP()}}, Headers: HeadersBoth},
			wantHdrs: []string{"Ratelimit", "Ratelimit-Policy", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}},
		// Two policies: one batch of two checks.
		{name: "two policies, draft headers", two: true, budget: allocBudgetTwoPolicies,
			cfg: Config{Policies: []Policy{{Name: "a", Limit: big("a"), Key: RemoteIP()},
				{Name: "b", Limit: big("b"), Key: Constant("b")}}},
			wantHdrs: []string{"Ratelimit", "Ratelimit-Policy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Limiter, tc.cfg.Logger = lim, quiet
			m := newMW(t, tc.cfg)
			var h http.Handler
			if tc.wrap {
				mux := http.NewServeMux()
				mux.HandleFunc("GET /{$}", func(http.ResponseWriter, *http.Request) {})
				h = m.Wrap(mux)
			} else {
				h = m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			}
			r, _ := http.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			w := &headerWriter{h: http.Header{}}
			got := allocs.PerRun(tries, runs, func() {
				clear(w.h)
				h.ServeHTTP(w, r)
			})
			for _, k := range tc.wantHdrs {
				if len(w.h[k]) != 1 {
					t.Fatalf("header %s = %q, want one value (all headers %q)", k, w.h[k], w.h)
				}
			}
			limiter := one
			if tc.two {
				limiter = two
			}
			own := got - limiter
			t.Logf("%.0f allocations per request, %.0f the Limiter's batch: %.0f the middleware's own", got, limiter, own)
			if own > float64(tc.budget) {
				t.Errorf("the middleware allocates %.0f times per request on top of the Limiter, want at most %d", own, tc.budget)
			}
		})
	}
}

// TestSharedHeaderValues checks that a handler changing the rate-limit
// headers it was given (appending a value, or overwriting one in place)
// changes neither another rate-limit header of its response nor those of
// later responses.
func TestSharedHeaderValues(t *testing.T) {
	e := newTestEnv(t)
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock, Headers: HeadersBoth, Policies: []Policy{
		{Name: "a", Limit: testLimit.Named("a"), Key: RemoteIP()},
	}})
	tamper := true
	var inHandler http.Header
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if tamper {
			hd := w.Header()
			hd.Add("RateLimit-Policy", "x")
			hd.Add("X-RateLimit-Limit", "x")
			hd["Ratelimit"][0] = "y"
			hd["X-Ratelimit-Remaining"] = append(hd["X-Ratelimit-Remaining"], "z")
			inHandler = hd.Clone()
		}
	}))
	r, _ := http.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	first := serve(h, r).Result().Header
	want := map[string][]string{
		"Ratelimit-Policy":      {`"a";q=2;w=60`, "x"},
		"Ratelimit":             {"y"},
		"X-Ratelimit-Limit":     {"2", "x"},
		"X-Ratelimit-Remaining": {"1", "z"},
		"X-Ratelimit-Reset":     {"1700000040"},
	}
	for k, v := range want {
		if !slices.Equal(first[k], v) || !slices.Equal(inHandler[k], v) {
			t.Errorf("tampered response: %s = %q (in the handler %q), want %q", k, first[k], inHandler[k], v)
		}
	}
	tamper = false
	second := serve(h, r).Result().Header
	want = map[string][]string{
		"Ratelimit-Policy":      {`"a";q=2;w=60`},
		"Ratelimit":             {`"a";r=0;t=40`},
		"X-Ratelimit-Limit":     {"2"},
		"X-Ratelimit-Remaining": {"0"},
		"X-Ratelimit-Reset":     {"1700000040"},
	}
	for k, v := range want {
		if !slices.Equal(second[k], v) {
			t.Errorf("next response: %s = %q, want %q", k, second[k], v)
		}
	}
}

// TestDenyHandlerKeepsDecision checks that the Decision a DenyHandler was
// given stays as it was while later requests are decided: only the
// Decisions of requests that pass are reused.
func TestDenyHandlerKeepsDecision(t *testing.T) {
	e := newTestEnv(t)
	var kept []*Decision
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock, Policies: []Policy{
		{Name: "a", Limit: testLimit.Named("a"), Key: RemoteIP()},
	}, DenyHandler: func(w http.ResponseWriter, _ *http.Request, d *Decision) {
		kept = append(kept, d)
		w.WriteHeader(d.Status)
	}})
	h := m.Handler(http.HandlerFunc(okHandler))
	get := func(addr string) int {
		r, _ := http.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		return serve(h, r).Code
	}
	for i, want := range []int{200, 200, 429} {
		if code := get("192.0.2.1:1"); code != want {
			t.Fatalf("request %d: status %d, want %d", i+1, code, want)
		}
	}
	for range 10 {
		if code := get("192.0.2.2:1"); code == 0 {
			t.Fatal("no status")
		}
	}
	if len(kept) != 9 {
		t.Fatalf("%d denials, want 9 (1 + 8)", len(kept))
	}
	d := kept[0]
	if d.Status != 429 || len(d.Outcomes) != 1 || d.Outcomes[0].Identity != "ip:192.0.2.1" ||
		!d.Outcomes[0].Denied || d.Outcomes[0].Result.Remaining != 0 || d.RetryAfter != 40*time.Second {
		t.Errorf("kept decision changed: %+v", d)
	}
}

// TestWriteHeadersEverySet checks a decision that gets every header at
// once (both header sets, partition keys, a denial and the degraded
// header): each header has its own value, one-element and capped.
func TestWriteHeadersEverySet(t *testing.T) {
	e := newTestEnv(t)
	secret := []byte("0123456789abcdef")
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock, Headers: HeadersBoth, PartitionKeySecret: secret, DegradedHeader: "X-Degraded",
		Policies: []Policy{
			{Name: "a", Limit: testLimit.Named("a"), Key: RemoteIP()},
			{Name: "b", Limit: sluice.Must(sluice.FixedWindow(5, time.Minute)).Named("b"), Key: RemoteIP()},
		}})
	r, _ := http.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	var d *Decision
	st := m.cur.Load()
	for range 3 {
		if d = st.decide(r, "/", nil); d.err != nil {
			t.Fatal(d.err)
		}
	}
	d.Degraded = true
	h := http.Header{"Retry-After": {"stale"}}
	st.writeHeaders(h, d)
	pk := func(policy, key string) string {
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(policy + "\x00" + key))
		return ";pk=:" + base64.StdEncoding.EncodeToString(mac.Sum(nil)[:12]) + ":"
	}
	pa, pb := pk("a", "ip:192.0.2.1"), pk("b", "ip:192.0.2.1")
	want := http.Header{
		"Ratelimit-Policy":      {`"a";q=2;w=60` + pa + `, "b";q=5;w=60` + pb},
		"Ratelimit":             {`"a";r=0;t=40` + pa + `, "b";r=3;t=40` + pb},
		"X-Ratelimit-Limit":     {"2"},
		"X-Ratelimit-Remaining": {"0"},
		"X-Ratelimit-Reset":     {"1700000040"},
		"Retry-After":           {"40"},
		"X-Degraded":            {"?1"},
	}
	if len(h) != len(want) {
		t.Errorf("headers %q, want %q", h, want)
	}
	for k, v := range want {
		if !slices.Equal(h[k], v) || cap(h[k]) != 1 {
			t.Errorf("%s = %q (cap %d), want %q", k, h[k], cap(h[k]), v)
		}
	}
}
