package grpclimit

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
)

// step is one call of a conformance case and what the client must see.
type step struct {
	advance time.Duration
	md      []string // request metadata pairs
	code    codes.Code
	// want maps response metadata keys to their value ("" = absent).
	want map[string]string
	// retry is the RetryInfo delay of a refusal; reason its ErrorInfo
	// reason, policies its "policies" metadata, violations the
	// QuotaFailure subjects.
	retry      time.Duration
	reason     string
	policies   string
	violations []string
}

// confCase is one conformance case: a Config and its steps, run as unary
// calls and as streams.
type confCase struct {
	name string
	opts []sluice.Option
	down bool // Redis is gone before the first step
	cfg  func(method string) Config
	// stepsFor, when set, gives the steps of one call kind.
	steps []step
}

func conformanceCases() []confCase {
	ip := RemoteIP()
	peerA, peerB := []string{"x-test-peer", "192.0.2.1:1000"}, []string{"x-test-peer", "192.0.2.2:1000"}
	with := func(a []string, more ...string) []string { return append(slices.Clone(a), more...) }
	return []confCase{
		{name: "allowed-denied",
			cfg: func(string) Config {
				return Config{Policies: []Policy{{Name: "demo", Limit: fixed(2, "demo"), Key: ip}}}
			},
			steps: []step{
				{md: peerA, want: map[string]string{MetadataPolicy: `"demo";q=2;w=60`, MetadataRateLimit: `"demo";r=1;t=40`, MetadataPushback: ""}},
				{md: peerA, want: map[string]string{MetadataRateLimit: `"demo";r=0;t=40`}},
				{advance: 500 * time.Millisecond, md: peerA, code: codes.ResourceExhausted,
					want:  map[string]string{MetadataRateLimit: `"demo";r=0;t=40`, MetadataPushback: "39500"},
					retry: 39500 * time.Millisecond, reason: ReasonRateLimited, policies: "demo", violations: []string{"policy:demo"}},
				{md: peerB, want: map[string]string{MetadataRateLimit: `"demo";r=1;t=40`}},
				{advance: 39500 * time.Millisecond, md: peerA, want: map[string]string{MetadataRateLimit: `"demo";r=1;t=60`}},
			}},
		{name: "exempt",
			cfg: func(m string) Config {
				return Config{Policies: []Policy{{Name: "demo", Limit: fixed(1, "demo"), Key: ip}}, Exempt: []string{m}}
			},
			steps: []step{
				{md: peerA, want: map[string]string{MetadataPolicy: "", MetadataRateLimit: ""}},
				{md: peerA, want: map[string]string{MetadataPolicy: "", MetadataRateLimit: ""}},
			}},
		{name: "method-over-service",
			cfg: func(m string) Config {
				return Config{Methods: map[string][]Policy{
					serviceAll: {{Name: "svc", Limit: fixed(5, "svc"), Key: ip}},
					m:          {{Name: "method", Limit: fixed(1, "method"), Key: ip}},
				}}
			},
			steps: []step{
				{md: peerA, want: map[string]string{MetadataPolicy: `"method";q=1;w=60`}},
				{md: peerA, code: codes.ResourceExhausted, retry: 40 * time.Second, reason: ReasonRateLimited, policies: "method",
					violations: []string{"policy:method"}, want: map[string]string{MetadataPushback: "40000"}},
			}},
		{name: "tiers",
			cfg: func(string) Config {
				return Config{
					Tiers: map[string][]Policy{
						"free": {{Name: "free", Limit: fixed(1, "free"), Key: ip}},
						"pro":  {{Name: "pro", Limit: fixed(3, "pro"), Key: ip}},
					},
					DefaultTier: "free",
					Tier: func(c *Call) string { // a test's stand-in for verified claims
						if v := c.Metadata("x-tier"); len(v) > 0 {
							return v[0]
						}
						return ""
					},
				}
			},
			steps: []step{
				{md: peerA, want: map[string]string{MetadataPolicy: `"free";q=1;w=60`}},
				{md: peerA, code: codes.ResourceExhausted, retry: 40 * time.Second, reason: ReasonRateLimited, policies: "free", violations: []string{"policy:free"}},
				{md: with(peerA, "x-tier", "pro"), want: map[string]string{MetadataPolicy: `"pro";q=3;w=60`, MetadataRateLimit: `"pro";r=2;t=40`}},
				{md: with(peerA, "x-tier", "unknown"), code: codes.ResourceExhausted, retry: 40 * time.Second, reason: ReasonRateLimited, policies: "free", violations: []string{"policy:free"}},
			}},
		{name: "two-policies-refund",
			cfg: func(string) Config {
				return Config{Policies: []Policy{
					{Name: "ip", Limit: fixed(5, "ip"), Key: ip},
					{Name: "global", Limit: fixed(1, "global"), Key: Constant("g")},
				}}
			},
			steps: []step{
				{md: peerA, want: map[string]string{MetadataPolicy: `"ip";q=5;w=60, "global";q=1;w=60`, MetadataRateLimit: `"ip";r=4;t=40, "global";r=0;t=40`}},
				// global refuses: ip's charge is given back (r stays 4)
				{md: peerA, code: codes.ResourceExhausted, retry: 40 * time.Second, reason: ReasonRateLimited, policies: "global",
					violations: []string{"policy:global"}, want: map[string]string{MetadataRateLimit: `"ip";r=4;t=40, "global";r=0;t=40`}},
			}},
		{name: "weighted-cost",
			cfg: func(string) Config {
				return Config{Policies: []Policy{{Name: "units", Limit: fixed(10, "units"), Key: ip, Cost: func(c *Call) int64 {
					if v := c.Metadata("x-cost"); len(v) > 0 {
						n, _ := strconv.ParseInt(v[0], 10, 64)
						return n
					}
					return 1
				}}}}
			},
			steps: []step{
				{md: with(peerA, "x-cost", "7"), want: map[string]string{MetadataRateLimit: `"units";r=3;t=40`}},
				{md: with(peerA, "x-cost", "4"), code: codes.ResourceExhausted, retry: 40 * time.Second, reason: ReasonRateLimited, policies: "units", violations: []string{"policy:units"}},
				{md: with(peerA, "x-cost", "0"), want: map[string]string{MetadataRateLimit: `"units";r=3;t=40`}},
				// a cost over the capacity never fits: the window
				{md: with(peerA, "x-cost", "11"), code: codes.ResourceExhausted, retry: time.Minute, reason: ReasonRateLimited, policies: "units", violations: []string{"policy:units"}},
				{md: with(peerA, "x-cost", "-1"), code: codes.Internal},
			}},
		{name: "shadow",
			cfg: func(string) Config {
				return Config{Policies: []Policy{
					{Name: "enforced", Limit: fixed(5, "enforced"), Key: ip},
					{Name: "trial", Limit: fixed(1, "trial"), Key: ip, Shadow: true},
				}}
			},
			steps: []step{
				{md: peerA, want: map[string]string{MetadataRateLimit: `"enforced";r=4;t=40, "trial";r=0;t=40`}},
				{md: peerA, want: map[string]string{MetadataRateLimit: `"enforced";r=3;t=40, "trial";r=0;t=40`, MetadataPushback: ""}},
			}},
		{name: "global-shadow",
			cfg: func(string) Config {
				return Config{Shadow: true, Policies: []Policy{{Name: "demo", Limit: fixed(1, "demo"), Key: ip}}}
			},
			steps: []step{{md: peerA}, {md: peerA, want: map[string]string{MetadataRateLimit: `"demo";r=0;t=40`}}}},
		{name: "spoofed-xff",
			cfg: func(string) Config {
				xff := must(IP(IPOptions{Header: XForwardedFor, TrustedProxies: []string{"10.0.0.0/8"}}))
				return Config{Policies: []Policy{{Name: "demo", Limit: fixed(1, "demo"), Key: xff}}}
			},
			steps: []step{
				// an untrusted peer's x-forwarded-for is ignored
				{md: []string{"x-test-peer", "198.51.100.2:1", "x-forwarded-for", "1.1.1.1"}},
				{md: []string{"x-test-peer", "198.51.100.2:1", "x-forwarded-for", "1.1.1.2"}, code: codes.ResourceExhausted,
					retry: 40 * time.Second, reason: ReasonRateLimited, policies: "demo", violations: []string{"policy:demo"}},
				// behind a trusted proxy the rightmost untrusted hop counts
				{md: []string{"x-test-peer", "10.0.0.5:1", "x-forwarded-for", "1.1.1.1, 203.0.113.7"}},
				{md: []string{"x-test-peer", "10.0.0.6:1", "x-forwarded-for", "9.9.9.9, 203.0.113.7, 10.0.0.9"}, code: codes.ResourceExhausted,
					retry: 40 * time.Second, reason: ReasonRateLimited, policies: "demo", violations: []string{"policy:demo"}},
			}},
		{name: "api-key-metadata-join",
			cfg: func(string) Config {
				return Config{Policies: []Policy{{Name: "tenant-key", Limit: fixed(1, "tk"), Key: Join(Metadata("x-tenant"), APIKey("x-api-key"))}}}
			},
			steps: []step{
				{md: []string{"x-tenant", "acme", "x-api-key", "k1"}},
				{md: []string{"x-tenant", "acme", "x-api-key", "k2"}},
				{md: []string{"x-tenant", "acme", "x-api-key", " k1 "}, code: codes.ResourceExhausted,
					retry: 40 * time.Second, reason: ReasonRateLimited, policies: "tenant-key", violations: []string{"policy:tenant-key"}},
				// no tenant: no identity, the policy does not apply
				{md: []string{"x-api-key", "k1"}, want: map[string]string{MetadataPolicy: ""}},
			}},
		{name: "fail-open", down: true,
			opts: []sluice.Option{sluice.WithFailurePolicy(sluice.FailOpen), sluice.WithBreaker(1, 30*time.Second)},
			cfg: func(string) Config {
				return Config{DegradedMetadata: "sluice-degraded", Policies: []Policy{{Name: "demo", Limit: fixed(1, "demo"), Key: ip}}}
			},
			steps: []step{
				{md: peerA, want: map[string]string{"sluice-degraded": "?1", MetadataRateLimit: `"demo";r=0;t=0`}},
				{md: peerA, want: map[string]string{"sluice-degraded": "?1"}},
			}},
		{name: "fail-closed", down: true,
			opts: []sluice.Option{sluice.WithFailurePolicy(sluice.FailClosed), sluice.WithBreaker(1, 30*time.Second)},
			cfg: func(string) Config {
				return Config{Policies: []Policy{{Name: "demo", Limit: fixed(1, "demo"), Key: ip}}}
			},
			steps: []step{
				{md: peerA, code: codes.Unavailable, retry: 30 * time.Second, reason: ReasonLimiterUnavailable, policies: "demo",
					want: map[string]string{MetadataPushback: "30000"}},
				{md: peerA, code: codes.Unavailable, retry: 30 * time.Second, reason: ReasonLimiterUnavailable, policies: "demo"},
			}},
		{name: "fail-local", down: true,
			opts: []sluice.Option{sluice.WithReplicas(1), sluice.WithBreaker(1, 30*time.Second)},
			cfg: func(string) Config {
				return Config{Policies: []Policy{{Name: "demo", Limit: fixed(1, "demo"), Key: ip}}}
			},
			steps: []step{
				{md: peerA, want: map[string]string{MetadataRateLimit: `"demo";r=0;t=60`}},
				{md: peerA, code: codes.ResourceExhausted, retry: time.Minute, reason: ReasonRateLimited, policies: "demo", violations: []string{"policy:demo"}},
			}},
		{name: "partition-key",
			cfg: func(string) Config {
				return Config{PartitionKeySecret: []byte("0123456789abcdef"), Policies: []Policy{{Name: "demo", Limit: fixed(2, "demo"), Key: ip}}}
			},
			steps: []step{
				{md: peerA, want: map[string]string{MetadataPolicy: `"demo";q=2;w=60;pk=:` + pkOf("demo", "ip:192.0.2.1") + `:`}},
			}},
		{name: "no-headers",
			cfg: func(string) Config {
				return Config{Headers: HeadersNone, Policies: []Policy{{Name: "demo", Limit: fixed(1, "demo"), Key: ip}}}
			},
			steps: []step{
				{md: peerA, want: map[string]string{MetadataPolicy: "", MetadataRateLimit: ""}},
				{md: peerA, code: codes.ResourceExhausted, retry: 40 * time.Second, reason: ReasonRateLimited, policies: "demo",
					violations: []string{"policy:demo"}, want: map[string]string{MetadataRateLimit: "", MetadataPushback: "40000"}},
			}},
	}
}

