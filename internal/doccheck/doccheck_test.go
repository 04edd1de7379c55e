package doccheck

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// imports maps the package names the docs use to their import paths; a
// block imports those it selects from (name.X).
var imports = map[string]string{
	"sluice":     "github.com/sluice-go/sluice",
	"httplimit":  "github.com/sluice-go/sluice/adapters/httplimit",
	"policyfile": "github.com/sluice-go/sluice/policyfile",
	"ratepolicy": "github.com/sluice-go/sluice/adapters/ratepolicy",
	"overrides":  "github.com/sluice-go/sluice/overrides",
	"sluicechi":  "github.com/sluice-go/sluice/adapters/chi",
	"sluicegin":  "github.com/sluice-go/sluice/adapters/gin",
	"sluiceecho": "github.com/sluice-go/sluice/adapters/echo",
	"luart":      "github.com/sluice-go/sluice/runtime/luart",
	"scripts":    "github.com/sluice-go/sluice/scripts",
	"verify":     "github.com/sluice-go/sluice/verify",
	"rueidis":    "github.com/redis/rueidis",
	"goredis":    "github.com/sluice-go/sluice/transport/goredis",
	"redis":      "github.com/redis/go-redis/v9",
	"gin":        "github.com/gin-gonic/gin",
	"echo":       "github.com/labstack/echo/v5",
	"chi":        "github.com/go-chi/chi/v5",
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"http":       "net/http",
	"slog":       "log/slog",
	"os":         "os",
	"strings":    "strings",
	"testing":    "testing",
	"time":       "time",
	"x509":       "crypto/x509",
}

// block is one ```go block: where it is and its lines.
type block struct {
	file  string // relative to the repository root
	line  int    // of the block's first line
	lines []string
}

func extract(t *testing.T, root string) []block {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var out []block
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		var cur *block
		for i, l := range strings.Split(string(data), "\n") {
			switch {
			case cur == nil && strings.TrimSpace(l) == "```go":
				cur = &block{file: rel, line: i + 2}
			case cur != nil && strings.TrimSpace(l) == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.lines = append(cur.lines, l)
			}
		}
	}
	return out
}

var (
	selector = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.[A-Z]`)
	declLine = regexp.MustCompile(`^(func|type|const|var) `)
)

// source turns b into a Go file of package name, and says which doc line
// each of its lines comes from (0: a line of the wrapper). A block that is
// only comments (a go:generate line) gives "".
func source(b block, name string) (string, []int) {
	code := false
	for _, l := range b.lines {
		if s := strings.TrimSpace(l); s != "" && !strings.HasPrefix(s, "//") {
			code = true
		}
	}
	if !code {
		return "", nil
	}
	var src []string
	var from []int
	emit := func(l string, docLine int) { src = append(src, l); from = append(from, docLine) }
	lines := make([]string, len(b.lines))
	for i, l := range b.lines {
		lines[i] = strings.ReplaceAll(l, "…", "") // an elided part
	}
	for i, l := range lines {
		if strings.HasPrefix(l, "package ") { // a whole file: as it is, in its own directory
			for j, l := range lines {
				if j == i {
					l = "package " + name
				}
				emit(l, b.line+j)
			}
			return strings.Join(src, "\n") + "\n", from
		}
	}
	// Top-level declarations (from a line "func ", "type ", ... at column
	// 0 to the line where its braces and parentheses close) go at the top
	// level; the other lines are the body of a function.
	var decls, body []int
	depth := 0
	inDecl := false
	for i, l := range lines {
		if depth == 0 && declLine.MatchString(l) {
			inDecl = true
		}
		if inDecl {
			decls = append(decls, i)
		} else {
			body = append(body, i)
		}
		depth += strings.Count(l, "{") + strings.Count(l, "(") - strings.Count(l, "}") - strings.Count(l, ")")
		if inDecl && depth <= 0 {
			inDecl, depth = false, 0
		}
	}
	used := map[string]bool{}
	if len(body) > 0 && strings.HasPrefix(strings.TrimSpace(lines[body[0]]), "{") {
		used["httplimit"] = true
	}
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "//") {
			continue
		}
		for _, m := range selector.FindAllStringSubmatch(l, -1) {
			if _, ok := imports[m[1]]; ok {
				used[m[1]] = true
			}
		}
	}
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	emit("package "+name, 0)
	emit("", 0)
	for _, n := range names {
		emit(n+" "+strconv.Quote(imports[n]), 0)
	}
	if len(names) > 0 {
		src[2] = "import (" + src[2]
		src[len(src)-1] += ")"
	}
	for _, i := range decls {
		emit(lines[i], b.line+i)
	}
	if len(body) > 0 {
		emit("func _() error {", 0)
		// A block that is one composite literal starting with "{" is an
		// element of a policy list (the docs' Policy literals).
		element := strings.HasPrefix(strings.TrimSpace(lines[body[0]]), "{")
		if element {
			emit("_ = []httplimit.Policy{", 0)
		}
		for _, i := range body {
			emit(lines[i], b.line+i)
		}
		if element {
			src[len(src)-1] += ","
			emit("}", 0)
		}
		emit("return nil", 0)
		emit("}", 0)
	}
	return strings.Join(src, "\n") + "\n", from
}

// free are the errors a fragment may give: names its prose supplies, and
// values or imports it leaves unused.
var free = regexp.MustCompile(`^(undefined: [A-Za-z_][A-Za-z0-9_]*|declared and not used: .*|".*" imported and not used.*|missing return)$`)

var compileErr = regexp.MustCompile(`^(.*?/_blocks/(b\d+)/x\.go):(\d+):(\d+): (.*)$`)

func TestDocsCompile(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	blocks := extract(t, root)
	dir, err := os.MkdirTemp(".", "_blocks") // inside the module, ignored by ./... patterns
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(dir, "_blocks") // a fixed name the error lines are matched by
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(dir)) })
	maps := map[string][]int{}
	byName := map[string]block{}
	var pkgs []string
	for i, b := range blocks {
		name := "b" + strconv.Itoa(i)
		src, from := source(b, name)
		if src == "" {
			continue
		}
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "x.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		maps[name], byName[name] = from, b
		pkgs = append(pkgs, "./"+filepath.ToSlash(d))
	}
	if len(pkgs) < 10 {
		t.Fatalf("only %d Go blocks found in README.md and docs/", len(pkgs))
	}
	cmd := exec.Command("go", append([]string{"build", "-gcflags=-e"}, pkgs...)...)
	out, _ := cmd.CombinedOutput()
	var bad []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		m := compileErr.FindStringSubmatch(sc.Text())
		if m == nil {
			// (go: downloading … is progress, on a cold module cache.)
			if l := sc.Text(); !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "go: downloading ") && strings.TrimSpace(l) != "" {
				bad = append(bad, "go build: "+l)
			}
			continue
		}
		if free.MatchString(m[5]) {
			continue
		}
		n, _ := strconv.Atoi(m[3])
		b, from := byName[m[2]], maps[m[2]]
		where := fmt.Sprintf("%s:%d (the block at line %d)", b.file, b.line, b.line)
		if n-1 < len(from) && from[n-1] > 0 {
			where = fmt.Sprintf("%s:%d", b.file, from[n-1])
		}
		bad = append(bad, where+": "+m[5])
	}
	t.Logf("%d Go blocks compiled", len(pkgs))
	if len(bad) > 0 {
		t.Errorf("Go blocks in the docs that do not compile:\n%s", strings.Join(bad, "\n"))
	}
}
