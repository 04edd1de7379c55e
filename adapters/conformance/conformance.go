// Package conformance is the one test suite every HTTP adapter of sluice
// passes: the same requests against net/http, chi, gin, echo v5 and echo v4
// must give identical status codes, headers and bodies.
//
// Each framework's test in this module (nethttp_test.go, chi_test.go,
// gin_test.go, echo_test.go, echov4_test.go) calls Run with a Framework
// that builds a handler for the suite's routes its own way. The module is
// test-only and never required: it requires the adapters it tests, so
// that no published adapter module depends on it.
//
// Every case is checked twice: against explicit expectations written in
// Go, and byte for byte against a transcript in testdata/ that all
// frameworks share (regenerate with go test -run Conformance
// ./adapters/conformance -conformance.update, then review the diff).
// Every RateLimit and RateLimit-Policy value must parse as an RFC 9651
// List.
package conformance

import (
	"bytes"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/dunglas/httpsfv"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

var update = flag.Bool("conformance.update", false, "rewrite the conformance transcripts in testdata/")

// Route is one endpoint of the suite. Path is a template in the neutral
// {name} spelling ("/items/{id}").
type Route struct {
	Method, Path string
	Handler      http.HandlerFunc
}

// Framework is what an adapter's test provides.
type Framework struct {
	// Name names the framework in failures.
	Name string
	// Template spells the key of a method's route in Config.Routes for the
	// framework: Method for net/http and chi, ColonMethod for gin and echo.
	Template func(method, path string) string
	// Build returns a handler that serves routes with mw applied as the
	// adapter's users would apply it (one global middleware).
	Build func(mw *httplimit.Middleware, routes []Route) http.Handler
}

// Method spells a template "METHOD path", the way Config.Routes names a
// method's route in any framework.
func Method(method, path string) string { return method + " " + path }

// ColonMethod is Colon preceded by the method: "POST /items/:id".
func ColonMethod(method, path string) string { return method + " " + Colon(method, path) }

// Colon rewrites {name} segments as :name (gin, echo).
func Colon(method, path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			segs[i] = ":" + s[1:len(s)-1]
		}
	}
	return strings.Join(segs, "/")
}

// Start is the instant every case starts at: 20 s into an epoch-aligned
// minute, so fixed windows of a minute reset 40 s later.
var Start = time.Unix(1_700_000_000, 0)

// Env is one case's world: an embedded Redis, a Limiter on it with a
// clock the steps move, and the framework under test.
type Env struct {
	FW      Framework
	Limiter *sluice.Limiter
	Now     time.Time
	mr      *miniredis.Miniredis
}

// Clock is the clock of the case, for Config.Clock.
func (e *Env) Clock() time.Time { return e.Now }

func (e *Env) advance(d time.Duration) {
	e.Now = e.Now.Add(d)
	e.mr.SetTime(e.Now)
}

// T spells a route template for the framework under test.
func (e *Env) T(method, path string) string { return e.FW.Template(method, path) }

// Step is one request and what must come back.
type Step struct {
	// Advance moves the clock before the request.
	Advance time.Duration
	Method  string // default GET
	Path    string
	// Remote is the peer address (default 192.0.2.1:1234).
	Remote string
	Header map[string]string
	// Subject is set as the verified subject by the suite's stand-in for
	// an authentication middleware, which runs before the framework.
	Subject string
	// Status is the status wanted.
	Status int
	// Want lists headers and their exact values; a value of "" means the
	// header must be absent.
	Want map[string]string
	// Body, when set, must be a substring of the body.
	Body string
}

// Case is one scenario.
type Case struct {
	Name string
	// Options are extra Limiter options (failure policy, breaker).
	Options []sluice.Option
	// Down closes Redis before the first request.
	Down   bool
	Config func(e *Env) httplimit.Config
	Steps  []Step
}

// routes of the suite: plain endpoints, one that panics on demand.
func routes() []Route {
	ok := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("panic") == "1" {
			panic("handler panic")
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	}
	return []Route{
		{"GET", "/items/{id}", ok},
		{"POST", "/upload", ok},
		{"GET", "/healthz", ok},
		{"GET", "/slow", ok},
	}
}

// Run runs every case against fw.
func Run(t *testing.T, fw Framework) {
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) { runCase(t, fw, c) })
	}
}

