package bench_test

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	redisrate "github.com/go-redis/redis_rate/v10"
	"github.com/throttled/throttled/v2"
	ulule "github.com/ulule/limiter/v3"

	"github.com/sluice-go/sluice"
	server "github.com/sluice-go/sluice/internal/redisserver"
)

var (
	reportFlag = flag.Bool("report", false, "TestReport: run the full side-by-side comparison and rewrite docs/benchmarks.md and its plot (about 7 minutes)")
	roundsFlag = flag.Int("rounds", 3, "TestReport, TestGrowth, BenchmarkHandOff: interleaved rounds")
	sampleFlag = flag.Duration("sample", time.Second, "TestReport: measured time of one cell in one round")
	warmFlag   = flag.Duration("warm", 250*time.Millisecond, "TestReport: unmeasured warm-up before each cell")
	docsFlag   = flag.String("docs", "../docs", "where -report and -growth write benchmarks.md and img/")
	onlyFlag   = flag.String("only", "", "TestReport: measure only the cells whose group/name/goroutines match this regexp, print their table and write no docs")
)

// goroutines are the caller counts every throughput cell runs at.
var goroutines = []int{1, 16, 128, 512}

// cell is one thing measured in every round: a contender at a number of
// goroutines, or the redis-benchmark ceiling.
type cell struct {
	group string // throughput, algorithms, allow_all, denial
	name  string // the contender
	g     int    // goroutines (the ceiling: connections × pipeline)
	keys  []string
	fn    decide
	pipe  int  // > 0: redis-benchmark with -P pipe instead of fn
	deny  bool // every decision must be a denial (primed before each measurement); else an admission
	// primeWith primes a denial cell's identities in Redis, when fn might
	// not ask Redis (a denial cache); nil: fn.
	primeWith decide
}

func (c cell) id() string { return c.group + "/" + c.name + "/" + strconv.Itoa(c.g) }

// workIDs are the shared workload's identities.
var workIDs = func() []string {
	s := make([]string, workIdentities)
	for i := range s {
		s[i] = "user-" + strconv.Itoa(i)
	}
	return s
}()

// The shared workload's limit, in each library's terms.
var (
	workGCRA      = sluice.Must(sluice.GCRA(workRate, time.Second, workBurst))
	workRateLimit = redisrate.PerSecond(workRate)
	workThrottled = throttled.RateQuota{MaxRate: throttled.PerSec(workRate), MaxBurst: workBurst - 1}
	workUlule     = ulule.Rate{Period: time.Second, Limit: workRate}
	workLimits    = map[string]sluice.Limit{
		"fixed_window":   sluice.Must(sluice.FixedWindow(workRate, time.Second)),
		"sliding_log":    sluice.Must(sluice.SlidingLog(workRate, time.Second)),
		"sliding_window": sluice.Must(sluice.SlidingWindow(workRate, time.Second)),
		"token_bucket":   sluice.Must(sluice.TokenBucket(workRate, time.Second, workBurst)),
	}
	workConcurrency = sluice.Must(sluice.Concurrency(workRate, time.Minute))
	// sixteen limits on one identity, all admitting the workload: 100/s
	// to 115/s (AllowAll refuses two equal limits).
	sixteen = func() []sluice.Limit {
		out := make([]sluice.Limit, 16)
		for i := range out {
			out[i] = sluice.Must(sluice.GCRA(int64(workRate+i), time.Second, int64(workBurst+i)))
		}
		return out
	}()
	sixteenRate = func() []redisrate.Limit {
		out := make([]redisrate.Limit, 16)
		for i := range out {
			out[i] = redisrate.Limit{Rate: workRate + i, Period: time.Second, Burst: workBurst + i}
		}
		return out
	}()
)

