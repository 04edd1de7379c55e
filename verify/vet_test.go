package verify_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/verify"
)

var update = flag.Bool("update", false, "rewrite the golden want files of testdata/vet")

func findingLines(fs []verify.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// TestVetChecks runs vet on testdata/vet/CHECK/bad.lua, which must produce
// exactly the findings of its golden file, among them at least one of
// CHECK, and on good.lua, a near-identical script that must produce none.
// Run with -update to rewrite the golden files.
func TestVetChecks(t *testing.T) {
	dirs, err := filepath.Glob("testdata/vet/*")
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, dir := range dirs {
		check := strings.ReplaceAll(filepath.Base(dir), "_", "-")
		covered[check] = true
		t.Run(check, func(t *testing.T) {
			bad, err := verify.VetFile(filepath.Join(dir, "bad.lua"))
			if err != nil {
				t.Fatal(err)
			}
			got := findingLines(bad)
			golden := filepath.Join(dir, "want")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("vet %s/bad.lua:\n%s\nwant:\n%s", dir, got, want)
			}
			if !strings.Contains(got, "("+check+")") {
				t.Errorf("bad.lua does not trigger %s", check)
			}
			good, err := verify.VetFile(filepath.Join(dir, "good.lua"))
			if err != nil {
				t.Fatal(err)
			}
			if len(good) > 0 {
				t.Errorf("vet %s/good.lua found:\n%s", dir, findingLines(good))
			}
		})
	}
	for _, c := range verify.Checks() {
		if !covered[c.Name] {
			t.Errorf("check %s has no testdata/vet/%s", c.Name, strings.ReplaceAll(c.Name, "-", "_"))
		}
	}
}

// TestVetSeededBugs plants one realistic bug in each copy of a fixed
// window limiter (testdata/seeded) and checks vet reports it at the right
// file and line, while the original (testdata/limiter) is clean.
func TestVetSeededBugs(t *testing.T) {
	original, err := os.ReadFile("testdata/limiter/fixed_window.lua")
	if err != nil {
		t.Fatal(err)
	}
	clean, err := verify.VetFile("testdata/limiter/fixed_window.lua")
	if err != nil {
		t.Fatal(err)
	}
	if len(clean) > 0 {
		t.Fatalf("the original limiter is not clean:\n%s", findingLines(clean))
	}
	for _, c := range []struct {
		file, check string
		line        int
	}{
		{"no_pexpire.lua", verify.CheckNoTTL, 45},             // the PEXPIRE after HSET removed
		{"undeclared_key.lua", verify.CheckUndeclaredKey, 30}, // the key prefixed inside the script
		{"float_reply.lua", verify.CheckFloatReply, 48},       // reset_after returned in ms
		{"global_write.lua", verify.CheckGlobalWrite, 31},     // "local" dropped
	} {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join("testdata/seeded", c.file)
			seeded, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if n := changedLines(original, seeded); n != 1 {
				t.Fatalf("%s differs from the original in %d lines, want 1", path, n)
			}
			fs, err := verify.VetFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(fs) == 0 || fs[0].Path != path || fs[0].Line != c.line || fs[0].Check != c.check {
				t.Fatalf("vet %s:\n%s\nwant first a %s finding at %s:%d", path, findingLines(fs), c.check, path, c.line)
			}
			for _, f := range fs {
				if f.Check != c.check {
					t.Errorf("unrelated finding: %s", f)
				}
			}
		})
	}
}

// changedLines counts the lines of b that are not in a at the same place,
// allowing one line removed.
func changedLines(a, b []byte) int {
	la, lb := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	i := 0
	for i < len(la) && i < len(lb) && bytes.Equal(la[i], lb[i]) {
		i++
	}
	if len(la) == len(lb)+1 { // a line removed
		if bytes.Equal(bytes.Join(la[i+1:], nil), bytes.Join(lb[i:], nil)) {
			return 1
		}
		return 2
	}
	n := 0
	for j := range la {
		if j >= len(lb) || !bytes.Equal(la[j], lb[j]) {
			n++
		}
	}
	return n + max(0, len(lb)-len(la))
}

// TestVetBuiltinScripts: the built-in scripts are clean, and so is
// everything else vet can read in the scripts directory.
func TestVetBuiltinScripts(t *testing.T) {
	fs, err := verify.Vet([]string{"../scripts"})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) > 0 {
		t.Errorf("vet ../scripts:\n%s", findingLines(fs))
	}
}

