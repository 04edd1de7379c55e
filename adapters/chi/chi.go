// Package sluicechi rate limits chi routers with httplimit: a
// func(http.Handler) http.Handler for r.Use that finds the route template
// chi will match before it has routed.
package sluicechi

import (
	"net/http"
	"sync"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/sluice-go/sluice/adapters/httplimit"
)

// Options configures Middleware. The zero value is right for most routers.
type Options struct {
	// ChiClientIP keys IP policies by the address chi's ClientIPFrom*
	// middleware resolved (middleware.GetClientIPAddr), instead of
	// httplimit's own resolver. Install that middleware before this one;
	// requests it resolved nothing for fall back to httplimit.IP's rules.
	ChiClientIP bool
}

// Middleware returns chi middleware applying m. In a top-level r.Use chi
// has not routed yet (its RoutePattern is still empty there, and only
// partial inside r.Route or r.Mount), so the route template is looked up
// with Route: before deciding when m has per-route policies or exemptions,
// otherwise only for denied requests (httplimit's ServeRouteFunc).
// Templates are spelled as chi spells them, mounts included:
// "/items/{id}", "/api/v1/items/{id}".
func Middleware(m *httplimit.Middleware, opts Options) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if opts.ChiClientIP {
				if a := middleware.GetClientIPAddr(r.Context()); a.IsValid() {
					r = r.WithContext(httplimit.WithClientIP(r.Context(), a))
				}
			}
			m.ServeRouteFunc(w, r, Route, next.ServeHTTP)
		})
	}
}

// Route returns the route template chi matches (or has matched) for r, or
// "" when no route matches. It asks the outermost chi router (Routes.Find
// on a routing context of its own, so the request's is left alone) with the
// whole path, which gives the full template from anywhere in the router:
// top-level r.Use, inside r.Route or r.Mount, or r.With.
func Route(r *http.Request) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		return ""
	}
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	method := rctx.RouteMethod
	if method == "" {
		method = r.Method
	}
	find := findContexts.Get().(*chi.Context)
	find.Reset()
	route := rctx.Routes.Find(find, method, path)
	findContexts.Put(find)
	return route
}

// findContexts holds the routing contexts Route searches with: a reset
// context keeps the capacity of its parameter slices, so a lookup
// allocates nothing.
var findContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}
