package httplimit

import (
	"context"
	"net/http"
	"net/netip"

	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// ProxyHeader names the header a trusted proxy writes the client address
// into.
type ProxyHeader = ratepolicy.ProxyHeader

const (
	// NoProxyHeader (the default) ignores every forwarding header: the
	// client is the peer of the TCP connection (Request.RemoteAddr).
	NoProxyHeader = ratepolicy.NoProxyHeader
	// XForwardedFor reads X-Forwarded-For.
	XForwardedFor = ratepolicy.XForwardedFor
	// Forwarded reads the RFC 7239 Forwarded header's for= parameters.
	Forwarded = ratepolicy.Forwarded
)

// IPOptions configures IP. The zero value keys by the connection's peer
// address, with IPv6 addresses grouped by /64.
type IPOptions = ratepolicy.IPOptions

// IP returns a KeyFunc keying requests by client address: "ip:192.0.2.1"
// or, grouped, "ip:2001:db8:1:2::/64". IPv4-mapped IPv6 addresses count as
// IPv4; zones are dropped.
//
// The client is the connection's peer unless the peer is a trusted proxy
// and Header is set; then the forwarding header is walked from the right
// (the hop nearest to this server) past every trusted proxy, and the first
// untrusted hop is the client. Clients can write anything into the left of
// the header; only the hops appended by your proxies count. A malformed,
// obfuscated ("_hidden") or "unknown" hop stops the walk and the last
// trusted hop reached is used instead, so garbage never gives a client a
// fresh identity.
//
// An address put into the request context by WithClientIP (the framework
// adapters do so when asked to use their framework's resolver) takes the
// place of all of this.
func IP(opts IPOptions) (KeyFunc, error) {
	res, err := ratepolicy.NewResolver("httplimit", opts)
	if err != nil {
		return nil, err
	}
	header := "X-Forwarded-For"
	if res.Header() == Forwarded {
		header = "Forwarded"
	}
	return func(r *http.Request) (string, bool) {
		if a, ok := ClientIPFrom(r.Context()); ok {
			return res.Key(a), true
		}
		peer, ok := ratepolicy.ParseRemoteAddr(r.RemoteAddr)
		if !ok {
			return "", false
		}
		var lines []string
		if res.ReadsHeader(peer) {
			lines = r.Header.Values(header)
		}
		return res.Key(res.Client(peer, lines)), true
	}, nil
}

// RemoteIP is IP with the zero IPOptions: the peer address, IPv6 by /64.
func RemoteIP() KeyFunc {
	k, _ := IP(IPOptions{})
	return k
}

// WithClientIP returns a context carrying a client address resolved by
// other trusted code (a framework's own client-IP resolver, configured with
// your proxies). IP KeyFuncs use it instead of RemoteAddr and forwarding
// headers. Never store an address taken from a request header unchecked.
func WithClientIP(ctx context.Context, a netip.Addr) context.Context {
	return ratepolicy.WithClientIP(ctx, a)
}

// ClientIPFrom returns the address stored by WithClientIP, normalised.
func ClientIPFrom(ctx context.Context) (netip.Addr, bool) { return ratepolicy.ClientIPFrom(ctx) }
