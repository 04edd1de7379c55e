package admin

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/sluice-go/sluice/policyfile"
)

const checkUsage = `usage: sluice check [-json] FILE...

Validates policy files: their syntax, every field, every limit, identity
and tier, as a program loading them would. Prints every problem of every
file as file:line:col: message, and exits 1 when there is one; for CI.
`

// checkResult is one file's verdict in -json output.
type checkResult struct {
	File     string      `json:"file"`
	OK       bool        `json:"ok"`
	Version  string      `json:"version,omitempty"`
	Policies int         `json:"policies,omitempty"`
	Errors   []fileError `json:"errors,omitempty"`
}

// fileError is one problem in -json output (line and col 0: the file
// could not be read).
type fileError struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Col     int    `json:"col,omitempty"`
	Message string `json:"message"`
}

func (e *env) check(args []string) int {
	fs := e.flagSet("check", checkUsage)
	asJSON := fs.Bool("json", false, "print the verdicts as JSON")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(e.stderr, "sluice check: no files given")
		fs.Usage()
		return ExitUsage
	}
	status := ExitOK
	var results []checkResult
	for _, path := range fs.Args() {
		res := checkResult{File: path}
		c, err := policyfile.Load(path)
		var errs policyfile.Errors
		switch {
		case err == nil:
			res.OK, res.Version = true, c.Version
			c.AllPolicies(func(string, *policyfile.Policy) { res.Policies++ })
		case errors.As(err, &errs):
			for _, pe := range errs {
				res.Errors = append(res.Errors, fileError{pe.File, pe.Line, pe.Col, pe.Msg})
			}
		default: // the file could not be read
			res.Errors = []fileError{{File: path, Message: err.Error()}}
		}
		if !res.OK {
			status = ExitFailed
		}
		results = append(results, res)
		if *asJSON {
			continue
		}
		if res.OK {
			fmt.Fprintf(e.stdout, "%s: ok (version %s, %d policies)\n", path, res.Version, res.Policies)
			continue
		}
		for _, pe := range res.Errors {
			if pe.Line == 0 {
				fmt.Fprintf(e.stderr, "%s: %s\n", pe.File, pe.Message)
				continue
			}
			fmt.Fprintf(e.stderr, "%s:%d:%d: %s\n", pe.File, pe.Line, pe.Col, pe.Message)
		}
	}
	if *asJSON {
		if code := e.writeJSON(results); code != ExitOK {
			return code
		}
	}
	return status
}

// discardLogger drops what the packages the commands use would log: the
// commands print their own account.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
