package sluicechi

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

// TestRoute checks that Route gives the full template wherever the
// middleware sits: a top-level r.Use (before chi routes), inside r.Route
// and r.Mount (where chi's RoutePattern is partial), and r.With.
func TestRoute(t *testing.T) {
	got := map[string]string{} // "where path" → Route
	probe := func(where string) func(http.Handler) http.Handler {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := where + " " + r.URL.Path
				if r.Method != http.MethodGet {
					k = where + " " + r.Method + " " + r.URL.Path
				}
				got[k] = Route(r)
				next.ServeHTTP(w, r)
			})
		}
	}
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	r := chi.NewRouter()
	r.Use(probe("top"))
	r.Get("/items/{id}", h)
	r.With(probe("with")).Get("/w/{id}", h)
	r.With(probe("with")).Get("/static/*", h)
	r.Route("/api", func(r chi.Router) {
		r.Use(probe("route"))
		r.Get("/x/{id}", h)
		r.Route("/v1", func(r chi.Router) {
			r.Use(probe("nested"))
			r.With(probe("with")).Get("/z", h)
		})
	})
	sub := chi.NewRouter()
	sub.Use(probe("mount"))
	sub.Get("/m/{id}", h)
	r.Mount("/mnt", sub)
	for _, p := range []string{"/items/1", "/w/2", "/static/a/b", "/api/x/3", "/api/v1/z", "/mnt/m/5", "/nope", "/api/nope"} {
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
	}
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/items/1", nil))
	want := map[string]string{
		"top /items/1": "/items/{id}", "top /w/2": "/w/{id}", "with /w/2": "/w/{id}",
		"top /static/a/b": "/static/*", "with /static/a/b": "/static/*",
		"top /api/x/3": "/api/x/{id}", "route /api/x/3": "/api/x/{id}",
		"top /api/v1/z": "/api/v1/z", "route /api/v1/z": "/api/v1/z", "nested /api/v1/z": "/api/v1/z", "with /api/v1/z": "/api/v1/z",
		"top /mnt/m/5": "/mnt/m/{id}", "mount /mnt/m/5": "/mnt/m/{id}",
		"top /nope": "", "top POST /items/1": "", "top /api/nope": "", "route /api/nope": "",
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: Route = %q (seen %v), want %q", k, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("probes saw %d requests, want %d: %v", len(got), len(want), got)
	}
}

// TestDeniedRoute checks that a denial reports chi's full template when
// no policy depends on the route (Route then runs only for denials).
func TestDeniedRoute(t *testing.T) {
	mr := miniredis.RunT(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	lim, err := sluice.New(client, sluice.WithTimeout(time.Minute), sluice.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	mw, err := httplimit.New(httplimit.Config{Limiter: lim,
		Policies: []httplimit.Policy{{Name: "api", Limit: sluice.Must(sluice.GCRA(1, time.Hour, 1)), Key: httplimit.RemoteIP()}},
		DenyHandler: func(w http.ResponseWriter, _ *http.Request, d *httplimit.Decision) {
			routes = append(routes, d.Route)
			w.WriteHeader(d.Status)
		}})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(Middleware(mw, Options{}))
	r.Route("/api", func(r chi.Router) {
		r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(chi.URLParam(r, "id"))) })
	})
	for i, want := range []int{200, 429} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", "/api/items/7", nil))
		if rec.Code != want || (want == 200 && rec.Body.String() != "7") {
			t.Fatalf("request %d: %d %q, want %d", i+1, rec.Code, rec.Body.String(), want)
		}
	}
	if len(routes) != 1 || routes[0] != "/api/items/{id}" {
		t.Errorf("the DenyHandler saw routes %q, want [/api/items/{id}]", routes)
	}
}
