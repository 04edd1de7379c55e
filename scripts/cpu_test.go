package scripts_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/internal/yardstick"
	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
)

var (
	cpuKeys   = flag.Int("cpu.keys", 300, "identities in TestRedisCPUPerDecision, each asked 10 times per script, clock and round (10000 for the documented figures)")
	cpuRounds = flag.Int("cpu.rounds", 1, "interleaved rounds of TestRedisCPUPerDecision; the table shows medians")
	cpuBefore = flag.String("cpu.before", "", "a git revision: TestRedisCPUPerDecision also measures the scripts as they were there")
	cpuOnly   = flag.String("cpu.cases", "", "a regular expression: TestRedisCPUPerDecision measures only the cases whose names it matches")
	cpuGrind  = flag.Bool("cpu.callgrind", false, "TestRedisCPUPerDecision runs the server under valgrind's callgrind and reports instructions per call, which the machine's load does not change (needs valgrind; Debian: apt-get install valgrind)")
)

// bareGCRA is the reference for the cost of a decision: the simplest
// correct GCRA on one string key, a GET and a SET with PX (and TIME when no
// clock is given), with T = period/limit in whole µs and no validation of
// its arguments. It stands for what any GCRA script must at least do.
const bareGCRA = `local limit, period, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = tonumber(ARGV[5])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local T = math.floor(period / limit)
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
  tat = now
end
local new = tat + cost * T
local allow_at = new - burst * T
if allow_at > now then
  return {0, 0, allow_at - now, tat - now}
end
if cost > 0 then
  local ms = math.ceil((new - now) / 1000)
  if ms < 2 then
    ms = 2
  end
  redis.call('SET', KEYS[1], string.format('%d', new), 'PX', string.format('%d', ms))
end
return {1, math.floor((now - allow_at) / T), 0, new - now}
`

// incrWindow sends the commands ulule/limiter's Redis store sends for one
// decision (drivers/store/redis, v3.11.2): INCRBY, then PEXPIRE when the
// key is new or PTTL otherwise, every call, admitted or not. The caller
// compares the count with the limit.
const incrWindow = `local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if n == tonumber(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {n, tonumber(ARGV[2])}
end
return {n, redis.call('PTTL', KEYS[1])}
`

// A cpuCase is one script measured by TestRedisCPUPerDecision. Each of its
// identities is asked cpuQuota*2 times with cost 1: the first cpuQuota
// calls are admitted, the others denied (every limit allows cpuQuota at
// once and refills far slower than the run lasts).
type cpuCase struct {
	name string
	src  string
	// call returns the keys and ARGV of call n on identity id; now is nil
	// for the server's clock.
	call func(id string, n int, now *int64) (keys, args []string)
	// admitted tells from a reply whether the call was admitted.
	admitted func(reply []int64) bool
	// windowed: the limit's windows are epoch-aligned, so a run on the
	// server's clock that crosses a window boundary may admit more.
	windowed bool
	// part: not a limiter but a part of what one costs (the reply alone,
	// TIME, ...), whose admissions are not counted.
	part bool
	// scalar: the script replies one integer, 1 when admitted.
	scalar bool
}

// The parts of a decision, each measured as a script of its own: what the
// call and a four-number reply cost with nothing else, then with TIME,
// then with a GET and a SET ... PX of a formatted value.
const (
	partReply  = `return {1, 0, 0, 0}`
	partTime   = `local t = redis.call('TIME') return {1, 0, 0, 0}`
	partGetSet = `local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], string.format('%d:%d', t[1], t[2]), 'PX', string.format('%d', 3600000))
return {1, 0, 0, 0}`
	partReply1 = `return 1`
	// What AllowAll of 16 limits must do at least: sixteen SETs with a TTL.
	partSet16 = `for i = 1, #KEYS do
  redis.call('SET', KEYS[i], '1764590000123456:57', 'PX', '1000')
end
return {1, 0, 0, 0}`
)

const cpuQuota = 5

