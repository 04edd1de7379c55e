package scripts_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// base is the instant every table starts at: 2023-11-14T22:13:20Z, a whole
// number of seconds, so 1 s windows start at base.
const base int64 = 1_700_000_000_000_000

// A table is a sequence of calls to one script at fixed instants, with the
// exact reply each must give. A single-limit script works on one key; a
// multi-limit script on one key per limit. The runner checks more than
// the reply after every step; see runTable.
type table struct {
	name   string
	script string   // default script of the steps
	params []string // ARGV before cost (rate scripts) or before id (concurrency_acquire)
	// limits holds, for the multi-limit scripts, the params of each limit
	// (as its single-limit script takes them); limit j has its own key.
	limits [][]string
	steps  []step
}

// step is one call. Rate scripts take params, then cost, then now;
// concurrency_acquire takes params, then id, then now; concurrency_release
// takes id, then now; the multi-limit scripts take cost, now, then the
// params of each limit of the call, on one key per limit.
type step struct {
	at      int64    // µs after base
	cost    int64    // rate scripts
	id      string   // concurrency scripts
	script  string   // overrides the table's script
	params  []string // overrides the table's params
	want    []int64  // the reply; bools as 1/0
	persist bool     // remove the TTL of every key of the call before it: the call must restore them
	write   int      // 0: derived from the reply; 1: must write; -1: must not write; 2: not checked
	ttl     int64    // expected key life in µs after a write, when it is not reset_after
	members []string // the sorted set's members after the call, in order (see logged)
	// values gives, for a table starting at start µs, the value of each
	// key of the call after it, in call order (string-valued state).
	values func(start int64) []string
	// use lists, in tables with limits, the limits (1-based) of the call
	// in call order; nil means all of them in order. A step of a
	// single-limit script names one limit and runs on that limit's key
	// with its params.
	use []int
	// lives gives, for a multi-limit call that writes or repairs, each
	// key's life in µs after the call, in call order.
	lives []int64
	// limits overrides, in tables with limits, the params of every limit
	// of the table (a limit whose numbers changed between calls, on the
	// same key); nil keeps the table's.
	limits [][]string
}

// multi reports whether the step runs a multi-limit script.
func (tb table) multi(s step) bool { return strings.HasSuffix(tb.scriptOf(s), "_multi") }

