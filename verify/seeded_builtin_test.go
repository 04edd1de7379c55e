package verify_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/verify"
)

// TestVetSeededBugsInBuiltins seeds one bug at a time into a copy of a
// built-in script (with its step file) and checks that vet reports it at
// the changed line of the copy.
func TestVetSeededBugsInBuiltins(t *testing.T) {
	cases := []struct {
		name, script, old, new, check string
	}{
		{"TTL dropped from SET", "gcra", "  redis.call('SET', key, format('%d:%d:%d:%d', tat, rem, limit, period), 'PX', format('%d', ms))", "  redis.call('SET', key, format('%d:%d:%d:%d', tat, rem, limit, period)) -- (seeded bug: no PX)", verify.CheckNoTTL},
		{"TTL dropped from SET", "fixed_window", "  redis.call('SET', key, format('%d:%d:%d', at, used, period), 'PX', format('%d', ms))", "  redis.call('SET', key, format('%d:%d:%d', at, used, period)) -- (seeded bug: no PX)", verify.CheckNoTTL},
		{"undeclared key", "gcra", "local key = KEYS[1]", "local key = 'sluice:{vet}:' .. KEYS[1]", verify.CheckUndeclaredKey},
		{"undeclared key", "sliding_log", "local key = KEYS[1]", "local key = 'sluice:{vet}:' .. KEYS[1]", verify.CheckUndeclaredKey},
		{"float reply", "gcra", "return {allowed, remaining, retry, reset}", "return {allowed, remaining, retry, reset / 1000}", verify.CheckFloatReply},
		{"float reply", "token_bucket", "return {allowed, remaining, retry, reset}", "return {allowed, remaining, retry, reset / 1000}", verify.CheckFloatReply},
		{"global written", "gcra", "local key = KEYS[1]", "key = KEYS[1]", verify.CheckGlobalWrite},
		{"global written", "fixed_window", "local key = KEYS[1]", "key = KEYS[1]", verify.CheckGlobalWrite},
	}
	for _, c := range cases {
		t.Run(c.script+"/"+c.name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("..", "scripts", c.script+".lua"))
			if err != nil {
				t.Fatal(err)
			}
			steps, err := os.ReadFile(filepath.Join("..", "scripts", c.script+".steps.txtar"))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			clean := filepath.Join(dir, "clean", c.script+".lua")
			seeded := filepath.Join(dir, "seeded", c.script+".lua")
			for _, p := range []string{clean, seeded} {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(verify.StepFilePath(p), steps, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			lines := strings.Split(string(src), "\n")
			line := 0
			for i, l := range lines {
				if l == c.old {
					if line != 0 {
						t.Fatalf("%q occurs twice in %s.lua", c.old, c.script)
					}
					line = i + 1
				}
			}
			if line == 0 {
				t.Fatalf("%q not found in %s.lua; update the seeded bug", c.old, c.script)
			}
			lines[line-1] = c.new
			if err := os.WriteFile(clean, src, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(seeded, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}

			if fs, err := verify.VetFile(clean); err != nil || len(fs) > 0 {
				t.Fatalf("the unchanged copy is not clean: %v %v", fs, err)
			}
			fs, err := verify.VetFile(seeded)
			if err != nil {
				t.Fatal(err)
			}
			want := -1
			for _, f := range fs {
				if f.Check == c.check {
					want = f.Line
					break
				}
			}
			if want == -1 {
				t.Fatalf("vet missed the seeded bug (%s); findings:\n%v", c.check, fs)
			}
			// The finding names the file and a line: the changed line for a
			// global or a float reply; for a missing TTL the write it leaves
			// bare, and for an undeclared key each redis.call that touches it.
			for _, f := range fs {
				if f.Check == c.check && f.Path == seeded && f.Line > 0 {
					t.Logf("%s", f)
					if (c.check == verify.CheckGlobalWrite || c.check == verify.CheckFloatReply) && f.Line != line {
						t.Errorf("%s reported at line %d, want the changed line %d", c.check, f.Line, line)
					}
					return
				}
			}
			t.Fatalf("no %s finding names %s with a line: %v", c.check, seeded, fs)
		})
	}
}