func cpuCases(t *testing.T, rev string) []cpuCase {
	const (
		hour = int64(3_600_000_000)
		day  = int64(86_400_000_000)
		q    = int64(cpuQuota)
	)
	src := func(name string) string {
		if rev == "" {
			return source(t, name)
		}
		out, err := exec.Command("git", "show", rev+":scripts/"+name+".lua").Output()
		if err != nil {
			t.Fatalf("git show %s:scripts/%s.lua: %v", rev, name, err)
		}
		return string(out)
	}
	first := func(r []int64) bool { return r[0] == 1 }
	one := func(id string) string { return "sluice:{" + id + "}:state" }
	two := func(id string) []string { return []string{"sluice:{" + id + "}:a", "sluice:{" + id + "}:b"} }
	// The built-in scripts get their KEYS and ARGV from the generated
	// wrappers, exactly as the Limiter sends them.
	kv := func(c luart.Call) ([]string, []string) { return c.Keys, c.Args }
	suffix := ""
	if rev != "" {
		suffix = " @" + rev
	}
	cs := []cpuCase{
		{name: "fixed_window", windowed: true, call: func(id string, n int, now *int64) ([]string, []string) {
			return kv(scripts.FixedWindow.Call(scripts.FixedWindowKeys{State: one(id)}, scripts.FixedWindowArgs{Limit: q, Period: day, Cost: 1, Now: now}))
		}},
		{name: "sliding_window", windowed: true, call: func(id string, n int, now *int64) ([]string, []string) {
			return kv(scripts.SlidingWindow.Call(scripts.SlidingWindowKeys{State: one(id)}, scripts.SlidingWindowArgs{Limit: q, Period: day, Cost: 1, Now: now}))
		}},
		{name: "token_bucket", call: func(id string, n int, now *int64) ([]string, []string) {
			return kv(scripts.TokenBucket.Call(scripts.TokenBucketKeys{State: one(id)}, scripts.TokenBucketArgs{Limit: 1, Period: hour, Burst: q, Cost: 1, Now: now}))
		}},
		{name: "gcra", call: func(id string, n int, now *int64) ([]string, []string) {
			return kv(scripts.GCRA.Call(scripts.GCRAKeys{State: one(id)}, scripts.GCRAArgs{Limit: 1, Period: hour, Burst: q, Cost: 1, Now: now}))
		}},
		{name: "gcra_multi", call: func(id string, n int, now *int64) ([]string, []string) {
			return kv(scripts.GCRAMulti.Call(scripts.GCRAMultiKeys{States: two(id)}, scripts.GCRAMultiArgs{Cost: 1, Now: now, Limits: []int64{1, hour, q, 100, day, 100}}))
		}},
		{name: "sliding_window_multi", windowed: true, call: func(id string, n int, now *int64) ([]string, []string) {
			return kv(scripts.SlidingWindowMulti.Call(scripts.SlidingWindowMultiKeys{States: two(id)}, scripts.SlidingWindowMultiArgs{Cost: 1, Now: now, Limits: []int64{q, day, 100, day}}))
		}},
		{name: "fixed_window_multi", windowed: true, call: func(id string, n int, now *int64) ([]string, []string) {
			return kv(scripts.FixedWindowMulti.Call(scripts.FixedWindowMultiKeys{States: two(id)}, scripts.FixedWindowMultiArgs{Cost: 1, Now: now, Limits: []int64{q, day, 100, day}}))
		}},
		{name: "sliding_log", call: func(id string, n int, now *int64) ([]string, []string) {
			return kv(scripts.SlidingLog.Call(scripts.SlidingLogKeys{Log: one(id)}, scripts.SlidingLogArgs{Limit: q, Period: day, Cost: 1, Now: now}))
		}},
		{name: "concurrency_acquire", call: func(id string, n int, now *int64) ([]string, []string) {
			return kv(scripts.ConcurrencyAcquire.Call(scripts.ConcurrencyAcquireKeys{Holders: one(id)}, scripts.ConcurrencyAcquireArgs{Limit: q, Lease: hour, ID: "h" + strconv.Itoa(n), Now: now}))
		}},
	}
	for i := range cs {
		cs[i].src = src(cs[i].name)
		cs[i].admitted = first
		cs[i].name += suffix
	}
	if rev != "" {
		return cs
	}
	return append(cs,
		cpuCase{name: "bare GCRA (GET+SET)", src: bareGCRA, admitted: first, call: func(id string, n int, now *int64) ([]string, []string) {
			return []string{one(id)}, []string{"1", strconv.FormatInt(hour, 10), strconv.FormatInt(q, 10), "1", luart.FormatOptInt(now)}
		}},
		cpuCase{name: "part: EVALSHA replying 1", src: partReply1, part: true, call: partCall},
		cpuCase{name: "part: EVALSHA replying 4 numbers", src: partReply, part: true, call: partCall},
		cpuCase{name: "part: + TIME", src: partTime, part: true, call: partCall},
		cpuCase{name: "part: + GET, SET ... PX", src: partGetSet, part: true, call: partCall},
		cpuCase{name: "part: 16 × SET ... PX (16 keys)", src: partSet16, part: true, call: func(id string, n int, now *int64) ([]string, []string) {
			keys := make([]string, 16)
			for i := range keys {
				keys[i] = "sluice:{" + id + "}:" + strconv.Itoa(i)
			}
			return keys, nil
		}},
		cpuCase{name: "gcra_multi, 16 limits", call: func(id string, n int, now *int64) ([]string, []string) {
			keys := make([]string, 16)
			lims := make([]int64, 0, 48)
			for i := range keys {
				keys[i] = "sluice:{" + id + "}:" + strconv.Itoa(i)
				lims = append(lims, 1, hour, q+int64(i))
			}
			return kv(scripts.GCRAMulti.Call(scripts.GCRAMultiKeys{States: keys}, scripts.GCRAMultiArgs{Cost: 1, Now: now, Limits: lims}))
		}, src: source(t, "gcra_multi"), admitted: first},
		// The bench's ceiling script (T and burst×T in whole µs, replying
		// 1 or 0), then the same with gcra's six ARGV and four-number
		// reply: the least any script keeping sluice's contract costs.
		cpuCase{name: "the bench's ceiling script (2 ARGV, replies 1)", src: yardstick.CeilingGCRA, scalar: true, admitted: first,
			call: func(id string, n int, now *int64) ([]string, []string) {
				return []string{one(id)}, yardstick.CeilingArgs(hour, q)
			}},
		cpuCase{name: "the same with gcra's 6 ARGV and 4-number reply", src: yardstick.ContractGCRA, admitted: first,
			call: func(id string, n int, now *int64) ([]string, []string) {
				return []string{one(id)}, yardstick.ContractArgs(hour, q)
			}},
		cpuCase{name: "ulule fixed window (INCRBY+PEXPIRE/PTTL)", src: incrWindow,
			admitted: func(r []int64) bool { return r[0] <= cpuQuota },
			call: func(id string, n int, now *int64) ([]string, []string) {
				return []string{one(id)}, []string{"1", "3600000"}
			}},
	)
}

