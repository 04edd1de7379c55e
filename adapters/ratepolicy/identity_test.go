package ratepolicy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// sha is "#" and the hex SHA-256 of s: what a bounded or tagged key hashes
// to.
func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "#" + hex.EncodeToString(sum[:])
}

func TestBoundKey(t *testing.T) {
	at := strings.Repeat("k", MaxKeyLen)
	over := at + "k"
	for _, tc := range []struct{ name, in, want string }{
		{"short", "ip:192.0.2.1", "ip:192.0.2.1"},
		{"empty", "", ""},
		{"exactly MaxKeyLen", at, at},
		{"one byte over", over, sha(over)},
		{"a literal # is hashed, so it cannot pose as a hashed key", "#abc", sha("#abc")},
		{"a hashed key hashed again", sha(over), sha(sha(over))},
		{"binary under the bound is kept (the Limiter escapes it)", "a\x00{b}", "a\x00{b}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := BoundKey(tc.in)
			if got != tc.want {
				t.Errorf("BoundKey(%.20q…) = %q, want %q", tc.in, got, tc.want)
			}
			if len(got) > MaxKeyLen {
				t.Errorf("%d bytes: over MaxKeyLen", len(got))
			}
		})
	}
}

func TestTagged(t *testing.T) {
	at := strings.Repeat("v", MaxLiteral)
	for _, tc := range []struct{ name, kind, in, want string }{
		{"printable", "md:x-tenant", "acme", "md:x-tenant:acme"},
		{"UTF-8", "sub", "zoë", "sub:zoë"},
		{"exactly MaxLiteral", "sub", at, "sub:" + at},
		{"one byte over", "sub", at + "v", "sub" + sha(at+"v")},
		{"control character", "sub", "a\nb", "sub" + sha("a\nb")},
		{"DEL", "sub", "a\x7fb", "sub" + sha("a\x7fb")},
		{"invalid UTF-8", "sub", "a\xffb", "sub" + sha("a\xffb")},
		{"an encoded U+FFFD is taken for invalid", "sub", "a\uFFFDb", "sub" + sha("a\uFFFDb")},
		{"empty", "all", "", "all:"},
		{"a value looking like a hash stays literal and apart", "sub", sha("x")[1:], "sub:" + sha("x")[1:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Tagged(tc.kind, tc.in); got != tc.want {
				t.Errorf("Tagged(%q, %.20q…) = %q, want %q", tc.kind, tc.in, got, tc.want)
			}
		})
	}
	// ':' and '#' after the kind tell the literal and the hashed form apart.
	if Tagged("sub", sha("\n")) == Tagged("sub", "\n") {
		t.Error("a literal and a hashed value share a key")
	}
}

func TestIdentityKeys(t *testing.T) {
	apiKey := func(v string) string {
		sum := sha256.Sum256([]byte(v))
		return "key:" + hex.EncodeToString(sum[:16])
	}
	for _, tc := range []struct {
		name   string
		f      func(string) (string, bool)
		in     string
		want   string
		wantOK bool
	}{
		{"subject", SubjectKey, "alice", "sub:alice", true},
		{"empty subject is no identity", SubjectKey, "", "", false},
		{"long subject hashed", SubjectKey, strings.Repeat("s", 97), "sub" + sha(strings.Repeat("s", 97)), true},
		{"API key: 128 bits of its SHA-256", APIKeyKey, "secret-1", apiKey("secret-1"), true},
		{"API key trimmed", APIKeyKey, "  secret-1\t", apiKey("secret-1"), true},
		{"blank API key is no identity", APIKeyKey, " \t ", "", false},
		{"empty API key is no identity", APIKeyKey, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.f(tc.in)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.wantOK)
			}
			if strings.Contains(got, strings.TrimSpace(tc.in)) && strings.HasPrefix(got, "key:") {
				t.Errorf("the raw API key is in its key %q", got)
			}
		})
	}
	if got := ConstantKey("global"); got != "all:global" {
		t.Errorf("ConstantKey = %q", got)
	}
	if got, want := len(mustKey(t, APIKeyKey, strings.Repeat("x", 1<<20))), len("key:")+32; got != want {
		t.Errorf("a 1 MiB API key's key is %d bytes, want %d", got, want)
	}
}

