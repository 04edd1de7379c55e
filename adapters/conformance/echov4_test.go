package conformance_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sluice-go/sluice/adapters/conformance"
	sluiceechov4 "github.com/sluice-go/sluice/adapters/echov4"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

func TestEchoV4Conformance(t *testing.T) {
	conformance.Run(t, conformance.Framework{
		Name:     "echov4",
		Template: conformance.ColonMethod,
		Build: func(mw *httplimit.Middleware, routes []conformance.Route) http.Handler {
			e := echo.New()
			e.Use(sluiceechov4.Middleware(mw, sluiceechov4.Options{}))
			for _, rt := range routes {
				e.Add(rt.Method, conformance.Colon(rt.Method, rt.Path), echo.WrapHandler(rt.Handler))
			}
			return e
		},
	})
}

func TestEchoV4ClientIP(t *testing.T) {
	_, proxies, _ := net.ParseCIDR("10.0.0.0/8")
	conformance.ClientIPCase(t, func(mw *httplimit.Middleware, use bool) http.Handler {
		e := echo.New()
		e.IPExtractor = echo.ExtractIPFromXFFHeader(echo.TrustPrivateNet(false), echo.TrustIPRange(proxies))
		e.Use(sluiceechov4.Middleware(mw, sluiceechov4.Options{EchoClientIP: use}))
		e.GET("/items/:id", func(c echo.Context) error { return nil })
		return e
	})
}
