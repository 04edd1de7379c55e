package sluicechi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
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
