package httplimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/sluice-go/sluice"
)

func okHandler(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }

func newMW(t *testing.T, cfg Config) *Middleware {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func TestConfigErrors(t *testing.T) {
	lim := testLimiter(t)
	p := Policy{Name: "p", Limit: testLimit, Key: RemoteIP()}
	cases := map[string]Config{
		"no limiter":        {Policies: []Policy{p}},
		"no policies":       {Limiter: lim},
		"no key":            {Limiter: lim, Policies: []Policy{{Limit: testLimit}}},
		"bad limit":         {Limiter: lim, Policies: []Policy{{Limit: sluice.Limit{Algorithm: sluice.AlgGCRA}, Key: RemoteIP()}}},
		"bad name":          {Limiter: lim, Policies: []Policy{{Name: "bad\nname", Limit: testLimit, Key: RemoteIP()}}},
		"long name":         {Limiter: lim, Policies: []Policy{{Name: strings.Repeat("n", 65), Limit: testLimit, Key: RemoteIP()}}},
		"duplicate":         {Limiter: lim, Policies: []Policy{p, p}},
		"route duplicate":   {Limiter: lim, Policies: []Policy{p}, Routes: map[string][]Policy{"GET /x": {p}}},
		"tier duplicate":    {Limiter: lim, Policies: []Policy{p}, Tiers: map[string][]Policy{"t": {p}}, DefaultTier: "t", Tier: func(*http.Request) string { return "t" }},
		"route/tier clash":  {Limiter: lim, Routes: map[string][]Policy{"GET /x": {p}}, Tiers: map[string][]Policy{"t": {p}}, DefaultTier: "t", Tier: func(*http.Request) string { return "t" }},
		"empty route":       {Limiter: lim, Routes: map[string][]Policy{"": {p}}},
		"tiers without fn":  {Limiter: lim, Tiers: map[string][]Policy{"t": {p}}, DefaultTier: "t"},
		"unknown default":   {Limiter: lim, Tiers: map[string][]Policy{"t": {p}}, DefaultTier: "x", Tier: func(*http.Request) string { return "t" }},
		"header mode":       {Limiter: lim, Policies: []Policy{p}, Headers: HeaderMode(7)},
		"short secret":      {Limiter: lim, Policies: []Policy{p}, PartitionKeySecret: []byte("short")},
		"bad degraded name": {Limiter: lim, Policies: []Policy{p}, DegradedHeader: "Bad Header"},
	}
	for name, cfg := range cases {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
	// the same policy on two routes (never applied together) is fine
	if _, err := New(Config{Limiter: lim, Routes: map[string][]Policy{"GET /a": {p}, "GET /b": {p}}}); err != nil {
		t.Errorf("one policy on two routes: %v", err)
	}
}

// Handler reads Request.Pattern: wrapped per route, the route's policies
// apply; around the whole mux the pattern is unknown (use Wrap).
func TestHandlerUsesPattern(t *testing.T) {
	e := newTestEnv(t)
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock, Routes: map[string][]Policy{
		"GET /items/{id}": {{Name: "items", Limit: testLimit, Key: RemoteIP()}},
	}})
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", m.Handler(http.HandlerFunc(okHandler)))
	mux.Handle("GET /other", m.Handler(http.HandlerFunc(okHandler)))
	if rec := serve(mux, httptest.NewRequest("GET", "/items/1", nil)); rec.Header().Get("RateLimit") != `"items";r=1;t=40` {
		t.Errorf("per-route handler: RateLimit %q", rec.Header().Get("RateLimit"))
	}
	if rec := serve(mux, httptest.NewRequest("GET", "/other", nil)); rec.Header().Get("RateLimit") != "" || rec.Code != 200 {
		t.Errorf("route without policies: %d %q", rec.Code, rec.Header().Get("RateLimit"))
	}
	plain := http.NewServeMux()
	plain.HandleFunc("GET /items/{id}", okHandler)
	outer := m.Handler(plain) // Pattern is still empty out here
	if rec := serve(outer, httptest.NewRequest("GET", "/items/1", nil)); rec.Header().Get("RateLimit") != "" {
		t.Errorf("outside the mux the route is unknown, got RateLimit %q", rec.Header().Get("RateLimit"))
	}
	if rec := serve(m.Wrap(plain), httptest.NewRequest("GET", "/items/1", nil)); rec.Header().Get("RateLimit") != `"items";r=0;t=40` {
		t.Errorf("Wrap: RateLimit %q", rec.Header().Get("RateLimit"))
	}
}

