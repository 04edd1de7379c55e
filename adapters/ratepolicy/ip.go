package ratepolicy

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// ProxyHeader names the header (HTTP) or metadata key (gRPC) a trusted
// proxy writes the client address into.
type ProxyHeader int

const (
	// NoProxyHeader (the default) ignores every forwarding header: the
	// client is the peer of the connection.
	NoProxyHeader ProxyHeader = iota
	// XForwardedFor reads X-Forwarded-For (x-forwarded-for metadata).
	XForwardedFor
	// Forwarded reads the RFC 7239 Forwarded header's for= parameters.
	Forwarded
)

// MaxHops is the most forwarding hops examined, from the right. A chain
// with more trusted hops than this falls back to the last one examined.
const MaxHops = 32

// IPOptions configures a client-address key. The zero value keys by the
// connection's peer address, with IPv6 addresses grouped by /64.
type IPOptions struct {
	// Header is the forwarding header to read (default NoProxyHeader). It
	// is read only when the peer is in TrustedProxies.
	Header ProxyHeader
	// TrustedProxies are the addresses (192.0.2.7) and CIDR prefixes
	// (10.0.0.0/8, fd00::/8) of your own proxies and load balancers. A
	// request whose peer is not among them is keyed by the peer, whatever
	// its headers say. Header without TrustedProxies is an error.
	TrustedProxies []string
	// IPv6Prefix is the prefix length IPv6 clients are grouped by (default
	// 64: one customer network; 128 keys each address). An IPv6 client can
	// change the low 64 bits of its address at will.
	IPv6Prefix int
	// IPv4Prefix is the prefix length IPv4 clients are grouped by (default
	// 32: each address).
	IPv4Prefix int
}

// Resolver applies IPOptions: which address a request is counted against,
// and its key.
type Resolver struct {
	header  ProxyHeader
	trusted []netip.Prefix
	v4, v6  int
}

// NewResolver checks o; errors start with pkg.
func NewResolver(pkg string, o IPOptions) (*Resolver, error) {
	res := &Resolver{header: o.Header, v4: o.IPv4Prefix, v6: o.IPv6Prefix}
	if res.v4 == 0 {
		res.v4 = 32
	}
	if res.v6 == 0 {
		res.v6 = 64
	}
	if res.v4 < 1 || res.v4 > 32 {
		return nil, fmt.Errorf("%s: IPv4Prefix %d: want 1 to 32", pkg, o.IPv4Prefix)
	}
	if res.v6 < 1 || res.v6 > 128 {
		return nil, fmt.Errorf("%s: IPv6Prefix %d: want 1 to 128", pkg, o.IPv6Prefix)
	}
	switch o.Header {
	case NoProxyHeader, XForwardedFor, Forwarded:
	default:
		return nil, fmt.Errorf("%s: unknown ProxyHeader %d", pkg, int(o.Header))
	}
	for _, s := range o.TrustedProxies {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s: trusted proxy %q: %w", pkg, s, err)
		}
		res.trusted = append(res.trusted, p)
	}
	if o.Header != NoProxyHeader && len(res.trusted) == 0 {
		return nil, fmt.Errorf("%s: a proxy header needs TrustedProxies: without them every client could choose its own address", pkg)
	}
	return res, nil
}

// Header is the forwarding header the Resolver reads.
func (res *Resolver) Header() ProxyHeader { return res.header }

// ReadsHeader reports whether the client behind peer is read from the
// forwarding header: a header is configured and peer is a trusted proxy.
func (res *Resolver) ReadsHeader(peer netip.Addr) bool {
	return res.header != NoProxyHeader && res.isTrusted(peer)
}

// Client is the address a request from peer is counted against, given the
// lines of the forwarding header (ignored unless ReadsHeader(peer)): the
// header walked from the right past every trusted proxy, the first
// untrusted hop being the client. A malformed, obfuscated ("_hidden") or
// "unknown" hop stops the walk and the last trusted hop reached is used.
func (res *Resolver) Client(peer netip.Addr, lines []string) netip.Addr {
	if !res.ReadsHeader(peer) {
		return peer
	}
	var hops []string
	if res.header == XForwardedFor {
		hops = LastXFFHops(lines, MaxHops)
	} else {
		hops = LastForwardedFor(lines, MaxHops)
	}
	last := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := ParseHop(hops[i])
		if !ok {
			return last
		}
		if !res.isTrusted(a) {
			return a
		}
		last = a
	}
	return last
}

