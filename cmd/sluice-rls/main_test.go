package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-go/sluice/admin"
	"github.com/sluice-go/sluice/internal/redisserver"
)

// syncBuffer collects a command's output written from its goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// started is a running sluice-rls.
type started struct {
	grpc, http string
	stdout     *syncBuffer
	stderr     *syncBuffer
	stop       context.CancelFunc
	code       chan int
	hup        chan os.Signal
}

// startRLS runs the command with args on loopback ports of its own.
func startRLS(t *testing.T, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{stdout: &syncBuffer{}, stderr: &syncBuffer{}, stop: cancel, code: make(chan int, 1), hup: make(chan os.Signal)}
	listening := make(chan struct{})
	go func() {
		s.code <- run(ctx, append([]string{"-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0"}, args...), s.stdout, s.stderr, s.hup, func(o *options) {
			o.onListen = func(g, h string) {
				s.grpc, s.http = g, h
				close(listening)
			}
		})
	}()
	select {
	case <-listening:
	case c := <-s.code:
		t.Fatalf("sluice-rls exited %d before listening:\n%s", c, s.stderr)
	case <-time.After(time.Minute):
		t.Fatal("sluice-rls did not start")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.code:
		case <-time.After(time.Minute):
			t.Error("sluice-rls did not stop")
		}
	})
	return s
}

func (s *started) exit(t *testing.T) int {
	t.Helper()
	s.stop()
	select {
	case c := <-s.code:
		s.code <- c // for Cleanup
		return c
	case <-time.After(time.Minute):
		t.Fatal("sluice-rls did not stop")
	}
	return -1
}

func (s *started) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.http + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (s *started) postJSON(t *testing.T, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+s.http+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (s *started) conn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestDefaultStart: with no flags the command serves the sample
// configuration on an embedded miniredis: gRPC, health, /json,
// /healthcheck and /metrics; SIGINT stops it gracefully.
func TestDefaultStart(t *testing.T) {
	s := startRLS(t)
	if out := s.stdout.String(); !strings.Contains(out, "embedded miniredis") || !strings.Contains(out, "domains: edge") ||
		!strings.Contains(out, "overrides: from Redis, a local copy refreshed every second") {
		t.Errorf("banner:\n%s", out)
	}
	if code, body := s.get(t, "/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q", code, body)
	}
	conn := s.conn(t)
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health: %v, %v", h, err)
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.9"}}},
	}}
	for i := range 11 {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		want := rlsv3.RateLimitResponse_OK
		if i == 10 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if resp.GetOverallCode() != want {
			// A minute's window may have turned between two requests.
			if i == 10 && resp.GetStatuses()[0].GetLimitRemaining() == 9 {
				continue
			}
			t.Fatalf("request %d: %v, want %v", i+1, resp, want)
		}
	}
	// The same address through /json, on the same quota.
	code, body := s.postJSON(t, `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"203.0.113.9"}]}]}`)
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) {
		if !strings.Contains(body, `"limitRemaining":8`) { // the window turned
			t.Errorf("/json: %d %s", code, body)
		}
	}
	if code, body := s.postJSON(t, `{"domain":"edge","descriptors":[{"entries":[{"key":"plan","value":"premium"}]}]}`); code != 200 || !strings.Contains(body, `"limitRemaining":4294967295`) {
		t.Errorf("/json unlimited: %d %s", code, body)
	}
	if code, _ := s.postJSON(t, `{"domain":`); code != http.StatusBadRequest {
		t.Errorf("/json of bad JSON: %d, want 400", code)
	}
	if code, _ := s.postJSON(t, `{"domain":"edge"}`); code != http.StatusBadRequest {
		t.Errorf("/json without descriptors: %d, want 400", code)
	}
	_, metrics := s.get(t, "/metrics")
	for _, m := range []string{
		`ratelimit_service_rate_limit_total_hits{descriptor="remote_address",domain="edge"}`,
		`ratelimit_service_rate_limit_over_limit{descriptor="remote_address",domain="edge"}`,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"} 1`,
		`sluice_decisions`,
	} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	if code := s.exit(t); code != 0 {
		t.Errorf("exit code %d after SIGINT, want 0\n%s", code, s.stderr)
	}
	if !strings.Contains(s.stdout.String(), "sluice-rls: stopped") {
		t.Errorf("no graceful stop:\n%s", s.stdout)
	}
	if _, err := http.Get("http://" + s.http + "/healthcheck"); err == nil {
		t.Error("HTTP still served after the stop")
	}
}

