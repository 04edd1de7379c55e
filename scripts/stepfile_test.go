package scripts_test

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/verify"
)

var update = flag.Bool("update", false, "rewrite the scripts' step files (NAME.steps.txtar) from the step tables")

// stepFile renders tb as the step file of script, the format `luagen test`
// runs (see package verify): steps at the table's instants after
// verify.StartTime, with their replies, the PTTL after every write and the
// state checks of the table. Steps of the table that call another script
// become plain commands with the same effect on the state: a release
// becomes ZREM, an allowed acquire ZADD.
func stepFile(tb table, script string) string {
	start := verify.StartTime.UnixMicro()
	keys, _ := tb.keys(step{})
	key := keys[0]
	var b strings.Builder
	fmt.Fprintf(&b, "Steps of %s.lua, generated from the table %q in steps_test.go\n", script, tb.name)
	fmt.Fprintf(&b, "(go test ./scripts -run TestStepFiles -update), which TestStepTables also\n")
	fmt.Fprintf(&b, "runs on miniredis, the sandbox and a real redis-server. Replies are\n")
	fmt.Fprintf(&b, "{allowed, remaining, retry_after, reset_after[, limiting]} in µs.\n")
	var pending []string // commands standing in for steps of the other script
	n := 0
	for _, s := range tb.steps {
		if tb.scriptOf(s) != script {
			switch tb.scriptOf(s) {
			case "concurrency_release":
				pending = append(pending, "do ZREM "+key+" "+s.id)
			case "concurrency_acquire":
				if s.want[0] == 1 {
					lease, _ := strconv.ParseInt(tb.params[1], 10, 64)
					pending = append(pending, fmt.Sprintf("do ZADD %s %d %s", key, start+s.at+lease, s.id))
				}
			default:
				panic(fmt.Sprintf("table %s: a step of %s has no stand-in in the step file of %s", tb.name, tb.scriptOf(s), script))
			}
			continue
		}
		n++
		fmt.Fprintf(&b, "\n-- step %d --\n", n)
		fmt.Fprintf(&b, "at %s\n", duration(s.at))
		keys, _ := tb.keys(s)
		fmt.Fprintf(&b, "keys %s\n", strings.Join(keys, " "))
		args := tb.argvWith(s, "$now")
		for i, a := range args {
			if a == "" {
				args[i] = `""`
			}
		}
		fmt.Fprintf(&b, "args %s\n", strings.Join(args, " "))
		for _, c := range pending {
			fmt.Fprintln(&b, c)
		}
		pending = nil
		if s.persist {
			for _, k := range keys {
				fmt.Fprintf(&b, "do PERSIST %s\n", k)
			}
		}
		reply := make([]string, len(s.want))
		for i, v := range s.want {
			reply[i] = strconv.FormatInt(v, 10)
		}
		fmt.Fprintf(&b, "reply [%s]\n", strings.Join(reply, ", "))
		if s.write != 2 && (tb.writes(s) || s.persist) {
			for i, k := range keys {
				ttl := int64(-2)
				if life := tb.lifeOf(s, i); life > 0 {
					ttl = ttlMillis(life)
				}
				fmt.Fprintf(&b, "ttl %s %d\n", k, ttl)
			}
		}
		if s.members != nil {
			quoted := make([]string, len(s.members))
			for i, m := range s.members {
				name, _, _ := expandMember(m, start)
				quoted[i] = strconv.Quote(name)
			}
			fmt.Fprintf(&b, "expect ZRANGE %s 0 -1 => [%s]\n", keys[0], strings.Join(quoted, ", "))
		}
		if s.values != nil {
			for i, v := range s.values(start) {
				fmt.Fprintf(&b, "expect GET %s => %s\n", keys[i], strconv.Quote(v))
			}
		}
	}
	return b.String()
}

// duration formats µs as a Go duration.
func duration(us int64) string {
	if us == 0 {
		return "0"
	}
	return (time.Duration(us) * time.Microsecond).String()
}

// stepFiles maps each script to the table its step file comes from.
func stepFiles(t *testing.T) map[string]table {
	byName := map[string]table{}
	for _, tb := range tables {
		byName[tb.name] = tb
	}
	files := map[string]table{}
	for script, name := range map[string]string{
		"fixed_window":         "fixed_window",
		"sliding_log":          "sliding_log",
		"sliding_window":       "sliding_window",
		"token_bucket":         "token_bucket",
		"gcra":                 "gcra",
		"concurrency_acquire":  "concurrency",
		"concurrency_release":  "concurrency",
		"gcra_multi":           "gcra_multi",
		"sliding_window_multi": "sliding_window_multi",
		"fixed_window_multi":   "fixed_window_multi",
	} {
		tb, ok := byName[name]
		if !ok {
			t.Fatalf("no table %q", name)
		}
		files[script] = tb
	}
	return files
}

// TestStepFiles keeps every script's step file (NAME.steps.txtar, run by
// `luagen test`) equal to its step table; -update rewrites them.
func TestStepFiles(t *testing.T) {
	for script, tb := range stepFiles(t) {
		path := script + ".steps.txtar"
		got := stepFile(tb, script)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v; create it with go test ./scripts -run TestStepFiles -update", err)
			continue
		}
		if string(want) != got {
			t.Errorf("%s differs from the table %q; rewrite it with go test ./scripts -run TestStepFiles -update", path, tb.name)
		}
	}
}
