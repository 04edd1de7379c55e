package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policyfile"
)

// fileCall is one call of a file case, made to the server built from the
// file and to the one built in Go.
type fileCall struct {
	stream bool     // FullDuplexCall (msgs messages) instead of UnaryCall
	msgs   int      // default 1
	md     []string // metadata pairs; x-test-peer sets the peer
	code   codes.Code
}

type grpcFileCase struct {
	name  string
	file  string
	gocfg func() Config
	calls []fileCall
}

func gpol(name string, lim sluice.Limit, key KeyFunc) Policy {
	return Policy{Name: name, Limit: lim.Named(name), Key: key}
}

func calls(count, ok int, c fileCall) []fileCall {
	out := make([]fileCall, count)
	for i := range out {
		out[i] = c
		if i >= ok {
			out[i].code = codes.ResourceExhausted
		}
	}
	return out
}

var peerA = []string{"x-test-peer", "192.0.2.1:1234"}

var grpcFileCases = []grpcFileCase{
	{
		name: "policies by ip and by api key; metadata costs",
		file: `
identities:
  client: {ip: {trusted_proxies: [10.0.0.0/8], header: x-forwarded-for}}
policies:
  - name: per-client
    limit: {algorithm: gcra, rate: 3, period: 1m}
    key: client
  - name: per-key
    limit: {algorithm: fixed_window, rate: 10, period: 1m}
    key: {api_key: {header: X-API-Key}}
    cost: {metadata: x-cost, default: 3, max: 8}`,
		gocfg: func() Config {
			k := gpol("per-key", sluice.Must(sluice.FixedWindow(10, time.Minute)), APIKey("X-API-Key"))
			k.Cost = func(c *Call) int64 {
				v := c.Metadata("x-cost")
				if len(v) == 0 {
					return 3
				}
				var n int64
				if _, err := fmt.Sscan(v[0], &n); err != nil || n < 1 {
					return 3
				}
				return min(n, 8)
			}
			return Config{Policies: []Policy{
				gpol("per-client", sluice.Must(sluice.GCRA(3, time.Minute, 3)),
					must(IP(IPOptions{TrustedProxies: []string{"10.0.0.0/8"}, Header: XForwardedFor}))), k}}
		},
		calls: slices.Concat(
			calls(2, 2, fileCall{md: append([]string{"x-api-key", "k1", "x-cost", "4"}, peerA...)}),  // 8 of 10
			calls(1, 0, fileCall{md: append([]string{"x-api-key", "k1", "x-cost", "99"}, peerA...)}), // 8 more: refused
			calls(1, 1, fileCall{md: []string{"x-test-peer", "10.0.0.9:1", "x-forwarded-for", "203.0.113.7", "x-api-key", "k2"}}),
			calls(2, 1, fileCall{md: peerA}), // per-client: 3 per minute
		),
	},
	{
		name: "methods and services; route is the method",
		file: `
methods:
  /grpc.testing.TestService/UnaryCall:
    - name: unary
      limit: {algorithm: sliding_window, rate: 2, period: 1m}
      key: route
  /grpc.testing.TestService/*:
    - name: service
      limit: {algorithm: sliding_log, rate: 1, period: 1m}
      key: {join: [route, {metadata: {name: x-tenant}}]}`,
		gocfg: func() Config {
			return Config{Methods: map[string][]Policy{
				unaryMethod: {gpol("unary", sluice.Must(sluice.SlidingWindow(2, time.Minute)), Method())},
				serviceAll:  {gpol("service", sluice.Must(sluice.SlidingLog(1, time.Minute)), Join(Method(), Metadata("x-tenant")))},
			}}
		},
		calls: slices.Concat(calls(3, 2, fileCall{md: peerA}),
			calls(2, 1, fileCall{stream: true, md: append([]string{"x-tenant", "acme"}, peerA...)}),
			calls(1, 1, fileCall{stream: true, md: append([]string{"x-tenant", "globex"}, peerA...)})),
	},
	{
		name: "tiers from metadata through a table, per-message, concurrency",
		file: `
tiers:
  metadata: x-org
  table: {acme: pro}
  default: free
  policies:
    free:
      - name: free
        limit: {algorithm: token_bucket, rate: 2, period: 1m, burst: 2}
        key: {metadata: {name: x-org}}
        per_message: true
    pro:
      - name: pro-slots
        limit: {algorithm: concurrency, rate: 5, lease: 1m}
        key: {metadata: {name: x-org}}
      - name: pro
        limit: {algorithm: fixed_window, rate: 4, period: 1m}
        key: {metadata: {name: x-org}}
        per_message: true`,
		gocfg: func() Config {
			free := gpol("free", sluice.Must(sluice.TokenBucket(2, time.Minute, 2)), Metadata("x-org"))
			free.PerMessage = true
			pro := gpol("pro", sluice.Must(sluice.FixedWindow(4, time.Minute)), Metadata("x-org"))
			pro.PerMessage = true
			return Config{DefaultTier: "free",
				Tier: func(c *Call) string {
					if v := c.Metadata("x-org"); len(v) > 0 && v[0] == "acme" {
						return "pro"
					}
					return ""
				},
				Tiers: map[string][]Policy{"free": {free},
					"pro": {gpol("pro-slots", sluice.Must(sluice.Concurrency(5, time.Minute)), Metadata("x-org")), pro}}}
		},
		calls: []fileCall{
			{stream: true, msgs: 3, md: append([]string{"x-org", "initech"}, peerA...), code: codes.ResourceExhausted},
			{stream: true, msgs: 3, md: append([]string{"x-org", "acme"}, peerA...)},
			{stream: true, msgs: 2, md: append([]string{"x-org", "acme"}, peerA...), code: codes.ResourceExhausted},
		},
	},
	{
		name: "exempt, default exemptions off, error domain, shadow, headers none",
		file: `
exempt: [/grpc.testing.TestService/FullDuplexCall]
no_default_exempt: true
error_domain: example.com
headers: none
policies:
  - name: trial
    limit: {algorithm: fixed_window, rate: 1, period: 1m}
    key: {constant: {name: all}}
    shadow: true
  - name: enforced
    limit: {algorithm: fixed_window, rate: 2, period: 1m}
    key: ip`,
		gocfg: func() Config {
			trial := gpol("trial", sluice.Must(sluice.FixedWindow(1, time.Minute)), Constant("all"))
			trial.Shadow = true
			return Config{Exempt: []string{streamMethod}, NoDefaultExempt: true, ErrorDomain: "example.com", Headers: HeadersNone,
				Policies: []Policy{trial, gpol("enforced", sluice.Must(sluice.FixedWindow(2, time.Minute)), RemoteIP())}}
		},
		calls: slices.Concat(calls(3, 2, fileCall{md: peerA}), calls(3, 3, fileCall{stream: true, md: peerA})),
	},
	{
		name: "global shadow, draft headers, degraded metadata name",
		file: `
shadow: true
headers: draft
degraded_header: Sluice-Degraded
policies: [{name: p, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: ip}]`,
		gocfg: func() Config {
			return Config{Shadow: true, DegradedMetadata: "sluice-degraded", Policies: []Policy{gpol("p", sluice.Must(sluice.FixedWindow(1, time.Minute)), RemoteIP())}}
		},
		calls: calls(3, 3, fileCall{md: peerA}),
	},
}

