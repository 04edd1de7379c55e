package conformance_test

import (
	"net/http"
	"testing"

	"github.com/sluice-go/sluice/adapters/conformance"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

// The suite against plain net/http, two ways: the whole ServeMux wrapped
// (Middleware.Wrap) and each handler wrapped (Middleware.Handler, which
// reads Request.Pattern).
func TestConformance(t *testing.T) {
	template := conformance.Method
	t.Run("wrap", func(t *testing.T) {
		conformance.Run(t, conformance.Framework{
			Name: "nethttp-wrap", Template: template,
			Build: func(mw *httplimit.Middleware, routes []conformance.Route) http.Handler {
				mux := http.NewServeMux()
				for _, rt := range routes {
					mux.HandleFunc(rt.Method+" "+rt.Path, rt.Handler)
				}
				return mw.Wrap(mux)
			},
		})
	})
	t.Run("handler", func(t *testing.T) {
		conformance.Run(t, conformance.Framework{
			Name: "nethttp-handler", Template: template,
			Build: func(mw *httplimit.Middleware, routes []conformance.Route) http.Handler {
				mux := http.NewServeMux()
				for _, rt := range routes {
					mux.Handle(rt.Method+" "+rt.Path, mw.Handler(rt.Handler))
				}
				return mux
			},
		})
	})
}
