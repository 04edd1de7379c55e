package ratepolicy

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/overrides"
)

// Config configures an Engine: an adapter's policy configuration with its
// own types turned into Policy values.
type Config[R any] struct {
	// Pkg starts every error and log message ("httplimit").
	Pkg string
	// Limiter makes the decisions (required).
	Limiter *sluice.Limiter
	// Decide, when set, decides in place of Limiter.DecideInto: a wrapper
	// (tracing, a stub that measures an adapter's own cost in a
	// benchmark). Failure policy and releases stay the Limiter's.
	Decide func(ctx context.Context, d *sluice.Decision, checks ...sluice.Check) error
	// Policies apply to every request.
	Policies []Policy[R]
	// Routes adds policies per route key (an HTTP route template, a gRPC
	// method or service); RoutesField names the adapter's field in errors.
	Routes      map[string][]Policy[R]
	RoutesField string
	// Tiers adds the policies of the tier Tier names; a tier not in Tiers
	// is DefaultTier.
	Tiers       map[string][]Policy[R]
	Tier        func(R) string
	DefaultTier string
	// Shadow puts every policy in shadow mode.
	Shadow bool
	// Logger receives shadow denials (Info) and failed releases (Warn).
	Logger *slog.Logger
	// RouteAttr is the log attribute the route of a shadow denial is
	// logged under ("route", "method").
	RouteAttr string
	// Metrics configures the decision counter.
	Metrics Metrics
	// Overrides, when set, is asked on every decision, for each policy
	// whose Key answered, whether the identity has an override under the
	// policy's name (an *overrides.Store).
	Overrides Overrides
	// Clock is what a Block override's wait counts from (default
	// time.Now); the same clock as the Overrides' own.
	Clock func() time.Time
}

// Overrides answers whether identity has an override under policy now.
// *overrides.Store is one; Lookup must be cheap (it runs on every
// decision) and never fail: when it cannot tell, it answers false.
type Overrides interface {
	Lookup(ctx context.Context, policy, identity string) (overrides.Override, bool)
}

// MaxBlockWait caps the wait a Block override announces (Retry-After, t):
// a client blocked with no end, or for longer, is told to come back after
// an hour (overrides.Override.BlockWait).
const MaxBlockWait = overrides.MaxBlockWait

// Metrics names the counter an Engine records each policy's decisions in,
// with the attribute sluice.policy and OutcomeAttr (allowed, denied,
// shadow_denied). No Provider, no counter.
type Metrics struct {
	Provider    metric.MeterProvider
	Scope       string // the meter's instrumentation scope
	Name        string // the counter
	Description string
	OutcomeAttr string
}

// Engine decides requests of type R under a validated policy set. It is
// safe for concurrent use.
type Engine[R any] struct {
	pkg       string
	lim       *sluice.Limiter
	decide    func(ctx context.Context, d *sluice.Decision, checks ...sluice.Check) error
	base      []*Compiled[R]
	routes    map[string][]*Compiled[R]
	tiers     map[string][]*Compiled[R]
	tier      func(R) string
	deftier   string
	shadow    bool
	log       *slog.Logger
	routeAttr string
	metrics   *metrics[R]
	perMsg    bool // some policy is PerMessage
	ovr       Overrides
	clock     func() time.Time
	badOvr    overrides.Warner // an override making no valid limit: logged once a minute
}

