package bench_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	server "github.com/sluice-go/sluice/internal/redisserver"
)

// errDegraded marks a decision that came from sluice's failure policy
// (Redis was not asked): the load driver counts it apart, never as a
// decision made by Redis.
var errDegraded = errors.New("degraded decision")

// sample is one measured run of one cell: G goroutines calling one
// contender for a fixed time.
type sample struct {
	decisions int64 // decided by Redis (or by sluice's denial cache)
	allowed   int64
	degraded  int64 // answered by the failure policy: not counted as decisions
	timeouts  int64 // calls that hit the Limiter's deadline with no fallback (a lease release)
	errors    int64
	firstErr  error
	wall      time.Duration
	redisCPU  time.Duration // redis-server's user+system CPU during the run (/proc/PID/stat)
	clientCPU time.Duration // this process's (or redis-benchmark's) user+system CPU
	scriptUs  float64       // INFO commandstats: µs per EVALSHA/EVAL call, 0 if none
	scripts   int64         // EVALSHA/EVAL calls
	mallocs   uint64        // heap allocations in this process
	p50, p99  time.Duration // per-call latency
}

// rate is decisions per second of wall time.
func (s sample) rate() float64 {
	if s.wall <= 0 {
		return 0
	}
	return float64(s.decisions) / s.wall.Seconds()
}

// per divides a duration by the decisions, in µs.
func (s sample) per(d time.Duration) float64 {
	if s.decisions == 0 {
		return 0
	}
	return float64(d) / float64(time.Microsecond) / float64(s.decisions)
}

// histogram counts latencies in log-linear buckets: 16 per power of two,
// so a percentile is known within about 4 %.
type histogram struct {
	n      int64
	counts [64 * 16]int64
}

func bucketOf(ns int64) int {
	if ns < 16 {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 1 // 2^e <= ns < 2^(e+1)
	m := (ns >> (e - 4)) & 15       // the next 4 bits
	return e*16 + int(m)
}

// bucketValue is the midpoint of bucket b in ns.
func bucketValue(b int) float64 {
	if b < 16 {
		return float64(b)
	}
	e, m := b/16, b%16
	lo := float64(int64(1)<<e) * (1 + float64(m)/16)
	return lo * (1 + 1.0/32)
}

func (h *histogram) add(d time.Duration) {
	h.counts[bucketOf(int64(d))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	h.n += o.n
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// quantile returns the q-quantile (0 < q < 1) of the recorded latencies.
func (h *histogram) quantile(q float64) time.Duration {
	if h == nil || h.n == 0 {
		return 0
	}
	rank := int64(q * float64(h.n))
	var seen int64
	for b, c := range h.counts {
		seen += c
		if seen > rank {
			return time.Duration(bucketValue(b))
		}
	}
	return time.Duration(bucketValue(len(h.counts) - 1))
}

// driver runs load against one redis-server and measures what it costs.
type driver struct {
	srv      *server.Server
	redisPID int
}

func newDriver(srv *server.Server) (*driver, error) {
	info, err := srv.Command("INFO", "server")
	if err != nil {
		return nil, err
	}
	pid, err := strconv.Atoi(infoField(info, "process_id"))
	if err != nil {
		return nil, fmt.Errorf("redis-server process_id: %w", err)
	}
	return &driver{srv: srv, redisPID: pid}, nil
}

// infoField returns one field of an INFO reply.
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// clockTick is USER_HZ, the unit of /proc/PID/stat CPU times; 100 on
// every Linux this runs on.
const clockTick = 10 * time.Millisecond

// procCPU returns the user+system CPU time of process pid so far.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count fields from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	st, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * clockTick, nil
}

// selfCPU returns this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scriptStats returns the EVALSHA and EVAL calls and their total µs from
// INFO commandstats.
func (d *driver) scriptStats() (calls int64, usec float64, err error) {
	info, err := d.srv.Command("INFO", "commandstats")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				n, _ := strconv.ParseInt(v, 10, 64)
				calls += n
			case "usec":
				u, _ := strconv.ParseFloat(v, 64)
				usec += u
			}
		}
	}
	return calls, usec, nil
}

// counters is what one measured run reads before and after.
type counters struct {
	redisCPU, selfCPU time.Duration
	mallocs           uint64
	scripts           int64
	scriptUsec        float64
}

func (d *driver) read() (counters, error) {
	var c counters
	var err error
	if c.redisCPU, err = procCPU(d.redisPID); err != nil {
		return c, err
	}
	if c.scripts, c.scriptUsec, err = d.scriptStats(); err != nil {
		return c, err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	c.mallocs = ms.Mallocs
	c.selfCPU = selfCPU()
	return c, nil
}

// fill sets s's cost fields from the counters before and after a run.
func (s *sample) fill(before, after counters) {
	s.redisCPU = after.redisCPU - before.redisCPU
	s.clientCPU = after.selfCPU - before.selfCPU
	s.mallocs = after.mallocs - before.mallocs
	s.scripts = after.scripts - before.scripts
	if s.scripts > 0 {
		s.scriptUs = (after.scriptUsec - before.scriptUsec) / float64(s.scripts)
	}
}

// measure runs fn from g goroutines over keys for warm (not measured),
// then for dur (measured), and reads the costs around the measured part.
func (d *driver) measure(fn decide, g int, keys []string, warm, dur time.Duration) (sample, error) {
	if warm > 0 {
		drive(fn, g, keys, warm)
	}
	runtime.GC()
	before, err := d.read()
	if err != nil {
		return sample{}, err
	}
	s := drive(fn, g, keys, dur)
	after, err := d.read()
	if err != nil {
		return sample{}, err
	}
	s.fill(before, after)
	return s, nil
}

// drive calls fn from g goroutines, each walking keys from its own
// starting point, until dur has passed, and counts what came back.
func drive(fn decide, g int, keys []string, dur time.Duration) sample {
	ctx := context.Background()
	var stop atomic.Bool
	var mu sync.Mutex
	var total sample
	lat := &histogram{}
	var wg sync.WaitGroup
	start := time.Now()
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s sample
			h := &histogram{}
			i := w * len(keys) / g
			for !stop.Load() {
				t0 := time.Now()
				ok, err := fn(ctx, keys[i%len(keys)])
				h.add(time.Since(t0))
				i++
				switch {
				case errors.Is(err, errDegraded):
					s.degraded++
				case errors.Is(err, context.DeadlineExceeded):
					s.timeouts++
				case err != nil:
					s.errors++
					if s.firstErr == nil {
						s.firstErr = err
					}
				default:
					s.decisions++
					if ok {
						s.allowed++
					}
				}
			}
			mu.Lock()
			total.decisions += s.decisions
			total.allowed += s.allowed
			total.degraded += s.degraded
			total.timeouts += s.timeouts
			total.errors += s.errors
			if total.firstErr == nil {
				total.firstErr = s.firstErr
			}
			lat.merge(h)
			mu.Unlock()
		}()
	}
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	total.wall = time.Since(start)
	total.p50, total.p99 = lat.quantile(0.50), lat.quantile(0.99)
	return total
}

// median returns the median of xs (the mean of the middle two for an
// even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
