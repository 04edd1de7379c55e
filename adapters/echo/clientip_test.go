package sluiceecho_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/sluice-go/sluice/adapters/conformance"
	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

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

// Without an IPExtractor the option changes nothing: the peer is the client.
func TestEchoClientIPNeedsExtractor(t *testing.T) {
	mw, err := httplimit.New(httplimit.Config{Limiter: conformance.NewLimiter(t), Policies: []httplimit.Policy{{
		Name: "per-ip", Limit: oneAMinute, Key: httplimit.RemoteIP()}}})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(sluiceecho.Middleware(mw, sluiceecho.Options{EchoClientIP: true}))
	e.GET("/items/:id", func(c *echo.Context) error { return nil })
	if a, b := spoof(e, "1.1.1.1"), spoof(e, "2.2.2.2"); a != 200 || b != 429 {
		t.Errorf("spoofed X-Forwarded-For without an IPExtractor: %d, %d; want 200, 429", a, b)
	}
}
