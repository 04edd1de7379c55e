package admin

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
	"github.com/sluice-go/sluice/policyfile"
)

const attributesHelp = `Request attributes (KEY=VALUE):
  ip=ADDR            the client address (the TCP peer of the request)
  api_key=VALUE      an API key, sent in every header an api_key identity of the file reads
  subject=NAME       the verified subject (httplimit.WithSubject)
  claim.NAME=VALUE   a verified claim (httplimit.WithClaims), e.g. claim.plan=pro
  header.NAME=VALUE  a request header, e.g. header.X-Tenant=acme
  method=METHOD      the HTTP method (default GET)
  route=TEMPLATE     the route template the router matched, e.g. /v1/orders/{id}
`

// request is a request described on the command line.
type request struct {
	r     *http.Request
	route string
}

// isAttribute reports whether arg is KEY=VALUE with a KEY of
// attributesHelp.
func isAttribute(arg string) bool {
	k, _, ok := strings.Cut(arg, "=")
	if !ok {
		return false
	}
	switch k {
	case "ip", "api_key", "subject", "method", "route":
		return true
	}
	return strings.HasPrefix(k, "claim.") && len(k) > 6 || strings.HasPrefix(k, "header.") && len(k) > 7
}

// newRequest builds the HTTP request attrs describe, under the policy
// file c (whose api_key identities name the headers an API key is sent
// in), its context derived from ctx.
func newRequest(ctx context.Context, c *policyfile.Config, attrs []string) (*request, error) {
	r, err := http.NewRequest(http.MethodGet, "http://sluice.invalid/", nil)
	if err != nil {
		return nil, err
	}
	r.RemoteAddr = "" // no client address unless ip= gives one
	claims := map[string]string{}
	req := &request{r: r}
	for _, a := range attrs {
		k, v, _ := strings.Cut(a, "=")
		switch {
		case !isAttribute(a):
			return nil, fmt.Errorf("%q is not a request attribute\n\n%s", a, attributesHelp)
		case k == "ip":
			addr, err := netip.ParseAddr(v)
			if err != nil {
				return nil, fmt.Errorf("ip=%s: not an IP address", v)
			}
			r.RemoteAddr = net.JoinHostPort(addr.String(), "1")
		case k == "api_key":
			headers := apiKeyHeaders(c)
			if len(headers) == 0 {
				return nil, fmt.Errorf("api_key=…: no identity of %s reads an API key", c.File)
			}
			for _, h := range headers {
				r.Header.Set(h, v)
			}
		case k == "subject":
			ctx = ratepolicy.WithSubject(ctx, v)
		case k == "method":
			r.Method = strings.ToUpper(v)
		case k == "route":
			if m, rt, ok := strings.Cut(v, " "); ok && m != "" && strings.ToUpper(m) == m {
				r.Method, v = m, rt
			}
			req.route = v
		case strings.HasPrefix(k, "claim."):
			claims[k[len("claim."):]] = v
		case strings.HasPrefix(k, "header."):
			r.Header.Add(k[len("header."):], v)
		}
	}
	if len(claims) > 0 {
		ctx = httplimit.WithClaims(ctx, claims)
	}
	req.r = r.WithContext(ctx)
	return req, nil
}

// apiKeyHeaders lists the headers the api_key identities of c read.
func apiKeyHeaders(c *policyfile.Config) []string {
	seen := map[string]bool{}
	var out []string
	var walk func(id *policyfile.Identity)
	walk = func(id *policyfile.Identity) {
		if id == nil {
			return
		}
		if id.Kind == policyfile.KindAPIKey {
			h := http.CanonicalHeaderKey(id.Header)
			if !seen[h] {
				seen[h] = true
				out = append(out, h)
			}
		}
		for i := range id.Parts {
			walk(&id.Parts[i])
		}
	}
	for _, name := range sortedKeys(c.Identities) {
		id := c.Identities[name]
		walk(&id)
	}
	c.AllPolicies(func(_ string, p *policyfile.Policy) { walk(&p.Key) })
	if c.Tiers != nil {
		walk(c.Tiers.Key)
	}
	return out
}

// policyKey is the identity policy counts req by, under the HTTP
// configuration cfg; false when its identity finds none in req.
func policyKey(cfg httplimit.Config, policy string, req *request) (string, bool, error) {
	p, ok := findPolicy(cfg, policy, req.route)
	if !ok {
		return "", false, fmt.Errorf("no policy named %q", policy)
	}
	k, ok := p.Key(req.r)
	if !ok {
		return "", false, nil
	}
	return ratepolicy.BoundKey(k), true, nil
}

// findPolicy returns the policy named name: among the common ones, the
// route's (a route policy keyed by its route is found under any route
// that names it), and every tier's.
func findPolicy(cfg httplimit.Config, name, route string) (httplimit.Policy, bool) {
	sets := [][]httplimit.Policy{cfg.Policies}
	if ps, ok := cfg.Routes[route]; ok {
		sets = append(sets, ps)
	}
	for _, k := range sortedKeys(cfg.Routes) {
		sets = append(sets, cfg.Routes[k])
	}
	for _, k := range sortedKeys(cfg.Tiers) {
		sets = append(sets, cfg.Tiers[k])
	}
	for _, set := range sets {
		for _, p := range set {
			if policyName(p) == name {
				return p, true
			}
		}
	}
	return httplimit.Policy{}, false
}

// policyName is the name a policy goes by (Policy.Name, or its limit's).
func policyName(p httplimit.Policy) string {
	if p.Name != "" {
		return p.Name
	}
	return p.Limit.Name
}