// TestFromFile makes the same calls to the server FromFile builds from
// each file and to its hand-written Go Config, each on a Redis of its own
// with the same clock, and wants the same status (details included),
// metadata (partition keys included: the same identities) and Redis keys.
func TestFromFile(t *testing.T) {
	for _, tc := range grpcFileCases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := policyfile.Parse(tc.name+".yaml", []byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			fe, ge := newEnv(t), newEnv(t)
			fcfg, err := FromFile(c, fe.lim)
			if err != nil {
				t.Fatal(err)
			}
			gcfg := tc.gocfg()
			gcfg.Limiter = ge.lim
			for _, cfg := range []*Config{&fcfg, &gcfg} {
				cfg.PartitionKeySecret = []byte("0123456789abcdef")
			}
			fc := startServer(t, newServer(t, fcfg), serverOpts{fakePeer: true})
			gc := startServer(t, newServer(t, gcfg), serverOpts{fakePeer: true})
			for i, call := range tc.calls {
				var fr, gr reply
				if call.stream {
					fr, gr = stream(ctxT(t), fc, max(call.msgs, 1), call.md...), stream(ctxT(t), gc, max(call.msgs, 1), call.md...)
				} else {
					fr, gr = unary(ctxT(t), fc, call.md...), unary(ctxT(t), gc, call.md...)
				}
				if got := status.Code(fr.err); got != call.code {
					t.Errorf("call %d from the file: %v, want %v", i, fr.err, call.code)
				}
				if !proto.Equal(status.Convert(fr.err).Proto(), status.Convert(gr.err).Proto()) {
					t.Errorf("call %d:\nfile: %v\ngo:   %v", i, status.Convert(fr.err).Proto(), status.Convert(gr.err).Proto())
				}
				for _, md := range []struct {
					name string
					f, g metadata.MD
				}{{"header", fr.header, gr.header}, {"trailer", fr.trailer, gr.trailer}} {
					if !reflect.DeepEqual(md.f, md.g) {
						t.Errorf("call %d %s:\nfile: %v\ngo:   %v", i, md.name, md.f, md.g)
					}
				}
			}
			if fk, gk := fe.mr.Keys(), ge.mr.Keys(); !reflect.DeepEqual(fk, gk) || len(fk) == 0 {
				t.Errorf("keys in Redis:\nfile: %q\ngo:   %q", fk, gk)
			}
		})
	}
}

