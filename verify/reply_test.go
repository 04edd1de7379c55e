package verify_test

import (
	"testing"

	"github.com/sluice-go/sluice/verify"
)

func TestParseReplyRoundTrip(t *testing.T) {
	for _, text := range []string{
		`42`, `-7`, `"bulk"`, `""`, `nil`, `ok:"OK"`, `err:"ERR boom"`, `[]`,
		`[1, "a", nil, [2, [3]], ok:"st", err:"x"]`, `_`, `[_, 1]`, `"tab\tand \"quote\""`,
		`19950..20050`, `-5..5`, `[1, 0..10]`, "json:`{\"a\":[1,2]}`", `json:"\"text with ` + "`" + `\""`,
	} {
		r, err := verify.ParseReply(text)
		if err != nil {
			t.Errorf("ParseReply(%s): %v", text, err)
			continue
		}
		if r.String() != text {
			t.Errorf("ParseReply(%s).String() = %s", text, r)
		}
	}
}

func TestParseReplyErrors(t *testing.T) {
	for _, text := range []string{``, `[1, 2`, `[1 2]`, `"open`, `ok:OK`, `12x`, `maybe`, `[1,]`, `1 2`,
		`5..1`, `1..`, `..1`, `1±`, `1±-2`, `1±x`, `json:{}`, "json:`{`", `9223372036854775807±1`} {
		if r, err := verify.ParseReply(text); err == nil {
			t.Errorf("ParseReply(%q) = %s, want an error", text, r)
		}
	}
}

func TestReplyMatch(t *testing.T) {
	got := verify.Array(verify.Int(1), verify.Bulk("x"), verify.Err("ERR sluice: gcra: limit must be >= 1 script: 0123456789012345678901234567890123456789, on @user_script:12."))
	for _, c := range []struct {
		want  string
		match bool
	}{
		{`[1, "x", err:"ERR sluice: gcra: limit must be >= 1"]`, true},
		{`[1, "x", err:"ERR sluice"]`, true}, // errors match by prefix
		{`[_, _, _]`, true},
		{`_`, true},
		{`[1, "x"]`, false},
		{`[1, "y", _]`, false},
		{`[1, "x", err:"ERR other"]`, false},
		{`[0..1, _, _]`, true},
		{`[1±0, _, _]`, true},
		{`[2+-1, _, _]`, true},
		{`[2..3, _, _]`, false},
		{`["1", _, _]`, false},            // a range matches integers only
		{`[1, 0..9, _]`, false},           // not a bulk string
		{`[1, "x", "ERR sluice"]`, false}, // a bulk string is not an error
		{`[ok:"1", "x", _]`, false},       // nor is a status an integer
	} {
		if m := verify.MustParseReply(c.want).Match(got); m != c.match {
			t.Errorf("%s matches %s: %v, want %v", c.want, got, m, c.match)
		}
	}
}

func TestParseReplyTolerance(t *testing.T) {
	r, err := verify.ParseReply(`20000±50`)
	if err != nil || r.Kind != verify.KindRange || r.Int != 19950 || r.Max != 20050 {
		t.Fatalf("20000±50 = %+v, %v", r, err)
	}
	for n, want := range map[int64]bool{19949: false, 19950: true, 20000: true, 20050: true, 20051: false} {
		if got := r.Match(verify.Int(n)); got != want {
			t.Errorf("20000±50 matches %d: %v", n, got)
		}
	}
}

func TestJSONPattern(t *testing.T) {
	want := verify.MustParseReply("json:`{\"name\": \"ada\", \"tags\": [\"a\", \"b\"], \"v\": 2}`")
	for doc, match := range map[string]bool{
		`{"v":2,"tags":["a","b"],"name":"ada"}`:   true,
		`{"name":"ada","tags":["a","b"],"v":2.0}`: true,
		`{"name":"ada","tags":["b","a"],"v":2}`:   false, // arrays keep their order
		`{"name":"ada","v":2}`:                    false,
		`not json`:                                false,
	} {
		if got := want.Match(verify.Bulk(doc)); got != match {
			t.Errorf("%s matches %s: %v, want %v", want, doc, got, match)
		}
	}
	if want.Match(verify.Status(`{"name":"ada","tags":["a","b"],"v":2}`)) {
		t.Error("a JSON pattern matches a status reply")
	}
	// Environments agree on JSON documents whose members come in another
	// order, not on other strings that differ.
	if !verify.SameReply(verify.Bulk(`{"a":1,"b":2}`), verify.Bulk(`{"b":2,"a":1}`)) || verify.SameReply(verify.Bulk(`1`), verify.Bulk(`1.0`)) {
		t.Error("SameReply: JSON documents are compared as JSON, other strings exactly")
	}
}

func TestNormalizeError(t *testing.T) {
	in := "ERR user_script:3: boom script: 82903a0434f1503e152f89c03c9acd881a0e8150, on @user_script:3."
	if got := verify.NormalizeError(in); got != "ERR user_script:3: boom" {
		t.Errorf("normalizeError = %q", got)
	}
	// sameReply compares Lua runtime errors by code and location only,
	// since Lua implementations word them differently.
	a := verify.Err("ERR user_script:3: attempt to perform arithmetic on local 'x' (a nil value) script: 82903a0434f1503e152f89c03c9acd881a0e8150, on @user_script:3.")
	b := verify.Err("ERR user_script:3: attempt to perform arithmetic on a nil value")
	c := verify.Err("ERR user_script:4: attempt to perform arithmetic on a nil value")
	if !verify.SameReply(a, b) || verify.SameReply(b, c) {
		t.Errorf("sameReply: same location %v (want true), other line %v (want false)", verify.SameReply(a, b), verify.SameReply(b, c))
	}
}

func FuzzParseReply(f *testing.F) {
	for _, s := range []string{`[1, "a", nil, ok:"x", err:"y", _]`, `-1`, `"\u00e9"`, `[[[]]]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := verify.ParseReply(s)
		if err != nil {
			return
		}
		// What parses prints back to text that parses to the same reply.
		again, err := verify.ParseReply(r.String())
		if err != nil {
			t.Fatalf("ParseReply(%q) printed %s, which does not parse: %v", s, r, err)
		}
		if again.String() != r.String() {
			t.Fatalf("round trip of %q: %s then %s", s, r, again)
		}
	})
}
