package verify_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/gen"
	"github.com/sluice-go/sluice/verify"
)

func TestParseStepFile(t *testing.T) {
	src := `Doc text.

-- first --
at 1.5s
keys {u}:a "with space"
args 10 "" $now
do SET {u}:a x
reply [1, _]
ttl {u}:a 100
expect HGET {u}:a f => "7"

-- second inherits at, keys and args --
# a comment
reply err:"ERR x"

-- third --
at 2s
args 1
`
	sf, err := verify.ParseStepFile("x.steps.txtar", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if sf.Doc != "Doc text." || len(sf.Steps) != 3 {
		t.Fatalf("doc %q, %d steps", sf.Doc, len(sf.Steps))
	}
	first, second, third := sf.Steps[0], sf.Steps[1], sf.Steps[2]
	if first.Name != "first" || first.Line != 3 || first.At != 1500*time.Millisecond {
		t.Errorf("first: %q line %d at %v", first.Name, first.Line, first.At)
	}
	if strings.Join(first.Keys, "|") != "{u}:a|with space" || strings.Join(first.Args, "|") != "10||$now" {
		t.Errorf("first: keys %q args %q", first.Keys, first.Args)
	}
	if len(first.Do) != 1 || first.Reply.String() != "[1, _]" || first.TTLs[0] != (verify.TTLCheck{Key: "{u}:a", PTTL: 100, Line: 9}) {
		t.Errorf("first: do %v reply %v ttls %v", first.Do, first.Reply, first.TTLs)
	}
	if e := first.Expects[0]; strings.Join(e.Args, " ") != "HGET {u}:a f" || e.Reply.String() != `"7"` {
		t.Errorf("first: expect %v", e)
	}
	if second.At != first.At || strings.Join(second.Keys, "|") != "{u}:a|with space" || len(second.Do) != 0 || second.Reply.String() != `err:"ERR x"` {
		t.Errorf("second: at %v keys %q do %v reply %v", second.At, second.Keys, second.Do, second.Reply)
	}
	if third.Reply != nil || strings.Join(third.Args, "|") != "1" || third.At != 2*time.Second {
		t.Errorf("third: reply %v args %q at %v", third.Reply, third.Args, third.At)
	}
	at := verify.StartTime.Add(first.At)
	if got := verify.ExpandPlaceholders([]string{"$now", "$now_ms", "$now_s", "t$now"}, at); strings.Join(got, " ") != "1704067201500000 1704067201500 1704067201 t1704067201500000" {
		t.Errorf("Expand = %q", got)
	}
}

func TestParseStepFileErrors(t *testing.T) {
	src := `-- a --
at 2s
bogus 1
reply [1
ttl k
-- b --
at 1s
expect GET k
keys "open
-- a --
`
	_, err := verify.ParseStepFile("s.steps.txtar", []byte(src))
	var list gen.ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("err = %v, want a gen.ErrorList", err)
	}
	want := []string{
		`s.steps.txtar:3:1: unknown directive "bogus"; want at, keys, args, do, reply, ttl or expect`,
		`s.steps.txtar:4:7: reply "[1": missing ] at offset 2`,
		`s.steps.txtar:5:5: ttl needs a key and milliseconds: ttl KEY MS[±TOLERANCE] (-1: no TTL, -2: no key)`,
		`s.steps.txtar:7:4: time goes backwards: 1s is before the previous step's 2s`,
		`s.steps.txtar:8:8: expect needs a command and a reply: expect CMD ARG... => REPLY`,
		`s.steps.txtar:9:6: unterminated or malformed quoted argument "open`,
		`s.steps.txtar:10:4: step "a" already defined on line 1`,
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if _, err := verify.ParseStepFile("e.steps.txtar", []byte("just text\n")); err == nil || !strings.Contains(err.Error(), "no steps") {
		t.Errorf("a file without steps: %v", err)
	}
}

// TestRunStepsReportsFailures checks that each kind of expectation fails
// when it should, with the expected and actual values.
func TestRunStepsReportsFailures(t *testing.T) {
	script := "redis.call('SET', KEYS[1], ARGV[1], 'PX', 1000) return tonumber(ARGV[1])"
	steps := []*verify.Step{
		{Name: "right", Keys: []string{"k"}, Args: []string{"5"}, Reply: ptr(verify.Int(5)), TTLs: []verify.TTLCheck{{Key: "k", PTTL: 1000}},
			Expects: []verify.Command{{Args: []string{"GET", "k"}, Reply: verify.Bulk("5")}}},
		{Name: "wrong", At: 100 * time.Millisecond, Keys: []string{"k"}, Args: []string{"6"}, Reply: ptr(verify.Int(7)), TTLs: []verify.TTLCheck{{Key: "k", PTTL: 900}},
			Expects: []verify.Command{{Args: []string{"GET", "k"}, Reply: verify.Bulk("5")}}},
	}
	rep, err := verify.RunSteps(context.Background(), script, steps, verify.SandboxT(t), verify.RunT(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range rep.Failures {
		got = append(got, f.Step.Name+" "+f.Env+" "+f.What+": want "+f.Want+" got "+f.Got)
	}
	want := []string{
		"wrong sandbox reply: want 7 got 6",
		"wrong sandbox ttl k: want 900 got 1000",
		`wrong sandbox GET k: want "5" got "6"`,
		"wrong miniredis reply: want 7 got 6",
		"wrong miniredis ttl k: want 900 got 1000",
		`wrong miniredis GET k: want "5" got "6"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if rep.Steps != 2 || rep.OK() {
		t.Errorf("steps %d, OK %v", rep.Steps, rep.OK())
	}
	text := rep.Failures[0].String()
	for _, s := range []string{`step "wrong" on sandbox: reply differs`, "keys:     k", "args:     6", "expected: 7", "actual:   6"} {
		if !strings.Contains(text, s) {
			t.Errorf("failure text lacks %q:\n%s", s, text)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func FuzzParseStepFile(f *testing.F) {
	f.Add("-- a --\nat 1s\nkeys k\nargs 1 \"\" $now\ndo SET k v\nreply [1, _]\nttl k 5\nexpect GET k => \"v\"\n")
	f.Add("text\n-- b --\nreply err:\"x\"\n-- b --\n")
	f.Fuzz(func(t *testing.T, src string) {
		sf, err := verify.ParseStepFile("f.steps.txtar", []byte(src))
		if err != nil {
			var list gen.ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error %v is not a non-empty gen.ErrorList", err)
			}
			return
		}
		for i, st := range sf.Steps {
			if i > 0 && st.At < sf.Steps[i-1].At {
				t.Fatalf("step %q goes back in time", st.Name)
			}
		}
	})
}
