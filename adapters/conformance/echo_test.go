package conformance_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/sluice-go/sluice/adapters/conformance"
	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

func TestEchoConformance(t *testing.T) {
	conformance.Run(t, conformance.Framework{
		Name:     "echo",
		Template: conformance.ColonMethod,
		Build: func(mw *httplimit.Middleware, routes []conformance.Route) http.Handler {
			e := echo.New()
			e.Use(sluiceecho.Middleware(mw, sluiceecho.Options{}))
			for _, rt := range routes {
				e.Add(rt.Method, conformance.Colon(rt.Method, rt.Path), echo.WrapHandler(rt.Handler))
			}
			return e
		},
	})
}

func TestEchoClientIP(t *testing.T) {
	_, proxies, _ := net.ParseCIDR("10.0.0.0/8")
	conformance.ClientIPCase(t, func(mw *httplimit.Middleware, use bool) http.Handler {
		e := echo.New()
		e.IPExtractor = echo.ExtractIPFromXFFHeader(echo.TrustPrivateNet(false), echo.TrustIPRange(proxies))
		e.Use(sluiceecho.Middleware(mw, sluiceecho.Options{EchoClientIP: use}))
		e.GET("/items/:id", func(c *echo.Context) error { return nil })
		return e
	})
}
