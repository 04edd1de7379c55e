package sluiceecho_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/sluice-go/sluice/adapters/conformance"
	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

func TestConformance(t *testing.T) {
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
