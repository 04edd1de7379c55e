package gen_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/gen"
	"github.com/sluice-go/sluice/runtime/luart"
)

// TestGenVersionWithinRuntime ties the generator's version to the runtime's:
// code generated today must be accepted by the runtime it is built with.
func TestGenVersionWithinRuntime(t *testing.T) {
	if gen.GenVersion < luart.MinVersion || gen.GenVersion > luart.MaxVersion {
		t.Fatalf("gen.GenVersion %d is outside luart.MinVersion..MaxVersion = %d..%d", gen.GenVersion, luart.MinVersion, luart.MaxVersion)
	}
}

// handshake is the version check every generated file holds.
func handshake(v int) string {
	return fmt.Sprintf("const (\n\t_ = luart.EnforceVersion(%d - luart.MinVersion)\n\t_ = luart.EnforceVersion(luart.MaxVersion - %d)\n)\n", v, v)
}

// TestGeneratedFilesCarryGenVersion checks that generated files reference
// gen.GenVersion in their handshake: a fresh one, every golden file, the
// built-in scripts' files and the copies shown in the docs.
func TestGeneratedFilesCarryGenVersion(t *testing.T) {
	want := handshake(gen.GenVersion)
	out, err := gen.Generate("scripts", []gen.File{{Path: "s.lua", Src: []byte("-- @script s\nreturn 1\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out["s.lua.go"]), want) {
		t.Fatalf("a generated file lacks the handshake\n%s\n%s", want, out["s.lua.go"])
	}
	var paths []string
	for _, pattern := range []string{"testdata/golden/*/*.lua.go", "../scripts/*.lua.go", "../docs/annotations.md", "../docs/generated-code.md"} {
		p, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		if len(p) == 0 {
			t.Fatalf("no file matches %s", pattern)
		}
		paths = append(paths, p...)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not hold the handshake of version %d:\n%s", p, gen.GenVersion, want)
		}
	}
}
