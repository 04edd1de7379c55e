package main

import (
	"io"

	"github.com/sluice-go/sluice/verify"
)

// cmdVet is "luagen vet DIR|FILE...": it lints Redis Lua scripts offline
// (see verify.VetCommand).
func cmdVet(args []string, stdout, stderr io.Writer) int {
	return verify.VetCommand(args, stdout, stderr)
}
