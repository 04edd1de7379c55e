package scripts_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// helpers returns the block of shared helpers of a script: from the MAX
// constant to the end of the function lib, with the script name in error
// messages replaced by NAME.
func helpers(t *testing.T, name, src string) string {
	t.Helper()
	start := strings.Index(src, "local MAX = ")
	end := strings.Index(src, "local function lib()")
	if start < 0 || end < 0 {
		t.Fatalf("%s: shared helpers not found", name)
	}
	end += strings.Index(src[end:], "\n  return h\nend\n") + len("\n  return h\nend\n")
	return strings.ReplaceAll(src[start:end], "'ERR sluice: "+name+": '", "'ERR sluice: NAME: '")
}

// TestSharedHelpers keeps the helpers every script carries (argument
// parsing, exact integer division, TTL rounding) identical in all of them,
// so a fix in one cannot be forgotten in the others.
func TestSharedHelpers(t *testing.T) {
	files, err := filepath.Glob("*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	var first, firstName string
	for _, f := range files {
		name := strings.TrimSuffix(f, ".lua")
		h := helpers(t, name, source(t, name))
		if !strings.Contains(h, "'ERR sluice: NAME: '") {
			t.Errorf("%s: error messages do not start with \"ERR sluice: %s: \"", f, name)
		}
		if first == "" {
			first, firstName = h, name
			continue
		}
		if h != first {
			t.Errorf("%s: shared helpers differ from %s.lua", f, firstName)
		}
	}
}