func runCase(t *testing.T, fw Framework, c Case) {
	mr := miniredis.RunT(t)
	mr.SetTime(Start)
	mr.ClockTTL(true)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, ForceSingleClient: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	e := &Env{FW: fw, Now: Start, mr: mr}
	opts := append([]sluice.Option{sluice.WithClock(e.Clock), sluice.WithTimeout(5 * time.Second),
		sluice.WithLogger(nil)}, c.Options...)
	if e.Limiter, err = sluice.New(client, opts...); err != nil {
		t.Fatal(err)
	}
	cfg := c.Config(e)
	cfg.Limiter = e.Limiter
	if cfg.Clock == nil {
		cfg.Clock = e.Clock
	}
	if cfg.Logger == nil {
		cfg.Logger = discard
	}
	mw, err := httplimit.New(cfg)
	if err != nil {
		t.Fatalf("httplimit.New: %v", err)
	}
	h := outer(fw.Build(mw, routes()))
	if c.Down {
		mr.Close()
	}
	var transcript bytes.Buffer
	for i, s := range c.Steps {
		if s.Advance > 0 {
			e.advance(s.Advance)
		}
		method := s.Method
		if method == "" {
			method = http.MethodGet
		}
		req := httptest.NewRequest(method, s.Path, nil)
		if s.Remote != "" {
			req.RemoteAddr = s.Remote
		}
		for k, v := range s.Header {
			req.Header.Set(k, v)
		}
		if s.Subject != "" {
			req.Header.Set(subjectHeader, s.Subject)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		res := rec.Result()
		body := rec.Body.String()
		where := fmt.Sprintf("%s step %d (%s %s)", fw.Name, i+1, method, s.Path)
		if res.StatusCode != s.Status {
			t.Errorf("%s: status %d, want %d; body %q", where, res.StatusCode, s.Status, body)
		}
		for k, v := range s.Want {
			if got := strings.Join(res.Header.Values(k), ", "); got != v {
				t.Errorf("%s: %s = %q, want %q", where, k, got, v)
			}
		}
		if s.Body != "" && !strings.Contains(body, s.Body) {
			t.Errorf("%s: body %q does not contain %q", where, body, s.Body)
		}
		checkStructured(t, where, res.Header)
		writeTranscript(&transcript, i+1, s, method, res, body)
	}
	compareTranscript(t, fw.Name, c.Name, transcript.Bytes())
}

// subjectHeader carries the test's subject to outer, which stands in for an
// authentication middleware (it verified nothing: tests only).
const subjectHeader = "X-Test-Subject"

// outer wraps every framework alike: it recovers panics into a fixed 500
// (so a panicking handler's response is the same everywhere) and plays
// the authentication middleware, putting the verified subject into the
// request context before the framework sees the request.
func outer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = fmt.Fprintf(w, "recovered: %v\n", v)
			}
		}()
		if s := r.Header.Get(subjectHeader); s != "" {
			r.Header.Del(subjectHeader)
			r = r.WithContext(httplimit.WithSubject(r.Context(), s))
		}
		h.ServeHTTP(w, r)
	})
}

// checkStructured parses RateLimit and RateLimit-Policy as RFC 9651 Lists
// of String items with the draft's parameters.
func checkStructured(t *testing.T, where string, h http.Header) {
	t.Helper()
	for _, name := range []string{"RateLimit", "RateLimit-Policy"} {
		vals := h.Values(name)
		if len(vals) == 0 {
			continue
		}
		list, err := httpsfv.UnmarshalList(vals)
		if err != nil {
			t.Errorf("%s: %s %q is not a structured-field List: %v", where, name, vals, err)
			continue
		}
		for _, m := range list {
			item, ok := m.(httpsfv.Item)
			if !ok {
				t.Errorf("%s: %s member %v is not an Item", where, name, m)
				continue
			}
			if _, ok := item.Value.(string); !ok {
				t.Errorf("%s: %s item %v is not a String", where, name, item.Value)
			}
			required := map[string][]string{"RateLimit": {"r"}, "RateLimit-Policy": {"q"}}[name]
			for _, p := range required {
				if _, ok := item.Params.Get(p); !ok {
					t.Errorf("%s: %s item %v lacks %s", where, name, item.Value, p)
				}
			}
			for _, p := range item.Params.Names() {
				v, _ := item.Params.Get(p)
				switch p {
				case "q", "w", "r", "t":
					if n, ok := v.(int64); !ok || n < 0 || p == "w" && n == 0 {
						t.Errorf("%s: %s %s=%v is not a valid non-negative Integer", where, name, p, v)
					}
				case "pk":
					if _, ok := v.([]byte); !ok {
						t.Errorf("%s: %s pk=%v is not a Byte Sequence", where, name, v)
					}
				case "qu":
					if _, ok := v.(string); !ok {
						t.Errorf("%s: %s qu=%v is not a String", where, name, v)
					}
				default:
					t.Errorf("%s: %s has unexpected parameter %s", where, name, p)
				}
			}
		}
	}
}