// New validates cfg: every policy, that the policies that can apply to one
// request have distinct names, the tiers, and that there is a policy.
func New[R any](cfg Config[R]) (*Engine[R], error) {
	pkg := cfg.Pkg
	if cfg.Limiter == nil {
		return nil, fmt.Errorf("%s: no Limiter", pkg)
	}
	e := &Engine[R]{
		pkg: pkg, lim: cfg.Limiter, decide: cfg.Decide, tier: cfg.Tier, deftier: cfg.DefaultTier, shadow: cfg.Shadow,
		log: cfg.Logger, routeAttr: cfg.RouteAttr, ovr: cfg.Overrides, clock: cfg.Clock,
		routes: map[string][]*Compiled[R]{}, tiers: map[string][]*Compiled[R]{},
	}
	if e.clock == nil {
		e.clock = time.Now
	}
	e.badOvr.Every = time.Minute
	if e.decide == nil {
		e.decide = e.lim.DecideInto
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.routeAttr == "" {
		e.routeAttr = "route"
	}
	var err error
	if e.base, err = compileAll(pkg, cfg.Policies, "Policies"); err != nil {
		return nil, err
	}
	if err := checkDistinct(pkg, e.base); err != nil {
		return nil, err
	}
	n := len(e.base)
	for route, ps := range cfg.Routes {
		if e.routes[route], err = compileAll(pkg, ps, fmt.Sprintf("%s[%q]", cfg.RoutesField, route)); err != nil {
			return nil, err
		}
		if err := checkDistinct(pkg, e.base, e.routes[route]); err != nil {
			return nil, err
		}
		n += len(ps)
	}
	if len(cfg.Tiers) > 0 {
		if cfg.Tier == nil {
			return nil, fmt.Errorf("%s: Tiers without a Tier func", pkg)
		}
		if _, ok := cfg.Tiers[cfg.DefaultTier]; !ok {
			return nil, fmt.Errorf("%s: DefaultTier %q is not one of Tiers", pkg, cfg.DefaultTier)
		}
	}
	for name, ps := range cfg.Tiers {
		if e.tiers[name], err = compileAll(pkg, ps, fmt.Sprintf("Tiers[%q]", name)); err != nil {
			return nil, err
		}
		if err := checkDistinct(pkg, e.base, e.tiers[name]); err != nil {
			return nil, err
		}
		for _, rp := range e.routes {
			if err := checkDistinct(pkg, e.base, rp, e.tiers[name]); err != nil {
				return nil, err
			}
		}
		n += len(ps)
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: no policies", pkg)
	}
	for _, p := range e.All() {
		e.perMsg = e.perMsg || p.PerMessage
	}
	if e.metrics, err = newMetrics(cfg.Metrics, e.All()); err != nil {
		return nil, err
	}
	return e, nil
}

// HasPerMessage reports whether any policy is PerMessage.
func (e *Engine[R]) HasPerMessage() bool { return e.perMsg }

// Routes returns the compiled policies of each route key, for the
// adapter's own lookup; do not modify it.
func (e *Engine[R]) Routes() map[string][]*Compiled[R] { return e.routes }

// All lists every policy: common, every route's, every tier's.
func (e *Engine[R]) All() []*Compiled[R] {
	all := append([]*Compiled[R](nil), e.base...)
	for _, ps := range e.routes {
		all = append(all, ps...)
	}
	for _, ps := range e.tiers {
		all = append(all, ps...)
	}
	return all
}

// Applicable lists the policies for r in order: common, route's (the
// adapter looked them up), tier's.
func (e *Engine[R]) Applicable(r R, route []*Compiled[R]) [3][]*Compiled[R] {
	sets := [3][]*Compiled[R]{e.base, route}
	if e.tier != nil && len(e.tiers) > 0 {
		ps, ok := e.tiers[e.tier(r)]
		if !ok {
			ps = e.tiers[e.deftier]
		}
		sets[2] = ps
	}
	return sets
}

// Outcome is one policy's part of a Decision.
type Outcome[R any] struct {
	P   *Compiled[R]
	Key string // the identity, bounded (BoundKey)
	// Limit is the limit applied: the policy's, or what a Limit override
	// made of it.
	Limit  sluice.Limit
	Cost   int64
	Shadow bool
	Result sluice.Result
	// Denied reports that this policy would not admit the request.
	Denied bool
	// Override is the kind of the identity's override that applied
	// (overrides.Limit or overrides.Block), 0 when none did. An Exempt
	// override leaves the policy out of the Decision.
	Override overrides.Kind
	asked    bool
	check    int // the index of its check, -1 when it had none (Block)
}

// Lease is a concurrency slot a Decision holds for a policy; Release
// gives it back.
type Lease[R any] struct {
	policy *Compiled[R]
	lease  sluice.Lease
}

// Decision is what an Engine decided for one request. Reuse one with
// Reset: its arrays are kept, its Leases are not (a release may still be
// reading them).
type Decision[R any] struct {
	// Outcomes holds one entry per policy that applied, in order; a
	// policy the Limiter's denial cache left unasked is left out.
	Outcomes []Outcome[R]
	// Leases are the concurrency slots taken for an admitted request.
	Leases []Lease[R]
	// Denied reports that an enforced policy denied (set by Settle).
	Denied bool
	// Unavailable reports a denial only by the failure policy of a
	// Limiter failing closed: Redis is unavailable (set by Settle).
	Unavailable bool
	// Wait is, when Denied, the longest wait in whole seconds (at least
	// 1) among the enforced policies that denied (set by Settle).
	Wait int64
	// Degraded reports that a decision came from the failure policy.
	Degraded bool

	checks []sluice.Check
	batch  sluice.Decision
}

// Reset empties d for another request, keeping its arrays.
func (d *Decision[R]) Reset() {
	*d = Decision[R]{Outcomes: d.Outcomes[:0], checks: d.checks[:0], batch: d.batch}
}

// AnyDenied reports whether a policy, enforced or shadow, denied.
func (d *Decision[R]) AnyDenied() bool {
	for i := range d.Outcomes {
		if d.Outcomes[i].Denied {
			return true
		}
	}
	return false
}

// Violated returns the names of the enforced policies that denied.
func (d *Decision[R]) Violated() []string {
	var out []string
	for _, o := range d.Outcomes {
		if o.Denied && !o.Shadow {
			out = append(out, o.P.Name)
		}
	}
	return out
}

// Select says which policies a decision charges: a stream's open charges
// the policies that are not PerMessage, each message received the
// PerMessage ones; a request that is one message (HTTP, a unary RPC)
// charges them all.
type Select int

const (
	// AllPolicies charges every applicable policy.
	AllPolicies Select = iota
	// OpenPolicies charges the policies that are not PerMessage.
	OpenPolicies
	// MessagePolicies charges the PerMessage policies.
	MessagePolicies
	// Inspection charges nothing: every policy is asked as a request of
	// cost 0 would be (its Result tells what it has left), a concurrency
	// policy is reported without being asked, and an Exempt override is
	// reported rather than leaving its policy out (Middleware.Inspect).
	Inspection
)

// Decide makes one check per applicable policy that sel selects and whose
// Key answers, and
// decides them all with one Limiter.DecideInto: one round trip when
// admitted, two when denied (the charges given back, the slots released),
// none when an enforced policy's denial is in the denial cache. d must be
// Reset. The error is a negative cost or the Limiter's (the checks are
// invalid, the request's context ended); nothing is then held.
//
// With Config.Overrides, each policy's identity is looked up once its key
// is known: Exempt leaves the policy out (no check, nothing reported),
// Block denies it without a check (RetryAfter until the override's Until,
// at most MaxBlockWait), and Limit replaces the limit of its check. A
// request an enforced policy's Block denies asks Redis nothing: its other
// policies are left out, as behind a cached denial, and nothing is
// charged.
func (e *Engine[R]) Decide(ctx context.Context, r R, sets [3][]*Compiled[R], sel Select, d *Decision[R]) error {
	for _, set := range sets {
		for _, p := range set {
			if sel == OpenPolicies && p.PerMessage || sel == MessagePolicies && !p.PerMessage {
				continue
			}
			if err := e.add(ctx, r, p, sel, d); err != nil {
				return err
			}
		}
	}
	if len(d.checks) > 0 && len(d.checks) < len(d.Outcomes) && e.blockedEnforced(d) {
		// Denied whatever the others answer: ask Redis nothing, as a
		// cached denial does, and report only the blocks.
		d.Outcomes = slices.DeleteFunc(d.Outcomes, func(o Outcome[R]) bool { return o.check >= 0 })
		d.checks = d.checks[:0]
	}
	if len(d.checks) == 0 {
		return nil
	}
	if err := e.decide(ctx, &d.batch, d.checks...); err != nil {
		return err
	}
	d.answers()
	return nil
}

// add adds p's part of r's decision to d: nothing when p's Key finds no
// identity in r or an override exempts it (an Inspection reports the
// exemption), a blocked outcome for a Block override, and otherwise an
// outcome with its check, under the limit an override may have given
// the identity.
func (e *Engine[R]) add(ctx context.Context, r R, p *Compiled[R], sel Select, d *Decision[R]) error {
	k, ok := p.Key(r)
	if !ok {
		return nil
	}
	id := BoundKey(k)
	shadow := e.shadow || p.Shadow
	lim, kind := p.Limit, overrides.Kind(0)
	if o, ok := e.override(ctx, p, id); ok {
		switch o.Kind {
		case overrides.Exempt:
			if sel == Inspection {
				d.Outcomes = append(d.Outcomes, Outcome[R]{P: p, Key: id, Limit: p.Limit, Shadow: shadow,
					Override: overrides.Exempt, asked: true, check: -1})
			}
			return nil
		case overrides.Block:
			d.Outcomes = append(d.Outcomes, e.blocked(p, id, o))
			return nil
		case overrides.Limit:
			if l, err := o.Apply(p.Limit); err == nil {
				lim, kind = l, overrides.Limit
			} else {
				e.unusable(err)
			}
		}
	}
	cost := int64(1)
	if p.Cost != nil && !p.Conc {
		if cost = p.Cost(r); cost < 0 {
			return fmt.Errorf("%s: policy %q: negative cost %d", e.pkg, p.Name, cost)
		}
	}
	if sel == Inspection {
		cost = 0
		if p.Conc { // a slot is not peeked: reported with its limit only
			d.Outcomes = append(d.Outcomes, Outcome[R]{P: p, Key: id, Limit: lim, Shadow: shadow,
				Override: kind, asked: true, check: -1, Result: sluice.Result{Limit: lim, Allowed: true}})
			return nil
		}
	}
	d.Outcomes = append(d.Outcomes, Outcome[R]{P: p, Key: id, Limit: lim, Cost: cost, Shadow: shadow,
		Override: kind, check: len(d.checks)})
	d.checks = append(d.checks, sluice.Check{Identity: id, Limit: lim, Cost: cost, Shadow: shadow})
	return nil
}

// override is the override of id under p, if the Engine has overrides
// and one applies.
func (e *Engine[R]) override(ctx context.Context, p *Compiled[R], id string) (overrides.Override, bool) {
	if e.ovr == nil {
		return overrides.Override{}, false
	}
	return e.ovr.Lookup(ctx, p.Name, id)
}

// answers sets each outcome's Result from the batch's, keeps the leases
// it took, and drops the outcomes a cached denial left unasked: they have
// nothing to report.
func (d *Decision[R]) answers() {
	all := true
	for i := range d.Outcomes {
		o := &d.Outcomes[i]
		if o.check < 0 {
			continue // decided without a check
		}
		if o.asked = d.batch.Asked(o.check); !o.asked {
			all = false
			continue
		}
		o.Result = d.batch.Results[o.check]
		o.Denied = !o.Result.Allowed
		if l := d.batch.Leases[o.check]; l.ID != "" {
			d.Leases = append(d.Leases, Lease[R]{o.P, l})
		}
	}
	if !all {
		d.Outcomes = slices.DeleteFunc(d.Outcomes, func(o Outcome[R]) bool { return !o.asked })
	}
}

// blockedEnforced reports whether an enforced policy of d is blocked.
func (e *Engine[R]) blockedEnforced(d *Decision[R]) bool {
	for i := range d.Outcomes {
		if o := &d.Outcomes[i]; o.check < 0 && !o.Shadow {
			return true
		}
	}
	return false
}

// blocked is the outcome of policy p for identity id under a Block
// override o: denied, nothing left, until o ends (at most MaxBlockWait).
func (e *Engine[R]) blocked(p *Compiled[R], id string, o overrides.Override) Outcome[R] {
	wait := o.BlockWait(e.clock())
	return Outcome[R]{P: p, Key: id, Limit: p.Limit, Shadow: e.shadow || p.Shadow, Denied: true,
		Override: overrides.Block, asked: true, check: -1,
		Result: sluice.Result{Limit: p.Limit, RetryAfter: wait, ResetAfter: wait}}
}

// unusable logs, at most once a minute, a Limit override that makes no
// valid limit of its policy's (the policy's own limit applies).
func (e *Engine[R]) unusable(err error) {
	e.badOvr.Warn(e.log, e.pkg+": override ignored; the policy's own limit applies", err)
}

// Settle sets Denied, Unavailable, Wait and Degraded, logs shadow denials
// (with route, the request's route or method) and records metrics.
func (e *Engine[R]) Settle(ctx context.Context, d *Decision[R], route string) {
	onlyDegraded := true
	var wait int64
	for i := range d.Outcomes {
		o := &d.Outcomes[i]
		if o.Result.Degraded {
			d.Degraded = true
		}
		e.metrics.record(ctx, o)
		if !o.Denied {
			continue
		}
		if o.Shadow {
			e.log.Info(e.pkg+": shadow policy would deny", "policy", o.P.Name, e.routeAttr, route,
				"retry_after", o.Result.RetryAfter)
			continue
		}
		d.Denied = true
		if !o.Result.Degraded {
			onlyDegraded = false
		}
		wait = max(wait, resetSeconds(o))
	}
	if !d.Denied {
		return
	}
	// Denied only because Redis is unavailable and the Limiter fails
	// closed; a FailLocal denial is a quota decision.
	d.Unavailable = onlyDegraded && e.lim.FailurePolicy() == sluice.FailClosed
	d.Wait = max(wait, 1)
}

// Release gives back the concurrency slots of leases, with a context that
// outlives ctx's cancellation. A release that fails is logged; the slot
// frees itself when its lease expires.
func (e *Engine[R]) Release(ctx context.Context, leases []Lease[R]) {
	ctx = context.WithoutCancel(ctx)
	for _, l := range leases {
		if err := e.lim.Release(ctx, l.lease); err != nil {
			e.log.Warn(e.pkg+": concurrency slot not released; it frees itself when its lease expires",
				"policy", l.policy.Name, "err", err)
		}
	}
}
