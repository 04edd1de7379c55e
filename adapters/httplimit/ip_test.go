package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func ipReq(remote string, headers ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

func mustIP(t *testing.T, o IPOptions) KeyFunc {
	t.Helper()
	k, err := IP(o)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestIPTrust(t *testing.T) {
	xff := mustIP(t, IPOptions{Header: XForwardedFor, TrustedProxies: []string{"10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.200"}})
	fwd := mustIP(t, IPOptions{Header: Forwarded, TrustedProxies: []string{"10.0.0.0/8"}})
	remote := RemoteIP()
	cases := []struct {
		name string
		kf   KeyFunc
		req  *http.Request
		want string
	}{
		{"peer, no header", remote, ipReq("203.0.113.7:1234"), "ip:203.0.113.7"},
		{"headers ignored without trust config", remote, ipReq("203.0.113.7:1234", "X-Forwarded-For", "1.2.3.4", "Forwarded", "for=1.2.3.4"), "ip:203.0.113.7"},
		{"spoofed XFF from an untrusted peer", xff, ipReq("203.0.113.7:1234", "X-Forwarded-For", "1.2.3.4"), "ip:203.0.113.7"},
		{"trusted proxy: rightmost untrusted hop", xff, ipReq("10.1.1.1:80", "X-Forwarded-For", "6.6.6.6, 198.51.100.4, 10.2.2.2"), "ip:198.51.100.4"},
		{"trusted single address", xff, ipReq("192.0.2.200:80", "X-Forwarded-For", "198.51.100.4"), "ip:198.51.100.4"},
		{"address next to a trusted one is not trusted", xff, ipReq("192.0.2.201:80", "X-Forwarded-For", "198.51.100.4"), "ip:192.0.2.201"},
		{"several XFF lines form one list", xff, ipReq("10.1.1.1:80", "X-Forwarded-For", "198.51.100.4", "X-Forwarded-For", "10.3.3.3"), "ip:198.51.100.4"},
		{"all hops trusted: the leftmost", xff, ipReq("10.1.1.1:80", "X-Forwarded-For", "10.9.9.9, 10.8.8.8"), "ip:10.9.9.9"},
		{"malformed hop: last trusted hop", xff, ipReq("10.1.1.1:80", "X-Forwarded-For", "1.2.3.4, garbage, 10.8.8.8"), "ip:10.8.8.8"},
		{"malformed only hop: the proxy", xff, ipReq("10.1.1.1:80", "X-Forwarded-For", "nonsense"), "ip:10.1.1.1"},
		{"empty header: the proxy", xff, ipReq("10.1.1.1:80", "X-Forwarded-For", ""), "ip:10.1.1.1"},
		{"empty hop", xff, ipReq("10.1.1.1:80", "X-Forwarded-For", "1.2.3.4,,"), "ip:10.1.1.1"},
		{"XFF hop with port", xff, ipReq("10.1.1.1:80", "X-Forwarded-For", "198.51.100.4:5555"), "ip:198.51.100.4"},
		{"XFF bracketed IPv6", xff, ipReq("10.1.1.1:80", "X-Forwarded-For", "[2001:db8:1:2::5]"), "ip:2001:db8:1:2::/64"},
		{"trusted IPv6 proxy", xff, ipReq("[2001:db8:ffff:1::1]:443", "X-Forwarded-For", "198.51.100.4"), "ip:198.51.100.4"},
		{"XFF ignored when Forwarded is configured", fwd, ipReq("10.1.1.1:80", "X-Forwarded-For", "198.51.100.4"), "ip:10.1.1.1"},
		{"Forwarded", fwd, ipReq("10.1.1.1:80", "Forwarded", `for=198.51.100.4;proto=https;by=10.1.1.1`), "ip:198.51.100.4"},
		{"Forwarded rightmost untrusted", fwd, ipReq("10.1.1.1:80", "Forwarded", `for=6.6.6.6, for=198.51.100.4, for=10.5.5.5`), "ip:198.51.100.4"},
		{"Forwarded quoted IPv6 with port", fwd, ipReq("10.1.1.1:80", "Forwarded", `for="[2001:db8:cafe::17]:4711"`), "ip:2001:db8:cafe::/64"},
		{"Forwarded case-insensitive name", fwd, ipReq("10.1.1.1:80", "Forwarded", `For=198.51.100.4`), "ip:198.51.100.4"},
		{"Forwarded unknown", fwd, ipReq("10.1.1.1:80", "Forwarded", `for=6.6.6.6, for=unknown`), "ip:10.1.1.1"},
		{"Forwarded obfuscated", fwd, ipReq("10.1.1.1:80", "Forwarded", `for=_hidden, for=10.5.5.5`), "ip:10.5.5.5"},
		{"Forwarded quoted comma is one element", fwd, ipReq("10.1.1.1:80", "Forwarded", `for="1.2.3.4, 5.6.7.8"`), "ip:10.1.1.1"},
		{"Forwarded without for", fwd, ipReq("10.1.1.1:80", "Forwarded", `proto=https`), "ip:10.1.1.1"},
		{"Forwarded for twice", fwd, ipReq("10.1.1.1:80", "Forwarded", `for=1.2.3.4;for=5.6.7.8`), "ip:10.1.1.1"},
		{"Forwarded unterminated quote", fwd, ipReq("10.1.1.1:80", "Forwarded", `for="1.2.3.4`), "ip:10.1.1.1"},
		{"Forwarded multiple lines", fwd, ipReq("10.1.1.1:80", "Forwarded", `for=198.51.100.4`, "Forwarded", `for=10.7.7.7`), "ip:198.51.100.4"},
		{"IPv6 grouped by /64", remote, ipReq("[2001:db8:1:2:3:4:5:6]:443"), "ip:2001:db8:1:2::/64"},
		{"IPv4-mapped IPv6 is IPv4", remote, ipReq("[::ffff:198.51.100.4]:443"), "ip:198.51.100.4"},
		{"zone dropped", remote, ipReq("[fe80::1%eth0]:443"), "ip:fe80::/64"},
		{"bare address", remote, ipReq("198.51.100.4"), "ip:198.51.100.4"},
		{"trusted mapped proxy", xff, ipReq("[::ffff:10.1.1.1]:80", "X-Forwarded-For", "198.51.100.4"), "ip:198.51.100.4"},
	}
	for _, c := range cases {
		got, ok := c.kf(c.req)
		if !ok || got != c.want {
			t.Errorf("%s: key %q, %v; want %q", c.name, got, ok, c.want)
		}
	}
	for _, bad := range []string{"", "@", "not an address", "unix:/tmp/sock"} {
		if k, ok := remote(ipReq(bad)); ok {
			t.Errorf("RemoteAddr %q gave identity %q", bad, k)
		}
	}
}

func TestIPGrouping(t *testing.T) {
	k128 := mustIP(t, IPOptions{IPv6Prefix: 128})
	if got, _ := k128(ipReq("[2001:db8::1]:1")); got != "ip:2001:db8::1" {
		t.Errorf("/128: %q", got)
	}
	k24 := mustIP(t, IPOptions{IPv4Prefix: 24})
	a, _ := k24(ipReq("198.51.100.4:1"))
	b, _ := k24(ipReq("198.51.100.250:1"))
	if a != b || a != "ip:198.51.100.0/24" {
		t.Errorf("/24: %q and %q", a, b)
	}
}

func TestIPOptionsErrors(t *testing.T) {
	for _, o := range []IPOptions{
		{Header: XForwardedFor},
		{Header: Forwarded},
		{Header: XForwardedFor, TrustedProxies: []string{"10.0.0.0/33"}},
		{TrustedProxies: []string{"not-a-cidr"}},
		{TrustedProxies: []string{"::ffff:10.0.0.0/90"}},
		{IPv6Prefix: 129},
		{IPv6Prefix: -1},
		{IPv4Prefix: 33},
		{Header: ProxyHeader(9), TrustedProxies: []string{"10.0.0.1"}},
	} {
		if _, err := IP(o); err == nil || !strings.HasPrefix(err.Error(), "httplimit: ") {
			t.Errorf("IP(%+v) = %v, want an httplimit error", o, err)
		}
	}
}

// A huge forwarding header costs only its last hops, and still resolves.
func TestHugeForwardingHeaders(t *testing.T) {
	xff := mustIP(t, IPOptions{Header: XForwardedFor, TrustedProxies: []string{"10.0.0.0/8"}})
	huge := strings.Repeat("10.0.0.9, ", 200_000) + "10.0.0.8"
	if k, _ := xff(ipReq("10.1.1.1:80", "X-Forwarded-For", huge)); k != "ip:10.0.0.9" {
		t.Errorf("huge all-trusted XFF: %q, want the last hop examined", k)
	}
	fwd := mustIP(t, IPOptions{Header: Forwarded, TrustedProxies: []string{"10.0.0.0/8"}})
	hugeF := "for=6.6.6.6, " + strings.Repeat("for=10.0.0.9, ", 100_000) + "for=198.51.100.4"
	if k, _ := fwd(ipReq("10.1.1.1:80", "Forwarded", hugeF)); k != "ip:198.51.100.4" {
		t.Errorf("huge Forwarded: %q", k)
	}
	if k, _ := xff(ipReq("10.1.1.1:80", "X-Forwarded-For", strings.Repeat("x", 1<<20))); k != "ip:10.1.1.1" {
		t.Errorf("1 MB garbage XFF: %q", k)
	}
}
