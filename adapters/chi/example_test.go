package sluicechi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	sluicechi "github.com/sluice-go/sluice/adapters/chi"
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
		Routes: map[string][]httplimit.Policy{ // chi spells templates with {braces}
			"/items/{id}/export": {{Name: "export", Limit: sluice.Must(sluice.FixedWindow(1, time.Minute)), Key: httplimit.Subject()}},
		},
		Clock: func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}

	// Your authentication middleware verifies the token (signature, expiry)
	// and stores the subject; the rate limiter runs after it.
	verified := map[string]string{"Bearer token-of-alice": "alice"}
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if sub, ok := verified[r.Header.Get("Authorization")]; ok {
				r = r.WithContext(httplimit.WithSubject(r.Context(), sub))
			}
			next.ServeHTTP(w, r)
		})
	}
	r := chi.NewRouter()
	r.Use(auth)
	r.Use(sluicechi.Middleware(mw, sluicechi.Options{}))
	r.Get("/items/{id}/export", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "csv") })

	for i := 0; i < 2; i++ {
		req := httptest.NewRequest("GET", "/items/7/export", nil)
		req.Header.Set("Authorization", "Bearer token-of-alice")
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "api";r=99;t=40, "export";r=0;t=40
	// 429 "api";r=99;t=40, "export";r=0;t=40
}
