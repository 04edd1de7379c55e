// Package server starts a private redis-server for the benchmarks: one
// process on a free 127.0.0.1 port (never 6379), stopped by PID. It never
// talks to a server it did not start.
//
// When redis-server is missing or cannot start, Start skips the test or
// benchmark with a message, except when the CI environment variable is
// "true": then it fails, so CI never passes without a real Redis.
package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is one running redis-server.
type Server struct {
	// Addr is host:port on 127.0.0.1.
	Addr   string
	dir    string
	cmd    *exec.Cmd
	exited chan error
}

// Start starts a redis-server and stops it when tb ends. It skips tb (or
// fails it when CI=true) if no server can be started.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := New()
	if err != nil {
		Unavailable(tb, err)
		return nil
	}
	tb.Cleanup(s.Stop)
	return s
}

// Unavailable skips tb with err, or fails it when CI=true.
func Unavailable(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%v (CI=true: a real Redis is required)", err)
	}
	tb.Skipf("%v; skipping (install redis-server to run this)", err)
}

// New starts a redis-server and waits until it answers PING. The caller
// must call Stop.
func New() (*Server, error) {
	bin := os.Getenv("SLUICE_REDIS_SERVER")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, fmt.Errorf("server: redis-server not found: %w", err)
		}
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := start(bin)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, fmt.Errorf("server: cannot start redis-server: %w", last)
}

func start(bin string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-bench-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, cmd: cmd, exited: make(chan error, 1)}
	go func() { s.exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if reply, err := s.Command("PING"); err == nil && reply == "PONG" {
			return s, nil
		}
		select {
		case err := <-s.exited:
			s.exited <- err
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			s.Stop()
			return nil, fmt.Errorf("redis-server on port %d exited: %v: %s", port, err, strings.TrimSpace(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on port %d did not answer PING within 10s", port)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop terminates the server by its PID (SIGTERM, then SIGKILL after 5s)
// and removes its directory. Stopping twice is harmless.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		s.exited <- err
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		s.exited <- <-s.exited
	}
	s.cmd = nil
	os.RemoveAll(s.dir)
}

// Command sends one command over a fresh connection and returns a simple
// string, integer or bulk string reply as text; error replies become
// errors. It is for setup and checks, not for load.
func (s *Server) Command(args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", s.Addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("server: empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("server: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("server: unsupported reply %q", line)
}

// freePort finds a free loopback port other than 6379.
func freePort() (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port != 6379 {
			return port, nil
		}
	}
	return 0, errors.New("server: no free loopback port")
}
