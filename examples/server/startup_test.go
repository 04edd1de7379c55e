package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redisserver"
)

// recoverDeadline bounds each wait of TestStartWithRedisDown: for a line
// to be printed, for decisions to come from Redis again. Generous, for a
// loaded machine; the waits poll and end as soon as the condition holds.
const recoverDeadline = 30 * time.Second

// eventually polls cond every 50ms until it holds, failing the test with
// what after within.
func eventually(t *testing.T, within time.Duration, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStartWithRedisDown starts the demo on a redis-server that is not
// running: it warns and serves, the failure policy (local, the default)
// deciding every request. Once the server is back, Redis decides again:
// the quota's key appears in Redis, no further decision is degraded, and
// the quota Redis reports counts exactly the requests Redis decided (a
// fixed window, so no refill blurs the count).
func TestStartWithRedisDown(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	const limit = 1000
	w := windowFor(sluice.AlgFixedWindow)
	d := startDemo(t, "-redis", "redis://"+srv.Addr, "-algorithm", "fixed_window", "-limit", strconv.Itoa(limit), "-window", w.String())
	warning := "server: Redis at " + srv.Addr + " unreachable ("
	eventually(t, recoverDeadline,
		func() string { return "no warning " + strconv.Quote(warning) + " on stderr:\n" + d.errors() },
		func() bool {
			return strings.Contains(d.errors(), warning) && strings.Contains(d.errors(), "the -failure policy (fail-local) decides until it answers")
		})

	sent := 0
	send := func() response {
		t.Helper()
		r := get(t, d.base+"/")
		sent++
		if r.code != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200 (limit %d); body %s", sent, r.code, limit, r.body)
		}
		return r
	}
	// settled waits until the summary lines count every request sent.
	settled := func() (allowed, degraded int) {
		t.Helper()
		eventually(t, recoverDeadline,
			func() string {
				return "the summary lines do not count " + strconv.Itoa(sent) + " requests:\n" + d.output()
			},
			func() bool { a, n, _ := d.totals(); return a+n == sent })
		a, _, g := d.totals()
		return a, g
	}

	// More than the breaker's threshold of failures (5), so that it opens
	// and recovery goes through the Limiter's own probe.
	for range 10 {
		send()
	}
	if a, g := settled(); g != a {
		t.Fatalf("with Redis down: %d allowed, %d of them degraded; want all degraded:\n%s", a, g, d.output())
	}
	if keys, err := srv.Command("KEYS", "*"); err == nil {
		t.Fatalf("KEYS answered (%q) while redis-server was killed", keys)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	var keys string
	eventually(t, recoverDeadline,
		func() string {
			return "no key in Redis after it came back:\n" + d.output() + "\nstderr:\n" + d.errors()
		},
		func() bool {
			send()
			k, err := srv.Command("KEYS", "*")
			keys = k
			return err == nil && k != ""
		})
	if !strings.HasPrefix(keys, "sluice:{ip:127.0.0.1}:") || strings.Contains(keys, "\n") {
		t.Fatalf("keys in Redis %q; want one, sluice:{ip:127.0.0.1}:...", keys)
	}

	_, before := settled()
	var last response
	for range 10 {
		last = send()
	}
	allowed, degraded := settled()
	if degraded != before {
		t.Fatalf("%d decisions degraded after Redis decided again:\n%s", degraded-before, d.output())
	}
	// Redis counted what it decided, and nothing the failure policy did.
	if got, want := last.header.Get("X-RateLimit-Remaining"), strconv.Itoa(limit-(allowed-degraded)); got != want {
		t.Fatalf("X-RateLimit-Remaining %s after %d requests, %d decided by Redis; want %s", got, allowed, allowed-degraded, want)
	}
	t.Logf("%d requests: %d decided by the failure policy while Redis was down, %d by Redis", allowed, degraded, allowed-degraded)
}
