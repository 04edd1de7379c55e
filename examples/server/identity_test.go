package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/adapters/httplimit"
)

// getWith is get with request headers, given as name, value pairs.
func getWith(t *testing.T, url string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s %q: %v", url, header, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s %q: reading the body: %v", url, header, err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: string(b)}
}

// step is one request of a scripted exchange and what it must get.
type step struct {
	header []string // request headers, name, value pairs
	code   int      // 200 or 429
	policy string   // the policy named in RateLimit-Policy (and, on a 429, violated)
	q      int      // its quota
	r      int      // RateLimit r= (0 on a 429)
}

// play sends the steps to d in order and checks each answer's status and
// draft headers; it returns how many were admitted and denied.
func play(t *testing.T, d *demo, steps []step) (allowed, denied int) {
	t.Helper()
	for i, s := range steps {
		r := getWith(t, d.base+"/", s.header...)
		if r.code != s.code {
			t.Fatalf("request %d %q: status %d, want %d; body %s", i, s.header, r.code, s.code, r.body)
		}
		if got, want := r.header.Get("RateLimit-Policy"), fmt.Sprintf(`"%s";q=%d;w=3600`, s.policy, s.q); got != want {
			t.Fatalf("request %d %q: RateLimit-Policy %q, want %q", i, s.header, got, want)
		}
		if got, want := r.header.Get("RateLimit"), fmt.Sprintf(`"%s";r=%d;`, s.policy, s.r); !strings.HasPrefix(got, want) {
			t.Fatalf("request %d %q: RateLimit %q, want %s...", i, s.header, got, want)
		}
		if r.code == http.StatusOK {
			allowed++
			continue
		}
		denied++
		var p httplimit.Problem
		if err := json.Unmarshal([]byte(r.body), &p); err != nil {
			t.Fatalf("request %d %q: body %q: %v", i, s.header, r.body, err)
		}
		if p.Type != httplimit.ProblemQuotaExceeded || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != s.policy {
			t.Fatalf("request %d %q: problem %+v, want quota-exceeded violating %q", i, s.header, p, s.policy)
		}
	}
	return allowed, denied
}

// quota is n admitted requests then one denied, with headers, under a
// policy of q (remaining counting down from q-1).
func quota(header []string, policy string, q, n int) []step {
	var out []step
	for i := 0; i < n; i++ {
		out = append(out, step{header, 200, policy, q, q - 1 - i})
	}
	return append(out, step{header, 429, policy, q, 0})
}

func concat(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestTrustedProxies: behind -trusted-proxies 127.0.0.0/8 (the tests'
// connections come from 127.0.0.1), each client address forwarded in
// X-Forwarded-For (or, with -forwarded-header forwarded, in Forwarded) has
// a quota of its own, and only the rightmost hop counts: a client cannot
// take a fresh quota by writing addresses to the left of the one the
// proxy appended. Without -trusted-proxies, or with a peer that is not
// among them, the header is ignored: every request is 127.0.0.1's.
func TestTrustedProxies(t *testing.T) {
	xff := func(v string) []string { return []string{"X-Forwarded-For", v} }
	fwd := func(v string) []string { return []string{"Forwarded", v} }
	for _, tc := range []struct {
		name   string
		args   []string
		banner string
		steps  []step
	}{
		{
			name:   "x-forwarded-for",
			args:   []string{"-trusted-proxies", "127.0.0.0/8"},
			banner: "client IP from X-Forwarded-For when the peer is in 127.0.0.0/8",
			steps: concat(
				quota(xff("203.0.113.1"), "per-ip", 2, 2),
				quota(xff("203.0.113.2"), "per-ip", 2, 2),
				// The rightmost untrusted hop is the client: 203.0.113.2, spent.
				[]step{{xff("198.51.100.7, 203.0.113.2"), 429, "per-ip", 2, 0}},
				// Trusted hops (127.0.0.0/8) are skipped: the client is 203.0.113.3.
				quota(xff("203.0.113.3, 127.0.0.9"), "per-ip", 2, 2),
				// No header: the peer, 127.0.0.1, has a quota of its own.
				quota(nil, "per-ip", 2, 2),
			),
		},
		{
			name:   "forwarded",
			args:   []string{"-trusted-proxies", "10.0.0.0/8, 127.0.0.1", "-forwarded-header", "forwarded"},
			banner: "client IP from Forwarded when the peer is in 10.0.0.0/8,127.0.0.1",
			steps: concat(
				quota(fwd("for=203.0.113.1"), "per-ip", 2, 2),
				quota(fwd(`for="[2001:db8::1]:4711";proto=https`), "per-ip", 2, 2),
				// X-Forwarded-For is not the header chosen: ignored, the peer's quota.
				quota(xff("203.0.113.9"), "per-ip", 2, 2),
			),
		},
		{
			name: "no trusted proxies",
			args: nil,
			steps: []step{
				{xff("203.0.113.1"), 200, "per-ip", 2, 1},
				{xff("203.0.113.2"), 200, "per-ip", 2, 0},
				{xff("203.0.113.3"), 429, "per-ip", 2, 0},
				{nil, 429, "per-ip", 2, 0},
			},
		},
		{
			name: "peer not trusted",
			args: []string{"-trusted-proxies", "10.0.0.0/8"},
			steps: []step{
				{xff("203.0.113.1"), 200, "per-ip", 2, 1},
				{xff("203.0.113.2"), 200, "per-ip", 2, 0},
				{xff("203.0.113.3"), 429, "per-ip", 2, 0},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := startDemo(t, append([]string{"-limit", "2", "-window", "1h"}, tc.args...)...)
			if tc.banner != "" && !strings.Contains(d.output(), tc.banner) {
				t.Fatalf("banner does not say %q:\n%s", tc.banner, d.output())
			}
			allowed, denied := play(t, d, tc.steps)
			d.stopAndCheck(t, allowed, denied)
		})
	}
}

// TestAPIKeyTier: with -limit 2 -api-key-limit 5, each API key has 5
// requests of its own (policy per-key), whatever address it comes from,
// and requests without a key (or with a blank one) share their client IP's
// 2 (policy per-ip). Spending one tier's quota leaves the other's whole.
// On every framework: the tiers are the shared middleware's, the shims
// only carry them.
func TestAPIKeyTier(t *testing.T) {
	key := func(k string) []string { return []string{"X-API-Key", k} }
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			d := startDemo(t, "-framework", fw, "-limit", "2", "-api-key-limit", "5", "-window", "1h")
			if want := "requests with an X-API-Key header: 5 requests per 1h0m0s (bursts of 5) per API key"; !strings.Contains(d.output(), want) {
				t.Fatalf("banner does not say %q:\n%s", want, d.output())
			}
			allowed, denied := play(t, d, concat(
				quota(key("alpha"), "per-key", 5, 5),
				quota(key("beta"), "per-key", 5, 5),
				quota(nil, "per-ip", 2, 2),
				[]step{
					{key("   "), 429, "per-ip", 2, 0}, // blank: no key, per IP
					{key(" alpha "), 429, "per-key", 5, 0},
				},
				quota(key("gamma"), "per-key", 5, 5), // the IP's quota is spent, not the key's
			))
			d.stopAndCheck(t, allowed, denied)
		})
	}
}

