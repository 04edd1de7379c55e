package ratepolicy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func mustResolver(t *testing.T, o IPOptions) *Resolver {
	t.Helper()
	res, err := NewResolver("test", o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestNewResolverErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    IPOptions
		want string // "" = valid
	}{
		{"zero value", IPOptions{}, ""},
		{"XFF behind proxies", IPOptions{Header: XForwardedFor, TrustedProxies: []string{"10.0.0.0/8"}}, ""},
		{"address, CIDR, IPv6, spaces", IPOptions{Header: Forwarded, TrustedProxies: []string{" 192.0.2.7 ", "fd00::/8", "2001:db8::1"}}, ""},
		{"IPv4-mapped prefix", IPOptions{TrustedProxies: []string{"::ffff:10.0.0.0/104"}}, ""},
		{"prefixes at their bounds", IPOptions{IPv4Prefix: 1, IPv6Prefix: 128}, ""},
		{"a header needs trusted proxies", IPOptions{Header: XForwardedFor}, "test: a proxy header needs TrustedProxies"},
		{"Forwarded too", IPOptions{Header: Forwarded, TrustedProxies: []string{}}, "test: a proxy header needs TrustedProxies"},
		{"unknown header", IPOptions{Header: ProxyHeader(7), TrustedProxies: []string{"10.0.0.0/8"}}, "test: unknown ProxyHeader 7"},
		{"bad address", IPOptions{TrustedProxies: []string{"10.0.0.300"}}, `test: trusted proxy "10.0.0.300": `},
		{"bad prefix", IPOptions{TrustedProxies: []string{"10.0.0.0/33"}}, `test: trusted proxy "10.0.0.0/33": `},
		{"host name", IPOptions{TrustedProxies: []string{"proxy.internal"}}, `test: trusted proxy "proxy.internal": `},
		{"empty entry", IPOptions{TrustedProxies: []string{""}}, `test: trusted proxy "": `},
		{"IPv4-mapped prefix shorter than /96", IPOptions{TrustedProxies: []string{"::ffff:0:0/95"}}, "IPv4-mapped prefix shorter than /96"},
		{"IPv4Prefix over 32", IPOptions{IPv4Prefix: 33}, "test: IPv4Prefix 33: want 1 to 32"},
		{"IPv4Prefix negative", IPOptions{IPv4Prefix: -1}, "test: IPv4Prefix -1: want 1 to 32"},
		{"IPv6Prefix over 128", IPOptions{IPv6Prefix: 129}, "test: IPv6Prefix 129: want 1 to 128"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewResolver("test", tc.o)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestResolverClient(t *testing.T) {
	xff := mustResolver(t, IPOptions{Header: XForwardedFor, TrustedProxies: []string{"10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.200", "::ffff:172.16.0.0/108"}})
	fwd := mustResolver(t, IPOptions{Header: Forwarded, TrustedProxies: []string{"10.0.0.0/8"}})
	none := mustResolver(t, IPOptions{TrustedProxies: []string{"10.0.0.0/8"}})
	var many []string // 40 trusted hops after the client: more than MaxHops
	for i := range 40 {
		many = append(many, fmt.Sprintf("10.0.1.%d", i))
	}
	proxy := "10.1.1.1"
	for _, tc := range []struct {
		name  string
		res   *Resolver
		peer  string
		lines []string
		want  string
	}{
		{"no header configured: the peer", none, proxy, []string{"198.51.100.4"}, proxy},
		{"spoofed header from an untrusted peer", xff, "203.0.113.7", []string{"1.2.3.4"}, "203.0.113.7"},
		{"spoofed hops left of the client", xff, proxy, []string{"6.6.6.6, 7.7.7.7, 198.51.100.4, 10.2.2.2"}, "198.51.100.4"},
		{"a spoofed trusted-looking hop left of the client is not reached", xff, proxy, []string{"10.9.9.9, 198.51.100.4"}, "198.51.100.4"},
		{"trusted single address", xff, "192.0.2.200", []string{"198.51.100.4"}, "198.51.100.4"},
		{"its neighbour is not trusted", xff, "192.0.2.201", []string{"198.51.100.4"}, "192.0.2.201"},
		{"several lines are one list", xff, proxy, []string{"198.51.100.4", "10.3.3.3"}, "198.51.100.4"},
		{"all hops trusted: the leftmost", xff, proxy, []string{"10.9.9.9, 10.8.8.8"}, "10.9.9.9"},
		{"more trusted hops than MaxHops: the last examined", xff, proxy, []string{"198.51.100.4, " + strings.Join(many, ", ")}, "10.0.1.8"},
		{"garbage hop: the last trusted hop", xff, proxy, []string{"1.2.3.4, garbage, 10.8.8.8"}, "10.8.8.8"},
		{"garbage only: the proxy", xff, proxy, []string{"nonsense"}, proxy},
		{"empty header: the proxy", xff, proxy, []string{""}, proxy},
		{"no header lines: the proxy", xff, proxy, nil, proxy},
		{"empty hop stops the walk", xff, proxy, []string{"1.2.3.4,,"}, proxy},
		{"hop with a port", xff, proxy, []string{"198.51.100.4:5555"}, "198.51.100.4"},
		{"bracketed IPv6", xff, proxy, []string{"[2001:db8:1:2::5]"}, "2001:db8:1:2::5"},
		{"IPv6 with a zone: the zone dropped", xff, proxy, []string{"fe80::1%eth0"}, "fe80::1"},
		{"bracketed IPv6 with a zone and a port", xff, proxy, []string{"[fe80::1%eth0]:443"}, "fe80::1"},
		{"IPv4-mapped hop unmapped", xff, proxy, []string{"::ffff:198.51.100.4"}, "198.51.100.4"},
		{"IPv4-mapped trusted prefix trusts the IPv4 peer", xff, "172.16.3.4", []string{"198.51.100.4"}, "198.51.100.4"},
		{"trusted IPv6 proxy", xff, "2001:db8:ffff:1::1", []string{"198.51.100.4"}, "198.51.100.4"},
		{"a bracketed IPv4 is not a hop", xff, proxy, []string{"[198.51.100.4]"}, proxy},
		{"a name is not a hop", xff, proxy, []string{"client.example"}, proxy},
		{"an over-long hop is not a hop", xff, proxy, []string{strings.Repeat("1", 65)}, proxy},
		{"XFF ignored when Forwarded is configured", fwd, proxy, []string{"198.51.100.4"}, proxy},
		{"Forwarded", fwd, proxy, []string{"for=198.51.100.4;proto=https;by=10.1.1.1"}, "198.51.100.4"},
		{"Forwarded, rightmost untrusted", fwd, proxy, []string{"for=6.6.6.6, for=198.51.100.4, for=10.5.5.5"}, "198.51.100.4"},
		{"Forwarded over several lines", fwd, proxy, []string{"for=198.51.100.4", "for=10.5.5.5"}, "198.51.100.4"},
		{"Forwarded quoted IPv6 with a port", fwd, proxy, []string{`for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::17"},
		{"Forwarded quoted IPv6 with a zone", fwd, proxy, []string{`for="[fe80::1%eth0]"`}, "fe80::1"},
		{"Forwarded parameter name in any case", fwd, proxy, []string{"For=198.51.100.4"}, "198.51.100.4"},
		{"Forwarded unknown", fwd, proxy, []string{"for=6.6.6.6, for=unknown"}, proxy},
		{"Forwarded obfuscated, behind a trusted hop", fwd, proxy, []string{"for=_hidden, for=10.5.5.5"}, "10.5.5.5"},
		{"Forwarded element without for", fwd, proxy, []string{"for=6.6.6.6, proto=https"}, proxy},
		{"Forwarded quoted comma is one element", fwd, proxy, []string{`for="1.2.3.4, 5.6.7.8"`}, proxy},
		{"Forwarded for= twice", fwd, proxy, []string{"for=1.2.3.4;for=5.6.7.8"}, proxy},
		{"Forwarded unterminated quote", fwd, proxy, []string{`for="198.51.100.4`}, proxy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.res.Client(netip.MustParseAddr(tc.peer), tc.lines)
			if want := netip.MustParseAddr(tc.want); got != want {
				t.Errorf("Client(%s, %q) = %v, want %v", tc.peer, tc.lines, got, want)
			}
		})
	}
}

func TestResolverKey(t *testing.T) {
	for _, tc := range []struct {
		o    IPOptions
		addr string
		want string
	}{
		{IPOptions{}, "192.0.2.1", "ip:192.0.2.1"},
		{IPOptions{}, "2001:db8:1:2:3:4:5:6", "ip:2001:db8:1:2::/64"},
		{IPOptions{IPv6Prefix: 128}, "2001:db8::1", "ip:2001:db8::1"},
		{IPOptions{IPv6Prefix: 48}, "2001:db8:1:2::1", "ip:2001:db8:1::/48"},
		{IPOptions{IPv4Prefix: 24}, "192.0.2.77", "ip:192.0.2.0/24"},
		{IPOptions{IPv4Prefix: 24}, "2001:db8:1:2::1", "ip:2001:db8:1:2::/64"},
	} {
		res := mustResolver(t, tc.o)
		if got := res.Key(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("%+v: Key(%s) = %q, want %q", tc.o, tc.addr, got, tc.want)
		}
	}
}

func TestParseHop(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" = not an address
	}{
		{"198.51.100.4", "198.51.100.4"},
		{" 198.51.100.4\t", "198.51.100.4"},
		{"198.51.100.4:80", "198.51.100.4"},
		{"2001:db8::1", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"[2001:db8::1]:8080", "2001:db8::1"},
		{"fe80::1%eth0", "fe80::1"},
		{"[fe80::1%eth0]", "fe80::1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"", ""},
		{"unknown", ""},
		{"_hidden", ""},
		{"[192.0.2.1]", ""},
		{"198.51.100.4:", ""},
		{"198.51.100.4:99999", ""},
		{"[2001:db8::1", ""},
		{"2001:db8::1]", ""},
		{"1.2.3", ""},
		{"01.2.3.4", ""},
		{"1.2.3.4/24", ""},
		{strings.Repeat("0", 65), ""},
		{"1.2.3.4\x00", ""},
	} {
		got, ok := ParseHop(tc.in)
		if tc.want == "" {
			if ok {
				t.Errorf("ParseHop(%q) = %v, want no address", tc.in, got)
			}
			continue
		}
		if want := netip.MustParseAddr(tc.want); !ok || got != want {
			t.Errorf("ParseHop(%q) = %v, %v; want %v", tc.in, got, ok, want)
		}
	}
}

func TestParseRemoteAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"192.0.2.1:1234", "192.0.2.1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[::ffff:192.0.2.1]:443", "192.0.2.1"},
		{"[fe80::1%eth0]:443", "fe80::1"},
		{"192.0.2.1", "192.0.2.1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"2001:db8::1", "2001:db8::1"},
		{"@", ""},
		{"/tmp/sock", ""},
		{"", ""},
		{"host:80", ""},
	} {
		got, ok := ParseRemoteAddr(tc.in)
		if tc.want == "" {
			if ok {
				t.Errorf("ParseRemoteAddr(%q) = %v, want none", tc.in, got)
			}
			continue
		}
		if want := netip.MustParseAddr(tc.want); !ok || got != want {
			t.Errorf("ParseRemoteAddr(%q) = %v, %v; want %v", tc.in, got, ok, want)
		}
	}
}

func TestLastXFFHops(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		n     int
		want  []string
	}{
		{[]string{"a, b", "c"}, 32, []string{"a", "b", "c"}},
		{[]string{"a, b", "c"}, 2, []string{"b", "c"}},
		{[]string{"a, b", "c"}, 1, []string{"c"}},
		{[]string{"a,,b"}, 32, []string{"a", "", "b"}},
		{[]string{" a ,\tb "}, 32, []string{"a", "b"}},
		{[]string{""}, 32, []string{""}},
		{nil, 32, []string{}},
		{[]string{strings.Repeat("x, ", 1000) + "last"}, 1, []string{"last"}},
	} {
		if got := LastXFFHops(tc.lines, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("LastXFFHops(%.40q, %d) = %q, want %q", tc.lines, tc.n, got, tc.want)
		}
	}
}

