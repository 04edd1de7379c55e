package verify

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Kind is the RESP2 type of a Reply.
type Kind uint8

// The reply kinds. KindAny only appears in expected replies (patterns).
const (
	KindNil    Kind = iota // a nil bulk string or nil array
	KindInt                // an integer
	KindBulk               // a bulk string
	KindStatus             // a simple string, such as OK
	KindError              // an error reply
	KindArray              // an array of replies
	KindAny                // in a pattern: matches any reply
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindNil:
		return "nil"
	case KindInt:
		return "integer"
	case KindBulk:
		return "bulk string"
	case KindStatus:
		return "status"
	case KindError:
		return "error"
	case KindArray:
		return "array"
	case KindAny:
		return "any"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Reply is one RESP2 reply, as a client of Redis sees what a script or a
// command returns. A script's error is a Reply of KindError, not a Go error:
// Go errors are kept for failures to reach the server.
//
// The text form of a reply (String, ParseReply) is the one used in step
// files: 42, "bulk", nil, ok:"OK", err:"ERR message", [1, "a", nil].
type Reply struct {
	Kind  Kind
	Int   int64   // KindInt
	Str   string  // KindBulk, KindStatus, KindError
	Elems []Reply // KindArray
}

// Nil is the nil reply.
var Nil = Reply{Kind: KindNil}

// Int returns an integer reply.
func Int(n int64) Reply { return Reply{Kind: KindInt, Int: n} }

// Bulk returns a bulk string reply.
func Bulk(s string) Reply { return Reply{Kind: KindBulk, Str: s} }

// Status returns a status (simple string) reply.
func Status(s string) Reply { return Reply{Kind: KindStatus, Str: s} }

// Err returns an error reply.
func Err(s string) Reply { return Reply{Kind: KindError, Str: s} }

// Array returns an array reply.
func Array(elems ...Reply) Reply {
	if elems == nil {
		elems = []Reply{}
	}
	return Reply{Kind: KindArray, Elems: elems}
}

// IsError reports whether r is an error reply.
func (r Reply) IsError() bool { return r.Kind == KindError }

// String formats r in the step-file syntax.
func (r Reply) String() string {
	var b strings.Builder
	r.write(&b)
	return b.String()
}

func (r Reply) write(b *strings.Builder) {
	switch r.Kind {
	case KindNil:
		b.WriteString("nil")
	case KindInt:
		b.WriteString(strconv.FormatInt(r.Int, 10))
	case KindBulk:
		b.WriteString(strconv.Quote(r.Str))
	case KindStatus:
		b.WriteString("ok:")
		b.WriteString(strconv.Quote(r.Str))
	case KindError:
		b.WriteString("err:")
		b.WriteString(strconv.Quote(r.Str))
	case KindArray:
		b.WriteByte('[')
		for i, e := range r.Elems {
			if i > 0 {
				b.WriteString(", ")
			}
			e.write(b)
		}
		b.WriteByte(']')
	case KindAny:
		b.WriteByte('_')
	default:
		fmt.Fprintf(b, "<%v>", r.Kind)
	}
}

// Equal reports whether r and o are the same reply, error texts compared
// after normalizeError.
func (r Reply) Equal(o Reply) bool {
	if r.Kind != o.Kind {
		return false
	}
	switch r.Kind {
	case KindInt:
		return r.Int == o.Int
	case KindBulk, KindStatus:
		return r.Str == o.Str
	case KindError:
		return normalizeError(r.Str) == normalizeError(o.Str)
	case KindArray:
		if len(r.Elems) != len(o.Elems) {
			return false
		}
		for i := range r.Elems {
			if !r.Elems[i].Equal(o.Elems[i]) {
				return false
			}
		}
	}
	return true
}

// Match reports whether got matches the pattern r: KindAny matches
// anything, an expected error matches an error whose normalized text starts
// with the expected text, everything else must be equal.
func (r Reply) Match(got Reply) bool {
	switch r.Kind {
	case KindAny:
		return true
	case KindError:
		return got.Kind == KindError && strings.HasPrefix(normalizeError(got.Str), normalizeError(r.Str))
	case KindArray:
		if got.Kind != KindArray || len(r.Elems) != len(got.Elems) {
			return false
		}
		for i := range r.Elems {
			if !r.Elems[i].Match(got.Elems[i]) {
				return false
			}
		}
		return true
	}
	return r.Equal(got)
}

var scriptSuffix = regexp.MustCompile(`\s*script: [0-9a-f]{40}, on @user_script:\d+\.$`)

// normalizeError strips what differs between runs of one script error on
// different servers: the "script: SHA, on @user_script:LINE." suffix Redis 7
// appends to errors raised by scripts, and surrounding space.
func normalizeError(s string) string {
	return strings.TrimSpace(scriptSuffix.ReplaceAllString(s, ""))
}

// ParseReply parses the step-file syntax of a reply (see Reply). The
// wildcard _ is accepted anywhere and matches any reply.
func ParseReply(s string) (Reply, error) {
	p := &replyParser{s: s}
	r, err := p.value(0)
	if err != nil {
		return Reply{}, err
	}
	p.space()
	if p.i < len(p.s) {
		return Reply{}, fmt.Errorf("verify: reply %q: unexpected %q at offset %d", s, p.s[p.i:], p.i)
	}
	return r, nil
}

// MustParseReply is ParseReply for literals in tests; it panics on a
// malformed reply.
func MustParseReply(s string) Reply {
	r, err := ParseReply(s)
	if err != nil {
		panic(err)
	}
	return r
}

type replyParser struct {
	s string
	i int
}

func (p *replyParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *replyParser) fail(format string, args ...any) error {
	return fmt.Errorf("verify: reply %q: %s at offset %d", p.s, fmt.Sprintf(format, args...), p.i)
}

func (p *replyParser) value(depth int) (Reply, error) {
	if depth > 64 {
		return Reply{}, p.fail("nested too deeply")
	}
	p.space()
	if p.i >= len(p.s) {
		return Reply{}, p.fail("missing value")
	}
	rest := p.s[p.i:]
	switch {
	case rest[0] == '[':
		p.i++
		elems := []Reply{}
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return Array(elems...), nil
		}
		for {
			e, err := p.value(depth + 1)
			if err != nil {
				return Reply{}, err
			}
			elems = append(elems, e)
			p.space()
			if p.i >= len(p.s) {
				return Reply{}, p.fail("missing ]")
			}
			switch p.s[p.i] {
			case ',':
				p.i++
			case ']':
				p.i++
				return Array(elems...), nil
			default:
				return Reply{}, p.fail("want , or ] but found %q", p.s[p.i])
			}
		}
	case rest[0] == '"' || rest[0] == '`':
		str, err := p.quoted()
		return Bulk(str), err
	case strings.HasPrefix(rest, "ok:"):
		p.i += 3
		str, err := p.quoted()
		return Status(str), err
	case strings.HasPrefix(rest, "err:"):
		p.i += 4
		str, err := p.quoted()
		return Err(str), err
	case word(rest) == "nil":
		p.i += 3
		return Nil, nil
	case word(rest) == "_":
		p.i++
		return Reply{Kind: KindAny}, nil
	case rest[0] == '-' || rest[0] >= '0' && rest[0] <= '9':
		w := word(rest)
		n, err := strconv.ParseInt(w, 10, 64)
		if err != nil {
			return Reply{}, p.fail("bad integer %q", w)
		}
		p.i += len(w)
		return Int(n), nil
	}
	return Reply{}, p.fail("unexpected %q; want an integer, \"string\", nil, ok:\"...\", err:\"...\", [...] or _", word(rest))
}

// word returns the run of s up to the next delimiter.
func word(s string) string {
	i := strings.IndexAny(s, " \t,]")
	if i < 0 {
		return s
	}
	return s[:i]
}

func (p *replyParser) quoted() (string, error) {
	q, err := strconv.QuotedPrefix(p.s[p.i:])
	if err != nil {
		return "", p.fail("want a quoted string")
	}
	p.i += len(q)
	s, err := strconv.Unquote(q)
	if err != nil {
		return "", p.fail("bad quoted string %s", q)
	}
	return s, nil
}
