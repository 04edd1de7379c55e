package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// trial is the version the rehearsal gives every published module: the
// next tag.
const trial = "v0.1.0"

// published are the modules a release tags (directory under the repository
// root → module path): what users go get.
var published = map[string]string{
	".":                 "github.com/sluice-go/sluice",
	"adapters/chi":      "github.com/sluice-go/sluice/adapters/chi",
	"adapters/echo":     "github.com/sluice-go/sluice/adapters/echo",
	"adapters/echov4":   "github.com/sluice-go/sluice/adapters/echov4",
	"adapters/gin":      "github.com/sluice-go/sluice/adapters/gin",
	"adapters/grpc":     "github.com/sluice-go/sluice/adapters/grpc",
	"cmd/sluice-rls":    "github.com/sluice-go/sluice/cmd/sluice-rls",
	"transport/goredis": "github.com/sluice-go/sluice/transport/goredis",
}

// unpublished are the repository's other modules, for development only:
// no module may require them.
var unpublished = map[string]string{
	"adapters/conformance": "github.com/sluice-go/sluice/adapters/conformance",
	"bench":                "github.com/sluice-go/sluice/bench",
	"examples/grpc":        "github.com/sluice-go/sluice/examples/grpc",
	"examples/server":      "github.com/sluice-go/sluice/examples/server",
	"examples/worker":      "github.com/sluice-go/sluice/examples/worker",
	"release":              "github.com/sluice-go/sluice/release",
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestModuleLayout checks what makes the modules publishable as they are:
// every go.mod of the repository is listed above, none has a replace
// directive, every requirement on one of the repository's modules names a
// published module at the trial version, and go.work uses every module and
// maps each published one's trial version to its directory.
func TestModuleLayout(t *testing.T) {
	root := repoRoot(t)
	found := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		found[filepath.ToSlash(rel)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]string{}
	for dir, path := range published {
		all[dir] = path
	}
	for dir, path := range unpublished {
		all[dir] = path
	}
	for dir := range found {
		if _, ok := all[dir]; !ok {
			t.Errorf("%s/go.mod is a module this test does not know: add it to published (if a release tags it) or unpublished in release_test.go", dir)
		}
	}
	for _, dir := range sortedKeys(all) {
		if !found[dir] {
			t.Errorf("%s/go.mod is missing", dir)
			continue
		}
		name := filepath.Join(root, filepath.FromSlash(dir), "go.mod")
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		if f.Module == nil || f.Module.Mod.Path != all[dir] {
			t.Errorf("%s/go.mod: module path is not %s", dir, all[dir])
		}
		for _, r := range f.Replace {
			t.Errorf("%s/go.mod: replace %s: go.mod files have no replace directives (go.work ties the modules together)", dir, r.Old.Path)
		}
		for _, r := range f.Require {
			if !strings.HasPrefix(r.Mod.Path, "github.com/sluice-go/") {
				continue
			}
			if !isPublished(r.Mod.Path) {
				t.Errorf("%s/go.mod requires %s, which is never published", dir, r.Mod.Path)
			} else if r.Mod.Version != trial {
				t.Errorf("%s/go.mod requires %s %s, want %s (the next tag)", dir, r.Mod.Path, r.Mod.Version, trial)
			}
		}
	}

	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	w, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, u := range w.Use {
		used[filepath.ToSlash(filepath.Clean(u.Path))] = true
	}
	for _, dir := range sortedKeys(all) {
		if !used[dir] {
			t.Errorf("go.work does not use %s", dir)
		}
	}
	replaced := map[string]string{}
	for _, r := range w.Replace {
		if r.Old.Version != trial {
			t.Errorf("go.work: replace %s %s: only the trial version %s of a workspace module is replaced", r.Old.Path, r.Old.Version, trial)
		}
		replaced[r.Old.Path] = filepath.ToSlash(filepath.Clean(r.New.Path))
	}
	for _, dir := range sortedKeys(published) {
		if got := replaced[published[dir]]; got != dir {
			t.Errorf("go.work: %s %s is replaced by %q, want ./%s", published[dir], trial, got, dir)
		}
	}
}

func isPublished(path string) bool {
	for _, p := range published {
		if p == path {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestRehearsal publishes the working tree's modules at the trial version
// to a file-system module proxy and plays a user outside the repository:
// go get the core and the chi adapter, install luagen with go get -tool,
// generate Go from a Lua script with go generate, build a net/http server
// on the chi middleware that also runs the script on a go-redis client
// (transport/goredis), tidy, and list every module of the graph. No
// workspace and no replace directive is involved, so this is what go get
// will do once the tags exist.
func TestRehearsal(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the go command is needed for the release rehearsal: %v", err)
		}
		t.Skipf("skipping the release rehearsal: no go command on PATH (%v); it runs go get, go generate and go build in a scratch module", err)
	}
	root := repoRoot(t)
	proxy := t.TempDir()
	start := time.Now()
	writeProxy(t, root, proxy)
	t.Logf("file proxy of %d modules at %s written in %.1fs", len(published), trial, time.Since(start).Seconds())

	// The modules the scratch module needs besides sluice's are copied from
	// the module cache this machine already has (a module cache's
	// cache/download is itself a proxy), and only what it lacks comes from
	// the public proxy. The scratch module gets its own, empty module cache
	// (moduleCache), so that no trial version of sluice ever lands in the
	// real one.
	out, err := exec.Command(goBin, "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	goproxy := "file://" + filepath.ToSlash(proxy)
	if cache := strings.TrimSpace(string(out)); cache != "" {
		goproxy += ",file://" + filepath.ToSlash(filepath.Join(cache, "cache", "download"))
	}
	goproxy += ",https://proxy.golang.org"

	dir := t.TempDir()
	if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
		t.Fatalf("the scratch module %s is inside the repository %s", dir, root)
	}
	env := append(os.Environ(),
		"GOWORK=off", // never this repository's go.work
		// -mod=mod: the scratch go.mod gains what its imports need, and no
		// vendor directory is consulted. -modcacherw: the scratch module
		// cache can be removed afterwards.
		"GOFLAGS=-mod=mod -modcacherw",
		"GOMODCACHE="+moduleCache(t),
		// This machine's build cache, which holds the standard library
		// and the dependencies already compiled: the trial version is the
		// same from one run to the next while its content changes, but
		// the build cache keys a compiled package by the content of its
		// files, never by its version. The one cache keyed by where a
		// module lies, the module index (a module's file list, taken to
		// be immutable), is keyed by its directory in the scratch module
		// cache, new for every run; goindex=0 turns it off all the same,
		// so a file added since the last run is never missing.
		"GODEBUG=goindex=0",
		"GOPROXY="+goproxy,
		// The trial versions have no checksum anywhere; the rest is read
		// from this machine's module cache or the public proxy.
		"GOSUMDB=off",
		"GONOSUMDB=github.com/sluice-go/*",
		// Neither GOPRIVATE nor GONOPROXY, from the environment or a go env
		// -w setting: GOPRIVATE would send sluice's lookups to git, past
		// the file proxy, and with GONOPROXY set at all a go get of an
		// adapter at the version of a core already required finds the core
		// in the module cache and stops there ("found, but does not contain
		// package", golang/go#56974).
		"GOENV=off",
		"GOPRIVATE=",
		"GONOPROXY=",
		"GOTOOLCHAIN=local",
	)
	goCmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = env
		began := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
		}
		t.Logf("go %s: ok (%.1fs)", strings.Join(args, " "), time.Since(began).Seconds())
	}
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	write("go.mod", "module example.com/rehearsal\n\ngo 1.25.0\n")
	goCmd("get", "github.com/sluice-go/sluice@"+trial, "github.com/sluice-go/sluice/adapters/chi@"+trial) // as README.md says
	goCmd("get", "-tool", "github.com/sluice-go/sluice/cmd/luagen@"+trial)
	goCmd("get", "github.com/sluice-go/sluice/transport/goredis@"+trial)
	checkGoMod(t, filepath.Join(dir, "go.mod"))

	write("limits/limits.go", limitsGo)
	write("limits/hits.lua", hitsLua)
	write("main.go", mainGo)
	write("goredis.go", goredisGo)
	goCmd("generate", "./...")
	gen, err := os.ReadFile(filepath.Join(dir, "limits", "hits.lua.go"))
	if err != nil {
		t.Fatalf("go generate did not write limits/hits.lua.go: %v", err)
	}
	if !strings.HasPrefix(string(gen), "// Code generated by luagen. DO NOT EDIT.\n") {
		t.Errorf("limits/hits.lua.go does not start with the generated-code header:\n%.300s", gen)
	}
	goCmd("tool", "luagen", "-check", "./limits")
	goCmd("build", "./...")
	goCmd("mod", "tidy")
	goCmd("build", "-mod=readonly", "./...") // the tidied go.mod and go.sum are complete
	// Every module of the graph can be had, not only those the build
	// reads: a published module requiring one that is never published
	// (the test-only conformance module, say) fails here.
	goCmd("list", "-m", "all")
	checkGoMod(t, filepath.Join(dir, "go.mod"))
}

