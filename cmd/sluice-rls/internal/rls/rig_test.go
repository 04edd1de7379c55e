package rls

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice-rls/internal/rlsconf"
	"github.com/sluice-go/sluice/internal/redisserver"
)

// start is the instant every test's virtual clock starts at: 10 s into a
// minute, hour and day (2030-01-01T00:00:10Z).
var start = time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)

// clock is a virtual clock the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: start} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// redisClient is a client of a fresh redis-server of the test's own.
func redisClient(t *testing.T) rueidis.Client {
	t.Helper()
	srv := redisserver.Start(t)
	return newClient(t, []string{srv.Addr}, false)
}

func newClient(t *testing.T, addrs []string, cluster bool) rueidis.Client {
	t.Helper()
	opt := rueidis.ClientOption{InitAddress: addrs, DisableCache: true}
	if !cluster {
		opt.ForceSingleClient = true
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// rig is a Service behind a real gRPC server on a loopback port, and a
// client of it, on a virtual clock.
type rig struct {
	t      *testing.T
	clock  *clock
	lim    *sluice.Limiter
	svc    *Service
	client rlsv3.RateLimitServiceClient
	reader *sdkmetric.ManualReader
}

// config builds a configuration of the given files (name → YAML).
func config(t *testing.T, files map[string]string) *rlsconf.Config {
	t.Helper()
	var fs []rlsconf.File
	for name, data := range files {
		fs = append(fs, rlsconf.File{Name: name, Data: []byte(data)})
	}
	c, err := rlsconf.Build(fs, rlsconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newRig serves cfg (nil: none yet) on client, with the clock given (nil:
// a new one) and opts adjusted by adjust; its Limiter has sluice-rls's
// defaults (no denial cache; a request's checks in one script call across
// hash slots, ignored on a cluster) unless limOpts say otherwise.
func newRig(t *testing.T, client rueidis.Client, clk *clock, cfg *rlsconf.Config, adjust func(*Options), limOpts ...sluice.Option) *rig {
	t.Helper()
	if clk == nil {
		clk = newClock()
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	lim, err := sluice.New(client, append([]sluice.Option{sluice.WithClock(clk.Now), sluice.WithTimeout(30 * time.Second), sluice.WithLogger(nil), sluice.WithDenialCache(0), sluice.WithCrossSlotScripts(true)}, limOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	o := Options{Limiter: lim, Clock: clk.Now, MeterProvider: mp}
	if adjust != nil {
		adjust(&o)
	}
	svc, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		if err := svc.Update(cfg); err != nil {
			t.Fatal(err)
		}
	}
	return &rig{t: t, clock: clk, lim: lim, svc: svc, client: serve(t, svc), reader: reader}
}

// serve serves svc on a loopback port and returns a client of it.
func serve(t *testing.T, svc *Service) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// request is a RateLimitRequest of domain with hits_addend hits, one
// descriptor per list of key, value pairs.
func request(domain string, hits uint32, descs ...[]string) *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, kv := range descs {
		d := &ratelimitv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		r.Descriptors = append(r.Descriptors, d)
	}
	return r
}

func d(kv ...string) []string { return kv }

func (r *rig) call(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	r.t.Helper()
	resp, err := r.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		r.t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// st is an expected status: code, limit (rpu per unit; rpu 0 and unit
// UNKNOWN: no current limit), remaining and, when reset > 0, the seconds
// until reset.
type st struct {
	code      rlsv3.RateLimitResponse_Code
	rpu       uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
	reset     int64
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT

	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
)

// want checks a response's overall code and statuses.
func want(t *testing.T, resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, sts ...st) {
	t.Helper()
	if resp.GetOverallCode() != overall {
		t.Errorf("overall %v, want %v (%v)", resp.GetOverallCode(), overall, resp)
	}
	if len(resp.GetStatuses()) != len(sts) {
		t.Fatalf("%d statuses, want %d: %v", len(resp.GetStatuses()), len(sts), resp)
	}
	for i, w := range sts {
		g := resp.GetStatuses()[i]
		if g.GetCode() != w.code || g.GetLimitRemaining() != w.remaining {
			t.Errorf("status %d: %v remaining %d, want %v remaining %d", i, g.GetCode(), g.GetLimitRemaining(), w.code, w.remaining)
		}
		cl := g.GetCurrentLimit()
		switch {
		case w.rpu == 0 && w.unit == 0 && cl != nil:
			t.Errorf("status %d: current limit %v, want none", i, cl)
		case (w.rpu != 0 || w.unit != 0) && (cl.GetRequestsPerUnit() != w.rpu || cl.GetUnit() != w.unit):
			t.Errorf("status %d: current limit %v, want %d per %v", i, cl, w.rpu, w.unit)
		}
		if w.reset > 0 && g.GetDurationUntilReset().GetSeconds() != w.reset {
			t.Errorf("status %d: duration_until_reset %v, want %ds", i, g.GetDurationUntilReset(), w.reset)
		}
	}
}

// counter sums metric name's points whose descriptor attribute is desc
// ("" for any).
func (r *rig) counter(name, desc string) int64 {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, _ := m.Data.(metricdata.Sum[int64])
			for _, p := range sum.DataPoints {
				if v, _ := p.Attributes.Value("descriptor"); desc == "" || v.AsString() == desc {
					n += p.Value
				}
			}
		}
	}
	return n
}

// writeConfig writes the files of a configuration directory.
func writeConfig(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
}
