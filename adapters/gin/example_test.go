package sluicegin_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	sluicegin "github.com/sluice-go/sluice/adapters/gin"
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
		Routes: map[string][]httplimit.Policy{ // gin spells templates with :params (c.FullPath)
			"/items/:id/export": {{Name: "export", Limit: sluice.Must(sluice.FixedWindow(1, time.Minute)), Key: httplimit.Subject()}},
		},
		Clock: func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}

	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	// Your authentication middleware verifies the token (signature, expiry)
	// and stores the subject in the request's context (c.Set alone does not
	// reach httplimit, which sees the *http.Request).
	verified := map[string]string{"Bearer token-of-alice": "alice"}
	e.Use(func(c *gin.Context) {
		if sub, ok := verified[c.GetHeader("Authorization")]; ok {
			c.Request = c.Request.WithContext(httplimit.WithSubject(c.Request.Context(), sub))
		}
		c.Next()
	})
	e.Use(sluicegin.Middleware(mw, sluicegin.Options{}))
	e.GET("/items/:id/export", func(c *gin.Context) { c.String(200, "csv\n") })

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
