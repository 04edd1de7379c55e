package policyfile_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/policyfile"
)

// docBlock is a full policy file of docs/policies.md: a block opened by
// "```yaml policyfile" (HTTP) or "```yaml policyfile grpc".
type docBlock struct {
	where string // docs/policies.md:LINE
	grpc  bool
	text  string // the block, after as many empty lines as precede it: errors name the line in the Markdown file
}

func docBlocks(t testing.TB) []docBlock {
	t.Helper()
	name := filepath.Join("..", "docs", "policies.md")
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	var cur *docBlock
	var lines []string
	start := 0
	for i, l := range strings.Split(string(data), "\n") {
		switch f := strings.Fields(l); {
		case cur == nil && len(f) >= 2 && f[0] == "```yaml" && f[1] == "policyfile":
			cur = &docBlock{where: fmt.Sprintf("docs/policies.md:%d", i+2), grpc: len(f) > 2 && f[2] == "grpc"}
			lines, start = nil, i+1
		case cur != nil && strings.TrimSpace(l) == "```":
			cur.text = strings.Repeat("\n", start) + strings.Join(lines, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			lines = append(lines, l)
		}
	}
	if len(out) < 5 {
		t.Fatalf("%s: %d full policy files, want every example marked ```yaml policyfile", name, len(out))
	}
	return out
}

// TestDocs parses every full policy file of docs/policies.md, and turns
// the HTTP ones into an httplimit.Config (adapters/grpc's tests turn the
// gRPC ones into a grpclimit.Config).
func TestDocs(t *testing.T) {
	for _, b := range docBlocks(t) {
		c, err := policyfile.Parse("docs/policies.md", []byte(b.text))
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if b.grpc {
			continue
		}
		if _, err := httplimit.FromFile(c, nil); err != nil {
			t.Errorf("%s: httplimit.FromFile: %v", b.where, err)
		}
	}
}