func writeTranscript(b *bytes.Buffer, n int, s Step, method string, res *http.Response, body string) {
	fmt.Fprintf(b, "> %d %s %s", n, method, s.Path)
	if s.Remote != "" {
		fmt.Fprintf(b, " from %s", s.Remote)
	}
	if s.Subject != "" {
		fmt.Fprintf(b, " as %s", s.Subject)
	}
	keys := make([]string, 0, len(s.Header))
	for k := range s.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(b, " [%s: %s]", k, s.Header[k])
	}
	fmt.Fprintf(b, "\n< %d\n", res.StatusCode)
	names := make([]string, 0, len(res.Header))
	for k := range res.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range res.Header[k] {
			fmt.Fprintf(b, "< %s: %s\n", k, v)
		}
	}
	fmt.Fprintf(b, "<\n%s", body)
	if body != "" && !strings.HasSuffix(body, "\n") {
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func compareTranscript(t *testing.T, fw, name string, got []byte) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "testdata", name+".txt")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v (run the conformance tests with -conformance.update to create it)", fw, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: transcript differs from %s\n--- got\n%s\n--- want\n%s", fw, path, got, want)
	}
}

// NewLimiter returns a Limiter on an embedded miniredis whose clock stands
// at Start, for the suite's own cases (ClientIPCase).
func NewLimiter(t testing.TB) *sluice.Limiter {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(Start)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, ForceSingleClient: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	lim, err := sluice.New(client, sluice.WithClock(func() time.Time { return Start }), sluice.WithTimeout(5*time.Second), sluice.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// ClientIPCase checks an adapter's opt-in client-IP resolver. build
// returns the framework's handler for GET /items/{id}, limited by mw, with
// the framework's resolver trusting 10.0.0.0/8 and the adapter told to use
// it (useFramework) or not. One request per client is allowed.
func ClientIPCase(t *testing.T, build func(mw *httplimit.Middleware, useFramework bool) http.Handler) {
	t.Helper()
	get := func(h http.Handler, peer, xff string) int {
		r := httptest.NewRequest("GET", "/items/1", nil)
		r.RemoteAddr = peer
		r.Header.Set("X-Forwarded-For", xff)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	for _, use := range []bool{true, false} {
		mw, err := httplimit.New(httplimit.Config{Limiter: NewLimiter(t), Logger: discard, Clock: func() time.Time { return Start },
			Policies: []httplimit.Policy{{Name: "per-ip", Limit: sluice.Must(sluice.FixedWindow(1, time.Minute)), Key: httplimit.RemoteIP()}}})
		if err != nil {
			t.Fatal(err)
		}
		h := build(mw, use)
		// two proxies forward the same client
		a, b := get(h, "10.0.0.1:1", "203.0.113.5"), get(h, "10.0.0.2:1", "203.0.113.5")
		if use && (a != 200 || b != 429) {
			t.Errorf("framework resolver: statuses %d, %d; want 200, 429 (one client behind two proxies)", a, b)
		}
		if !use && (a != 200 || b != 200) {
			t.Errorf("own resolver without trusted proxies: statuses %d, %d; want 200, 200 (keyed by peer)", a, b)
		}
		// an untrusted peer cannot spoof its way to a fresh quota either way
		c, d := get(h, "198.51.100.1:1", "1.1.1.1"), get(h, "198.51.100.1:1", "2.2.2.2")
		if c != 200 || d != 429 {
			t.Errorf("useFramework=%v: untrusted peer with spoofed XFF: %d, %d; want 200, 429", use, c, d)
		}
	}
}