// partCall is the one key of a part, and no ARGV.
func partCall(id string, n int, now *int64) ([]string, []string) {
	return []string{"sluice:{" + id + "}:state"}, nil
}

// cpuStat is what INFO commandstats says about one phase of a run, with
// the CPU time the server's main thread was given meanwhile.
type cpuStat struct {
	calls int64
	usec  int64
	inner map[string]int64 // calls of each command the scripts sent
	cpuNS int64            // on-CPU time of the server's main thread (/proc/PID/schedstat), or -1
	instr int64            // instructions the server executed (-cpu.callgrind), or -1
}

func (s cpuStat) perCall() float64 { return float64(s.usec) / float64(max(s.calls, 1)) }

// onCPU reads the on-CPU time in ns of the thread pid from
// /proc/PID/schedstat, or -1 where there is none.
func onCPU(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/schedstat")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// serverPID returns the process id of the server c talks to.
func serverPID(ctx context.Context, t *testing.T, c rueidis.Client) string {
	t.Helper()
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return v
		}
	}
	t.Fatalf("INFO server has no process_id")
	return ""
}

func commandStats(ctx context.Context, t *testing.T, c rueidis.Client) cpuStat {
	t.Helper()
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	st := cpuStat{inner: map[string]int64{}}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		var calls, usec int64
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		switch {
		case name == "evalsha":
			st.calls, st.usec = calls, usec
		case name == "info" || name == "flushall" || strings.HasPrefix(name, "config|") || strings.HasPrefix(name, "script|"):
			// the harness's own commands
		default:
			st.inner[name] = calls
		}
	}
	return st
}