// checkGoMod checks that the scratch module requires the core and the chi
// adapter at the trial version and has luagen as a tool.
func checkGoMod(t *testing.T, name string) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"github.com/sluice-go/sluice": false, "github.com/sluice-go/sluice/adapters/chi": false}
	for _, r := range f.Require {
		if _, ok := want[r.Mod.Path]; ok && r.Mod.Version == trial {
			want[r.Mod.Path] = true
		}
	}
	tool := false
	for _, tl := range f.Tool {
		tool = tool || tl.Path == "github.com/sluice-go/sluice/cmd/luagen"
	}
	for path, ok := range want {
		if !ok {
			t.Errorf("the scratch go.mod does not require %s %s:\n%s", path, trial, data)
		}
	}
	if !tool {
		t.Errorf("the scratch go.mod has no tool github.com/sluice-go/sluice/cmd/luagen:\n%s", data)
	}
}

// moduleCache returns an empty module cache for the scratch module, so
// that no trial version of sluice lands in this machine's own, and removes
// it when the test ends (-modcacherw keeps it writable). Its directory is
// the same from one run to the next, and for every checkout of one user:
// the build cache keys a compiled package by its directory as well as its
// files' content, so with a directory new for every run (or for every
// clone) the tool and the server would be compiled from scratch each time
// (about 40s on the 2-core machine, against 8s). A lock on the directory
// serialises two runs, from one checkout or two.
func moduleCache(t *testing.T) string {
	t.Helper()
	base := filepath.Join(os.TempDir(), fmt.Sprintf("sluice-rehearsal-%d", os.Getuid()))
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(base, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("lock %s: %v", base, err)
	}
	dir := filepath.Join(base, "modcache")
	clean := func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing the scratch module cache: %v", err)
		}
	}
	clean() // a run killed before its cleanup left one
	t.Cleanup(func() {
		clean()
		_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		lock.Close()
	})
	return dir
}

