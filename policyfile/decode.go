package policyfile

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice"
)

// config reads the file: each section into its part of the Config, then
// the checks across sections (references, tier tables, a policy at all).
func (d *decoder) config(root *yaml.Node) {
	c := d.c
	f, ok := d.fields(root, "", configFields)
	if !ok {
		return
	}
	for name, e := range f {
		c.Pos[name] = d.at(e.key)
	}
	if e, ok := f["version"]; ok {
		if v := d.deref(e.val); v.Kind == yaml.ScalarNode && !isNull(v) {
			c.Version = v.Value
		} else {
			d.errorf(v, "version", "want a string, got %s", describe(v))
		}
	}
	if e, ok := f["shadow"]; ok {
		c.Shadow = d.boolean(e.val, "shadow")
	}
	if e, ok := f["headers"]; ok {
		c.Headers, _ = d.oneOf(e.val, "headers", headerModes)
	}
	if e, ok := f["degraded_header"]; ok {
		c.DegradedHeader, _ = d.token(e.val, "degraded_header")
	}
	if e, ok := f["error_domain"]; ok {
		c.ErrorDomain, _ = d.nonEmpty(e.val, "error_domain")
	}
	if e, ok := f["no_default_exempt"]; ok {
		c.NoDefaultExempt = d.boolean(e.val, "no_default_exempt")
	}
	if e, ok := f["exempt"]; ok {
		items, _ := d.list(e.val, "exempt")
		for i, it := range items {
			p := fmt.Sprintf("exempt[%d]", i)
			if s, ok := d.nonEmpty(it, p); ok {
				c.Exempt = append(c.Exempt, s)
				c.Pos[p] = d.at(d.deref(it))
			}
		}
	}
	if e, ok := f["limiter"]; ok {
		c.Limiter = d.limiter(e.val)
	}
	if e, ok := f["identities"]; ok {
		d.identities(e.val)
	}
	if e, ok := f["policies"]; ok {
		c.Policies = d.policies(e.val, "policies")
	}
	if e, ok := f["routes"]; ok {
		c.Routes = d.policyMap(e.val, "routes")
	}
	if e, ok := f["methods"]; ok {
		c.Methods = d.policyMap(e.val, "methods")
	}
	if e, ok := f["tiers"]; ok {
		c.Tiers = d.tiers(e.val)
	}
	d.checkRefs()
	if c.Tiers != nil {
		for _, t := range d.tables {
			if _, ok := c.Tiers.Policies[t.tier]; !ok {
				d.errorf(t.node, "tiers.table", "tier %q is not in tiers.policies%s", t.tier, didYouMean(t.tier, sortedKeys(c.Tiers.Policies)))
			}
		}
	}
	n := 0
	c.AllPolicies(func(string, *Policy) { n++ })
	if n == 0 && len(d.errs) == 0 {
		d.errorf(root, "", "no policy: a policy file needs at least one, under policies, routes, methods or tiers.policies")
	}
}

func (d *decoder) limiter(n *yaml.Node) *Limiter {
	f, ok := d.fields(n, "limiter", limiterFields)
	if !ok {
		return nil
	}
	l := &Limiter{Pos: d.at(d.deref(n))}
	if e, ok := f["failure"]; ok {
		l.Failure, _ = d.oneOf(e.val, "limiter.failure", failureModes)
	}
	if e, ok := f["replicas"]; ok {
		v, _ := d.integer(e.val, "limiter.replicas", 1, 1<<20)
		l.Replicas = int(v)
		if l.Failure == "open" || l.Failure == "closed" {
			d.errorf(e.key, "limiter.replicas", "replicas sizes the local failure policy's share; failure is %s", l.Failure)
		}
	}
	if e, ok := f["timeout"]; ok {
		l.Timeout, _ = d.duration(e.val, "limiter.timeout", 0)
	}
	return l
}

