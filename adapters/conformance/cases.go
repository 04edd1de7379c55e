package conformance

import (
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func must(k httplimit.KeyFunc, err error) httplimit.KeyFunc {
	if err != nil {
		panic(err)
	}
	return k
}

const quotaBody = `"type":"https://iana.org/assignments/http-problem-types#quota-exceeded"`

// Cases returns the suite's cases.
func Cases() []Case {
	perMin := func(n int64, name string) sluice.Limit {
		return sluice.Must(sluice.FixedWindow(n, time.Minute)).Named(name)
	}
	ip := httplimit.RemoteIP()
	return []Case{
		{
			Name: "allowed-denied",
			Config: func(e *Env) httplimit.Config {
				return httplimit.Config{Headers: httplimit.HeadersBoth,
					Policies: []httplimit.Policy{{Name: "demo", Limit: perMin(2, "demo"), Key: ip}}}
			},
			Steps: []Step{
				{Path: "/items/1", Status: 200, Want: map[string]string{
					"RateLimit-Policy": `"demo";q=2;w=60`, "RateLimit": `"demo";r=1;t=40`,
					"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1700000040",
					"Retry-After": ""}},
				{Path: "/items/2", Status: 200, Want: map[string]string{"RateLimit": `"demo";r=0;t=40`}},
				{Advance: 500 * time.Millisecond, Path: "/items/3", Status: 429, Body: quotaBody, Want: map[string]string{
					"RateLimit": `"demo";r=0;t=40`, "Retry-After": "40", "X-RateLimit-Remaining": "0",
					"X-RateLimit-Reset": "1700000040", "Content-Type": "application/problem+json"}},
				{Advance: 39500 * time.Millisecond, Path: "/items/4", Status: 200, Want: map[string]string{
					"RateLimit": `"demo";r=1;t=60`, "X-RateLimit-Reset": "1700000100"}},
			},
		},
		{
			Name: "exempt",
			Config: func(e *Env) httplimit.Config {
				return httplimit.Config{
					Policies: []httplimit.Policy{{Name: "demo", Limit: perMin(1, "demo"), Key: ip}},
					Exempt:   httplimit.ExemptRoutes(e.T("GET", "/healthz")),
				}
			},
			Steps: []Step{
				{Path: "/healthz", Status: 200, Want: map[string]string{"RateLimit": "", "RateLimit-Policy": ""}},
				{Path: "/items/1", Status: 200, Want: map[string]string{"RateLimit": `"demo";r=0;t=40`}},
				{Path: "/items/1", Status: 429},
				{Path: "/healthz", Status: 200, Want: map[string]string{"RateLimit": "", "Retry-After": ""}},
			},
		},
		{
			Name: "tiers",
			Config: func(e *Env) httplimit.Config {
				sub := httplimit.Subject()
				return httplimit.Config{
					Tiers: map[string][]httplimit.Policy{
						"anonymous": {{Name: "anonymous", Limit: perMin(1, "anonymous"), Key: ip}},
						"free":      {{Name: "free", Limit: perMin(2, "free"), Key: sub}},
						"pro":       {{Name: "pro", Limit: perMin(3, "pro"), Key: sub}},
					},
					DefaultTier: "anonymous",
					Tier: func(r *http.Request) string {
						s, ok := httplimit.SubjectFrom(r.Context())
						switch {
						case !ok:
							return "anonymous"
						case strings.HasPrefix(s, "pro-"):
							return "pro"
						}
						return "free"
					},
				}
			},
			Steps: []Step{
				{Path: "/items/1", Status: 200, Want: map[string]string{"RateLimit": `"anonymous";r=0;t=40`}},
				{Path: "/items/1", Status: 429, Body: `"violated-policies":["anonymous"]`},
				{Path: "/items/1", Subject: "alice", Status: 200, Want: map[string]string{"RateLimit-Policy": `"free";q=2;w=60`, "RateLimit": `"free";r=1;t=40`}},
				{Path: "/items/1", Subject: "alice", Status: 200},
				{Path: "/items/1", Subject: "alice", Status: 429, Body: `"violated-policies":["free"]`},
				{Path: "/items/1", Subject: "pro-bob", Status: 200, Want: map[string]string{"RateLimit-Policy": `"pro";q=3;w=60`, "RateLimit": `"pro";r=2;t=40`}},
				{Path: "/items/1", Subject: "a}b", Status: 200, Want: map[string]string{"RateLimit": `"free";r=1;t=40`}},
				{Path: "/items/1", Subject: "{x}", Status: 200, Want: map[string]string{"RateLimit": `"free";r=1;t=40`}},
			},
		},
		{
			Name: "per-route",
			Config: func(e *Env) httplimit.Config {
				return httplimit.Config{
					Policies: []httplimit.Policy{{Name: "demo", Limit: perMin(5, "demo"), Key: ip}},
					Routes: map[string][]httplimit.Policy{
						e.T("POST", "/upload"): {{Name: "upload", Limit: perMin(1, "upload"), Key: ip}},
					},
				}
			},
			Steps: []Step{
				{Method: "POST", Path: "/upload", Status: 200, Want: map[string]string{
					"RateLimit-Policy": `"demo";q=5;w=60, "upload";q=1;w=60`, "RateLimit": `"demo";r=4;t=40, "upload";r=0;t=40`}},
				// denied by upload: demo is peeked, not charged
				{Method: "POST", Path: "/upload", Status: 429, Body: `"violated-policies":["upload"]`, Want: map[string]string{
					"RateLimit": `"demo";r=4;t=40, "upload";r=0;t=40`, "Retry-After": "40"}},
				{Path: "/items/7", Status: 200, Want: map[string]string{"RateLimit-Policy": `"demo";q=5;w=60`, "RateLimit": `"demo";r=3;t=40`}},
			},
		},
		{
			Name: "two-policies",
			Config: func(e *Env) httplimit.Config {
				return httplimit.Config{Policies: []httplimit.Policy{
					{Name: "per-ip", Limit: perMin(3, "per-ip"), Key: ip},
					{Name: "per-tenant", Limit: perMin(2, "per-tenant"), Key: httplimit.Subject()},
				}}
			},
			Steps: []Step{
				{Path: "/items/1", Subject: "alice", Status: 200, Want: map[string]string{"RateLimit": `"per-ip";r=2;t=40, "per-tenant";r=1;t=40`}},
				{Path: "/items/1", Subject: "alice", Status: 200, Want: map[string]string{"RateLimit": `"per-ip";r=1;t=40, "per-tenant";r=0;t=40`}},
				{Path: "/items/1", Subject: "alice", Status: 429, Body: `"violated-policies":["per-tenant"]`, Want: map[string]string{
					"RateLimit": `"per-ip";r=1;t=40, "per-tenant";r=0;t=40`}},
				{Path: "/items/1", Subject: "bob", Status: 200, Want: map[string]string{"RateLimit": `"per-ip";r=0;t=40, "per-tenant";r=1;t=40`}},
				{Path: "/items/1", Subject: "carol", Status: 429, Body: `"violated-policies":["per-ip"]`, Want: map[string]string{
					"RateLimit": `"per-ip";r=0;t=40, "per-tenant";r=2;t=0`}},
				// no subject: only the per-IP policy applies
				{Path: "/items/1", Status: 429, Want: map[string]string{"RateLimit-Policy": `"per-ip";q=3;w=60`}},
			},
		},
		{
			Name: "weighted-cost",
			Config: func(e *Env) httplimit.Config {
				return httplimit.Config{Policies: []httplimit.Policy{{
					Name: "units", Limit: sluice.Must(sluice.TokenBucket(10, time.Minute, 10)).Named("units"), Key: ip,
					Cost: func(r *http.Request) int64 {
						n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
						if err != nil || n < 0 {
							return 1
						}
						return n
					},
				}}}
			},
			Steps: []Step{
				{Path: "/items/1?n=4", Status: 200, Want: map[string]string{"RateLimit-Policy": `"units";q=10;w=60`, "RateLimit": `"units";r=6;t=24`}},
				{Path: "/items/1?n=7", Status: 429, Want: map[string]string{"RateLimit": `"units";r=6;t=6`, "Retry-After": "6"}},
				{Path: "/items/1?n=0", Status: 200, Want: map[string]string{"RateLimit": `"units";r=6;t=24`}},
				{Path: "/items/1?n=11", Status: 429, Want: map[string]string{"Retry-After": "60"}},
				{Advance: 6 * time.Second, Path: "/items/1?n=7", Status: 200, Want: map[string]string{"RateLimit": `"units";r=0;t=60`}},
			},
		},
		{
			Name: "shadow",
			Config: func(e *Env) httplimit.Config {
				return httplimit.Config{Policies: []httplimit.Policy{
					{Name: "enforced", Limit: perMin(3, "enforced"), Key: ip},
					{Name: "trial", Limit: perMin(1, "trial"), Key: ip, Shadow: true},
				}}
			},
			Steps: []Step{
				{Path: "/items/1", Status: 200, Want: map[string]string{"RateLimit": `"enforced";r=2;t=40, "trial";r=0;t=40`}},
				{Path: "/items/1", Status: 200, Want: map[string]string{"RateLimit": `"enforced";r=1;t=40, "trial";r=0;t=40`, "Retry-After": ""}},
				{Path: "/items/1", Status: 200, Want: map[string]string{"RateLimit": `"enforced";r=0;t=40, "trial";r=0;t=40`}},
				{Path: "/items/1", Status: 429, Body: `"violated-policies":["enforced"]`},
			},
		},
		{
			Name: "shadow-global",
			Config: func(e *Env) httplimit.Config {
				return httplimit.Config{Shadow: true, Headers: httplimit.HeadersLegacy,
					Policies: []httplimit.Policy{{Name: "demo", Limit: perMin(1, "demo"), Key: ip}}}
			},
			Steps: []Step{
				{Path: "/items/1", Status: 200, Want: map[string]string{"X-RateLimit-Remaining": "0", "RateLimit": ""}},
				{Path: "/items/1", Status: 200, Want: map[string]string{"X-RateLimit-Remaining": "0", "Retry-After": ""}},
			},
		},
		{
			Name: "spoofed-xff",
			Config: func(e *Env) httplimit.Config {
				key := must(httplimit.IP(httplimit.IPOptions{Header: httplimit.XForwardedFor, TrustedProxies: []string{"10.0.0.0/8"}}))
				return httplimit.Config{PartitionKeySecret: []byte("conformance-secret-0123"),
					Policies: []httplimit.Policy{{Name: "per-ip", Limit: perMin(1, "per-ip"), Key: key}}}
			},
			Steps: []Step{
				{Path: "/items/1", Header: map[string]string{"X-Forwarded-For": "1.1.1.1"}, Status: 200},
				// an untrusted peer cannot pick a new address
				{Path: "/items/1", Header: map[string]string{"X-Forwarded-For": "2.2.2.2"}, Status: 429},
				// a trusted proxy's hop is believed: the rightmost untrusted hop is the client
				{Path: "/items/1", Remote: "10.0.0.1:5000", Header: map[string]string{"X-Forwarded-For": "203.0.113.9, 10.0.0.2"}, Status: 200},
				{Path: "/items/1", Remote: "10.0.0.3:5000", Header: map[string]string{"X-Forwarded-For": "203.0.113.9"}, Status: 429},
				// what the client wrote to the left of its own hop does not count
				{Path: "/items/1", Remote: "10.0.0.1:5000", Header: map[string]string{"X-Forwarded-For": "198.51.100.7, 203.0.113.9"}, Status: 429},
				// garbage falls back to the last trusted hop (here the proxy itself)
				{Path: "/items/1", Remote: "10.0.0.1:5000", Header: map[string]string{"X-Forwarded-For": "not-an-ip"}, Status: 200},
				{Path: "/items/1", Remote: "10.0.0.1:5000", Header: map[string]string{"X-Forwarded-For": "also garbage"}, Status: 429},
				// IPv6 by /64, IPv4-mapped IPv6 as IPv4
				{Path: "/items/1", Remote: "[2001:db8:1:2::1]:443", Status: 200},
				{Path: "/items/1", Remote: "[2001:db8:1:2:ffff::9]:443", Status: 429},
				{Path: "/items/1", Remote: "[::ffff:192.0.2.1]:80", Status: 429},
			},
		},
		{
			Name:    "fail-open",
			Down:    true,
			Options: []sluice.Option{sluice.WithFailurePolicy(sluice.FailOpen), sluice.WithBreaker(1, 30*time.Second)},
			Config: func(e *Env) httplimit.Config {
				return httplimit.Config{DegradedHeader: "Sluice-Degraded",
					Policies: []httplimit.Policy{{Name: "demo", Limit: perMin(1, "demo"), Key: ip}}}
			},
			Steps: []Step{
				{Path: "/items/1", Status: 200, Want: map[string]string{"Sluice-Degraded": "?1", "RateLimit": `"demo";r=0;t=0`}},
				{Path: "/items/1", Status: 200, Want: map[string]string{"Sluice-Degraded": "?1"}},
			},
		},
		{
			Name:    "fail-closed",
			Down:    true,
			Options: []sluice.Option{sluice.WithFailurePolicy(sluice.FailClosed), sluice.WithBreaker(1, 30*time.Second)},
			Config: func(e *Env) httplimit.Config {
				return httplimit.Config{Policies: []httplimit.Policy{{Name: "demo", Limit: perMin(1, "demo"), Key: ip}}}
			},
			Steps: []Step{
				{Path: "/items/1", Status: 503, Body: `"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"`,
					Want: map[string]string{"Retry-After": "30", "Sluice-Degraded": "", "Content-Type": "application/problem+json"}},
				{Path: "/items/1", Status: 503, Want: map[string]string{"Retry-After": "30"}},
			},
		},
		{
			Name:    "fail-local",
			Down:    true,
			Options: []sluice.Option{sluice.WithReplicas(1), sluice.WithBreaker(1, 30*time.Second)},
			Config: func(e *Env) httplimit.Config {
				return httplimit.Config{Policies: []httplimit.Policy{{Name: "demo", Limit: perMin(1, "demo"), Key: ip}}}
			},
			Steps: []Step{
				{Path: "/items/1", Status: 200, Want: map[string]string{"RateLimit": `"demo";r=0;t=60`}},
				// the local quota is spent: a quota decision (429), not an outage (503)
				{Path: "/items/1", Status: 429, Body: `"type":"https://iana.org/assignments/http-problem-types#quota-exceeded"`,
					Want: map[string]string{"Retry-After": "60"}},
			},
		},
		{
			Name: "concurrency-panic",
			Config: func(e *Env) httplimit.Config {
				return httplimit.Config{Routes: map[string][]httplimit.Policy{
					e.T("GET", "/slow"): {{Name: "in-flight", Limit: sluice.Must(sluice.Concurrency(1, time.Minute)).Named("in-flight"), Key: ip}},
				}}
			},
			Steps: []Step{
				{Path: "/slow?panic=1", Status: 500, Body: "recovered: handler panic", Want: map[string]string{
					"RateLimit-Policy": `"in-flight";q=1;qu="concurrent-requests"`, "RateLimit": `"in-flight";r=0`}},
				// the slot was released although the handler panicked
				{Path: "/slow", Status: 200, Want: map[string]string{"RateLimit": `"in-flight";r=0`}},
				{Path: "/slow", Status: 200},
			},
		},
		{
			Name: "headers-none",
			Config: func(e *Env) httplimit.Config {
				return httplimit.Config{Headers: httplimit.HeadersNone,
					Policies: []httplimit.Policy{{Name: "demo", Limit: perMin(1, "demo"), Key: ip}}}
			},
			Steps: []Step{
				{Path: "/items/1", Status: 200, Want: map[string]string{"RateLimit": "", "X-RateLimit-Limit": ""}},
				{Path: "/items/1", Status: 429, Want: map[string]string{"RateLimit": "", "Retry-After": "40"}},
			},
		},
	}
}
