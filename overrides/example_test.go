package overrides_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/overrides"
)

// An operator gives one client more, blocks another, and exempts a third,
// while the service runs; the middleware obeys on the next request. (On
// miniredis, which has no client-side caching, the Store keeps a local copy
// refreshed every LocalCache; Sync makes the example see each change at
// once.)
func Example() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, ForceSingleClient: true})
	defer client.Close()

	// A fixed clock for the example's output; Redis must agree with it
	// (an Until Redis sees as past ends the override at once).
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	mr.SetTime(now)
	limiter, _ := sluice.New(client, sluice.WithClock(clock))
	defer limiter.Close()
	store, err := overrides.New(client, overrides.Options{Clock: clock, Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	mw, _ := httplimit.New(httplimit.Config{
		Limiter:   limiter,
		Overrides: store,
		Clock:     clock,
		Policies: []httplimit.Policy{{Name: "per-ip", Key: httplimit.RemoteIP(),
			Limit: sluice.Must(sluice.FixedWindow(100, time.Hour))}},
	})
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	get := func(ip string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = ip + ":1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%s: %d %s %s", ip, w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("Retry-After"))))
	}

	ctx := context.Background()
	for _, o := range []overrides.Override{
		{Policy: "per-ip", Identity: "ip:192.0.2.1", Kind: overrides.Limit, Rate: 1000, Until: now.Add(24 * time.Hour), Reason: "load test"},
		{Policy: "per-ip", Identity: "ip:198.51.100.9", Kind: overrides.Block, Until: now.Add(10 * time.Minute), Reason: "scraping"},
		{Policy: "per-ip", Identity: "ip:203.0.113.5", Kind: overrides.Exempt, Reason: "monitoring"},
	} {
		if err := store.Set(ctx, o); err != nil {
			fmt.Println(err)
			return
		}
	}
	_ = store.Sync(ctx, "per-ip")
	get("192.0.2.1")
	get("198.51.100.9")
	get("203.0.113.5")
	get("192.0.2.200")

	list, _ := store.List(ctx, "per-ip")
	for _, o := range list {
		fmt.Println(o.Identity, o.Kind, o.Reason)
	}
	_, _ = store.Remove(ctx, "per-ip", "ip:198.51.100.9")
	_ = store.Sync(ctx, "per-ip")
	get("198.51.100.9")
	// Output:
	// 192.0.2.1: 200 "per-ip";q=1000;w=3600
	// 198.51.100.9: 429 "per-ip";q=100;w=3600 600
	// 203.0.113.5: 200
	// 192.0.2.200: 200 "per-ip";q=100;w=3600
	// ip:192.0.2.1 limit load test
	// ip:198.51.100.9 block scraping
	// ip:203.0.113.5 exempt monitoring
	// 198.51.100.9: 200 "per-ip";q=100;w=3600
}
