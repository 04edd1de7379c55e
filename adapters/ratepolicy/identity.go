package ratepolicy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key passed to the Limiter. A longer key, or one
// that starts with '#', is replaced by '#' and the hex SHA-256 of its bytes
// (65 bytes), so a literal key and a hashed one never meet.
const MaxKeyLen = 128

// BoundKey applies MaxKeyLen.
func BoundKey(k string) string {
	if len(k) <= MaxKeyLen && !strings.HasPrefix(k, "#") {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "#" + hex.EncodeToString(sum[:])
}

// MaxLiteral is the longest value Tagged keeps readable inside a key.
const MaxLiteral = 96

// Tagged returns kind:value for short printable UTF-8 values and
// kind#SHA256HEX for anything else, so two values never share a key and
// every key is at most len(kind)+65 bytes.
func Tagged(kind, v string) string {
	if len(v) <= MaxLiteral && utf8.ValidString(v) && !hasControl(v) {
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

// SubjectKey is the key of a verified subject: "sub:SUBJECT", or
// "sub#SHA256" for subjects longer than 96 bytes, not valid UTF-8 or
// holding control characters. The empty subject is no identity.
func SubjectKey(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	return Tagged("sub", s), true
}

// APIKeyKey is the key of an API key value: "key:" and the first 128 bits
// of its SHA-256 in hex, surrounding spaces trimmed. The raw value is never
// kept. An empty value is no identity.
func APIKeyKey(v string) (string, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(v))
	return "key:" + hex.EncodeToString(sum[:16]), true
}

// ConstantKey is the key every request of a Constant KeyFunc shares.
func ConstantKey(name string) string { return Tagged("all", name) }

// Join keys a request by several identities at once. It answers only when
// every part answers. Parts are bounded and length-prefixed, so ("a|b",
// "c") and ("a", "b|c") stay distinct. Nil parts are ignored.
func Join[F ~func(R) (string, bool), R any](parts ...F) F {
	parts = compact(parts)
	return func(r R) (string, bool) {
		if len(parts) == 0 {
			return "", false
		}
		var b strings.Builder
		for i, p := range parts {
			k, ok := p(r)
			if !ok {
				return "", false
			}
			k = BoundKey(k)
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(strconv.Itoa(len(k)))
			b.WriteByte('=')
			b.WriteString(k)
		}
		return BoundKey(b.String()), true
	}
}

// FirstOf returns the key of the first KeyFunc that answers. Nil entries
// are ignored.
func FirstOf[F ~func(R) (string, bool), R any](chain ...F) F {
	chain = compact(chain)
	return func(r R) (string, bool) {
		for _, f := range chain {
			if k, ok := f(r); ok {
				return k, true
			}
		}
		return "", false
	}
}

func compact[F ~func(R) (string, bool), R any](fs []F) []F {
	out := make([]F, 0, len(fs))
	for _, f := range fs {
		if f != nil {
			out = append(out, f)
		}
	}
	return out
}

type subjectKey struct{}

// WithSubject returns a context carrying the verified subject of a request.
// The HTTP and gRPC adapters' WithSubject are this one: a subject stored by
// either is seen by both.
func WithSubject(ctx context.Context, subject string) context.Context {
	return context.WithValue(ctx, subjectKey{}, subject)
}

// SubjectFrom returns the subject stored by WithSubject.
func SubjectFrom(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(subjectKey{}).(string)
	return s, ok && s != ""
}
