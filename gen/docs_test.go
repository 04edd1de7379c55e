package gen_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/gen"
)

const annotationsDoc = "../docs/annotations.md"

// fencedAfter returns the body of the fenced code block that follows marker.
func fencedAfter(t *testing.T, doc, marker string) string {
	t.Helper()
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Fatalf("%s: marker %q not found", annotationsDoc, marker)
	}
	rest := doc[i+len(marker):]
	start := strings.Index(rest, "```")
	if start < 0 {
		t.Fatalf("%s: no code block after %q", annotationsDoc, marker)
	}
	rest = rest[start:]
	nl := strings.IndexByte(rest, '\n')
	end := strings.Index(rest[nl+1:], "\n```\n")
	if nl < 0 || end < 0 {
		t.Fatalf("%s: unterminated code block after %q", annotationsDoc, marker)
	}
	return rest[nl+1 : nl+1+end+1]
}

// TestDocsExample checks that the generated Go shown in docs/annotations.md
// is what the generator produces for the example script shown there.
func TestDocsExample(t *testing.T) {
	b, err := os.ReadFile(annotationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	src := fencedAfter(t, doc, "<!-- example: fixed_window.lua -->")
	want := fencedAfter(t, doc, "<!-- generated: fixed_window.lua.go -->")
	out, err := gen.Generate("limits", []gen.File{{Path: "fixed_window.lua", Src: []byte(src)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out["fixed_window.lua.go"]); got != want {
		t.Errorf("%s shows other code than the generator writes for its example:\n%s", annotationsDoc, lineDiff(want, got))
	}
}

// TestDocsVariadicExample checks that every declaration shown in the
// excerpts of generated Go for the variadic example, in docs/annotations.md
// and docs/generated-code.md, is word for word in what the generator
// produces for the example script of docs/annotations.md.
func TestDocsVariadicExample(t *testing.T) {
	b, err := os.ReadFile(annotationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	src := fencedAfter(t, string(b), "<!-- example: multi_window.lua -->")
	out, err := gen.Generate("limits", []gen.File{{Path: "multi_window.lua", Src: []byte(src)}})
	if err != nil {
		t.Fatal(err)
	}
	got := string(out["multi_window.lua.go"])
	for _, path := range []string{annotationsDoc, "../docs/generated-code.md"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		excerpt := fencedAfter(t, string(b), "<!-- generated excerpt: multi_window.lua.go -->")
		parts := strings.Split(excerpt, "\n\n")
		if len(parts) < 3 {
			t.Fatalf("%s: the excerpt has %d declarations, want the Keys and Args structs and Call", path, len(parts))
		}
		for _, part := range parts {
			if !strings.Contains(got, strings.TrimSpace(part)+"\n") {
				t.Errorf("%s shows code the generator does not write for the example:\n%s\n\ngenerated:\n%s", path, part, got)
			}
		}
	}
}

var (
	quoted  = regexp.MustCompile(`"[^"]*"`)
	goNames = regexp.MustCompile(`both are \w+ in Go`)
	labels  = regexp.MustCompile(`::\w+::`)
)

// template blanks out the parts of a message that vary.
func template(s string) string {
	s = quoted.ReplaceAllString(s, `"…"`)
	s = goNames.ReplaceAllString(s, "both are … in Go")
	return labels.ReplaceAllString(s, "::…::")
}

// TestDocsListEveryError checks that docs/annotations.md describes every
// message of the parse error table.
func TestDocsListEveryError(t *testing.T) {
	b, err := os.ReadFile(annotationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := template(string(b))
	seen := map[string]bool{}
	for _, c := range parseErrorCases {
		for _, line := range c.want {
			_, msg, ok := strings.Cut(line, ": ")
			if !ok {
				t.Fatalf("malformed error line %q", line)
			}
			msg = strings.TrimPrefix(msg, "Lua syntax error: ")
			msg = template(msg)
			if seen[msg] {
				continue
			}
			seen[msg] = true
			if !strings.Contains(doc, msg) {
				t.Errorf("%s does not describe the message %q (case %q)", annotationsDoc, msg, c.name)
			}
		}
	}
	collision := `script "rate_keys" generates RateKeys, which script "rate" (a.lua) also generates; rename one`
	if !strings.Contains(string(b), collision) {
		t.Errorf("%s does not show the collision message %q", annotationsDoc, collision)
	}
}

// TestDocsListInitialisms checks that docs/annotations.md lists exactly the
// initialisms the generator writes in capitals.
func TestDocsListInitialisms(t *testing.T) {
	b, err := os.ReadFile(annotationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)The initialisms are those of Go's naming convention that staticcheck checks \(ST1003\) and GCRA:\s*(.*?)\s*\(the generator's own list`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: the list of initialisms not found", annotationsDoc)
	}
	listed := strings.Join(strings.Fields(strings.ReplaceAll(string(m[1]), ",", " ")), " ")
	if want := strings.Join(gen.Initialisms(), " "); listed != want {
		t.Errorf("%s lists the initialisms\n%s\nthe generator has\n%s", annotationsDoc, listed, want)
	}
}
