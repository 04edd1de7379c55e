package admin

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/overrides"
	"github.com/sluice-go/sluice/policyfile"
)

const inspectUsage = `usage: sluice inspect -config FILE -redis URL [-json] KEY=VALUE...

Shows every policy of the policy file that applies to the request the
attributes describe, with the limit applied to it (an override's, if one
is in force), what it has left and when it is whole again. It charges
nothing: each policy is asked as a request of cost 0 would be, so
"remaining" is what the last response's RateLimit header said, refilled
by the time since. Concurrency policies report their limit only.

`

// inspection is one policy's line of inspect's output.
type inspection struct {
	Policy    string       `json:"policy"`
	Identity  string       `json:"identity"`
	Limit     string       `json:"limit"`
	Algorithm string       `json:"algorithm"`
	Remaining *int64       `json:"remaining,omitempty"`
	ResetMs   *int64       `json:"reset_ms,omitempty"`
	Shadow    bool         `json:"shadow,omitempty"`
	Override  *overrideOut `json:"override,omitempty"`

	until string // the override's end, for the table
}

func (e *env) inspect(args []string) int {
	var rf redisFlags
	var config string
	fs := e.flagSet("inspect", inspectUsage+attributesHelp)
	rf.add(fs)
	fs.StringVar(&config, "config", "", "the policy file the servers run (required)")
	asJSON := fs.Bool("json", false, "print JSON")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if config == "" {
		return e.usage(fs, "-config is required")
	}
	c, err := policyfile.Load(config)
	if err != nil {
		return e.failf("%v", err)
	}
	if _, err := newRequest(e.ctx, c, fs.Args()); err != nil {
		return e.usage(fs, "%v", err)
	}
	conn, err := e.open(rf)
	if err != nil {
		return e.failf("%v", err)
	}
	defer conn.close()
	ctx := conn.ctx
	req, _ := newRequest(ctx, c, fs.Args()) // checked above; now bound by -timeout
	lim, err := conn.limiter(rf.prefix)
	if err != nil {
		return e.failf("%v", err)
	}
	defer lim.Close()
	cfg, err := httplimit.FromFile(c, lim)
	if err != nil {
		return e.failf("%v", err)
	}
	cfg.Overrides, cfg.Logger = conn.store, discardLogger()
	m, err := httplimit.New(cfg)
	if err != nil {
		return e.failf("%v", err)
	}
	d, err := m.Inspect(req.r, req.route)
	if err != nil {
		return e.failf("%v", err)
	}
	if d.Degraded {
		return e.failf("Redis at %s did not answer: nothing to show", rf.url)
	}
	out := make([]inspection, 0, len(d.Outcomes))
	for _, o := range d.Outcomes {
		in := inspection{Policy: o.Policy, Identity: o.Identity, Limit: limitText(o.Limit), Algorithm: string(o.Limit.Algorithm), Shadow: o.Shadow}
		if o.Override != overrides.Exempt && o.Limit.Algorithm != sluice.AlgConcurrency {
			rem, reset := o.Result.Remaining, o.Result.ResetAfter.Milliseconds()
			in.Remaining, in.ResetMs = &rem, &reset
		}
		if o.Override != 0 {
			ov, ok, err := conn.store.Get(ctx, o.Policy, o.Identity)
			if err != nil {
				return e.failf("%v", err)
			}
			if ok {
				j := overrideJSON(ov)
				in.Override, in.until = &j, untilText(ov.Until)
			}
		}
		out = append(out, in)
	}
	if *asJSON {
		return e.writeJSON(out)
	}
	e.inspectTable(out)
	return ExitOK
}

// inspectTable prints inspect's lines as a table.
func (e *env) inspectTable(out []inspection) {
	if len(out) == 0 {
		fmt.Fprintln(e.stdout, "no policy applies to that request")
		return
	}
	rows := make([][]string, 0, len(out))
	for _, in := range out {
		rem, reset, ovr := "-", "-", "-"
		if in.Remaining != nil {
			rem = strconv.FormatInt(*in.Remaining, 10)
			reset = roundDuration(time.Duration(*in.ResetMs) * time.Millisecond).String()
		}
		if in.Override != nil {
			ovr = in.Override.Kind + " until " + in.until
		}
		policy := in.Policy
		if in.Shadow {
			policy += " (shadow)"
		}
		rows = append(rows, []string{policy, in.Identity, in.Limit, rem, reset, ovr})
	}
	e.table([]string{"POLICY", "IDENTITY", "LIMIT", "REMAINING", "RESET", "OVERRIDE"}, rows)
}

// limitText is a limit in a few words: "gcra 100/1m0s burst 20",
// "concurrency 4 in flight".
func limitText(l sluice.Limit) string {
	switch l.Algorithm {
	case sluice.AlgConcurrency:
		return fmt.Sprintf("concurrency %d in flight", l.Rate)
	case sluice.AlgGCRA, sluice.AlgTokenBucket:
		return fmt.Sprintf("%s %d/%s burst %d", l.Algorithm, l.Rate, l.Period, l.Burst)
	}
	return fmt.Sprintf("%s %d/%s", l.Algorithm, l.Rate, l.Period)
}

const resetUsage = `usage: sluice reset -config FILE -redis URL -policy NAME IDENTITY

Gives IDENTITY its whole quota back under the policy (for a concurrency
policy: drops every slot it holds). IDENTITY is a key (ip:203.0.113.7,
key:9f86…) or request attributes (api_key=SECRET, ...).

A replica that denied IDENTITY a moment ago keeps its cached denial until
the wait it announced (Retry-After) has passed: the reset is in Redis at
once, and in every replica's decisions by then. To lift a denial at once
everywhere, set an override (sluice override set -exempt, or -rate): a
cached denial never answers under another limit.

`

func (e *env) reset(args []string) int {
	var o overrideFlags
	fs := e.flagSet("reset", resetUsage+attributesHelp)
	o.add(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if o.config == "" || o.policy == "" {
		return e.usage(fs, "-config and -policy are required: the policy's limit names its state")
	}
	c, err := policyfile.Load(o.config)
	if err != nil {
		return e.failf("%v", err)
	}
	var pol *policyfile.Policy
	c.AllPolicies(func(_ string, p *policyfile.Policy) {
		if p.Name == o.policy {
			pol = p
		}
	})
	if pol == nil {
		return e.failf("%s has no policy named %q", o.config, o.policy)
	}
	limit, err := pol.SluiceLimit()
	if err != nil {
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
	lim, err := conn.limiter(o.redis.prefix)
	if err != nil {
		return e.failf("%v", err)
	}
	defer lim.Close()
	ctx := conn.ctx
	if err := lim.Reset(ctx, id, limit); err != nil {
		return e.failf("%v", err)
	}
	if o.json {
		return e.writeJSON(map[string]any{"policy": o.policy, "identity": id, "reset": true})
	}
	fmt.Fprintf(e.stdout, "reset %s under %s: its whole quota is back\n", id, o.policy)
	return ExitOK
}

// roundDuration rounds d for people: to the second from 10 s on, to the
// millisecond below.
func roundDuration(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