func TestLastForwardedFor(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		n     int
		want  []string
	}{
		{[]string{"for=a, for=b", "for=c"}, 32, []string{"a", "b", "c"}},
		{[]string{"for=a, for=b", "for=c"}, 2, []string{"b", "c"}},
		{[]string{"for=a, for=b, for=c, for=d, for=e"}, 3, []string{"c", "d", "e"}},
		{[]string{"for=a, proto=https, for=c"}, 32, []string{"a", "", "c"}},
		{[]string{`for="a, b", for=c`}, 32, []string{"a, b", "c"}},
		{[]string{`for="a\"b"`}, 32, []string{""}},
		{nil, 32, []string{}},
	} {
		if got := LastForwardedFor(tc.lines, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("LastForwardedFor(%q, %d) = %q, want %q", tc.lines, tc.n, got, tc.want)
		}
	}
}

func TestForwardedFor(t *testing.T) {
	for _, tc := range []struct{ elem, want string }{
		{"for=192.0.2.1", "192.0.2.1"},
		{"for=192.0.2.1;proto=https;by=10.0.0.1", "192.0.2.1"},
		{"proto=https; for=192.0.2.1", "192.0.2.1"},
		{" FOR = 192.0.2.1 ", "192.0.2.1"},
		{`for="[2001:db8::1]:80"`, "[2001:db8::1]:80"},
		{`for=unknown`, "unknown"},
		{"proto=https", ""},
		{"", ""},
		{"for", ""},
		{"=192.0.2.1", ""},
		{"for=", ""},
		{`for=""`, ""},
		{`for="192.0.2.1`, ""},
		{`for="192.0.2.1"x`, ""},
		{`for="a\\b"`, ""},
		{"for=1.2.3.4;for=5.6.7.8", ""},
		{"for=1.2.3.4;;", ""},
		{`by="a;b";for=192.0.2.1`, "192.0.2.1"},
	} {
		if got := forwardedFor(tc.elem); got != tc.want {
			t.Errorf("forwardedFor(%q) = %q, want %q", tc.elem, got, tc.want)
		}
	}
}

func TestClientIPContext(t *testing.T) {
	ctx := context.Background()
	if a, ok := ClientIPFrom(ctx); ok {
		t.Errorf("nothing stored: %v", a)
	}
	if a, ok := ClientIPFrom(WithClientIP(ctx, netip.Addr{})); ok {
		t.Errorf("the zero Addr is no address: %v", a)
	}
	for in, want := range map[string]string{
		"192.0.2.1":        "192.0.2.1",
		"::ffff:192.0.2.1": "192.0.2.1",
		"fe80::1%eth0":     "fe80::1",
	} {
		if a, ok := ClientIPFrom(WithClientIP(ctx, netip.MustParseAddr(in))); !ok || a != netip.MustParseAddr(want) {
			t.Errorf("WithClientIP(%s): %v, %v; want %s", in, a, ok, want)
		}
	}
}
