package ratepolicy

import "context"

type claimsKey struct{}

// WithClaims returns a context carrying verified claims of a request
// (plan: pro, org: acme), for a policy file's tiers to choose by (tiers:
// claim: plan). The HTTP and gRPC adapters' WithClaims are this one. Store
// only claims your authentication verified.
func WithClaims(ctx context.Context, claims map[string]string) context.Context {
	return context.WithValue(ctx, claimsKey{}, claims)
}

// ClaimFrom returns the claim stored by WithClaims under name; an empty
// value is no claim.
func ClaimFrom(ctx context.Context, name string) (string, bool) {
	m, _ := ctx.Value(claimsKey{}).(map[string]string)
	v, ok := m[name]
	return v, ok && v != ""
}
