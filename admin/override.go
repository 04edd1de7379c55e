package admin

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/overrides"
	"github.com/sluice-go/sluice/policyfile"
)

const overrideUsage = `usage:
  sluice override set  -redis URL -policy NAME (-rate N [-period D] [-burst N] | -exempt | -block) [-for D | -until TIME] [-reason TEXT] IDENTITY
  sluice override get  -redis URL -policy NAME IDENTITY
  sluice override rm   -redis URL -policy NAME IDENTITY
  sluice override list -redis URL [-policy NAME]

Overrides are per-identity exceptions to a policy, kept in Redis and obeyed
by every replica on its next decision: a limit of its own (the policy's
algorithm and state, other numbers), exempt (the policy does not apply) or
block (denied without asking Redis), until a time or for good.

IDENTITY is the key the policy counts: ip:203.0.113.7, sub:alice,
key:9f86d081884c7d659a2feaa0c55ad015 (as "sluice inspect" and the
overrides list show it), or, with -config FILE, request attributes from
which the policy's own identity computes it (api_key=SECRET, ip=ADDR, ...;
raw API keys are hashed and never printed).

`

// overrideFlags are the flags every override subcommand takes.
type overrideFlags struct {
	redis  redisFlags
	policy string
	config string
	json   bool
}

func (o *overrideFlags) add(fs *flag.FlagSet) {
	o.redis.add(fs)
	fs.StringVar(&o.policy, "policy", "", "the policy's name")
	fs.StringVar(&o.config, "config", "", "a policy file: names the policies, and lets IDENTITY be request attributes (api_key=..., ip=...)")
	fs.BoolVar(&o.json, "json", false, "print JSON")
}

func (e *env) override(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, overrideUsage+attributesHelp)
		return ExitUsage
	}
	switch args[0] {
	case "set":
		return e.overrideSet(args[1:])
	case "get", "rm", "remove", "delete":
		return e.overrideGetRemove(args[0] == "get", args[1:])
	case "list", "ls":
		return e.overrideList(args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(e.stdout, overrideUsage+attributesHelp)
		return ExitOK
	}
	fmt.Fprintf(e.stderr, "sluice override: unknown subcommand %q: want set, get, list or rm\n", args[0])
	return ExitUsage
}

// identity resolves the IDENTITY arguments of an override or reset
// command: a key as given, or request attributes through the file.
func (e *env) identity(o *overrideFlags, args []string) (string, error) {
	if len(args) == 0 {
		return "", fmt.Errorf("no IDENTITY given: a key such as ip:203.0.113.7, or request attributes with -config")
	}
	if o.config == "" || !isAttribute(args[0]) {
		if len(args) > 1 {
			return "", fmt.Errorf("one IDENTITY, got %d arguments (%s); request attributes need -config", len(args), strings.Join(args, " "))
		}
		return args[0], nil
	}
	c, err := policyfile.Load(o.config)
	if err != nil {
		return "", err
	}
	cfg, err := httplimit.FromFile(c, nil)
	if err != nil {
		return "", err
	}
	req, err := newRequest(e.ctx, c, args)
	if err != nil {
		return "", err
	}
	id, ok, err := policyKey(cfg, o.policy, req)
	if err != nil {
		return "", fmt.Errorf("%s: %w", o.config, err)
	}
	if !ok {
		return "", fmt.Errorf("policy %q finds no identity in that request: give the attributes its key reads", o.policy)
	}
	return id, nil
}

// checkPolicy fails when a policy file is given and has no policy named
// name.
func checkPolicy(config, name string) error {
	if config == "" {
		return nil
	}
	c, err := policyfile.Load(config)
	if err != nil {
		return err
	}
	found := false
	c.AllPolicies(func(_ string, p *policyfile.Policy) { found = found || p.Name == name })
	if !found {
		return fmt.Errorf("%s has no policy named %q", config, name)
	}
	return nil
}