// validIdentityName keeps identity names simple, and apart from the kinds
// a bare word names.
func validIdentityName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func (d *decoder) identities(n *yaml.Node) {
	es, ok := d.mapping(n, "identities", nil, false)
	if !ok {
		return
	}
	d.c.Identities = make(map[string]Identity, len(es))
	for _, e := range es {
		p := fmt.Sprintf("identities[%q]", e.name)
		switch {
		case slices.Contains(identityKinds, e.name):
			d.errorf(e.key, "identities", "%q is an identity kind; name the identity something else", e.name)
			continue
		case !validIdentityName(e.name):
			d.errorf(e.key, "identities", "identity name %q: want 1 to 64 letters, digits, '_', '-' or '.'", e.name)
			continue
		}
		d.c.Identities[e.name] = d.identity(e.val, p, 0)
	}
	if len(d.c.Identities) == 0 {
		d.c.Identities = nil
	}
}

// identity reads a bare word (ip, subject, route, or the name of an
// identity) or a mapping of exactly one kind to its parameters.
func (d *decoder) identity(n *yaml.Node, path string, depth int) Identity {
	n = d.deref(n)
	id := Identity{Pos: d.at(n)}
	if depth > maxDepth {
		d.errorf(n, path, "identities nest deeper than %d", maxDepth)
		return id
	}
	if n.Kind == yaml.ScalarNode {
		s, ok := d.nonEmpty(n, path)
		switch {
		case !ok:
		case slices.Contains(paramlessKinds, s):
			id.Kind = IdentityKind(s)
		case slices.Contains(identityKinds, s):
			d.errorf(n, path, "%s needs parameters: %s", s, kindExamples[s])
		default:
			id.Kind, id.Ref = KindRef, s
		}
		return id
	}
	f, ok := d.fields(n, path, identityKinds)
	if !ok {
		return id
	}
	if len(f) != 1 {
		var kinds []string
		for k := range f {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		if len(kinds) == 0 {
			d.errorf(n, path, "an identity needs a kind: one of %s, or the name of an identity", strings.Join(identityKinds, ", "))
		} else {
			d.errorf(n, path, "an identity has exactly one kind, got %s (combine them with join or first_of)", strings.Join(kinds, " and "))
		}
		return id
	}
	for kind, e := range f {
		id.Kind = IdentityKind(kind)
		sub := join(path, kind)
		if ex, ok := kindExamples[kind]; ok && kind != "join" && kind != "first_of" && d.deref(e.val).Kind != yaml.MappingNode {
			d.errorf(d.deref(e.val), sub, "want a mapping such as %s, got %s", ex, describe(d.deref(e.val)))
			continue
		}
		switch id.Kind {
		case KindIP:
			id.IP = d.ipOptions(e.val, sub)
		case KindSubject, KindRoute:
			if !isNull(d.deref(e.val)) {
				d.fields(e.val, sub, noFields)
			}
		case KindAPIKey:
			if g, ok := d.fields(e.val, sub, apiKeyFields); ok {
				if h, ok := g["header"]; ok {
					id.Header, _ = d.token(h.val, join(sub, "header"))
				} else {
					d.errorf(d.deref(e.val), sub, `missing field "header" (where the API key is: {api_key: {header: X-API-Key}})`)
				}
			}
		case KindHeader, KindMetadata, KindConstant:
			if g, ok := d.fields(e.val, sub, nameFields); ok {
				if h, ok := g["name"]; !ok {
					d.errorf(d.deref(e.val), sub, `missing field "name"`)
				} else if id.Kind == KindConstant {
					id.Name, _ = d.nonEmpty(h.val, join(sub, "name"))
				} else {
					id.Name, _ = d.token(h.val, join(sub, "name"))
				}
			}
		case KindJoin, KindFirstOf:
			items, ok := d.list(e.val, sub)
			if ok && len(items) == 0 {
				d.errorf(d.deref(e.val), sub, "want at least one identity")
			}
			id.Parts = make([]Identity, 0, len(items))
			for i, it := range items {
				if d.over {
					break
				}
				id.Parts = append(id.Parts, d.identity(it, fmt.Sprintf("%s[%d]", sub, i), depth+1))
			}
		}
	}
	return id
}

func (d *decoder) ipOptions(n *yaml.Node, path string) IPOptions {
	var o IPOptions
	if isNull(d.deref(n)) {
		return o
	}
	f, ok := d.fields(n, path, ipFields)
	if !ok {
		return o
	}
	if e, ok := f["trusted_proxies"]; ok {
		items, _ := d.list(e.val, join(path, "trusted_proxies"))
		for i, it := range items {
			p := fmt.Sprintf("%s.trusted_proxies[%d]", path, i)
			s, ok := d.str(it, p)
			if !ok {
				continue
			}
			if err := checkPrefix(s); err != nil {
				d.errorf(d.deref(it), p, "bad CIDR prefix or address %q: %v", s, err)
				continue
			}
			o.TrustedProxies = append(o.TrustedProxies, s)
		}
	}
	if e, ok := f["header"]; ok {
		o.Header, _ = d.oneOf(e.val, join(path, "header"), proxyHeaders)
		if len(o.TrustedProxies) == 0 && o.Header != "" {
			d.errorf(e.key, join(path, "header"), "a forwarding header needs trusted_proxies: without them every client could choose its own address")
		}
	}
	if e, ok := f["ipv4_prefix"]; ok {
		v, _ := d.integer(e.val, join(path, "ipv4_prefix"), 1, 32)
		o.IPv4Prefix = int(v)
	}
	if e, ok := f["ipv6_prefix"]; ok {
		v, _ := d.integer(e.val, join(path, "ipv6_prefix"), 1, 128)
		o.IPv6Prefix = int(v)
	}
	return o
}

// checkPrefix accepts what the adapters' trusted proxies accept: a CIDR
// prefix (IPv4-mapped ones at least /96) or a single address.
func checkPrefix(s string) error {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err == nil && p.Addr().Is4In6() && p.Bits() < 96 {
			err = errors.New("IPv4-mapped prefix shorter than /96")
		}
		return err
	}
	_, err := netip.ParseAddr(s)
	return err
}

