//go:build chi

package main

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	sluicechi "github.com/sluice-go/sluice/adapters/chi"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

func init() {
	builtIn["chi"] = framework{health: "/healthz", router: func(mw *httplimit.Middleware) http.Handler {
		r := chi.NewRouter()
		r.Use(sluicechi.Middleware(mw, sluicechi.Options{}))
		r.Get("/", func(w http.ResponseWriter, r *http.Request) {
			code, v := index()
			writeJSON(w, code, v)
		})
		r.Get("/hello/{name}", func(w http.ResponseWriter, r *http.Request) {
			code, v := hello(chi.URLParam(r, "name"))
			writeJSON(w, code, v)
		})
		r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
			code, v := healthz()
			writeJSON(w, code, v)
		})
		return r
	}}
}
