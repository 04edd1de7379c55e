package gen_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/gen"
)

var update = flag.Bool("update", false, "rewrite the expected files of testdata/golden from what the generator produces")

// goldenPkg is the Go package every golden case is generated into.
const goldenPkg = "scripts"

// goldenCase is one folder of testdata/golden: input scripts, the expected
// NAME.lua.go of each, and the expected stderr (the error lines, or empty).
type goldenCase struct {
	name   string
	dir    string
	inputs []gen.File // Path is the file's base name, as errors show it
}

func loadGoldenCases(t *testing.T) []goldenCase {
	t.Helper()
	root := filepath.Join("testdata", "golden")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		c := goldenCase{name: e.Name(), dir: filepath.Join(root, e.Name())}
		luaFiles, err := filepath.Glob(filepath.Join(c.dir, "*.lua"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range luaFiles {
			src, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			c.inputs = append(c.inputs, gen.File{Path: filepath.Base(p), Src: src})
		}
		if len(c.inputs) == 0 {
			t.Fatalf("golden case %s has no .lua input", c.name)
		}
		cases = append(cases, c)
	}
	if len(cases) == 0 {
		t.Fatal("no golden cases")
	}
	return cases
}

// generateCase runs the generator the way the CLI does and returns the
// outputs and the stderr text.
func generateCase(t *testing.T, inputs []gen.File) (map[string][]byte, string) {
	t.Helper()
	out, err := gen.Generate(goldenPkg, inputs)
	if err == nil {
		return out, ""
	}
	var list gen.ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("Generate failed with %T, not an ErrorList: %v", err, err)
	}
	if out != nil {
		t.Errorf("Generate returned outputs together with an error")
	}
	return nil, err.Error() + "\n"
}

// TestGolden runs every case of testdata/golden and compares the generated
// files and the error output with the expected ones; with -update it
// rewrites them. The expected Go of all cases is then compiled, vetted and
// tested (with the NAME_test.go files of the case folders) in one scratch
// module.
func TestGolden(t *testing.T) {
	cases := loadGoldenCases(t)
	compile := map[string][]byte{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, stderr := generateCase(t, c.inputs)
			if *update {
				writeGolden(t, c, out, stderr)
			}
			compareGolden(t, c, out, stderr)

			// Determinism: the same inputs give the same bytes, in any order.
			for i := 0; i < 3; i++ {
				shuffled := append([]gen.File(nil), c.inputs...)
				rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				again, stderr2 := generateCase(t, shuffled)
				if stderr2 != stderr {
					t.Errorf("shuffled inputs give other errors:\n%s\nwant\n%s", stderr2, stderr)
				}
				if !sameOutputs(out, again) {
					t.Errorf("shuffled inputs give other outputs")
				}
			}

			if stderr != "" {
				return
			}
			for _, in := range c.inputs {
				s, err := gen.Parse(in.Path, in.Src)
				if err != nil {
					t.Fatal(err)
				}
				checkGenerated(t, goldenPkg, s.GoName, in.Src, out[gen.OutputPath(in.Path)])
			}
			// Compile what is on disk: the expected files themselves, and
			// the case's own tests of the generated code (NAME_test.go).
			tests, err := filepath.Glob(filepath.Join(c.dir, "*_test.go"))
			if err != nil {
				t.Fatal(err)
			}
			names := append(tests, expectedGo(t, c)...)
			for _, name := range names {
				name = filepath.Base(name)
				b, err := os.ReadFile(filepath.Join(c.dir, name))
				if err != nil {
					t.Fatal(err)
				}
				compile[c.name+"/"+name] = b
			}
		})
	}
	if t.Failed() {
		return
	}
	t.Run("compile", func(t *testing.T) {
		if len(compile) == 0 {
			t.Fatal("no successful golden case to compile")
		}
		goTestModule(t, compile)
	})
}

func sameOutputs(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// expectedGo lists the expected .lua.go files of a case.
func expectedGo(t *testing.T, c goldenCase) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(c.dir, "*.lua.go"))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = filepath.Base(p)
	}
	sort.Strings(names)
	return names
}

func writeGolden(t *testing.T, c goldenCase, out map[string][]byte, stderr string) {
	t.Helper()
	for _, name := range expectedGo(t, c) {
		if _, keep := out[name]; !keep {
			if err := os.Remove(filepath.Join(c.dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, b := range out {
		if err := os.WriteFile(filepath.Join(c.dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(c.dir, "stderr"), []byte(stderr), 0o644); err != nil {
		t.Fatal(err)
	}
}

func compareGolden(t *testing.T, c goldenCase, out map[string][]byte, stderr string) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join(c.dir, "stderr"))
	if err != nil {
		t.Fatalf("%v (run go test ./gen -update to create it)", err)
	}
	if stderr != string(want) {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
	}
	var got []string
	for name := range out {
		got = append(got, name)
	}
	sort.Strings(got)
	if have := expectedGo(t, c); strings.Join(have, " ") != strings.Join(got, " ") {
		t.Errorf("generated files %q, expected files %q", got, have)
	}
	for name, b := range out {
		want, err := os.ReadFile(filepath.Join(c.dir, name))
		if err != nil {
			continue // reported above
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s differs from the expected file (go test ./gen -update rewrites it):\n%s", name, lineDiff(string(want), string(b)))
		}
	}
}

// lineDiff shows the first differing line of want and got.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl || i >= len(w) || i >= len(g) {
			return fmt.Sprintf("line %d:\n  want %q\n   got %q", i+1, wl, gl)
		}
	}
	return "(no line differs)"
}
