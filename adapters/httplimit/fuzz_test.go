package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzForwardingHeaders feeds arbitrary X-Forwarded-For and Forwarded
// values, from trusted and untrusted peers, to both parsers and the IP
// KeyFuncs: no panic, a bounded key, and an untrusted peer is always keyed
// by itself.
func FuzzForwardingHeaders(f *testing.F) {
	for _, s := range []string{"", "1.2.3.4", "1.2.3.4, 10.0.0.1", "[::1]:80", `for="[2001:db8::1]:4711";proto=http`,
		`for=unknown, for=_x`, `for="a,b";by=c`, `"`, `\`, ",,,", "for=", "for=\"\\\"\"", "1.2.3.4:99999", "::ffff:1.2.3.4"} {
		f.Add(s, s, true)
		f.Add(s, s, false)
	}
	xff := must(IP(IPOptions{Header: XForwardedFor, TrustedProxies: []string{"10.0.0.0/8", "::1/128"}}))
	fwd := must(IP(IPOptions{Header: Forwarded, TrustedProxies: []string{"10.0.0.0/8", "::1/128"}}))
	f.Fuzz(func(t *testing.T, xffVal, fwdVal string, trusted bool) {
		hops := lastXFFHops([]string{xffVal, xffVal}, maxHops)
		if len(hops) > maxHops {
			t.Fatalf("%d XFF hops kept", len(hops))
		}
		fors := lastForwardedFor([]string{fwdVal, fwdVal}, maxHops)
		if len(fors) > maxHops {
			t.Fatalf("%d Forwarded hops kept", len(fors))
		}
		for _, h := range append(hops, fors...) {
			parseHop(h)
		}
		peer := "203.0.113.1:1"
		if trusted {
			peer = "10.0.0.1:1"
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		r.Header["X-Forwarded-For"] = []string{xffVal}
		r.Header["Forwarded"] = []string{fwdVal}
		for _, kf := range []KeyFunc{xff, fwd} {
			k, ok := kf(r)
			if !ok || len(k) > MaxKeyLen || !strings.HasPrefix(k, "ip:") || !utf8.ValidString(k) {
				t.Fatalf("key %q, %v", k, ok)
			}
			if !trusted && k != "ip:203.0.113.1" {
				t.Fatalf("untrusted peer keyed as %q", k)
			}
		}
	})
}

// FuzzKeyFuncs runs every KeyFunc on arbitrary input: no panic, keys
// bounded, slot-safe, and distinct inputs give distinct keys.
func FuzzKeyFuncs(f *testing.F) {
	for _, s := range hostile {
		if len(s) <= 4096 { // the 1 MB identity is in TestSubjectKeys; huge seeds only slow mutation
			f.Add(s, "other")
		}
	}
	f.Add("a", "a")
	f.Add("", "")
	lim := testLimiter(f)
	ipk := must(IP(IPOptions{Header: XForwardedFor, TrustedProxies: []string{"0.0.0.0/0", "::/0"}}))
	f.Fuzz(func(t *testing.T, a, b string) {
		mk := func(v string) *http.Request {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = v
			r.Header["X-Api-Key"] = []string{v}
			r.Header["X-Forwarded-For"] = []string{v}
			return r.WithContext(WithSubject(r.Context(), v))
		}
		ra, rb := mk(a), mk(b)
		kfs := []KeyFunc{Subject(), APIKey("X-API-Key"), RemoteIP(), ipk, Constant(a),
			Join(Subject(), APIKey("X-API-Key")), FirstOf(Subject(), RemoteIP())}
		for i, kf := range kfs {
			ka, oka := kf(ra)
			kb, okb := kf(rb)
			if oka {
				checkSlotSafe(t, lim, ka)
			}
			if okb {
				checkSlotSafe(t, lim, kb)
			}
			// subject and API key (surrounding spaces aside) are injective,
			// and so is their join
			distinct := a != b
			if i == 1 || i == 5 {
				distinct = strings.TrimSpace(a) != strings.TrimSpace(b)
			}
			if i == 0 || i == 1 || i == 5 {
				if distinct && oka && okb && boundKey(ka) == boundKey(kb) {
					t.Fatalf("KeyFunc %d: %q and %q share key %q", i, a, b, ka)
				}
			}
		}
	})
}

func must(k KeyFunc, err error) KeyFunc {
	if err != nil {
		panic(err)
	}
	return k
}