// A concurrency policy denies while its slots are taken and frees them when
// the handler returns or panics.
func TestConcurrencySlots(t *testing.T) {
	e := newTestEnv(t)
	conc := sluice.Must(sluice.Concurrency(1, time.Minute)).Named("in-flight")
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock, Policies: []Policy{{Limit: conc, Key: RemoteIP()}}})
	var inner *httptest.ResponseRecorder
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("nested") == "1" {
			inner = serve(m.Handler(http.HandlerFunc(okHandler)), httptest.NewRequest("GET", "/", nil))
		}
		if r.URL.Query().Get("panic") == "1" {
			panic("boom")
		}
		okHandler(w, r)
	}))
	if rec := serve(h, httptest.NewRequest("GET", "/?nested=1", nil)); rec.Code != 200 {
		t.Fatalf("outer request: %d", rec.Code)
	}
	if inner.Code != http.StatusTooManyRequests || inner.Header().Get("RateLimit") != `"in-flight";r=0;t=60` {
		t.Errorf("second request while the slot is held: %d %q", inner.Code, inner.Header().Get("RateLimit"))
	}
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("panic not passed on: %v", v)
			}
		}()
		serve(h, httptest.NewRequest("GET", "/?panic=1", nil))
	}()
	if rec := serve(h, httptest.NewRequest("GET", "/", nil)); rec.Code != 200 {
		t.Errorf("after a panicking handler the slot is still taken: %d", rec.Code)
	}
	// a cancelled request still releases its slot
	ctx, cancel := context.WithCancel(context.Background())
	hc := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { cancel() }))
	serve(hc, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	if rec := serve(h, httptest.NewRequest("GET", "/", nil)); rec.Code != 200 {
		t.Errorf("after a cancelled request the slot is still taken: %d", rec.Code)
	}
}

// A rate policy that denies leaves the concurrency slot free: it is taken
// in the same round trip and given back with the denial.
func TestConcurrencyAfterRate(t *testing.T) {
	e := newTestEnv(t)
	conc := sluice.Must(sluice.Concurrency(5, time.Minute)).Named("in-flight")
	rate := sluice.Must(sluice.FixedWindow(1, time.Minute)).Named("rate")
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock, Policies: []Policy{{Limit: conc, Key: RemoteIP()}, {Limit: rate, Key: RemoteIP()}}})
	h := m.Handler(http.HandlerFunc(okHandler))
	serve(h, httptest.NewRequest("GET", "/", nil))
	rec := serve(h, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 429 {
		t.Fatalf("status %d", rec.Code)
	}
	// in-flight admitted and was given back: all 5 slots are free
	if got := rec.Header().Get("RateLimit"); got != `"in-flight";r=5, "rate";r=0;t=40` {
		t.Errorf("RateLimit %q", got)
	}
	for _, k := range e.mr.Keys() {
		if strings.Contains(k, "in-flight") {
			t.Errorf("slot still held after the denial: %s", k)
		}
	}
}

func TestLimiterErrorsStayPrivate(t *testing.T) {
	e := newTestEnv(t)
	var logs bytes.Buffer
	m := newMW(t, Config{Limiter: e.lim, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Policies: []Policy{{Name: "p", Limit: testLimit, Key: RemoteIP(), Cost: func(*http.Request) int64 { return sluice.MaxCost + 1 }}}})
	rec := serve(m.Handler(http.HandlerFunc(okHandler)), httptest.NewRequest("GET", "/", nil))
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "cost") || !strings.Contains(rec.Body.String(), `"type":"about:blank"`) {
		t.Errorf("limiter error answered %d %q", rec.Code, rec.Body.String())
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "cost") {
		t.Errorf("limiter error not logged: %q", logs.String())
	}
	m = newMW(t, Config{Limiter: e.lim, Policies: []Policy{{Name: "p", Limit: testLimit, Key: RemoteIP(), Cost: func(*http.Request) int64 { return -1 }}}})
	if rec := serve(m.Handler(http.HandlerFunc(okHandler)), httptest.NewRequest("GET", "/", nil)); rec.Code != 500 {
		t.Errorf("negative cost answered %d", rec.Code)
	}
}

