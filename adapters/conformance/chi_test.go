package conformance_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	sluicechi "github.com/sluice-go/sluice/adapters/chi"
	"github.com/sluice-go/sluice/adapters/conformance"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

func TestChiConformance(t *testing.T) {
	conformance.Run(t, conformance.Framework{
		Name:     "chi",
		Template: conformance.Method,
		Build: func(mw *httplimit.Middleware, routes []conformance.Route) http.Handler {
			r := chi.NewRouter()
			r.Use(sluicechi.Middleware(mw, sluicechi.Options{}))
			for _, rt := range routes {
				r.Method(rt.Method, rt.Path, rt.Handler)
			}
			return r
		},
	})
}

func TestChiClientIP(t *testing.T) {
	conformance.ClientIPCase(t, func(mw *httplimit.Middleware, use bool) http.Handler {
		r := chi.NewRouter()
		r.Use(middleware.ClientIPFromXFF("10.0.0.0/8"))
		r.Use(sluicechi.Middleware(mw, sluicechi.Options{ChiClientIP: use}))
		r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) {})
		return r
	})
}
