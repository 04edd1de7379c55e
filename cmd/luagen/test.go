package main

import (
	"io"

	"github.com/sluice-go/sluice/verify"
)

// cmdTest is "luagen test [-redis ADDR] DIR|FILE...": it runs the step files
// beside the scripts on the sandbox, miniredis and optionally a real Redis
// (see verify.TestCommand).
func cmdTest(args []string, stdout, stderr io.Writer) int {
	return verify.TestCommand(args, stdout, stderr)
}
