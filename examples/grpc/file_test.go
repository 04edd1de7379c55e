package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestDemoConfig runs the demo on the shipped policy file: the same
// outcomes as its built-in limits.
func TestDemoConfig(t *testing.T) {
	code, out, stderr := runDemo(t, "-config", "policies.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "limits from policies.yaml") {
		t.Errorf("banner does not name the file:\n%s", out)
	}
	checkDemo(t, out, 5)
	if code, _, stderr := runDemo(t, "-config", "policies.yaml", "-limit", "3"); code != 2 || !strings.Contains(stderr, "-config") {
		t.Errorf("-config with -limit: exit %d, %q; want 2 naming the conflict", code, stderr)
	}
}

// TestServeConfigReload serves the shipped file, edits it, and checks
// Hello's quota follows while the server runs: a broken version is
// refused and logged, the last good one keeps serving.
func TestServeConfigReload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	shipped, err := os.ReadFile("policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const hello = "limit: {algorithm: sliding_log, rate: 5, period: 1m}"
	if !strings.Contains(string(shipped), hello) {
		t.Fatalf("policies.yaml no longer holds %q: update this test", hello)
	}
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write(string(shipped))

	serveCtx, stop := context.WithCancel(ctx)
	out := newLineWriter()
	errOut := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(serveCtx, []string{"-serve", "-addr", "127.0.0.1:0", "-config", path}, out, errOut)
		out.w.Close()
	}()
	var addr string
	hint := regexp.MustCompile(`^try: grpcurl -plaintext -d '"you"' (127\.0\.0\.1:\d+) sluice\.example\.Greeter/Hello$`)
	for addr == "" {
		select {
		case l, ok := <-out.lines:
			if !ok {
				t.Fatalf("the server ended before printing its grpcurl line (exit %d): %s", <-done, errOut.String())
			}
			if m := hint.FindStringSubmatch(l); m != nil {
				addr = m[1]
			}
		case <-ctx.Done():
			t.Fatal("no grpcurl line")
		}
	}
	go func() {
		for range out.lines { // drain
		}
	}()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// quota is the q of the per-client item Hello reports for a fresh
	// API key (so no call spends another's quota).
	n := 0
	quota := func() string {
		n++
		var header metadata.MD
		callCtx := metadata.AppendToOutgoingContext(ctx, apiKeyHeader, "reload-"+strings.Repeat("x", n))
		if err := cc.Invoke(callCtx, methodHello, wrapperspb.String("you"), new(wrapperspb.StringValue), grpc.Header(&header)); err != nil {
			t.Fatalf("Hello: %v", err)
		}
		m := regexp.MustCompile(`"per-client";q=(\d+)`).FindStringSubmatch(strings.Join(header.Get("ratelimit-policy"), ","))
		if m == nil {
			return ""
		}
		return m[1]
	}
	if q := quota(); q != "5" {
		t.Fatalf("Hello's quota %q, want the file's 5", q)
	}
	write(strings.Replace(string(shipped), hello, "limit: {algorithm: sliding_log, rate: 7, period: 1m}", 1))
	waitFor(t, ctx, func() bool { return quota() == "7" }, "the edited quota of 7 in force")
	write(string(shipped) + "\nmethods: [oops\n")
	waitFor(t, ctx, func() bool { return strings.Contains(errOut.String(), "refused") }, "the broken version refused")
	if q := quota(); q != "7" {
		t.Fatalf("after a broken edit Hello's quota is %q, want the last good 7", q)
	}
	stop()
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, errOut.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the server's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls cond until it holds, failing when ctx ends first: the
// reload happens on its own goroutine, after the file's change is seen.
func waitFor(t *testing.T, ctx context.Context, cond func() bool, what string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("not within the test's time: %s", what)
		case <-tick.C:
		}
	}
}
