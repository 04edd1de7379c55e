package verify

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Report is the outcome of running steps on one or more environments.
type Report struct {
	Script   string   // the script's path, as given
	StepFile string   // the step file's path, when the steps came from one
	Envs     []string // names of the environments, the reference first
	Steps    int      // steps run
	Failures []Failure
	// Notes says what was not compared and why (a real server cannot
	// follow the clock of a step that reads TIME).
	Notes []string
}

// OK reports whether every step passed on every environment and the
// environments agreed.
func (r *Report) OK() bool { return len(r.Failures) == 0 }

// Failure is one expectation a step did not meet, or one disagreement
// between environments.
type Failure struct {
	Step *Step
	Env  string // the environment; "A vs B" for a disagreement
	What string // what was compared: "reply", "ttl KEY", the command of an expect, "keys"...
	Want string
	Got  string
	Keys []string // the call's KEYS and ARGV, expanded
	Args []string
	At   time.Time
}

// String formats the failure on several lines for people.
func (f Failure) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %q on %s: %s differs\n", f.Step.Name, f.Env, f.What)
	fmt.Fprintf(&b, "    at:       %s (+%v)\n", f.At.Format(time.RFC3339Nano), f.Step.At)
	fmt.Fprintf(&b, "    keys:     %s\n", quoteWords(f.Keys))
	fmt.Fprintf(&b, "    args:     %s\n", quoteWords(f.Args))
	if strings.Contains(f.Env, " vs ") {
		a, c, _ := strings.Cut(f.Env, " vs ")
		fmt.Fprintf(&b, "    %s: %s\n", a, f.Want)
		fmt.Fprintf(&b, "    %s: %s", c, f.Got)
	} else {
		fmt.Fprintf(&b, "    expected: %s\n", f.Want)
		fmt.Fprintf(&b, "    actual:   %s", f.Got)
	}
	return b.String()
}

func quoteWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		if w == "" || strings.ContainsAny(w, " \t\"\\") || !strconv.IsPrint(rune(w[0])) {
			w = strconv.Quote(w)
		}
		q[i] = w
	}
	return strings.Join(q, " ")
}

// RunStepFile runs the step file of the script at path (see StepFilePath)
// on every env, as RunSteps does.
func RunStepFile(ctx context.Context, path string, envs ...Env) (*Report, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	sf, err := ReadStepFile(StepFilePath(path))
	if err != nil {
		return nil, err
	}
	r, err := RunSteps(ctx, string(src), sf.Steps, envs...)
	if r != nil {
		r.Script, r.StepFile = path, sf.Path
	}
	return r, err
}

// RunSteps resets every env, then runs each step on all of them in
// lockstep: it sets the clock, runs the step's commands, calls the script
// and checks the reply, TTLs and expectations of the step. With several
// envs it is also a differential test: after each step, every env's reply
// and keyspace (keys, types, contents, TTLs) must equal the first env's.
//
// On an env without a virtual clock (a real server), key expiry is kept in
// step with a reference sandbox (the first Sandbox among envs, else one
// run alongside): before each step, keys the sandbox has let expire are
// deleted and the others get its remaining TTL, rounded up to whole
// milliseconds. On a RedisEnv this, the step's commands, the call and every
// read the step's checks make (its ttl and expect lines, the keyspace) run
// in one MULTI/EXEC transaction, so the server's own clock barely moves in
// between; after it, keys are kept alive until the next step sets their
// TTLs again. A step whose script reads TIME cannot follow the step time
// there: its checks are skipped on that env, which is left out of
// comparisons from then on, with a note. Which steps read TIME is learnt
// from the sandbox run.
//
// The error result is for failures to run (I/O, a closed env); what the
// steps find is in the Report.
func RunSteps(ctx context.Context, script string, steps []*Step, envs ...Env) (*Report, error) {
	r := newStepRunner(script, envs)
	if r.needProbe && r.probe == nil {
		sb, err := NewSandbox()
		if err != nil {
			return nil, err
		}
		defer sb.Close()
		r.probe, r.ownProbe = sb, true
		r.all = append([]Env{sb}, envs...)
	}
	for _, e := range r.all {
		if err := e.Reset(ctx); err != nil {
			return nil, fmt.Errorf("verify: reset %s: %w", e.Name(), err)
		}
	}
	for _, st := range steps {
		if err := r.step(ctx, st); err != nil {
			return nil, err
		}
	}
	if err := r.leaveExpiries(ctx); err != nil {
		return nil, err
	}
	return r.rep, nil
}

