package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluice-go/sluice/verify"
)

const testUsage = `usage: luagen test [-redis ADDR] [-server NAME] [-v] DIR|FILE|DIR/... ...

Runs the step file NAME.steps.txtar beside each NAME.lua on the sandbox and
on miniredis, and with -redis on a real Redis too, checking each step's
reply, TTLs and expectations, and that the environments agree after every
step (replies, keys, values, TTLs). The Redis database used must be empty; it
is emptied again after each file. Results go to stdout, one line per script,
with the failures of a failing script below its line.

The sandbox answers as the server you run: with -redis, the one it finds
there (asked with HELLO); otherwise -server, Redis 7.0 by default. Servers
store a Lua number passed to redis.call differently (0.1 is
"0.10000000000000001" on 7.0, "0.1" on 7.2, 7.4, 8 and Valkey) and word
some errors differently.

Exit status: 0 all passed, 1 a step failed or a step file has errors, 2
misuse (including a -redis server that cannot be reached or whose database
is not empty).

Flags:
`

// cmdTest is "luagen test": it runs the step files beside the scripts with
// verify.RunStepFile.
func cmdTest(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("luagen test", flag.ContinueOnError)
	fl.SetOutput(stderr)
	redisAddr := fl.String("redis", "", "also run on the Redis at `ADDR` (host:port or redis://[[user]:password@]host:port[/db]); its database must be empty")
	verbose := fl.Bool("v", false, "print every step")
	serverName := fl.String("server", "", "the server the sandbox answers as where servers differ (how a Lua number passed to redis.call is stored, some error texts): redis7.0, redis7.2, redis7.4 (and 8) or valkey8; default: the -redis server's own (asked with HELLO), else redis7.0")
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
	paths, err := verify.ScriptPaths(fl.Args())
	if err != nil {
		fmt.Fprintf(stderr, "luagen test: %s\n", trimPkg(err))
		fl.Usage()
		return 2
	}
	ctx := context.Background()
	sb, err := verify.NewSandbox()
	if err != nil {
		fmt.Fprintf(stderr, "luagen test: %s\n", trimPkg(err))
		return 1
	}
	defer sb.Close()
	mini, err := verify.NewMiniredis()
	if err != nil {
		fmt.Fprintf(stderr, "luagen test: %s\n", trimPkg(err))
		return 1
	}
	defer mini.Close()
	envs := []verify.Env{sb, mini}
	if *serverName != "" {
		if sb.Server, err = verify.ParseServer(*serverName); err != nil {
			fmt.Fprintf(stderr, "luagen test: -server: %s\n", trimPkg(err))
			return 2
		}
	}
	if *redisAddr != "" {
		real, err := verify.DialRedis(ctx, *redisAddr)
		if err != nil {
			fmt.Fprintf(stderr, "luagen test: -redis: %s\n", trimPkg(err))
			return 2
		}
		defer real.Close()
		envs = append(envs, real)
		if *serverName == "" {
			if sb.Server, err = real.Server(ctx); err != nil {
				fmt.Fprintf(stderr, "luagen test: -redis: %s\n", trimPkg(err))
				return 2
			}
		}
	}
	status := 0
	for _, p := range paths {
		if _, err := os.Stat(verify.StepFilePath(p)); errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stdout, "?    %s [no step file]\n", p)
			continue
		}
		rep, err := verify.RunStepFile(ctx, p, envs...)
		if err != nil {
			fmt.Fprintf(stdout, "FAIL %s\n%s\n", p, trimPkg(err))
			status = 1
			continue
		}
		if *verbose {
			sf, _ := verify.ReadStepFile(rep.StepFile)
			for _, st := range sf.Steps {
				fmt.Fprintf(stdout, "     %s:%d: %s\n", rep.StepFile, st.Line, st.Name)
			}
		}
		for _, n := range rep.Notes {
			fmt.Fprintf(stdout, "note %s: %s\n", p, n)
		}
		summary := fmt.Sprintf("%s (%d steps on %s)", p, rep.Steps, strings.Join(rep.Envs, ", "))
		if !rep.OK() {
			status = 1
			fmt.Fprintf(stdout, "FAIL %s\n", summary)
			for _, f := range rep.Failures {
				fmt.Fprintf(stdout, "--- %s:%d: %s\n", rep.StepFile, f.Step.Line, f)
			}
			continue
		}
		fmt.Fprintf(stdout, "ok   %s\n", summary)
	}
	return status
}
