package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/verify"
)

func reqWith(f func(r *http.Request) *http.Request) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	if f != nil {
		r = f(r)
	}
	return r
}

func withSubject(s string) *http.Request {
	return reqWith(func(r *http.Request) *http.Request { return r.WithContext(WithSubject(r.Context(), s)) })
}

// hostile are identities a client can make a KeyFunc return.
var hostile = []string{"a}b", "{x}", "{", "}", "a{b}c", strings.Repeat("x", 1<<20), "\xff\xfe\x00",
	"bad\xffutf8", "line\nbreak", "tab\tx", strings.Repeat("é", 60), "#deadbeef", "plain", "sub:x", "ip:192.0.2.1",
	strings.Repeat("y", maxLiteral), strings.Repeat("y", maxLiteral+1)}

// checkSlotSafe asserts what every key reaching the Limiter must hold: at
// most MaxKeyLen bytes, and a Redis key whose hash tag is exactly the
// identity's tag (no brace of the identity opens or closes a tag).
func checkSlotSafe(t *testing.T, lim *sluice.Limiter, k string) string {
	t.Helper()
	b := boundKey(k)
	if len(b) > MaxKeyLen {
		t.Fatalf("bounded key is %d bytes, above %d", len(b), MaxKeyLen)
	}
	rk := lim.Key(b, testLimit)
	open := strings.IndexByte(rk, '{')
	closing := strings.IndexByte(rk[open+1:], '}') + open + 1
	tag := rk[open+1 : closing]
	if strings.ContainsAny(tag, "{}") || rk[closing:] != "}:"+testLimit.Name {
		t.Fatalf("key %q of identity %.40q has a hash tag that is not the identity's", rk, k)
	}
	if verify.Slot(rk) != verify.Slot("{"+tag+"}") {
		t.Fatalf("key %q is not in the slot of its tag", rk)
	}
	return rk
}

func TestSubjectKeys(t *testing.T) {
	lim := testLimiter(t)
	seen := map[string]string{}
	for _, s := range append(hostile, "alice", "Alice") {
		k, ok := Subject()(withSubject(s))
		if !ok {
			t.Fatalf("subject %.20q: no identity", s)
		}
		if !strings.HasPrefix(k, "sub:") && !strings.HasPrefix(k, "sub#") {
			t.Errorf("subject key %.40q lacks its kind prefix", k)
		}
		if len(k) > 4+maxLiteral {
			t.Errorf("subject key is %d bytes", len(k))
		}
		if !utf8.ValidString(k) || hasControl(k) {
			t.Errorf("subject key %q holds invalid UTF-8 or control characters", k)
		}
		rk := checkSlotSafe(t, lim, k)
		if prev, dup := seen[rk]; dup {
			t.Errorf("subjects %.20q and %.20q share key %q", prev, s, rk)
		}
		seen[rk] = s
	}
	if _, ok := Subject()(withSubject("")); ok {
		t.Error("empty subject gave an identity")
	}
	if _, ok := Subject()(reqWith(nil)); ok {
		t.Error("no subject gave an identity")
	}
	k, _ := SubjectFunc(func(*http.Request) (string, bool) { return "alice", true })(reqWith(nil))
	if k2, _ := Subject()(withSubject("alice")); k != k2 {
		t.Errorf("SubjectFunc key %q, Subject key %q", k, k2)
	}
}

func TestAPIKey(t *testing.T) {
	kf := APIKey("x-api-key")
	get := func(v string) (string, bool) {
		return kf(reqWith(func(r *http.Request) *http.Request { r.Header.Set("X-API-Key", v); return r }))
	}
	k1, ok := get("secret-key-1")
	if !ok || !strings.HasPrefix(k1, "key:") || len(k1) != 4+32 || strings.Contains(k1, "secret") {
		t.Fatalf("APIKey = %q, %v: want key: and 32 hex digits, no trace of the key", k1, ok)
	}
	if k2, _ := get("  secret-key-1 "); k2 != k1 {
		t.Errorf("surrounding spaces changed the key: %q vs %q", k2, k1)
	}
	if k3, _ := get("secret-key-2"); k3 == k1 {
		t.Error("two API keys share a key")
	}
	if _, ok := get(""); ok {
		t.Error("empty API key gave an identity")
	}
	if _, ok := kf(reqWith(nil)); ok {
		t.Error("missing header gave an identity")
	}
	lim := testLimiter(t)
	for _, h := range hostile {
		if k, ok := get(h); ok {
			checkSlotSafe(t, lim, k)
		}
	}
}

func TestJoinAndFirstOf(t *testing.T) {
	fixed := func(k string) KeyFunc { return func(*http.Request) (string, bool) { return k, true } }
	none := func(*http.Request) (string, bool) { return "", false }
	r := reqWith(nil)
	a, _ := Join(fixed("a|b"), fixed("c"))(r)
	b, _ := Join(fixed("a"), fixed("b|c"))(r)
	if a == b {
		t.Errorf("Join is ambiguous: %q", a)
	}
	if _, ok := Join(fixed("a"), none)(r); ok {
		t.Error("Join answered with a part missing")
	}
	if _, ok := Join()(r); ok {
		t.Error("empty Join answered")
	}
	long, _ := Join(fixed(strings.Repeat("z", 1<<20)), fixed(strings.Repeat("w", 1<<20)))(r)
	if len(long) > MaxKeyLen {
		t.Errorf("Join of huge parts is %d bytes", len(long))
	}
	if k, ok := FirstOf(none, nil, fixed("second"), fixed("third"))(r); !ok || k != "second" {
		t.Errorf("FirstOf = %q, %v", k, ok)
	}
	if _, ok := FirstOf(none)(r); ok {
		t.Error("FirstOf answered with nothing answering")
	}
	chain := FirstOf(Subject(), APIKey("X-API-Key"), RemoteIP())
	sub, _ := chain(withSubject("192.0.2.1"))
	ip, _ := chain(reqWith(nil)) // httptest's RemoteAddr is 192.0.2.1:1234
	if sub == ip || ip != "ip:192.0.2.1" {
		t.Errorf("a subject spelled like an address shares its key: %q, %q", sub, ip)
	}
	if k, _ := Constant("global")(r); k != "all:global" {
		t.Errorf("Constant = %q", k)
	}
}

func TestBoundKey(t *testing.T) {
	if boundKey("short") != "short" {
		t.Error("short key changed")
	}
	h := boundKey(strings.Repeat("k", MaxKeyLen+1))
	if len(h) != 65 || h[0] != '#' {
		t.Errorf("long key bound to %q", h)
	}
	// a literal key cannot pose as a hashed one
	if boundKey(h) == h {
		t.Error("a key starting with # is kept as it is")
	}
}

func TestWithClientIPTakesPrecedence(t *testing.T) {
	r := reqWith(func(r *http.Request) *http.Request {
		r.Header.Set("X-Forwarded-For", "198.51.100.1")
		return r.WithContext(WithClientIP(context.Background(), netip.MustParseAddr("::ffff:203.0.113.5")))
	})
	if k, _ := RemoteIP()(r); k != "ip:203.0.113.5" {
		t.Errorf("key = %q, want the context's address, unmapped", k)
	}
}
