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

// A table is a sequence of calls to one script on one key at fixed instants,
// with the exact reply each must give. The runner checks more than the
// reply after every step; see runTable.
type table struct {
	name   string
	script string   // default script of the steps
	params []string // ARGV before cost (rate scripts) or before id (concurrency_acquire)
	steps  []step
}

// step is one call. Rate scripts take params, then cost, then now;
// concurrency_acquire takes params, then id, then now; concurrency_release
// takes id, then now.
type step struct {
	at      int64    // µs after base
	cost    int64    // rate scripts
	id      string   // concurrency scripts
	script  string   // overrides the table's script
	params  []string // overrides the table's params
	want    []int64  // the reply; bools as 1/0
	persist bool     // remove the key's TTL before the call: the call must restore it
	write   int      // 0: derived from the reply; 1: must write; -1: must not write; 2: not checked
	ttl     int64    // expected key life in µs after a write, when it is not reset_after
	members []string // the sorted set's members after the call, in order (see logged)
	fields  []string // the hash's fields after the call, in any order
}

// logged names the sliding-log member of running total total and cost c
// (see sliding_log.lua), logged at us after base; the runner checks its
// score too.
func logged(us, total, c int64) string { return fmt.Sprintf("@%d=%016d:%d", us, total, c) }

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

// argv builds the call's ARGV; with useTime, now is sent unset (as the
// generated wrappers send an unset optional argument: an empty string).
func (tb table) argv(s step, useTime bool) []string {
	params := tb.params
	if s.params != nil {
		params = s.params
	}
	var args []string
	switch tb.scriptOf(s) {
	case "concurrency_acquire":
		args = append(slices.Clone(params), s.id)
	case "concurrency_release":
		args = []string{s.id}
	default:
		args = append(slices.Clone(params), strconv.FormatInt(s.cost, 10))
	}
	if useTime {
		return append(args, "")
	}
	return append(args, strconv.FormatInt(base+s.at, 10))
}

// argvAt is argv with now set to at µs since the epoch.
func (tb table) argvAt(s step, at int64) []string {
	args := tb.argv(s, false)
	args[len(args)-1] = strconv.FormatInt(at, 10)
	return args
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

// runTable runs tb on b, on key, and checks after every step:
//   - the reply equals want;
//   - a write leaves the key with a PTTL of its useful life (reset_after,
//     or step.ttl) rounded up to whole ms, or deletes it when that is 0;
//   - a call that must not write (a denial, a cost of 0) writes nothing:
//     the server's write counter does not move, or the key's value and
//     TTL are unchanged;
//   - a key found without TTL (step.persist) has it back;
//   - when retry_after > 0, the same call on a copy of the state is denied
//     at now+retry_after-1 and allowed at now+retry_after;
//   - sliding_log never holds more members than limit.
//
// With useTime the calls leave now unset and the backend's clock (which
// must be settable) gives the time through Redis TIME.
func runTable(t *testing.T, b backend, tb table, useTime bool) {
	ctx := context.Background()
	key := "sluice:{" + tb.name + "}:state"
	probe := "sluice:{" + tb.name + "}:probe"
	if _, err := b.Do(ctx, "DEL", key, probe); err != nil {
		t.Fatal(err)
	}
	for i, s := range tb.steps {
		script := tb.scriptOf(s)
		what := fmt.Sprintf("step %d (%s at +%dµs, cost %d, id %q)", i+1, script, s.at, s.cost, s.id)
		now := base + s.at
		b.SetClock(now)
		if s.persist {
			if n, err := b.Do(ctx, "PERSIST", key); err != nil || n != int64(1) {
				t.Fatalf("%s: PERSIST %s = %v, %v; want 1 (the key should exist with a TTL)", what, key, n, err)
			}
		}
		before, counted, err := b.Writes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var snap string
		if !counted {
			snap = snapshot(ctx, t, b, key)
		}
		res, err := b.Eval(ctx, source(t, script), []string{key}, tb.argv(s, useTime))
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
		reset := got[resetIndex(script)]
		life := reset
		if s.ttl != 0 {
			life = s.ttl
		}
		switch {
		case s.write == 2:
		case tb.writes(s) || s.persist:
			wantTTL(t, what, res.PTTL[0], life, res.Exact)
		case counted:
			after, _, err := b.Writes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if after != before {
				t.Errorf("%s: the server made %d writes, want none", what, after-before)
			}
		default:
			if now := snapshot(ctx, t, b, key); now != snap {
				t.Errorf("%s wrote: before %s, after %s", what, snap, now)
			}
		}
		if script == "sliding_log" {
			limit, _ := strconv.ParseInt(tb.params[0], 10, 64)
			if n, err := b.Do(ctx, "ZCARD", key); err != nil || n.(int64) > limit {
				t.Errorf("%s: ZCARD %v (%v), want at most %d", what, n, err, limit)
			}
		}
		if len(got) > 2 && script != "concurrency_release" && got[2] > 0 {
			checkRetry(ctx, t, b, tb, s, key, probe, now+got[2], what)
		}
		if s.members != nil {
			checkMembers(ctx, t, b, key, s.members, what)
		}
		if s.fields != nil {
			checkFields(ctx, t, b, key, s.fields, what)
		}
	}
}

// checkRetry copies the state of key to probe and checks that step s is
// denied there at at-1 and allowed at at.
func checkRetry(ctx context.Context, t *testing.T, b backend, tb table, s step, key, probe string, at int64, what string) {
	t.Helper()
	argsAt := func(now int64) []string { return tb.argvAt(s, now) }
	probeRetry(ctx, t, b, source(t, tb.scriptOf(s)), key, probe, argsAt, at-(base+s.at), base+s.at, what)
}

// probeRetry copies the state of key to probe and checks that the call
// argsAt builds is denied there at now+retry-1 and allowed at now+retry.
// The backend clock is left alone: now is passed explicitly.
func probeRetry(ctx context.Context, t *testing.T, b backend, src, key, probe string, argsAt func(now int64) []string, retry, now int64, what string) {
	t.Helper()
	if _, err := b.Do(ctx, "COPY", key, probe, "REPLACE"); err != nil {
		t.Fatalf("%s: COPY: %v", what, err)
	}
	defer b.Do(ctx, "DEL", probe)
	for _, p := range []struct {
		wait  int64
		allow int64
	}{{retry - 1, 0}, {retry, 1}} {
		res, err := b.Eval(ctx, src, []string{probe}, argsAt(now+p.wait))
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

func withFields(s step, fields ...string) step { s.fields = fields; return s }

// checkFields checks the field names of a hash key, in any order.
func checkFields(ctx context.Context, t *testing.T, b backend, key string, want []string, what string) {
	t.Helper()
	v, err := b.Do(ctx, "HKEYS", key)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range v.([]any) {
		got = append(got, f.(string))
	}
	slices.Sort(got)
	w := slices.Clone(want)
	slices.Sort(w)
	if !slices.Equal(got, w) {
		t.Errorf("%s: hash fields %v, want %v", what, got, w)
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
