package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sluice-go/sluice/gen"
)

const generateUsage = `usage: luagen [-check] [-package NAME] DIR|FILE|DIR/... ...
       luagen vet [-list] DIR|FILE|DIR/... ...
       luagen test [-redis ADDR] [-server NAME] [-v] DIR|FILE|DIR/... ...

Generates NAME.lua.go beside every annotated NAME.lua. "luagen vet -h" and
"luagen test -h" describe the subcommands.

Flags:
`

// target is one directory's worth of scripts to generate.
type target struct {
	dir   string   // directory as the user spelled it
	files []string // .lua paths (display form)
	whole bool     // the whole directory was named: orphans are checked
}

func cmdGenerate(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("luagen", flag.ContinueOnError)
	fl.SetOutput(stderr)
	check := fl.Bool("check", false, "write nothing; exit 1 naming every stale, missing or orphaned generated file")
	pkgName := fl.String("package", "", "Go package name of the generated files (default: the package already in each directory, else the directory name)")
	version := fl.Bool("version", false, "print the luagen version and exit")
	fl.Usage = func() {
		fmt.Fprint(stderr, generateUsage)
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, "luagen", gen.Version)
		return 0
	}
	if fl.NArg() == 0 {
		fmt.Fprintln(stderr, "luagen: no directories or files given")
		fl.Usage()
		return 2
	}
	if *pkgName != "" && !gen.ValidPackageName(*pkgName) {
		fmt.Fprintf(stderr, "luagen: -package %q is not a valid Go package name\n", *pkgName)
		fl.Usage()
		return 2
	}
	targets, err := collect(fl.Args())
	if err != nil {
		fmt.Fprintf(stderr, "luagen: %v\n", err)
		fl.Usage()
		return 2
	}

	failed := false
	var problems []string
	checked := 0 // generated files compared by -check
	for _, t := range targets {
		pkg := *pkgName
		if pkg == "" && len(t.files) > 0 {
			pkg, err = packageName(t.dir)
			if err != nil {
				fmt.Fprintf(stderr, "luagen: %v\n", err)
				failed = true
				continue
			}
		}
		files := make([]gen.File, 0, len(t.files))
		for _, p := range t.files {
			src, err := os.ReadFile(p)
			if err != nil {
				fmt.Fprintf(stderr, "luagen: %v\n", err)
				failed = true
				continue
			}
			files = append(files, gen.File{Path: p, Src: src})
		}
		out := map[string][]byte{}
		if len(files) > 0 {
			var err error
			if out, err = gen.Generate(pkg, files); err != nil {
				fmt.Fprintln(stderr, err)
				failed = true
				continue
			}
		}
		orphans, err := findOrphans(t)
		if err != nil {
			fmt.Fprintf(stderr, "luagen: %v\n", err)
			failed = true
			continue
		}
		if *check {
			problems = append(problems, checkOutputs(out, orphans)...)
			checked += len(out)
			continue
		}
		if err := writeOutputs(out, orphans, stderr); err != nil {
			fmt.Fprintf(stderr, "luagen: %v\n", err)
			failed = true
		}
	}
	for _, p := range problems {
		fmt.Fprintln(stderr, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "luagen: %d generated file(s) out of date; run luagen (or go generate) to update\n", len(problems))
		return 1
	}
	if failed {
		return 1
	}
	if *check {
		fmt.Fprintf(stdout, "luagen: %s up to date\n", checkedSummary(checked, len(targets)))
	}
	return 0
}

