package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policyfile"
)

// fileReq is one request of a file case: sent to the middleware built from
// the file and to the one built in Go.
type fileReq struct {
	route   string // the route template the adapter reports
	method  string // default GET
	peer    string // RemoteAddr; default 192.0.2.1:1234
	hdr     map[string]string
	subject string
	claims  map[string]string
	advance time.Duration // the clock moves before the request
	inside  []fileReq     // served while this request's handler runs
	status  int           // want
}

type fileCase struct {
	name  string
	file  string
	gocfg func() Config // the hand-written equivalent (Limiter, Clock set by the test)
	reqs  []fileReq
	down  bool // Redis is down (FailOpen, breaker after one failure)
}

func pol(name string, lim sluice.Limit, key KeyFunc) Policy {
	return Policy{Name: name, Limit: lim.Named(name), Key: key}
}

func gcra(rate int64, period time.Duration, burst int64) sluice.Limit {
	return sluice.Must(sluice.GCRA(rate, period, burst))
}

func fixed(rate int64, period time.Duration) sluice.Limit {
	return sluice.Must(sluice.FixedWindow(rate, period))
}

func mustKey(k KeyFunc, err error) KeyFunc {
	if err != nil {
		panic(err)
	}
	return k
}

// n requests r, the first ok of them admitted and the rest denied.
func n(count, ok int, r fileReq) []fileReq {
	out := make([]fileReq, count)
	for i := range out {
		out[i] = r
		out[i].status = http.StatusOK
		if i >= ok {
			out[i].status = http.StatusTooManyRequests
		}
	}
	return out
}

func cat(parts ...[]fileReq) []fileReq { return slices.Concat(parts...) }

const policyOf = `
policies:
  - name: p
    limit: {algorithm: fixed_window, rate: 2, period: 1m}
    key: `

