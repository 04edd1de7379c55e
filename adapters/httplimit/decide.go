package httplimit

import (
	"net/http"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
	"github.com/sluice-go/sluice/overrides"
)

// Decision is what the middleware decided for one request.
type Decision struct {
	// Route is the route template the request was matched to.
	Route string
	// Version is the Config.Version the request was decided under.
	Version string
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

	leases []ratepolicy.Lease[*http.Request]
	err    error
	core   ratepolicy.Decision[*http.Request]
}

// Outcome is one policy's part of a Decision.
type Outcome struct {
	// Policy is the policy's name.
	Policy string
	// Limit is the limit applied: the policy's, or the one an override
	// gave the identity.
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
	// Identity is the key the policy counted the request by, as the
	// Limiter saw it ("ip:203.0.113.7", "key:9f86…": an API key is
	// hashed), and as overrides name it.
	Identity string
	// Override is the kind of the identity's override that applied:
	// overrides.Limit (Limit is the override's) or overrides.Block (denied
	// without asking Redis); 0 when none did. Middleware.Inspect also
	// reports overrides.Exempt.
	Override overrides.Kind

	p *policy
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
// state.serve), with the arrays behind their Outcomes: a denied
// request's Decision goes to the DenyHandler, which may keep it, and is
// never reused.
var decisions = sync.Pool{New: func() any { return new(Decision) }}

// applicable lists the policies for r in order: common, route, tier.
func (st *state) applicable(r *http.Request, route string) [3][]*policy {
	var rp []*policy
	if route != "" && len(st.routes) > 0 {
		var buf [128]byte
		mr := append(append(append(buf[:0], r.Method...), ' '), route...)
		if ps, ok := st.routes[string(mr)]; ok { // no copy: the conversion is only the map index
			rp = ps
		} else if ps, ok := st.routes[route]; ok {
			rp = ps
		}
	}
	return st.eng.Applicable(r, rp)
}

// decide runs every applicable policy: one check per policy, all decided
// by one Limiter.DecideInto (ratepolicy.Engine.Decide), so a request costs
// one round trip when admitted, two when denied (the denied request's
// charges are given back, and the concurrency slots it took released), and
// none when an enforced policy's denial is in the Limiter's denial cache.
//
// routeOf, when not nil, looks the route up for a request that a policy
// denied (enforced or shadow), which reports it; route is then "".
func (st *state) decide(r *http.Request, route string, routeOf func(*http.Request) string) *Decision {
	d := decisions.Get().(*Decision)
	// A reused Decision keeps the arrays behind its Outcomes and its
	// batch; leases are new, as the deferred release of the request that
	// had them may still be reading them.
	d.core.Reset()
	*d = Decision{Route: route, Version: st.version, Status: http.StatusOK, Outcomes: d.Outcomes[:0], core: d.core}
	c := &d.core
	if err := st.eng.Decide(r.Context(), r, st.applicable(r, route), ratepolicy.AllPolicies, c); err != nil {
		d.err = err
		return d
	}
	if routeOf != nil && c.AnyDenied() {
		d.Route = routeOf(r)
	}
	st.eng.Settle(r.Context(), c, d.Route)
	d.addOutcomes(c)
	d.leases, d.Degraded = c.Leases, c.Degraded
	if c.Denied {
		d.Status = http.StatusTooManyRequests
		if c.Unavailable {
			d.Status = http.StatusServiceUnavailable
		}
		d.RetryAfter = time.Duration(c.Wait) * time.Second
	}
	return d
}

// addOutcomes adds the outcomes of c to d's.
func (d *Decision) addOutcomes(c *ratepolicy.Decision[*http.Request]) {
	for i := range c.Outcomes {
		o := &c.Outcomes[i]
		d.Outcomes = append(d.Outcomes, Outcome{Policy: o.P.Name, Limit: o.Limit, Result: o.Result, Cost: o.Cost,
			Denied: o.Denied, Shadow: o.Shadow, Identity: o.Key, Override: o.Override, p: o.P})
	}
}

// resetSeconds is the t parameter of o (ratepolicy.ResetSecondsOf).
func resetSeconds(o *Outcome) int64 { return ratepolicy.ResetSecondsOf(o.p, o.Result, o.Denied) }
