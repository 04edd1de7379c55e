// Command luagen generates typed Go wrappers for annotated Redis Lua scripts.
//
// Usage:
//
//	luagen [-check] [-package NAME] DIR|FILE|DIR/... ...
//	luagen vet [-list] DIR|FILE|DIR/... ...
//	luagen test [-redis ADDR] [-server NAME] [-v] DIR|FILE|DIR/... ...
//
// For every NAME.lua it writes NAME.lua.go beside it, in the Go package of
// that directory. With -check it writes nothing and exits 1 naming every
// generated file that is stale, missing or orphaned (its .lua is gone), or
// prints how many files it found up to date. A directory argument ending
// in /... includes its subdirectories.
//
// "luagen vet" lints scripts offline and "luagen test" runs the step files
// beside them (NAME.steps.txtar) on an in-process sandbox, on miniredis and
// optionally on a real Redis; both are package
// github.com/sluice-go/sluice/verify from the command line.
//
// Typical use, in a file of the package that holds the scripts:
//
//	//go:generate go tool luagen .
//
// Exit codes: 0 success, 1 errors in scripts or a failed check, 2 misuse.
// Under "go run" the go command reports a program's status as "exit status
// N" and exits 1 itself; "go tool luagen" and an installed binary exit with
// luagen's own status.
package main

import (
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if cmd, ok := subcommands[args[0]]; ok {
			return cmd(args[1:], stdout, stderr)
		}
	}
	return cmdGenerate(args, stdout, stderr)
}

// subcommands maps a subcommand name to its entry point. The arguments
// passed exclude the subcommand name.
var subcommands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"vet":  cmdVet,
	"test": cmdTest,
}