func (res *Resolver) isTrusted(a netip.Addr) bool {
	for _, p := range res.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Key is the key of client address a: "ip:192.0.2.1" or, grouped,
// "ip:2001:db8:1:2::/64".
func (res *Resolver) Key(a netip.Addr) string {
	bits := res.v6
	if a.Is4() {
		bits = res.v4
	}
	// One allocation: the key is built on the stack and copied once.
	var buf [64]byte
	b := append(buf[:0], "ip:"...)
	if bits == a.BitLen() {
		b = a.AppendTo(b)
	} else {
		p, _ := a.Prefix(bits)
		b = p.AppendTo(b)
	}
	return string(b)
}

func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() {
			bits := p.Bits() - 96
			if bits < 0 {
				return netip.Prefix{}, fmt.Errorf("IPv4-mapped prefix shorter than /96")
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), bits)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = Norm(a)
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Norm is a with IPv4-mapped IPv6 unmapped and the zone dropped.
func Norm(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// ParseRemoteAddr reads a peer address: "host:port", "[v6]:port" or a bare
// address, normalised.
func ParseRemoteAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return Norm(ap.Addr()), true
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return Norm(a), true
	}
	return netip.Addr{}, false
}

// ParseHop reads one forwarding hop: an address, optionally bracketed
// (IPv6) and optionally with a port. Anything else ("unknown", "_hidden",
// names, garbage) is not an address.
func ParseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 64 {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return Norm(a), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return Norm(ap.Addr()), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return Norm(a), true
		}
	}
	return netip.Addr{}, false
}

// LastXFFHops returns at most n entries from the right end of the merged
// X-Forwarded-For lines (several lines form one list, in order). It walks
// from the right, so a huge header costs only the bytes of the last n hops.
func LastXFFHops(lines []string, n int) []string {
	var rev []string
	for li := len(lines) - 1; li >= 0 && len(rev) < n; li-- {
		h := lines[li]
		for len(rev) < n {
			i := strings.LastIndexByte(h, ',')
			rev = append(rev, strings.TrimSpace(h[i+1:]))
			if i < 0 {
				break
			}
			h = h[:i]
		}
	}
	out := make([]string, len(rev))
	for i, v := range rev {
		out[len(rev)-1-i] = v
	}
	return out
}

// LastForwardedFor returns the for= values of the last n elements of the
// RFC 7239 Forwarded lines, left to right. An element without a for=
// parameter, or one that cannot be parsed, yields "" (a malformed hop).
// It scans once and keeps only n values, so a huge header costs time
// linear in its length and no more memory than n hops.
func LastForwardedFor(lines []string, n int) []string {
	ring := make([]string, 0, n)
	total := 0
	for _, line := range lines {
		eachQuoted(line, ',', func(elem string) bool {
			v := forwardedFor(elem)
			if len(ring) < n {
				ring = append(ring, v)
			} else {
				ring[total%n] = v
			}
			total++
			return true
		})
	}
	if total <= n {
		return ring
	}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, ring[(total+i)%n])
	}
	return out
}

// forwardedFor returns the value of the for= parameter of one Forwarded
// element, unquoted, or "" when it has none or is malformed.
func forwardedFor(elem string) string {
	found, bad := "", false
	eachQuoted(elem, ';', func(pair string) bool {
		pair = strings.TrimSpace(pair)
		eq := strings.IndexByte(pair, '=')
		if eq <= 0 {
			bad = true
			return false
		}
		if !strings.EqualFold(strings.TrimSpace(pair[:eq]), "for") {
			return true
		}
		v := strings.TrimSpace(pair[eq+1:])
		if strings.HasPrefix(v, `"`) {
			if len(v) < 2 || !strings.HasSuffix(v, `"`) || strings.ContainsAny(v[1:len(v)-1], `"\`) {
				bad = true
				return false
			}
			v = v[1 : len(v)-1]
		}
		if v == "" || found != "" { // empty, or for= given twice
			bad = true
			return false
		}
		found = v
		return true
	})
	if bad {
		return ""
	}
	return found
}

// eachQuoted calls f with each part of s split at sep outside
// double-quoted strings, until f returns false. An unterminated quote
// keeps the rest as one part.
func eachQuoted(s string, sep byte, f func(string) bool) {
	inQuote, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case inQuote && c == '\\':
			escaped = true
		case c == '"':
			inQuote = !inQuote
		case c == sep && !inQuote:
			if !f(s[start:i]) {
				return
			}
			start = i + 1
		}
	}
	f(s[start:])
}

type clientIPKey struct{}

// WithClientIP returns a context carrying a client address resolved by
// other trusted code; both adapters' IP keys use it in place of their own
// rules.
func WithClientIP(ctx context.Context, a netip.Addr) context.Context {
	return context.WithValue(ctx, clientIPKey{}, a)
}

// ClientIPFrom returns the address stored by WithClientIP, normalised.
func ClientIPFrom(ctx context.Context) (netip.Addr, bool) {
	a, ok := ctx.Value(clientIPKey{}).(netip.Addr)
	if !ok || !a.IsValid() {
		return netip.Addr{}, false
	}
	return Norm(a), true
}
