// Package sluicegin rate limits gin engines with httplimit.
package sluicegin

import (
	"net/http"
	"net/netip"

	"github.com/gin-gonic/gin"

	"github.com/sluice-go/sluice/adapters/httplimit"
)

// Options configures Middleware. The zero value is right for most engines.
type Options struct {
	// GinClientIP keys IP policies by gin's Context.ClientIP() instead of
	// httplimit's own resolver. Set it only if you called
	// engine.SetTrustedProxies with your proxies' addresses: gin trusts
	// every proxy (so every client's X-Forwarded-For) unless told otherwise.
	GinClientIP bool
}

// Middleware returns gin middleware applying m. The route template is
// gin's c.FullPath() ("/items/:id"; "" for unmatched routes). A denied
// request is answered and the chain aborted.
func Middleware(m *httplimit.Middleware, opts Options) gin.HandlerFunc {
	return func(c *gin.Context) {
		r := c.Request
		if opts.GinClientIP {
			if a, err := netip.ParseAddr(c.ClientIP()); err == nil {
				r = r.WithContext(httplimit.WithClientIP(r.Context(), a))
			}
		}
		passed := m.Serve(c.Writer, r, c.FullPath(), func(_ http.ResponseWriter, r *http.Request) {
			c.Request = r
			c.Next()
		})
		if !passed {
			c.Abort()
		}
	}
}