// uses returns the limits (0-based) of a step in a table with limits.
func (tb table) uses(s step) []int {
	if s.use == nil {
		idx := make([]int, len(tb.limits))
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	idx := make([]int, len(s.use))
	for i, u := range s.use {
		idx[i] = u - 1
	}
	return idx
}

// limitKey names the key of limit j (0-based) of a table with limits.
func (tb table) limitKey(j int) string { return fmt.Sprintf("sluice:{%s}:limit-%d", tb.name, j+1) }

// keys returns the KEYS of a step, and the probe keys standing for them
// when the runner checks retry_after on a copy of the state.
func (tb table) keys(s step) (keys, probes []string) {
	if tb.limits == nil {
		return []string{"sluice:{" + tb.name + "}:state"}, []string{"sluice:{" + tb.name + "}:probe"}
	}
	for _, j := range tb.uses(s) {
		keys = append(keys, tb.limitKey(j))
		probes = append(probes, fmt.Sprintf("sluice:{%s}:probe-%d", tb.name, j+1))
	}
	return keys, probes
}

// allKeys lists every key a table's steps use.
func (tb table) allKeys() []string {
	if tb.limits == nil {
		return []string{"sluice:{" + tb.name + "}:state", "sluice:{" + tb.name + "}:probe"}
	}
	var out []string
	for j := range tb.limits {
		out = append(out, tb.limitKey(j), fmt.Sprintf("sluice:{%s}:probe-%d", tb.name, j+1))
	}
	return out
}

// logged names the sliding-log member of running total total and cost c,
// admitted under period (see sliding_log.lua), logged at us after base; the
// runner checks its score too.
func logged(us, total, c, period int64) string {
	return fmt.Sprintf("@%d=%016d:%d:%d", us, total, c, period)
}

// loggedBefore names a member as earlier versions of sliding_log.lua wrote
// it, without the period.
func loggedBefore(us, total, c int64) string { return fmt.Sprintf("@%d=%016d:%d", us, total, c) }

// expandMember splits a member given by logged into the member's name and
// its score when the table starts at start; other members have no score.
func expandMember(m string, start int64) (name string, score int64, scored bool) {
	at, name, ok := strings.Cut(m, "=")
	if !ok || !strings.HasPrefix(at, "@") {
		return m, 0, false
	}
	us, err := strconv.ParseInt(at[1:], 10, 64)
	if err != nil {
		return m, 0, false
	}
	return name, start + us, true
}

func (tb table) scriptOf(s step) string {
	if s.script != "" {
		return s.script
	}
	return tb.script
}

// argvWith builds the call's ARGV with nowArg as now.
func (tb table) argvWith(s step, nowArg string) []string {
	params := tb.params
	if s.params != nil {
		params = s.params
	}
	if tb.limits != nil {
		limits := tb.limits
		if s.limits != nil {
			limits = s.limits
		}
		idx := tb.uses(s)
		if !tb.multi(s) {
			params = limits[idx[0]]
		} else {
			args := []string{strconv.FormatInt(s.cost, 10), nowArg, ""} // each unset
			for _, j := range idx {
				args = append(args, limits[j]...)
			}
			return args
		}
	}
	var args []string
	switch tb.scriptOf(s) {
	case "concurrency_acquire":
		args = append(slices.Clone(params), s.id)
	case "concurrency_release":
		args = []string{s.id}
	default:
		// Rate scripts get peek unset (""), as the generated wrappers send
		// it: the scripts' fast argument path.
		args = append(slices.Clone(params), strconv.FormatInt(s.cost, 10))
		return append(args, nowArg, "")
	}
	return append(args, nowArg)
}

// argvNow builds the call's ARGV with now µs since the epoch.
func (tb table) argvNow(s step, now int64) []string {
	return tb.argvWith(s, strconv.FormatInt(now, 10))
}

// argv builds the call's ARGV at the step's instant; with useTime, now is
// sent unset (as the generated wrappers send an unset optional argument: an
// empty string).
func (tb table) argv(s step, useTime bool) []string {
	if useTime {
		return tb.argvWith(s, "")
	}
	return tb.argvNow(s, base+s.at)
}

// resetIndex is the position of reset_after in the script's reply.
func resetIndex(script string) int {
	if script == "concurrency_release" {
		return 2
	}
	return 3
}

// writes reports whether the step must write (true), must not (false).
func (tb table) writes(s step) bool {
	switch {
	case s.write == 1:
		return true
	case s.write < 0:
		return false
	}
	switch tb.scriptOf(s) {
	case "concurrency_acquire", "concurrency_release":
		return s.want[0] == 1
	default:
		return s.want[0] == 1 && s.cost > 0
	}
}

// lifeOf returns the life in µs key i of a step's call must have after it
// writes: lives[i] for a multi-limit call, else step.ttl or reset_after.
func (tb table) lifeOf(s step, i int) int64 {
	if tb.multi(s) {
		if i >= len(s.lives) {
			panic(fmt.Sprintf("table %s: a step at +%dµs writes %d keys but gives %d lives", tb.name, s.at, len(tb.uses(s)), len(s.lives)))
		}
		return s.lives[i]
	}
	if s.ttl != 0 {
		return s.ttl
	}
	return s.want[resetIndex(tb.scriptOf(s))]
}

// runTable runs tb on b and checks after every step:
//   - the reply equals want;
//   - a write leaves every key of the call with a PTTL of its useful life
//     (reset_after, step.ttl, or step.lives for a multi-limit call)
//     rounded up to whole ms and at least 2 ms, or deletes it when that is
//     0;
//   - a call that must not write (a denial, a cost of 0) writes nothing:
//     the server's write counter does not move, or the keys' values and
//     TTLs are unchanged;
//   - a key found without TTL (step.persist) has it back;
//   - when retry_after > 0, the same call on a copy of the state is denied
//     at now+retry_after-1 and allowed at now+retry_after;
//   - sliding_log never holds more members than limit.
//
// With useTime the calls leave now unset and the backend's clock (which
// must be settable) gives the time through Redis TIME.
func runTable(t *testing.T, b backend, tb table, useTime bool) {
	ctx := context.Background()
	if _, err := b.Do(ctx, append([]string{"DEL"}, tb.allKeys()...)...); err != nil {
		t.Fatal(err)
	}
	for i, s := range tb.steps {
		script := tb.scriptOf(s)
		keys, probes := tb.keys(s)
		what := fmt.Sprintf("step %d (%s at +%dµs, cost %d, id %q, keys %v)", i+1, script, s.at, s.cost, s.id, keys)
		now := base + s.at
		b.SetClock(now)
		if s.persist {
			for _, key := range keys {
				if n, err := b.Do(ctx, "PERSIST", key); err != nil || n != int64(1) {
					t.Fatalf("%s: PERSIST %s = %v, %v; want 1 (the key should exist with a TTL)", what, key, n, err)
				}
			}
		}
		before, counted, err := b.Writes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var snaps []string
		if !counted {
			for _, key := range keys {
				snaps = append(snaps, snapshot(ctx, t, b, key))
			}
		}
		res, err := b.Eval(ctx, source(t, script), keys, tb.argv(s, useTime))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, err := res.ints()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !slices.Equal(got, s.want) {
			t.Fatalf("%s: reply %v, want %v", what, got, s.want)
		}
		switch {
		case s.write == 2:
		case tb.writes(s) || s.persist:
			for k, key := range keys {
				wantTTL(t, what+" "+key, res.PTTL[k], tb.lifeOf(s, k), res.Spread)
			}
		case counted:
			after, _, err := b.Writes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if after != before {
				t.Errorf("%s: the server made %d writes, want none", what, after-before)
			}
		default:
			for k, key := range keys {
				if now := snapshot(ctx, t, b, key); now != snaps[k] {
					t.Errorf("%s wrote %s: before %s, after %s", what, key, snaps[k], now)
				}
			}
		}
		if script == "sliding_log" {
			limit, _ := strconv.ParseInt(tb.argv(s, false)[0], 10, 64)
			if n, err := b.Do(ctx, "ZCARD", keys[0]); err != nil || n.(int64) > limit {
				t.Errorf("%s: ZCARD %v (%v), want at most %d", what, n, err, limit)
			}
		}
		if len(got) > 2 && script != "concurrency_release" && got[2] > 0 {
			argsAt := func(at int64) []string { return tb.argvNow(s, at) }
			probeRetry(ctx, t, b, source(t, script), keys, probes, argsAt, got[2], now, what)
		}
		if s.members != nil {
			checkMembers(ctx, t, b, keys[0], s.members, what)
		}
		if s.values != nil {
			checkValues(ctx, t, b, keys, s.values(base), what)
		}
	}
}

// probeRetry copies the state of keys to probes and checks that the call
// argsAt builds is denied there at now+retry-1 and allowed at now+retry.
// The backend clock is left alone: now is passed explicitly.
func probeRetry(ctx context.Context, t *testing.T, b backend, src string, keys, probes []string, argsAt func(now int64) []string, retry, now int64, what string) {
	t.Helper()
	copyKeys := func() {
		if _, err := b.Do(ctx, append([]string{"DEL"}, probes...)...); err != nil {
			t.Fatalf("%s: DEL: %v", what, err)
		}
		for i, key := range keys {
			if _, err := b.Do(ctx, "COPY", key, probes[i], "REPLACE"); err != nil {
				t.Fatalf("%s: COPY: %v", what, err)
			}
		}
	}
	defer b.Do(ctx, append([]string{"DEL"}, probes...)...)
	for _, p := range []struct {
		wait  int64
		allow int64
	}{{retry - 1, 0}, {retry, 1}} {
		copyKeys() // afresh: the denial at retry-1 may repair a TTL
		res, err := b.Eval(ctx, src, probes, argsAt(now+p.wait))
		if err != nil {
			t.Fatalf("%s: probe: %v", what, err)
		}
		got, err := res.ints()
		if err != nil {
			t.Fatalf("%s: probe: %v", what, err)
		}
		if got[0] != p.allow {
			t.Errorf("%s: retry_after %d: the same call %d µs later gives %v, want allowed=%d",
				what, retry, p.wait, got, p.allow)
		}
	}
}

// ms is a duration in µs given in milliseconds, for readable tables.
const ms = 1000

// sec is one second in µs.
const sec = 1_000_000

// rate is a step of a rate script: allowed, remaining, retry_after,
// reset_after (and limiting, for the multi-limit scripts).
func rate(at, cost int64, want ...int64) step { return step{at: at, cost: cost, want: want} }

// acquire and release are steps of the concurrency scripts.
func acquire(at int64, id string, want ...int64) step {
	return step{at: at, id: id, script: "concurrency_acquire", want: want}
}

func release(at int64, id string, want ...int64) step {
	return step{at: at, id: id, script: "concurrency_release", want: want}
}

func persist(s step) step { s.persist = true; return s }

func withParams(s step, params ...string) step { s.params = params; return s }

func withMembers(s step, members ...string) step { s.members = members; return s }

func withValues(s step, values func(start int64) []string) step { s.values = values; return s }

// using makes s a call on the limits use (1-based, in call order) of a
// table with limits; lives are the keys' lives after a multi-limit write.
func using(s step, use []int, lives ...int64) step { s.use, s.lives = use, lives; return s }

// withLives gives the keys' lives after a multi-limit call on all limits.
func withLives(s step, lives ...int64) step { s.lives = lives; return s }

// withLimits gives the params of every limit of a table with limits for
// one step, in the order of the table's limits.
func withLimits(s step, limits ...[]string) step { s.limits = limits; return s }

// checkValues checks the string value of each key.
func checkValues(ctx context.Context, t *testing.T, b backend, keys, want []string, what string) {
	t.Helper()
	for i, key := range keys {
		v, err := b.Do(ctx, "GET", key)
		if err != nil {
			t.Fatalf("%s: GET %s: %v", what, key, err)
		}
		if v != want[i] {
			t.Errorf("%s: %s holds %#v, want %q", what, key, v, want[i])
		}
	}
}

// checkMembers checks the members of a sorted set key, in order, and the
// scores of those given with one (see logged).
func checkMembers(ctx context.Context, t *testing.T, b backend, key string, want []string, what string) {
	t.Helper()
	v, err := b.Do(ctx, "ZRANGE", key, "0", "-1", "WITHSCORES")
	if err != nil {
		t.Fatal(err)
	}
	got, scores := withScores(t, v)
	var w []string
	for _, m := range want {
		name, _, _ := expandMember(m, base)
		w = append(w, name)
	}
	if !slices.Equal(got, w) {
		t.Errorf("%s: members %v, want %v", what, got, w)
		return
	}
	for i, m := range want {
		if _, score, ok := expandMember(m, base); ok {
			// Scores come back as decimal or exponent notation, by backend.
			f, err := strconv.ParseFloat(scores[i], 64)
			if err != nil || int64(f) != score {
				t.Errorf("%s: member %s scored %s, want %d", what, w[i], scores[i], score)
			}
		}
	}
}

// withScores splits a ZRANGE ... WITHSCORES reply into members and scores:
// a flat array (RESP2, the sandbox) or one of pairs (RESP3).
func withScores(t testing.TB, v any) (members, scores []string) {
	t.Helper()
	arr, ok := v.([]any)
	if !ok {
		t.Fatalf("ZRANGE WITHSCORES replied %#v", v)
	}
	for i := 0; i < len(arr); i++ {
		if pair, ok := arr[i].([]any); ok && len(pair) == 2 {
			members, scores = append(members, fmt.Sprint(pair[0])), append(scores, fmt.Sprint(pair[1]))
			continue
		}
		if i+1 >= len(arr) {
			t.Fatalf("ZRANGE WITHSCORES replied %#v", v)
		}
		members, scores = append(members, fmt.Sprint(arr[i])), append(scores, fmt.Sprint(arr[i+1]))
		i++
	}
	return members, scores
}
