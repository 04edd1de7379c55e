package sluiceecho_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v5"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

func Example() {
	// An embedded Redis, a pinned clock and a timeout no loaded machine
	// reaches keep the output stable; use a real Redis (and no clock) in
	// programs.
	m, _ := miniredis.Run()
	defer m.Close()
	client, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true})
	defer client.Close()
	now := time.Unix(1_700_000_000, 0)
	limiter, _ := sluice.New(client, sluice.WithClock(func() time.Time { return now }), sluice.WithTimeout(time.Minute))

	mw, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Policies: []httplimit.Policy{{Name: "api", Limit: sluice.Must(sluice.FixedWindow(100, time.Minute)),
			Key: httplimit.FirstOf(httplimit.Subject(), httplimit.RemoteIP())}},
		Routes: map[string][]httplimit.Policy{ // echo spells templates with :params (c.Path)
			"/items/:id/export": {{Name: "export", Limit: sluice.Must(sluice.FixedWindow(1, time.Minute)), Key: httplimit.Subject()}},
		},
		Clock: func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}

	e := echo.New()
	// Your authentication middleware (echo-jwt, say) verifies the token and
	// stores the subject in the request's context, where httplimit looks.
	verified := map[string]string{"Bearer token-of-alice": "alice"}
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			if sub, ok := verified[c.Request().Header.Get("Authorization")]; ok {
				c.SetRequest(c.Request().WithContext(httplimit.WithSubject(c.Request().Context(), sub)))
			}
			return next(c)
		}
	})
	e.Use(sluiceecho.Middleware(mw, sluiceecho.Options{}))
	e.GET("/items/:id/export", func(c *echo.Context) error { return c.String(200, "csv\n") })

	for i := 0; i < 2; i++ {
		req := httptest.NewRequest("GET", "/items/7/export", nil)
		req.Header.Set("Authorization", "Bearer token-of-alice")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "api";r=99;t=40, "export";r=0;t=40
	// 429 "api";r=99;t=40, "export";r=0;t=40
}