func TestDenyHandlerAndProblem(t *testing.T) {
	e := newTestEnv(t)
	var got *Decision
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock,
		Policies: []Policy{{Name: "p", Limit: sluice.Must(sluice.FixedWindow(1, time.Minute)), Key: RemoteIP()}},
		DenyHandler: func(w http.ResponseWriter, r *http.Request, d *Decision) {
			got = d
			w.WriteHeader(d.Status)
			_, _ = w.Write([]byte("custom"))
		}})
	h := m.Handler(http.HandlerFunc(okHandler))
	serve(h, httptest.NewRequest("GET", "/a", nil))
	rec := serve(h, httptest.NewRequest("GET", "/a%20b", nil))
	if rec.Code != 429 || rec.Body.String() != "custom" || rec.Header().Get("Retry-After") != "40" {
		t.Fatalf("custom deny: %d %q Retry-After %q", rec.Code, rec.Body.String(), rec.Header().Get("Retry-After"))
	}
	if got == nil || got.RetryAfter != 40*time.Second || len(got.Violated()) != 1 || got.Violated()[0] != "p" {
		t.Fatalf("decision %+v", got)
	}
	p := got.Problem(httptest.NewRequest("GET", "/a%20b", nil))
	b, _ := json.Marshal(p)
	want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota exceeded","status":429,"detail":"Quota exceeded for p (1 per 60 s); retry in 40 s.","instance":"/a%20b","violated-policies":["p"]}`
	if string(b) != want {
		t.Errorf("problem\n%s\nwant\n%s", b, want)
	}
}

func TestTierDefaultAndShadowLog(t *testing.T) {
	e := newTestEnv(t)
	var logs bytes.Buffer
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Tiers: map[string][]Policy{
			"anon": {{Name: "anon", Limit: sluice.Must(sluice.FixedWindow(1, time.Minute)).Named("anon"), Key: RemoteIP(), Shadow: true}},
			"pro":  {{Name: "pro", Limit: sluice.Must(sluice.FixedWindow(9, time.Minute)).Named("pro"), Key: RemoteIP()}},
		},
		DefaultTier: "anon",
		Tier:        func(r *http.Request) string { return r.Header.Get("X-Tier") }, // tests only: never trust a client's header for a tier
	})
	h := m.Handler(http.HandlerFunc(okHandler))
	for i := 0; i < 3; i++ {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Tier", "platinum") // unknown: the default tier
		if rec := serve(h, r); rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("RateLimit"), `"anon";`) {
			t.Fatalf("request %d: %d %q", i, rec.Code, rec.Header().Get("RateLimit"))
		}
	}
	if n := strings.Count(logs.String(), "shadow policy would deny"); n != 2 {
		t.Errorf("%d shadow denials logged, want 2:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "192.0.2.1") {
		t.Errorf("the identity was logged: %s", logs.String())
	}
}

func TestPartitionKeyAndDegradedHeader(t *testing.T) {
	e := newTestEnv(t)
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock, PartitionKeySecret: []byte("0123456789abcdef"), DegradedHeader: "X-Limiter-Degraded",
		Policies: []Policy{{Name: "p", Limit: testLimit, Key: RemoteIP()}}})
	h := m.Handler(http.HandlerFunc(okHandler))
	a := serve(h, httptest.NewRequest("GET", "/", nil)).Header().Get("RateLimit")
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "198.51.100.9:1"
	rec := serve(h, r)
	b := rec.Header().Get("RateLimit")
	pk := func(s string) string { return s[strings.Index(s, ";pk="):] }
	if !strings.Contains(a, ";pk=:") || pk(a) == pk(b) || strings.Contains(a, "192.0.2.1") {
		t.Errorf("partition keys %q and %q", a, b)
	}
	if rec.Header().Get("X-Limiter-Degraded") != "" {
		t.Error("degraded header on a healthy decision")
	}
}

type recordingCounter struct {
	metric.Int64Counter
	adds map[string]int64
}

func (c *recordingCounter) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	cfg := metric.NewAddConfig(opts)
	set := cfg.Attributes()
	p, _ := set.Value(attribute.Key("sluice.policy"))
	o, _ := set.Value(attribute.Key("sluice.http.outcome"))
	c.adds[p.AsString()+"/"+o.AsString()] += n
}

type recordingMeter struct {
	noop.Meter
	c *recordingCounter
}

func (m recordingMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return m.c, nil
}

type recordingProvider struct {
	noop.MeterProvider
	m recordingMeter
}

func (p recordingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return p.m }

