package sluiceecho_test

import (
	"testing"

	"github.com/labstack/echo/v5"

	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

// The framework resolver's case shared by every adapter (TestEchoClientIP)
// is in the conformance module, beside the conformance suite.

// Without an IPExtractor the option changes nothing: the peer is the client.
func TestEchoClientIPNeedsExtractor(t *testing.T) {
	mw, err := httplimit.New(httplimit.Config{Limiter: newLimiter(t), Policies: []httplimit.Policy{{
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
