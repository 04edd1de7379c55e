package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

// windowFor returns a window of about an hour for alg, chosen so that a
// fixed window (epoch-aligned) has at least 10 minutes left: a test's
// requests never straddle a window boundary, however slow the machine.
func windowFor(alg sluice.Algorithm) time.Duration {
	w := time.Hour
	if alg != sluice.AlgFixedWindow {
		return w
	}
	for ; ; w += time.Second {
		now := time.Now().UnixMicro()
		if left := w.Microseconds() - now%w.Microseconds(); left >= (10 * time.Minute).Microseconds() {
			return w
		}
	}
}

var (
	draftRateLimit = regexp.MustCompile(`^"per-ip";r=(\d+);t=(\d+)$`)
	digits         = regexp.MustCompile(`\d+`)
)

// horizon is the longest time until a quota of alg is whole again: the
// window, or two for the sliding window counter, whose previous window
// still weighs until the current one ends.
func horizon(alg sluice.Algorithm, window time.Duration) time.Duration {
	if alg == sluice.AlgSlidingWindow {
		return 2 * window
	}
	return window
}

// checkAllowed checks an admitted response and its rate-limit headers
// (both sets) for a policy of limit per window, remaining after it. Reset
// times may be up to horizon away.
func checkAllowed(t *testing.T, i int, r response, limit, remaining int, window, horizon time.Duration) {
	t.Helper()
	if r.code != http.StatusOK {
		t.Fatalf("request %d: status %d, want 200; body %s", i, r.code, r.body)
	}
	w := int((window + time.Second - 1) / time.Second)
	if got, want := r.header.Get("RateLimit-Policy"), fmt.Sprintf(`"per-ip";q=%d;w=%d`, limit, w); got != want {
		t.Fatalf("request %d: RateLimit-Policy %q, want %q", i, got, want)
	}
	m := draftRateLimit.FindStringSubmatch(r.header.Get("RateLimit"))
	if m == nil {
		t.Fatalf("request %d: RateLimit %q, want \"per-ip\";r=N;t=N", i, r.header.Get("RateLimit"))
	}
	if r, _ := strconv.Atoi(m[1]); r != remaining {
		t.Fatalf("request %d: RateLimit r=%d, want %d", i, r, remaining)
	}
	if tt, _ := strconv.Atoi(m[2]); tt < 1 || tt > int(horizon/time.Second) {
		t.Fatalf("request %d: RateLimit t=%d, want 1..%d", i, tt, horizon/time.Second)
	}
	if got := r.header.Get("X-RateLimit-Limit"); got != strconv.Itoa(limit) {
		t.Fatalf("request %d: X-RateLimit-Limit %q, want %d", i, got, limit)
	}
	if got := r.header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(remaining) {
		t.Fatalf("request %d: X-RateLimit-Remaining %q, want %d", i, got, remaining)
	}
	checkReset(t, i, r, horizon)
	if r.header.Get("Retry-After") != "" {
		t.Fatalf("request %d: admitted with Retry-After %q", i, r.header.Get("Retry-After"))
	}
}

// checkReset checks X-RateLimit-Reset is a Unix time at most horizon away.
func checkReset(t *testing.T, i int, r response, horizon time.Duration) {
	t.Helper()
	reset, err := strconv.ParseInt(r.header.Get("X-RateLimit-Reset"), 10, 64)
	now := time.Now().Unix()
	if err != nil || reset < now-1 || reset > now+int64(horizon/time.Second)+1 {
		t.Fatalf("request %d: X-RateLimit-Reset %q, want Unix seconds in [%d, %d]", i,
			r.header.Get("X-RateLimit-Reset"), now-1, now+int64(horizon/time.Second)+1)
	}
}

// checkDenied checks a 429: Retry-After, both header sets, and the
// problem+json body of the draft's quota-exceeded type.
func checkDenied(t *testing.T, i int, r response, path string, limit int, window, horizon time.Duration) {
	t.Helper()
	if r.code != http.StatusTooManyRequests {
		t.Fatalf("request %d: status %d, want 429; body %s", i, r.code, r.body)
	}
	w := int((window + time.Second - 1) / time.Second)
	// The sliding window counter's wait can pass one window early in a
	// window (the previous window's weight is still high): up to horizon.
	h := int((horizon + time.Second - 1) / time.Second)
	retry, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || retry < 1 || retry > h {
		t.Fatalf("request %d: Retry-After %q, want whole seconds in 1..%d", i, r.header.Get("Retry-After"), h)
	}
	if got, want := r.header.Get("RateLimit-Policy"), fmt.Sprintf(`"per-ip";q=%d;w=%d`, limit, w); got != want {
		t.Fatalf("request %d: RateLimit-Policy %q, want %q", i, got, want)
	}
	if got, want := r.header.Get("RateLimit"), fmt.Sprintf(`"per-ip";r=0;t=%d`, retry); got != want {
		t.Fatalf("request %d: RateLimit %q, want %q (t = Retry-After)", i, got, want)
	}
	if r.header.Get("X-RateLimit-Limit") != strconv.Itoa(limit) || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("request %d: X-RateLimit-Limit %q, -Remaining %q; want %d, 0", i,
			r.header.Get("X-RateLimit-Limit"), r.header.Get("X-RateLimit-Remaining"), limit)
	}
	checkReset(t, i, r, horizon)
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("request %d: Content-Type %q, want application/problem+json", i, ct)
	}
	var p httplimit.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("request %d: body %q: %v", i, r.body, err)
	}
	want := httplimit.Problem{
		Type:             httplimit.ProblemQuotaExceeded,
		Title:            "Quota exceeded",
		Status:           429,
		Detail:           fmt.Sprintf("Quota exceeded for per-ip (%d per %d s); retry in %d s.", limit, w, retry),
		Instance:         path,
		ViolatedPolicies: []string{"per-ip"},
	}
	if fmt.Sprint(p) != fmt.Sprint(want) {
		t.Fatalf("request %d: problem\n%+v\nwant\n%+v", i, p, want)
	}
}

