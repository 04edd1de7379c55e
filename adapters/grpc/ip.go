package grpclimit

import (
	"context"
	"net"
	"net/netip"

	"google.golang.org/grpc/peer"

	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// ProxyHeader names the metadata key a trusted proxy writes the client
// address into (httplimit.ProxyHeader).
type ProxyHeader = ratepolicy.ProxyHeader

const (
	// NoProxyHeader (the default) ignores forwarding metadata: the client
	// is the connection's peer.
	NoProxyHeader = ratepolicy.NoProxyHeader
	// XForwardedFor reads x-forwarded-for metadata.
	XForwardedFor = ratepolicy.XForwardedFor
	// Forwarded reads RFC 7239 forwarded metadata.
	Forwarded = ratepolicy.Forwarded
)

// IPOptions configures IP (httplimit.IPOptions: the same trust rules).
type IPOptions = ratepolicy.IPOptions

// IP returns a KeyFunc keying calls by client address, "ip:192.0.2.1" or
// "ip:2001:db8:1:2::/64", with httplimit.IP's trust model: the client is
// the connection's peer unless the peer is one of TrustedProxies and
// Header is set; then the forwarding metadata is walked from the right
// past every trusted hop and the first untrusted one is the client. A call
// over a connection with no IP address (a Unix socket, bufconn) has no
// identity, unless WithClientIP stored one.
func IP(opts IPOptions) (KeyFunc, error) {
	res, err := ratepolicy.NewResolver("grpclimit", opts)
	if err != nil {
		return nil, err
	}
	key := "x-forwarded-for"
	if res.Header() == Forwarded {
		key = "forwarded"
	}
	return func(c *Call) (string, bool) {
		if a, ok := ClientIPFrom(c.ctx); ok {
			return res.Key(a), true
		}
		p, ok := peer.FromContext(c.ctx)
		if !ok {
			return "", false
		}
		a, ok := addrOf(p.Addr)
		if !ok {
			return "", false
		}
		var lines []string
		if res.ReadsHeader(a) {
			lines = c.Metadata(key)
		}
		return res.Key(res.Client(a, lines)), true
	}, nil
}

// RemoteIP is IP with the zero IPOptions: the peer address, IPv6 by /64.
func RemoteIP() KeyFunc {
	k, _ := IP(IPOptions{})
	return k
}

func addrOf(a net.Addr) (netip.Addr, bool) {
	switch a := a.(type) {
	case nil:
		return netip.Addr{}, false
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		return ratepolicy.Norm(ip), ok
	default:
		return ratepolicy.ParseRemoteAddr(a.String())
	}
}

// WithClientIP returns a context carrying a client address resolved by
// other trusted code; IP KeyFuncs use it in place of the peer and the
// forwarding metadata. It is httplimit.WithClientIP.
func WithClientIP(ctx context.Context, a netip.Addr) context.Context {
	return ratepolicy.WithClientIP(ctx, a)
}

// ClientIPFrom returns the address stored by WithClientIP, normalised.
func ClientIPFrom(ctx context.Context) (netip.Addr, bool) { return ratepolicy.ClientIPFrom(ctx) }
