package rlsconf

import (
	"net/netip"
	"strings"

	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// Entry is one key and value of a request's descriptor.
type Entry struct{ Key, Value string }

// Match is the rule a descriptor falls under.
type Match struct {
	// Rule is nil when no rule applies.
	Rule *Rule
	// StatsKey names the rule's statistics for this descriptor:
	// Rule.Key, or with detailed_metric or value_to_metric the
	// descriptor's own values in place of the rule's
	// ("domain.key1_value1.key2_value2").
	StatsKey string
	// Shared holds, for each entry matched by a wildcard value with
	// share_threshold, the wildcard ("files/*"), and "" for the others;
	// nil when there is none. Every value a shared wildcard matches is
	// counted as one.
	Shared []string
}

// level is what one entry of a descriptor matched.
type level struct {
	n       *node
	wild    string // the wildcard composite key it matched, or ""
	byValue bool   // matched key_value (or a wildcard), not the key alone
}

// Lookup finds the rule of a descriptor of domain, as envoyproxy/ratelimit
// finds it. At each depth the entry's key_value is looked for among the
// children, then the first wildcard (in the order written) whose prefix
// starts key_value, then the key alone; the walk goes down while the
// child found has children. A rule applies when it is found at the
// descriptor's last entry. ok is false when domain is not configured.
func (c *Config) Lookup(domain string, entries []Entry) (m Match, ok bool) {
	root := c.domains[domain]
	if root == nil {
		return Match{}, false
	}
	if len(entries) == 0 {
		return Match{}, true
	}
	var lbuf [8]level
	levels := lbuf[:0]
	var kbuf [128]byte
	cur := root
	var rule *Rule
	var shared []string
	for i, e := range entries {
		k := append(append(append(kbuf[:0], e.Key...), '_'), e.Value...)
		next := cur.children[string(k)]
		wild := ""
		if next == nil {
			for _, w := range cur.wildcards {
				if strings.HasPrefix(string(k), w[:len(w)-1]) {
					next, wild = cur.children[w], w
					break
				}
			}
		}
		byValue := next != nil
		if next == nil {
			next = cur.children[e.Key]
		}
		if next == nil {
			break
		}
		if wild != "" && next.share {
			if shared == nil {
				shared = make([]string, len(entries))
			}
			shared[i] = valuePart(wild, e.Key)
		}
		levels = append(levels, level{n: next, wild: wild, byValue: byValue})
		if next.rule != nil && i == len(entries)-1 {
			rule = next.rule
		}
		if len(next.children) == 0 {
			break
		}
		cur = next
	}
	if rule == nil {
		return Match{}, true
	}
	return Match{Rule: rule, StatsKey: statsKey(domain, entries, levels, rule, shared), Shared: shared}, true
}

// valuePart is the value part of a composite key of key: "files*" of
// "path_files*", or the whole composite when it does not start with key_.
func valuePart(composite, key string) string {
	if len(composite) > len(key) && strings.HasPrefix(composite, key) && composite[len(key)] == '_' {
		return composite[len(key)+1:]
	}
	return composite
}

// statsKey is the name of rule's statistics for a descriptor whose every
// entry matched levels: with detailed_metric the descriptor's values (a
// shared wildcard in place of the values it matched); else the rule's own
// key, with the values of the levels that say value_to_metric.
func statsKey(domain string, entries []Entry, levels []level, rule *Rule, shared []string) string {
	if !rule.DetailedMetric && plainKey(entries, levels) {
		return rule.Key
	}
	var b strings.Builder
	b.WriteString(domain)
	if rule.DetailedMetric {
		for i, e := range entries {
			b.WriteByte('.')
			b.WriteString(e.Key)
			switch {
			case shared != nil && shared[i] != "":
				b.WriteByte('_')
				b.WriteString(shared[i])
			case shared != nil && e.Value != "":
				b.WriteByte('_')
				b.WriteString(e.Value)
			case shared == nil:
				b.WriteByte('_')
				b.WriteString(e.Value)
			}
		}
		return b.String()
	}
	for i, l := range levels {
		e := entries[i]
		var v string
		switch {
		case l.wild != "" && shared != nil && shared[i] != "":
			v = shared[i]
		case l.wild != "" && l.n.toMetric:
			v = e.Value
		case l.wild != "":
			v = valuePart(l.wild, e.Key)
		case l.byValue, l.n.toMetric:
			v = e.Value
		}
		b.WriteByte('.')
		b.WriteString(e.Key)
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}

// plainKey reports whether the levels name a rule's statistics as its own
// key does: no value_to_metric, and no wildcard of a key-only descriptor
// matching a longer key.
func plainKey(entries []Entry, levels []level) bool {
	for i, l := range levels {
		if l.n.toMetric || l.wild != "" && valuePart(l.wild, entries[i].Key) == l.wild {
			return false
		}
	}
	return true
}

// DescriptorIdentity is the identity a rule without an Identity counts a
// descriptor of domain under: "rls/DOMAIN/KEY=VALUE/KEY=VALUE", a shared
// wildcard (shared[i], when not "") in place of the values it matched,
// with '%', '/' and '=' escaped in each part so that two descriptors never
// share an identity (the Limiter keeps a short one readable in its Redis
// key and hashes a longer one).
func DescriptorIdentity(domain string, entries []Entry, shared []string) string {
	n := 4 + len(domain)
	for _, e := range entries {
		n += 2 + len(e.Key) + len(e.Value)
	}
	b := make([]byte, 0, n)
	b = append(b, "rls/"...)
	b = appendEscaped(b, domain)
	for i, e := range entries {
		b = append(b, '/')
		b = appendEscaped(b, e.Key)
		b = append(b, '=')
		if shared != nil && shared[i] != "" {
			b = appendEscaped(b, shared[i])
		} else {
			b = appendEscaped(b, e.Value)
		}
	}
	return string(b)
}

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b = append(b, "%25"...)
		case '/':
			b = append(b, "%2F"...)
		case '=':
			b = append(b, "%3D"...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// defaultIP keys client addresses as httplimit's and grpclimit's IP
// identity does by default: each IPv4 address, IPv6 addresses by /64.
var defaultIP = func() *ratepolicy.Resolver {
	r, err := ratepolicy.NewResolver("rlsconf", ratepolicy.IPOptions{})
	if err != nil {
		panic(err) // the zero options are valid
	}
	return r
}()

// IdentityOf is the identity m's rule counts a descriptor of domain under:
// with an Identity, the application's key of the descriptor's last value
// (an address for ip: "ip:192.0.2.1"; a hashed API key; ...), bounded as
// the adapters bound theirs; otherwise, or when the value is not one
// (empty, not an address), DescriptorIdentity.
func (m *Match) IdentityOf(domain string, entries []Entry) string {
	if m.Rule != nil && m.Rule.Identity.Kind != "" && len(entries) > 0 {
		if k, ok := m.Rule.Identity.key(entries[len(entries)-1].Value); ok {
			return ratepolicy.BoundKey(k)
		}
	}
	return DescriptorIdentity(domain, entries, m.Shared)
}

// key is the application's key of value v.
func (id Identity) key(v string) (string, bool) {
	switch id.Kind {
	case IdentityIP:
		a, err := netip.ParseAddr(strings.TrimSpace(v))
		if err != nil {
			return "", false
		}
		return defaultIP.Key(ratepolicy.Norm(a)), true
	case IdentityAPIKey:
		return ratepolicy.APIKeyKey(v)
	case IdentitySubject:
		return ratepolicy.SubjectKey(v)
	case IdentityHeader:
		if v == "" {
			return "", false
		}
		return ratepolicy.Tagged("hdr:"+id.Name, v), true
	case IdentityMetadata:
		if v == "" {
			return "", false
		}
		return ratepolicy.Tagged("md:"+id.Name, v), true
	}
	return "", false
}