func (e *env) overrideSet(args []string) int {
	var o overrideFlags
	var (
		rate, burst   int64
		period, dur   time.Duration
		until, reason string
		exempt, block bool
	)
	fs := e.flagSet("override set", overrideUsage+attributesHelp)
	o.add(fs)
	fs.Int64Var(&rate, "rate", 0, "the identity's own rate (a limit override): requests per period, or for a concurrency policy requests in flight")
	fs.DurationVar(&period, "period", 0, "the identity's own period (default: the policy's)")
	fs.Int64Var(&burst, "burst", 0, "the identity's own burst, gcra and token_bucket (default: the policy's)")
	fs.BoolVar(&exempt, "exempt", false, "the policy does not apply to the identity")
	fs.BoolVar(&block, "block", false, "the policy denies the identity every request, without asking Redis")
	fs.DurationVar(&dur, "for", 0, "the override ends this long from now (e.g. 72h)")
	fs.StringVar(&until, "until", "", "the override ends at this time: RFC 3339 (2026-12-31T23:59:59Z) or a date (2026-12-31, midnight UTC); neither -for nor -until: it never ends")
	fs.StringVar(&reason, "reason", "", "why, for whoever reads the list later")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	ov := overrides.Override{Policy: o.policy, Rate: rate, Period: period, Burst: burst, Reason: reason}
	switch {
	case o.policy == "":
		return e.usage(fs, "-policy is required")
	case btoi(exempt)+btoi(block)+btoi(rate != 0) != 1:
		return e.usage(fs, "give exactly one of -rate N (a limit of its own), -exempt or -block")
	case (exempt || block) && (period != 0 || burst != 0):
		return e.usage(fs, "-period and -burst go with -rate")
	case dur != 0 && until != "":
		return e.usage(fs, "give -for or -until, not both")
	case dur < 0:
		return e.usage(fs, "-for %s: want a positive duration", dur)
	}
	switch {
	case exempt:
		ov.Kind = overrides.Exempt
	case block:
		ov.Kind = overrides.Block
	default:
		ov.Kind = overrides.Limit
	}
	if dur > 0 {
		ov.Until = time.Now().Add(dur)
	} else if until != "" {
		t, err := parseUntil(until)
		if err != nil {
			return e.usage(fs, "-until %q: %v", until, err)
		}
		ov.Until = t
	}
	if err := checkPolicy(o.config, o.policy); err != nil {
		return e.failf("%v", err)
	}
	id, err := e.identity(&o, fs.Args())
	if err != nil {
		return e.failf("%v", err)
	}
	ov.Identity = id
	conn, err := e.open(o.redis)
	if err != nil {
		return e.failf("%v", err)
	}
	defer conn.close()
	ctx := conn.ctx
	if err := conn.store.Set(ctx, ov); err != nil {
		return e.failf("%v", err)
	}
	stored, _, err := conn.store.Get(ctx, ov.Policy, ov.Identity)
	if err != nil {
		return e.failf("%v", err)
	}
	if o.json {
		return e.writeJSON(overrideJSON(stored))
	}
	fmt.Fprintf(e.stdout, "set: %s\n", describe(stored))
	return ExitOK
}

