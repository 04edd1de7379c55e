package httplimit

import (
	"net/http"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// A CostFunc weighs a request: how many units of a policy's quota it
// spends (1 when a Policy has none). 0 spends nothing (the policy is only
// reported); a negative cost is a programming error answered with 500.
type CostFunc func(r *http.Request) int64

// Policy is one quota applied to HTTP requests.
//
// A policy's state in Redis belongs to its Limit (by Limit.Name) and the
// key its KeyFunc returns: two policies with the same Limit and KeyFunc
// share one quota. Give a per-route policy its own Limit name
// (Limit.Named("upload")) to count that route apart.
type Policy struct {
	// Name identifies the policy in RateLimit headers, problem bodies,
	// logs and metrics (default Limit.Name): 1 to 64 printable ASCII
	// characters. Clients see it.
	Name string
	// Limit is the quota: a rate limit (any algorithm) or a
	// sluice.Concurrency limit, which holds a slot while the handler runs.
	Limit sluice.Limit
	// Key names the identity counted (required). A request for which it
	// finds no identity skips the policy.
	Key KeyFunc
	// Cost weighs each request (default 1 per request). Ignored by
	// concurrency policies, which always take one slot.
	Cost CostFunc
	// Shadow decides, counts, reports headers and metrics and logs a
	// would-be denial, but never denies.
	Shadow bool
}

// policy is a validated Policy with its header text prepared: the policy
// model shared with the gRPC adapter.
type policy = ratepolicy.Compiled[*http.Request]

// shared turns ps into the shared model's policies.
func shared(ps []Policy) []ratepolicy.Policy[*http.Request] {
	if ps == nil {
		return nil
	}
	out := make([]ratepolicy.Policy[*http.Request], len(ps))
	for i, p := range ps {
		out[i] = ratepolicy.Policy[*http.Request]{Name: p.Name, Limit: p.Limit, Key: p.Key, Cost: p.Cost, Shadow: p.Shadow}
	}
	return out
}

func sharedMap(m map[string][]Policy) map[string][]ratepolicy.Policy[*http.Request] {
	if m == nil {
		return nil
	}
	out := make(map[string][]ratepolicy.Policy[*http.Request], len(m))
	for k, ps := range m {
		out[k] = shared(ps)
	}
	return out
}
