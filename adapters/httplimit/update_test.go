package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// TestUpdateSwaps checks that requests arriving after Update are decided,
// headed and reported under the new Config, and the ones before under the
// old: version, policies, header mode and routes all change at once.
func TestUpdateSwaps(t *testing.T) {
	e := newTestEnv(t)
	var denied []*Decision
	deny := func(w http.ResponseWriter, _ *http.Request, d *Decision) {
		denied = append(denied, d)
		w.WriteHeader(d.Status)
	}
	v1 := Config{Limiter: e.lim, Clock: e.clock, Version: "v1", DenyHandler: deny, Logger: quiet,
		Policies: []Policy{{Name: "a", Limit: testLimit.Named("a"), Key: RemoteIP()}}}
	m := newMW(t, v1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", okHandler)
	h := m.Wrap(mux)
	get := func() *httptest.ResponseRecorder { return serve(h, httptest.NewRequest("GET", "/items/1", nil)) }

	if m.Version() != "v1" {
		t.Errorf("Version() = %q, want v1", m.Version())
	}
	for i, want := range []int{200, 200, 429} {
		rec := get()
		if rec.Code != want || rec.Header().Get("RateLimit-Policy") != `"a";q=2;w=60` || rec.Header().Get("X-RateLimit-Limit") != "" {
			t.Fatalf("v1 request %d: %d %q", i+1, rec.Code, rec.Header())
		}
	}

	v2 := Config{Limiter: e.lim, Clock: e.clock, Version: "v2", DenyHandler: deny, Logger: quiet, Headers: HeadersBoth,
		Routes: map[string][]Policy{"GET /items/{id}": {{Name: "items", Limit: sluice.Must(sluice.FixedWindow(3, time.Minute)).Named("items"), Key: RemoteIP()}}}}
	if err := m.Update(v2); err != nil {
		t.Fatal(err)
	}
	if m.Version() != "v2" {
		t.Errorf("after Update, Version() = %q, want v2", m.Version())
	}
	// "a" no longer applies: its spent quota does not deny; the route's
	// policy, found through Wrap's lookup, does.
	for i, want := range []int{200, 200, 200, 429} {
		rec := get()
		if rec.Code != want || rec.Header().Get("RateLimit-Policy") != `"items";q=3;w=60` || rec.Header().Get("X-RateLimit-Limit") != "3" {
			t.Fatalf("v2 request %d: %d %q", i+1, rec.Code, rec.Header())
		}
	}
	if len(denied) != 2 {
		t.Fatalf("%d denials, want 2", len(denied))
	}
	for i, want := range []struct{ version, policy string }{{"v1", "a"}, {"v2", "items"}} {
		d := denied[i]
		if d.Version != want.version || len(d.Outcomes) != 1 || d.Outcomes[0].Policy != want.policy {
			t.Errorf("denial %d: version %q, outcomes %+v; want %s by %s", i+1, d.Version, d.Outcomes, want.version, want.policy)
		}
	}
}

// TestUpdateRejects checks that a Config New would refuse, or one with
// another Limiter, is refused by Update with ErrConfig, and that the
// Config in force keeps serving.
func TestUpdateRejects(t *testing.T) {
	e := newTestEnv(t)
	other := testLimiter(t)
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock, Version: "good",
		Policies: []Policy{{Name: "a", Limit: testLimit.Named("a"), Key: RemoteIP()}}})
	p := Policy{Name: "b", Limit: testLimit.Named("b"), Key: RemoteIP()}
	for name, cfg := range map[string]Config{
		"no limiter":    {Version: "bad", Policies: []Policy{p}},
		"other limiter": {Limiter: other, Version: "bad", Policies: []Policy{p}},
		"no policies":   {Limiter: e.lim, Version: "bad"},
		"duplicate":     {Limiter: e.lim, Version: "bad", Policies: []Policy{p, p}},
		"header mode":   {Limiter: e.lim, Version: "bad", Policies: []Policy{p}, Headers: HeaderMode(9)},
		"short secret":  {Limiter: e.lim, Version: "bad", Policies: []Policy{p}, PartitionKeySecret: []byte("short")},
	} {
		if err := m.Update(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Update = %v, want ErrConfig", name, err)
		}
		if m.Version() != "good" {
			t.Errorf("%s: Version() = %q after a refused Update, want good", name, m.Version())
		}
	}
	rec := serve(m.Handler(http.HandlerFunc(okHandler)), httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 || rec.Header().Get("RateLimit") != `"a";r=1;t=40` {
		t.Errorf("after refused Updates: %d %q, want the first Config's policy", rec.Code, rec.Header())
	}
}

// TestUpdateReleasesLeaseUnderItsVersion checks that a concurrency slot
// taken under one Config is released when its request ends, after an
// Update replaced that Config with one whose concurrency policy counts
// another quota; and that requests meanwhile are decided under the new
// one.
func TestUpdateReleasesLeaseUnderItsVersion(t *testing.T) {
	e := newTestEnv(t)
	slots1 := sluice.Must(sluice.Concurrency(1, time.Minute)).Named("slots-v1")
	slots2 := sluice.Must(sluice.Concurrency(5, time.Minute)).Named("slots-v2")
	const id = "all:c"
	m := newMW(t, Config{Limiter: e.lim, Clock: e.clock, Version: "v1",
		Policies: []Policy{{Name: "slots", Limit: slots1, Key: Constant("c")}}})
	free := func(l sluice.Limit) bool {
		t.Helper()
		lease, res, err := e.lim.Acquire(context.Background(), id, l)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			if err := e.lim.Release(context.Background(), lease); err != nil {
				t.Fatal(err)
			}
		}
		return res.Allowed
	}
	var inner *httptest.ResponseRecorder
	var outerHdr string
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("outer") != "1" {
			okHandler(w, r)
			return
		}
		outerHdr = w.Header().Get("RateLimit-Policy")
		if free(slots1) {
			t.Error("the v1 request's slot is free while it runs")
		}
		if err := m.Update(Config{Limiter: e.lim, Clock: e.clock, Version: "v2",
			Policies: []Policy{{Name: "slots", Limit: slots2, Key: Constant("c")}}}); err != nil {
			t.Error(err)
		}
		inner = serve(m.Handler(http.HandlerFunc(okHandler)), httptest.NewRequest("GET", "/", nil))
		okHandler(w, r)
	}))
	if rec := serve(h, httptest.NewRequest("GET", "/?outer=1", nil)); rec.Code != 200 {
		t.Fatalf("v1 request: %d", rec.Code)
	}
	if outerHdr != `"slots";q=1;qu="concurrent-requests"` {
		t.Errorf("v1 request's RateLimit-Policy %q, want v1's", outerHdr)
	}
	if inner == nil || inner.Code != 200 || inner.Header().Get("RateLimit-Policy") != `"slots";q=5;qu="concurrent-requests"` || inner.Header().Get("RateLimit") != `"slots";r=4` {
		t.Fatalf("request after the Update, during the v1 request: %v", inner)
	}
	if !free(slots1) {
		t.Error("the v1 request's slot is still taken after it ended under v2")
	}
	if !free(slots2) {
		t.Error("the v2 request's slot is still taken")
	}
}