func TestVetIgnoreComments(t *testing.T) {
	src := `-- @script x
-- @key k   the key
-- @return n int
-- vet:ignore-file undefined-global

redis.call('SET', 'literal', 1, 'PX', 10) -- vet:ignore undeclared-key
-- vet:ignore no-ttl
redis.call('SET', KEYS[1], typo_here)
redis.call('SET', 'other', 1, 'PX', 10)
return {1}`
	got := findingLines(verify.VetSource("x.lua", []byte(src), nil))
	want := `x.lua:9:19: SET uses the literal key "other": pass every key in KEYS (Redis Cluster routes a script by its KEYS) (undeclared-key)` + "\n"
	if got != want {
		t.Errorf("findings:\n%s\nwant:\n%s", got, want)
	}
}

// TestVetPlainScript: a script without annotations is linted too, without
// the checks that need them.
func TestVetPlainScript(t *testing.T) {
	src := `local n = redis.call('INCR', KEYS[1])
total = n + tonumber(ARGV[2])
return {n, n / 2}`
	got := findingLines(verify.VetSource("plain.lua", []byte(src), nil))
	want := `plain.lua:1:11: INCR writes key "{vet}:k1" and leaves it without a TTL: it would stay forever (give it one with PEXPIRE or EXPIRE after the write) (no-ttl)
plain.lua:2:1: assignment to global total: Redis scripts cannot create or change globals (declare it local) (global-write)
`
	if got != want {
		t.Errorf("findings:\n%s\nwant:\n%s", got, want)
	}
}

func TestScriptPaths(t *testing.T) {
	got, err := verify.ScriptPaths([]string{"testdata/vet/no_ttl", "testdata/limiter/fixed_window.lua", "testdata/vet/no_ttl/bad.lua"})
	if err != nil {
		t.Fatal(err)
	}
	want := "testdata/limiter/fixed_window.lua testdata/vet/no_ttl/bad.lua testdata/vet/no_ttl/good.lua"
	if strings.Join(got, " ") != want {
		t.Errorf("ScriptPaths = %v, want %s", got, want)
	}
	got, err = verify.ScriptPaths([]string{"testdata/vet/..."})
	if err != nil || len(got) != 2*len(verify.Checks()) {
		t.Errorf("testdata/vet/...: %d files, %v; want %d", len(got), err, 2*len(verify.Checks()))
	}
	for _, bad := range []string{"testdata/missing", "testdata", "vet.go"} {
		if _, err := verify.ScriptPaths([]string{bad}); err == nil {
			t.Errorf("ScriptPaths(%s): no error", bad)
		}
	}
}

func FuzzVetSource(f *testing.F) {
	for _, s := range []string{
		"return 1",
		"x = 1",
		"-- @script s\n-- @key k a\n-- @return n int\nreturn {redis.call('INCR', KEYS[1])}",
		"local t = {} t[1] = t return t",
		"return redis.call('SET', 'k', 1/0)",
		"while true do end",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if strings.Contains(src, "while") || strings.Contains(src, "repeat") || strings.Contains(src, "for") || strings.Contains(src, "goto") {
			t.Skip("loops may run until the sandbox timeout")
		}
		for _, f := range verify.VetSource("f.lua", []byte(src), nil) {
			if f.Path != "f.lua" || f.Check == "" || f.Msg == "" {
				t.Fatalf("malformed finding %+v", f)
			}
		}
	})
}

// TestVetListReturn: a script whose last @return is a list may reply any
// number of elements from the fixed ones on, each of the list's type; one
// with fewer than the fixed ones, or a list element of another type, is
// reported.
func TestVetListReturn(t *testing.T) {
	header := "-- @script counts\n-- @key counters...\n-- @return total int\n-- @return counts int...\n"
	for _, tc := range []struct {
		name, body string
		want       []string // substrings of the findings, in order; none for a clean script
	}{
		{"fixed only", "local n = redis.call('INCR', KEYS[1])\nredis.call('PEXPIRE', KEYS[1], 1000)\nreturn {n}\n", nil},
		{"fixed and a list", "local n = redis.call('INCR', KEYS[1])\nredis.call('PEXPIRE', KEYS[1], 1000)\nreturn {n, n, n}\n", nil},
		{"fewer than the fixed ones", "return {}\n", []string{"reply has 0 element(s); the header declares 1 @return element(s) before its list (reply-shape)"}},
		{"a list element of another type", "local n = redis.call('INCR', KEYS[1])\nredis.call('PEXPIRE', KEYS[1], 1000)\nreturn {n, tostring(n)}\n",
			[]string{"reply element 2 (counts) is a bulk string, not an int (reply-shape)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "counts.lua")
			if err := os.WriteFile(p, []byte(header+tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			fs, err := verify.VetFile(p)
			if err != nil {
				t.Fatal(err)
			}
			got := findingLines(fs)
			if len(tc.want) == 0 && got != "" {
				t.Fatalf("findings on a clean script:\n%s", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("findings:\n%s\nwant one with %q", got, w)
				}
			}
		})
	}
}