func TestMetrics(t *testing.T) {
	e := newTestEnv(t)
	c := &recordingCounter{adds: map[string]int64{}}
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock, MeterProvider: recordingProvider{m: recordingMeter{c: c}},
		Policies: []Policy{
			{Name: "enforced", Limit: sluice.Must(sluice.FixedWindow(2, time.Minute)).Named("e"), Key: RemoteIP()},
			{Name: "trial", Limit: sluice.Must(sluice.FixedWindow(1, time.Minute)).Named("t"), Key: RemoteIP(), Shadow: true},
		}})
	h := m.Handler(http.HandlerFunc(okHandler))
	for i := 0; i < 3; i++ {
		serve(h, httptest.NewRequest("GET", "/", nil))
	}
	want := map[string]int64{"enforced/allowed": 2, "enforced/denied": 1, "trial/allowed": 1, "trial/shadow_denied": 2}
	for k, v := range want {
		if c.adds[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, c.adds[k], v, c.adds)
		}
	}
}

// Route keys may name a method; the method's entry wins over the bare one.
func TestRouteKeysWithMethods(t *testing.T) {
	e := newTestEnv(t)
	lim := func(name string) sluice.Limit { return sluice.Must(sluice.FixedWindow(5, time.Minute)).Named(name) }
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock, Routes: map[string][]Policy{
		"POST /x": {{Name: "post-x", Limit: lim("post-x"), Key: RemoteIP()}},
		"/x":      {{Name: "any-x", Limit: lim("any-x"), Key: RemoteIP()}},
	}, Exempt: ExemptRoutes("GET /healthz", "/metrics")})
	policyOf := func(method, route string) string {
		rec := httptest.NewRecorder()
		m.Serve(rec, httptest.NewRequest(method, "/", nil), route, okHandler)
		if p := rec.Header().Get("RateLimit-Policy"); p != "" {
			return p[1 : strings.IndexByte(p[1:], '"')+1]
		}
		return ""
	}
	for _, c := range []struct{ method, route, want string }{
		{"POST", "/x", "post-x"}, {"GET", "/x", "any-x"}, {"DELETE", "/x", "any-x"}, {"GET", "/y", ""},
	} {
		if got := policyOf(c.method, c.route); got != c.want {
			t.Errorf("%s %s: policy %q, want %q", c.method, c.route, got, c.want)
		}
	}
	ex := ExemptRoutes("GET /healthz", "/metrics")
	for _, c := range []struct {
		method, route string
		want          bool
	}{{"GET", "/healthz", true}, {"POST", "/healthz", false}, {"GET", "GET /healthz", true}, {"PUT", "/metrics", true}, {"GET", "", false}} {
		if got := ex(httptest.NewRequest(c.method, "/", nil), c.route); got != c.want {
			t.Errorf("ExemptRoutes(%s %q) = %v", c.method, c.route, got)
		}
	}
}

// TestWrapReportsRoute checks that Wrap reports the route of denied
// requests, to the DenyHandler and in the shadow-denial log, also when no
// policy depends on the route (then it is looked up only for denials).
func TestWrapReportsRoute(t *testing.T) {
	for _, exempt := range []bool{false, true} {
		e := newTestEnv(t)
		var logs bytes.Buffer
		var routes []string
		cfg := Config{Limiter: e.lim, Clock: e.clock, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			Policies: []Policy{
				{Name: "enforced", Limit: testLimit.Named("enforced"), Key: RemoteIP()},
				{Name: "shadow", Limit: sluice.Must(sluice.FixedWindow(1, time.Minute)).Named("shadow"), Key: RemoteIP(), Shadow: true},
			},
			DenyHandler: func(w http.ResponseWriter, _ *http.Request, d *Decision) {
				routes = append(routes, d.Route)
				w.WriteHeader(d.Status)
			}}
		if exempt {
			cfg.Exempt = ExemptRoutes("GET /healthz")
		}
		m := newMW(t, cfg)
		mux := http.NewServeMux()
		mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(r.PathValue("id")))
		})
		h := m.Wrap(mux)
		for i, want := range []int{200, 200, 429} {
			rec := serve(h, httptest.NewRequest("GET", "/items/7", nil))
			if rec.Code != want || (want == 200 && rec.Body.String() != "7") {
				t.Fatalf("exempt %v, request %d: %d %q, want %d", exempt, i+1, rec.Code, rec.Body.String(), want)
			}
		}
		if len(routes) != 1 || routes[0] != "GET /items/{id}" {
			t.Errorf("exempt %v: the DenyHandler saw routes %q, want [GET /items/{id}]", exempt, routes)
		}
		if n := strings.Count(logs.String(), `route="GET /items/{id}"`); n != 2 {
			t.Errorf("exempt %v: %d shadow denials logged with the route, want 2:\n%s", exempt, n, logs.String())
		}
	}
}
