package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-go/sluice/verify"
)

const vetUsage = `usage: luagen vet [-list] DIR|FILE|DIR/... ...

Checks Redis Lua scripts offline: statically, and by running them in the
sandbox (with the steps of NAME.steps.txtar when present, else with made-up
arguments and keyspaces). Prints each finding as file.lua:LINE:COL: message
(check). Silence a check with a comment "-- vet:ignore CHECK" on the line or
the line above, or "-- vet:ignore-file CHECK" anywhere in the file.

Exit status: 0 no findings, 1 findings, 2 misuse.

Flags:
`

// cmdVet is "luagen vet": it lints Redis Lua scripts offline with
// verify.VetFile. Findings go to stderr, as go vet prints them.
func cmdVet(args []string, stdout, stderr io.Writer) int {
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
		for _, c := range verify.Checks() {
			fmt.Fprintf(stdout, "%-18s %s\n", c.Name, c.Doc)
		}
		return 0
	}
	if fl.NArg() == 0 {
		fmt.Fprintln(stderr, "luagen vet: no directories or files given")
		fl.Usage()
		return 2
	}
	paths, err := verify.ScriptPaths(fl.Args())
	if err != nil {
		fmt.Fprintf(stderr, "luagen vet: %s\n", trimPkg(err))
		fl.Usage()
		return 2
	}
	status := 0
	for _, p := range paths {
		findings, err := verify.VetFile(p)
		if err != nil {
			fmt.Fprintf(stderr, "luagen vet: %s\n", trimPkg(err))
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

// trimPkg drops the "verify: " prefix of library errors, which the command
// name replaces.
func trimPkg(err error) string {
	return strings.TrimPrefix(err.Error(), "verify: ")
}
