package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

// Update puts a new Config in force between requests; one it refuses
// leaves the one in force serving. Decision.Version tells which Config
// decided a request (here, in a DenyHandler).
func ExampleMiddleware_Update() {
	limiter, clock, done := exampleLimiter()
	defer done()

	config := func(version string, perMinute int64) httplimit.Config {
		return httplimit.Config{
			Limiter: limiter, Clock: clock, Version: version,
			Policies: []httplimit.Policy{{Name: "per-ip",
				Limit: sluice.Must(sluice.FixedWindow(perMinute, time.Minute)).Named("per-ip"), Key: httplimit.RemoteIP()}},
			DenyHandler: func(w http.ResponseWriter, r *http.Request, d *httplimit.Decision) {
				fmt.Println("denied under", d.Version)
				w.WriteHeader(d.Status)
			},
		}
	}
	mw, err := httplimit.New(config("v1", 2))
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(hello))
	get := func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Println(mw.Version(), rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"))
	}
	get()

	// The limit keeps its name, so what was spent under v1 stays spent
	// under v2's numbers.
	if err := mw.Update(config("v2", 5)); err != nil {
		panic(err)
	}
	get()

	bad := config("v3", 10)
	bad.PartitionKeySecret = []byte("short")
	fmt.Println(mw.Update(bad))
	get()

	if err := mw.Update(config("v4", 3)); err != nil {
		panic(err)
	}
	get()
	// Output:
	// v1 200 "per-ip";q=2;w=60 "per-ip";r=1;t=40
	// v2 200 "per-ip";q=5;w=60 "per-ip";r=3;t=40
	// httplimit: invalid config: httplimit: PartitionKeySecret must be at least 16 bytes
	// v2 200 "per-ip";q=5;w=60 "per-ip";r=2;t=40
	// denied under v4
	// v4 429 "per-ip";q=3;w=60 "per-ip";r=0;t=40
}