// writeProxy writes a file-system module proxy (GOPROXY=file://dir) that
// serves every published module of the working tree at the trial version.
func writeProxy(t *testing.T, root, dir string) {
	t.Helper()
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{trial, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range sortedKeys(published) {
		path := published[rel]
		src := filepath.Join(root, filepath.FromSlash(rel))
		gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		esc, err := module.EscapePath(path)
		if err != nil {
			t.Fatal(err)
		}
		at := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range map[string][]byte{
			"list":          []byte(trial + "\n"),
			trial + ".info": info,
			trial + ".mod":  gomod,
		} {
			if err := os.WriteFile(filepath.Join(at, name), content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		f, err := os.Create(filepath.Join(at, trial+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		// CreateFromDir leaves out nested modules (directories with a
		// go.mod), as a tag's zip does.
		if err := zip.CreateFromDir(f, module.Version{Path: path, Version: trial}, snapshot(t, src)); err != nil {
			f.Close()
			t.Fatalf("zip of %s: %v", path, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshot copies the files that a commit of the working tree would hold
// under dir (tracked files, and untracked ones .gitignore does not exclude)
// to a new directory and returns it. Build outputs, go.work.sum and the
// scratch files other tests create inside the tree while this one runs
// stay out, as they stay out of a tag. Without git (not a checkout) it
// returns dir itself.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Logf("git ls-files in %s: %v; zipping the directory as it is", dir, err)
		return dir
	}
	dst := t.TempDir()
	for _, rel := range strings.Split(string(out), "\x00") {
		if rel == "" {
			continue
		}
		src := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree, or a scratch file gone since
		}
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			continue // a module zip holds regular files only
		}
		data, err := os.ReadFile(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// The directive is joined at run time so that go generate in this
// repository does not take it for its own.
const goGenerate = "//go:" + "generate "

const limitsGo = `// Package limits holds the server's own Lua scripts and the Go luagen
// generates for them.
package limits

` + goGenerate + `go tool luagen .
`

// hitsLua is a minimal annotated script in the style of scripts/*.lua
// (grammar: docs/annotations.md).
const hitsLua = `-- Hits counts the requests of one counter in a window of ttl_ms
-- milliseconds that starts at the counter's first request.
--
-- @script hits
-- @key counter        the counter, one per client
-- @arg ttl_ms int     window length in ms, >= 1
-- @return count int   requests counted in the window, this one included
local n = redis.call('INCR', KEYS[1])
if n == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return {n}
`

// goredisGo runs the generated script on a go-redis client, as a program
// that already holds one does.
const goredisGo = `package main

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/transport/goredis"

	"example.com/rehearsal/limits"
)

// hitsOnGoRedis counts a hit of id through go-redis.
func hitsOnGoRedis(ctx context.Context, rdb *redis.Client, id string) (int64, error) {
	res, err := limits.Hits.DecodeReply(goredis.Do(ctx, rdb,
		limits.Hits.Call(limits.HitsKeys{Counter: "hits:{" + id + "}"}, limits.HitsArgs{TTLMs: 60000})))
	return res.Count, err
}

var _ = hitsOnGoRedis
`

const mainGo = `// Command rehearsal is a small API rate limited by sluice through the chi
// adapter, as a user of the published modules writes it.
package main

import (
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	sluicechi "github.com/sluice-go/sluice/adapters/chi"
	"github.com/sluice-go/sluice/adapters/httplimit"

	"example.com/rehearsal/limits"
)

func main() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	limiter, err := sluice.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	perIP, err := sluice.GCRA(100, time.Minute, 20)
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Config{
		Limiter:  limiter,
		Policies: []httplimit.Policy{{Name: "per-ip", Limit: perIP, Key: httplimit.RemoteIP()}},
	})
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(sluicechi.Middleware(mw, sluicechi.Options{}))
	r.Get("/hits/{id}", func(w http.ResponseWriter, req *http.Request) {
		res, err := limits.Hits.Run(req.Context(), client,
			limits.HitsKeys{Counter: "hits:{" + chi.URLParam(req, "id") + "}"}, limits.HitsArgs{TTLMs: 60000})
		if err != nil {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, res.Count)
	})
	log.Fatal(http.ListenAndServe("localhost:8080", r))
}
`