// cpuRun is one measured run of a case: admissions, then denials.
type cpuRun struct {
	admit, deny cpuStat
}

func (r cpuRun) mix() float64 {
	return float64(r.admit.usec+r.deny.usec) / float64(max(r.admit.calls+r.deny.calls, 1))
}

func (r cpuRun) instrMix() float64 {
	return float64(r.admit.instr+r.deny.instr) / float64(max(r.admit.calls+r.deny.calls, 1))
}

func (r cpuRun) cpuMix() float64 {
	if r.admit.cpuNS < 0 || r.deny.cpuNS < 0 {
		return -1
	}
	return float64(r.admit.cpuNS+r.deny.cpuNS) / 1000 / float64(max(r.admit.calls+r.deny.calls, 1))
}

// TestRedisCPUPerDecision measures the Redis CPU each script spends on a
// decision: INFO commandstats' usec per EVALSHA on a private redis-server,
// for admissions and denials separately, on the server's clock (TIME, the
// Limiter's default) and on a client clock (the now argument). Every
// identity is asked 2*cpuQuota times: cpuQuota admissions, then as many
// denials. Next to the built-in scripts it measures bareGCRA and the
// commands of ulule/limiter's fixed window, and with -cpu.before the
// scripts of an earlier revision. It logs the table and asserts only
// correctness (every identity admitted exactly cpuQuota times), never
// speed. With -cpu.callgrind it counts the server's instructions per call
// instead, a figure the machine's load leaves alone. The documented
// figures come from
//
//	go test ./scripts -run TestRedisCPUPerDecision -count=1 -v -cpu.keys 10000 -cpu.rounds 3
//	go test ./scripts -run TestRedisCPUPerDecision -count=1 -v -cpu.callgrind -cpu.keys 300
func TestRedisCPUPerDecision(t *testing.T) {
	if *cpuKeys < 1 || *cpuRounds < 1 {
		t.Fatalf("-cpu.keys and -cpu.rounds must be at least 1")
	}
	var g *grind
	if *cpuGrind {
		g = grindServer(t)
	}
	srv := redisserver.Start(t, "--save", "", "--appendonly", "no")
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis client for %s: %v", srv.Addr, err)
	}
	t.Cleanup(client.Close)
	ctx := context.Background()

	pid := serverPID(ctx, t, client)
	if g != nil {
		g.pid = pid
	}
	cases := cpuCases(t, "")
	if *cpuBefore != "" {
		cases = append(cpuCases(t, *cpuBefore), cases...)
	}
	if *cpuOnly != "" {
		re, err := regexp.Compile(*cpuOnly)
		if err != nil {
			t.Fatalf("-cpu.cases: %v", err)
		}
		cases = slices.DeleteFunc(cases, func(c cpuCase) bool { return !re.MatchString(c.name) })
		if len(cases) == 0 {
			t.Fatalf("-cpu.cases %q matches no case", *cpuOnly)
		}
	}
	ids := make([]string, *cpuKeys)
	for i := range ids {
		ids[i] = "cpu-" + strconv.Itoa(i)
	}
	const passes = 2 * cpuQuota
	modes := []string{"TIME", "now"}
	runs := map[string][]cpuRun{} // by case name and mode
	rnd := rand.New(rand.NewSource(1))
	for round := 0; round < *cpuRounds; round++ {
		for _, c := range cases {
			for _, mode := range modes {
				r := runCPUCase(ctx, t, client, pid, g, c, mode, ids, passes, rnd)
				runs[c.name+"\x00"+mode] = append(runs[c.name+"\x00"+mode], r)
			}
		}
	}

	var b strings.Builder
	what := "Redis CPU per decision in µs"
	if g != nil {
		what = "Redis instructions per decision"
	}
	fmt.Fprintf(&b, "%s, median of %d round(s); %d calls over %d identities per script and clock, half admitted.\n", what, *cpuRounds, passes*len(ids), len(ids))
	if g != nil {
		fmt.Fprintf(&b, "Under callgrind: instructions the server executed per call (parsing the command, the script, its commands, the reply), mix (admissions / denials).\n\n")
		fmt.Fprintf(&b, "| script | TIME: instructions | now: instructions | commands per admission; per denial (now) |\n")
		fmt.Fprintf(&b, "|---|---|---|---|\n")
	} else {
		fmt.Fprintf(&b, "usec: INFO commandstats usec/calls of EVALSHA, mix (admissions / denials); cpu: on-CPU time of the server's main thread per call, mix.\n\n")
		fmt.Fprintf(&b, "| script | TIME: usec | cpu | now: usec | cpu | commands per admission; per denial (now) |\n")
		fmt.Fprintf(&b, "|---|---|---|---|---|---|\n")
	}
	for _, c := range cases {
		row := []string{c.name}
		var last []cpuRun
		for _, mode := range modes {
			rs := runs[c.name+"\x00"+mode]
			last = rs
			if g != nil {
				row = append(row, fmt.Sprintf("%.0f (%.0f / %.0f)", medianOf(rs, cpuRun.instrMix),
					medianOf(rs, func(r cpuRun) float64 { return float64(r.admit.instr) / float64(max(r.admit.calls, 1)) }),
					medianOf(rs, func(r cpuRun) float64 { return float64(r.deny.instr) / float64(max(r.deny.calls, 1)) })))
				continue
			}
			row = append(row,
				fmt.Sprintf("%.2f (%.2f / %.2f)", medianOf(rs, cpuRun.mix),
					medianOf(rs, func(r cpuRun) float64 { return r.admit.perCall() }),
					medianOf(rs, func(r cpuRun) float64 { return r.deny.perCall() })),
				fmt.Sprintf("%.2f", medianOf(rs, cpuRun.cpuMix)))
		}
		row = append(row, innerCalls(last[0].admit)+"; "+innerCalls(last[0].deny))
		fmt.Fprintf(&b, "| %s |\n", strings.Join(row, " | "))
	}
	t.Log("\n" + b.String())
}

