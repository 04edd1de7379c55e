package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
)

// Config is one run of the study.
type Config struct {
	Limit  int64         // L: requests per period
	Period time.Duration // P
	Burst  int64         // B: token bucket capacity and GCRA burst
	Seed   uint64        // seed of the random traffic of scenario c
	Quick  bool          // scenario c over 1 simulated hour instead of 10
}

// DefaultConfig is the configuration the documentation reports: 100
// requests per minute, burst 100.
func DefaultConfig() Config {
	return Config{Limit: 100, Period: time.Minute, Burst: 100, Seed: 1}
}

// origin is the simulated clock's starting point, a multiple of every
// period used here (1_700_000_040 s = 28_333_334 minutes), so windows are
// aligned with it.
const origin = int64(1_700_000_040) * 1_000_000

// Scenario is one stream of requests of cost 1 for one identity.
type Scenario struct {
	Key   string  // a, b, c
	Title string  // one line
	Times []int64 // request times, µs since the Unix epoch, non-decreasing
	// Boundary is a window boundary the scenario is built around (µs), or 0.
	Boundary int64
}

// Algo is one algorithm under study.
type Algo struct {
	Name  string // as printed
	Limit sluice.Limit
}

// Algos returns the five rate algorithms for cfg, in the order printed.
func Algos(cfg Config) ([]Algo, error) {
	type ctor struct {
		name string
		mk   func() (sluice.Limit, error)
	}
	ctors := []ctor{
		{"fixed window", func() (sluice.Limit, error) { return sluice.FixedWindow(cfg.Limit, cfg.Period) }},
		{"sliding log", func() (sluice.Limit, error) { return sluice.SlidingLog(cfg.Limit, cfg.Period) }},
		{"sliding window counter", func() (sluice.Limit, error) { return sluice.SlidingWindow(cfg.Limit, cfg.Period) }},
		{"token bucket", func() (sluice.Limit, error) { return sluice.TokenBucket(cfg.Limit, cfg.Period, cfg.Burst) }},
		{"GCRA", func() (sluice.Limit, error) { return sluice.GCRA(cfg.Limit, cfg.Period, cfg.Burst) }},
	}
	out := make([]Algo, 0, len(ctors))
	for _, c := range ctors {
		l, err := c.mk()
		if err != nil {
			return nil, fmt.Errorf("accuracy: %s: %w", c.name, err)
		}
		out = append(out, Algo{Name: c.name, Limit: l})
	}
	return out, nil
}

// Scenarios builds the three traffic patterns for cfg.
func Scenarios(cfg Config) []Scenario {
	p := cfg.Period.Microseconds()
	l := cfg.Limit

	// (a) L requests in the last second before a boundary, L in the first
	// second after it, evenly spaced.
	boundary := origin + p
	var a []int64
	step := int64(1_000_000) / l
	for i := range l {
		a = append(a, boundary-1_000_000+i*step)
	}
	for i := range l {
		a = append(a, boundary+i*step)
	}

	// (b) steady traffic at 3L per P for 10 periods, starting half-way into
	// a window so that boundaries fall inside the run.
	var b []int64
	start := origin + p/2
	n := 3 * l * 10
	for i := range n {
		b = append(b, start+i*p/(3*l))
	}

	// (d) the sliding window counter's worst case: L requests in the second
	// before a boundary, then steady traffic at 3L per P for one period.
	// The counter assumes the previous window's requests were spread
	// evenly over it; here they all sit at its end, so they are
	// under-weighted as the new window advances while still being in the
	// trailing period.
	var d []int64
	for i := range l {
		d = append(d, boundary-1_000_000+i*step)
	}
	for i := int64(0); i*p/(3*l) < p-1_000_000; i++ { // all within one P
		d = append(d, boundary+i*p/(3*l))
	}

	return []Scenario{
		{Key: "a", Title: fmt.Sprintf("%d requests in the second before a window boundary and %d in the second after", l, l), Times: a, Boundary: boundary},
		{Key: "b", Title: fmt.Sprintf("steady traffic at 3×L (%d per %s) for 10 periods", 3*l, seconds(cfg.Period)), Times: b},
		poisson(cfg),
		{Key: "d", Title: fmt.Sprintf("%d requests in the second before a window boundary, then 3×L per P until 1 s before the next boundary", l), Times: d, Boundary: boundary},
	}
}

