package grpclimit

import (
	"context"
	"errors"
	"strings"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
	"github.com/sluice-go/sluice/policyfile"
)

// FromFile turns a policy file into a Config deciding with lim: its
// policies, methods, tiers, exemptions, shadow mode, headers, degraded
// metadata key, error domain and default exemptions. Each identity of the
// file is the KeyFunc this package builds for it (ip is IP, api_key is
// APIKey reading metadata, metadata is Metadata, route is Method, ...), so
// a file's policy and a Go policy with the same limit and identity share
// one quota, across HTTP and gRPC where the identity is the same (a
// subject, an API key).
//
// What the file cannot say is set on the Config returned:
// PartitionKeySecret, ExemptFunc, Logger, MeterProvider. Fields for HTTP
// only (routes, header identities and costs, tiers.header, headers legacy
// and both) are errors, reported with every other problem at its
// file:line:col: the error is a policyfile.Errors.
func FromFile(c *policyfile.Config, lim *sluice.Limiter) (Config, error) {
	var errs policyfile.Errors
	pattern := func(m string) error {
		if !validPattern(m) {
			return errors.New(`want "/pkg.Service/Method" or "/pkg.Service/*"`)
		}
		return nil
	}
	fc, err := ratepolicy.FromFile(c, ratepolicy.FileAdapter[*Call]{
		Name:       "gRPC",
		Routes:     "methods",
		Without:    []string{"routes"},
		CheckRoute: pattern,
		Context:    (*Call).Context,
		IP: func(o IPOptions) (func(*Call) (string, bool), error) {
			k, err := IP(o)
			return k, err
		},
		APIKey:      func(key string) func(*Call) (string, bool) { return APIKey(key) },
		Metadata:    func(key string) func(*Call) (string, bool) { return Metadata(key) },
		Route:       func(string) func(*Call) (string, bool) { return Method() },
		RouteIsCall: true,
		MetadataValue: func(key string) func(*Call) (string, bool) {
			key = strings.ToLower(key)
			return func(c *Call) (string, bool) {
				if v := c.Metadata(key); len(v) > 0 && v[0] != "" {
					return v[0], true
				}
				return "", false
			}
		},
		PerMessage: true,
	})
	if e := (policyfile.Errors)(nil); errors.As(err, &e) {
		errs = append(errs, e...)
	}
	cfg := Config{
		Limiter:  lim,
		Policies: fromShared(fc.Policies), Methods: fromSharedMap(fc.Routes), Tiers: fromSharedMap(fc.Tiers),
		Tier: fc.Tier, DefaultTier: fc.DefaultTier,
		Exempt: c.Exempt, NoDefaultExempt: c.NoDefaultExempt, Shadow: c.Shadow,
		DegradedMetadata: strings.ToLower(c.DegradedHeader), ErrorDomain: c.ErrorDomain,
	}
	switch c.Headers {
	case "", "draft":
		cfg.Headers = HeadersDraft
	case "none":
		cfg.Headers = HeadersNone
	default:
		errs = append(errs, c.Where("headers").Errorf("headers: %q is not for gRPC (draft or none)", c.Headers))
	}
	if d := cfg.DegradedMetadata; d != "" && !validMetadataKey(d) {
		errs = append(errs, c.Where("degraded_header").Errorf("degraded_header: %q is not a metadata key (letters, digits, '-', '_' and '.', not grpc-)", c.DegradedHeader))
	}
	if err := errs.Err(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// WithClaims returns a context carrying verified claims of a call (plan,
// org), which a policy file's tiers can choose by (tiers: {claim: plan}).
// Call it from the interceptor that verified them, before the rate
// limit's; it is httplimit.WithClaims, so either adapter sees them.
func WithClaims(ctx context.Context, claims map[string]string) context.Context {
	return ratepolicy.WithClaims(ctx, claims)
}

// ClaimFrom returns the claim stored by WithClaims under name.
func ClaimFrom(ctx context.Context, name string) (string, bool) {
	return ratepolicy.ClaimFrom(ctx, name)
}

func fromShared(ps []ratepolicy.Policy[*Call]) []Policy {
	if ps == nil {
		return nil
	}
	out := make([]Policy, len(ps))
	for i, p := range ps {
		out[i] = Policy{Name: p.Name, Limit: p.Limit, Key: p.Key, Cost: p.Cost, Shadow: p.Shadow, PerMessage: p.PerMessage}
	}
	return out
}

func fromSharedMap(m map[string][]ratepolicy.Policy[*Call]) map[string][]Policy {
	if m == nil {
		return nil
	}
	out := make(map[string][]Policy, len(m))
	for k, ps := range m {
		out[k] = fromShared(ps)
	}
	return out
}
