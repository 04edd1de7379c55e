package verify_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/verify"
)

// stepCase is a script and a step file for it.
type stepCase struct {
	name, script, steps string
}

// stepCases lists every script with steps: the test limiter, and each
// built-in script of scripts/ with its step file, from scripts/ when it has
// one there and from testdata/builtin otherwise (both when both exist).
func stepCases(t *testing.T) []stepCase {
	t.Helper()
	cases := []stepCase{{"testdata/limiter/fixed_window", "testdata/limiter/fixed_window.lua", "testdata/limiter/fixed_window.steps.txtar"}}
	builtins, err := filepath.Glob("../scripts/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	if len(builtins) == 0 {
		t.Fatal("no built-in scripts in ../scripts")
	}
	for _, script := range builtins {
		name := strings.TrimSuffix(filepath.Base(script), ".lua")
		found := false
		for _, steps := range []string{verify.StepFilePath(script), filepath.Join("testdata/builtin", name+".steps.txtar")} {
			if _, err := os.Stat(steps); err == nil {
				cases = append(cases, stepCase{"scripts/" + name + " with " + steps, script, steps})
				found = true
			}
		}
		if !found {
			t.Errorf("built-in script %s has no step file (want %s or testdata/builtin/%s.steps.txtar)", script, verify.StepFilePath(script), name)
		}
	}
	return cases
}

func runCase(t *testing.T, c stepCase, envs []verify.Env) *verify.Report {
	t.Helper()
	src, err := os.ReadFile(c.script)
	if err != nil {
		t.Fatal(err)
	}
	sf, err := verify.ReadStepFile(c.steps)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := verify.RunSteps(context.Background(), string(src), sf.Steps, envs...)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Steps != len(sf.Steps) {
		t.Errorf("ran %d steps, the file has %d", rep.Steps, len(sf.Steps))
	}
	for _, f := range rep.Failures {
		t.Errorf("%s:%d: %s", c.steps, f.Step.Line, f)
	}
	return rep
}

// TestDifferential runs every step file on the sandbox, miniredis and a
// real redis-server: each step's expectations must hold on all three, and
// after each step the three must agree on the reply and on every key, value
// and TTL.
func TestDifferential(t *testing.T) {
	envs := verify.EnvsT(t)
	for _, c := range stepCases(t) {
		t.Run(c.name, func(t *testing.T) {
			rep := runCase(t, c, envs)
			for _, n := range rep.Notes {
				t.Log(n)
			}
		})
	}
}

// TestDifferentialCatchesDisagreement proves the differential runner is not
// vacuous: concatenating a float prints 17 digits in gopher-lua and 14 in
// Redis' Lua 5.1, and a hash field written by miniredis' Lua differs too.
func TestDifferentialCatchesDisagreement(t *testing.T) {
	envs := verify.EnvsT(t)
	script := "redis.call('SET', KEYS[1], '' .. 1/3, 'PX', 1000) return redis.call('GET', KEYS[1])"
	steps := []*verify.Step{{Name: "float text", Keys: []string{"k"}}}
	rep, err := verify.RunSteps(context.Background(), script, steps, envs...)
	if err != nil {
		t.Fatal(err)
	}
	var replies, keyspaces []string
	for _, f := range rep.Failures {
		switch f.What {
		case "reply":
			replies = append(replies, f.Env)
		case "keyspace":
			keyspaces = append(keyspaces, f.Env)
		}
	}
	real := envs[2].Name()
	if !contains(replies, "sandbox vs "+real) || !contains(keyspaces, "sandbox vs "+real) {
		t.Fatalf("the runner did not report the float text disagreeing with real Redis; failures: %v", rep.Failures)
	}
}

