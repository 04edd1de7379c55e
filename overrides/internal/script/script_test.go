package script

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-go/sluice/gen"
)

// TestGenerated keeps each NAME.lua.go what luagen makes of NAME.lua (CI's
// luagen -check covers scripts/ only): run go generate after editing a
// script.
func TestGenerated(t *testing.T) {
	paths, _ := filepath.Glob("*.lua")
	var files []gen.File
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, gen.File{Path: p, Src: src})
	}
	out, err := gen.Generate("script", files)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 {
		t.Fatalf("%d generated files, want 2 (write, index)", len(out))
	}
	for name, want := range out {
		got, err := os.ReadFile(name)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale or missing (%v): run go generate ./overrides/...", name, err)
		}
	}
}
