package conformance_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluice-go/sluice/adapters/conformance"
	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

func TestGinConformance(t *testing.T) {
	gin.SetMode(gin.TestMode)
	conformance.Run(t, conformance.Framework{
		Name:     "gin",
		Template: conformance.ColonMethod,
		Build: func(mw *httplimit.Middleware, routes []conformance.Route) http.Handler {
			e := gin.New()
			e.Use(sluicegin.Middleware(mw, sluicegin.Options{}))
			for _, rt := range routes {
				e.Handle(rt.Method, conformance.Colon(rt.Method, rt.Path), gin.WrapF(rt.Handler))
			}
			return e
		},
	})
}

func TestGinClientIP(t *testing.T) {
	gin.SetMode(gin.TestMode)
	conformance.ClientIPCase(t, func(mw *httplimit.Middleware, use bool) http.Handler {
		e := gin.New()
		if err := e.SetTrustedProxies([]string{"10.0.0.0/8"}); err != nil {
			t.Fatal(err)
		}
		e.Use(sluicegin.Middleware(mw, sluicegin.Options{GinClientIP: use}))
		e.GET("/items/:id", func(c *gin.Context) {})
		return e
	})
}
