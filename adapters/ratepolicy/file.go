package ratepolicy

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluice-go/sluice/policyfile"
)

// FileAdapter is what an adapter lends FromFile: how its requests are
// read. A nil func is something the adapter's requests do not have (gRPC
// calls have no headers, HTTP requests no metadata); a file that uses it
// is refused at the place it does.
type FileAdapter[R any] struct {
	// Name is the adapter in errors: "HTTP", "gRPC".
	Name string
	// Routes names the file's section of per-route policies the adapter
	// reads: "routes" (HTTP) or "methods" (gRPC).
	Routes string
	// Without lists the file's top-level fields the adapter has no use
	// for ("methods", "error_domain"): a file that sets one is refused.
	Without []string
	// CheckRoute, when set, checks a key of Routes and an entry of Exempt.
	CheckRoute func(string) error
	// Context is a request's context: its verified subject and claims.
	Context func(R) context.Context
	// IP is the adapter's client-address KeyFunc.
	IP func(IPOptions) (func(R) (string, bool), error)
	// APIKey is the adapter's API-key KeyFunc, reading the named header
	// or metadata key.
	APIKey func(name string) func(R) (string, bool)
	// Header is the adapter's KeyFunc of a header's value (HTTP).
	Header func(name string) func(R) (string, bool)
	// Metadata is the adapter's KeyFunc of a metadata value (gRPC).
	Metadata func(name string) func(R) (string, bool)
	// Route keys by the route: the one of the routes entry a policy is
	// under (route, "" for a policy under none). It returns nil where the
	// adapter cannot tell (an HTTP KeyFunc sees no route).
	Route func(route string) func(R) (string, bool)
	// RouteIsCall reports that Route reads the route from the request
	// (the gRPC method), whatever entry a policy is under.
	RouteIsCall bool
	// HeaderValue reads a header of a request, for tiers and costs (HTTP).
	HeaderValue func(name string) func(R) (string, bool)
	// MetadataValue reads a metadata value of a call, for tiers and costs
	// (gRPC).
	MetadataValue func(name string) func(R) (string, bool)
	// PerMessage reports that policies may be charged per message.
	PerMessage bool
}

// FileConfig is a policy file's policies as an Engine's Config takes them.
type FileConfig[R any] struct {
	Policies    []Policy[R]
	Routes      map[string][]Policy[R]
	Tiers       map[string][]Policy[R]
	Tier        func(R) string
	DefaultTier string
}

// FromFile turns the policies, identities, costs and tiers of c into an
// adapter's, with a's primitives: each identity of the file becomes the
// KeyFunc the adapter's Go API builds for it, so a file's keys are the Go
// KeyFuncs' keys, byte for byte. Every problem is reported, at its place
// in the file, in a policyfile.Errors.
func FromFile[R any](c *policyfile.Config, a FileAdapter[R]) (FileConfig[R], error) {
	b := &fileBuilder[R]{c: c, a: a, named: map[namedKey]func(R) (string, bool){}}
	var out FileConfig[R]
	for _, f := range a.Without {
		if set(c, f) {
			b.errorf(c.Where(f), "%s: not for %s", f, a.Name)
		}
	}
	out.Policies = b.policies(c.Policies, "")
	var routes map[string][]policyfile.Policy
	switch a.Routes {
	case "routes":
		routes = c.Routes
	case "methods":
		routes = c.Methods
	}
	if routes != nil {
		out.Routes = make(map[string][]Policy[R], len(routes))
		for _, k := range sortedKeys(routes) {
			where := fmt.Sprintf("%s[%q]", a.Routes, k)
			if a.CheckRoute != nil {
				if err := a.CheckRoute(k); err != nil {
					b.errorf(c.Where(where), "%s: %v", where, err)
				}
			}
			out.Routes[k] = b.policies(routes[k], k)
		}
	}
	if a.CheckRoute != nil {
		for i, e := range c.Exempt {
			where := fmt.Sprintf("exempt[%d]", i)
			if err := a.CheckRoute(e); err != nil {
				b.errorf(c.Where(where), "%s: %v", where, err)
			}
		}
	}
	if t := c.Tiers; t != nil {
		out.Tiers = make(map[string][]Policy[R], len(t.Policies))
		for _, k := range sortedKeys(t.Policies) {
			out.Tiers[k] = b.policies(t.Policies[k], "")
		}
		out.Tier, out.DefaultTier = b.tier(t), t.Default
	}
	return out, b.errs.Err()
}

