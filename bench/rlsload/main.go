// Command rlsload compares sluice-rls with envoyproxy/ratelimit as Envoy
// uses them: ShouldRateLimit over gRPC, with 1 and with 3 descriptors per
// request, at 16 and 128 concurrent streams, both services on the same
// redis-server with the same configuration, on the same machine, each cell
// in rounds (-rounds, default 3) in which the two run back to back, in
// turn first. It prints a Markdown table of each service's median round:
// requests per second, p50 and p99 latency, requests admitted against what
// exact limits admit, and what the shared rule was charged against what
// the admitted requests spent, and the CPU time per request of the
// service, of redis-server and of the load generator itself (from /proc:
// Linux only); then the ratio of requests per second, sluice-rls's to
// envoyproxy/ratelimit's, in each round and its median.
//
//	go install github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36
//	go run ./bench/rlsload -envoy $(go env GOPATH)/bin/service_cmd
//
// The workload: 100,000 requests (-requests), each of client c_j for
// j = i/50 (every client sends 50 requests, one after another), a client
// allowed 40 an hour. With 3 descriptors each request also names one of 8
// routes (a million an hour each) and the tenant, allowed 90% of the
// requests an hour. Exact limits admit 40 of each client's 50; the tenant
// is charged what was admitted. A service that charges a refused
// request's other descriptors spends the tenant's quota on refused
// requests and, once it is gone, refuses clients that are within theirs.
//
// Its test (go test ./bench/rlsload, in CI) runs the same workload, smaller,
// against sluice-rls alone and checks what the table's last two columns
// report: exactly the admissions exact limits allow, and the tenant charged
// exactly those.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice/internal/redisserver"
)

