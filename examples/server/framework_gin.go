//go:build gin

package main

import (
	"net/http"

	"github.com/gin-gonic/gin"

	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

func init() {
	builtIn["gin"] = framework{health: "/healthz", router: func(mw *httplimit.Middleware) http.Handler {
		gin.SetMode(gin.ReleaseMode)
		e := gin.New()
		e.Use(gin.Recovery(), sluicegin.Middleware(mw, sluicegin.Options{}))
		e.GET("/", func(c *gin.Context) { c.JSON(index()) })
		e.GET("/hello/:name", func(c *gin.Context) { c.JSON(hello(c.Param("name"))) })
		e.GET("/healthz", func(c *gin.Context) { c.JSON(healthz()) })
		return e
	}}
}