// fileCases cover every field of the file an HTTP Config has.
var fileCases = []fileCase{
	{
		name:  "gcra by ip",
		file:  "policies: [{name: per-ip, limit: {algorithm: gcra, rate: 2, period: 1m, burst: 2}, key: ip}]",
		gocfg: func() Config { return Config{Policies: []Policy{pol("per-ip", gcra(2, time.Minute, 2), RemoteIP())}} },
		reqs: cat(n(3, 2, fileReq{}), n(1, 1, fileReq{peer: "198.51.100.7:9"}),
			[]fileReq{{advance: 30 * time.Second, status: 200}, {status: 429}}),
	},
	{
		name: "burst defaults to rate",
		file: "policies: [{name: tb, limit: {algorithm: token_bucket, rate: 3, period: 1m}, key: ip}]",
		gocfg: func() Config {
			return Config{Policies: []Policy{pol("tb", sluice.Must(sluice.TokenBucket(3, time.Minute, 3)), RemoteIP())}}
		},
		reqs: n(4, 3, fileReq{}),
	},
	{
		name: "token bucket with burst",
		file: "policies: [{name: tb, limit: {algorithm: token_bucket, rate: 1, period: 1s, burst: 2}, key: ip}]",
		gocfg: func() Config {
			return Config{Policies: []Policy{pol("tb", sluice.Must(sluice.TokenBucket(1, time.Second, 2)), RemoteIP())}}
		},
		reqs: cat(n(3, 2, fileReq{}), []fileReq{{advance: time.Second, status: 200}}),
	},
	{
		name:  "fixed window",
		file:  "policies: [{name: fw, limit: {algorithm: fixed_window, rate: 2, period: 1m}, key: ip}]",
		gocfg: func() Config { return Config{Policies: []Policy{pol("fw", fixed(2, time.Minute), RemoteIP())}} },
		reqs:  cat(n(3, 2, fileReq{}), []fileReq{{advance: 40 * time.Second, status: 200}}),
	},
	{
		name: "sliding window",
		file: "policies: [{name: sw, limit: {algorithm: sliding_window, rate: 2, period: 10s}, key: ip}]",
		gocfg: func() Config {
			return Config{Policies: []Policy{pol("sw", sluice.Must(sluice.SlidingWindow(2, 10*time.Second)), RemoteIP())}}
		},
		reqs: cat(n(3, 2, fileReq{}), []fileReq{{advance: 15 * time.Second, status: 200}}),
	},
	{
		name: "sliding log",
		file: "policies: [{name: sl, limit: {algorithm: sliding_log, rate: 2, period: 10s}, key: ip}]",
		gocfg: func() Config {
			return Config{Policies: []Policy{pol("sl", sluice.Must(sluice.SlidingLog(2, 10*time.Second)), RemoteIP())}}
		},
		reqs: cat(n(3, 2, fileReq{}), []fileReq{{advance: 10 * time.Second, status: 200}}),
	},
	{
		name: "concurrency with lease",
		file: "policies: [{name: inflight, limit: {algorithm: concurrency, rate: 1, lease: 30s}, key: ip}]",
		gocfg: func() Config {
			return Config{Policies: []Policy{pol("inflight", sluice.Must(sluice.Concurrency(1, 30*time.Second)), RemoteIP())}}
		},
		reqs: []fileReq{{status: 200, inside: []fileReq{{status: 429}}}, {status: 200}},
	},
	{
		name: "limit name shares a quota between routes",
		file: `
routes:
  /a: [{name: a, limit: {algorithm: fixed_window, rate: 2, period: 1m, name: shared}, key: ip}]
  /b: [{name: b, limit: {algorithm: fixed_window, rate: 2, period: 1m, name: shared}, key: ip}]`,
		gocfg: func() Config {
			lim := fixed(2, time.Minute).Named("shared")
			return Config{Routes: map[string][]Policy{
				"/a": {{Name: "a", Limit: lim, Key: RemoteIP()}}, "/b": {{Name: "b", Limit: lim, Key: RemoteIP()}}}}
		},
		reqs: []fileReq{{route: "/a", status: 200}, {route: "/b", status: 200}, {route: "/a", status: 429}, {route: "/c", status: 200}},
	},
	{
		name:  "key api_key",
		file:  policyOf + "{api_key: {header: X-API-Key}}",
		gocfg: func() Config { return Config{Policies: []Policy{pol("p", fixed(2, time.Minute), APIKey("X-API-Key"))}} },
		reqs: cat(n(3, 2, fileReq{hdr: map[string]string{"X-API-Key": "k1"}}), n(1, 1, fileReq{hdr: map[string]string{"X-API-Key": "k2"}}),
			n(3, 3, fileReq{})), // no key: the policy does not apply
	},
	{
		name:  "key subject",
		file:  policyOf + "subject",
		gocfg: func() Config { return Config{Policies: []Policy{pol("p", fixed(2, time.Minute), Subject())}} },
		reqs:  cat(n(3, 2, fileReq{subject: "alice"}), n(1, 1, fileReq{subject: "bob"})),
	},
	{
		name:  "key header",
		file:  policyOf + "{header: {name: X-Tenant}}",
		gocfg: func() Config { return Config{Policies: []Policy{pol("p", fixed(2, time.Minute), Header("X-Tenant"))}} },
		reqs:  cat(n(3, 2, fileReq{hdr: map[string]string{"X-Tenant": "acme"}}), n(1, 1, fileReq{hdr: map[string]string{"X-Tenant": "globex"}})),
	},
	{
		name:  "key constant",
		file:  policyOf + "{constant: {name: global}}",
		gocfg: func() Config { return Config{Policies: []Policy{pol("p", fixed(2, time.Minute), Constant("global"))}} },
		reqs:  cat(n(2, 2, fileReq{}), n(1, 0, fileReq{peer: "198.51.100.7:9"})),
	},
	{
		name: "key join",
		file: policyOf + "{join: [subject, ip]}",
		gocfg: func() Config {
			return Config{Policies: []Policy{pol("p", fixed(2, time.Minute), Join(Subject(), RemoteIP()))}}
		},
		reqs: cat(n(3, 2, fileReq{subject: "alice"}), n(1, 1, fileReq{subject: "alice", peer: "198.51.100.7:9"}), n(3, 3, fileReq{})),
	},
	{
		name: "key first_of and a named identity",
		file: `
identities:
  user: {first_of: [subject, {api_key: {header: X-API-Key}}, ip]}
policies: [{name: p, limit: {algorithm: fixed_window, rate: 2, period: 1m}, key: user}]`,
		gocfg: func() Config {
			return Config{Policies: []Policy{pol("p", fixed(2, time.Minute), FirstOf(Subject(), APIKey("X-API-Key"), RemoteIP()))}}
		},
		reqs: cat(n(3, 2, fileReq{subject: "alice"}), n(3, 2, fileReq{hdr: map[string]string{"X-API-Key": "k"}}), n(3, 2, fileReq{})),
	},
	{
		name: "key ip behind trusted proxies (x-forwarded-for)",
		file: policyOf + "{ip: {trusted_proxies: [10.0.0.0/8], header: x-forwarded-for}}",
		gocfg: func() Config {
			return Config{Policies: []Policy{pol("p", fixed(2, time.Minute),
				mustKey(IP(IPOptions{TrustedProxies: []string{"10.0.0.0/8"}, Header: XForwardedFor})))}}
		},
		reqs: cat(n(3, 2, fileReq{peer: "10.0.0.5:1", hdr: map[string]string{"X-Forwarded-For": "203.0.113.7"}}),
			n(1, 1, fileReq{peer: "10.0.0.5:1", hdr: map[string]string{"X-Forwarded-For": "203.0.113.8"}})),
	},
	{
		name: "key ip behind trusted proxies (forwarded), prefixes",
		file: policyOf + "{ip: {trusted_proxies: [10.0.0.1], header: forwarded, ipv4_prefix: 24, ipv6_prefix: 48}}",
		gocfg: func() Config {
			return Config{Policies: []Policy{pol("p", fixed(2, time.Minute),
				mustKey(IP(IPOptions{TrustedProxies: []string{"10.0.0.1"}, Header: Forwarded, IPv4Prefix: 24, IPv6Prefix: 48})))}}
		},
		reqs: cat(n(2, 2, fileReq{peer: "10.0.0.1:1", hdr: map[string]string{"Forwarded": "for=203.0.113.7"}}),
			n(1, 0, fileReq{peer: "10.0.0.1:1", hdr: map[string]string{"Forwarded": "for=203.0.113.9"}}),  // same /24
			n(2, 2, fileReq{peer: "[2001:db8:1:2::1]:1"}), n(1, 0, fileReq{peer: "[2001:db8:1:3::1]:1"})), // same /48
	},
	{
		name: "key route under routes",
		file: `routes: {"GET /items/{id}": [{name: items, limit: {algorithm: fixed_window, rate: 2, period: 1m}, key: route}]}`,
		gocfg: func() Config {
			// HTTP KeyFuncs do not see the route: under routes, a route
			// identity is that entry's constant key.
			route := func(*http.Request) (string, bool) { return "route:GET /items/{id}", true }
			return Config{Routes: map[string][]Policy{"GET /items/{id}": {pol("items", fixed(2, time.Minute), route)}}}
		},
		reqs: cat(n(3, 2, fileReq{route: "/items/{id}"}), n(1, 0, fileReq{route: "/items/{id}", peer: "198.51.100.7:9"})),
	},
	{
		name: "cost constant",
		file: "policies: [{name: p, limit: {algorithm: fixed_window, rate: 10, period: 1m}, key: ip, cost: 4}]",
		gocfg: func() Config {
			p := pol("p", fixed(10, time.Minute), RemoteIP())
			p.Cost = func(*http.Request) int64 { return 4 }
			return Config{Policies: []Policy{p}}
		},
		reqs: n(3, 2, fileReq{}),
	},
	{
		name: "cost from a header",
		file: "policies: [{name: p, limit: {algorithm: fixed_window, rate: 10, period: 1m}, key: ip, cost: {header: X-Items, default: 2, max: 5}}]",
		gocfg: func() Config {
			p := pol("p", fixed(10, time.Minute), RemoteIP())
			p.Cost = func(r *http.Request) int64 {
				switch v := r.Header.Get("X-Items"); v {
				case "", "0", "junk", "-3":
					return 2
				case "99":
					return 5
				default:
					var n int64
					fmt.Sscan(v, &n)
					return n
				}
			}
			return Config{Policies: []Policy{p}}
		},
		reqs: []fileReq{
			{hdr: map[string]string{"X-Items": "3"}, status: 200}, // 3
			{status: 200}, // 5: default 2
			{hdr: map[string]string{"X-Items": "junk"}, status: 200},                       // 7
			{hdr: map[string]string{"X-Items": "0"}, status: 200},                          // 9: below 1, default 2
			{hdr: map[string]string{"X-Items": "99"}, status: 429},                         // max 5
			{hdr: map[string]string{"X-Items": "1"}, status: 200},                          // 10
			{peer: "198.51.100.7:9", hdr: map[string]string{"X-Items": "99"}, status: 200}, // 5 of 10
		},
	},
	{
		name: "shadow policy",
		file: "policies: [{name: p, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: ip, shadow: true}, {name: q, limit: {algorithm: fixed_window, rate: 2, period: 1m}, key: ip}]",
		gocfg: func() Config {
			p := pol("p", fixed(1, time.Minute), RemoteIP())
			p.Shadow = true
			return Config{Policies: []Policy{p, pol("q", fixed(2, time.Minute), RemoteIP())}}
		},
		reqs: n(3, 2, fileReq{}),
	},
	{
		name: "global shadow",
		file: "shadow: true\npolicies: [{name: p, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: ip}]",
		gocfg: func() Config {
			return Config{Shadow: true, Policies: []Policy{pol("p", fixed(1, time.Minute), RemoteIP())}}
		},
		reqs: n(3, 3, fileReq{}),
	},
	{
		name: "headers legacy",
		file: "headers: legacy\npolicies: [{name: p, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: ip}]",
		gocfg: func() Config {
			return Config{Headers: HeadersLegacy, Policies: []Policy{pol("p", fixed(1, time.Minute), RemoteIP())}}
		},
		reqs: n(2, 1, fileReq{}),
	},
	{
		name: "headers both",
		file: "headers: both\npolicies: [{name: p, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: ip}]",
		gocfg: func() Config {
			return Config{Headers: HeadersBoth, Policies: []Policy{pol("p", fixed(1, time.Minute), RemoteIP())}}
		},
		reqs: n(2, 1, fileReq{}),
	},
	{
		name: "headers none",
		file: "headers: none\npolicies: [{name: p, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: ip}]",
		gocfg: func() Config {
			return Config{Headers: HeadersNone, Policies: []Policy{pol("p", fixed(1, time.Minute), RemoteIP())}}
		},
		reqs: n(2, 1, fileReq{}),
	},
	{
		name: "headers draft",
		file: "headers: draft\npolicies: [{name: p, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: ip}]",
		gocfg: func() Config {
			return Config{Headers: HeadersDraft, Policies: []Policy{pol("p", fixed(1, time.Minute), RemoteIP())}}
		},
		reqs: n(2, 1, fileReq{}),
	},
	{
		name: "degraded header",
		down: true,
		file: "degraded_header: Sluice-Degraded\npolicies: [{name: p, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: ip}]",
		gocfg: func() Config {
			return Config{DegradedHeader: "Sluice-Degraded", Policies: []Policy{pol("p", fixed(1, time.Minute), RemoteIP())}}
		},
		reqs: n(2, 2, fileReq{}),
	},
	{
		name: "exempt",
		file: "exempt: [GET /healthz, /metrics]\npolicies: [{name: p, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: ip}]",
		gocfg: func() Config {
			return Config{Exempt: ExemptRoutes("GET /healthz", "/metrics"), Policies: []Policy{pol("p", fixed(1, time.Minute), RemoteIP())}}
		},
		reqs: cat(n(2, 2, fileReq{route: "/healthz"}), n(2, 2, fileReq{route: "/metrics", method: "POST"}),
			n(1, 1, fileReq{route: "/healthz", method: "POST"}), n(1, 0, fileReq{})),
	},
	{
		name: "routes with and without a method",
		file: `
routes:
  POST /upload: [{name: upload-post, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: ip}]
  /upload: [{name: upload, limit: {algorithm: fixed_window, rate: 2, period: 1m}, key: ip}]`,
		gocfg: func() Config {
			return Config{Routes: map[string][]Policy{
				"POST /upload": {pol("upload-post", fixed(1, time.Minute), RemoteIP())},
				"/upload":      {pol("upload", fixed(2, time.Minute), RemoteIP())}}}
		},
		reqs: cat(n(2, 1, fileReq{route: "/upload", method: "POST"}), n(3, 2, fileReq{route: "/upload", method: "PUT"}), n(2, 2, fileReq{route: "/other"})),
	},
	{
		name: "tiers from a header, default tier, a tier without policies",
		file: `
tiers:
  header: X-Plan
  default: free
  policies:
    free: [{name: free, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: ip}]
    pro: [{name: pro, limit: {algorithm: fixed_window, rate: 3, period: 1m}, key: ip}]
    internal: []`,
		gocfg: func() Config {
			return Config{DefaultTier: "free", Tier: func(r *http.Request) string { return r.Header.Get("X-Plan") },
				Tiers: map[string][]Policy{"free": {pol("free", fixed(1, time.Minute), RemoteIP())},
					"pro": {pol("pro", fixed(3, time.Minute), RemoteIP())}, "internal": nil}}
		},
		reqs: cat(n(2, 1, fileReq{}), n(2, 0, fileReq{hdr: map[string]string{"X-Plan": "gold"}}),
			n(4, 3, fileReq{hdr: map[string]string{"X-Plan": "pro"}}), n(3, 3, fileReq{hdr: map[string]string{"X-Plan": "internal"}})),
	},
	{
		name: "tiers from a claim through a table",
		file: `
tiers:
  claim: org
  table: {acme: pro, "12345": pro}
  default: free
  policies:
    free: [{name: free, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: subject}]
    pro: [{name: pro, limit: {algorithm: fixed_window, rate: 2, period: 1m}, key: subject}]`,
		gocfg: func() Config {
			table := map[string]string{"acme": "pro", "12345": "pro"}
			return Config{DefaultTier: "free", Tier: func(r *http.Request) string {
				org, _ := ClaimFrom(r.Context(), "org")
				return table[org]
			},
				Tiers: map[string][]Policy{"free": {pol("free", fixed(1, time.Minute), Subject())},
					"pro": {pol("pro", fixed(2, time.Minute), Subject())}}}
		},
		reqs: cat(n(3, 2, fileReq{subject: "a", claims: map[string]string{"org": "acme"}}),
			n(2, 1, fileReq{subject: "b", claims: map[string]string{"org": "initech"}}),
			n(3, 2, fileReq{subject: "c", claims: map[string]string{"org": "12345"}}),
			n(2, 1, fileReq{subject: "d"})),
	},
	{
		name: "tiers by API key through a table",
		file: `
tiers:
  key: {api_key: {header: X-API-Key}}
  table: {"key:2bb80d537b1da3e38bd30361aa855686": pro}
  default: anonymous
  policies:
    anonymous: [{name: anonymous, limit: {algorithm: fixed_window, rate: 1, period: 1m}, key: ip}]
    pro: [{name: pro, limit: {algorithm: fixed_window, rate: 2, period: 1m}, key: {api_key: {header: X-API-Key}}}]`,
		gocfg: func() Config {
			key := APIKey("X-API-Key")
			return Config{DefaultTier: "anonymous", Tier: func(r *http.Request) string {
				if k, _ := key(r); k == "key:2bb80d537b1da3e38bd30361aa855686" { // sha256("secret")
					return "pro"
				}
				return ""
			},
				Tiers: map[string][]Policy{"anonymous": {pol("anonymous", fixed(1, time.Minute), RemoteIP())},
					"pro": {pol("pro", fixed(2, time.Minute), key)}}}
		},
		reqs: cat(n(3, 2, fileReq{hdr: map[string]string{"X-API-Key": "secret"}}), n(2, 1, fileReq{hdr: map[string]string{"X-API-Key": "guess"}})),
	},
}

