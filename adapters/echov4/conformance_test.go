package sluiceechov4_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sluice-go/sluice/adapters/conformance"
	sluiceechov4 "github.com/sluice-go/sluice/adapters/echov4"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

func TestConformance(t *testing.T) {
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
