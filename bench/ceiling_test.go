package bench_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// bareGCRA is the least a GCRA decision can cost in Redis: TIME, GET the
// theoretical arrival time, SET it back with a TTL. No argument checks, no
// exact fractions, no reply beyond allowed (1) or denied (0). It is the
// yardstick, not a limiter anyone should ship.
//
// KEYS[1] holds the TAT in µs; ARGV[1] is the emission interval T in µs,
// ARGV[2] the tolerance burst×T in µs.
const bareGCRA = `local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local nt = tat + tonumber(ARGV[1])
if nt - now > tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], string.format('%d', nt), 'PX', math.floor((nt - now) / 1000) + 2)
return 1
`

// The workload every throughput cell shares, as in the performance issue:
// 10,000 identities, each limited to 100 per second with a burst of 100,
// so every request is admitted at the rates this machine reaches.
const (
	workIdentities = 10_000
	workRate       = 100
	workBurst      = 100
)

// bareArgs are bareGCRA's ARGV for the shared workload.
var bareArgs = []string{
	strconv.Itoa(int(time.Second/time.Microsecond) / workRate),
	strconv.Itoa(int(time.Second/time.Microsecond) / workRate * workBurst),
}

// bareScript runs bareGCRA through rueidis (EVALSHA, EVAL on NOSCRIPT).
func bareScript(c rueidis.Client) decide {
	s := rueidis.NewLuaScript(bareGCRA)
	return func(ctx context.Context, id string) (bool, error) {
		n, err := s.Exec(ctx, c, []string{"bare:{" + id + "}"}, bareArgs).AsInt64()
		return n == 1, err
	}
}

// ceiling runs redis-benchmark: n EVALSHA calls of bareGCRA over
// workIdentities random keys, from 50 connections, each with pipeline
// requests in flight. It is what Redis can do with this script when the
// client costs next to nothing.
func (d *driver) ceiling(sha string, pipeline, n int) (sample, error) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return sample{}, fmt.Errorf("redis-benchmark not found: %w", err)
	}
	args := []string{
		"-h", "127.0.0.1", "-p", strconv.Itoa(d.srv.Port),
		"-c", "50", "-P", strconv.Itoa(pipeline), "-n", strconv.Itoa(n),
		"-r", strconv.Itoa(workIdentities), "--csv",
		"EVALSHA", sha, "1", "bare:{__rand_int__}", bareArgs[0], bareArgs[1],
	}
	before, err := d.read()
	if err != nil {
		return sample{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	start := time.Now()
	out, err := cmd.Output()
	wall := time.Since(start)
	if err != nil {
		return sample{}, fmt.Errorf("redis-benchmark: %w: %s", err, out)
	}
	after, err := d.read()
	if err != nil {
		return sample{}, err
	}
	rps, p50, p99, err := parseBenchmarkCSV(out)
	if err != nil {
		return sample{}, err
	}
	s := sample{decisions: int64(n), allowed: int64(n)}
	s.fill(before, after)
	// redis-benchmark's own rate excludes its connection setup; wall is
	// derived from it so rate() reports that figure.
	s.wall = time.Duration(float64(n) / rps * float64(time.Second))
	if s.wall > wall {
		s.wall = wall
	}
	// The client is redis-benchmark, not this process.
	s.clientCPU, s.mallocs = 0, 0
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.clientCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s.p50, s.p99 = p50, p99
	s.allowed = s.decisions
	return s, nil
}

// parseBenchmarkCSV reads the requests per second and the p50 and p99
// latencies from redis-benchmark --csv output.
func parseBenchmarkCSV(out []byte) (rps float64, p50, p99 time.Duration, err error) {
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("redis-benchmark output: %w", err)
	}
	if len(recs) < 2 || len(recs[0]) < 7 || recs[0][1] != "rps" || recs[0][4] != "p50_latency_ms" || recs[0][6] != "p99_latency_ms" {
		return 0, 0, 0, fmt.Errorf("redis-benchmark output: unexpected %q", out)
	}
	row := recs[len(recs)-1]
	rps, err = strconv.ParseFloat(row[1], 64)
	if err != nil || rps <= 0 {
		return 0, 0, 0, fmt.Errorf("redis-benchmark rps %q: %v", row[1], err)
	}
	ms := func(s string) time.Duration {
		f, _ := strconv.ParseFloat(s, 64)
		return time.Duration(f * float64(time.Millisecond))
	}
	return rps, ms(row[4]), ms(row[6]), nil
}