// pkOf is the pk a test secret gives policy and key.
func pkOf(policy, key string) string {
	pk := partitionKeyForTest(policy, key)
	return pk[len(";pk=:") : len(pk)-1]
}

// TestConformance runs every case as unary calls and as streams over
// bufconn: the same statuses, details and metadata for both.
func TestConformance(t *testing.T) {
	for _, kind := range []string{"unary", "stream"} {
		for _, c := range conformanceCases() {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				method := unaryMethod
				if kind == "stream" {
					method = streamMethod
				}
				e := newEnv(t, c.opts...)
				cfg := c.cfg(method)
				cfg.Limiter = e.lim
				client := startServer(t, newServer(t, cfg), serverOpts{fakePeer: true})
				if c.down {
					e.mr.Close()
				}
				for i, s := range c.steps {
					if s.advance > 0 {
						e.advance(s.advance)
					}
					var r reply
					if kind == "unary" {
						r = unary(ctxT(t), client, s.md...)
					} else {
						r = stream(ctxT(t), client, 1, s.md...)
					}
					checkStep(t, i, s, r)
				}
			})
		}
	}
}

func checkStep(t *testing.T, i int, s step, r reply) {
	t.Helper()
	st := status.Convert(r.err)
	if st.Code() != s.code {
		t.Fatalf("step %d: code %v (%q), want %v", i, st.Code(), st.Message(), s.code)
	}
	if m := strings.ToLower(st.Message()); strings.Contains(m, "redis") || strings.Contains(m, "dial") || strings.Contains(m, "connect") {
		t.Errorf("step %d: the status tells the client about Redis: %q", i, st.Message())
	}
	for k, v := range s.want {
		if got := r.get(k); got != v {
			t.Errorf("step %d: metadata %s = %q, want %q (header %v, trailer %v)", i, k, got, v, r.header, r.trailer)
		}
	}
	if s.code == codes.OK || s.code == codes.Internal {
		if s.code == codes.Internal && st.Message() != "rate-limit decision failed" {
			t.Errorf("step %d: internal error says %q", i, st.Message())
		}
		return
	}
	var gotRetry time.Duration
	var gotReason, gotPolicies, gotDomain string
	var gotViolations []string
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			gotRetry = d.GetRetryDelay().AsDuration()
		case *errdetails.ErrorInfo:
			gotReason, gotPolicies, gotDomain = d.GetReason(), d.GetMetadata()["policies"], d.GetDomain()
		case *errdetails.QuotaFailure:
			for _, v := range d.GetViolations() {
				gotViolations = append(gotViolations, v.GetSubject())
				if v.GetDescription() == "" {
					t.Errorf("step %d: violation %q has no description", i, v.GetSubject())
				}
			}
		}
	}
	if gotRetry != s.retry || gotReason != s.reason || gotPolicies != s.policies || gotDomain != "sluice" ||
		!slices.Equal(gotViolations, s.violations) {
		t.Errorf("step %d: details retry %v reason %q domain %q policies %q violations %q, want %v %q \"sluice\" %q %q",
			i, gotRetry, gotReason, gotDomain, gotPolicies, gotViolations, s.retry, s.reason, s.policies, s.violations)
	}
	if d, ok := RetryDelay(r.err); !ok || d != s.retry {
		t.Errorf("step %d: RetryDelay = %v %v", i, d, ok)
	}
	if IsRateLimited(r.err) != (s.code == codes.ResourceExhausted) {
		t.Errorf("step %d: IsRateLimited = %v for %v", i, IsRateLimited(r.err), s.code)
	}
}
