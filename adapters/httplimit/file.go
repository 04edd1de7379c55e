package httplimit

import (
	"context"
	"errors"
	"net/http"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
	"github.com/sluice-go/sluice/policyfile"
)

// FromFile turns a policy file into a Config deciding with lim: its
// policies, routes, tiers, exemptions, shadow mode, headers and degraded
// header. Each identity of the file is the KeyFunc this package builds for
// it (ip is IP, api_key is APIKey, header is Header, ...), so a file's
// policy and a Go policy with the same limit and identity share one quota.
// A route identity keys a policy under routes by that routes entry,
// "route:POST /reports".
//
// What the file cannot say is set on the Config returned:
// PartitionKeySecret, DenyHandler, Logger, MeterProvider, Clock. Fields
// for gRPC only (methods, metadata identities and costs, tiers.metadata,
// per_message, error_domain, no_default_exempt) are errors, reported with
// every other problem at its file:line:col: the error is a
// policyfile.Errors.
func FromFile(c *policyfile.Config, lim *sluice.Limiter) (Config, error) {
	var errs policyfile.Errors
	fc, err := ratepolicy.FromFile(c, ratepolicy.FileAdapter[*http.Request]{
		Name:    "HTTP",
		Routes:  "routes",
		Without: []string{"methods", "error_domain", "no_default_exempt"},
		Context: func(r *http.Request) context.Context { return r.Context() },
		IP: func(o IPOptions) (func(*http.Request) (string, bool), error) {
			k, err := IP(o)
			return k, err
		},
		APIKey: func(h string) func(*http.Request) (string, bool) { return APIKey(h) },
		Header: func(h string) func(*http.Request) (string, bool) { return Header(h) },
		Route: func(route string) func(*http.Request) (string, bool) {
			if route == "" {
				return nil
			}
			k := ratepolicy.Tagged("route", route)
			return func(*http.Request) (string, bool) { return k, true }
		},
		HeaderValue: func(h string) func(*http.Request) (string, bool) {
			h = http.CanonicalHeaderKey(h)
			return func(r *http.Request) (string, bool) {
				v := r.Header.Get(h)
				return v, v != ""
			}
		},
	})
	if e := (policyfile.Errors)(nil); errors.As(err, &e) {
		errs = append(errs, e...)
	}
	cfg := Config{
		Limiter:  lim,
		Policies: fromShared(fc.Policies), Routes: fromSharedMap(fc.Routes), Tiers: fromSharedMap(fc.Tiers),
		Tier: fc.Tier, DefaultTier: fc.DefaultTier,
		Shadow: c.Shadow, DegradedHeader: c.DegradedHeader,
	}
	switch c.Headers {
	case "", "draft":
		cfg.Headers = HeadersDraft
	case "legacy":
		cfg.Headers = HeadersLegacy
	case "both":
		cfg.Headers = HeadersBoth
	case "none":
		cfg.Headers = HeadersNone
	default:
		errs = append(errs, c.Where("headers").Errorf("headers: %q is not one of draft, legacy, both, none", c.Headers))
	}
	if c.DegradedHeader != "" && !validHeaderName(c.DegradedHeader) {
		errs = append(errs, c.Where("degraded_header").Errorf("degraded_header: %q is not a header name (letters, digits, '-' and '_')", c.DegradedHeader))
	}
	if len(c.Exempt) > 0 {
		cfg.Exempt = ExemptRoutes(c.Exempt...)
	}
	if err := errs.Err(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// fromShared turns the shared model's policies into this package's.
func fromShared(ps []ratepolicy.Policy[*http.Request]) []Policy {
	if ps == nil {
		return nil
	}
	out := make([]Policy, len(ps))
	for i, p := range ps {
		out[i] = Policy{Name: p.Name, Limit: p.Limit, Key: p.Key, Cost: p.Cost, Shadow: p.Shadow}
	}
	return out
}

func fromSharedMap(m map[string][]ratepolicy.Policy[*http.Request]) map[string][]Policy {
	if m == nil {
		return nil
	}
	out := make(map[string][]Policy, len(m))
	for k, ps := range m {
		out[k] = fromShared(ps)
	}
	return out
}