// plan lists every cell of one round, in the order of the first round.
func plan(e *env, bare decide) []cell {
	var cells []cell
	add := func(group, name string, fn decide, gs []int, keys []string, deny bool) {
		for _, g := range gs {
			cells = append(cells, cell{group: group, name: name, g: g, keys: keys, fn: fn, deny: deny})
		}
	}
	add("throughput", "sluice", sluiceOne(e.sluice, workGCRA), goroutines, workIDs, false)
	add("throughput", "sluice_recommended", sluiceOne(e.sluiceD, workGCRA), goroutines, workIDs, false)
	add("throughput", "sluice_goredis", sluiceOne(e.sluiceGR, workGCRA), goroutines, workIDs, false)
	add("throughput", "sluice_goredis_ap", sluiceOne(e.sluiceGA, workGCRA), goroutines, workIDs, false)
	add("throughput", "redis_rate", redisRate(e.rate, "work", workRateLimit), goroutines, workIDs, false)
	add("throughput", "throttled", throttledGCRA(e.thStore, "work", workThrottled), goroutines, workIDs, false)
	add("throughput", "ulule", ululeFixed(e.ulStore, "work", workUlule), goroutines, workIDs, false)
	add("throughput", "bare_script", bare, goroutines, workIDs, false)
	add("throughput", "evalsha_gcra", evalshaGCRA(e.rueidis, e.sluice, workGCRA), goroutines, workIDs, false)
	add("throughput", "evalsha_gcra_recommended", evalshaGCRA(e.rueidisD, e.sluiceD, workGCRA), goroutines, workIDs, false)
	for _, name := range slices.Sorted(maps.Keys(e.variants)) {
		add("options", "sluice_"+name, sluiceOne(e.variants[name], workGCRA), []int{1, 128, 512}, workIDs, false)
	}
	cells = append(cells,
		cell{group: "throughput", name: "ceiling_P16", g: 50 * 16, pipe: 16},
		cell{group: "throughput", name: "ceiling_P64", g: 50 * 64, pipe: 64})
	for _, alg := range []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket"} {
		add("algorithms", alg, sluiceOne(e.sluice, workLimits[alg]), goroutines, workIDs, false)
	}
	add("algorithms", "concurrency", sluiceLease(e.sluice, workConcurrency), goroutines, workIDs, false)
	two := []int{1, 128}
	add("allow_all", "sluice_allowall16", sluiceAll(e.sluice, sixteen...), two, workIDs, false)
	add("allow_all", "sluice_16_allows", sluiceEach(e.sluice, sixteen...), two, workIDs, false)
	add("allow_all", "sluice_decide16", sluiceBatch(e.sluice, sixteen...), two, workIDs, false)
	add("allow_all", "redis_rate_16", redisRate(e.rate, "work16", sixteenRate...), two, workIDs, false)
	first := len(cells)
	add("denial", "sluice_cache", sluiceOne(e.sluice, gcraDeny), two, hot, true)
	for i := first; i < len(cells); i++ {
		cells[i].primeWith = sluiceOne(e.sluiceNC, gcraDeny) // the same keys, always asking Redis
	}
	add("denial", "sluice_nocache", sluiceOne(e.sluiceNC, gcraDeny), two, hot, true)
	add("denial", "redis_rate", redisRate(e.rate, "deny", rateDeny), two, hot, true)
	return cells
}

// runOrder groups cells into blocks measured back to back: the two cells
// of every target (and so every cell compared with either) share a block,
// in the order the targets name them; every other cell is a block of its
// own. Blocks keep the order of their first cell in the plan.
func runOrder(cells []cell) [][]cell {
	at := map[string]int{}
	for i, c := range cells {
		at[c.id()] = i
	}
	block := make([]int, len(cells)) // cell index → block id (its root cell)
	for i := range block {
		block[i] = i
	}
	root := func(i int) int {
		for block[i] != i {
			i = block[i]
		}
		return i
	}
	var walk []int // cells of targets, in the order the targets name them
	seen := map[int]bool{}
	for _, tg := range targets {
		a, okA := at[tg.num]
		b, okB := at[tg.den]
		if !okA || !okB {
			continue
		}
		ra, rb := root(a), root(b)
		block[max(ra, rb)] = min(ra, rb)
		for _, i := range []int{a, b} {
			if !seen[i] {
				seen[i] = true
				walk = append(walk, i)
			}
		}
	}
	members := map[int][]cell{}
	for _, i := range walk {
		members[root(i)] = append(members[root(i)], cells[i])
	}
	var out [][]cell
	for i, c := range cells {
		switch {
		case !seen[i]:
			out = append(out, []cell{c})
		case root(i) == i:
			out = append(out, members[i])
		}
	}
	return out
}