const perClient, clientLimit = 50, 40

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlsload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	envoyBin := fs.String("envoy", "", "envoyproxy/ratelimit's service_cmd binary (required)")
	sluiceBin := fs.String("sluice", "", "a sluice-rls binary (default: built from this repository)")
	requests := fs.Int("requests", 100_000, "requests per run (a multiple of 50)")
	target := fs.String("target", "", "only load a service already running at this gRPC address (with the configuration rlsload writes), -descriptors per request at -streams")
	descs := fs.Int("descriptors", 1, "with -target: 1 or 3")
	streams := fs.Int("streams", 16, "with -target: concurrent streams")
	nRounds := fs.Int("rounds", 3, "rounds per cell, each service once in each, back to back; the table gives the median round")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *target != "" {
		r, err := load(*target, *descs, *streams, *requests, *requests*9/10)
		if err != nil {
			fmt.Fprintf(stderr, "rlsload: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%d descriptors, %d streams: %.0f requests/s, p50 %s, p99 %s, admitted %d, tenant charged %d\n",
			r.descs, r.streams, r.rps, ms(r.p50), ms(r.p99), r.admitted, r.charged)
		return 0
	}
	if *envoyBin == "" || *requests < perClient || *requests%perClient != 0 || *nRounds < 1 {
		fmt.Fprintln(stderr, "rlsload: -envoy is required, -requests a multiple of 50 and -rounds at least 1")
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "rlsload: %v\n", err)
		return 1
	}
	work, err := os.MkdirTemp("", "rls-bench-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(work)
	if *sluiceBin == "" {
		if *sluiceBin, err = buildSluice(work); err != nil {
			return fail(err)
		}
	}
	// envoyproxy/ratelimit reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config.
	cfgDir := filepath.Join(work, "runtime", "ratelimit", "config")
	tenantLimit := *requests * 9 / 10
	if err := writeConfig(cfgDir, tenantLimit); err != nil {
		return fail(err)
	}
	redis, err := redisserver.New()
	if err != nil {
		return fail(err)
	}
	defer redis.Stop()

	services := []struct {
		name  string
		start func(grpcPort, httpPort, debugPort int) *exec.Cmd
	}{
		{"envoyproxy/ratelimit", func(g, h, d int) *exec.Cmd {
			cmd := exec.Command(*envoyBin)
			cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+filepath.Join(work, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit",
				"RUNTIME_WATCH_ROOT=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis.Addr, "USE_STATSD=false",
				"LOG_LEVEL=error", "GRPC_PORT="+strconv.Itoa(g), "PORT="+strconv.Itoa(h), "DEBUG_PORT="+strconv.Itoa(d))
			return cmd
		}},
		{"sluice-rls", func(g, h, _ int) *exec.Cmd { return sluiceCmd(*sluiceBin, cfgDir, redis.Addr, g, h) }},
	}
	// Both services run throughout; each cell is measured in rounds, the
	// two services back to back in each round (in turn first), so a
	// change in the machine's speed during the run touches both alike.
	type running struct {
		name   string
		cmd    *exec.Cmd
		target string
		logs   *bytes.Buffer
	}
	var svcs []running
	defer func() {
		for _, r := range svcs {
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
		}
	}()
	for _, svc := range services {
		cmd, target, logs, err := start(svc.name, svc.start)
		if err != nil {
			return fail(err)
		}
		svcs = append(svcs, running{svc.name, cmd, target, logs})
	}
	fmt.Fprintf(stdout, "| descriptors | streams | service | requests/s | p50 | p99 | service CPU/request | Redis CPU/request | load generator CPU/request | admitted (exact: %d) | tenant charged (exact: admitted) |\n|---|---|---|---|---|---|---|---|---|---|---|\n", *requests/perClient*clientLimit)
	var ratios []string
	for _, descs := range []int{1, 3} {
		for _, streams := range []int{16, 128} {
			per := make([][]result, len(svcs)) // per service, one result per round
			var ratio []float64                // sluice-rls ÷ envoyproxy/ratelimit, per round
			for round := range *nRounds {
				for k := range svcs {
					i := (k + round) % len(svcs)
					svc := svcs[i]
					var r result
					err := inOneHour(func() error {
						if _, err := redis.Command("FLUSHALL"); err != nil {
							return err
						}
						svcCPU, redisCPU, ownCPU := cpuTime(svc.cmd.Process.Pid), cpuTime(redis.PID()), cpuTime(os.Getpid())
						var err error
						if r, err = load(svc.target, descs, streams, *requests, tenantLimit); err != nil {
							return fmt.Errorf("%s: %w\n%s", svc.name, err, svc.logs.String())
						}
						r.svcCPU = (cpuTime(svc.cmd.Process.Pid) - svcCPU) / time.Duration(*requests)
						r.redisCPU = (cpuTime(redis.PID()) - redisCPU) / time.Duration(*requests)
						r.ownCPU = (cpuTime(os.Getpid()) - ownCPU) / time.Duration(*requests)
						return nil
					})
					if err != nil {
						return fail(err)
					}
					r.service = svc.name
					per[i] = append(per[i], r)
				}
				ratio = append(ratio, per[1][round].rps/per[0][round].rps)
			}
			for i := range svcs {
				r := median(per[i])
				charged := "-"
				if r.descs == 3 {
					charged = strconv.Itoa(r.charged)
				}
				fmt.Fprintf(stdout, "| %d | %d | %s | %.0f | %s | %s | %.0f µs | %.0f µs | %.0f µs | %d | %s |\n", r.descs, r.streams, r.service, r.rps,
					ms(r.p50), ms(r.p99), µs(r.svcCPU), µs(r.redisCPU), µs(r.ownCPU), r.admitted, charged)
			}
			each := make([]string, len(ratio))
			for i, x := range ratio {
				each[i] = fmt.Sprintf("%.2f×", x)
			}
			sorted := slices.Clone(ratio)
			slices.Sort(sorted)
			e, sl := median(per[0]), median(per[1])
			ratios = append(ratios, fmt.Sprintf("| %d | %d | %.2f× | %s | %s vs %s |", descs, streams, sorted[len(sorted)/2], strings.Join(each, ", "), ms(sl.p99), ms(e.p99)))
		}
	}
	fmt.Fprintf(stdout, "\n| descriptors | streams | sluice-rls ÷ envoyproxy/ratelimit, requests/s (median) | each round | p99, sluice-rls vs envoyproxy/ratelimit |\n|---|---|---|---|---|\n")
	for _, r := range ratios {
		fmt.Fprintln(stdout, r)
	}
	return 0
}

// median is the round of rs with the median requests/s.
func median(rs []result) result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b result) int { return int(a.rps - b.rps) })
	return s[len(s)/2]
}

type result struct {
	service                    string
	descs, streams             int
	rps                        float64
	p50, p99                   time.Duration
	admitted, refused, charged int
	svcCPU, redisCPU, ownCPU   time.Duration // CPU time per request (ownCPU: the load generator's)
}

// cpuTime is the CPU time process pid has used (user and system), read
// from /proc (Linux); 0 when it cannot be read.
func cpuTime(pid int) time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command's name, which is in parentheses.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