func medianOf(rs []cpuRun, f func(cpuRun) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

// innerCalls formats the commands the scripts sent, per EVALSHA, in the
// "now" mode (so without TIME).
func innerCalls(s cpuStat) string {
	names := make([]string, 0, len(s.inner))
	for n := range s.inner {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		if s.inner[n] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2g", strings.ToUpper(n), float64(s.inner[n])/float64(max(s.calls, 1))))
		}
	}
	return strings.Join(parts, ", ")
}

// runCPUCase runs one case in one mode on a flushed server: passes/2
// passes of admissions over every identity, then passes/2 of denials, each
// pass in a new random order, and checks every reply.
func runCPUCase(ctx context.Context, t *testing.T, c rueidis.Client, pid string, g *grind, cc cpuCase, mode string, ids []string, passes int, rnd *rand.Rand) cpuRun {
	t.Helper()
	for _, cmd := range []rueidis.Completed{c.B().Flushall().Build(), c.B().ScriptFlush().Build()} {
		if err := c.Do(ctx, cmd).Error(); err != nil {
			t.Fatalf("%v", err)
		}
	}
	sha, err := c.Do(ctx, c.B().ScriptLoad().Script(cc.src).Build()).ToString()
	if err != nil {
		t.Fatalf("%s: SCRIPT LOAD: %v", cc.name, err)
	}
	// A client clock in the middle of a day (the windowed limits' period),
	// advancing 1 µs per call.
	clock := time.Now().Truncate(24 * time.Hour).Add(12 * time.Hour).UnixMicro()
	counts := make(map[string]int, len(ids))
	day := func() int64 { return time.Now().UnixMicro() / 86_400_000_000 }
	day0 := day()
	var run cpuRun
	n := 0
	for half := 0; half < 2; half++ {
		if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
			t.Fatalf("CONFIG RESETSTAT: %v", err)
		}
		g.zero(t)
		cpu0 := onCPU(pid)
		for p := 0; p < passes/2; p++ {
			order := slices.Clone(ids)
			rnd.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			const batch = 200
			for start := 0; start < len(order); start += batch {
				part := order[start:min(start+batch, len(order))]
				cmds := make(rueidis.Commands, len(part))
				for i, id := range part {
					var now *int64
					if mode == "now" {
						at := clock + int64(n)
						now = &at
					}
					keys, args := cc.call(id, n, now)
					n++
					cmds[i] = c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
				}
				for i, r := range c.DoMulti(ctx, cmds...) {
					if cc.part {
						if err := r.Error(); err != nil {
							t.Fatalf("%s (%s): %s: %v", cc.name, mode, part[i], err)
						}
						continue
					}
					var reply []int64
					var err error
					if cc.scalar {
						var n int64
						n, err = r.AsInt64()
						reply = []int64{n}
					} else {
						reply, err = r.AsIntSlice()
					}
					if err != nil {
						t.Fatalf("%s (%s): %s: %v", cc.name, mode, part[i], err)
					}
					if cc.admitted(reply) {
						counts[part[i]]++
					}
				}
			}
		}
		cpu1 := onCPU(pid)
		instr := g.dump(t)
		st := commandStats(ctx, t, c)
		st.instr = instr
		st.cpuNS = -1
		if cpu0 >= 0 && cpu1 >= 0 {
			st.cpuNS = cpu1 - cpu0
		}
		if half == 0 {
			run.admit = st
		} else {
			run.deny = st
		}
	}
	crossed := cc.windowed && mode == "TIME" && day() != day0
	for _, id := range ids {
		if cc.part {
			break
		}
		if got := counts[id]; got != cpuQuota && !(crossed && got > cpuQuota) {
			t.Fatalf("%s (%s): %s admitted %d times in %d calls, want %d", cc.name, mode, id, got, passes, cpuQuota)
		}
	}
	return run
}

