package sluiceechov4_test

import (
	"testing"

	"github.com/labstack/echo/v4"

	sluiceechov4 "github.com/sluice-go/sluice/adapters/echov4"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

// The framework resolver's case shared by every adapter (TestEchoV4ClientIP)
// is in the conformance module, beside the conformance suite.

// Without an IPExtractor the option changes nothing: the peer is the client
// (echo v4's RealIP would otherwise believe any X-Forwarded-For).
func TestEchoV4ClientIPNeedsExtractor(t *testing.T) {
	mw, err := httplimit.New(httplimit.Config{Limiter: newLimiter(t), Policies: []httplimit.Policy{{
		Name: "per-ip", Limit: oneAMinute, Key: httplimit.RemoteIP()}}})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(sluiceechov4.Middleware(mw, sluiceechov4.Options{EchoClientIP: true}))
	e.GET("/items/:id", func(c echo.Context) error { return nil })
	if a, b := spoof(e, "1.1.1.1"), spoof(e, "2.2.2.2"); a != 200 || b != 429 {
		t.Errorf("spoofed X-Forwarded-For without an IPExtractor: %d, %d; want 200, 429", a, b)
	}
}