// Fields for HTTP only are errors for gRPC, at their place in the file,
// and so are method patterns gRPC cannot match.
func TestFromFileHTTPFields(t *testing.T) {
	src := `headers: legacy
degraded_header: grpc-degraded
exempt: [GET /healthz]
routes:
  /a: [{name: r, limit: {algorithm: gcra, rate: 1, period: 1s}, key: ip}]
methods:
  pkg.Svc/M: [{name: m, limit: {algorithm: gcra, rate: 1, period: 1s}, key: ip}]
policies:
  - name: p
    limit: {algorithm: gcra, rate: 1, period: 1s}
    key: {header: {name: X-Tenant}}
    cost: {header: X-Cost}
tiers:
  header: X-Plan
  default: free
  policies: {free: []}
`
	c, err := policyfile.Parse("http.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	_, err = FromFile(c, newEnv(t).lim)
	var es policyfile.Errors
	if !errors.As(err, &es) {
		t.Fatalf("FromFile = %v, want policyfile.Errors", err)
	}
	want := []string{
		`http.yaml:1:1: headers: "legacy" is not for gRPC (draft or none)`,
		`http.yaml:2:1: degraded_header: "grpc-degraded" is not a metadata key (letters, digits, '-', '_' and '.', not grpc-)`,
		`http.yaml:3:10: exempt[0]: want "/pkg.Service/Method" or "/pkg.Service/*"`,
		"http.yaml:4:1: routes: not for gRPC",
		`http.yaml:7:3: methods["pkg.Svc/M"]: want "/pkg.Service/Method" or "/pkg.Service/*"`,
		"http.yaml:11:10: header identity: not for gRPC",
		`http.yaml:12:11: policy "p": cost: header: not for gRPC`,
		"http.yaml:14:3: tiers: header: not for gRPC",
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("FromFile errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

// A subject stored by the interceptor that verified it is keyed as
// Subject keys it, and verified claims choose the tier.
func TestFromFileSubjectAndClaims(t *testing.T) {
	src := `
tiers:
  claim: plan
  default: free
  policies:
    free: [{name: free, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: subject}]
    pro: [{name: pro, limit: {algorithm: fixed_window, rate: 2, period: 1m}, key: subject}]`
	c, err := policyfile.Parse("claims.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	cfg, err := FromFile(c, e.lim)
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, cfg)
	auth := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-user"); len(v) > 0 {
			ctx = WithClaims(WithSubject(ctx, v[0]), map[string]string{"plan": md.Get("x-plan")[0]})
		}
		return h(ctx, req)
	}
	client := startServerWith(t, serverOpts{}, grpc.ChainUnaryInterceptor(auth, s.UnaryServerInterceptor()))
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if r := unary(ctxT(t), client, "x-user", "alice", "x-plan", "pro"); status.Code(r.err) != want {
			t.Errorf("pro call %d: %v, want %v", i, r.err, want)
		}
	}
	for i, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		if r := unary(ctxT(t), client, "x-user", "bob", "x-plan", "gold"); status.Code(r.err) != want {
			t.Errorf("free call %d: %v, want %v", i, r.err, want)
		}
	}
	want := []string{"sluice:{sub:alice}:pro", "sluice:{sub:bob}:free"}
	if got := e.mr.Keys(); !slices.Equal(got, want) {
		t.Errorf("keys = %q, want %q", got, want)
	}
}

