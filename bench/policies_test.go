package bench_test

import (
	"flag"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
	server "github.com/sluice-go/sluice/internal/redisserver"
)

var policiesFlag = flag.Bool("policies", false, "TestPolicies: measure the demo's API behind 1 and behind 3 policies with wrk, and print the table for docs/benchmarks.md (about 40 s)")

// policyMiddleware is the middleware of n generous policies on n
// identities: per client IP, then per request path, then one for the whole
// API.
func policyMiddleware(t testing.TB, l *sluice.Limiter, n int) *httplimit.Middleware {
	t.Helper()
	gen := func(name string) sluice.Limit { return sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named(name) }
	all := []httplimit.Policy{
		{Name: "per-ip", Limit: gen("per-ip"), Key: httplimit.RemoteIP()},
		{Name: "per-path", Limit: gen("per-path"), Key: func(r *http.Request) (string, bool) { return "path:" + r.URL.Path, true }},
		{Name: "global", Limit: gen("global"), Key: httplimit.Constant("api")},
	}
	mw, err := httplimit.New(httplimit.Config{Limiter: l, Policies: all[:n], Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// TestPolicies compares the demo's API (net/http) behind one policy and
// behind three policies on three identities, on a real redis-server with
// the Limiter's defaults: every request passes, and the three policies
// are one batch decision, one round trip. With -policies it drives each
// with wrk in interleaved rounds and prints the table; without, it checks
// that both answer 200 with one RateLimit item per policy.
func TestPolicies(t *testing.T) {
	srv := server.Start(t)
	e, err := newEnv(srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	urls := map[int]string{}
	for _, n := range []int{1, 3} {
		urls[n] = serve(t, newAPI("nethttp", policyMiddleware(t, e.sluice, n)))
		resp, err := http.Get(urls[n])
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := strings.Count(resp.Header.Get("RateLimit"), ";r="); resp.StatusCode != 200 || got != n {
			t.Fatalf("%d policies: status %d, RateLimit %q", n, resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	}
	if !*policiesFlag {
		return
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Fatalf("-policies needs wrk (apt-get install wrk): %v", err)
	}
	const conns, rounds = 16, 5
	loadDur := 3 * time.Second
	res := map[int][]wrkResult{}
	for r := range rounds {
		order := []int{1, 3}
		if r%2 == 1 {
			order = []int{3, 1}
		}
		for _, n := range order {
			w, err := runWrk(urls[n], conns, loadDur)
			if err != nil {
				t.Fatal(err)
			}
			if w.non2xx > 0 {
				t.Fatalf("%d policies: %d non-2xx responses under generous limits", n, w.non2xx)
			}
			res[n] = append(res[n], w)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "`wrk -t1 -c%d -d%v --latency` on GET / of the demo's API (net/http), %d rounds alternating which runs first:\n\n", conns, loadDur, rounds)
	b.WriteString("| policies | requests/s (median) | each round | p99 (median) | each round |\n|---:|---:|---|---:|---|\n")
	var rr, pr []float64
	for i := range rounds {
		rr = append(rr, res[3][i].rps/res[1][i].rps)
		pr = append(pr, float64(res[3][i].p99)/float64(res[1][i].p99))
	}
	for _, n := range []int{1, 3} {
		var rps, p99 []float64
		var each, eachP []string
		for _, w := range res[n] {
			rps, p99 = append(rps, w.rps), append(p99, float64(w.p99))
			each, eachP = append(each, human(w.rps)), append(eachP, latency(w.p99))
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", n, human(median(rps)), strings.Join(each, " · "), latency(time.Duration(median(p99))), strings.Join(eachP, " · "))
	}
	fmt.Fprintf(&b, "\n3 policies ÷ 1, round by round: requests/s %s (median %s), p99 %s (median %s).\n",
		joinTimes(rr), times(median(rr)), joinTimes(pr), times(median(pr)))
	t.Log("\n" + b.String())
}

func joinTimes(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, times(x))
	}
	return strings.Join(s, " · ")
}
