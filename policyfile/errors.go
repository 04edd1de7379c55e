package policyfile

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Error is one problem at one place in a policy file.
type Error struct {
	File      string
	Line, Col int // 1-based
	Msg       string
}

func (e Error) Error() string { return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg) }

// Errors is every problem found in a file, in line and column order; its
// Error prints one "file:line:col: message" per line. Parse, Load and the
// adapters' FromFile return it.
type Errors []Error

func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the problems, so errors.As reaches an Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// sorted returns es in file, line and column order, without repeats (an
// anchor's mistake is reported once however many aliases use it).
func (es Errors) sorted() Errors {
	if len(es) == 0 {
		return nil
	}
	out := slices.Clone(es)
	slices.SortStableFunc(out, func(a, b Error) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col), cmp.Compare(a.Msg, b.Msg))
	})
	return slices.Compact(out)
}

// Err returns es as an error, in file, line and column order and without
// repeats (an anchor's mistake is reported once however many aliases use
// it), or nil when es is empty.
func (es Errors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es.sorted()
}

// suggest returns the known word nearest to w when it is close enough to
// be a misspelling ("rat" for "rate", "trusted-proxies" for
// "trusted_proxies"), else "".
func suggest(w string, known []string) string {
	norm := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '_' || r == '-' || r == ' ' {
				return -1
			}
			if r >= 'A' && r <= 'Z' {
				return r + 'a' - 'A'
			}
			return r
		}, s)
	}
	nw := norm(w)
	best, bestD := "", 0
	for _, k := range known {
		d := distance(nw, norm(k))
		if best == "" || d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" || bestD > max(1, len(nw)/3) {
		return ""
	}
	return best
}

// distance is the edit distance between a and b in bytes, a swap of two
// neighbours counting as one edit ("kye" is one from "key").
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			d[i][j] = min(d[i-1][j-1]+c, d[i-1][j]+1, d[i][j-1]+1)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// didYouMean is " (did you mean "x"?)" for the word nearest to w, or "".
func didYouMean(w string, known []string) string {
	if s := suggest(w, known); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// DidYouMean is " (did you mean "x"?)" for the word of known nearest to w
// when it is close enough to be a misspelling of it, or "": the hint
// Parse gives for an unknown field, for other readers of YAML files.
func DidYouMean(w string, known []string) string { return didYouMean(w, known) }
