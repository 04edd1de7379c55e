package gen_test

import (
	"bytes"
	"fmt"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/gen"
)

// addSeeds adds every golden input and every built-in script as a seed.
func addSeeds(f *testing.F) {
	f.Helper()
	for _, pattern := range []string{"testdata/golden/*/*.lua", "../scripts/*.lua"} {
		paths, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range paths {
			src, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(src)
		}
	}
	f.Add([]byte(""))
	f.Add([]byte("-- @script s\n--\t@arg n int?\n-- @return r bool\nreturn {1}"))
	f.Add([]byte("-- @script s\r\n-- @key k\r\nreturn 1\r\n"))
	f.Add([]byte("-- @script s\nfor i = 1, 2 do goto x ::x:: end\n"))
	f.Add([]byte("-- @script s\n-- @key a\n-- @key b...\n-- @arg n int?\n-- @arg l float... d\nreturn 1\n"))
	f.Add([]byte("-- @script s\n-- @key b... x\n-- @arg l int?...\n-- @arg m... string\n-- @return r int ...\n"))
}

// checkVariadic checks the rules of variadic keys and list arguments on a
// script Parse accepted: only the last key or argument can be variadic, and
// a list argument is not optional.
func checkVariadic(t *testing.T, s *gen.Script) {
	t.Helper()
	for i, k := range s.Keys {
		if k.Variadic && i != len(s.Keys)-1 {
			t.Fatalf("variadic key %q is not the last of %d", k.Name, len(s.Keys))
		}
	}
	for i, a := range s.Args {
		if a.Variadic && (i != len(s.Args)-1 || a.Optional) {
			t.Fatalf("list argument %q: position %d of %d, optional %v", a.Name, i+1, len(s.Args), a.Optional)
		}
	}
	for i, r := range s.Returns {
		if r.Optional || r.Variadic && i != len(s.Returns)-1 {
			t.Fatalf("reply element %q: position %d of %d, list %v, optional %v", r.Name, i+1, len(s.Returns), r.Variadic, r.Optional)
		}
	}
}

// FuzzParse checks that Parse never panics and that every failure is an
// ErrorList of positioned, one-line errors in order.
func FuzzParse(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, src []byte) {
		s, err := gen.Parse("f.lua", src)
		if err == nil {
			if s == nil || s.Name == "" || s.GoName == "" || !bytes.Equal(s.Source, src) {
				t.Fatalf("Parse succeeded with an incomplete script: %+v", s)
			}
			goName, problem := gen.GoName(s.Name)
			if problem != "" || goName != s.GoName && !bytes.Contains(src, []byte("@goname")) {
				t.Fatalf("script name %q: GoName %q, problem %q", s.Name, s.GoName, problem)
			}
			if !token.IsExported(s.GoName) || !token.IsIdentifier(s.GoName) {
				t.Fatalf("script name %q: Go name %q is not an exported identifier", s.Name, s.GoName)
			}
			checkVariadic(t, s)
			return
		}
		if s != nil {
			t.Fatal("Parse returned a script together with an error")
		}
		list, ok := err.(gen.ErrorList)
		if !ok || len(list) == 0 {
			t.Fatalf("error is %T (%d entries), want a non-empty gen.ErrorList: %v", err, len(list), err)
		}
		lines := 1 + bytes.Count(src, []byte("\n"))
		for i, e := range list {
			if e.Path != "f.lua" || e.Line < 1 || e.Col < 1 || e.Line > lines || e.Msg == "" {
				t.Fatalf("bad error %#v (the file has %d lines)", e, lines)
			}
			if want := fmt.Sprintf("f.lua:%d:%d: %s", e.Line, e.Col, e.Msg); e.Error() != want {
				t.Fatalf("Error() = %q, want %q", e.Error(), want)
			}
			if strings.ContainsAny(e.Msg, "\r\n") {
				t.Fatalf("message spans lines: %q", e.Msg)
			}
			if i > 0 {
				p := list[i-1]
				if p.Line > e.Line || p.Line == e.Line && p.Col > e.Col {
					t.Fatalf("errors out of order:\n%v", err)
				}
			}
		}
	})
}

// FuzzGenerate checks that every script Parse accepts renders to
// gofmt-clean Go that go/parser accepts, embedding the script byte for byte
// with its SHA1.
func FuzzGenerate(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, src []byte) {
		s, err := gen.Parse("f.lua", src)
		if err != nil {
			return
		}
		out, err := gen.Generate("scripts", []gen.File{{Path: "f.lua", Src: src}})
		if err != nil {
			t.Fatalf("Parse accepts the script but Generate fails: %v", err)
		}
		b, ok := out["f.lua.go"]
		if !ok || len(out) != 1 {
			t.Fatalf("Generate gave %d files, want f.lua.go", len(out))
		}
		checkGenerated(t, "scripts", s.GoName, src, b)
	})
}
