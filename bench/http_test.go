package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v5"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	sluicechi "github.com/sluice-go/sluice/adapters/chi"
	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/internal/canned"
	server "github.com/sluice-go/sluice/internal/redisserver"
)

// frameworks are the routers the HTTP measurements mount the API on.
var frameworks = []string{"nethttp", "chi", "gin", "echo"}

// hello is the demo server's GET /: a small JSON answer.
func hello(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": "hello, world"})
}

// newAPI serves GET / on framework, behind mw unless mw is nil: the same
// handler with and without the limiter.
func newAPI(framework string, mw *httplimit.Middleware) http.Handler {
	switch framework {
	case "chi":
		r := chi.NewRouter()
		if mw != nil {
			r.Use(sluicechi.Middleware(mw, sluicechi.Options{}))
		}
		r.Get("/", func(w http.ResponseWriter, _ *http.Request) { hello(w) })
		return r
	case "gin":
		gin.SetMode(gin.ReleaseMode)
		e := gin.New()
		if mw != nil {
			e.Use(sluicegin.Middleware(mw, sluicegin.Options{}))
		}
		e.GET("/", func(c *gin.Context) { c.JSON(http.StatusOK, map[string]string{"message": "hello, world"}) })
		return e
	case "echo":
		e := echo.New()
		if mw != nil {
			e.Use(sluiceecho.Middleware(mw, sluiceecho.Options{}))
		}
		e.GET("/", func(c *echo.Context) error {
			return c.JSON(http.StatusOK, map[string]string{"message": "hello, world"})
		})
		return e
	default:
		mux := http.NewServeMux()
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { hello(w) })
		if mw != nil {
			return mw.Wrap(mux)
		}
		return mux
	}
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// newMiddleware limits every request by client IP with lim.
func newMiddleware(t testing.TB, l *sluice.Limiter, lim sluice.Limit) *httplimit.Middleware {
	t.Helper()
	mw, err := httplimit.New(httplimit.Config{
		Limiter:  l,
		Policies: []httplimit.Policy{{Name: "api", Limit: lim, Key: httplimit.RemoteIP()}},
		Logger:   quietLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// statusCounter counts the responses by status, and for each 429 checks
// that Retry-After is set.
type statusCounter struct {
	next            http.Handler
	ok, limited     atomic.Int64
	other, noRetry  atomic.Int64
	okBeforeLimited atomic.Int64 // 200s written before the first 429; -1 until one
}

func countStatuses(h http.Handler) *statusCounter {
	c := &statusCounter{next: h}
	c.okBeforeLimited.Store(-1)
	return c
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (c *statusCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	c.next.ServeHTTP(sw, r)
	switch sw.code {
	case http.StatusOK:
		c.ok.Add(1)
	case http.StatusTooManyRequests:
		if c.limited.Add(1) == 1 {
			c.okBeforeLimited.Store(c.ok.Load())
		}
		if w.Header().Get("Retry-After") == "" {
			c.noRetry.Add(1)
		}
	default:
		c.other.Add(1)
	}
}

// serve runs h on a free loopback port until the test ends.
func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String() + "/"
}

// TestHTTP checks, on every framework, what the HTTP load measurements
// rely on: the API answers 200 without the limiter and with a generous
// one, and with a quota of 5 the first 5 requests pass and every later
// one is a 429 carrying Retry-After.
func TestHTTP(t *testing.T) {
	srv := server.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	l, err := sluice.New(client, sluice.WithLogger(quietLog), sluice.WithTimeout(time.Minute)) // a loaded machine must not make it degrade
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	get := func(url string) (int, string) {
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			for _, mw := range []*httplimit.Middleware{nil, newMiddleware(t, l, sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named("generous-"+fw))} {
				if code, _ := get(serve(t, newAPI(fw, mw))); code != http.StatusOK {
					t.Errorf("limiter %v: status %d, want 200", mw != nil, code)
				}
			}
			sc := countStatuses(newAPI(fw, newMiddleware(t, l, sluice.Must(sluice.GCRA(5, time.Hour, 5)).Named("five-"+fw))))
			url := serve(t, sc)
			for i := range 8 {
				code, retry := get(url)
				want := http.StatusOK
				if i >= 5 {
					want = http.StatusTooManyRequests
				}
				if code != want || (code == http.StatusTooManyRequests && retry == "") {
					t.Errorf("request %d: status %d (Retry-After %q), want %d", i+1, code, retry, want)
				}
			}
		})
	}
}

// wrkResult is what one wrk run reports.
type wrkResult struct {
	rps      float64
	requests int64
	non2xx   int64
	p50, p99 time.Duration
}

var (
	wrkRPS      = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkRequests = regexp.MustCompile(`(\d+) requests in`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses:\s+(\d+)`)
	wrkPct      = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.000)?%\s+([0-9.]+)(us|ms|s)\s*$`)
)

// runWrk drives url with wrk: one thread, conns connections, for d (whole
// seconds, wrk's unit).
func runWrk(url string, conns int, d time.Duration) (wrkResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(max(int(d/time.Second), 1))+"s", "--latency", url).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %w: %s", err, out)
	}
	return parseWrk(string(out))
}

