package httplimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A KeyFunc names the identity a request is counted against. It returns
// ok = false when the request carries no such identity (no verified
// subject, no API key header, an unparsable peer address), so FirstOf can
// fall through to the next KeyFunc and a policy whose KeyFunc finds nothing
// does not apply to the request.
//
// KeyFuncs see untrusted input. Whatever a KeyFunc returns, the middleware
// bounds it (see MaxKeyLen) before it reaches the Limiter, and the Limiter
// escapes or hashes it into its Redis key, so no identity can move a key's
// cluster slot or collide with another.
type KeyFunc func(r *http.Request) (key string, ok bool)

// MaxKeyLen is the longest key passed to the Limiter. A longer key, or one
// that starts with '#', is replaced by '#' and the hex SHA-256 of its bytes
// (65 bytes), so a literal key and a hashed one never meet.
const MaxKeyLen = 128

// boundKey applies MaxKeyLen.
func boundKey(k string) string {
	if len(k) <= MaxKeyLen && !strings.HasPrefix(k, "#") {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "#" + hex.EncodeToString(sum[:])
}

// maxLiteral is the longest subject kept readable inside a key.
const maxLiteral = 96

// tagged returns kind:value for short printable UTF-8 values and
// kind#SHA256HEX for anything else, so two values never share a key and
// every key is at most len(kind)+65 bytes.
func tagged(kind, v string) string {
	if len(v) <= maxLiteral && utf8.ValidString(v) && !hasControl(v) {
		return kind + ":" + v
	}
	sum := sha256.Sum256([]byte(v))
	return kind + "#" + hex.EncodeToString(sum[:])
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return true
		}
	}
	return false
}

type subjectKey struct{}

// WithSubject returns a context carrying the verified subject of a request
// (a user or service ID). Call it from the authentication middleware that
// verified the credential (a JWT's signature and expiry, a session), never
// from code that merely decoded one: Subject trusts whatever is here.
func WithSubject(ctx context.Context, subject string) context.Context {
	return context.WithValue(ctx, subjectKey{}, subject)
}

// SubjectFrom returns the subject stored by WithSubject.
func SubjectFrom(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(subjectKey{}).(string)
	return s, ok && s != ""
}

// Subject keys a request by the verified subject in its context (see
// WithSubject): "sub:SUBJECT", or "sub#SHA256" for subjects longer than 96
// bytes, not valid UTF-8 or holding control characters. A request without
// a subject has no identity.
func Subject() KeyFunc {
	return func(r *http.Request) (string, bool) {
		s, ok := SubjectFrom(r.Context())
		if !ok {
			return "", false
		}
		return tagged("sub", s), true
	}
}

// SubjectFunc keys a request by a subject found by f, for applications
// whose authentication middleware stores the verified subject under its own
// context key. f must only return subjects that were verified.
func SubjectFunc(f func(*http.Request) (string, bool)) KeyFunc {
	return func(r *http.Request) (string, bool) {
		s, ok := f(r)
		if !ok || s == "" {
			return "", false
		}
		return tagged("sub", s), true
	}
}

// APIKey keys a request by the API key in the named header, hashed:
// "key:" and the first 128 bits of its SHA-256 in hex. The raw key is never
// kept, logged or sent to Redis. Surrounding spaces are trimmed; a missing
// or empty header is no identity. The key is not checked: use APIKey for
// limits in front of (or alongside) the code that verifies keys, and key
// expensive routes by Subject after verification.
func APIKey(header string) KeyFunc {
	header = http.CanonicalHeaderKey(header)
	return func(r *http.Request) (string, bool) {
		v := strings.TrimSpace(r.Header.Get(header))
		if v == "" {
			return "", false
		}
		sum := sha256.Sum256([]byte(v))
		return "key:" + hex.EncodeToString(sum[:16]), true
	}
}

// Constant keys every request by the same name: one quota shared by all
// clients (a global ceiling in front of a fragile backend).
func Constant(name string) KeyFunc {
	k := tagged("all", name)
	return func(*http.Request) (string, bool) { return k, true }
}

// Join keys a request by several identities at once (tenant and route,
// subject and API key). It answers only when every part answers. Parts are
// length-prefixed, so ("a|b", "c") and ("a", "b|c") stay distinct.
func Join(parts ...KeyFunc) KeyFunc {
	parts = compact(parts)
	return func(r *http.Request) (string, bool) {
		if len(parts) == 0 {
			return "", false
		}
		var b strings.Builder
		for i, p := range parts {
			k, ok := p(r)
			if !ok {
				return "", false
			}
			k = boundKey(k)
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(strconv.Itoa(len(k)))
			b.WriteByte('=')
			b.WriteString(k)
		}
		return boundKey(b.String()), true
	}
}

// FirstOf returns the key of the first KeyFunc that answers: FirstOf(Subject(),
// APIKey("X-API-Key"), ip) keys signed-in users by subject, other API
// clients by key, and everyone else by address. Because the built-in
// KeyFuncs prefix their keys by kind (sub:, key:, ip:), a subject can never
// take the quota of an address that happens to spell the same.
func FirstOf(chain ...KeyFunc) KeyFunc {
	chain = compact(chain)
	return func(r *http.Request) (string, bool) {
		for _, f := range chain {
			if k, ok := f(r); ok {
				return k, true
			}
		}
		return "", false
	}
}

func compact(fs []KeyFunc) []KeyFunc {
	out := make([]KeyFunc, 0, len(fs))
	for _, f := range fs {
		if f != nil {
			out = append(out, f)
		}
	}
	return out
}