// poisson is scenario c: Poisson traffic at 0.9 L/P with bursts. Bursts
// start as a Poisson process with a mean gap of 10 P; each sends a uniform
// 0.5L to 3L requests spread uniformly over 1 s to P/2.
func poisson(cfg Config) Scenario {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed_c0de))
	p := cfg.Period.Microseconds()
	dur := 10 * int64(time.Hour/time.Microsecond)
	if cfg.Quick {
		dur = int64(time.Hour / time.Microsecond)
	}
	start := origin + p/3
	meanGap := float64(p) / (0.9 * float64(cfg.Limit)) // µs between base requests
	var ts []int64
	for t := rng.ExpFloat64() * meanGap; t < float64(dur); t += rng.ExpFloat64() * meanGap {
		ts = append(ts, start+int64(t))
	}
	bursts := 0
	for t := rng.ExpFloat64() * float64(10*p); t < float64(dur); t += rng.ExpFloat64() * float64(10*p) {
		bursts++
		size := cfg.Limit/2 + rng.Int64N(3*cfg.Limit-cfg.Limit/2+1)
		spread := 1_000_000 + rng.Int64N(max(1, p/2-1_000_000+1))
		for range size {
			if at := int64(t) + rng.Int64N(spread); at < dur {
				ts = append(ts, start+at)
			}
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	hours := dur / int64(time.Hour/time.Microsecond)
	return Scenario{
		Key: "c",
		Title: fmt.Sprintf("Poisson traffic at 0.9×L with %d bursts of 0.5L to 3L requests, %d h, seed %d",
			bursts, hours, cfg.Seed),
		Times: ts,
	}
}

// Exact runs the reference: an exact sliding log in plain Go. A request at
// t is allowed iff fewer than limit requests were allowed in (t-P, t].
func Exact(limit int64, period time.Duration, times []int64) []bool {
	p := period.Microseconds()
	out := make([]bool, len(times))
	var log []int64 // allowed times still in the window, oldest first
	head := 0
	for i, t := range times {
		for head < len(log) && log[head] <= t-p {
			head++
		}
		if int64(len(log)-head) < limit {
			out[i] = true
			log = append(log, t)
		}
		if head > 4096 && head > len(log)/2 { // compact
			log = append(log[:0], log[head:]...)
			head = 0
		}
	}
	return out
}

// Sim is a sluice.Limiter on its own embedded miniredis, driven by a
// simulated clock: Set moves both the limiter's clock (the now argument of
// every script) and the server's TIME and TTLs. Nothing sleeps.
type Sim struct {
	Limiter *sluice.Limiter
	m       *miniredis.Miniredis
	client  rueidis.Client
	now     time.Time
}

// NewSim starts a Sim whose clock reads start (µs since the Unix epoch).
func NewSim(start int64) (*Sim, error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("accuracy: start miniredis: %w", err)
	}
	s := &Sim{m: m, now: time.UnixMicro(start)}
	m.SetTime(s.now)
	m.ClockTTL(true)
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true,
	})
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("accuracy: connect to miniredis: %w", err)
	}
	s.client = client
	s.Limiter, err = sluice.New(client,
		sluice.WithClock(func() time.Time { return s.now }),
		sluice.WithTimeout(0),    // a slow machine must not turn into degraded decisions
		sluice.WithBreaker(0, 0), // every decision asks Redis
		sluice.WithFailurePolicy(sluice.FailClosed))
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("accuracy: %w", err)
	}
	return s, nil
}

// Set moves the simulated clock to t (µs since the Unix epoch).
func (s *Sim) Set(t int64) {
	s.now = time.UnixMicro(t)
	s.m.SetTime(s.now)
}

// Now is the simulated clock in µs since the Unix epoch.
func (s *Sim) Now() int64 { return s.now.UnixMicro() }

// AllowN asks the limiter at the simulated time and fails when the answer
// did not come from Redis.
func (s *Sim) AllowN(ctx context.Context, lim sluice.Limit, cost int64) (sluice.Result, error) {
	r, err := s.Limiter.AllowN(ctx, "sim", lim, cost)
	if err != nil {
		return r, fmt.Errorf("accuracy: %s at %d: %w", lim.Name, s.Now(), err)
	}
	if r.Degraded {
		return r, fmt.Errorf("accuracy: %s at %d: Redis did not answer; the decision came from the failure policy", lim.Name, s.Now())
	}
	return r, nil
}

// Close stops the client and the server.
func (s *Sim) Close() {
	s.client.Close()
	s.m.Close()
}

// Run sends every request of times, at cost 1, through lim on a fresh Sim
// and returns the decisions.
func Run(ctx context.Context, lim sluice.Limit, times []int64) ([]bool, error) {
	if len(times) == 0 {
		return nil, nil
	}
	s, err := NewSim(times[0])
	if err != nil {
		return nil, err
	}
	defer s.Close()
	out := make([]bool, len(times))
	for i, t := range times {
		s.Set(t)
		r, err := s.AllowN(ctx, lim, 1)
		if err != nil {
			return nil, err
		}
		out[i] = r.Allowed
	}
	return out, nil
}

// Outcome is what one algorithm decided in one scenario.
type Outcome struct {
	Algo    string
	Allowed []bool
}

// RunAll runs every algorithm on every scenario, in parallel, and the exact
// reference; outcomes[s][0] is the reference of scenario s, then one per
// algorithm in order.
func RunAll(ctx context.Context, cfg Config, scens []Scenario, algos []Algo) ([][]Outcome, error) {
	out := make([][]Outcome, len(scens))
	type job struct{ s, a int }
	jobs := make(chan job)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for i, sc := range scens {
		out[i] = make([]Outcome, len(algos)+1)
		out[i][0] = Outcome{Algo: "exact sliding log", Allowed: Exact(cfg.Limit, cfg.Period, sc.Times)}
	}
	workers := 4
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				res, err := Run(ctx, algos[j.a].Limit, scens[j.s].Times)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				out[j.s][j.a+1] = Outcome{Algo: algos[j.a].Name, Allowed: res}
				mu.Unlock()
			}
		}()
	}
	// Longest first, so the slow scenario does not start last.
	for s := len(scens) - 1; s >= 0; s-- {
		for a := range algos {
			jobs <- job{s, a}
		}
	}
	close(jobs)
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}

// seconds prints a duration of whole seconds as "60 s", others as Go does.
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}
