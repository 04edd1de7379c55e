package overrides_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/internal/canned"
	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/overrides"
)

// costSetup is a redis-server with a policy's overrides on it: 200
// identities overridden, of which 2 are among the 20 a run sends.
type costSetup struct {
	srv   *redisserver.Server
	store *overrides.Store
	trips *tripCounter
	keys  []string // the API keys a run sends, 20
}

var big = sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named("big")

func newCostSetup(t testing.TB) *costSetup {
	t.Helper()
	cs := &costSetup{srv: redisserver.Start(t)}
	addrs := []string{cs.srv.Addr}
	cs.trips = &tripCounter{Client: newClient(t, addrs, true)}
	var err error
	if cs.store, err = overrides.New(cs.trips, overrides.Options{Logger: quiet, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	admin, err := overrides.New(newClient(t, addrs, false), overrides.Options{Logger: quiet, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 200 {
		o := overrides.Override{Policy: "per-key", Identity: apiKeyID("other-" + strconv.Itoa(i)), Kind: overrides.Block}
		if i < 2 {
			// Two of the keys sent get a limit of their own.
			o = overrides.Override{Policy: "per-key", Identity: apiKeyID("key-" + strconv.Itoa(i)), Kind: overrides.Limit, Rate: 1 << 29}
		}
		if err := admin.Set(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		cs.keys = append(cs.keys, "key-"+strconv.Itoa(i))
	}
	return cs
}

// handler is a middleware with one policy, per-key, on lim, with the
// Store or without overrides.
func (cs *costSetup) handler(t testing.TB, lim *sluice.Limiter, withOverrides bool) http.Handler {
	t.Helper()
	cfg := httplimit.Config{Limiter: lim, Logger: quiet,
		Policies: []httplimit.Policy{{Name: "per-key", Limit: big, Key: httplimit.APIKey("X-API-Key")}}}
	if withOverrides {
		cfg.Overrides = cs.store
	}
	mw, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
}

// requests are one request per key, reused.
func (cs *costSetup) requests() []*http.Request {
	var rs []*http.Request
	for _, k := range cs.keys {
		r, _ := http.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", k)
		r.RemoteAddr = "192.0.2.1:1234"
		rs = append(rs, r)
	}
	return rs
}

// headerWriter is a ResponseWriter that keeps only its headers.
type headerWriter struct{ h http.Header }

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerWriter) WriteHeader(int)             {}

// TestOverridesCostNothing: on a redis-server, 200 admitted requests in
// steady state through httplimit with a Store configured (200 identities
// overridden, 2 of the 20 sent among them) send Redis exactly the
// commands, in the round trips, of the same requests without overrides;
// the Store makes no round trip.
func TestOverridesCostNothing(t *testing.T) {
	cs := newCostSetup(t)
	limClient := &tripCounter{Client: newClient(t, []string{cs.srv.Addr}, false)}
	lim, err := sluice.New(limClient, sluice.WithLogger(nil), sluice.WithSilenceTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	servers := []*redisserver.Server{cs.srv}
	reqs := cs.requests()
	run := func(h http.Handler) (cmds, trips, storeTrips int64) {
		w := &headerWriter{h: http.Header{}}
		for _, r := range reqs { // steady state: scripts loaded, overrides read
			h.ServeHTTP(w, r)
		}
		c0, t0, s0 := commands(t, servers), limClient.n.Load(), cs.trips.n.Load()
		for i := range 200 {
			clear(w.h)
			h.ServeHTTP(w, reqs[i%len(reqs)])
			if w.h.Get("RateLimit") == "" {
				t.Fatalf("request %d: no RateLimit header", i)
			}
		}
		return commands(t, servers) - c0, limClient.n.Load() - t0, cs.trips.n.Load() - s0
	}
	plainCmds, plainTrips, _ := run(cs.handler(t, lim, false))
	cmds, trips, storeTrips := run(cs.handler(t, lim, true))
	t.Logf("200 admitted requests: without overrides %d commands in %d round trips; with %d in %d, and %d of the Store",
		plainCmds, plainTrips, cmds, trips, storeTrips)
	if cmds != plainCmds || trips != plainTrips || storeTrips != 0 {
		t.Fatalf("overrides cost %d commands and %d round trips more, the Store %d round trips; want 0",
			cmds-plainCmds, trips-plainTrips, storeTrips)
	}
}

// BenchmarkOverhead is what a Store configured on httplimit adds to an
// admitted request in the process: the middleware on a Limiter whose
// script replies are canned (no round trip), without and with the Store
// (on a redis-server, answering from rueidis' cache: 200 identities
// overridden, 2 of the 20 sent among them).
//
//	go test -run '^$' -bench Overhead -benchmem -count 5 ./overrides
func BenchmarkOverhead(b *testing.B) {
	cs := newCostSetup(b)
	lim, err := sluice.New(canned.New(newClient(b, []string{cs.srv.Addr}, false)),
		sluice.WithTimeout(time.Minute), sluice.WithLogger(nil))
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	reqs := cs.requests()
	for _, tc := range []struct {
		name string
		with bool
	}{{"none", false}, {"store", true}} {
		b.Run(tc.name, func(b *testing.B) {
			h := cs.handler(b, lim, tc.with)
			w := &headerWriter{h: http.Header{}}
			for _, r := range reqs {
				h.ServeHTTP(w, r)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				clear(w.h)
				h.ServeHTTP(w, reqs[i%len(reqs)])
			}
		})
	}
}

// BenchmarkLookup is Store.Lookup alone, answered from rueidis' cache:
// an identity without an override, and one with.
func BenchmarkLookup(b *testing.B) {
	cs := newCostSetup(b)
	ctx := context.Background()
	for _, tc := range []struct{ name, id string }{
		{"none", apiKeyID("key-19")},
		{"overridden", apiKeyID("key-0")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			_, want := cs.store.Lookup(ctx, "per-key", tc.id)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, ok := cs.store.Lookup(ctx, "per-key", tc.id); ok != want {
					b.Fatal("the answer changed")
				}
			}
		})
	}
}

var _ rueidis.Client = (*tripCounter)(nil)
