package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redisserver"
)

// BenchmarkServe measures the middleware on a private redis-server, next
// to the bare Limiter call it wraps: one round trip, with one policy or
// with two (one batch decision).
func BenchmarkServe(b *testing.B) {
	srv := redisserver.Start(b)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	lim, err := sluice.New(client, sluice.WithTimeout(time.Second), sluice.WithLogger(nil))
	if err != nil {
		b.Fatal(err)
	}
	big := func(name string) sluice.Limit { return sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named(name) }
	b.Run("limiter-allow", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := lim.Allow(context.Background(), "ip:192.0.2.1", big("a")); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, n := range []int{1, 2} {
		b.Run(map[int]string{1: "one-policy", 2: "two-policies"}[n], func(b *testing.B) {
			ps := []Policy{{Name: "a", Limit: big("a"), Key: RemoteIP()}}
			if n == 2 {
				ps = append(ps, Policy{Name: "b", Limit: big("b"), Key: APIKey("X-API-Key")})
			}
			m, err := New(Config{Limiter: lim, Logger: quiet, Policies: ps, Headers: HeadersBoth})
			if err != nil {
				b.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-API-Key", "k")
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if rec.Code != 200 {
					b.Fatal(rec.Code)
				}
			}
		})
	}
}

// BenchmarkOverhead measures the middleware in the process on a Limiter
// whose Redis replies are canned (no round trip), next to that Limiter's
// AllowN alone: the middleware's own cost is the difference.
func BenchmarkOverhead(b *testing.B) {
	lim := cannedLimiter(b)
	big := sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named("a")
	b.Run("limiter-allow", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := lim.AllowN(ctx, "ip:192.0.2.1", big, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, mode := range []HeaderMode{HeadersDraft, HeadersBoth} {
		b.Run(map[HeaderMode]string{HeadersDraft: "draft", HeadersBoth: "both"}[mode], func(b *testing.B) {
			m, err := New(Config{Limiter: lim, Logger: quiet, Headers: mode,
				Policies: []Policy{{Name: "a", Limit: big, Key: RemoteIP()}}})
			if err != nil {
				b.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r, _ := http.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			w := &headerWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
		})
	}
}
