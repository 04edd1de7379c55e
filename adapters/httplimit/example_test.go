package httplimit_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

// exampleLimiter is a Limiter on an embedded miniredis with a pinned clock
// (20 s into a minute), so the examples print the same on every run.
// Programs use a real Redis and no clock.
func exampleLimiter() (*sluice.Limiter, func() time.Time, func()) {
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
	lim, err := sluice.New(client, sluice.WithClock(clock), sluice.WithTimeout(time.Minute))
	if err != nil {
		panic(err)
	}
	return lim, clock, func() { client.Close(); m.Close() }
}

func hello(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") }

func Example() {
	limiter, clock, done := exampleLimiter()
	defer done()

	mw, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Policies: []httplimit.Policy{{
			Name:  "per-ip",
			Limit: sluice.Must(sluice.FixedWindow(2, time.Minute)),
			Key:   httplimit.RemoteIP(),
		}},
		Clock: clock,
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", hello)
	h := mw.Wrap(mux)

	for i := 0; i < 3; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/hello", nil))
		fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"))
		if rec.Code != 200 {
			fmt.Println("Retry-After:", rec.Header().Get("Retry-After"))
			fmt.Print(rec.Body.String())
		}
	}
	// Output:
	// 200 "per-ip";q=2;w=60 "per-ip";r=1;t=40
	// 200 "per-ip";q=2;w=60 "per-ip";r=0;t=40
	// 429 "per-ip";q=2;w=60 "per-ip";r=0;t=40
	// Retry-After: 40
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota exceeded","status":429,"detail":"Quota exceeded for per-ip (2 per 60 s); retry in 40 s.","instance":"/hello","violated-policies":["per-ip"]}
}

// Tiers pick a policy per request from the verified subject; routes add
// their own; health checks are exempt.
func ExampleConfig_tiers() {
	limiter, clock, done := exampleLimiter()
	defer done()

	perMinute := func(n int64, name string) sluice.Limit {
		return sluice.Must(sluice.GCRA(n, time.Minute, n)).Named(name)
	}
	ip, sub := httplimit.RemoteIP(), httplimit.Subject()
	plan := map[string]string{"alice": "pro", "bob": "free"} // from your user store
	mw, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Tiers: map[string][]httplimit.Policy{
			"anonymous": {{Name: "anonymous", Limit: perMinute(60, "anonymous"), Key: ip}},
			"free":      {{Name: "free", Limit: perMinute(300, "free"), Key: sub}},
			"pro":       {{Name: "pro", Limit: perMinute(1800, "pro"), Key: sub}},
			"internal":  {{Name: "internal", Limit: perMinute(10000, "internal"), Key: sub}},
		},
		DefaultTier: "anonymous",
		Tier: func(r *http.Request) string {
			if s, ok := httplimit.SubjectFrom(r.Context()); ok {
				if p, ok := plan[s]; ok {
					return p
				}
				return "free"
			}
			return "anonymous"
		},
		Routes: map[string][]httplimit.Policy{
			"POST /reports": {{Name: "reports", Limit: perMinute(5, "reports"), Key: httplimit.FirstOf(sub, ip)}},
		},
		Exempt: func(r *http.Request, route string) bool { return route == "GET /healthz" },
		Clock:  clock,
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", hello)
	mux.HandleFunc("POST /reports", hello)
	mux.HandleFunc("GET /healthz", hello)
	// auth stands in for your authentication middleware: it verified the
	// caller and stores the subject.
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("X-Demo-User"); u != "" {
				r = r.WithContext(httplimit.WithSubject(r.Context(), u))
			}
			next.ServeHTTP(w, r)
		})
	}
	h := auth(mw.Wrap(mux))
	for _, c := range []struct{ method, path, user string }{
		{"GET", "/hello", ""}, {"GET", "/hello", "bob"}, {"POST", "/reports", "alice"}, {"GET", "/healthz", ""},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		r.Header.Set("X-Demo-User", c.user)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		fmt.Printf("%s %s %q: %d %s\n", c.method, c.path, c.user, rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// GET /hello "": 200 "anonymous";r=59;t=1
	// GET /hello "bob": 200 "free";r=299;t=1
	// POST /reports "alice": 200 "reports";r=4;t=12, "pro";r=1799;t=1
	// GET /healthz "": 200
}

// A conditional GET (If-None-Match) is cheap to serve: it costs 1 unit of
// a quota of 5 per request, so clients that revalidate get 5× the quota.
func ExamplePolicy_conditionalGET() {
	limiter, clock, done := exampleLimiter()
	defer done()

	mw, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Policies: []httplimit.Policy{{
			Name:  "reads",
			Limit: sluice.Must(sluice.FixedWindow(500, time.Minute)), // 100 full requests, or 500 revalidations
			Key:   httplimit.RemoteIP(),
			Cost: func(r *http.Request) int64 {
				if r.Header.Get("If-None-Match") != "" {
					return 1
				}
				return 5
			},
		}},
		Clock: clock,
	})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(hello))
	for _, etag := range []string{"", `"v1"`} {
		r := httptest.NewRequest("GET", "/doc", nil)
		if etag != "" {
			r.Header.Set("If-None-Match", etag)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		fmt.Printf("If-None-Match %q: %s\n", etag, rec.Header().Get("RateLimit"))
	}
	// Output:
	// If-None-Match "": "reads";r=495;t=40
	// If-None-Match "\"v1\"": "reads";r=494;t=40
}

// Behind a load balancer, trust its forwarding header and nothing else.
func ExampleIP() {
	key, err := httplimit.IP(httplimit.IPOptions{
		Header:         httplimit.XForwardedFor,
		TrustedProxies: []string{"10.0.0.0/8"},
	})
	if err != nil {
		panic(err)
	}
	for _, c := range []struct{ peer, xff string }{
		{"10.0.0.5:4000", "203.0.113.7, 10.0.0.9"}, // via two of our proxies
		{"10.0.0.5:4000", "1.1.1.1, 203.0.113.7"},  // the client wrote 1.1.1.1 itself
		{"198.51.100.2:4000", "203.0.113.7"},       // not from a proxy: header ignored
		{"[2001:db8:1:2::99]:4000", ""},            // IPv6 by /64
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		k, _ := key(r)
		fmt.Printf("%-24s %-24s -> %s\n", c.peer, c.xff, k)
	}
	// Output:
	// 10.0.0.5:4000            203.0.113.7, 10.0.0.9    -> ip:203.0.113.7
	// 10.0.0.5:4000            1.1.1.1, 203.0.113.7     -> ip:203.0.113.7
	// 198.51.100.2:4000        203.0.113.7              -> ip:198.51.100.2
	// [2001:db8:1:2::99]:4000                           -> ip:2001:db8:1:2::/64
}

// Shadow mode: measure a new policy on live traffic before enforcing it.
func ExamplePolicy_shadow() {
	limiter, clock, done := exampleLimiter()
	defer done()

	mw, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Policies: []httplimit.Policy{{
			Name: "strict", Limit: sluice.Must(sluice.FixedWindow(1, time.Minute)), Key: httplimit.RemoteIP(), Shadow: true,
		}},
		Logger: slog.New(slog.DiscardHandler), // would-be denials are logged at Info; default slog.Default()
		Clock:  clock,
	})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(hello))
	var codes []string
	for i := 0; i < 3; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		codes = append(codes, fmt.Sprint(rec.Code, " ", rec.Header().Get("RateLimit")))
	}
	fmt.Println(strings.Join(codes, "\n"))
	// Output:
	// 200 "strict";r=0;t=40
	// 200 "strict";r=0;t=40
	// 200 "strict";r=0;t=40
}