// TestFromFile sends the same requests through the middleware FromFile
// builds from each file and through its hand-written Go Config, each on a
// Redis of its own with the same clock, and wants the same statuses,
// headers (partition keys included: the same identities) and bodies, and
// the same keys in Redis.
func TestFromFile(t *testing.T) {
	secret := []byte("0123456789abcdef")
	for _, tc := range fileCases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := policyfile.Parse(tc.name+".yaml", []byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var opts []sluice.Option
			if tc.down {
				opts = []sluice.Option{sluice.WithFailurePolicy(sluice.FailOpen), sluice.WithBreaker(1, 30*time.Second)}
			}
			fe, ge := newTestEnv(t, opts...), newTestEnv(t, opts...)
			fcfg, err := FromFile(c, fe.lim)
			if err != nil {
				t.Fatal(err)
			}
			gcfg := tc.gocfg()
			gcfg.Limiter = ge.lim
			for _, cfg := range []*Config{&fcfg, &gcfg} {
				cfg.PartitionKeySecret, cfg.Logger = secret, quiet
			}
			fcfg.Clock, gcfg.Clock = fe.clock, ge.clock
			fm, gm := newMW(t, fcfg), newMW(t, gcfg)
			if tc.down {
				fe.mr.Close()
				ge.mr.Close()
			}
			var fgot, ggot []string
			var statuses []int
			var run func(m *Middleware, e *testEnv, reqs []fileReq, out *[]string, record bool)
			run = func(m *Middleware, e *testEnv, reqs []fileReq, out *[]string, record bool) {
				for _, q := range reqs {
					if q.advance > 0 {
						e.now = e.now.Add(q.advance)
						if !tc.down {
							e.mr.SetTime(e.now)
						}
					}
					r := httptest.NewRequest(cmpOr(q.method, "GET"), "/x", nil)
					r.RemoteAddr = cmpOr(q.peer, "192.0.2.1:1234")
					for k, v := range q.hdr {
						r.Header.Set(k, v)
					}
					if q.subject != "" {
						r = r.WithContext(WithSubject(r.Context(), q.subject))
					}
					if q.claims != nil {
						r = r.WithContext(WithClaims(r.Context(), q.claims))
					}
					rec := httptest.NewRecorder()
					m.Serve(rec, r, q.route, func(w http.ResponseWriter, r *http.Request) {
						run(m, e, q.inside, out, record)
						w.WriteHeader(http.StatusOK)
					})
					*out = append(*out, fmt.Sprintf("%d %v %s", rec.Code, rec.Header(), rec.Body.String()))
					if record {
						statuses = append(statuses, rec.Code)
					}
				}
			}
			run(fm, fe, tc.reqs, &fgot, true)
			run(gm, ge, tc.reqs, &ggot, false)
			var want []int
			var flat func([]fileReq)
			flat = func(rs []fileReq) {
				for _, q := range rs {
					flat(q.inside)
					want = append(want, q.status)
				}
			}
			flat(tc.reqs)
			if !slices.Equal(statuses, want) {
				t.Errorf("statuses from the file = %v, want %v", statuses, want)
			}
			for i := range fgot {
				if fgot[i] != ggot[i] {
					t.Errorf("response %d:\nfile: %s\ngo:   %s", i, fgot[i], ggot[i])
				}
			}
			if !tc.down {
				fk, gk := fe.mr.Keys(), ge.mr.Keys()
				if len(fk) == 0 && !strings.Contains(tc.name, "concurrency") {
					t.Error("no key in Redis")
				}
				if !reflect.DeepEqual(fk, gk) {
					t.Errorf("keys in Redis:\nfile: %q\ngo:   %q", fk, gk)
				}
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Fields for gRPC only are errors for HTTP, at their place in the file.
func TestFromFileGRPCFields(t *testing.T) {
	src := `error_domain: x
no_default_exempt: true
methods:
  /a.B/C: [{name: m, limit: {algorithm: gcra, rate: 1, period: 1s}, key: ip}]
policies:
  - name: p
    limit: {algorithm: gcra, rate: 1, period: 1s}
    key: {metadata: {name: x-tenant}}
    cost: {metadata: x-cost}
    per_message: true
  - name: q
    limit: {algorithm: gcra, rate: 1, period: 1s}
    key: route
tiers:
  metadata: x-plan
  default: free
  policies: {free: []}
`
	c, err := policyfile.Parse("grpc.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	_, err = FromFile(c, testLimiter(t))
	var es policyfile.Errors
	if !errors.As(err, &es) {
		t.Fatalf("FromFile = %v, want policyfile.Errors", err)
	}
	want := []string{
		"grpc.yaml:1:1: error_domain: not for HTTP",
		"grpc.yaml:2:1: no_default_exempt: not for HTTP",
		"grpc.yaml:3:1: methods: not for HTTP",
		`grpc.yaml:6:5: policy "p": per_message: not for HTTP`,
		"grpc.yaml:8:10: metadata identity: not for HTTP",
		`grpc.yaml:9:11: policy "p": cost: metadata: not for HTTP`,
		"grpc.yaml:13:10: route identity: HTTP keys by route only in a policy under routes (a KeyFunc does not see the route)",
		"grpc.yaml:15:3: tiers: metadata: not for HTTP",
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("FromFile errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

// TestFromFileRoundTrip: each file of the table, written out by Marshal
// and read again, is the file read (and so converts the same).
func TestFromFileRoundTrip(t *testing.T) {
	for _, tc := range fileCases {
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

// tenantFile is a policy file whose tiers come from a table of n tenants.
func tenantFile(n int) []byte {
	var b strings.Builder
	b.WriteString("tiers:\n  header: X-Tenant\n  default: free\n  table:\n")
	for i := range n {
		fmt.Fprintf(&b, "    tenant-%05d: %s\n", i, []string{"gold", "silver"}[i%2])
	}
	b.WriteString(`  policies:
    free: [{name: free, limit: {algorithm: gcra, rate: 10, period: 1m}, key: {header: {name: X-Tenant}}}]
    silver: [{name: silver, limit: {algorithm: gcra, rate: 100, period: 1m}, key: {header: {name: X-Tenant}}}]
    gold: [{name: gold, limit: {algorithm: gcra, rate: 1000, period: 1m}, key: {header: {name: X-Tenant}}}]
`)
	return []byte(b.String())
}

// BenchmarkTierTable parses a file of 10,000 tenants and turns it into a
// Config.
func BenchmarkTierTable(b *testing.B) {
	data := tenantFile(10_000)
	b.ReportAllocs()
	for b.Loop() {
		c, err := policyfile.Parse("tenants.yaml", data)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := FromFile(c, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTierLookup is a request's tier lookup with 10 and with 10,000
// entries: the same time, a map lookup.
func BenchmarkTierLookup(b *testing.B) {
	for _, n := range []int{10, 10_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			c, err := policyfile.Parse("tenants.yaml", tenantFile(n))
			if err != nil {
				b.Fatal(err)
			}
			cfg, err := FromFile(c, nil)
			if err != nil {
				b.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-Tenant", fmt.Sprintf("tenant-%05d", n-1))
			if cfg.Tier(r) != []string{"gold", "silver"}[(n-1)%2] {
				b.Fatalf("tier of the last tenant = %q", cfg.Tier(r))
			}
			b.ReportAllocs()
			for b.Loop() {
				cfg.Tier(r)
			}
		})
	}
}

// A policy file turned into the Config of a Middleware.
func ExampleFromFile() {
	limiter, clock, done := exampleFileLimiter()
	defer done()

	pf, err := policyfile.Parse("policies.yaml", []byte(`
policies:
  - name: per-ip
    limit: {algorithm: fixed_window, rate: 2, period: 1m}
    key: ip
routes:
  POST /reports:
    - name: reports
      limit: {algorithm: fixed_window, rate: 1, period: 1m}
      key: {header: {name: X-Tenant}}
`))
	if err != nil {
		fmt.Println(err) // every problem, file:line:col each
		return
	}
	cfg, err := FromFile(pf, limiter)
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.Clock = clock // what a file does not say is set in Go
	mw, err := New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /reports", func(w http.ResponseWriter, r *http.Request) {})
	h := mw.Wrap(mux)
	for range 2 {
		r := httptest.NewRequest("POST", "/reports", nil)
		r.Header.Set("X-Tenant", "acme")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "per-ip";r=1;t=40, "reports";r=0;t=40
	// 429 "per-ip";r=1;t=40, "reports";r=0;t=40
}

// Header keys requests by a header's value.
func ExampleHeader() {
	key := Header("X-Tenant")
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Tenant", "acme")
	fmt.Println(key(r))
	r.Header.Del("X-Tenant")
	fmt.Println(key(r))
	// Output:
	// hdr:x-tenant:acme true
	//  false
}

// exampleFileLimiter is a Limiter on miniredis with a pinned clock.
func exampleFileLimiter() (*sluice.Limiter, func() time.Time, func()) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	now := time.Unix(1_700_000_000, 0)
	m.SetTime(now)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		panic(err)
	}
	clock := func() time.Time { return now }
	lim, err := sluice.New(client, sluice.WithClock(clock), sluice.WithTimeout(time.Minute), sluice.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	return lim, clock, func() { lim.Close(); client.Close(); m.Close() }
}

// An authentication middleware stores the claims it verified; a policy
// file's tiers can choose by one (tiers: {claim: plan}).
func ExampleWithClaims() {
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// after verifying the request's token:
			ctx := WithSubject(r.Context(), "alice")
			next.ServeHTTP(w, r.WithContext(WithClaims(ctx, map[string]string{"plan": "pro"})))
		})
	}
	h := auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plan, ok := ClaimFrom(r.Context(), "plan")
		fmt.Println(plan, ok)
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	// Output: pro true
}