// TestFromFileRoundTrip: each file of the table, written out by Marshal
// and read again, is the file read.
func TestFromFileRoundTrip(t *testing.T) {
	for _, tc := range grpcFileCases {
		c, err := policyfile.Parse("a.yaml", []byte(tc.file))
		if err != nil {
			t.Fatal(err)
		}
		out, err := policyfile.Marshal(c)
		if err != nil {
			t.Fatalf("%s: Marshal: %v", tc.name, err)
		}
		back, err := policyfile.Parse("b.yaml", out)
		if err != nil || !policyfile.Equal(c, back) {
			t.Errorf("%s: Parse(Marshal(c)) = %v, or differs from c:\n%s", tc.name, err, out)
		}
	}
}

// TestDocsGRPCFiles turns the gRPC policy files of docs/policies.md (the
// blocks opened by "```yaml policyfile grpc") and policyfile's gRPC
// example into a grpclimit.Config.
func TestDocsGRPCFiles(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "policies.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	found := 0
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```yaml policyfile grpc" {
			continue
		}
		// blank lines keep the block on its lines of the Markdown file
		text := strings.Repeat("\n", i+1)
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			text += lines[i] + "\n"
		}
		found++
		c, err := policyfile.Parse("docs/policies.md", []byte(text))
		if err == nil {
			_, err = FromFile(c, nil)
		}
		if err != nil {
			t.Error(err)
		}
	}
	if found == 0 {
		t.Error("docs/policies.md has no gRPC policy file")
	}
	c, err := policyfile.Load(filepath.Join("..", "..", "policyfile", "testdata", "grpc.yaml"))
	if err == nil {
		_, err = FromFile(c, nil)
	}
	if err != nil {
		t.Errorf("the gRPC example file: %v", err)
	}
}

// A policy file turned into the Config of a Server.
func ExampleFromFile() {
	pf, err := policyfile.Parse("policies.yaml", []byte(`
error_domain: example.com
policies:
  - name: per-tenant
    limit: {algorithm: gcra, rate: 50, period: 1s, burst: 100}
    key: {metadata: {name: x-tenant}}
methods:
  /example.v1.Search/*:
    - name: search
      limit: {algorithm: sliding_window, rate: 1000, period: 1m}
      key: route
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := FromFile(pf, nil) // programs pass their Limiter
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.ErrorDomain, cfg.Policies[0].Name, cfg.Policies[0].Limit.Name, len(cfg.Methods["/example.v1.Search/*"]))
	// Output: example.com per-tenant per-tenant 1
}