// A grind is the test's server running under valgrind's callgrind
// (-cpu.callgrind): it counts the instructions the server executes, which
// neither the machine's load nor its clock speed changes.
type grind struct {
	ctl   string // callgrind_control
	out   string // --callgrind-out-file; dump n is out.n
	pid   string
	dumps int
}

// grindServer makes the next redisserver.Start run redis-server under
// callgrind, through a wrapper that SLUICE_REDIS_SERVER names.
func grindServer(t *testing.T) *grind {
	t.Helper()
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		t.Fatalf("-cpu.callgrind needs valgrind (Debian: apt-get install valgrind): %v", err)
	}
	ctl, err := exec.LookPath("callgrind_control")
	if err != nil {
		t.Fatalf("-cpu.callgrind needs callgrind_control (Debian: apt-get install valgrind): %v", err)
	}
	bin, err := redisserver.Binary()
	if err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	dir := t.TempDir()
	g := &grind{ctl: ctl, out: filepath.Join(dir, "callgrind.out")}
	wrapper := filepath.Join(dir, "redis-server")
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	script := "#!/bin/sh\nexec " + quote(vg) + " --tool=callgrind --callgrind-out-file=" + quote(g.out) + " " + quote(bin) + ` "$@"` + "\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_REDIS_SERVER", wrapper)
	return g
}

// zero sets the server's instruction count to 0 (nothing when g is nil).
func (g *grind) zero(t *testing.T) {
	t.Helper()
	if g == nil {
		return
	}
	if out, err := exec.Command(g.ctl, "-z", g.pid).CombinedOutput(); err != nil {
		t.Fatalf("callgrind_control -z %s: %v: %s", g.pid, err, out)
	}
}

// dump returns the instructions the server executed since zero, or -1
// when g is nil.
func (g *grind) dump(t *testing.T) int64 {
	t.Helper()
	if g == nil {
		return -1
	}
	if out, err := exec.Command(g.ctl, "-d", g.pid).CombinedOutput(); err != nil {
		t.Fatalf("callgrind_control -d %s: %v: %s", g.pid, err, out)
	}
	g.dumps++
	file := g.out + "." + strconv.Itoa(g.dumps)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("callgrind dump: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatalf("%s: summary %q: %v", file, v, err)
			}
			return n
		}
	}
	t.Fatalf("%s has no summary line", file)
	return 0
}