// policies reads a list of policies; null is an empty list.
func (d *decoder) policies(n *yaml.Node, path string) []Policy {
	if isNull(d.deref(n)) {
		return nil
	}
	items, _ := d.list(n, path)
	out := make([]Policy, 0, len(items))
	for i, it := range items {
		if d.over {
			break
		}
		out = append(out, d.policy(it, fmt.Sprintf("%s[%d]", path, i)))
	}
	if len(out) == 0 {
		return nil // an empty list is no list: Marshal and Parse agree
	}
	return out
}

// policyMap reads routes or methods: a key's policies.
func (d *decoder) policyMap(n *yaml.Node, path string) map[string][]Policy {
	es, ok := d.mapping(n, path, nil, false)
	if !ok {
		return nil
	}
	m := make(map[string][]Policy, len(es))
	for _, e := range es {
		p := fmt.Sprintf("%s[%q]", path, e.name)
		if strings.TrimSpace(e.name) == "" {
			d.errorf(e.key, path, "an empty key matches nothing")
			continue
		}
		d.c.Pos[p] = d.at(e.key)
		m[e.name] = d.policies(e.val, p)
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

func (d *decoder) policy(n *yaml.Node, path string) Policy {
	n = d.deref(n)
	p := Policy{Pos: d.at(n)}
	f, ok := d.fields(n, path, policyFields)
	if !ok {
		return p
	}
	need := func(name, why string) (entry, bool) {
		e, ok := f[name]
		if !ok {
			d.errorf(n, path, "missing field %q (%s)", name, why)
		}
		return e, ok
	}
	var nameNode *yaml.Node
	if e, ok := need("name", "how headers, denials and metrics call the policy"); ok {
		if s, ok := d.str(e.val, join(path, "name")); ok {
			nameNode = d.deref(e.val)
			if !validPolicyName(s) {
				d.errorf(nameNode, join(path, "name"), "policy name %q: want 1 to 64 printable ASCII characters", s)
			} else if first, dup := d.names[s]; dup {
				d.errorf(nameNode, join(path, "name"), "duplicate policy name %q (first at %d:%d): every policy of a file has its own name", s, first.Line, first.Column)
			} else {
				d.names[s] = nameNode
				p.Name = s
			}
		}
	}
	var ln limitNodes
	limOK := false
	if e, ok := need("limit", "the quota"); ok {
		p.Limit, ln, limOK = d.limit(e.val, join(path, "limit"))
	}
	if e, ok := need("key", "the identity the policy counts"); ok {
		p.Key = d.identity(e.val, join(path, "key"), 0)
		d.noteRefs(&p.Key)
	}
	if e, ok := f["cost"]; ok {
		p.Cost = d.cost(e.val, join(path, "cost"))
	}
	if e, ok := f["shadow"]; ok {
		p.Shadow = d.boolean(e.val, join(path, "shadow"))
	}
	if e, ok := f["per_message"]; ok {
		p.PerMessage = d.boolean(e.val, join(path, "per_message"))
	}
	if limOK && p.Name != "" {
		if _, err := p.SluiceLimit(); err != nil {
			msg := strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": ")
			at, where := ln.self, join(path, "limit")
			switch {
			case strings.Contains(msg, ": name ") && p.Limit.Name == "":
				d.errorf(nameNode, join(path, "name"), "%q also names the policy's limit, whose state Redis keeps under it: use letters, digits, '.', '_' and '-', or set limit.name", p.Name)
				return p
			case strings.Contains(msg, ": name "):
				at, where = ln.name, join(where, "name")
			case strings.Contains(msg, ": burst ") && ln.burst != nil:
				at, where = ln.burst, join(where, "burst")
			case strings.Contains(msg, ": rate "):
				at, where = ln.rate, join(where, "rate")
			case strings.Contains(msg, ": period ") && ln.period != nil:
				at, where = ln.period, join(where, "period")
			case strings.Contains(msg, ": period ") && ln.lease != nil:
				at, where = ln.lease, join(where, "lease")
			}
			d.errorf(at, where, "invalid limit: %s", msg)
		}
	}
	return p
}

// validPolicyName is the adapters' rule: 1 to 64 printable ASCII
// characters.
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

// limitNodes are where a limit's fields were read, to point at the one
// sluice refuses.
type limitNodes struct{ self, rate, period, burst, lease, name *yaml.Node }

func (d *decoder) limit(n *yaml.Node, path string) (Limit, limitNodes, bool) {
	n = d.deref(n)
	l := Limit{Pos: d.at(n)}
	ln := limitNodes{self: n}
	f, ok := d.fields(n, path, limitFields)
	if !ok {
		return l, ln, false
	}
	ok = true
	get := func(name string) (entry, bool) {
		e, has := f[name]
		if has {
			v := d.deref(e.val)
			switch name {
			case "rate":
				ln.rate = v
			case "period":
				ln.period = v
			case "burst":
				ln.burst = v
			case "lease":
				ln.lease = v
			case "name":
				ln.name = v
			}
		}
		return e, has
	}
	if e, has := get("algorithm"); !has {
		d.errorf(n, path, "missing field %q (one of %s)", "algorithm", strings.Join(Algorithms, ", "))
		ok = false
	} else if l.Algorithm, ok = d.oneOf(e.val, join(path, "algorithm"), Algorithms); !ok {
		l.Algorithm = ""
	}
	if e, has := get("rate"); !has {
		d.errorf(n, path, "missing field %q", "rate")
		ok = false
	} else {
		var good bool
		l.Rate, good = d.integer(e.val, join(path, "rate"), 1, 1<<62)
		ok = ok && good
	}
	alg := l.Algorithm
	conc := alg == Concurrency
	if e, has := get("period"); has {
		if conc {
			d.errorf(e.key, join(path, "period"), "concurrency takes lease (how long an unreleased slot stays taken), not period")
			ok = false
		} else {
			var good bool
			l.Period, good = d.duration(e.val, join(path, "period"), time.Microsecond)
			ok = ok && good
		}
	} else if alg != "" && !conc {
		d.errorf(n, path, `missing field "period" (the window or refill period, such as "1m")`)
		ok = false
	}
	if e, has := get("lease"); has {
		if alg != "" && !conc {
			d.errorf(e.key, join(path, "lease"), "lease is for concurrency only; %s takes period", alg)
			ok = false
		} else {
			var good bool
			l.Lease, good = d.duration(e.val, join(path, "lease"), time.Microsecond)
			ok = ok && good
		}
	} else if conc {
		d.errorf(n, path, `missing field "lease" (how long a slot never released stays taken, such as "30s")`)
		ok = false
	}
	bursty := alg == GCRA || alg == TokenBucket
	if e, has := get("burst"); has {
		if alg != "" && !bursty {
			d.errorf(e.key, join(path, "burst"), "burst is for gcra and token_bucket only")
			ok = false
		} else {
			var good bool
			l.Burst, good = d.integer(e.val, join(path, "burst"), 1, 1<<62)
			ok = ok && good
		}
	} else if bursty {
		l.Burst = l.Rate
	}
	if e, has := get("name"); has {
		var good bool
		l.Name, good = d.nonEmpty(e.val, join(path, "name"))
		ok = ok && good
	}
	return l, ln, ok
}

func (d *decoder) cost(n *yaml.Node, path string) *Cost {
	n = d.deref(n)
	c := &Cost{Pos: d.at(n)}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		c.Value, _ = d.integer(n, path, 0, sluice.MaxCost)
		return c
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want an integer or a mapping {header: NAME} / {metadata: NAME}, got %s", describe(n))
		return c
	}
	f, _ := d.fields(n, path, costFields)
	h, hasH := f["header"]
	m, hasM := f["metadata"]
	switch {
	case hasH && hasM:
		d.errorf(n, path, "want header or metadata, not both")
	case hasH:
		c.Header, _ = d.token(h.val, join(path, "header"))
	case hasM:
		c.Metadata, _ = d.token(m.val, join(path, "metadata"))
	default:
		d.errorf(n, path, "a cost mapping reads the cost from a request: want header or metadata (or write a constant: cost: 5)")
	}
	c.Default = 1
	if e, ok := f["default"]; ok {
		c.Default, _ = d.integer(e.val, join(path, "default"), 0, sluice.MaxCost)
	}
	if e, ok := f["max"]; ok {
		c.Max, _ = d.integer(e.val, join(path, "max"), 1, sluice.MaxCost)
		if c.Max > 0 && c.Default > c.Max {
			d.errorf(e.key, join(path, "max"), "max %d is below default %d", c.Max, c.Default)
		}
	}
	return c
}

