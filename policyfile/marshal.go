package policyfile

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Marshal writes c as a policy file in canonical form: fields in the order
// docs/policies.md lists them, map keys sorted, durations in their
// shortest Go spelling ("90s", "1m", "1h30m"), limits, keys and costs on
// one line each, derived fields (File, Pos) left out. Parse(Marshal(c))
// equals c but for the derived fields; Marshal checks that the text parses
// and returns Parse's errors (positioned in the text written) when it does
// not, so a hand-built Config that is not a valid file is refused.
func Marshal(c *Config) ([]byte, error) {
	if c == nil {
		return nil, errors.New("policyfile: Marshal of a nil Config")
	}
	root := mapping(false)
	add := func(k string, v *yaml.Node) { root.Content = append(root.Content, str(k), v) }
	if c.Version != "" {
		add("version", str(c.Version))
	}
	if c.Shadow {
		add("shadow", boolean(true))
	}
	if c.Headers != "" {
		add("headers", str(c.Headers))
	}
	if c.DegradedHeader != "" {
		add("degraded_header", str(c.DegradedHeader))
	}
	if c.ErrorDomain != "" {
		add("error_domain", str(c.ErrorDomain))
	}
	if c.NoDefaultExempt {
		add("no_default_exempt", boolean(true))
	}
	if c.Exempt != nil {
		s := seq(false)
		for _, e := range c.Exempt {
			s.Content = append(s.Content, str(e))
		}
		add("exempt", s)
	}
	if l := c.Limiter; l != nil {
		m := mapping(false)
		if l.Failure != "" {
			m.Content = append(m.Content, str("failure"), str(l.Failure))
		}
		if l.Replicas != 0 {
			m.Content = append(m.Content, str("replicas"), num(int64(l.Replicas)))
		}
		if l.Timeout != 0 {
			m.Content = append(m.Content, str("timeout"), str(formatDuration(l.Timeout)))
		}
		add("limiter", m)
	}
	if c.Identities != nil {
		m := mapping(false)
		for _, k := range sortedKeys(c.Identities) {
			m.Content = append(m.Content, str(k), identityNode(c.Identities[k]))
		}
		add("identities", m)
	}
	if c.Policies != nil {
		add("policies", policiesNode(c.Policies))
	}
	if c.Routes != nil {
		add("routes", policyMapNode(c.Routes))
	}
	if c.Methods != nil {
		add("methods", policyMapNode(c.Methods))
	}
	if t := c.Tiers; t != nil {
		m := mapping(false)
		kv := func(k string, v *yaml.Node) { m.Content = append(m.Content, str(k), v) }
		if t.Header != "" {
			kv("header", str(t.Header))
		}
		if t.Metadata != "" {
			kv("metadata", str(t.Metadata))
		}
		if t.Claim != "" {
			kv("claim", str(t.Claim))
		}
		if t.Key != nil {
			kv("key", identityNode(*t.Key))
		}
		if t.Table != nil {
			tm := mapping(false)
			for _, k := range sortedKeys(t.Table) {
				tm.Content = append(tm.Content, str(k), str(t.Table[k]))
			}
			if len(tm.Content) == 0 {
				tm.Style = yaml.FlowStyle
			}
			kv("table", tm)
		}
		kv("default", str(t.Default))
		kv("policies", policyMapNode(t.Policies))
		add("tiers", m)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("policyfile: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("policyfile: %w", err)
	}
	if _, err := Parse("(marshalled)", b.Bytes()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func policiesNode(ps []Policy) *yaml.Node {
	s := seq(false)
	if len(ps) == 0 {
		s.Style = yaml.FlowStyle
	}
	for _, p := range ps {
		m := mapping(false)
		kv := func(k string, v *yaml.Node) { m.Content = append(m.Content, str(k), v) }
		kv("name", str(p.Name))
		kv("limit", limitNode(p.Limit))
		kv("key", identityNode(p.Key))
		if p.Cost != nil {
			kv("cost", costNode(p.Cost))
		}
		if p.Shadow {
			kv("shadow", boolean(true))
		}
		if p.PerMessage {
			kv("per_message", boolean(true))
		}
		s.Content = append(s.Content, m)
	}
	return s
}

func policyMapNode(m map[string][]Policy) *yaml.Node {
	n := mapping(false)
	for _, k := range sortedKeys(m) {
		n.Content = append(n.Content, str(k), policiesNode(m[k]))
	}
	return n
}

func limitNode(l Limit) *yaml.Node {
	m := mapping(true)
	kv := func(k string, v *yaml.Node) { m.Content = append(m.Content, str(k), v) }
	kv("algorithm", str(l.Algorithm))
	kv("rate", num(l.Rate))
	if l.Period != 0 {
		kv("period", str(formatDuration(l.Period)))
	}
	if l.Burst != 0 {
		kv("burst", num(l.Burst))
	}
	if l.Lease != 0 {
		kv("lease", str(formatDuration(l.Lease)))
	}
	if l.Name != "" {
		kv("name", str(l.Name))
	}
	return m
}

func costNode(c *Cost) *yaml.Node {
	if c.Header == "" && c.Metadata == "" {
		return num(c.Value)
	}
	m := mapping(true)
	if c.Header != "" {
		m.Content = append(m.Content, str("header"), str(c.Header))
	} else {
		m.Content = append(m.Content, str("metadata"), str(c.Metadata))
	}
	m.Content = append(m.Content, str("default"), num(c.Default))
	if c.Max != 0 {
		m.Content = append(m.Content, str("max"), num(c.Max))
	}
	return m
}

// identityNode writes an identity: a bare word when it has no parameters,
// else a one-line mapping.
func identityNode(id Identity) *yaml.Node {
	one := func(v *yaml.Node) *yaml.Node {
		m := mapping(true)
		m.Content = append(m.Content, str(string(id.Kind)), v)
		return m
	}
	named := func(k, v string) *yaml.Node {
		m := mapping(true)
		m.Content = append(m.Content, str(k), str(v))
		return one(m)
	}
	switch id.Kind {
	case KindRef:
		return str(id.Ref)
	case KindSubject, KindRoute:
		return str(string(id.Kind))
	case KindIP:
		o := id.IP
		if o.TrustedProxies == nil && o.Header == "" && o.IPv4Prefix == 0 && o.IPv6Prefix == 0 {
			return str("ip")
		}
		m := mapping(true)
		if o.TrustedProxies != nil {
			s := seq(true)
			for _, p := range o.TrustedProxies {
				s.Content = append(s.Content, str(p))
			}
			m.Content = append(m.Content, str("trusted_proxies"), s)
		}
		if o.Header != "" {
			m.Content = append(m.Content, str("header"), str(o.Header))
		}
		if o.IPv4Prefix != 0 {
			m.Content = append(m.Content, str("ipv4_prefix"), num(int64(o.IPv4Prefix)))
		}
		if o.IPv6Prefix != 0 {
			m.Content = append(m.Content, str("ipv6_prefix"), num(int64(o.IPv6Prefix)))
		}
		return one(m)
	case KindAPIKey:
		return named("header", id.Header)
	case KindHeader, KindMetadata, KindConstant:
		return named("name", id.Name)
	case KindJoin, KindFirstOf:
		s := seq(true)
		for _, p := range id.Parts {
			s.Content = append(s.Content, identityNode(p))
		}
		return one(s)
	}
	return str(string(id.Kind)) // not a kind: Parse reports it
}

// formatDuration writes d in the shortest Go duration text: 90s, 1m,
// 1h30m, 1500ms, 250us.
func formatDuration(d time.Duration) string {
	if d <= 0 || d%time.Second != 0 {
		for _, u := range []struct {
			d    time.Duration
			name string
		}{{time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
			if d%u.d == 0 {
				return strconv.FormatInt(int64(d/u.d), 10) + u.name
			}
		}
		return strconv.FormatInt(int64(d), 10) + "ns"
	}
	var out []byte
	if h := d / time.Hour; h > 0 {
		out = append(strconv.AppendInt(out, int64(h), 10), 'h')
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		out = append(strconv.AppendInt(out, int64(m), 10), 'm')
		d -= m * time.Minute
	}
	if s := d / time.Second; s > 0 {
		out = append(strconv.AppendInt(out, int64(s), 10), 's')
	}
	return string(out)
}

func str(s string) *yaml.Node {
	n := &yaml.Node{}
	n.SetString(s)
	return n
}

func num(v int64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v, 10)}
}

func boolean(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

func mapping(flow bool) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if flow {
		n.Style = yaml.FlowStyle
	}
	return n
}

func seq(flow bool) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	if flow {
		n.Style = yaml.FlowStyle
	}
	return n
}
