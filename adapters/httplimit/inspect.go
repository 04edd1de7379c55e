package httplimit

import (
	"net/http"

	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// Inspect reports what the policies that apply to r under route have
// left, charging nothing and writing nothing: each policy is asked as a
// request of cost 0 would be, so an Outcome's Result.Remaining is the
// quota left now and Result.ResetAfter when it is whole again. Overrides
// apply as they would to r (Outcome.Override, including
// overrides.Exempt, which Serve leaves out); a concurrency policy is
// reported with its limit only. Status is always http.StatusOK, no metric
// is recorded and nothing is logged. "sluice inspect" is this.
//
// Degraded reports that Redis did not answer and a Result came from the
// failure policy.
func (m *Middleware) Inspect(r *http.Request, route string) (*Decision, error) {
	st := m.cur.Load()
	d := &Decision{Route: route, Version: st.version, Status: http.StatusOK}
	c := &d.core
	if err := st.eng.Decide(r.Context(), r, st.applicable(r, route), ratepolicy.Inspection, c); err != nil {
		return nil, err
	}
	d.addOutcomes(c)
	for _, o := range c.Outcomes {
		d.Degraded = d.Degraded || o.Result.Degraded
	}
	return d, nil
}
