package httplimit

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
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

// policy is a validated Policy with its header text prepared.
type policy struct {
	Policy
	name   string // sf-String serialisation, quotes included
	item   string // RateLimit-Policy item without pk
	window int64  // w in seconds (0 for concurrency)
	conc   bool
}

func compile(p Policy, where string) (*policy, error) {
	if err := p.Limit.Validate(); err != nil {
		return nil, fmt.Errorf("httplimit: %s: %w", where, err)
	}
	if p.Key == nil {
		return nil, fmt.Errorf("httplimit: %s: policy %q has no Key", where, p.Name)
	}
	if p.Name == "" {
		p.Name = p.Limit.Name
	}
	if !validPolicyName(p.Name) {
		return nil, fmt.Errorf("httplimit: %s: policy name %q: want 1 to 64 printable ASCII characters", where, p.Name)
	}
	c := &policy{Policy: p, name: sfString(p.Name), conc: p.Limit.Algorithm == sluice.AlgConcurrency}
	if c.conc {
		c.item = c.name + ";q=" + strconv.FormatInt(p.Limit.Rate, 10) + `;qu="concurrent-requests"`
	} else {
		c.window = ceilSeconds(p.Limit.Period)
		c.item = c.name + ";q=" + strconv.FormatInt(p.Limit.Rate, 10) + ";w=" + strconv.FormatInt(c.window, 10)
	}
	return c, nil
}

func compileAll(ps []Policy, where string) ([]*policy, error) {
	out := make([]*policy, 0, len(ps))
	for i, p := range ps {
		c, err := compile(p, fmt.Sprintf("%s[%d]", where, i))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// checkDistinct fails when two policies that can apply to the same request
// share a name: headers and problem bodies tell policies apart by name.
func checkDistinct(sets ...[]*policy) error {
	var seen []string
	for _, set := range sets {
		for _, p := range set {
			if slices.Contains(seen, p.Policy.Name) {
				return fmt.Errorf("httplimit: two policies named %q can apply to one request", p.Policy.Name)
			}
			seen = append(seen, p.Policy.Name)
		}
	}
	return nil
}

func validPolicyName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// sfString serialises an RFC 9651 String (printable ASCII only, checked by
// validPolicyName).
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(append(b, '"'))
}

// ceilSeconds rounds d up to whole seconds; never below 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
