package verify_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/gen"
	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/verify"
)

// consumersDir holds scripts written the way a user of luagen writes them,
// none of them a rate limiter; seeded/ holds a copy of each with one bug.
const consumersDir = "testdata/consumers"

func consumerScripts(t *testing.T) []string {
	t.Helper()
	paths, err := verify.ScriptPaths([]string{consumersDir})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 6 {
		t.Fatalf("%d scripts in %s, want at least six", len(paths), consumersDir)
	}
	return paths
}

// TestConsumerCorpus: every script of the corpus is vetted clean, with its
// step file and without it (made-up runs only), its generated code is
// fresh, and its steps pass on the sandbox, miniredis and a real Redis,
// which agree after every step.
func TestConsumerCorpus(t *testing.T) {
	paths := consumerScripts(t)
	envs := verify.EnvsT(t)
	var files []gen.File
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, gen.File{Path: p, Src: src})
		name := strings.TrimSuffix(filepath.Base(p), ".lua")
		t.Run(name, func(t *testing.T) {
			fs, err := verify.VetFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(fs) > 0 {
				t.Errorf("vet with the step file:\n%s", findingLines(fs))
			}
			if fs := verify.VetSource(p, src, nil); len(fs) > 0 {
				t.Errorf("vet without the step file:\n%s", findingLines(fs))
			}
			rep := verify.CheckStepFile(t, p, envs...)
			if rep.Steps < 4 || len(rep.Notes) > 0 {
				t.Errorf("%d steps, notes %v: want at least four steps, all compared on the real server", rep.Steps, rep.Notes)
			}
		})
	}
	out, err := gen.Generate("consumers", files)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range out {
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is missing or stale (%v): run go run ./cmd/luagen verify/testdata/consumers", path, err)
		}
	}
}

// TestConsumerCorpusGoCode builds, vets and tests the corpus' generated
// code as its own package: its test calls every wrapper on miniredis and on
// a real redis-server.
func TestConsumerCorpusGoCode(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the corpus: %v", err)
	}
	s := redisserver.Start(t)
	for _, args := range [][]string{{"vet", "./" + consumersDir}, {"test", "-count=1", "-v", "./" + consumersDir}} {
		cmd := exec.Command(goBin, args...)
		cmd.Env = append(os.Environ(), verify.RedisAddrEnv+"=redis://"+s.Addr+"/9")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "test" && !strings.Contains(string(out), "--- PASS: TestWrappers/redis") {
			t.Errorf("the corpus' test did not run on the real server:\n%s", out)
		}
	}
}

// seededBugs are the bugs planted in testdata/consumers/seeded, one per
// script (the copy differs from the original in one line), with what must
// catch each: vet's findings, and whether the script's step file fails.
var seededBugs = []struct {
	script string
	bug    string
	vet    []string // check@line of every finding vet reports, with the step file
	steps  bool     // the step file fails on the seeded copy
	madeUp []string // check@line of every finding without the step file
}{
	{"lock_acquire", "the PEXPIRE after taking the lock removed", []string{"no-ttl@27"}, true, []string{"no-ttl@27"}},
	{"lock_release", "the owner no longer compared: anyone with the token releases", nil, true, nil},
	{"idempotency", "KEEPTTL dropped from the SET that completes an entry", []string{"no-ttl@31"}, true, []string{"no-ttl@31"}},
	{"leaderboard", "math.floor dropped from the percentile", []string{"float-reply@28"}, false, []string{"float-reply@28"}},
	{"stream_claim", "the dead-letter key built from KEYS[1] instead of passed as KEYS[2]", []string{"unused-input@9", "undeclared-key@45", "undeclared-key@51"}, true, []string{"unused-input@9"}},
	{"doc_update", "local dropped from a variable", []string{"global-write@23"}, true, []string{"global-write@23"}},
	{"feature_flag", "ARGV[4] read for the optional on, which is ARGV[3]", []string{"unused-input@9", "undeclared-input@14"}, true, []string{"unused-input@9", "undeclared-input@14"}},
}

// TestConsumerSeededBugs: each seeded bug is caught, by vet or by the
// script's own step file, at the file and line of the bug.
func TestConsumerSeededBugs(t *testing.T) {
	envs := verify.EnvsT(t)
	if len(seededBugs) != len(consumerScripts(t)) {
		t.Errorf("%d seeded bugs for %d scripts", len(seededBugs), len(consumerScripts(t)))
	}
	for _, c := range seededBugs {
		t.Run(c.script, func(t *testing.T) {
			orig, err := os.ReadFile(filepath.Join(consumersDir, c.script+".lua"))
			if err != nil {
				t.Fatal(err)
			}
			seeded, err := os.ReadFile(filepath.Join(consumersDir, "seeded", c.script+".lua"))
			if err != nil {
				t.Fatal(err)
			}
			if n := changedLines(orig, seeded); n != 1 {
				t.Fatalf("the seeded copy differs from the original in %d lines, want 1", n)
			}
			steps, err := os.ReadFile(filepath.Join(consumersDir, c.script+".steps.txtar"))
			if err != nil {
				t.Fatal(err)
			}
			// The seeded copy beside the original's step file.
			path := filepath.Join(t.TempDir(), c.script+".lua")
			if err := os.WriteFile(path, seeded, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(verify.StepFilePath(path), steps, 0o644); err != nil {
				t.Fatal(err)
			}
			fs, err := verify.VetFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := checksAt(fs); got != strings.Join(c.vet, " ") {
				t.Errorf("vet found %v, want %v", got, c.vet)
			}
			for _, f := range fs {
				t.Logf("vet: %s", strings.TrimPrefix(f.String(), filepath.Dir(path)+"/"))
			}
			if got := checksAt(verify.VetSource(path, seeded, nil)); got != strings.Join(c.madeUp, " ") {
				t.Errorf("vet without the step file found %v, want %v", got, c.madeUp)
			}
			rep, err := verify.RunStepFile(context.Background(), path, envs...)
			if err != nil {
				t.Fatal(err)
			}
			if failed := !rep.OK(); failed != c.steps {
				t.Errorf("step file fails: %v, want %v", failed, c.steps)
			}
			if len(rep.Failures) > 0 {
				t.Logf("first step failure: %s", rep.Failures[0])
			}
		})
	}
}

// checksAt lists findings as check@line.
func checksAt(fs []verify.Finding) string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Check+"@"+strconv.Itoa(f.Line))
	}
	return strings.Join(out, " ")
}
