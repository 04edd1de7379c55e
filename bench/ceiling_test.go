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

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/yardstick"
	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
)

// bareGCRA is the least a GCRA decision can cost in Redis (TIME, GET,
// SET with PX; no checks, no exact fractions, replying 1 or 0), the
// script of the ceiling rows and of bare_script.
const bareGCRA = yardstick.CeilingGCRA

// The workload every throughput cell shares, as in the performance issue:
// 10,000 identities, each limited to 100 per second with a burst of 100,
// so every request is admitted at the rates this machine reaches.
const (
	workIdentities = 10_000
	workRate       = 100
	workBurst      = 100
)

// bareArgs are bareGCRA's ARGV for the shared workload.
var bareArgs = yardstick.CeilingArgs(int64(time.Second/time.Microsecond)/workRate, workBurst)

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

// evalshaGCRA is the call Limiter.Allow makes, made by hand: an EVALSHA of
// scripts/gcra.lua (EVAL on NOSCRIPT) on the key and with the arguments
// Allow sends for lim, on the same client, and nothing else (no breaker,
// no failure policy, no metrics). Allow ÷ this is the Limiter's own cost.
func evalshaGCRA(c rueidis.CoreClient, l *sluice.Limiter, lim sluice.Limit) decide {
	per := strconv.FormatInt(lim.Period.Microseconds(), 10)
	args := []string{strconv.FormatInt(lim.Rate, 10), per, strconv.FormatInt(lim.Burst, 10), "1", "", ""}
	return func(ctx context.Context, id string) (bool, error) {
		key := l.Key(id, lim)
		r := c.Do(ctx, c.B().Evalsha().Sha1(scripts.GCRA.SHA1).Numkeys(1).Key(key).Arg(args...).Build())
		if luart.IsNoScript(r) {
			r = c.Do(ctx, c.B().Eval().Script(scripts.GCRA.Source).Numkeys(1).Key(key).Arg(args...).Build())
		}
		v, err := r.AsIntSlice()
		if err != nil {
			return false, err
		}
		if len(v) != 4 {
			return false, fmt.Errorf("gcra replied %d values, want 4", len(v))
		}
		return v[0] == 1, nil
	}
}