func mustKey(t *testing.T, f func(string) (string, bool), v string) string {
	t.Helper()
	k, ok := f(v)
	if !ok {
		t.Fatalf("no key for %.20q", v)
	}
	return k
}

type keyFunc func(string) (string, bool)

func fixed(k string) keyFunc { return func(string) (string, bool) { return k, true } }

func none(string) (string, bool) { return "", false }

// echo keys a request by the request itself.
func echo(r string) (string, bool) { return r, r != "" }

func TestJoin(t *testing.T) {
	long := strings.Repeat("z", MaxKeyLen+1)
	for _, tc := range []struct {
		name   string
		parts  []keyFunc
		want   string
		wantOK bool
	}{
		{"two parts, length-prefixed", []keyFunc{fixed("a"), fixed("bc")}, "1=a|2=bc", true},
		{"a separator inside a part stays inside", []keyFunc{fixed("a|b"), fixed("c")}, "3=a|b|1=c", true},
		{"moved separator, another key", []keyFunc{fixed("a"), fixed("b|c")}, "1=a|3=b|c", true},
		{"one part", []keyFunc{fixed("ip:192.0.2.1")}, "12=ip:192.0.2.1", true},
		{"an empty key is a part", []keyFunc{fixed(""), fixed("x")}, "0=|1=x", true},
		{"a part bounded before joining", []keyFunc{fixed(long), fixed("x")}, "65=" + sha(long) + "|1=x", true},
		{"the whole bounded", []keyFunc{fixed(strings.Repeat("a", 100)), fixed(strings.Repeat("b", 100))},
			sha("100=" + strings.Repeat("a", 100) + "|100=" + strings.Repeat("b", 100)), true},
		{"nil parts ignored", []keyFunc{nil, fixed("a"), nil}, "1=a", true},
		{"a part without identity: none", []keyFunc{fixed("a"), none}, "", false},
		{"no parts: none", nil, "", false},
		{"only nil parts: none", []keyFunc{nil, nil}, "", false},
		{"the request reaches every part", []keyFunc{echo, echo}, "3=req|3=req", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Join(tc.parts...)("req")
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("Join = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
			if len(got) > MaxKeyLen {
				t.Errorf("%d bytes: over MaxKeyLen", len(got))
			}
		})
	}
}

func TestFirstOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chain  []keyFunc
		req    string
		want   string
		wantOK bool
	}{
		{"the first that answers", []keyFunc{none, fixed("second"), fixed("third")}, "r", "second", true},
		{"the first, when it answers", []keyFunc{fixed("first"), fixed("second")}, "r", "first", true},
		{"nil entries ignored", []keyFunc{nil, none, nil, fixed("x")}, "r", "x", true},
		{"depends on the request", []keyFunc{echo, fixed("fallback")}, "", "fallback", true},
		{"depends on the request (answers)", []keyFunc{echo, fixed("fallback")}, "r", "r", true},
		{"none answers", []keyFunc{none, none}, "r", "", false},
		{"empty chain", nil, "r", "", false},
		{"not bounded: the Engine bounds", []keyFunc{fixed("#x")}, "r", "#x", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := FirstOf(tc.chain...)(tc.req)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("FirstOf = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestSubjectContext(t *testing.T) {
	ctx := context.Background()
	if s, ok := SubjectFrom(ctx); ok || s != "" {
		t.Errorf("no subject stored: %q, %v", s, ok)
	}
	if s, ok := SubjectFrom(WithSubject(ctx, "")); ok {
		t.Errorf("an empty subject is no subject: %q, %v", s, ok)
	}
	if s, ok := SubjectFrom(WithSubject(WithSubject(ctx, "alice"), "bob")); !ok || s != "bob" {
		t.Errorf("the innermost subject: %q, %v; want bob", s, ok)
	}
}