// TestFrameworks runs the demo on each framework with -limit 10: the
// first request (GET /hello/ada) and the next nine (GET /) are admitted
// with remaining counting down, the next two are 429s; /hello shares the
// quota; /healthz is exempt and carries no rate-limit headers. The 429s
// of all four frameworks are the same, digits aside.
func TestFrameworks(t *testing.T) {
	denials := make([]string, len(frameworks))
	t.Run("group", func(t *testing.T) {
		for i, fw := range frameworks {
			t.Run(fw, func(t *testing.T) {
				t.Parallel()
				d := startDemo(t, "-framework", fw, "-limit", "10", "-window", "1h")
				r := get(t, d.base+"/hello/ada")
				checkAllowed(t, 0, r, 10, 9, time.Hour, time.Hour)
				checkMessage(t, r, "hello, ada")
				for n := 1; n < 12; n++ {
					r := get(t, d.base+"/")
					if n < 10 {
						checkAllowed(t, n, r, 10, 9-n, time.Hour, time.Hour)
						checkMessage(t, r, "hello, world")
					} else {
						checkDenied(t, n, r, "/", 10, time.Hour, time.Hour)
					}
				}
				r = get(t, d.base+"/hello/bob")
				checkDenied(t, 12, r, "/hello/bob", 10, time.Hour, time.Hour)
				names := slices.Sorted(func(yield func(string) bool) {
					for k := range r.header {
						if k != "Date" && k != "Content-Length" && !yield(k) {
							return
						}
					}
				})
				denials[i] = digits.ReplaceAllString(fmt.Sprint(names, r.header.Get("RateLimit"), r.body), "N")

				h := get(t, d.base+"/healthz")
				if h.code != http.StatusOK {
					t.Fatalf("GET /healthz after the quota: %d, want 200", h.code)
				}
				for _, k := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "Retry-After"} {
					if v := h.header.Get(k); v != "" {
						t.Fatalf("GET /healthz has %s: %q; it is exempt", k, v)
					}
				}
				d.stopAndCheck(t, 10, 3)
			})
		}
	})
	if slices.Contains(denials, "") {
		return // a framework failed or was not run
	}
	for i := 1; i < len(frameworks); i++ {
		if denials[i] != denials[0] {
			t.Errorf("429 on %s differs from %s:\n%s\n%s", frameworks[i], frameworks[0], denials[i], denials[0])
		}
	}
}

// checkMessage checks the JSON body of an admitted request.
func checkMessage(t *testing.T, r response, want string) {
	t.Helper()
	var msg map[string]string
	if err := json.Unmarshal([]byte(r.body), &msg); err != nil || msg["message"] != want {
		t.Fatalf("body %q (%v), want message %q", r.body, err, want)
	}
}

// stopAndCheck stops the demo and checks that its per-second summary lines
// add up to the decisions the test saw.
func (d *demo) stopAndCheck(t *testing.T, allowed, denied int) {
	t.Helper()
	if err := d.stop(); err != nil {
		t.Fatalf("stop: %v\nstderr:\n%s", err, d.errors())
	}
	if !strings.Contains(d.output(), "\nshutting down") {
		t.Fatalf("no 'shutting down' line after SIGTERM:\n%s", d.output())
	}
	a, n, g := d.totals()
	if a != allowed || n != denied || g != 0 {
		t.Fatalf("summary lines add up to allowed=%d denied=%d degraded=%d, want %d, %d, 0:\n%s",
			a, n, g, allowed, denied, d.output())
	}
}

