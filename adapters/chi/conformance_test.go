package sluicechi_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	sluicechi "github.com/sluice-go/sluice/adapters/chi"
	"github.com/sluice-go/sluice/adapters/conformance"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

func TestConformance(t *testing.T) {
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
