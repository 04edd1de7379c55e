//go:build echo

package main

import (
	"net/http"

	"github.com/labstack/echo/v5"

	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

func init() {
	builtIn["echo"] = framework{health: "/healthz", router: func(mw *httplimit.Middleware) http.Handler {
		e := echo.New()
		e.Use(sluiceecho.Middleware(mw, sluiceecho.Options{}))
		e.GET("/", func(c *echo.Context) error { return c.JSON(index()) })
		e.GET("/hello/:name", func(c *echo.Context) error { return c.JSON(hello(c.Param("name"))) })
		e.GET("/healthz", func(c *echo.Context) error { return c.JSON(healthz()) })
		return e
	}}
}