// TestDifferentialTTL shows the keyspace comparison covers TTLs: a script
// that sets a TTL depending on the engine must be reported.
func TestDifferentialTTL(t *testing.T) {
	sb := verify.SandboxT(t)
	mini := verify.RunT(t)
	// tostring is mended in the sandbox but not in miniredis: the
	// length of the text, and so the TTL, differs.
	script := "redis.call('SET', KEYS[1], 'x', 'PX', 1000 + #tostring(1/3)) return 1"
	rep, err := verify.RunSteps(context.Background(), script, []*verify.Step{{Name: "ttl", Keys: []string{"k"}}}, sb, mini)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) != 1 || rep.Failures[0].What != "keyspace" || !strings.Contains(rep.Failures[0].Got, "PTTL") {
		t.Fatalf("want one keyspace failure on the PTTL, got %v", rep.Failures)
	}
}

// TestRealEnvFollowsVirtualTime checks the TTL emulation of a real server:
// moving the virtual clock moves every TTL by as much, and expires keys
// whose time is up, though the real clock barely moves.
func TestRealEnvFollowsVirtualTime(t *testing.T) {
	ctx := context.Background()
	r := verify.RedisT(t)
	// The keys' TTLs also run in real time meanwhile, and the emulation
	// counts real time from the Reset: a TTL read may be off by the real
	// time elapsed, and a millisecond for rounding.
	began := time.Now()
	if err := r.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	slack := func() int64 { return time.Since(began).Milliseconds() + 2 }
	mustDo(t, r, "SET", "short", "x", "PX", "1500")
	mustDo(t, r, "SET", "long", "x", "PX", "600000")
	mustDo(t, r, "SET", "forever", "x")
	if err := r.SetTime(ctx, verify.StartTime.Add(1000*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	pttl := mustDo(t, r, "PTTL", "short").Int
	if pttl > 500+slack() || pttl < 500-slack() {
		t.Errorf("short: PTTL %d after 1s of virtual time, want about 500", pttl)
	}
	if err := r.SetTime(ctx, verify.StartTime.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := mustDo(t, r, "EXISTS", "short").Int; got != 0 {
		t.Errorf("short still exists 0.5s after its TTL")
	}
	if got := mustDo(t, r, "PTTL", "long").Int; got > 598000+slack() || got < 598000-slack() {
		t.Errorf("long: PTTL %d after 2s, want about 598000", got)
	}
	if got := mustDo(t, r, "PTTL", "forever").Int; got != -1 {
		t.Errorf("forever: PTTL %d, want -1", got)
	}
}

func TestDialRedisRefusesNonEmptyDatabase(t *testing.T) {
	ctx := context.Background()
	r := verify.RedisT(t)
	mustDo(t, r, "SET", "someone's", "data")
	_, err := verify.DialRedis(ctx, r.Addr())
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("DialRedis on a non-empty database: err = %v, want a refusal", err)
	}
	other, err := verify.DialRedis(ctx, "redis://"+r.Addr()+"/3")
	if err != nil {
		t.Fatalf("DialRedis on empty database 3: %v", err)
	}
	defer other.Close()
	if other.DB() != 3 {
		t.Errorf("DB() = %d, want 3", other.DB())
	}
	if got := mustDo(t, r, "GET", "someone's"); got.Str != "data" {
		t.Errorf("the other database was touched: %v", got)
	}
}

func mustDo(t *testing.T, e verify.Env, args ...string) verify.Reply {
	t.Helper()
	r, err := e.Do(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	if r.IsError() {
		t.Fatalf("%v: %v", args, r)
	}
	return r
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestDifferentialExpiryBoundaries: keys one microsecond before their
// expiry, exactly at it, and two steps at one instant behave the same on a
// real server, whose TTLs count milliseconds of its own wall clock, as on
// the virtual clocks. The real server gets each step's TTLs in the step's
// own transaction and keeps its keys alive between steps, so how far its
// clock moves between steps (far, on a loaded machine) does not matter.
func TestDifferentialExpiryBoundaries(t *testing.T) {
	script := "local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('PEXPIRE', KEYS[1], 1000) end return n"
	n := func(at time.Duration, want int64) *verify.Step {
		return &verify.Step{Name: "at " + at.String(), At: at, Keys: []string{"{b}:n"}, Reply: ptr(verify.Int(want))}
	}
	steps := []*verify.Step{
		n(0, 1), n(999999*time.Microsecond, 2), n(999999*time.Microsecond, 3),
		n(time.Second, 1), n(time.Second, 2), n(1999999*time.Microsecond, 3), n(2*time.Second, 1),
	}
	rep, err := verify.RunSteps(context.Background(), script, steps, verify.EnvsT(t)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Failures {
		t.Error(f)
	}
}

// TestRunT: the miniredis helper gives a working rueidis client, and its
// clock moves TIME and TTLs together.
func TestRunT(t *testing.T) {
	ctx := context.Background()
	m := verify.RunT(t)
	if err := m.Client.Do(ctx, m.Client.B().Set().Key("k").Value("v").Px(1500*time.Millisecond).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	m.Advance(time.Second)
	now, err := m.Client.Do(ctx, m.Client.B().Time().Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.FormatInt(verify.StartTime.Add(time.Second).Unix(), 10); now[0] != want {
		t.Errorf("TIME = %v, want %s", now, want)
	}
	pttl, err := m.Client.Do(ctx, m.Client.B().Pttl().Key("k").Build()).AsInt64()
	if err != nil || pttl != 500 {
		t.Errorf("PTTL after 1s = %d, %v; want 500", pttl, err)
	}
	m.Advance(500 * time.Millisecond)
	if n, _ := m.Client.Do(ctx, m.Client.B().Exists().Key("k").Build()).AsInt64(); n != 0 {
		t.Errorf("key still there when its TTL is up")
	}
}

// TestRealServerRepliesHoldTTLs: a script that replies with a TTL it reads
// gets, on a real server, the TTL the virtual clock gives (the harness sets
// every key's TTL from the reference in the same transaction as the call),
// and a tolerance in the step file absorbs the real server's milliseconds.
func TestRealServerRepliesHoldTTLs(t *testing.T) {
	sf, err := verify.ParseStepFile("ttl.steps.txtar", []byte(`
-- set --
keys {t}:k
args 20000
reply [1, 20000±50]
ttl {t}:k 20000

-- five seconds later --
at 5s
args 0
reply [0, 14950..15000]

-- a key one millisecond from its expiry still exists --
# On a real server it is given 50 ms, so that it cannot expire before the
# script reads it.
at 19999ms
reply [0, 1..50]

-- gone --
at 20s
reply [0, -2]
`))
	if err != nil {
		t.Fatal(err)
	}
	script := `if tonumber(ARGV[1]) > 0 then redis.call('SET', KEYS[1], 1, 'PX', ARGV[1]) return {1, redis.call('PTTL', KEYS[1])} end
return {0, redis.call('PTTL', KEYS[1])}`
	rep, err := verify.RunSteps(context.Background(), script, sf.Steps, verify.EnvsT(t)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Failures {
		t.Error(f)
	}
	if rep.Steps != 4 || len(rep.Notes) != 0 {
		t.Errorf("%d steps, notes %v", rep.Steps, rep.Notes)
	}
}

// TestDifferentialJSONDocuments: cjson orders object members as the Lua
// table iterates them, which differs between gopher-lua and Redis; stored
// and returned JSON documents are compared as JSON, and a json: pattern
// matches either order.
func TestDifferentialJSONDocuments(t *testing.T) {
	sf, err := verify.ParseStepFile("doc.steps.txtar", []byte(`
-- write --
keys {d}:doc
args ada 36
reply json:`+"`"+`{"name":"ada","age":36,"tags":["x"],"zip":"1000","city":"paris"}`+"`"+`
expect GET {d}:doc => json:`+"`"+`{"zip":"1000","city":"paris","tags":["x"],"name":"ada","age":36}`+"`"+`
`))
	if err != nil {
		t.Fatal(err)
	}
	script := `local doc = {name = ARGV[1], age = tonumber(ARGV[2]), tags = {'x'}, zip = '1000', city = 'paris'}
local s = cjson.encode(doc)
redis.call('SET', KEYS[1], s, 'PX', 60000)
return s`
	rep, err := verify.RunSteps(context.Background(), script, sf.Steps, verify.EnvsT(t)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Failures {
		t.Error(f)
	}
}