// stepRunner is what RunSteps keeps from one step to the next.
type stepRunner struct {
	script string
	envs   []Env // the envs compared
	all    []Env // every env whose clock is set: envs, after the probe when it is RunSteps' own
	// probe is the reference sandbox: the first Sandbox among envs, or one
	// RunSteps runs itself (ownProbe) when an env has no virtual clock
	// (needProbe) and no Sandbox is among envs.
	probe     *Sandbox
	needProbe bool
	ownProbe  bool
	diverged  []bool                   // per env: left out since a step read TIME
	expiries  map[string]time.Duration // the probe's keys and TTLs before the last step
	rep       *Report
}

func newStepRunner(script string, envs []Env) *stepRunner {
	r := &stepRunner{script: script, envs: envs, all: envs, diverged: make([]bool, len(envs)), rep: &Report{}}
	for _, e := range envs {
		r.rep.Envs = append(r.rep.Envs, e.Name())
		if sb, ok := e.(*Sandbox); ok && r.probe == nil {
			r.probe = sb
		}
		if !e.VirtualClock() {
			r.needProbe = true
		}
	}
	return r
}

// stepCall is one step at its instant, with its KEYS and ARGV expanded.
type stepCall struct {
	st         *Step
	at         time.Time
	keys, args []string
}

// fail reports a failure of the step on env.
func (r *stepRunner) fail(c *stepCall, env, what, want, got string) {
	r.rep.Failures = append(r.rep.Failures, Failure{Step: c.st, Env: env, What: what, Want: want, Got: got, Keys: c.keys, Args: c.args, At: c.at})
}

// step runs one step on every env, checks it and compares the envs.
func (r *stepRunner) step(ctx context.Context, st *Step) error {
	at := StartTime.Add(st.At)
	c := &stepCall{st: st, at: at, keys: expand(st.Keys, at), args: expand(st.Args, at)}
	if err := r.setTime(ctx, at); err != nil {
		return err
	}
	// The reference's keys and TTLs at this instant, before the step.
	if r.needProbe {
		r.expiries = r.probe.expiries()
	}
	if r.ownProbe {
		if _, err := execStep(ctx, r.probe, r.script, st, at, c.keys, c.args); err != nil {
			return err
		}
	}
	results := make([]*stepResult, len(r.envs))
	for i, e := range r.envs {
		res, err := r.run(ctx, i, e, c)
		if err != nil {
			return err
		}
		results[i] = res
	}
	if err := r.check(ctx, c, results); err != nil {
		return err
	}
	r.compare(c, results)
	r.rep.Steps++
	return nil
}

// setTime sets every env's clock to at.
func (r *stepRunner) setTime(ctx context.Context, at time.Time) error {
	for _, e := range r.all {
		var err error
		if c, ok := e.(virtualSetter); ok && r.needProbe {
			c.setVirtualTime(at) // the synchronisation before the step sets the TTLs
		} else {
			err = e.SetTime(ctx, at)
		}
		if err != nil {
			return fmt.Errorf("verify: set time on %s: %w", e.Name(), err)
		}
	}
	return nil
}

// run runs the step on env i, e: on a real server still compared, after
// setting its expiries from the reference's.
func (r *stepRunner) run(ctx context.Context, i int, e Env, c *stepCall) (*stepResult, error) {
	synced, isSynced := e.(syncedStepper)
	switch {
	case !e.VirtualClock() && !r.diverged[i] && isSynced:
		return synced.syncedStep(ctx, r.expiries, c.st, c.at, r.script, c.keys, c.args, len(r.envs) > 1)
	case !e.VirtualClock() && !r.diverged[i]:
		started := time.Now()
		if err := syncExpiry(ctx, r.expiries, e); err != nil {
			return nil, err
		}
		res, err := runStep(ctx, e, r.script, c.st, c.at, c.keys, c.args)
		if res != nil {
			res.started = started
		}
		return res, err
	default:
		return runStep(ctx, e, r.script, c.st, c.at, c.keys, c.args)
	}
}

// check checks the step's expectations on every env still compared; a
// real server is left out from a step that reads TIME on.
func (r *stepRunner) check(ctx context.Context, c *stepCall, results []*stepResult) error {
	readsTime := r.probe != nil && calledTime(r.probe.LastRun())
	for i, e := range r.envs {
		if r.diverged[i] {
			continue
		}
		if readsTime && !e.VirtualClock() {
			r.diverged[i] = true
			r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("step %q reads TIME, which %s cannot set: not checked there from this step on (pass the time as an argument, e.g. $now)", c.st.Name, e.Name()))
			continue
		}
		if err := r.checkEnv(ctx, c, e, results[i]); err != nil {
			return err
		}
	}
	return nil
}

