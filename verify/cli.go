package verify

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

const vetUsage = `usage: luagen vet [-list] DIR|FILE|DIR/... ...

Checks Redis Lua scripts offline: statically, and by running them in the
sandbox (with the steps of NAME.steps.txtar when present, else with made-up
arguments). Prints each finding as file.lua:LINE:COL: message (check).
Silence a check with a comment "-- vet:ignore CHECK" on the line or the line
above, or "-- vet:ignore-file CHECK" anywhere in the file.

Exit status: 0 no findings, 1 findings, 2 misuse.

Flags:
`

// VetCommand is "luagen vet": args exclude the subcommand name; it returns
// the exit code.
func VetCommand(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("luagen vet", flag.ContinueOnError)
	fl.SetOutput(stderr)
	list := fl.Bool("list", false, "list the checks and exit")
	fl.Usage = func() {
		fmt.Fprint(stderr, vetUsage)
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *list {
		for _, c := range Checks {
			fmt.Fprintf(stdout, "%-18s %s\n", c.Name, c.Doc)
		}
		return 0
	}
	if fl.NArg() == 0 {
		fmt.Fprintln(stderr, "luagen vet: no directories or files given")
		fl.Usage()
		return 2
	}
	paths, err := ScriptPaths(fl.Args())
	if err != nil {
		fmt.Fprintf(stderr, "luagen vet: %v\n", strings.TrimPrefix(err.Error(), "verify: "))
		return 2
	}
	status := 0
	for _, p := range paths {
		findings, err := VetFile(p)
		if err != nil {
			fmt.Fprintf(stderr, "luagen vet: %v\n", strings.TrimPrefix(err.Error(), "verify: "))
			status = 1
			continue
		}
		for _, f := range findings {
			fmt.Fprintln(stderr, f)
			status = 1
		}
	}
	return status
}

const testUsage = `usage: luagen test [-redis ADDR] [-v] DIR|FILE|DIR/... ...

Runs the step file NAME.steps.txtar beside each NAME.lua on the sandbox and
on miniredis, and with -redis on a real Redis too, checking each step's
reply, TTLs and expectations, and that the environments agree after every
step (replies, keys, values, TTLs). The Redis database used must be empty; it
is emptied again after each file.

Exit status: 0 all passed, 1 a step failed, 2 misuse.

Flags:
`

// TestCommand is "luagen test": args exclude the subcommand name; it
// returns the exit code.
func TestCommand(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("luagen test", flag.ContinueOnError)
	fl.SetOutput(stderr)
	redisAddr := fl.String("redis", "", "also run on the Redis at `ADDR` (host:port or redis://[:password@]host:port/db); its database must be empty")
	verbose := fl.Bool("v", false, "print every step")
	fl.Usage = func() {
		fmt.Fprint(stderr, testUsage)
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fl.NArg() == 0 {
		fmt.Fprintln(stderr, "luagen test: no directories or files given")
		fl.Usage()
		return 2
	}
	paths, err := ScriptPaths(fl.Args())
	if err != nil {
		fmt.Fprintf(stderr, "luagen test: %v\n", strings.TrimPrefix(err.Error(), "verify: "))
		return 2
	}
	ctx := context.Background()
	sb, err := NewSandbox()
	if err != nil {
		fmt.Fprintf(stderr, "luagen test: %v\n", err)
		return 1
	}
	defer sb.Close()
	mini, err := NewMiniredis()
	if err != nil {
		fmt.Fprintf(stderr, "luagen test: %v\n", err)
		return 1
	}
	defer mini.Close()
	envs := []Env{sb, mini}
	if *redisAddr != "" {
		real, err := DialRedis(ctx, *redisAddr)
		if err != nil {
			fmt.Fprintf(stderr, "luagen test: %v\n", strings.TrimPrefix(err.Error(), "verify: "))
			return 2
		}
		defer real.Close()
		envs = append(envs, real)
	}
	status := 0
	for _, p := range paths {
		if _, err := os.Stat(StepFilePath(p)); errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stdout, "?    %s [no step file]\n", p)
			continue
		}
		rep, err := RunStepFile(ctx, p, envs...)
		if err != nil {
			fmt.Fprintf(stderr, "FAIL %s\n%s\n", p, strings.TrimPrefix(err.Error(), "verify: "))
			status = 1
			continue
		}
		if *verbose {
			sf, _ := ReadStepFile(rep.StepFile)
			for _, st := range sf.Steps {
				fmt.Fprintf(stdout, "     %s:%d: %s\n", rep.StepFile, st.Line, st.Name)
			}
		}
		for _, n := range rep.Notes {
			fmt.Fprintf(stdout, "note %s: %s\n", p, n)
		}
		if !rep.OK() {
			status = 1
			fmt.Fprintf(stderr, "FAIL %s (%d steps on %s)\n", p, rep.Steps, strings.Join(rep.Envs, ", "))
			for _, f := range rep.Failures {
				fmt.Fprintf(stderr, "--- %s:%d: %s\n", rep.StepFile, f.Step.Line, f)
			}
			continue
		}
		fmt.Fprintf(stdout, "ok   %s (%d steps on %s)\n", p, rep.Steps, strings.Join(rep.Envs, ", "))
	}
	return status
}
