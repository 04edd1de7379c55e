package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/overrides"
	"github.com/sluice-go/sluice/policyfile"
)

const apiFile = "testdata/api.yaml"

// run runs the command line and returns its status, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCheck(t *testing.T) {
	code, out, errOut := run(t, "check", apiFile)
	if code != ExitOK || !strings.Contains(out, apiFile+": ok (version v1, 4 policies)") || errOut != "" {
		t.Fatalf("check %s = %d\nstdout: %s\nstderr: %s", apiFile, code, out, errOut)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("policies:\n  - name: a\n    limit: {algorithm: gcra, rate: 5, period: 1m, bust: 2}\n    key: {ip: {}}\n  - name: a\n    limit: {algorithm: gcra, rate: 5, period: 1x}\n    key: {ip: {}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "check", apiFile, bad)
	if code != ExitFailed {
		t.Fatalf("check of a broken file = %d, want %d", code, ExitFailed)
	}
	for _, want := range []string{
		bad + `:3:51: policies[0].limit: unknown field "bust" (did you mean "burst"?)`,
		bad + ":5:11:",
		bad + ":6:47:",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check's errors lack %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(out, apiFile+": ok") {
		t.Errorf("check reports the good file beside the bad one: %q", out)
	}

	code, out, _ = run(t, "check", "-json", bad)
	var res []checkResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != ExitFailed || len(res) != 1 || res[0].OK || len(res[0].Errors) < 3 {
		t.Fatalf("check -json = %d %v %+v", code, err, res)
	}
	if e := res[0].Errors[0]; e.File != bad || e.Line != 3 || e.Col != 51 {
		t.Errorf("first -json error %+v, want %s:3:51", e, bad)
	}

	if code, _, errOut = run(t, "check", filepath.Join(t.TempDir(), "missing.yaml")); code != ExitFailed || !strings.Contains(errOut, "missing.yaml") {
		t.Errorf("check of a missing file = %d, %q", code, errOut)
	}
	if code, _, _ = run(t, "check"); code != ExitUsage {
		t.Errorf("check without files = %d, want %d", code, ExitUsage)
	}
}

// TestCheckRepository checks every policy file the repository ships, as
// CI would with "go run ./cmd/sluice check".
func TestCheckRepository(t *testing.T) {
	var files []string
	for _, pattern := range []string{"../policyfile/testdata/*.yaml", "../examples/*/policies*.yaml", "testdata/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 3 {
		t.Fatalf("found only %v", files)
	}
	code, out, errOut := run(t, append([]string{"check"}, files...)...)
	if code != ExitOK {
		t.Fatalf("check %v = %d\n%s%s", files, code, out, errOut)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"frobnicate"},
		{"override"},
		{"override", "twiddle"},
		{"override", "set", "-policy", "free", "ip:1.2.3.4"},                           // no -rate, -exempt or -block
		{"override", "set", "-policy", "free", "-rate", "5", "-block", "ip:1.2.3.4"},   // two kinds
		{"override", "set", "-policy", "free", "-exempt", "-burst", "2", "ip:1.2.3.4"}, // burst without rate
		{"override", "set", "-policy", "free", "-rate", "5", "-for", "1h", "-until", "2030-01-01", "ip:1.2.3.4"},
		{"override", "set", "-policy", "free", "-rate", "5", "-until", "tomorrow", "ip:1.2.3.4"},
		{"override", "get", "ip:1.2.3.4"}, // no -policy
		{"inspect", "ip=1.2.3.4"},         // no -config
		{"reset", "-policy", "free", "ip:1.2.3.4"},
	} {
		if code, _, errOut := run(t, args...); code != ExitUsage || errOut == "" {
			t.Errorf("sluice %s = %d (stderr %q), want %d with an explanation", strings.Join(args, " "), code, errOut, ExitUsage)
		}
	}
	if code, _, errOut := run(t, "override", "list"); code != ExitFailed || !strings.Contains(errOut, "-redis is required") {
		t.Errorf("override list without -redis = %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "inspect", "-config", apiFile, "-redis", "127.0.0.1:1", "api_key"); code != ExitUsage || !strings.Contains(errOut, "not a request attribute") {
		t.Errorf("inspect with a bad attribute = %d %q", code, errOut)
	}
}

// fakeClock is the replicas' clock for their overrides: the tests move it
// past Options.LocalCache instead of waiting.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// replica is one server running the policy file with its own client.
type replica struct {
	h http.Handler
}

func newReplica(t *testing.T, addrs []string, clock *fakeClock) *replica {
	t.Helper()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	lim, err := sluice.New(client, sluice.WithFailurePolicy(sluice.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	store, err := overrides.New(client, overrides.Options{Cache: overrides.CacheLocal, LocalCache: time.Second, Clock: clock.Now, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := policyfile.Load(apiFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := httplimit.FromFile(c, lim)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Overrides, cfg.Logger = store, discardLogger()
	m, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(http.ResponseWriter, *http.Request) {})
	return &replica{h: m.Wrap(mux)}
}

// get sends a request from ip with the API key, and returns its status and
// what its RateLimit header says policy has left (-1: not there).
func (rp *replica) get(ip, apiKey, policy string) (int, int64) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = ip + ":5555"
	r.Header.Set("X-API-Key", apiKey)
	w := httptest.NewRecorder()
	rp.h.ServeHTTP(w, r)
	m := regexp.MustCompile(`"` + regexp.QuoteMeta(policy) + `";r=(\d+)`).FindStringSubmatch(w.Header().Get("RateLimit"))
	if m == nil {
		return w.Code, -1
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return w.Code, n
}

// inspectRemaining runs sluice inspect -json and returns each policy's
// line.
func inspectRemaining(t *testing.T, redisURL string, attrs ...string) map[string]inspection {
	t.Helper()
	code, out, errOut := run(t, append([]string{"inspect", "-config", apiFile, "-redis", redisURL, "-json"}, attrs...)...)
	if code != ExitOK {
		t.Fatalf("inspect = %d: %s", code, errOut)
	}
	var lines []inspection
	if err := json.Unmarshal([]byte(out), &lines); err != nil {
		t.Fatalf("inspect -json: %v\n%s", err, out)
	}
	m := map[string]inspection{}
	for _, l := range lines {
		m[l.Policy] = l
	}
	return m
}

// TestOverrideObeyedByReplicas sets, reads and removes overrides with
// the command, and checks that three replicas obey them on their next
// request, on a redis-server and on a 3-master cluster, and that inspect
// shows what their responses say.
func TestOverrideObeyedByReplicas(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redisserver.Start(t)
		testOverrides(t, []string{srv.Addr}, "redis://"+srv.Addr)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redisserver.StartCluster(t, 3)
		addrs := c.Addrs()
		testOverrides(t, addrs, "redis://"+addrs[0]+"?addr="+addrs[1]+"&addr="+addrs[2])
	})
}

func testOverrides(t *testing.T, addrs []string, url string) {
	clock := &fakeClock{now: time.Now()}
	replicas := []*replica{newReplica(t, addrs, clock), newReplica(t, addrs, clock), newReplica(t, addrs, clock)}
	const ip, key = "203.0.113.7", "k-free"

	// Three requests spread over the replicas: the free plan's 5 per hour.
	var left int64
	for i, rp := range replicas {
		code, rem := rp.get(ip, key, "free")
		if code != http.StatusOK || rem != int64(4-i) {
			t.Fatalf("request %d: %d, free has %d left, want 200 and %d", i, code, rem, 4-i)
		}
		left = rem
	}
	in := inspectRemaining(t, url, "ip="+ip, "api_key="+key)
	if f, ok := in["free"]; !ok || f.Remaining == nil || *f.Remaining != left || f.Override != nil {
		t.Fatalf("inspect shows %+v for free, want %d left as the last response said", in["free"], left)
	}
	if strings.Contains(mustJSON(t, in), key) {
		t.Fatalf("inspect prints the raw API key: %s", mustJSON(t, in))
	}
	if pc := in["per-client"]; pc.Identity != "ip:"+ip || pc.Remaining == nil || *pc.Remaining != 97 {
		t.Fatalf("inspect shows %+v for per-client, want ip:%s with 97 left", pc, ip)
	}

	// A limit override, named by request attributes through the file.
	code, out, errOut := run(t, "override", "set", "-redis", url, "-config", apiFile, "-policy", "free",
		"-rate", "1000", "-for", "72h", "-reason", "trial", "api_key="+key)
	if code != ExitOK || strings.Contains(out+errOut, key+" ") {
		t.Fatalf("override set = %d\n%s%s", code, out, errOut)
	}
	clock.Add(time.Second) // past LocalCache: the replicas' next lookup asks Redis
	for i, rp := range replicas {
		// The state carries over: 3 of the 1000 are spent.
		if code, rem := rp.get(ip, key, "free"); code != http.StatusOK || rem != int64(1000-3-1-i) {
			t.Fatalf("after the override, replica %d: %d, free has %d left, want %d", i, code, rem, 1000-3-1-i)
		}
	}
	in = inspectRemaining(t, url, "ip="+ip, "api_key="+key)
	if f := in["free"]; f.Override == nil || f.Override.Kind != "limit" || f.Override.Rate != 1000 || f.Override.Reason != "trial" || *f.Remaining != 1000-6 {
		t.Fatalf("inspect after the override: %+v (override %+v)", f, f.Override)
	}
	code, out, _ = run(t, "override", "list", "-redis", url)
	if code != ExitOK || !strings.Contains(out, "free") || !strings.Contains(out, "limit 1000") || strings.Contains(out, key+" ") {
		t.Fatalf("override list = %d\n%s", code, out)
	}

	// Removed: the plan's limit applies again.
	if code, out, errOut = run(t, "override", "rm", "-redis", url, "-config", apiFile, "-policy", "free", "api_key="+key); code != ExitOK || !strings.Contains(out, "removed") {
		t.Fatalf("override rm = %d %s %s", code, out, errOut)
	}
	clock.Add(time.Second)
	for i, rp := range replicas {
		if code, _ := rp.get(ip, key, "free"); code != http.StatusTooManyRequests {
			t.Fatalf("after the override was removed, replica %d answered %d, want 429: 9 of the plan's 5 are spent", i, code)
		}
	}

	// Block an address under per-client, then reset the API key's quota.
	if code, _, errOut = run(t, "override", "set", "-redis", url, "-policy", "per-client", "-block", "-until", "2099-01-01", "ip:198.51.100.9"); code != ExitOK {
		t.Fatalf("override set -block = %d %s", code, errOut)
	}
	clock.Add(time.Second)
	if code, _ := replicas[0].get("198.51.100.9", "k-other", "free"); code != http.StatusTooManyRequests {
		t.Fatalf("a blocked address got %d", code)
	}
	if code, _, errOut = run(t, "reset", "-redis", url, "-config", apiFile, "-policy", "free", "api_key="+key); code != ExitOK {
		t.Fatalf("reset = %d %s", code, errOut)
	}
	// The state in Redis is gone: a replica that has not cached the
	// denials of that key (the replicas above did, for up to their
	// RetryAfter; see the reset command's help) admits it again.
	fresh := newReplica(t, addrs, clock)
	if code, rem := fresh.get(ip, key, "free"); code != http.StatusOK || rem != 4 {
		t.Fatalf("after reset: %d, %d left, want 200 and 4", code, rem)
	}
	if code, _, errOut = run(t, "override", "get", "-redis", url, "-policy", "free", "key:0123"); code != ExitFailed || !strings.Contains(errOut, "no override") {
		t.Fatalf("override get of nothing = %d %q", code, errOut)
	}

	// An override for a while ends on time: exempt from per-client for
	// an hour, then the address's own 100 per hour again.
	const heavy = "192.0.2.200"
	if code, _, errOut = run(t, "override", "set", "-redis", url, "-policy", "per-client", "-exempt", "-for", "1h", "ip:"+heavy); code != ExitOK {
		t.Fatalf("override set -exempt = %d %s", code, errOut)
	}
	clock.Add(time.Second)
	for i := range 3 {
		if code, rem := replicas[i].get(heavy, "k-heavy-"+strconv.Itoa(i), "per-client"); code != http.StatusOK || rem != -1 {
			t.Fatalf("exempt address on replica %d: %d, per-client reported with %d left; want 200 and no per-client item", i, code, rem)
		}
	}
	clock.Add(time.Hour)
	for i := range 3 {
		if code, rem := replicas[i].get(heavy, "k-heavy-"+strconv.Itoa(i), "per-client"); code != http.StatusOK || rem != int64(99-i) {
			t.Fatalf("an hour later, replica %d: %d, per-client has %d left; want 200 and %d (the exemption is over)", i, code, rem, 99-i)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
