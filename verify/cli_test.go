package verify_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/verify"
)

// copyFiles copies testdata files into a fresh directory, so outputs show
// short relative paths.
func copyFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for dst, src := range files {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	return dir
}

func runCLI(cmd func([]string, *bytes.Buffer, *bytes.Buffer) int, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := cmd(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func vetCmd(args []string, out, errOut *bytes.Buffer) int {
	return verify.VetCommand(args, out, errOut)
}
func testCmd(args []string, out, errOut *bytes.Buffer) int {
	return verify.TestCommand(args, out, errOut)
}

func TestVetCommand(t *testing.T) {
	wd, _ := os.Getwd()
	td := func(p string) string { return filepath.Join(wd, "testdata", p) }
	copyFiles(t, map[string]string{
		"limiter/fixed_window.lua":         td("limiter/fixed_window.lua"),
		"limiter/fixed_window.steps.txtar": td("limiter/fixed_window.steps.txtar"),
		"bugs/no_pexpire.lua":              td("seeded/no_pexpire.lua"),
		"bugs/float_reply.lua":             td("seeded/float_reply.lua"),
	})
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stdout string // regexp
		stderr string // regexp
	}{
		{"clean", []string{"limiter"}, 0, `^$`, `^$`},
		{"findings", []string{"bugs", "limiter/fixed_window.lua"}, 1, `^$`,
			`^bugs/float_reply.lua:48:1: reply element 4 \(reset_after\) is 0.003, not an integer: Redis replies 0 .* \(float-reply\)\n` +
				`bugs/no_pexpire.lua:45:3: HSET writes key "\{vet\}:state" and leaves it without a TTL: .* \(no-ttl\)\n$`},
		{"recursive", []string{"./..."}, 1, `^$`, `(?s)float-reply.*no-ttl`},
		{"list", []string{"-list"}, 0, `(?m)^no-ttl +a key is written`, `^$`},
		{"no arguments", nil, 2, `^$`, `no directories or files given\nusage: luagen vet`},
		{"missing path", []string{"nope"}, 2, `^$`, `^luagen vet: stat nope: no such file or directory\n$`},
		{"bad flag", []string{"-bogus", "limiter"}, 2, `^$`, `flag provided but not defined: -bogus`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(vetCmd, c.args...)
			if code != c.code || !regexp.MustCompile(c.stdout).MatchString(stdout) || !regexp.MustCompile(c.stderr).MatchString(stderr) {
				t.Errorf("luagen vet %s: exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", strings.Join(c.args, " "), code, c.code, stdout, stderr)
			}
		})
	}
}

func TestTestCommand(t *testing.T) {
	wd, _ := os.Getwd()
	td := func(p string) string { return filepath.Join(wd, "testdata", p) }
	real := verify.RedisT(t)
	copyFiles(t, map[string]string{
		"ok/fixed_window.lua":           td("limiter/fixed_window.lua"),
		"ok/fixed_window.steps.txtar":   td("limiter/fixed_window.steps.txtar"),
		"nosteps/fixed_window.lua":      td("limiter/fixed_window.lua"),
		"fail/fixed_window.lua":         td("seeded/no_pexpire.lua"),
		"fail/fixed_window.steps.txtar": td("limiter/fixed_window.steps.txtar"),
		"broken/x.lua":                  td("limiter/fixed_window.lua"),
	})
	mustDo(t, real, "SET", "someone's", "data")
	if err := os.WriteFile("broken/x.steps.txtar", []byte("-- s --\nreply [1,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stdout string // regexp
		stderr string // regexp
	}{
		{"pass", []string{"ok"}, 0, `^ok   ok/fixed_window.lua \(10 steps on sandbox, miniredis\)\n$`, `^$`},
		{"no step file", []string{"nosteps"}, 0, `^\?    nosteps/fixed_window.lua \[no step file\]\n$`, `^$`},
		{"failing step", []string{"fail"}, 1, `^$`,
			`(?s)^FAIL fail/fixed_window.lua \(10 steps on sandbox, miniredis\)\n` +
				`--- fail/fixed_window.steps.txtar:3: step "first request" on sandbox: ttl \{client:1\}:fw differs\n` +
				`    at:       2024-01-01T00:00:00Z \(\+0s\)\n    keys:     \{client:1\}:fw\n    args:     3 1000000 1 1704067200000000\n` +
				`    expected: 1000\n    actual:   -1\n.*on miniredis: ttl`},
		{"step file error", []string{"broken"}, 1, `^$`, `^FAIL broken/x.lua\nbroken/x.steps.txtar:2:7: reply "\[1,": missing value at offset 3\n$`},
		{"real redis, database not empty", []string{"-redis", real.Addr(), "ok"}, 2, `^$`,
			`^luagen test: database 0 on 127.0.0.1:\d+ is not empty \(1 keys\); step files need an empty database: choose another one with redis://127.0.0.1:\d+/N\n$`},
		{"real redis", []string{"-redis", "redis://" + real.Addr() + "/5", "-v", "ok/fixed_window.lua"}, 0,
			`(?s)^     ok/fixed_window.steps.txtar:3: first request\n.*ok   ok/fixed_window.lua \(10 steps on sandbox, miniredis, redis 127.0.0.1:\d+\)\n$`, `^$`},
		{"no arguments", nil, 2, `^$`, `no directories or files given\nusage: luagen test`},
		{"unreachable redis", []string{"-redis", "127.0.0.1:1", "ok"}, 2, `^$`, `dial 127.0.0.1:1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(testCmd, c.args...)
			if code != c.code || !regexp.MustCompile(c.stdout).MatchString(stdout) || !regexp.MustCompile(c.stderr).MatchString(stderr) {
				t.Errorf("luagen test %s: exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", strings.Join(c.args, " "), code, c.code, stdout, stderr)
			}
		})
	}
}
