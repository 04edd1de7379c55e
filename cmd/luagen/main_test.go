package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sluice-go/sluice/internal/redisserver"
)

// TestMain lets the test binary act as the luagen command inside scripts.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"luagen": func() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScript runs the txtar scripts of testdata/script: flags, exit codes,
// output and the files written.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                "testdata/script",
		RequireUniqueNames: true,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exitcode":     cmdExitCode,
			"redis-server": cmdRedisServer,
			"redis":        cmdRedis,
			"freeport":     cmdFreePort,
		},
		Condition: func(cond string) (bool, error) {
			if cond != "redis" {
				return false, fmt.Errorf("unknown condition %q", cond)
			}
			_, err := redisserver.Binary()
			if err != nil && os.Getenv("CI") == "true" {
				return false, fmt.Errorf("redis-server not found (CI=true: a real Redis is required): %v", err)
			}
			return err == nil, nil
		},
	})
}

// cmdRedisServer implements "redis-server VAR": it starts a throwaway
// redis-server on a free loopback port, stopped by its PID when the script
// ends, and sets VAR to its host:port. Scripts guard it with [redis].
func cmdRedisServer(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: redis-server VAR")
	}
	s, err := redisserver.New()
	if err != nil {
		ts.Fatalf("redis-server: %v", err)
	}
	ts.Defer(s.Stop)
	ts.Setenv(args[0], s.Addr)
}

// cmdRedis implements "redis ADDR CMD ARG...": it sends one command to the
// server at ADDR and prints the reply on stdout.
func cmdRedis(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: redis ADDR CMD ARG...")
	}
	out, err := (&redisserver.Server{Addr: args[0]}).Command(args[1:]...)
	if err != nil {
		ts.Fatalf("redis %s: %v", args[1], err)
	}
	fmt.Fprintln(ts.Stdout(), out)
}

// cmdFreePort implements "freeport VAR": it sets VAR to a loopback port
// nothing listens on.
func cmdFreePort(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: freeport VAR")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ts.Fatalf("freeport: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ts.Setenv(args[0], strconv.Itoa(port))
}

// cmdExitCode implements "exitcode N PROG [ARGS...]": it runs PROG like exec
// does (stdout and stderr can be checked afterwards) and fails unless PROG
// exits with status N.
func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! exitcode")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exitcode N PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: bad status %q", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}