// run measures every cell in every round. Round r starts r×len/rounds
// blocks further into the list, so no contender always runs first or right
// after the same neighbour; drift on the shared machine reaches all alike.
// The cells of a block run back to back, in reverse order every other
// round, so the two cells of a target ratio are measured seconds apart,
// not a round apart, and neither always goes first.
func runRounds(t *testing.T, d *driver, cells []cell, sha string, rounds int, warm, dur time.Duration) (map[string][]sample, []string) {
	t.Helper()
	res := map[string][]sample{}
	var loads []string
	ceilingN := map[int]int{}
	blocks := runOrder(cells)
	for r := range rounds {
		loads = append(loads, loadavg())
		start := time.Now()
		var order []cell
		off := r * len(blocks) / rounds
		for i := range blocks {
			b := blocks[(off+i)%len(blocks)]
			for j := range b {
				if r%2 == 1 {
					j = len(b) - 1 - j
				}
				order = append(order, b[j])
			}
		}
		for _, c := range order {
			// Every cell starts on an empty server: the keys an earlier
			// cell left would expire during this one, and Redis' expiry
			// work would be charged to it. A denial cell primes its
			// identities again.
			if _, err := d.srv.Command("FLUSHALL"); err != nil {
				t.Fatalf("FLUSHALL before %s: %v", c.id(), err)
			}
			if c.deny {
				with := c.fn
				if c.primeWith != nil {
					with = c.primeWith
				}
				prime(t, with, c.keys)
			}
			var s sample
			var err error
			if c.pipe > 0 {
				n := ceilingN[c.pipe]
				if n == 0 {
					n = int(20_000 * dur.Seconds()) // first round: a guess; then about dur
				}
				s, err = d.ceiling(sha, c.pipe, n)
				if err == nil {
					ceilingN[c.pipe] = max(int(s.rate()*dur.Seconds()), 1000)
				}
			} else {
				s, err = d.measure(c.fn, c.g, c.keys, warm, dur)
			}
			if err != nil {
				t.Fatalf("%s: %v", c.id(), err)
			}
			res[c.id()] = append(res[c.id()], s)
		}
		t.Logf("round %d of %d: %d cells in %v, load average %s", r+1, rounds, len(cells), time.Since(start).Round(time.Second), loadavg())
	}
	loads = append(loads, loadavg())
	return res, loads
}

