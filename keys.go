package sluice

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxLiteralIdentity is the longest identity kept readable in a key; longer
// ones are hashed.
const maxLiteralIdentity = 64

// identityTag returns the text placed between { and } in every key of one
// identity. Identities made only of letters, digits and . _ - @ / + = : and
// at most 64 bytes long are used as they are, so keys stay readable in
// redis-cli. Any other identity (braces, spaces, newlines, binary data,
// megabytes of text, or the empty string) is replaced by "~" followed by the
// hex SHA-256 of its bytes. "~" never appears in a literal identity, so a
// literal and a hashed identity cannot meet, and no identity can move a
// key's cluster slot (the tag never holds "{" or "}").
func identityTag(identity string) string {
	if isLiteralIdentity(identity) {
		return identity
	}
	sum := sha256.Sum256([]byte(identity))
	return "~" + hex.EncodeToString(sum[:])
}

func isLiteralIdentity(s string) bool {
	if s == "" || len(s) > maxLiteralIdentity {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !literalByte[s[i]] {
			return false
		}
	}
	return true
}

// literalByte marks the bytes a literal identity may hold: ASCII letters,
// digits and "._-@/+=:".
var literalByte = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._-@/+=:", byte(c)) >= 0
	}
	return t
}()

// key builds prefix:{tag}:suffix.
func key(prefix, identity, suffix string) string {
	tag := identityTag(identity)
	var b strings.Builder
	b.Grow(len(prefix) + len(tag) + len(suffix) + 4)
	b.WriteString(prefix)
	b.WriteString(":{")
	b.WriteString(tag)
	b.WriteString("}:")
	b.WriteString(suffix)
	return b.String()
}
