package main

import (
	"fmt"
	"net/http"

	"github.com/sluice-go/sluice/adapters/httplimit"
)

// A framework serves the API behind mw: every route except /healthz, which
// mw exempts by its route template, health.
type framework struct {
	health string
	router func(mw *httplimit.Middleware) http.Handler
}

// builtIn are the frameworks compiled into this binary: net/http always;
// chi, gin and echo with their build tag (framework_chi.go, ...), so that
// the default `go run ./examples/server` compiles none of them. The tags
// are named after the frameworks: go run -tags gin ./examples/server
// -framework gin.
var builtIn = map[string]framework{
	"nethttp": {health: "GET /healthz", router: netHTTPRouter},
}

// healthRoute is the route template of GET /healthz on framework f.
func healthRoute(f string) string { return builtIn[f].health }

// newRouter serves the API with the chosen framework, every route behind
// mw except /healthz, which mw exempts.
func newRouter(name string, mw *httplimit.Middleware) (http.Handler, error) {
	f, ok := builtIn[name]
	if !ok {
		return nil, fmt.Errorf("framework %q is not built into this binary; build it with -tags %s", name, name)
	}
	return f.router(mw), nil
}

func netHTTPRouter(mw *httplimit.Middleware) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		code, v := index()
		writeJSON(w, code, v)
	})
	mux.HandleFunc("GET /hello/{name}", func(w http.ResponseWriter, r *http.Request) {
		code, v := hello(r.PathValue("name"))
		writeJSON(w, code, v)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		code, v := healthz()
		writeJSON(w, code, v)
	})
	return mw.Wrap(mux)
}