// set reports whether c sets the top-level field f of the file, one an
// adapter may be Without.
func set(c *policyfile.Config, f string) bool {
	switch f {
	case "routes":
		return c.Routes != nil
	case "methods":
		return c.Methods != nil
	case "error_domain":
		return c.ErrorDomain != ""
	case "no_default_exempt":
		return c.NoDefaultExempt
	}
	_, ok := c.Pos[f]
	return ok
}

type namedKey struct{ name, route string }

type fileBuilder[R any] struct {
	c      *policyfile.Config
	a      FileAdapter[R]
	errs   policyfile.Errors
	named  map[namedKey]func(R) (string, bool) // each named identity, built once (per route where it keys by route)
	active []string                            // named identities being built: a cycle has no key
}

func (b *fileBuilder[R]) errorf(p policyfile.Pos, format string, args ...any) {
	b.errs = append(b.errs, p.Errorf(format, args...))
}

func (b *fileBuilder[R]) policies(ps []policyfile.Policy, route string) []Policy[R] {
	if ps == nil {
		return nil
	}
	out := make([]Policy[R], 0, len(ps))
	for i := range ps {
		p := &ps[i]
		lim, err := p.SluiceLimit()
		if err != nil {
			b.errorf(p.Limit.Pos, "policy %q: %v", p.Name, err)
		}
		if p.PerMessage && !b.a.PerMessage {
			b.errorf(p.Pos, "policy %q: per_message: not for %s", p.Name, b.a.Name)
		}
		out = append(out, Policy[R]{
			Name: p.Name, Limit: lim, Key: b.identity(&p.Key, route), Cost: b.cost(p),
			Shadow: p.Shadow, PerMessage: p.PerMessage,
		})
	}
	return out
}

// identity is the KeyFunc of id for a policy under route.
func (b *fileBuilder[R]) identity(id *policyfile.Identity, route string) func(R) (string, bool) {
	none := func(R) (string, bool) { return "", false }
	lacks := func(what string) func(R) (string, bool) {
		b.errorf(id.Pos, "%s identity: not for %s", what, b.a.Name)
		return none
	}
	switch id.Kind {
	case policyfile.KindRef:
		named, ok := b.c.Identities[id.Ref]
		if !ok {
			b.errorf(id.Pos, "unknown identity %q", id.Ref)
			return none
		}
		if slices.Contains(b.active, id.Ref) {
			b.errorf(id.Pos, "identity %q refers to itself", id.Ref)
			return none
		}
		nk := namedKey{id.Ref, ""}
		if b.byRoute(&named) {
			nk.route = route // keyed by the route: one per routes entry
		}
		if f, ok := b.named[nk]; ok {
			return f
		}
		b.active = append(b.active, id.Ref)
		f := b.identity(&named, route)
		b.active = b.active[:len(b.active)-1]
		b.named[nk] = f
		return f
	case policyfile.KindIP:
		o := IPOptions{TrustedProxies: id.IP.TrustedProxies, IPv4Prefix: id.IP.IPv4Prefix, IPv6Prefix: id.IP.IPv6Prefix}
		switch id.IP.Header {
		case policyfile.XForwardedFor:
			o.Header = XForwardedFor
		case policyfile.Forwarded:
			o.Header = Forwarded
		}
		f, err := b.a.IP(o)
		if err != nil {
			b.errorf(id.Pos, "ip identity: %v", err)
			return none
		}
		return f
	case policyfile.KindAPIKey:
		return b.a.APIKey(id.Header)
	case policyfile.KindSubject:
		ctx := b.a.Context
		return func(r R) (string, bool) {
			s, ok := SubjectFrom(ctx(r))
			if !ok {
				return "", false
			}
			return SubjectKey(s)
		}
	case policyfile.KindHeader:
		if b.a.Header == nil {
			return lacks("header")
		}
		return b.a.Header(id.Name)
	case policyfile.KindMetadata:
		if b.a.Metadata == nil {
			return lacks("metadata")
		}
		return b.a.Metadata(id.Name)
	case policyfile.KindRoute:
		if f := b.a.Route(route); f != nil {
			return f
		}
		b.errorf(id.Pos, "route identity: %s keys by route only in a policy under routes (a KeyFunc does not see the route)", b.a.Name)
		return none
	case policyfile.KindConstant:
		k := ConstantKey(id.Name)
		return func(R) (string, bool) { return k, true }
	case policyfile.KindJoin, policyfile.KindFirstOf:
		parts := make([]func(R) (string, bool), len(id.Parts))
		for i := range id.Parts {
			parts[i] = b.identity(&id.Parts[i], route)
		}
		if id.Kind == policyfile.KindJoin {
			return Join(parts...)
		}
		return FirstOf(parts...)
	}
	b.errorf(id.Pos, "unknown identity kind %q", id.Kind)
	return none
}

