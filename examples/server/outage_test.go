package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/internal/redisserver"
)

// TestRedisOutage stops the demo's redis-server under it and checks each
// -failure policy: open admits, closed answers 503 with the draft's
// temporary-reduced-capacity problem, local admits this replica's share
// (-limit 6 / -replicas 3 = 2) and then denies. No response carries Redis
// error text, and the summary lines count the degraded decisions.
func TestRedisOutage(t *testing.T) {
	for _, tc := range []struct {
		failure string
		after   []int // statuses once Redis is gone
	}{
		{"open", []int{200, 200, 200}},
		{"closed", []int{503, 503, 503}},
		{"local", []int{200, 200, 0}}, // 0: denied, 429 or 503
	} {
		t.Run(tc.failure, func(t *testing.T) {
			t.Parallel()
			srv := redisserver.Start(t)
			d := startDemo(t, "-redis", srv.Addr, "-failure", tc.failure, "-replicas", "3", "-limit", "6", "-window", "1h")
			if r := get(t, d.base+"/"); r.code != http.StatusOK {
				t.Fatalf("with Redis up: %d, want 200", r.code)
			}
			srv.Stop()
			allowed, denied := 1, 0
			for i, want := range tc.after {
				r := get(t, d.base+"/")
				if want != 0 && r.code != want || want == 0 && r.code != 429 && r.code != 503 {
					t.Fatalf("request %d with Redis gone: status %d, want %d; body %s", i, r.code, want, r.body)
				}
				for _, leak := range []string{srv.Addr, "refused", "dial", "connect", "EOF", "rueidis"} {
					if strings.Contains(r.body, leak) || strings.Contains(strings.Join(r.header.Values("RateLimit"), ""), leak) {
						t.Fatalf("request %d: response carries Redis error text %q: %s", i, leak, r.body)
					}
				}
				if r.code == http.StatusOK {
					allowed++
					continue
				}
				denied++
				var p httplimit.Problem
				if err := json.Unmarshal([]byte(r.body), &p); err != nil || r.header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("request %d: %s body %q (%v)", i, r.header.Get("Content-Type"), r.body, err)
				}
				if r.code == http.StatusServiceUnavailable && p.Type != httplimit.ProblemTemporaryReducedCapacity {
					t.Fatalf("request %d: 503 with problem type %q, want %q", i, p.Type, httplimit.ProblemTemporaryReducedCapacity)
				}
				if r.header.Get("Retry-After") == "" {
					t.Fatalf("request %d: denied without Retry-After", i)
				}
			}
			if err := d.stop(); err != nil {
				t.Fatal(err)
			}
			a, n, g := d.totals()
			if a != allowed || n != denied || g != len(tc.after) {
				t.Fatalf("summary lines add up to allowed=%d denied=%d degraded=%d; want %d, %d, %d:\n%s",
					a, n, g, allowed, denied, len(tc.after), d.output())
			}
		})
	}
}