func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	m := wrkRPS.FindStringSubmatch(out)
	n := wrkRequests.FindStringSubmatch(out)
	if m == nil || n == nil {
		return r, fmt.Errorf("wrk output: no Requests/sec: %q", out)
	}
	r.rps, _ = strconv.ParseFloat(m[1], 64)
	r.requests, _ = strconv.ParseInt(n[1], 10, 64)
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		r.non2xx, _ = strconv.ParseInt(m[1], 10, 64)
	}
	for _, m := range wrkPct.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		unit := map[string]float64{"us": 1e3, "ms": 1e6, "s": 1e9}[m[3]]
		d := time.Duration(v * unit)
		if m[1] == "50" {
			r.p50 = d
		} else {
			r.p99 = d
		}
	}
	if r.p50 == 0 || r.p99 == 0 {
		return r, fmt.Errorf("wrk output: no latency distribution: %q", out)
	}
	return r, nil
}

var (
	heyRPS = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	heyPct = regexp.MustCompile(`(?m)^\s+(50|99)% in ([0-9.]+) secs`)
	heyOK  = regexp.MustCompile(`\[200\]\s+(\d+) responses`)
)

// runHey sends GET url at a fixed pace, workers × perWorker requests per
// second, for d: the latency of a server that is not saturated.
func runHey(url string, workers, perWorker int, d time.Duration) (wrkResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "hey", "-z", strconv.Itoa(max(int(d/time.Second), 1))+"s",
		"-c", strconv.Itoa(workers), "-q", strconv.Itoa(perWorker), url).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("hey: %w: %s", err, out)
	}
	return parseHey(string(out))
}

func parseHey(out string) (wrkResult, error) {
	var r wrkResult
	m := heyRPS.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("hey output: no Requests/sec: %q", out)
	}
	r.rps, _ = strconv.ParseFloat(m[1], 64)
	ok := heyOK.FindStringSubmatch(out)
	if ok != nil {
		r.requests, _ = strconv.ParseInt(ok[1], 10, 64)
	}
	for _, m := range heyPct.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		d := time.Duration(v * 1e9)
		if m[1] == "50" {
			r.p50 = d
		} else {
			r.p99 = d
		}
	}
	if r.p50 == 0 || r.p99 == 0 {
		return r, fmt.Errorf("hey output: no latency distribution: %q", out)
	}
	return r, nil
}

// discardWriter is a ResponseWriter that keeps nothing but the status.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// serveLoop benchmarks h serving GET / in the process.
func serveLoop(h http.Handler) func(b *testing.B) {
	return func(b *testing.B) {
		r, _ := http.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		w := &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			w.code = 0
			h.ServeHTTP(w, r)
			if w.code != 0 && w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		}
	}
}

// overheadBenches are the in-process benchmarks of the middleware: each
// framework bare and with the middleware on a Limiter whose Redis replies
// are canned, and that Limiter's Allow alone.
func overheadBenches(t testing.TB, real rueidis.Client) (names []string, fns map[string]func(*testing.B)) {
	t.Helper()
	l, err := sluice.New(canned.New(real), sluice.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	lim := sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named("overhead")
	fns = map[string]func(*testing.B){}
	names = append(names, "limiter_allow")
	fns["limiter_allow"] = func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if r, err := l.Allow(ctx, "ip:192.0.2.1", lim); err != nil || !r.Allowed {
				b.Fatalf("%+v %v", r, err)
			}
		}
	}
	for _, fw := range frameworks {
		names = append(names, fw+"/bare", fw+"/limited")
		fns[fw+"/bare"] = serveLoop(newAPI(fw, nil))
		fns[fw+"/limited"] = serveLoop(newAPI(fw, newMiddleware(t, l, lim)))
	}
	return names, fns
}