// checkedSummary says how many generated files in how many directories
// -check compared.
func checkedSummary(files, dirs int) string {
	plural := func(n int, one, many string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	return plural(files, "generated file", "generated files") + " in " + plural(dirs, "directory", "directories")
}

// collect groups the arguments into per-directory targets.
func collect(args []string) ([]*target, error) {
	byDir := map[string]*target{}
	var order []string
	add := func(dir string) *target {
		t, ok := byDir[dir]
		if !ok {
			t = &target{dir: dir}
			byDir[dir] = t
			order = append(order, dir)
		}
		return t
	}
	addDir := func(dir string) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		t := add(dir)
		t.whole = true
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".lua") {
				t.files = append(t.files, filepath.Join(dir, e.Name()))
			}
		}
		return nil
	}
	for _, arg := range args {
		if root, ok := strings.CutSuffix(arg, "/..."); ok {
			if root == "" {
				root = "/"
			}
			err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if !d.IsDir() {
					return nil
				}
				name := d.Name()
				if p != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
					return filepath.SkipDir
				}
				return addDir(p)
			})
			if err != nil {
				return nil, err
			}
			continue
		}
		info, err := os.Stat(arg)
		if err != nil {
			return nil, err
		}
		if info.IsDir() {
			if err := addDir(filepath.Clean(arg)); err != nil {
				return nil, err
			}
			continue
		}
		if !strings.HasSuffix(arg, ".lua") {
			return nil, fmt.Errorf("%s: not a .lua file", arg)
		}
		t := add(filepath.Dir(arg))
		t.files = append(t.files, filepath.Clean(arg))
	}
	var out []*target
	for _, dir := range order {
		t := byDir[dir]
		sort.Strings(t.files)
		t.files = dedupe(t.files)
		if len(t.files) == 0 && !t.whole {
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// packageName finds the Go package of dir from its non-test, non-generated
// .go files, falling back to the directory name.
func packageName(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") || strings.HasSuffix(n, ".lua.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.PackageClauseOnly)
		if err != nil {
			continue
		}
		return f.Name.Name, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	name := strings.ToLower(filepath.Base(abs))
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return -1
	}, name)
	if !gen.ValidPackageName(name) {
		return "", fmt.Errorf("%s: cannot derive a Go package name from the directory name; pass -package NAME", dir)
	}
	return name, nil
}

// findOrphans lists generated files in a whole-directory target whose .lua is gone.
func findOrphans(t *target) ([]string, error) {
	if !t.whole {
		return nil, nil
	}
	entries, err := os.ReadDir(t.dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".lua.go") {
			continue
		}
		p := filepath.Join(t.dir, n)
		if _, err := os.Stat(strings.TrimSuffix(p, ".go")); err == nil {
			continue
		}
		if generatedByUs(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// generatedByUs reports whether the file at p starts with luagen's header.
func generatedByUs(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, len(gen.HeaderLine)+1)
	n, _ := io.ReadFull(f, buf)
	return bytes.Equal(buf[:n], []byte(gen.HeaderLine+"\n"))
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func checkOutputs(out map[string][]byte, orphans []string) []string {
	var problems []string
	for _, p := range sortedKeys(out) {
		have, err := os.ReadFile(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			problems = append(problems, fmt.Sprintf("%s: missing (generate it from %s)", p, strings.TrimSuffix(p, ".go")))
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", p, err))
		case !bytes.Equal(have, out[p]):
			problems = append(problems, fmt.Sprintf("%s: stale (differs from what %s generates)", p, strings.TrimSuffix(p, ".go")))
		}
	}
	for _, p := range orphans {
		problems = append(problems, fmt.Sprintf("%s: orphaned (%s no longer exists; delete it)", p, strings.TrimSuffix(p, ".go")))
	}
	return problems
}

func writeOutputs(out map[string][]byte, orphans []string, stderr io.Writer) error {
	for _, p := range sortedKeys(out) {
		if have, err := os.ReadFile(p); err == nil && bytes.Equal(have, out[p]) {
			continue // unchanged: keep the file's modification time
		}
		if err := os.WriteFile(p, out[p], 0o644); err != nil {
			return err
		}
	}
	for _, p := range orphans {
		if err := os.Remove(p); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "luagen: removed %s (its script is gone)\n", p)
	}
	return nil
}
