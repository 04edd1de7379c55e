package bench_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	redisrate "github.com/go-redis/redis_rate/v10"
	"github.com/redis/rueidis"
	"github.com/throttled/throttled/v2"
	ulule "github.com/ulule/limiter/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/keyslot"
	server "github.com/sluice-go/sluice/internal/redisserver"
)

var growthFlag = flag.Bool("growth", false, "TestGrowth: measure memory and throughput up to 1,000,000 identities, 1 to 16 limits per request and 1 to 3 cluster masters, and rewrite the growth section of docs/benchmarks.md (about 4 minutes)")

// Limits of the memory measurements: long periods, so no state expires
// while the identities are being written.
var (
	memLimits = []struct {
		name string
		lim  sluice.Limit
	}{
		{"gcra", sluice.Must(sluice.GCRA(100, time.Hour, 100))},
		{"token_bucket", sluice.Must(sluice.TokenBucket(100, time.Hour, 100))},
		{"fixed_window", sluice.Must(sluice.FixedWindow(100, time.Hour))},
		{"sliding_window", sluice.Must(sluice.SlidingWindow(100, time.Hour))},
		{"sliding_log", sluice.Must(sluice.SlidingLog(100, time.Hour))},
		{"concurrency", sluice.Must(sluice.Concurrency(100, time.Hour))},
	}
	// growGCRA admits every request of the throughput-against-identities
	// cells, one identity or a million: a burst of 10⁶, and a period of an
	// hour per request so that no identity's state expires during the run.
	growGCRA = sluice.Must(sluice.GCRA(1, time.Hour, 1_000_000))
)

// populate makes one decision for each of ids[from:to] from 128
// goroutines (rueidis pipelines them) and fails on any error or denial. A
// decision the failure policy made (Redis too slow for the Limiter's
// timeout) wrote nothing, so it is asked again, and counted.
func populate(t *testing.T, fn decide, ids []string, from, to int) {
	t.Helper()
	var retried atomic.Int64
	defer func() {
		if n := retried.Load(); n > 0 {
			t.Logf("populating %d identities: %d degraded decisions asked again", to-from, n)
		}
	}()
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	ctx := context.Background()
	for range 128 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= to {
					return
				}
				ok, err := fn(ctx, ids[i])
				for try := 0; errors.Is(err, errDegraded) && try < 500; try++ {
					retried.Add(1)
					time.Sleep(10 * time.Millisecond) // the breaker may be open
					ok, err = fn(ctx, ids[i])
				}
				if err == nil && !ok {
					err = fmt.Errorf("identity %q denied while populating", ids[i])
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("populating: %v", firstErr)
	}
}

// usedMemory is INFO memory's used_memory in bytes.
func usedMemory(t *testing.T, srv *server.Server) int64 {
	t.Helper()
	info, err := srv.Command("INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(infoField(info, "used_memory"), 10, 64)
	if err != nil {
		t.Fatalf("used_memory: %v", err)
	}
	return n
}

func flushAll(t *testing.T, srv *server.Server) {
	t.Helper()
	if _, err := srv.Command("FLUSHALL", "SYNC"); err != nil {
		t.Fatal(err)
	}
}

func identitiesUpTo(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = "id-" + strconv.Itoa(i)
	}
	return s
}

