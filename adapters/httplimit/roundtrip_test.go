package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redisserver"
)

// tripCounter counts the round trips a client makes: calls to Do and
// DoMulti.
type tripCounter struct {
	rueidis.Client
	n atomic.Int64
}

func (c *tripCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *tripCounter) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoMulti(ctx, cmds...)
}

// sent is the commands the server ran that a client sent (EVALSHA, EVAL,
// TIME; the scripts' own calls are counted too, under their names, and left
// out), from its command statistics.
func sent(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	s, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(calls, 10, 64)
		n += v
	}
	return n
}

// TestRoundTripsPerRequest: a request through the middleware with three
// rate policies on three identities (client IP, API key, route) and a
// concurrency policy costs one round trip when admitted, two when a policy
// denies (its charges given back, its slot released), and none once the
// denying policy's denial is in the Limiter's denial cache; then, with 2
// and with 4 policies, 100 more requests of the hot abusive client send
// Redis nothing. Counted by the client and by redis-server's own command
// statistics.
func TestRoundTripsPerRequest(t *testing.T) {
	s := redisserver.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rt := &tripCounter{Client: c}
	lim, err := sluice.New(rt, sluice.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	ip := RemoteIP()
	for _, tc := range []struct {
		name     string
		policies []Policy
	}{
		{"2 policies", []Policy{
			{Name: "ip", Limit: sluice.Must(sluice.GCRA(3, time.Hour, 3)), Key: ip},
			{Name: "key", Limit: sluice.Must(sluice.SlidingWindow(1000, time.Hour)), Key: APIKey("X-API-Key")},
		}},
		{"4 policies", []Policy{
			{Name: "ip", Limit: sluice.Must(sluice.GCRA(3, time.Hour, 3)).Named("ip4"), Key: ip},
			{Name: "key", Limit: sluice.Must(sluice.SlidingWindow(1000, time.Hour)).Named("key4"), Key: APIKey("X-API-Key")},
			{Name: "route", Limit: sluice.Must(sluice.FixedWindow(1000, time.Hour)), Key: Constant("GET /items")},
			{Name: "in-flight", Limit: sluice.Must(sluice.Concurrency(10, time.Minute)), Key: APIKey("X-API-Key")},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(Config{Limiter: lim, Policies: tc.policies, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(okHandler))
			request := func(wantStatus int) (trips, commands int64) {
				t.Helper()
				before, n0 := sent(t, c), rt.n.Load()
				r := httptest.NewRequest("GET", "/items", nil)
				r.Header.Set("X-API-Key", "k-"+tc.name)
				rec := serve(h, r)
				if rec.Code != wantStatus {
					t.Fatalf("status %d, want %d: %s", rec.Code, wantStatus, rec.Body)
				}
				return rt.n.Load() - n0, sent(t, c) - before
			}
			request(200) // loads the scripts
			// The release after the handler is a round trip of its own.
			releases := int64(0)
			if len(tc.policies) == 4 {
				releases = 1
			}
			for i := 0; i < 2; i++ {
				if trips, _ := request(200); trips != 1+releases {
					t.Fatalf("admitted: %d round trips, want 1 (+%d release)", trips, releases)
				}
			}
			trips, cmds := request(429)
			t.Logf("first denial: %d round trips, %d commands", trips, cmds)
			if trips > 3 { // the charges, the refund (and, the first time, loading the refund script)
				t.Fatalf("denied: %d round trips, want at most 2 (+1 loading the refund script)", trips)
			}
			var total, totalTrips int64
			for i := 0; i < 100; i++ {
				trips, cmds := request(429)
				total, totalTrips = total+cmds, totalTrips+trips
			}
			t.Logf("100 more denied requests: %d round trips, %d commands", totalTrips, total)
			if total != 0 || totalTrips != 0 {
				t.Fatalf("100 denied requests of a cached abuser sent %d commands in %d round trips, want 0", total, totalTrips)
			}
		})
	}
}
