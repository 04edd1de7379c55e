package rlsconf

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocsConfigs loads every whole configuration file docs/envoy.md
// shows (a ```yaml block with a top-level domain:), as sluice-rls would.
func TestDocsConfigs(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	n := 0
	for i, b := range blocks {
		if !regexp.MustCompile(`(?m)^domain:`).MatchString(b[1]) {
			continue // Envoy's own configuration, or a fragment
		}
		n++
		name := fmt.Sprintf("envoy.md block %d", i+1)
		if _, err := Build([]File{{Name: name, Data: []byte(b[1])}}, Options{}); err != nil {
			t.Errorf("%s does not load:\n%v\n%s", name, err, strings.TrimSpace(b[1]))
		}
	}
	if n < 2 {
		t.Fatalf("found %d configuration files in docs/envoy.md, want at least 2", n)
	}
}