// checkEnv checks the reply, the TTLs and the expectations of the step on
// e, which returned res.
func (r *stepRunner) checkEnv(ctx context.Context, c *stepCall, e Env, res *stepResult) error {
	st := c.st
	if err := res.read(ctx, e, st, c.at, len(r.envs) > 1); err != nil {
		return err
	}
	if st.Reply != nil && !st.Reply.Match(res.reply) {
		r.fail(c, e.Name(), "reply", st.Reply.String(), res.reply.String())
	}
	for j, tc := range st.TTLs {
		tol := time.Duration(tc.Tolerance) * time.Millisecond
		if !e.VirtualClock() {
			tol = max(tol, res.slack())
		}
		if got := res.ttls[j]; got.Kind != KindInt || !ttlMatches(tc.PTTL, got.Int, tol, !e.VirtualClock()) {
			r.fail(c, e.Name(), "ttl "+tc.Key, tc.String(), got.String())
		}
	}
	for j, ex := range st.Expects {
		if got := res.expects[j]; !ex.Reply.Match(got) {
			r.fail(c, e.Name(), strings.Join(ex.Args, " "), ex.Reply.String(), got.String())
		}
	}
	return nil
}

// compare is the differential: every env against the first one still
// compared, reply and keyspace.
func (r *stepRunner) compare(c *stepCall, results []*stepResult) {
	ref := -1
	for i := range r.envs {
		if r.diverged[i] {
			continue
		}
		if ref < 0 {
			ref = i
			continue
		}
		pair := r.envs[ref].Name() + " vs " + r.envs[i].Name()
		a, b := results[ref], results[i]
		if !agree(c.st.Reply, a.reply, b.reply) {
			r.fail(c, pair, "reply", a.reply.String(), b.reply.String())
		}
		tol, onReal := pairSlack(r.envs[ref], a, r.envs[i], b)
		if d := diffStates(a.state, b.state, tol, onReal); d != "" {
			r.fail(c, pair, "keyspace", formatStates(a.state), formatStates(b.state)+"\n    difference: "+d)
		}
	}
}

// pairSlack is how far the TTLs of two envs' keyspaces may differ: the
// larger slack of those that are real servers, and whether one is.
func pairSlack(ea Env, a *stepResult, eb Env, b *stepResult) (tol time.Duration, onReal bool) {
	for _, p := range []struct {
		e Env
		r *stepResult
	}{{ea, a}, {eb, b}} {
		if !p.e.VirtualClock() {
			tol, onReal = max(tol, p.r.slack()), true
		}
	}
	return tol, onReal
}

// leaveExpiries leaves the real servers' TTLs as the reference's at the
// last instant.
func (r *stepRunner) leaveExpiries(ctx context.Context) error {
	for i, e := range r.envs {
		if !e.VirtualClock() && !r.diverged[i] && r.expiries != nil {
			if err := syncExpiry(ctx, r.probe.expiries(), e); err != nil {
				return err
			}
		}
	}
	return nil
}

// stepResult is what one env did in one step: the reply, and what the
// step's checks read afterwards.
type stepResult struct {
	reply   Reply
	ttls    []Reply // PTTL of each ttl line
	expects []Reply // reply of each expect line
	state   []keyState
	done    bool // the reads above are made
	// On a real server: the step began at started (its TTLs run in real
	// time from then on), or the reads were made in the step's transaction,
	// which took exec.
	started time.Time
	exec    time.Duration
}

// read makes the reads of the step's checks, unless the env made them
// already in the step's transaction.
func (r *stepResult) read(ctx context.Context, e Env, st *Step, at time.Time, keyspace bool) error {
	if r.done {
		return nil
	}
	for _, tc := range st.TTLs {
		got, err := e.Do(ctx, "PTTL", tc.Key)
		if err != nil {
			return err
		}
		r.ttls = append(r.ttls, got)
	}
	for _, ex := range st.Expects {
		got, err := e.Do(ctx, expand(ex.Args, at)...)
		if err != nil {
			return err
		}
		r.expects = append(r.expects, got)
	}
	if keyspace {
		s, err := snapshot(ctx, e)
		if err != nil {
			return err
		}
		r.state = s
	}
	r.done = true
	return nil
}

