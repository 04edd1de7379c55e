// Package sluicechi rate limits chi routers with httplimit: a
// func(http.Handler) http.Handler for r.Use that finds the route template
// chi will match before it has routed.
package sluicechi

import (
	"net/http"
	"strings"

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

// Middleware returns chi middleware applying m. Used with r.Use, on the
// top-level router or inside r.Route/r.Mount, it looks the request's route
// template up (Routes.Find) before chi routes it; used with r.With on one
// route, chi has already matched and its pattern is read directly. The
// template is spelled as chi spells it ("/items/{id}", "/api/*" mounts
// joined: "/api/items/{id}").
func Middleware(m *httplimit.Middleware, opts Options) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if opts.ChiClientIP {
				if a := middleware.GetClientIPAddr(r.Context()); a.IsValid() {
					r = r.WithContext(httplimit.WithClientIP(r.Context(), a))
				}
			}
			m.Serve(w, r, Route(r), next.ServeHTTP)
		})
	}
}

// Route returns the route template chi matches (or has matched) for r, or
// "" when no route matches.
func Route(r *http.Request) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		return ""
	}
	path := rctx.RoutePath
	if path == "" {
		path = r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
	}
	found := rctx.Routes.Find(chi.NewRouteContext(), r.Method, path)
	if found == "" {
		return ""
	}
	prefix := strings.TrimSuffix(strings.Join(rctx.RoutePatterns, ""), "/*")
	for strings.Contains(prefix, "/*/") {
		prefix = strings.ReplaceAll(prefix, "/*/", "/")
	}
	return prefix + found
}
