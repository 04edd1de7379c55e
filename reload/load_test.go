package reload_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/reload"
)

// policyFile is the test's own policy file format: a version, the rate
// of its one rate policy, and reject, which makes a Config that
// Middleware.Update refuses (two policies of one name).
type policyFile struct {
	Version string `json:"version"`
	Rate    int64  `json:"rate"`
	Reject  bool   `json:"reject,omitempty"`
}

// probe is what the policies that decided one request saw: the version of
// every KeyFunc and CostFunc called, and the Decision of a denial.
type probe struct {
	versions map[string]bool
	denied   *httplimit.Decision
}

type probeKey struct{}

func probeOf(r *http.Request) *probe { return r.Context().Value(probeKey{}).(*probe) }

// inflight is a concurrency policy every version has: its slots, taken
// under one version and released under another, must all come back.
var inflight = sluice.Must(sluice.Concurrency(1000, time.Minute)).Named("inflight")

// loader loads a policyFile into a Config on lim. Each version's policy
// is named after it and counts a quota of its own, and its functions
// record the version in the request's probe.
func loader(lim *sluice.Limiter) func(path string) (httplimit.Config, error) {
	return func(path string) (httplimit.Config, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return httplimit.Config{}, err
		}
		var f policyFile
		if err := json.Unmarshal(data, &f); err != nil {
			return httplimit.Config{}, fmt.Errorf("%s: %w", path, err)
		}
		l, err := sluice.GCRA(f.Rate, time.Second, f.Rate)
		if err != nil {
			return httplimit.Config{}, fmt.Errorf("%s: version %s: %w", path, f.Version, err)
		}
		version, rate := f.Version, f.Rate
		p := httplimit.Policy{
			Name:  "rate-" + version,
			Limit: l.Named("rate-" + version),
			Key: func(r *http.Request) (string, bool) {
				probeOf(r).versions[version] = true
				return "k", true
			},
			// A request asking to be denied costs more than the burst:
			// never admitted.
			Cost: func(r *http.Request) int64 {
				probeOf(r).versions[version] = true
				if r.Header.Get("X-Deny") != "" {
					return rate + 1
				}
				return 1
			},
		}
		cfg := httplimit.Config{
			Limiter: lim, Version: version, Logger: slog.New(slog.DiscardHandler),
			Policies: []httplimit.Policy{p, {Name: "inflight", Limit: inflight, Key: httplimit.Constant("c")}},
			DenyHandler: func(w http.ResponseWriter, r *http.Request, d *httplimit.Decision) {
				probeOf(r).denied = d
				w.WriteHeader(d.Status)
			},
		}
		if f.Reject {
			cfg.Policies = append(cfg.Policies, p)
		}
		return cfg, nil
	}
}

// fileKind is what the writer puts in the file: a good version, or one of
// the ways a version is bad.
func fileKind(i int) (content []byte, good bool) {
	version := fmt.Sprintf("v%04d", i)
	rate := 1_000_000 + int64(i)
	switch {
	case i%5 == 3: // not JSON: load fails
		return []byte(`{"version": "` + version + `", "rate": `), false
	case i%5 == 4: // apply fails
		b, _ := json.Marshal(policyFile{Version: version, Rate: rate, Reject: true})
		return b, false
	case i%7 == 6: // an invalid limit: load fails
		b, _ := json.Marshal(policyFile{Version: version, Rate: 0})
		return b, false
	}
	b, _ := json.Marshal(policyFile{Version: version, Rate: rate})
	return b, true
}

// replace writes data to a temporary file and renames it over path.
func replace(t *testing.T, path string, data []byte) {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Error(err)
	}
}

