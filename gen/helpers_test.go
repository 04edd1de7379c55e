package gen_test

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"go/ast"
	"go/constant"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// generatedHeader is Go's rule for recognising generated files.
var generatedHeader = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

// checkGenerated asserts the properties every generated file must have:
// gofmt-clean, Go's generated-code header on the first line, package pkg,
// a source constant holding src byte for byte and a SHA1 constant equal to
// the SHA1 of src. goName is the script's Go name.
func checkGenerated(t testing.TB, pkg, goName string, src, out []byte) {
	t.Helper()
	if err := generatedProblem(pkg, goName, src, out); err != nil {
		t.Errorf("generated code for %s: %v\n%s", goName, err, out)
	}
}

func generatedProblem(pkg, goName string, src, out []byte) error {
	formatted, err := format.Source(out)
	if err != nil {
		return fmt.Errorf("gofmt fails: %v", err)
	}
	if !bytes.Equal(formatted, out) {
		return fmt.Errorf("not gofmt-clean; gofmt gives\n%s", formatted)
	}
	first, _, _ := bytes.Cut(out, []byte("\n"))
	if !generatedHeader.Match(first) {
		return fmt.Errorf("first line %q does not match %s", first, generatedHeader)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, goName+".lua.go", out, parser.ParseComments)
	if err != nil {
		return fmt.Errorf("go/parser: %v", err)
	}
	if f.Name.Name != pkg {
		return fmt.Errorf("package %s, want %s", f.Name.Name, pkg)
	}
	// The source constant is the Go name unexported, a leading initialism
	// lowered whole (GCRAMulti → gcraMultiSource).
	srcName := unexported(goName) + "Source"
	shaName := goName + "SHA1"
	consts := map[string]ast.Expr{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i < len(vs.Values) {
					consts[n.Name] = vs.Values[i]
				}
			}
		}
	}
	got, err := stringConst(consts[srcName])
	if err != nil {
		return fmt.Errorf("const %s: %v", srcName, err)
	}
	if got != string(src) {
		return fmt.Errorf("const %s differs from the script:\n got %q\nwant %q", srcName, got, src)
	}
	sha, err := stringConst(consts[shaName])
	if err != nil {
		return fmt.Errorf("const %s: %v", shaName, err)
	}
	sum := sha1.Sum(src)
	if want := hex.EncodeToString(sum[:]); sha != want {
		return fmt.Errorf("const %s = %s, want %s", shaName, sha, want)
	}
	return nil
}

// stringConst evaluates a constant string expression: literals joined by +.
func stringConst(e ast.Expr) (string, error) {
	v, err := constValue(e)
	if err != nil {
		return "", err
	}
	if v.Kind() != constant.String {
		return "", fmt.Errorf("not a string constant: %v", v)
	}
	return constant.StringVal(v), nil
}

func constValue(e ast.Expr) (constant.Value, error) {
	switch e := e.(type) {
	case nil:
		return nil, fmt.Errorf("missing")
	case *ast.BasicLit:
		v := constant.MakeFromLiteral(e.Value, e.Kind, 0)
		if v.Kind() == constant.Unknown {
			return nil, fmt.Errorf("bad literal %s", e.Value)
		}
		return v, nil
	case *ast.ParenExpr:
		return constValue(e.X)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return nil, fmt.Errorf("unexpected operator %s", e.Op)
		}
		x, err := constValue(e.X)
		if err != nil {
			return nil, err
		}
		y, err := constValue(e.Y)
		if err != nil {
			return nil, err
		}
		return constant.BinaryOp(x, token.ADD, y), nil
	}
	return nil, fmt.Errorf("unexpected expression %T", e)
}

// repoRoot is the directory of the sluice module.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found: %v", err)
	}
	return root
}

// goTestModule writes a module replacing sluice with this repository,
// holding files (path relative to the module → content), and runs go vet
// ./... and go test ./... on it.
func goTestModule(t *testing.T, files map[string][]byte) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to compile generated code: %v", err)
	}
	root := repoRoot(t)
	dir := t.TempDir()
	gomod := fmt.Sprintf("module example.com/goldencheck\n\ngo 1.25.0\n\nrequire github.com/sluice-go/sluice v0.0.0\n\nreplace github.com/sluice-go/sluice => %s\n", root)
	files["go.mod"] = []byte(gomod)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files["go.sum"] = sum
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "./..."}} {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s on the generated code: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// unexported lowers the leading word of an exported Go name, an initialism
// whole: "TokenBucket" → "tokenBucket", "GCRA" → "gcra", "GCRAMulti" →
// "gcraMulti", "IDs" → "ids".
func unexported(name string) string {
	r := []rune(name)
	caps := 0
	for caps < len(r) && (unicode.IsUpper(r[caps]) || caps > 0 && unicode.IsDigit(r[caps])) {
		caps++
	}
	switch {
	case caps <= 1 || caps == len(r):
	case r[caps] == 's' && (caps+1 == len(r) || unicode.IsUpper(r[caps+1])):
	default:
		caps--
	}
	return strings.ToLower(string(r[:max(caps, 1)])) + string(r[max(caps, 1):])
}