func (e *env) overrideGetRemove(get bool, args []string) int {
	var o overrideFlags
	name := "override rm"
	if get {
		name = "override get"
	}
	fs := e.flagSet(name, overrideUsage+attributesHelp)
	o.add(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if o.policy == "" {
		return e.usage(fs, "-policy is required")
	}
	if err := checkPolicy(o.config, o.policy); err != nil {
		return e.failf("%v", err)
	}
	id, err := e.identity(&o, fs.Args())
	if err != nil {
		return e.failf("%v", err)
	}
	conn, err := e.open(o.redis)
	if err != nil {
		return e.failf("%v", err)
	}
	defer conn.close()
	ctx := conn.ctx
	if !get {
		removed, err := conn.store.Remove(ctx, o.policy, id)
		if err != nil {
			return e.failf("%v", err)
		}
		if o.json {
			return e.writeJSON(map[string]any{"policy": o.policy, "identity": id, "removed": removed})
		}
		if !removed {
			fmt.Fprintf(e.stdout, "%s has no override under %s: nothing removed\n", id, o.policy)
			return ExitOK
		}
		fmt.Fprintf(e.stdout, "removed the override of %s under %s: the policy's own limit applies again\n", id, o.policy)
		return ExitOK
	}
	ov, ok, err := conn.store.Get(ctx, o.policy, id)
	if err != nil {
		return e.failf("%v", err)
	}
	if !ok {
		if o.json {
			return e.writeJSON(nil)
		}
		fmt.Fprintf(e.stderr, "sluice: %s has no override under %s\n", id, o.policy)
		return ExitFailed
	}
	if o.json {
		return e.writeJSON(overrideJSON(ov))
	}
	fmt.Fprintln(e.stdout, describe(ov))
	return ExitOK
}

func (e *env) overrideList(args []string) int {
	var o overrideFlags
	fs := e.flagSet("override list", overrideUsage)
	o.add(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return e.usage(fs, "override list takes no arguments (got %s)", strings.Join(fs.Args(), " "))
	}
	if o.policy != "" {
		if err := checkPolicy(o.config, o.policy); err != nil {
			return e.failf("%v", err)
		}
	}
	conn, err := e.open(o.redis)
	if err != nil {
		return e.failf("%v", err)
	}
	defer conn.close()
	ctx := conn.ctx
	list, err := conn.store.List(ctx, o.policy)
	if err != nil {
		return e.failf("%v", err)
	}
	if o.json {
		out := make([]overrideOut, 0, len(list))
		for _, ov := range list {
			out = append(out, overrideJSON(ov))
		}
		return e.writeJSON(out)
	}
	if len(list) == 0 {
		fmt.Fprintln(e.stdout, "no overrides")
		return ExitOK
	}
	rows := make([][]string, 0, len(list))
	for _, ov := range list {
		rows = append(rows, []string{ov.Policy, ov.Identity, effect(ov), untilText(ov.Until), ov.Reason})
	}
	e.table([]string{"POLICY", "IDENTITY", "OVERRIDE", "UNTIL", "REASON"}, rows)
	return ExitOK
}

// usage reports a command-line mistake with the command's usage.
func (e *env) usage(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "sluice %s: %s\n\n", strings.TrimPrefix(fs.Name(), "sluice "), fmt.Sprintf(format, args...))
	fs.Usage()
	return ExitUsage
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseUntil reads -until: RFC 3339, or a date meaning its midnight UTC.
func parseUntil(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("want RFC 3339 (2026-12-31T23:59:59Z) or a date (2026-12-31)")
}

// overrideOut is an override in -json output.
type overrideOut struct {
	Policy   string `json:"policy"`
	Identity string `json:"identity"`
	Kind     string `json:"kind"`
	Rate     int64  `json:"rate,omitempty"`
	Period   string `json:"period,omitempty"`
	Burst    int64  `json:"burst,omitempty"`
	Until    string `json:"until,omitempty"` // RFC 3339; absent: never
	Reason   string `json:"reason,omitempty"`
	Set      string `json:"set,omitempty"`
}

func overrideJSON(o overrides.Override) overrideOut {
	out := overrideOut{Policy: o.Policy, Identity: o.Identity, Kind: o.Kind.String(), Rate: o.Rate, Burst: o.Burst, Reason: o.Reason}
	if o.Period != 0 {
		out.Period = o.Period.String()
	}
	if !o.Until.IsZero() {
		out.Until = o.Until.UTC().Format(time.RFC3339Nano)
	}
	if !o.Set.IsZero() {
		out.Set = o.Set.UTC().Format(time.RFC3339Nano)
	}
	return out
}

// effect says what an override does: "exempt", "block", "limit 1000/1m0s
// burst 100".
func effect(o overrides.Override) string {
	if o.Kind != overrides.Limit {
		return o.Kind.String()
	}
	s := "limit " + strconv.FormatInt(o.Rate, 10)
	if o.Period != 0 {
		s += "/" + o.Period.String()
	}
	if o.Burst != 0 {
		s += " burst " + strconv.FormatInt(o.Burst, 10)
	}
	return s
}

func untilText(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// describe is one override in a sentence.
func describe(o overrides.Override) string {
	s := fmt.Sprintf("%s under %s: %s until %s", o.Identity, o.Policy, effect(o), untilText(o.Until))
	if o.Reason != "" {
		s += " (" + o.Reason + ")"
	}
	return s
}