// TestReloadUnderLoad replaces the policy file 100 times a second, some
// versions bad, while 64 goroutines send requests through the middleware
// on a redis-server for at least 2 s: every request is decided, headed and denied under
// exactly one version, a good one; the bad ones are counted and never
// serve; every concurrency slot comes back.
func TestReloadUnderLoad(t *testing.T) {
	srv := redisserver.Start(t)
	client, err := rueidis.NewClient(sluice.ClientOption(srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	lim, err := sluice.New(client, sluice.WithTimeout(time.Minute), sluice.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })

	path := filepath.Join(t.TempDir(), "limits.json")
	var good sync.Map // version → rate, of the good versions written
	first, _ := fileKind(0)
	good.Store("v0000", int64(1_000_000))
	if err := os.WriteFile(path, first, 0o644); err != nil {
		t.Fatal(err)
	}
	load := loader(lim)
	cfg, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	w, err := reload.Watch(context.Background(), path, load, mw.Update, reload.Options{
		Debounce: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	// check sends one request and returns the version it was decided
	// under, or what is wrong with it.
	check := func(deny bool) (string, error) {
		p := &probe{versions: map[string]bool{}}
		r := httptest.NewRequest("GET", "/", nil).WithContext(context.WithValue(context.Background(), probeKey{}, p))
		if deny {
			r.Header.Set("X-Deny", "1")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if len(p.versions) != 1 {
			return "", fmt.Errorf("decided by the policies of %d versions: %v", len(p.versions), p.versions)
		}
		var v string
		for v = range p.versions {
		}
		rate, ok := good.Load(v)
		if !ok {
			return v, fmt.Errorf("decided under %s, not a good version", v)
		}
		wantPolicy := fmt.Sprintf(`"rate-%s";q=%d;w=1, "inflight";q=1000;qu="concurrent-requests"`, v, rate)
		if got := rec.Header().Get("RateLimit-Policy"); got != wantPolicy {
			return v, fmt.Errorf("decided under %s; RateLimit-Policy %q, want %q", v, got, wantPolicy)
		}
		if got, prefix := rec.Header().Get("RateLimit"), fmt.Sprintf(`"rate-%s";r=`, v); len(got) < len(prefix) || got[:len(prefix)] != prefix {
			return v, fmt.Errorf("decided under %s; RateLimit %q", v, got)
		}
		switch d := p.denied; {
		case !deny && (rec.Code != 200 || d != nil):
			return v, fmt.Errorf("decided under %s: status %d, want 200", v, rec.Code)
		case deny && (rec.Code != 429 || d == nil):
			return v, fmt.Errorf("decided under %s: status %d, want 429", v, rec.Code)
		case deny && (d.Version != v || len(d.Outcomes) != 2 || d.Outcomes[0].Policy != "rate-"+v || d.Outcomes[0].Limit.Rate != rate.(int64)):
			return v, fmt.Errorf("decided under %s, but the denial's Decision says version %q, outcomes %+v", v, d.Version, d.Outcomes)
		}
		return v, nil
	}

	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			data, ok := fileKind(i)
			if ok {
				good.Store(fmt.Sprintf("v%04d", i), 1_000_000+int64(i))
			}
			replace(t, path, data)
		}
	})

	var requests, failures atomic.Int64
	var seenMu sync.Mutex
	seen := map[string]bool{}
	var clients sync.WaitGroup
	for g := range 64 {
		clients.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				v, err := check((g+n)%8 == 0)
				requests.Add(1)
				if err != nil {
					if failures.Add(1) <= 5 {
						t.Error(err)
					}
					continue
				}
				seenMu.Lock()
				seen[v] = true
				seenMu.Unlock()
			}
		})
	}
	// Run at least 2 s, and on until the watcher has applied and refused
	// versions and requests were decided under several (longer on a slow
	// machine).
	versionsSeen := func() int {
		seenMu.Lock()
		defer seenMu.Unlock()
		return len(seen)
	}
	begin := time.Now()
	for s := w.Status(); time.Since(begin) < 2*time.Second || s.Successes < 5 || s.Failures < 2 || versionsSeen() < 3; s = w.Status() {
		if time.Since(begin) > 2*time.Minute {
			t.Errorf("after 2 minutes the watcher applied %d versions and refused %d, and requests were decided under %d",
				s.Successes, s.Failures, versionsSeen())
			break
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
		}
	}
	close(stop)
	clients.Wait()
	writer.Wait()
	s := w.Status()
	t.Logf("%d requests in %v; %d versions applied, %d refused; %d versions decided requests",
		requests.Load(), time.Since(begin).Round(time.Millisecond), s.Successes, s.Failures, len(seen))
	if failures.Load() > 0 {
		t.Fatalf("%d of %d requests were not decided under exactly one good version", failures.Load(), requests.Load())
	}

	// The last good version keeps serving through a bad file of each kind,
	// each refused by Reload, counted, and never serving.
	if err := w.Reload(); err != nil {
		t.Logf("the writer's last file: %v", err)
	}
	last := w.Status()
	if last.LastError != nil { // the writer's last file was bad: put a good one
		data, _ := fileKind(100_000)
		good.Store("v100000", int64(1_100_000))
		replace(t, path, data)
		if err := w.Reload(); err != nil {
			t.Fatal(err)
		}
		last = w.Status()
	}
	inForce := mw.Version()
	for _, i := range []int{100_001, 100_003, 100_004} { // an invalid limit, not JSON, refused by Update
		data, ok := fileKind(i)
		if ok {
			t.Fatalf("fileKind(%d) is good", i)
		}
		replace(t, path, data)
		if err := w.Reload(); err == nil {
			t.Errorf("Reload of bad file %s succeeded", data)
		}
	}
	// (The watcher may have refused a file before Reload did, and counted
	// it too; after the last Reload it sees the bytes it refused.)
	s = w.Status()
	if s.Version != last.Version || mw.Version() != inForce || s.Failures < last.Failures+3 {
		t.Errorf("after 3 bad files: %+v (before them %+v), version %s in force, want %s", s, last, mw.Version(), inForce)
	}
	for i := range 16 {
		if v, err := check(i%2 == 0); err != nil || v != inForce {
			t.Errorf("after the bad files a request was decided under %s (%v), want %s", v, err, inForce)
		}
	}

	// The counters agree with Status; the gauge names the version in
	// force.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var successes, failed int64
	var version string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					switch m.Name {
					case reload.MetricSuccesses:
						successes += p.Value
					case reload.MetricFailures:
						failed += p.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value("sluice.reload.version")
					version = v.AsString()
				}
			}
		}
	}
	if successes != s.Successes-1 || failed != s.Failures || version != s.Version {
		t.Errorf("metrics: %d successes, %d failures, version %q; Status %+v", successes, failed, version, s)
	}

	// Every concurrency slot taken, under whichever version, came back.
	lease, res, err := lim.Acquire(context.Background(), "all:c", inflight)
	if err != nil {
		t.Fatal(err)
	}
	if res.Remaining != 999 {
		t.Errorf("%d concurrency slots still held", 999-res.Remaining)
	}
	_ = lim.Release(context.Background(), lease)
}
