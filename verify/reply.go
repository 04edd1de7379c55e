package verify

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// Kind is the RESP2 type of a Reply.
type Kind uint8

// The reply kinds. KindAny, KindRange and KindJSON only appear in expected
// replies (patterns).
const (
	KindNil    Kind = iota // a nil bulk string or nil array
	KindInt                // an integer
	KindBulk               // a bulk string
	KindStatus             // a simple string, such as OK
	KindError              // an error reply
	KindArray              // an array of replies
	KindAny                // in a pattern: matches any reply
	KindRange              // in a pattern: matches an integer from Int to Max
	KindJSON               // in a pattern: matches a bulk string holding the JSON value in Str
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
	case KindRange:
		return "range"
	case KindJSON:
		return "JSON"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Reply is one RESP2 reply, as a client of Redis sees what a script or a
// command returns. A script's error is a Reply of KindError, not a Go error:
// Go errors are kept for failures to reach the server.
//
// The text form of a reply (String, ParseReply) is the one used in step
// files: 42, "bulk", nil, ok:"OK", err:"ERR message", [1, "a", nil], and
// in patterns _, 100..200, 20000±50 and json:`{"a":1}`.
type Reply struct {
	Kind  Kind
	Int   int64   // KindInt; the smallest integer of a KindRange
	Max   int64   // the largest integer of a KindRange
	Str   string  // KindBulk, KindStatus, KindError; the JSON text of a KindJSON
	Elems []Reply // KindArray
}

// Nil returns the nil reply.
func Nil() Reply { return Reply{Kind: KindNil} }

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
	case KindRange:
		b.WriteString(strconv.FormatInt(r.Int, 10))
		b.WriteString("..")
		b.WriteString(strconv.FormatInt(r.Max, 10))
	case KindJSON:
		b.WriteString("json:")
		if strconv.CanBackquote(r.Str) {
			b.WriteString("`" + r.Str + "`")
		} else {
			b.WriteString(strconv.Quote(r.Str))
		}
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
	case KindRange:
		return r.Int == o.Int && r.Max == o.Max
	case KindBulk, KindStatus, KindJSON:
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
// anything, a KindRange an integer in its range, a KindJSON a bulk string
// holding the same JSON value (object members in any order), an expected
// error an error whose normalized text starts with the expected text;
// everything else must be equal.
func (r Reply) Match(got Reply) bool {
	switch r.Kind {
	case KindAny:
		return true
	case KindRange:
		return got.Kind == KindInt && r.Int <= got.Int && got.Int <= r.Max
	case KindJSON:
		return got.Kind == KindBulk && sameJSON(r.Str, got.Str)
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
		return Nil(), nil
	case strings.HasPrefix(rest, "json:"):
		p.i += 5
		str, err := p.quoted()
		if err != nil {
			return Reply{}, err
		}
		if !json.Valid([]byte(str)) {
			return Reply{}, p.fail("json:%s is not valid JSON", strconv.Quote(str))
		}
		return Reply{Kind: KindJSON, Str: str}, nil
	case word(rest) == "_":
		p.i++
		return Reply{Kind: KindAny}, nil
	case rest[0] == '-' || rest[0] >= '0' && rest[0] <= '9':
		w := word(rest)
		r, err := parseInteger(w)
		if err != nil {
			return Reply{}, p.fail("%v", err)
		}
		p.i += len(w)
		return r, nil
	}
	return Reply{}, p.fail("unexpected %q; want an integer, a range (1..5, 20000±50), \"string\", nil, ok:\"...\", err:\"...\", json:`...`, [...] or _", word(rest))
}

// parseInteger parses an integer, N, or a range of integers: LO..HI, or
// N±D (also written N+-D) for N-D..N+D.
func parseInteger(w string) (Reply, error) {
	num := func(s string) (int64, error) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bad integer %q", s)
		}
		return n, nil
	}
	for _, sep := range []string{"±", "+-"} {
		if c, d, ok := strings.Cut(w, sep); ok {
			n, err := num(c)
			if err != nil {
				return Reply{}, err
			}
			t, err := num(d)
			if err != nil || t < 0 {
				return Reply{}, fmt.Errorf("bad tolerance %q in %q: want a non-negative integer", d, w)
			}
			if n > math.MaxInt64-t || n < math.MinInt64+t {
				return Reply{}, fmt.Errorf("range %q overflows", w)
			}
			return Reply{Kind: KindRange, Int: n - t, Max: n + t}, nil
		}
	}
	if a, b, ok := strings.Cut(w, ".."); ok {
		lo, err := num(a)
		if err != nil {
			return Reply{}, err
		}
		hi, err := num(b)
		if err != nil {
			return Reply{}, err
		}
		if lo > hi {
			return Reply{}, fmt.Errorf("empty range %q: %d is above %d", w, lo, hi)
		}
		return Reply{Kind: KindRange, Int: lo, Max: hi}, nil
	}
	n, err := num(w)
	if err != nil {
		return Reply{}, err
	}
	return Int(n), nil
}

// sameJSON reports whether a and b hold the same JSON value: objects with
// the same members in any order, numbers equal as float64.
func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// jsonDocument reports whether s looks like a JSON object or array, the
// values whose text may differ between environments (cjson orders object
// members as the Lua table iterates them).
func jsonDocument(s string) bool {
	s = strings.TrimSpace(s)
	return s != "" && (s[0] == '{' || s[0] == '[') && json.Valid([]byte(s))
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
