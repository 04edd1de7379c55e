package httplimit

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
)

// Decision is what the middleware decided for one request.
type Decision struct {
	// Route is the route template the request was matched to.
	Route string
	// Status is http.StatusOK when the request proceeds,
	// http.StatusTooManyRequests when a policy denied it, and
	// http.StatusServiceUnavailable when it was denied only because the
	// Limiter failed closed (Redis unavailable).
	Status int
	// Outcomes holds one entry per policy that applied, in order: the
	// common policies, the route's, then the tier's. A policy is left out
	// when the Limiter's denial cache denied the request before it was
	// asked.
	Outcomes []Outcome
	// RetryAfter is the wait sent in Retry-After (whole seconds, at least
	// 1) when denied.
	RetryAfter time.Duration
	// Degraded reports that at least one decision came from the failure
	// policy.
	Degraded bool

	leases []lease
	err    error
	checks []sluice.Check
	batch  sluice.Decision
}

// Outcome is one policy's part of a Decision.
type Outcome struct {
	// Policy is the policy's name.
	Policy string
	// Limit is the policy's limit.
	Limit sluice.Limit
	// Result is the Limiter's answer. A denied request is charged
	// nothing: a policy that admitted it reports the quota it has with
	// its charge given back.
	Result sluice.Result
	// Cost is the cost the request was weighed at.
	Cost int64
	// Denied reports that this policy would not admit the request.
	Denied bool
	// Shadow reports that the policy is in shadow mode: a denial was
	// counted and logged, not enforced.
	Shadow bool

	p     *policy
	key   string
	asked bool // the Limiter answered for this policy
}

// Violated returns the names of the enforced policies that denied.
func (d *Decision) Violated() []string {
	var out []string
	for _, o := range d.Outcomes {
		if o.Denied && !o.Shadow {
			out = append(out, o.Policy)
		}
	}
	return out
}

// decisions recycles the Decisions of requests that were not denied (see
// Middleware.serve), with the arrays behind their Outcomes: a denied
// request's Decision goes to the DenyHandler, which may keep it, and is
// never reused.
var decisions = sync.Pool{New: func() any { return new(Decision) }}

type lease struct {
	policy *policy
	lease  sluice.Lease
}

// applicable lists the policies for r in order: common, route, tier.
func (m *Middleware) applicable(r *http.Request, route string) [3][]*policy {
	sets := [3][]*policy{m.base}
	if route != "" && len(m.routes) > 0 {
		var buf [128]byte
		mr := append(append(append(buf[:0], r.Method...), ' '), route...)
		if ps, ok := m.routes[string(mr)]; ok { // no copy: the conversion is only the map index
			sets[1] = ps
		} else if ps, ok := m.routes[route]; ok {
			sets[1] = ps
		}
	}
	if m.tier != nil && len(m.tiers) > 0 {
		ps, ok := m.tiers[m.tier(r)]
		if !ok {
			ps = m.tiers[m.deftier]
		}
		sets[2] = ps
	}
	return sets
}

// decide runs every applicable policy: one check per policy, all decided
// by one Limiter.Decide, so a request costs one round trip when admitted,
// two when denied (the denied request's charges are given back, and the
// concurrency slots it took released), and none when an enforced policy's
// denial is in the Limiter's denial cache.
//
// routeOf, when not nil, looks the route up for a request that a policy
// denied (enforced or shadow), which reports it; route is then "".
func (m *Middleware) decide(r *http.Request, route string, routeOf func(*http.Request) string) *Decision {
	d := decisions.Get().(*Decision)
	// A reused Decision keeps the arrays behind its Outcomes, checks and
	// batch (appends overwrite whole elements); leases are new, as the
	// deferred release of the request that had them may still be reading
	// them.
	*d = Decision{Route: route, Status: http.StatusOK, Outcomes: d.Outcomes[:0], checks: d.checks[:0], batch: d.batch}
	for _, set := range m.applicable(r, route) {
		for _, p := range set {
			k, ok := p.Key(r)
			if !ok {
				continue
			}
			cost := int64(1)
			if p.Cost != nil && !p.conc {
				cost = p.Cost(r)
				if cost < 0 {
					d.err = fmt.Errorf("httplimit: policy %q: negative cost %d", p.Policy.Name, cost)
					return d
				}
			}
			shadow := m.shadow || p.Shadow
			id := boundKey(k)
			d.Outcomes = append(d.Outcomes, Outcome{Policy: p.Policy.Name, Limit: p.Limit, Cost: cost, Shadow: shadow, p: p, key: id})
			d.checks = append(d.checks, sluice.Check{Identity: id, Limit: p.Limit, Cost: cost, Shadow: shadow})
		}
	}
	if len(d.checks) > 0 {
		if err := m.lim.DecideInto(r.Context(), &d.batch, d.checks...); err != nil {
			d.err = err
			return d
		}
		all := true
		for i := range d.Outcomes {
			o := &d.Outcomes[i]
			if o.asked = d.batch.Asked(i); !o.asked {
				all = false
				continue
			}
			o.Result = d.batch.Results[i]
			o.Denied = !o.Result.Allowed
			if l := d.batch.Leases[i]; l.ID != "" {
				d.leases = append(d.leases, lease{o.p, l})
			}
		}
		// Policies a cached denial left unasked have nothing to report.
		if !all {
			d.Outcomes = slices.DeleteFunc(d.Outcomes, func(o Outcome) bool { return !o.asked })
		}
	}
	if routeOf != nil {
		for i := range d.Outcomes {
			if d.Outcomes[i].Denied {
				d.Route = routeOf(r)
				break
			}
		}
	}
	m.settle(r, d)
	return d
}

// denied reports whether an enforced policy denied.
func (d *Decision) denied() bool {
	for _, o := range d.Outcomes {
		if o.Denied && !o.Shadow {
			return true
		}
	}
	return false
}

// settle sets Status, RetryAfter and Degraded, logs shadow denials and
// records metrics.
func (m *Middleware) settle(r *http.Request, d *Decision) {
	onlyDegraded := true
	var wait int64
	for i := range d.Outcomes {
		o := &d.Outcomes[i]
		if o.Result.Degraded {
			d.Degraded = true
		}
		m.metrics.record(r.Context(), o)
		if !o.Denied {
			continue
		}
		if o.Shadow {
			m.log.Info("httplimit: shadow policy would deny", "policy", o.Policy, "route", d.Route,
				"retry_after", o.Result.RetryAfter)
			continue
		}
		if !o.Result.Degraded {
			onlyDegraded = false
		}
		wait = max(wait, resetSeconds(o))
	}
	if !d.denied() {
		return
	}
	d.Status = http.StatusTooManyRequests
	if onlyDegraded && m.lim.FailurePolicy() == sluice.FailClosed {
		// Denied only because Redis is unavailable and the Limiter fails
		// closed; a FailLocal denial is a quota decision (429).
		d.Status = http.StatusServiceUnavailable
	}
	d.RetryAfter = time.Duration(max(wait, 1)) * time.Second
}

// resetSeconds is the t parameter of o: on a denial the whole seconds until
// the same cost is admitted (the window w when it never fits); otherwise
// until the quota is whole again (ResetAfter). Concurrency policies that
// admitted report no t (-1): when a slot frees is not known.
func resetSeconds(o *Outcome) int64 {
	res := o.Result
	switch {
	case o.Denied && res.RetryAfter == sluice.RetryNever:
		return max(o.p.window, 1)
	case o.Denied:
		return max(ceilSeconds(res.RetryAfter), 1)
	case o.p.conc:
		return -1
	default:
		return ceilSeconds(res.ResetAfter)
	}
}