// loadavg is the 1, 5 and 15 minute load average.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// TestReport measures sluice beside its peers and the redis-benchmark
// ceiling on one private redis-server, every cell in each of -rounds
// interleaved rounds. Without -report it runs every cell briefly and
// checks only that each decided as expected (CI); with -report it prints
// the tables and rewrites docs/benchmarks.md and docs/img/bench-throughput.svg.
func TestReport(t *testing.T) {
	began := time.Now()
	full := *reportFlag
	rounds, warm, dur := *roundsFlag, *warmFlag, *sampleFlag
	if !full {
		rounds, warm, dur = 1, 0, 40*time.Millisecond
	}
	if full && *onlyFlag == "" {
		for _, bin := range []string{"wrk", "hey", "redis-benchmark"} {
			if _, err := exec.LookPath(bin); err != nil {
				t.Fatalf("-report needs %s (Debian: apt-get install wrk hey redis-tools): %v", bin, err)
			}
		}
	}
	srv := server.Start(t)
	// The short runs in CI check correctness only: a timeout no loaded
	// machine reaches keeps the failure policy out of them. The measured
	// runs keep the Limiter's defaults.
	var opts []sluice.Option
	if !full {
		opts = append(opts, sluice.WithTimeout(time.Minute))
	}
	e, err := newEnv(srv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	d, err := newDriver(srv)
	if err != nil {
		t.Fatal(err)
	}
	sha, err := srv.Command("SCRIPT", "LOAD", bareGCRA)
	if err != nil {
		t.Fatal(err)
	}
	cells := plan(e, bareScript(e.rueidis))
	if *onlyFlag != "" {
		re, err := regexp.Compile(*onlyFlag)
		if err != nil {
			t.Fatalf("-only: %v", err)
		}
		cells = slices.DeleteFunc(cells, func(c cell) bool { return !re.MatchString(c.id()) })
		if len(cells) == 0 {
			t.Fatalf("-only %q matches no cell", *onlyFlag)
		}
	}
	if !full {
		for i := range cells {
			cells[i].g = min(cells[i].g, 16) // a short correctness pass
		}
	}
	res, loads := runRounds(t, d, cells, sha, rounds, warm, dur)
	for _, c := range cells {
		for _, s := range res[c.id()] {
			checkSample(t, c, s)
		}
	}
	rep := newReport(cells, res, rounds)
	md := rep.markdown()
	svg := rep.throughputSVG()
	checkSVG(t, svg)
	if !full {
		return
	}
	if *onlyFlag != "" {
		fmt.Println(md)
		return
	}
	http := httpReport(t, e)
	meta := machine(loads, time.Since(began), rounds, warm, dur)
	fmt.Println(meta + "\n" + md + "\n" + http)
	writeGenerated(t, filepath.Join(*docsFlag, "benchmarks.md"), "report", meta+"\n"+md+"\n"+http)
	if err := os.WriteFile(filepath.Join(*docsFlag, "img", "bench-throughput.svg"), []byte(svg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkSample asserts what a cell must show whatever the machine's speed:
// decisions were made, none failed, and each admitted (or, for the denial
// cells, denied) as the limits say. Decisions the failure policy made
// under overload are counted apart and reported, not failed on.
func checkSample(t *testing.T, c cell, s sample) {
	t.Helper()
	if s.errors > 0 {
		t.Errorf("%s: %d errors; first: %v", c.id(), s.errors, s.firstErr)
	}
	if s.decisions == 0 {
		t.Errorf("%s: no decision in %v (%d degraded)", c.id(), s.wall, s.degraded)
		return
	}
	want := s.decisions
	if c.deny {
		want = 0
	}
	if s.allowed != want {
		t.Errorf("%s: %d of %d decisions admitted, want %d", c.id(), s.allowed, s.decisions, want)
	}
	if s.degraded > 0 {
		t.Logf("%s: %d decisions came from the failure policy (Redis too slow)", c.id(), s.degraded)
	}
	if s.timeouts > 0 {
		t.Logf("%s: %d calls timed out with no fallback (a lease release; the lease expires by itself)", c.id(), s.timeouts)
	}
}

// machine describes the host and the run.
func machine(loads []string, took time.Duration, rounds int, warm, dur time.Duration) string {
	cpu := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	redis := "?"
	if out, err := execOutput("redis-server", "--version"); err == nil {
		redis = strings.TrimSpace(out)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Run of %s: %d CPUs (%s), %s; %s.\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), numCPU(), cpu, goVersion(), redis)
	fmt.Fprintf(&b, "%d interleaved rounds, each cell measured for %v after a %v warm-up; the whole run took %v.\n",
		rounds, dur, warm, took.Round(time.Second))
	fmt.Fprintf(&b, "Load average (1, 5, 15 min) at the start of each round and at the end: %s.\n", strings.Join(loads, "; "))
	return b.String()
}