// slack is how far TTLs read on a real server may be from the reference's.
func (r *stepResult) slack() time.Duration {
	if r.started.IsZero() {
		return r.exec.Truncate(time.Millisecond) + time.Millisecond + TTLTolerance
	}
	return realSlack(r.started)
}

// runStep runs the step's commands on env and calls the script.
func runStep(ctx context.Context, env Env, script string, st *Step, at time.Time, keys, args []string) (*stepResult, error) {
	r, err := execStep(ctx, env, script, st, at, keys, args)
	if err != nil {
		return nil, err
	}
	return &stepResult{reply: r}, nil
}

// realSlack is how far TTLs read now on a real server may be from the
// reference's: the real time elapsed since the step began there, rounded
// up to a millisecond, plus TTLTolerance.
func realSlack(started time.Time) time.Duration {
	return time.Since(started).Truncate(time.Millisecond) + time.Millisecond + TTLTolerance
}

// execStep runs the step's commands on env and calls the script.
func execStep(ctx context.Context, env Env, script string, st *Step, at time.Time, keys, args []string) (Reply, error) {
	for _, c := range st.Do {
		r, err := env.Do(ctx, expand(c.Args, at)...)
		if err != nil {
			return Reply{}, err
		}
		if r.Kind == KindError {
			return Reply{}, fmt.Errorf("verify: step %q: do %s on %s: %s", st.Name, strings.Join(c.Args, " "), env.Name(), r.Str)
		}
	}
	r, err := env.Eval(ctx, script, keys, args)
	if err != nil {
		return Reply{}, fmt.Errorf("verify: step %q on %s: %w", st.Name, env.Name(), err)
	}
	return r, nil
}

// A real server counts TTLs in milliseconds of its own clock, which keeps
// running while the virtual clock stands still. Before each step, the
// expiry of every key there is set from the reference sandbox's keys and
// TTLs at the step's instant: keys the reference has let expire are
// deleted, the others get the reference's remaining TTL rounded up to a
// whole millisecond, and at least minSyncTTL, so that a key a few
// microseconds from its expiry cannot expire before the script reads it
// (a script sees the server's time when it starts, not the transaction's).
// A RedisEnv does this, the step's commands and the script in one
// MULTI/EXEC transaction (syncedStep): nothing runs in between, and a
// script that reads a TTL gets the reference's.
const minSyncTTL = 50 * time.Millisecond

// syncedStepper is an env without a virtual clock that runs a step with
// its expiry synchronisation atomically.
type syncedStepper interface {
	syncedStep(ctx context.Context, ttls map[string]time.Duration, st *Step, at time.Time, script string, keys, args []string, keyspace bool) (*stepResult, error)
}

// virtualSetter is an env whose clock RunSteps moves without its own TTL
// emulation, because the synchronisation before each step sets its TTLs.
type virtualSetter interface {
	setVirtualTime(t time.Time)
}

// syncCommands are the commands that make the keys of a server (present)
// expire as the reference's (ttls).
func syncCommands(present []string, ttls map[string]time.Duration) [][]string {
	var cmds [][]string
	for _, k := range present {
		if _, ok := ttls[k]; !ok {
			cmds = append(cmds, []string{"DEL", k})
		}
	}
	keys := make([]string, 0, len(ttls))
	for k := range ttls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		d := ttls[k]
		if d == 0 {
			cmds = append(cmds, []string{"PERSIST", k})
			continue
		}
		ms := (max(d, minSyncTTL) + time.Millisecond - 1) / time.Millisecond
		cmds = append(cmds, []string{"PEXPIRE", k, strconv.FormatInt(int64(ms), 10)})
	}
	return cmds
}

// syncExpiry sets the expiry of every key of env from ttls, one command at
// a time, for envs that cannot do it in a transaction.
func syncExpiry(ctx context.Context, ttls map[string]time.Duration, env Env) error {
	r, err := env.Do(ctx, "KEYS", "*")
	if err != nil {
		return err
	}
	var present []string
	for _, k := range r.Elems {
		present = append(present, k.Str)
	}
	for _, cmd := range syncCommands(present, ttls) {
		if _, err := env.Do(ctx, cmd...); err != nil {
			return err
		}
	}
	return nil
}

func calledTime(run *Run) bool {
	if run == nil {
		return false
	}
	for _, c := range run.Calls {
		if c.Name() == "TIME" {
			return true
		}
	}
	return false
}