func (d *decoder) tiers(n *yaml.Node) *Tiers {
	n = d.deref(n)
	t := &Tiers{Pos: d.at(n)}
	f, ok := d.fields(n, "tiers", tiersFields)
	if !ok {
		return t
	}
	for _, k := range []string{"header", "metadata", "claim", "key", "table", "default"} {
		if e, ok := f[k]; ok {
			d.c.Pos["tiers."+k] = d.at(e.key)
		}
	}
	var sources []string
	for _, k := range []string{"header", "metadata", "claim", "key"} {
		if _, ok := f[k]; ok {
			sources = append(sources, k)
		}
	}
	if len(sources) != 1 {
		d.errorf(n, "tiers", "want exactly one of header, metadata, claim or key (where a request's tier comes from), got %d", len(sources))
	}
	if e, ok := f["header"]; ok {
		t.Header, _ = d.token(e.val, "tiers.header")
	}
	if e, ok := f["metadata"]; ok {
		t.Metadata, _ = d.token(e.val, "tiers.metadata")
	}
	if e, ok := f["claim"]; ok {
		t.Claim, _ = d.nonEmpty(e.val, "tiers.claim")
	}
	if e, ok := f["key"]; ok {
		id := d.identity(e.val, "tiers.key", 0)
		t.Key = &id
		d.noteRefs(t.Key)
		if _, ok := f["table"]; !ok {
			d.errorf(e.key, "tiers.key", "a key needs a table: an identity's key names no tier by itself")
		}
	}
	if e, ok := f["table"]; ok {
		es, _ := d.mapping(e.val, "tiers.table", nil, true)
		t.Table = make(map[string]string, len(es))
		for _, te := range es {
			if d.over {
				break
			}
			if s, ok := d.nonEmpty(te.val, fmt.Sprintf("tiers.table[%q]", te.name)); ok {
				t.Table[te.name] = s
				d.tables = append(d.tables, tableEntry{s, d.deref(te.val)})
			}
		}
	}
	if e, ok := f["policies"]; ok {
		es, _ := d.mapping(e.val, "tiers.policies", nil, false)
		t.Policies = make(map[string][]Policy, len(es))
		for _, te := range es {
			t.Policies[te.name] = d.policies(te.val, fmt.Sprintf("tiers.policies[%q]", te.name))
		}
	} else {
		d.errorf(n, "tiers", `missing field "policies" (each tier's policies)`)
	}
	if e, ok := f["default"]; ok {
		if s, ok := d.str(e.val, "tiers.default"); ok {
			t.Default = s
			if _, known := t.Policies[s]; !known && t.Policies != nil {
				d.errorf(d.deref(e.val), "tiers.default", "tier %q is not in tiers.policies%s", s, didYouMean(s, sortedKeys(t.Policies)))
			}
		}
	} else {
		d.errorf(n, "tiers", `missing field "default" (the tier of requests whose tier is unknown)`)
	}
	return t
}