// byRoute reports whether id keys by the route, itself or through an
// identity it names, where the adapter's route key depends on the entry.
func (b *fileBuilder[R]) byRoute(id *policyfile.Identity) bool {
	switch id.Kind {
	case policyfile.KindRoute:
		return !b.a.RouteIsCall
	case policyfile.KindRef:
		if slices.Contains(b.active, id.Ref) {
			return false // a circle: identity reports it
		}
		named, ok := b.c.Identities[id.Ref]
		if !ok {
			return false
		}
		b.active = append(b.active, id.Ref)
		defer func() { b.active = b.active[:len(b.active)-1] }()
		return b.byRoute(&named)
	}
	return slices.ContainsFunc(id.Parts, func(p policyfile.Identity) bool { return b.byRoute(&p) })
}

// value reads the header or metadata a cost or a tier names: what names
// the field in errors, pos where it is.
func (b *fileBuilder[R]) value(header, metadata, what string, pos policyfile.Pos) func(R) (string, bool) {
	switch {
	case header != "" && b.a.HeaderValue != nil:
		return b.a.HeaderValue(header)
	case metadata != "" && b.a.MetadataValue != nil:
		return b.a.MetadataValue(metadata)
	case header != "":
		b.errorf(pos, "%s: header: not for %s", what, b.a.Name)
	case metadata != "":
		b.errorf(pos, "%s: metadata: not for %s", what, b.a.Name)
	}
	return nil
}

func (b *fileBuilder[R]) cost(p *policyfile.Policy) func(R) int64 {
	c := p.Cost
	if c == nil {
		return nil
	}
	if c.Header == "" && c.Metadata == "" {
		v := c.Value
		return func(R) int64 { return v }
	}
	get := b.value(c.Header, c.Metadata, fmt.Sprintf("policy %q: cost", p.Name), c.Pos)
	if get == nil {
		return nil
	}
	return func(r R) int64 { return c.FromRequest(get(r)) }
}

// tier is the func naming a request's tier: the value t reads, looked up
// in its table when it has one; "" (the default tier) when there is none.
func (b *fileBuilder[R]) tier(t *policyfile.Tiers) func(R) string {
	var get func(R) (string, bool)
	switch {
	case t.Header != "" || t.Metadata != "":
		pos := b.c.Where("tiers.header")
		if t.Metadata != "" {
			pos = b.c.Where("tiers.metadata")
		}
		get = b.value(t.Header, t.Metadata, "tiers", pos)
	case t.Claim != "":
		ctx, name := b.a.Context, t.Claim
		get = func(r R) (string, bool) { return ClaimFrom(ctx(r), name) }
	case t.Key != nil:
		key := b.identity(t.Key, "")
		get = func(r R) (string, bool) {
			k, ok := key(r)
			return BoundKey(k), ok
		}
	}
	if get == nil {
		return func(R) string { return "" }
	}
	return func(r R) string { return t.Lookup(get(r)) }
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