// TestGrowth measures how cost grows: Redis memory per identity for every
// algorithm (and the peers), decisions per second as the identities in use
// grow from 1 to 1,000,000, latency as the limits per request grow from 1
// to 16, and throughput on a 3-master cluster using 1, 2 or 3 masters.
// Without -growth it runs each part on a few identities and checks the
// figures are there (CI); with -growth it writes the growth section of
// docs/benchmarks.md.
func TestGrowth(t *testing.T) {
	began := time.Now()
	full := *growthFlag
	rounds, warm, dur := *roundsFlag, *warmFlag, *sampleFlag
	sizes := []int{1, 1_000, 10_000, 100_000, 1_000_000}
	memN := 100_000
	if !full {
		rounds, warm, dur = 1, 0, 40*time.Millisecond
		sizes, memN = []int{1, 100, 1_000}, 1_000
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
	var out strings.Builder
	loads := []string{loadavg()}

	// Memory per identity.
	ids := identitiesUpTo(max(memN, sizes[len(sizes)-1]))
	out.WriteString(fmt.Sprintf("#### Redis memory per identity (%s identities, one request each; limits of 100 per hour)\n\n", human(float64(memN))))
	out.WriteString("| limiter | bytes per identity (INFO memory used_memory) | MEMORY USAGE of one key | keys per identity |\n|---|---:|---:|---:|\n")
	memRows := func(name string, fn decide, keyOf func(string) string, n, reps int) {
		flushAll(t, srv)
		before := usedMemory(t, srv)
		for range reps {
			populate(t, fn, ids, 0, n)
		}
		after := usedMemory(t, srv)
		per := float64(after-before) / float64(n)
		if per <= 0 && full { // a thousand identities are within used_memory's noise
			t.Errorf("%s: used_memory grew by %d bytes for %d identities", name, after-before, n)
		}
		usage := "–"
		if keyOf != nil {
			u, err := srv.Command("MEMORY", "USAGE", keyOf(ids[n/2]), "SAMPLES", "0")
			if err != nil || u == "" {
				t.Errorf("%s: MEMORY USAGE: %q, %v", name, u, err)
			}
			usage = u
		}
		keys, err := srv.Command("DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		nk, _ := strconv.Atoi(keys)
		fmt.Fprintf(&out, "| %s | %.0f | %s | %.2f |\n", name, per, usage, float64(nk)/float64(n))
	}
	memRow := func(name string, fn decide, keyOf func(string) string) { memRows(name, fn, keyOf, memN, 1) }
	for _, m := range memLimits {
		fn := sluiceOne(e.sluice, m.lim)
		if m.lim.Algorithm == sluice.AlgConcurrency {
			fn = sluiceHold(e.sluice, m.lim)
		}
		lim := m.lim
		memRow("sluice "+m.name, fn, func(id string) string { return e.sluice.Key(id, lim) })
	}
	// 1000 per hour: a decision that timed out may still have been
	// charged, and is asked again.
	logLim := sluice.Must(sluice.SlidingLog(1000, time.Hour))
	memRows("sluice sliding_log, 100 requests per identity (1,000 identities)", sluiceOne(e.sluice, logLim), func(id string) string { return e.sluice.Key(id, logLim) }, 1000, 100)
	memRow("sluice AllowAll of 2 gcra limits", sluiceAll(e.sluice, memLimits[0].lim, sluice.Must(sluice.GCRA(1000, 24*time.Hour, 1000))), nil)
	memRow("redis_rate (GCRA)", redisRate(e.rate, "mem", redisrate.PerHour(100)), func(id string) string { return "rate:mem:" + id })
	memRow("throttled (GCRA)", throttledGCRA(e.thStore, "mem", throttled.RateQuota{MaxRate: throttled.PerHour(100), MaxBurst: 99}), func(id string) string { return "throttled:mem:" + id })
	memRow("ulule (fixed window)", ululeFixed(e.ulStore, "mem", ulule.Rate{Period: time.Hour, Limit: 100}), nil)
	out.WriteString("\nA sliding log holds one entry per admitted request in its window: its memory grows with the requests admitted in the window, the others' does not.\n")

	// Decisions per second and memory as identities grow.
	flushAll(t, srv)
	base := usedMemory(t, srv)
	memAt := map[int]int64{}
	done := 0
	for _, n := range sizes {
		populate(t, sluiceOne(e.sluice, growGCRA), ids, done, n)
		done = n
		memAt[n] = usedMemory(t, srv) - base
	}
	var cells []cell
	for _, n := range sizes {
		cells = append(cells, cell{group: "identities", name: strconv.Itoa(n), g: 128, keys: ids[:n], fn: sluiceOne(e.sluice, growGCRA)})
	}
	for _, k := range []int{1, 2, 4, 8, 16} {
		for _, g := range []int{1, 128} {
			cells = append(cells, cell{group: "limits", name: strconv.Itoa(k), g: g, keys: workIDs, fn: sluiceAll(e.sluice, sixteen[:k]...)})
		}
	}
	if !full {
		for i := range cells {
			cells[i].g = min(cells[i].g, 16)
		}
	}
	res, l2 := runRounds(t, d, cells, "", rounds, warm, dur)
	loads = append(loads, l2...)
	for _, c := range cells {
		for _, s := range res[c.id()] {
			checkSample(t, c, s)
		}
	}
	rep := newReport(cells, res, rounds)
	out.WriteString("\n#### Decisions per second as the identities in use grow (sluice GCRA, G=128; all 1,000,000 identities stay in Redis)\n\n")
	out.WriteString("| identities in use | decisions/s (median) | each round | Redis CPU µs/decision | p50 | p99 | used_memory when this many were written | per identity |\n|---:|---:|---|---:|---:|---:|---:|---:|\n")
	for _, c := range cells {
		if c.group != "identities" {
			continue
		}
		ss := res[c.id()]
		n := len(c.keys)
		fmt.Fprintf(&out, "| %s | %s | %s | %s | %s | %s | %.1f MB | %.0f B |\n", human(float64(n)), human(median(rates(ss))), perRound(rates(ss), human),
			us(medianOf(ss, func(s sample) float64 { return s.per(s.redisCPU) })),
			latency(time.Duration(medianOf(ss, func(s sample) float64 { return float64(s.p50) }))),
			latency(time.Duration(medianOf(ss, func(s sample) float64 { return float64(s.p99) }))),
			float64(memAt[n])/1e6, float64(memAt[n])/float64(n))
	}
	out.WriteString("\n#### Limits per request: one AllowAll of k GCRA limits (10,000 identities; ratio: row ÷ k = 1 at the same G)\n\n")
	rep.tableNamed(&out, "limits", "limits", func(c cell) []sample { return rep.lookup("limits", "1", c.g) })

	// Cluster: 1, 2 and 3 masters.
	out.WriteString("\n" + clusterGrowth(t, rounds, warm, dur, full))
	loads = append(loads, loadavg())
	meta := fmt.Sprintf("Run of %s (`-growth`), %d CPUs, %s; %d interleaved rounds of %v per cell after %v warm-up; the whole run took %v. Load average at the start, each round and the end: %s.\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), numCPU(), goVersion(), rounds, dur, warm, time.Since(began).Round(time.Second), strings.Join(loads, "; "))
	if !full {
		return
	}
	fmt.Println(meta + "\n" + out.String())
	writeGenerated(t, filepath.Join(*docsFlag, "benchmarks.md"), "growth", meta+"\n"+out.String())
}

// sluiceHold takes a slot of a concurrency limit and keeps it (the
// memory of one holder per identity).
func sluiceHold(l *sluice.Limiter, lim sluice.Limit) decide {
	return func(ctx context.Context, id string) (bool, error) {
		_, r, err := l.Acquire(ctx, id, lim)
		if err == nil && r.Degraded {
			err = fmt.Errorf("%w for %q", errDegraded, id)
		}
		return r.Allowed, err
	}
}

// tableNamed is table with the contender column headed col.
func (r *report) tableNamed(b *strings.Builder, group, col string, ref func(c cell) []sample) {
	var t strings.Builder
	r.table(&t, group, ref)
	b.WriteString(strings.Replace(t.String(), "| contender |", "| "+col+" |", 1))
}

// clusterGrowth measures sluice GCRA on a 3-master cluster with the
// identities of 1, 2 or all 3 masters, and reports each master's CPU.
func clusterGrowth(t *testing.T, rounds int, warm, dur time.Duration, full bool) string {
	t.Helper()
	cl := server.StartCluster(t, 3)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	l, err := sluice.New(client)
	if err != nil {
		t.Fatal(err)
	}
	owner := make([]int, keyslot.Slots) // slot → index of its master in cl.Nodes
	pids := make([]int, len(cl.Nodes))
	for i, n := range cl.Nodes {
		nodes, err := n.Command("CLUSTER", "NODES")
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) < 9 || !strings.Contains(f[2], "myself") {
				continue
			}
			for _, r := range f[8:] {
				lo, hi, ok := strings.Cut(r, "-")
				if !ok {
					hi = lo
				}
				a, err1 := strconv.Atoi(lo)
				b, err2 := strconv.Atoi(hi)
				if err1 != nil || err2 != nil {
					continue
				}
				for s := a; s <= b; s++ {
					owner[s] = i
				}
			}
		}
		dn, err := newDriver(n)
		if err != nil {
			t.Fatal(err)
		}
		pids[i] = dn.redisPID
	}
	// Identities per master, 10,000 in all for each master count.
	byMaster := make([][]string, len(cl.Nodes))
	for i := 0; ; i++ {
		id := "c-" + strconv.Itoa(i)
		m := owner[keyslot.Of(l.Key(id, workGCRA))]
		if len(byMaster[m]) < workIdentities {
			byMaster[m] = append(byMaster[m], id)
		}
		if len(byMaster[0]) == workIdentities && len(byMaster[1]) == workIdentities && len(byMaster[2]) == workIdentities {
			break
		}
	}
	gs := []int{128, 512}
	if !full {
		gs = []int{16}
	}
	type cc struct {
		masters, g int
		keys       []string
	}
	var cells []cc
	for _, g := range gs {
		for m := 1; m <= 3; m++ {
			var keys []string
			for i := range workIdentities { // interleave the masters' identities
				keys = append(keys, byMaster[i%m][i/m])
			}
			cells = append(cells, cc{m, g, keys})
		}
	}
	fn := sluiceOne(l, workGCRA)
	res := map[int][]sample{}
	cpu := map[int][][]float64{} // cell → round → µs of CPU per decision on each master
	for r := range rounds {
		off := r * len(cells) / rounds
		for i := range cells {
			ci := (off + i) % len(cells)
			c := cells[ci]
			if warm > 0 {
				drive(fn, c.g, c.keys, warm)
			}
			before := make([]time.Duration, len(pids))
			for j, p := range pids {
				before[j], _ = procCPU(p)
			}
			s := drive(fn, c.g, c.keys, dur)
			var per []float64
			for j, p := range pids {
				a, _ := procCPU(p)
				per = append(per, s.per(a-before[j]))
			}
			checkSample(t, cell{group: "cluster", name: strconv.Itoa(c.masters), g: c.g}, s)
			res[ci] = append(res[ci], s)
			cpu[ci] = append(cpu[ci], per)
		}
	}
	var b strings.Builder
	b.WriteString("#### Redis Cluster, 3 masters: sluice GCRA with the identities of 1, 2 or 3 masters (10,000 identities, 100/s each; ratio: row ÷ 1 master at the same G)\n\n")
	b.WriteString("| masters used | G | decisions/s (median) | each round | ratio | CPU µs/decision on master 1 · 2 · 3 | p50 | p99 |\n|---:|---:|---:|---|---:|---|---:|---:|\n")
	for ci, c := range cells {
		ss := res[ci]
		ref := ci - (c.masters - 1)
		var cpus []string
		for j := range pids {
			var xs []float64
			for _, round := range cpu[ci] {
				xs = append(xs, round[j])
			}
			cpus = append(cpus, us(median(xs)))
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %s | %s | %s |\n", c.masters, c.g, human(median(rates(ss))), perRound(rates(ss), human),
			times(median(ratios(ss, res[ref]))), strings.Join(cpus, " · "),
			latency(time.Duration(medianOf(ss, func(s sample) float64 { return float64(s.p50) }))),
			latency(time.Duration(medianOf(ss, func(s sample) float64 { return float64(s.p99) }))))
	}
	return b.String()
}