// TestAlgorithms runs every algorithm with -limit 10 (burst 10 for gcra and
// token_bucket): ten 200s then two 429s, each algorithm on another
// framework.
func TestAlgorithms(t *testing.T) {
	for i, alg := range algorithms {
		fw := frameworks[i%len(frameworks)]
		t.Run(string(alg)+"/"+fw, func(t *testing.T) {
			t.Parallel()
			w := windowFor(alg)
			d := startDemo(t, "-framework", fw, "-algorithm", string(alg), "-limit", "10", "-window", w.String())
			if !strings.Contains(d.output(), fmt.Sprintf("sluice demo on %s: %s, 10 requests per %v", fw, alg, w)) {
				t.Fatalf("banner does not name %s, %s and %v:\n%s", fw, alg, w, d.output())
			}
			for n := 0; n < 12; n++ {
				r := get(t, d.base+"/")
				if n < 10 {
					checkAllowed(t, n, r, 10, 9-n, w, horizon(alg, w))
				} else {
					checkDenied(t, n, r, "/", 10, w, horizon(alg, w))
				}
			}
			d.stopAndCheck(t, 10, 2)
		})
	}
}

// TestHeaderModes checks -headers draft, legacy and none.
func TestHeaderModes(t *testing.T) {
	for _, tc := range []struct {
		mode         string
		draft, xrate bool
	}{
		{"draft", true, false},
		{"legacy", false, true},
		{"none", false, false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			d := startDemo(t, "-headers", tc.mode, "-limit", "1", "-window", "1h")
			for n, want := range []int{200, 429} {
				r := get(t, d.base+"/")
				if r.code != want {
					t.Fatalf("request %d: %d, want %d", n, r.code, want)
				}
				has := func(k string) bool { return r.header.Get(k) != "" }
				if has("RateLimit") != tc.draft || has("RateLimit-Policy") != tc.draft {
					t.Fatalf("request %d: RateLimit %q, RateLimit-Policy %q; want present=%v", n,
						r.header.Get("RateLimit"), r.header.Get("RateLimit-Policy"), tc.draft)
				}
				for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
					if has(k) != tc.xrate {
						t.Fatalf("request %d: %s %q; want present=%v", n, k, r.header.Get(k), tc.xrate)
					}
				}
				if has("Retry-After") != (want == 429) {
					t.Fatalf("request %d: Retry-After %q", n, r.header.Get("Retry-After"))
				}
			}
		})
	}
}

// TestCommandLine checks what the binary does with a bad command line
// (exit 2 and a message) and when it cannot start (exit 1 and a message).
func TestCommandLine(t *testing.T) {
	busy := startDemo(t)
	busyAddr := strings.TrimPrefix(busy.base, "http://")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-framework", "django"}, 2, `-framework "django": want one of nethttp, chi, gin, echo`},
		{[]string{"-algorithm", "leaky_bucket"}, 2, `-algorithm "leaky_bucket"`},
		{[]string{"-limit", "-3"}, 2, "-limit -3"},
		{[]string{"-window", "forever"}, 2, `invalid value "forever" for flag -window`},
		{[]string{"-headers", "x"}, 2, `-headers "x"`},
		{[]string{"-bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"-redis", "127.0.0.1"}, 1, `-redis "127.0.0.1": "127.0.0.1" is not host:port`},
		// A single address that does not answer is not fatal (see
		// TestStartWithRedisDown); cluster seeds of which none answers are.
		{[]string{"-redis", "127.0.0.1:1,127.0.0.1:2"}, 1, "cannot connect to Redis at 127.0.0.1:1,127.0.0.1:2: none of these cluster seeds answers"},
		{[]string{"-trusted-proxies", "10.0.0.0/33"}, 2, `-trusted-proxies "10.0.0.0/33": "10.0.0.0/33" is not a CIDR prefix`},
		{[]string{"-trusted-proxies", "10.0.0.0/8,proxy.internal"}, 2, `-trusted-proxies "10.0.0.0/8,proxy.internal": "proxy.internal" is not a CIDR prefix`},
		{[]string{"-forwarded-header", "forwarded"}, 2, "-forwarded-header forwarded needs -trusted-proxies: add -trusted-proxies"},
		{[]string{"-trusted-proxies", "127.0.0.0/8", "-forwarded-header", "x-real-ip"}, 2, `-forwarded-header "x-real-ip": want x-forwarded-for or forwarded`},
		{[]string{"-api-key-limit", "-5"}, 2, "-api-key-limit -5: want 0 (off) or more"},
		{[]string{"-addr", busyAddr}, 1, "cannot listen on " + busyAddr},
	} {
		cmd := exec.Command(binary(t), tc.args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("server %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
	cmd := exec.Command(binary(t), "-h")
	out, err := cmd.CombinedOutput()
	for _, flag := range []string{"-framework string", "-trusted-proxies string", "-forwarded-header string", "-api-key-limit int"} {
		if err != nil || !strings.Contains(string(out), flag) {
			t.Errorf("server -h: %v, %q; want exit 0 and the flags (%s)", err, out, flag)
		}
	}
}