// TestSharedPolicies: -path-limit and -global-limit add policies beside
// per-ip, all decided in one batch: with -limit 5 -path-limit 3
// -global-limit 4, the fourth request to / is denied by per-path (and
// charges nothing: per-ip and global still have what the three admitted
// requests left), a request to another path passes, and the next is denied
// by global.
func TestSharedPolicies(t *testing.T) {
	d := startDemo(t, "-limit", "5", "-path-limit", "3", "-global-limit", "4", "-window", "1h")
	for _, want := range []string{"and 3 requests per 1h0m0s (bursts of 3) per request path", "and 4 requests per 1h0m0s (bursts of 4) for the whole API"} {
		if !strings.Contains(d.output(), want) {
			t.Fatalf("banner does not say %q:\n%s", want, d.output())
		}
	}
	for i, s := range []struct {
		path, rateLimit string
		code            int
		violated        string
	}{
		{"/", `"per-ip";r=4;t=720, "per-path";r=2;t=1200, "global";r=3;t=900`, 200, ""},
		{"/", `"per-ip";r=3;t=1440, "per-path";r=1;t=2400, "global";r=2;t=1800`, 200, ""},
		{"/", `"per-ip";r=2;t=2160, "per-path";r=0;t=3600, "global";r=1;t=2700`, 200, ""},
		{"/", `"per-ip";r=2;t=2160, "per-path";r=0;t=1200, "global";r=1;t=2700`, 429, "per-path"},
		{"/hello/x", `"per-ip";r=1;t=2880, "per-path";r=2;t=1200, "global";r=0;t=3600`, 200, ""},
		{"/hello/y", `"per-ip";r=1;t=2880, "per-path";r=3;t=0, "global";r=0;t=900`, 429, "global"},
	} {
		r := getWith(t, d.base+s.path)
		if r.code != s.code {
			t.Fatalf("request %d (%s): status %d, want %d; body %s", i, s.path, r.code, s.code, r.body)
		}
		if got := r.header.Get("RateLimit"); got != s.rateLimit {
			t.Errorf("request %d (%s): RateLimit %q\n want %q", i, s.path, got, s.rateLimit)
		}
		if s.violated != "" && !strings.Contains(r.body, `"violated-policies":["`+s.violated+`"]`) {
			t.Errorf("request %d (%s): body %s, want violated-policies [%s]", i, s.path, r.body, s.violated)
		}
	}
	// The summary counts the Limiter's decisions, one per policy: the 4
	// admitted requests' 12, and each denied one's 2 admitted and 1 denied.
	d.stopAndCheck(t, 16, 2)
}
