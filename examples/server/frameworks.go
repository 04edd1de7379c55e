package main

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v5"

	sluicechi "github.com/sluice-go/sluice/adapters/chi"
	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

// healthRoutes is the route template of GET /healthz as each router
// spells it; the middleware exempts it.
var healthRoutes = map[string]string{
	"nethttp": "GET /healthz",
	"chi":     "/healthz",
	"gin":     "/healthz",
	"echo":    "/healthz",
}

// newRouter serves the API with the chosen framework, every route behind
// mw except /healthz, which mw exempts.
func newRouter(framework string, mw *httplimit.Middleware) (http.Handler, error) {
	switch framework {
	case "nethttp":
		mux := http.NewServeMux()
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			code, v := index()
			writeJSON(w, code, v)
		})
		mux.HandleFunc("GET /hello/{name}", func(w http.ResponseWriter, r *http.Request) {
			code, v := hello(r.PathValue("name"))
			writeJSON(w, code, v)
		})
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
			code, v := healthz()
			writeJSON(w, code, v)
		})
		return mw.Wrap(mux), nil

	case "chi":
		r := chi.NewRouter()
		r.Use(sluicechi.Middleware(mw, sluicechi.Options{}))
		r.Get("/", func(w http.ResponseWriter, r *http.Request) {
			code, v := index()
			writeJSON(w, code, v)
		})
		r.Get("/hello/{name}", func(w http.ResponseWriter, r *http.Request) {
			code, v := hello(chi.URLParam(r, "name"))
			writeJSON(w, code, v)
		})
		r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
			code, v := healthz()
			writeJSON(w, code, v)
		})
		return r, nil

	case "gin":
		gin.SetMode(gin.ReleaseMode)
		e := gin.New()
		e.Use(gin.Recovery(), sluicegin.Middleware(mw, sluicegin.Options{}))
		e.GET("/", func(c *gin.Context) { c.JSON(index()) })
		e.GET("/hello/:name", func(c *gin.Context) { c.JSON(hello(c.Param("name"))) })
		e.GET("/healthz", func(c *gin.Context) { c.JSON(healthz()) })
		return e, nil

	case "echo":
		e := echo.New()
		e.Use(sluiceecho.Middleware(mw, sluiceecho.Options{}))
		e.GET("/", func(c *echo.Context) error { return c.JSON(index()) })
		e.GET("/hello/:name", func(c *echo.Context) error { return c.JSON(hello(c.Param("name"))) })
		e.GET("/healthz", func(c *echo.Context) error { return c.JSON(healthz()) })
		return e, nil
	}
	return nil, fmt.Errorf("unknown framework %q", framework)
}