// noteRefs remembers the references in id for checkRefs.
func (d *decoder) noteRefs(id *Identity) {
	if id.Kind == KindRef {
		d.refs = append(d.refs, id)
	}
	for i := range id.Parts {
		d.noteRefs(&id.Parts[i])
	}
}

// checkRefs reports references to identities the file does not name, and
// named identities that refer to themselves.
func (d *decoder) checkRefs() {
	names := sortedKeys(d.c.Identities)
	for _, name := range names {
		id := d.c.Identities[name]
		d.noteRefs(&id)
	}
	for _, r := range d.refs {
		if _, ok := d.c.Identities[r.Ref]; !ok {
			d.errs = append(d.errs, r.Pos.Errorf("unknown identity %q: not an identity kind (%s) nor a name under identities%s",
				r.Ref, strings.Join(paramlessKinds, ", "), didYouMean(r.Ref, append(names, paramlessKinds...))))
		}
	}
	// A reference cycle among named identities has no key.
	done := map[string]bool{}
	var visit func(name string, trail []string)
	var walk func(id *Identity, trail []string)
	walk = func(id *Identity, trail []string) {
		if _, ok := d.c.Identities[id.Ref]; ok && id.Kind == KindRef {
			if i := slices.Index(trail, id.Ref); i >= 0 {
				d.errs = append(d.errs, id.Pos.Errorf("identity %q refers to itself (%s → %s)", id.Ref, strings.Join(trail[i:], " → "), id.Ref))
			} else {
				visit(id.Ref, trail)
			}
		}
		for i := range id.Parts {
			walk(&id.Parts[i], trail)
		}
	}
	visit = func(name string, trail []string) {
		if done[name] {
			return
		}
		id := d.c.Identities[name]
		walk(&id, append(trail, name))
		done[name] = true
	}
	for _, name := range names {
		visit(name, nil)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
