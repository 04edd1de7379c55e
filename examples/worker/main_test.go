package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be a worker process too: lead runs copies
// of its own executable, which here is this binary.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_WORKER_PROCESS") != "" {
		if err := run(os.Args[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestFleet runs the example as its README line does, 3 processes × 8
// workers on 20 calls/s, for each algorithm that can wait: every process
// calls the upstream, and the fleet never exceeds the limit: the calls
// number at most rate × the run's length + burst (the run measured from
// before the first process started, so only an over-admission can pass
// it). How close to the rate the fleet comes depends on how fast a loaded
// machine starts the processes: the example prints it.
func TestFleet(t *testing.T) {
	for _, alg := range []string{"gcra", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			c, err := parse([]string{"-procs", "3", "-workers", "8", "-rate", "20", "-burst", "5", "-duration", "3s", "-algorithm", alg})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			start := time.Now()
			s, err := lead(c, &out)
			elapsed := time.Since(start)
			t.Log("\n" + out.String())
			if err != nil {
				t.Fatal(err)
			}
			if len(s.perProc) != 3 {
				t.Errorf("%d processes called the upstream, want 3: %v", len(s.perProc), s.perProc)
			}
			if most := 20*elapsed.Seconds() + 5; float64(s.calls) > most {
				t.Errorf("%d calls in %v: more than 20/s + a burst of 5 allow (%.0f)", s.calls, elapsed, most)
			}
			if s.calls <= 5 {
				t.Errorf("%d calls: the fleet never got past the burst", s.calls)
			}
		})
	}
}

// TestFlags: bad flags get an error naming the flag.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-procs", "0"}, {"-workers", "0"}, {"-duration", "0s"}, {"-algorithm", "fixed_window"}, {"-rate", "0"}, {"-burst", "0"},
	} {
		if _, err := parse(args); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: %v, want an error naming %s", args, err, args[0])
		}
	}
}