// TestConfigDir serves a configuration directory on a redis-server: a
// file added is served after SIGHUP, a broken one is refused and the last
// good version keeps serving.
func TestConfigDir(t *testing.T) {
	srv := redisserver.Start(t)
	dir := t.TempDir()
	// Each file appears whole (written aside, then renamed; dot files are
	// not read), so the watcher never reads one half written.
	write := func(name, data string) {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	// An override set before the start: the rule's limit name and the
	// descriptor's identity, under -prefix.
	var out, errOut bytes.Buffer
	if code := admin.Run(context.Background(), []string{"override", "set", "-redis", "redis://" + srv.Addr, "-prefix", "rls",
		"-policy", "fixed_window", "-rate", "7", "rls/a/k=raised"}, &out, &errOut); code != 0 {
		t.Fatalf("sluice override set: %d\n%s%s", code, &out, &errOut)
	}
	s := startRLS(t, "-config", dir, "-redis", "redis://"+srv.Addr, "-headers", "legacy", "-prefix", "rls")
	if out := s.stdout.String(); !strings.Contains(out, "Redis at "+srv.Addr) || !strings.Contains(out, "domains: a") ||
		!strings.Contains(out, "overrides: from Redis, cached by the client") {
		t.Errorf("banner:\n%s", out)
	}
	if code, body := s.postJSON(t, `{"domain":"a","descriptors":[{"entries":[{"key":"k","value":"raised"}]}]}`); code != 200 ||
		!strings.Contains(body, `"requestsPerUnit":7`) || !strings.Contains(body, `"limitRemaining":6`) {
		t.Errorf("the raised descriptor: %d %s", code, body)
	}
	const reqB = `{"domain":"b","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	if _, body := s.postJSON(t, reqB); strings.Contains(body, "currentLimit") {
		t.Fatalf("domain b before its file: %s", body)
	}
	write("b.yaml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	s.hup <- os.Interrupt // the loop takes any signal on this channel as SIGHUP
	s.hup <- os.Interrupt // taken once the first reload is done
	if code, body := s.postJSON(t, reqB); code != 200 || !strings.Contains(body, `"limitRemaining":4`) || !strings.Contains(body, "X-RateLimit-Limit") {
		t.Errorf("domain b after SIGHUP: %d %s", code, body)
	}
	write("c.yaml", "domain: b\n")
	s.hup <- os.Interrupt
	s.hup <- os.Interrupt
	if code, body := s.postJSON(t, reqB); code != 200 || !strings.Contains(body, `"limitRemaining":3`) {
		t.Errorf("after a broken version: %d %s", code, body)
	}
	if !strings.Contains(s.stderr.String(), "duplicate domain 'b'") {
		t.Errorf("the refusal was not logged:\n%s", s.stderr)
	}
	_, metrics := s.get(t, "/metrics")
	// Two versions applied, each counted once however many reloads saw it.
	// A SIGHUP tries a refused version again and counts it again: the
	// first SIGHUP's refusal is in (the second was taken after it), the
	// second's may not be yet, and the watcher may have seen the broken
	// file too: one to three refusals.
	refusals := 0
	for n := 1; n <= 3; n++ {
		if strings.Contains(metrics, fmt.Sprintf("ratelimit_service_config_load_error %d\n", n)) {
			refusals = n
		}
	}
	if !strings.Contains(metrics, "ratelimit_service_config_load_success 2\n") || refusals == 0 {
		t.Errorf("/metrics: configuration loads not counted (want 2 applied, 1 to 3 refused):\n%s", metrics)
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-headers", "some"}, `headers "some": want draft, legacy, both or none`},
		{[]string{"-failure", "maybe"}, `-failure "maybe": want local, open or closed`},
		{[]string{"-failure", "open", "-replicas", "3"}, "-replicas is the size of -failure local's share"},
		{[]string{"-config", "/no/such/dir"}, `-config "/no/such/dir": want a directory`},
		{[]string{"-grpc", "8081"}, `-grpc "8081": want host:port`},
		{[]string{"-near-limit-ratio", "2"}, "-near-limit-ratio 2"},
		{[]string{"config"}, `unexpected argument "config"`},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), tc.args, io.Discard, &stderr, nil, nil); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"-redis", "redis://127.0.0.1:1", "-grpc", "127.0.0.1:0", "-http", "256.0.0.1:0"}, io.Discard, &stderr, nil, nil); code != 1 || !strings.Contains(stderr.String(), "cannot listen on 256.0.0.1:0") {
		t.Errorf("an address it cannot listen on: exit %d, %q", code, stderr.String())
	}
}

// TestOverridesOff: -overrides=false starts no Store, and says so.
func TestOverridesOff(t *testing.T) {
	s := startRLS(t, "-overrides=false")
	if out := s.stdout.String(); !strings.Contains(out, "overrides: off") {
		t.Errorf("banner:\n%s", out)
	}
}