// BenchmarkMiddleware measures, per request in the process, each
// framework serving GET / bare and behind the middleware, on a Limiter
// whose Redis replies are canned, and that Limiter's Allow alone: the
// middleware's own cost is limited − bare − limiter_allow.
func BenchmarkMiddleware(b *testing.B) {
	srv := server.Start(b)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	names, fns := overheadBenches(b, client)
	for _, n := range names {
		b.Run(n, fns[n])
	}
}

// httpReport measures the API on every framework over the real
// redis-server of e: wrk against the bare and the limited server in
// interleaved rounds; wrk past a quota, counting the 200s and 429s; and
// the in-process overhead benchmarks, also in rounds.
func httpReport(t *testing.T, e *env) string {
	t.Helper()
	for _, bin := range []string{"wrk", "hey"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found (apt-get install wrk hey): %v", bin, err)
		}
	}
	rounds := *roundsFlag
	const conns = 16
	loadDur := 3 * time.Second
	gen := sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named("http-generous")
	urls := map[string]string{}
	var order []string
	for _, fw := range frameworks {
		urls[fw+"/bare"] = serve(t, newAPI(fw, nil))
		urls[fw+"/limited"] = serve(t, newAPI(fw, newMiddleware(t, e.sluice, gen)))
		order = append(order, fw+"/bare", fw+"/limited")
	}
	const paceWorkers, pacePerWorker = 10, 100
	load, paced := map[string][]wrkResult{}, map[string][]wrkResult{}
	for r := range rounds {
		off := r * len(order) / rounds
		for i := range order {
			k := order[(off+i)%len(order)]
			res, err := runWrk(urls[k], conns, loadDur)
			if err != nil {
				t.Fatal(err)
			}
			if res.non2xx > 0 {
				t.Errorf("%s: %d non-2xx responses under a generous limit", k, res.non2xx)
			}
			load[k] = append(load[k], res)
			p, err := runHey(urls[k], paceWorkers, pacePerWorker, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			paced[k] = append(paced[k], p)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#### HTTP under load (GET / of the demo's API from one client IP; limited = one GCRA policy by client IP, generous enough that every request passes, sluice defaults on the real redis-server; %d interleaved rounds, medians)\n\n", rounds)
	fmt.Fprintf(&b, "Saturated: `wrk -t1 -c%d -d%v --latency`, as fast as the server answers (latency is mostly queueing).\n\n", conns, loadDur)
	b.WriteString("| framework | requests/s bare | requests/s limited | limited ÷ bare | p50 bare | p50 limited | added p50 | p99 bare | p99 limited | added p99 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	med := func(rs []wrkResult, f func(wrkResult) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	for _, fw := range frameworks {
		bare, lim := load[fw+"/bare"], load[fw+"/limited"]
		rps := func(r wrkResult) float64 { return r.rps }
		p50 := func(r wrkResult) float64 { return float64(r.p50) }
		p99 := func(r wrkResult) float64 { return float64(r.p99) }
		var rr []float64
		for i := range min(len(bare), len(lim)) {
			rr = append(rr, lim[i].rps/bare[i].rps)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", fw,
			human(med(bare, rps)), human(med(lim, rps)), times(median(rr)),
			latency(time.Duration(med(bare, p50))), latency(time.Duration(med(lim, p50))), latency(time.Duration(med(lim, p50)-med(bare, p50))),
			latency(time.Duration(med(bare, p99))), latency(time.Duration(med(lim, p99))), latency(time.Duration(med(lim, p99)-med(bare, p99))))
	}

	fmt.Fprintf(&b, "\nPaced: `hey -z 2s -c %d -q %d`, %d requests/s in all, well below saturation (latency is the service time).\n\n", paceWorkers, pacePerWorker, paceWorkers*pacePerWorker)
	b.WriteString("| framework | p50 bare | p50 limited | added p50 | p99 bare | p99 limited | added p99 |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, fw := range frameworks {
		bare, lim := paced[fw+"/bare"], paced[fw+"/limited"]
		p50 := func(r wrkResult) float64 { return float64(r.p50) }
		p99 := func(r wrkResult) float64 { return float64(r.p99) }
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", fw,
			latency(time.Duration(med(bare, p50))), latency(time.Duration(med(lim, p50))), latency(time.Duration(med(lim, p50)-med(bare, p50))),
			latency(time.Duration(med(bare, p99))), latency(time.Duration(med(lim, p99))), latency(time.Duration(med(lim, p99)-med(bare, p99))))
	}

	// Past the quota.
	const quota = 2000
	b.WriteString(fmt.Sprintf("\n#### Past the quota: a quota of %d per 24 hours for the one client IP, wrk -t1 -c%d for 2 s (counted by the server, outside the middleware)\n\n", quota, conns))
	b.WriteString("| framework | requests | 200 | 429 | other | 200s before the first 429 | 429 without Retry-After | requests/s | p50 | p99 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, fw := range frameworks {
		// Per 24 hours: nothing refills during the run (one unit every 43 s).
		lim := sluice.Must(sluice.GCRA(quota, 24*time.Hour, quota)).Named(fmt.Sprintf("quota-%s-%d", fw, time.Now().UnixNano()))
		sc := countStatuses(newAPI(fw, newMiddleware(t, e.sluice, lim)))
		res, err := runWrk(serve(t, sc), conns, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if sc.ok.Load() != quota {
			t.Errorf("%s: %d requests admitted past a quota of %d", fw, sc.ok.Load(), quota)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n", fw, sc.ok.Load()+sc.limited.Load()+sc.other.Load(),
			sc.ok.Load(), sc.limited.Load(), sc.other.Load(), sc.okBeforeLimited.Load(), sc.noRetry.Load(), human(res.rps), latency(res.p50), latency(res.p99))
	}

	// In-process overhead.
	names, fns := overheadBenches(t, e.rueidis)
	bench := map[string][]testing.BenchmarkResult{}
	for r := range rounds {
		off := r * len(names) / rounds
		for i := range names {
			n := names[(off+i)%len(names)]
			bench[n] = append(bench[n], testing.Benchmark(fns[n]))
		}
	}
	// The fastest round: on a shared machine, noise only adds time.
	ns := func(n string) float64 {
		best := 0.0
		for i, r := range bench[n] {
			if v := float64(r.NsPerOp()); i == 0 || v < best {
				best = v
			}
		}
		return best
	}
	allocs := func(n string) float64 {
		xs := []float64{}
		for _, r := range bench[n] {
			xs = append(xs, float64(r.AllocsPerOp()))
		}
		return median(xs)
	}
	bytes := func(n string) float64 {
		xs := []float64{}
		for _, r := range bench[n] {
			xs = append(xs, float64(r.AllocedBytesPerOp()))
		}
		return median(xs)
	}
	b.WriteString(fmt.Sprintf("\n#### Middleware overhead per request, in the process (Go benchmarks in %d interleaved rounds: ns from the fastest round, allocations from the median; the Limiter's Redis replies canned, so no round trip)\n\n", rounds))
	fmt.Fprintf(&b, "`limiter_allow` (the Limiter's own work per decision, without the round trip): %.0f ns, %.0f allocs, %.0f B.\n\n", ns("limiter_allow"), allocs("limiter_allow"), bytes("limiter_allow"))
	b.WriteString("| framework | bare ns | limited ns | added ns (limited − bare) | middleware alone ns (added − limiter_allow) | bare allocs | limited allocs | added allocs | middleware alone allocs | added B | target (middleware alone) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, fw := range frameworks {
		added := ns(fw+"/limited") - ns(fw+"/bare")
		addedA := allocs(fw+"/limited") - allocs(fw+"/bare")
		over := added - ns("limiter_allow")
		oa := addedA - allocs("limiter_allow")
		target, met := "≤ 2 µs", over <= 2000
		if fw == "nethttp" {
			target, met = "≤ 1 µs and ≤ 6 allocs", over <= 1000 && oa <= 6
		}
		verdict := "met"
		if !met {
			verdict = "not met"
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %s: %s |\n", fw, ns(fw+"/bare"), ns(fw+"/limited"), added, over,
			allocs(fw+"/bare"), allocs(fw+"/limited"), addedA, oa, bytes(fw+"/limited")-bytes(fw+"/bare"), target, verdict)
	}
	return b.String()
}