func µs(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// load sends requests at streams concurrent calls and measures them; with
// 3 descriptors it then asks what the tenant was charged.
func load(target string, descs, streams, requests, tenantLimit int) (result, error) {
	conns := make([]*grpc.ClientConn, (streams+15)/16)
	for i := range conns {
		c, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return result{}, err
		}
		defer c.Close()
		conns[i] = c
	}
	clients := make([]rlsv3.RateLimitServiceClient, len(conns))
	for i, c := range conns {
		clients[i] = rlsv3.NewRateLimitServiceClient(c)
	}
	// Warm up the connections and the services' pools, then start afresh.
	for i := range 200 {
		if _, err := clients[i%len(clients)].ShouldRateLimit(context.Background(), benchRequest(-1-i, descs)); err != nil {
			return result{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	lat := make([]time.Duration, requests)
	var next, admitted, refused atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	began := time.Now()
	for w := range streams {
		client := clients[w%len(clients)]
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= requests {
					return
				}
				req := benchRequest(i, descs)
				t0 := time.Now()
				resp, err := client.ShouldRateLimit(context.Background(), req)
				lat[i] = time.Since(t0)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					admitted.Add(1)
				} else {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	if firstErr != nil {
		return result{}, firstErr
	}
	slices.Sort(lat)
	r := result{descs: descs, streams: streams, rps: float64(requests) / elapsed.Seconds(),
		p50: lat[requests/2], p99: lat[requests*99/100], admitted: int(admitted.Load()), refused: int(refused.Load())}
	if descs == 3 {
		probe := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t"}},
			HitsAddend: wrapperspb.UInt64(0),
		}}}
		resp, err := clients[0].ShouldRateLimit(context.Background(), probe)
		if err != nil {
			return r, fmt.Errorf("probe: %w", err)
		}
		r.charged = tenantLimit - int(resp.GetStatuses()[0].GetLimitRemaining())
		// Warm-up requests were charged before the flush: none remain.
	}
	return r, nil
}

// benchRequest is request i: client i/50 (negative i: warm-up clients of
// their own), and with 3 descriptors a route and the tenant.
func benchRequest(i, descs int) *rlsv3.RateLimitRequest {
	client := "w" + strconv.Itoa(-i)
	if i >= 0 {
		client = "c" + strconv.Itoa(i/perClient)
	}
	entry := func(k, v string) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{entry("client", client)}}
	if descs == 3 {
		tenant := "t"
		if i < 0 {
			tenant = "warm-up"
		}
		req.Descriptors = append(req.Descriptors, entry("route", "/r"+strconv.Itoa(max(i, 0)%8)), entry("tenant", tenant))
	}
	return req
}

// inOneHour runs f, and again when it ran across the top of an hour: the
// workload's limits are per hour, aligned to the hour, so such a run starts
// every count again midway and its admissions are not comparable.
func inOneHour(f func() error) error {
	for {
		hour := time.Now().Truncate(time.Hour)
		if err := f(); err != nil || time.Now().Truncate(time.Hour).Equal(hour) {
			return err
		}
	}
}

// buildSluice builds sluice-rls from this repository into dir.
func buildSluice(dir string) (string, error) {
	bin := filepath.Join(dir, "sluice-rls")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/sluice-go/sluice/cmd/sluice-rls").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building sluice-rls: %v\n%s", err, out)
	}
	return bin, nil
}

// writeConfig writes the workload's configuration into dir: a client
// allowed clientLimit an hour, 8 routes, the tenant allowed tenantLimit.
func writeConfig(dir string, tenantLimit int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`domain: bench
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: %d}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 1000000}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: %d}
`, clientLimit, tenantLimit)
	return os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(cfg), 0o644)
}

// sluiceCmd runs sluice-rls on the configuration in cfgDir and the
// redis-server at redisAddr, serving gRPC and HTTP on loopback ports.
func sluiceCmd(bin, cfgDir, redisAddr string, grpcPort, httpPort int) *exec.Cmd {
	return exec.Command(bin, "-config", cfgDir, "-redis", "redis://"+redisAddr, "-log-level", "error",
		"-grpc", "127.0.0.1:"+strconv.Itoa(grpcPort), "-http", "127.0.0.1:"+strconv.Itoa(httpPort))
}

// start starts a service on three free ports (gRPC, HTTP, debug) and waits
// for its /healthcheck; it returns the process (to kill), its gRPC address
// and what it logs. A service that does not become healthy is killed.
func start(name string, cmdOn func(grpcPort, httpPort, debugPort int) *exec.Cmd) (*exec.Cmd, string, *bytes.Buffer, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, "", nil, err
	}
	cmd := cmdOn(ports[0], ports[1], ports[2])
	logs := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return nil, "", nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := waitHealthy(ports[1]); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait() // then nothing writes logs any more
		return nil, "", nil, fmt.Errorf("%s did not become healthy: %w\n%s", name, err, logs.String())
	}
	return cmd, "127.0.0.1:" + strconv.Itoa(ports[0]), logs, nil
}

func waitHealthy(port int) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("no 200 from /healthcheck within a minute")
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
