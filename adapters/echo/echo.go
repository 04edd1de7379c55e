// Package sluiceecho rate limits echo v5 servers with httplimit.
package sluiceecho

import (
	"net/http"
	"net/netip"

	"github.com/labstack/echo/v5"

	"github.com/sluice-go/sluice/adapters/httplimit"
)

// Options configures Middleware. The zero value is right for most servers.
type Options struct {
	// EchoClientIP keys IP policies by c.RealIP(), that is by the server's
	// Echo.IPExtractor (echo.ExtractIPFromXFFHeader with your trust
	// options, say), instead of httplimit's own resolver. Without an
	// IPExtractor it changes nothing.
	EchoClientIP bool
}

// Middleware returns echo middleware applying m. The route template is
// echo's c.Path() ("/items/:id"). Register it with e.Use (not e.Pre, which
// runs before routing). A denied request is answered and the chain stops.
func Middleware(m *httplimit.Middleware, opts Options) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			r := c.Request()
			if opts.EchoClientIP && c.Echo().IPExtractor != nil {
				if a, err := netip.ParseAddr(c.RealIP()); err == nil {
					r = r.WithContext(httplimit.WithClientIP(r.Context(), a))
				}
			}
			var err error
			m.Serve(c.Response(), r, c.Path(), func(_ http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				err = next(c)
			})
			return err
		}
	}
}