// ttlMatches compares an expected PTTL with the one read, which may be up
// to tol away: the step's own tolerance, and on a real server, whose TTLs
// run in real time and follow the virtual clock by whole milliseconds, at
// least the step's slack (see pttlClose).
func ttlMatches(want, got int64, tol time.Duration, real bool) bool {
	return pttlClose(want, got, tol, real)
}

var luaErrLocation = regexp.MustCompile(`^(.*?user_script:\d+:)`)

// sameReply reports whether two environments' replies agree. Error texts
// are compared after normalizeError; for Lua runtime errors, whose wording
// differs between Lua implementations, only the error code and the
// location (user_script:LINE:) are compared. Bulk strings holding JSON
// objects or arrays agree when they hold the same JSON value: cjson orders
// object members as the Lua table iterates them, which differs between
// gopher-lua and Redis.
func sameReply(a, b Reply) bool {
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case KindError:
		x, y := normalizeError(a.Str), normalizeError(b.Str)
		if x == y {
			return true
		}
		lx, ly := luaErrLocation.FindString(x), luaErrLocation.FindString(y)
		return lx != "" && lx == ly
	case KindArray:
		if len(a.Elems) != len(b.Elems) {
			return false
		}
		for i := range a.Elems {
			if !sameReply(a.Elems[i], b.Elems[i]) {
				return false
			}
		}
		return true
	case KindBulk:
		return a.Str == b.Str || jsonDocument(a.Str) && jsonDocument(b.Str) && sameJSON(a.Str, b.Str)
	}
	return a.Equal(b)
}

// agree reports whether two environments' replies to a step agree. Where
// the step's pattern (nil when it has none) allows a range of integers,
// each reply matched it on its own and they may differ; elsewhere they
// must be the same (see sameReply).
func agree(pattern *Reply, a, b Reply) bool {
	if pattern == nil {
		return sameReply(a, b)
	}
	switch pattern.Kind {
	case KindRange:
		return pattern.Match(a) && pattern.Match(b)
	case KindArray:
		if a.Kind != KindArray || b.Kind != KindArray || len(a.Elems) != len(pattern.Elems) || len(b.Elems) != len(pattern.Elems) {
			return sameReply(a, b)
		}
		for i := range pattern.Elems {
			if !agree(&pattern.Elems[i], a.Elems[i], b.Elems[i]) {
				return false
			}
		}
		return true
	}
	return sameReply(a, b)
}

// diffStates describes the first difference between two keyspaces, or
// returns "".
func diffStates(a, b []keyState, tol time.Duration, real bool) string {
	am := map[string]keyState{}
	for _, k := range a {
		am[k.Key] = k
	}
	bm := map[string]keyState{}
	for _, k := range b {
		bm[k.Key] = k
	}
	for _, x := range a {
		y, ok := bm[x.Key]
		if !ok {
			return fmt.Sprintf("key %q missing from the second", x.Key)
		}
		if x.Type != y.Type {
			return fmt.Sprintf("key %q is a %s, then a %s", x.Key, x.Type, y.Type)
		}
		if x.Value != y.Value && !(jsonDocument(x.raw) && jsonDocument(y.raw) && sameJSON(x.raw, y.raw)) {
			return fmt.Sprintf("key %q holds %s, then %s", x.Key, x.Value, y.Value)
		}
		if !pttlClose(x.PTTL, y.PTTL, tol, real) {
			return fmt.Sprintf("key %q has PTTL %d, then %d", x.Key, x.PTTL, y.PTTL)
		}
	}
	for _, y := range b {
		if _, ok := am[y.Key]; !ok {
			return fmt.Sprintf("key %q missing from the first", y.Key)
		}
	}
	return ""
}

// pttlClose reports whether two PTTLs (-1: no TTL, -2: no key) are within
// tol of each other. When one was read on a real server (real), two TTLs
// both under minSyncTTL plus tol are close too: a key that close to its
// expiry is given minSyncTTL there before each step.
func pttlClose(a, b int64, tol time.Duration, real bool) bool {
	if a < 0 || b < 0 {
		return a == b
	}
	d := a - b
	if d < 0 {
		d = -d
	}
	if d <= tol.Milliseconds() {
		return true
	}
	near := (minSyncTTL + tol).Milliseconds()
	return real && a <= near && b <= near
}

func formatStates(s []keyState) string {
	if len(s) == 0 {
		return "(no keys)"
	}
	parts := make([]string, len(s))
	for i, k := range s {
		parts[i] = fmt.Sprintf("%s %s %s pttl=%d", strconv.Quote(k.Key), k.Type, k.Value, k.PTTL)
	}
	return strings.Join(parts, "; ")
}
