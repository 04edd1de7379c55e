package httplimit

import (
	"context"
	"net/http"
	"strings"

	"github.com/sluice-go/sluice/adapters/ratepolicy"
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
const MaxKeyLen = ratepolicy.MaxKeyLen

// WithSubject returns a context carrying the verified subject of a request
// (a user or service ID). Call it from the authentication middleware that
// verified the credential (a JWT's signature and expiry, a session), never
// from code that merely decoded one: Subject trusts whatever is here.
func WithSubject(ctx context.Context, subject string) context.Context {
	return ratepolicy.WithSubject(ctx, subject)
}

// SubjectFrom returns the subject stored by WithSubject.
func SubjectFrom(ctx context.Context) (string, bool) { return ratepolicy.SubjectFrom(ctx) }

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
		return ratepolicy.SubjectKey(s)
	}
}

// SubjectFunc keys a request by a subject found by f, for applications
// whose authentication middleware stores the verified subject under its own
// context key. f must only return subjects that were verified.
func SubjectFunc(f func(*http.Request) (string, bool)) KeyFunc {
	return func(r *http.Request) (string, bool) {
		s, ok := f(r)
		if !ok {
			return "", false
		}
		return ratepolicy.SubjectKey(s)
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
		return ratepolicy.APIKeyKey(r.Header.Get(header))
	}
}

// Header keys a request by the value of the named header (a tenant, a
// region): "hdr:NAME:VALUE" with NAME in lower case, or "hdr:NAME#SHA256"
// for values over 96 bytes, not UTF-8 or holding control characters. A
// missing or empty header is no identity. Clients write headers: key by
// one only what a client may spend as it likes, or a header your own
// proxy sets after authenticating the client.
func Header(name string) KeyFunc {
	canon, kind := http.CanonicalHeaderKey(name), "hdr:"+strings.ToLower(name)
	return func(r *http.Request) (string, bool) {
		v := r.Header.Get(canon)
		if v == "" {
			return "", false
		}
		return ratepolicy.Tagged(kind, v), true
	}
}

// WithClaims returns a context carrying verified claims of a request (plan,
// org), which a policy file's tiers can choose by (tiers: {claim: plan}).
// Call it from the authentication middleware that verified them.
func WithClaims(ctx context.Context, claims map[string]string) context.Context {
	return ratepolicy.WithClaims(ctx, claims)
}

// ClaimFrom returns the claim stored by WithClaims under name.
func ClaimFrom(ctx context.Context, name string) (string, bool) {
	return ratepolicy.ClaimFrom(ctx, name)
}

// Constant keys every request by the same name: one quota shared by all
// clients (a global ceiling in front of a fragile backend).
func Constant(name string) KeyFunc {
	k := ratepolicy.ConstantKey(name)
	return func(*http.Request) (string, bool) { return k, true }
}

// Join keys a request by several identities at once (tenant and route,
// subject and API key). It answers only when every part answers. Parts are
// length-prefixed, so ("a|b", "c") and ("a", "b|c") stay distinct.
func Join(parts ...KeyFunc) KeyFunc { return ratepolicy.Join(parts...) }

// FirstOf returns the key of the first KeyFunc that answers: FirstOf(Subject(),
// APIKey("X-API-Key"), ip) keys signed-in users by subject, other API
// clients by key, and everyone else by address. Because the built-in
// KeyFuncs prefix their keys by kind (sub:, key:, ip:), a subject can never
// take the quota of an address that happens to spell the same.
func FirstOf(chain ...KeyFunc) KeyFunc { return ratepolicy.FirstOf(chain...) }
