// Package redisserver starts throwaway redis-server processes for tests: a
// standalone server or a small Redis Cluster, each on free loopback ports, each
// stopped by PID when the test ends. It never talks to a server it did not
// start.
//
// When the redis-server binary is missing or a server cannot start, tests are
// skipped with a message saying why, except when the CI environment variable
// is "true": then they fail, so a CI run never passes without a real Redis.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one running redis-server.
type Server struct {
	Addr string // host:port on 127.0.0.1
	Port int
	Dir  string // working directory (logs, cluster config)
	cmd  *exec.Cmd

	exited   chan error
	stopOnce sync.Once
}

// Cluster is a running Redis Cluster of several masters and no replicas.
type Cluster struct {
	Nodes []*Server
}

// Addrs lists the address of every node.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// unavailable skips the test, or fails it when running in CI.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("redisserver: %s (CI=true: a real Redis is required)", msg)
	}
	t.Skipf("redisserver: %s; skipping (install redis-server to run this test)", msg)
}

// Binary returns the path of redis-server, or an error when it is missing.
func Binary() (string, error) {
	if p := os.Getenv("SLUICE_REDIS_SERVER"); p != "" {
		return p, nil
	}
	return exec.LookPath("redis-server")
}

// Start starts a standalone redis-server on a free loopback port and stops it
// when the test ends.
func Start(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		unavailable(t, "redis-server not found: %v", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(false)
		if err != nil {
			lastErr = err
			continue
		}
		s, err := startServer(bin, port, extraArgs)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	unavailable(t, "cannot start redis-server: %v", lastErr)
	return nil
}

// StartCluster starts n masters (n >= 3) with cluster mode enabled, joins
// them with redis-cli --cluster create and waits for cluster_state:ok on
// every node. All processes are stopped when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redisserver: a cluster needs at least 3 masters, got %d", n)
	}
	bin, err := Binary()
	if err != nil {
		unavailable(t, "redis-server not found: %v", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		unavailable(t, "redis-cli not found: %v", err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		c, err := startCluster(t, bin, cli, n)
		if err == nil {
			return c
		}
		lastErr = err
	}
	unavailable(t, "cannot start a %d-node cluster: %v", n, lastErr)
	return nil
}

func startCluster(t testing.TB, bin, cli string, n int) (*Cluster, error) {
	t.Helper()
	c := &Cluster{}
	for i := 0; i < n; i++ {
		port, err := freePort(true)
		if err != nil {
			return nil, err
		}
		s, err := startServer(bin, port, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		})
		if err != nil {
			return nil, err
		}
		t.Cleanup(s.Stop)
		c.Nodes = append(c.Nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, node := range c.Nodes {
		for {
			info, err := node.Command("CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("node %s never reached cluster_state:ok (last: %q, %v)", node.Addr, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c, nil
}

// New starts a standalone redis-server on a free loopback port, outside
// any test's lifetime (for benchmarks that share one server across many
// runs); the caller must call Stop. Tests use Start.
func New() (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, fmt.Errorf("redis-server not found: %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(false)
		if err != nil {
			lastErr = err
			continue
		}
		s, err := startServer(bin, port, nil)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("cannot start redis-server: %w", lastErr)
}

// Unavailable skips tb with err, or fails it when CI is "true".
func Unavailable(tb testing.TB, err error) {
	tb.Helper()
	unavailable(tb, "%v", err)
}

func startServer(bin string, port int, extra []string) (*Server, error) {
	dir, err := os.MkdirTemp("", "sluice-redis-")
	if err != nil {
		return nil, err
	}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
		"--daemonize", "no",
	}
	args = append(args, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	exited := make(chan error, 1)
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, Dir: dir, cmd: cmd, exited: exited}
	go func() { exited <- cmd.Wait() }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		if reply, err := s.Command("PING"); err == nil && reply == "PONG" {
			return s, nil
		}
		select {
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			s.Stop()
			return nil, fmt.Errorf("redis-server on port %d exited: %v: %s", port, err, lastLines(string(log), 5))
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on port %d did not answer PING within 10s", port)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop stops the server by its PID (SIGTERM, then SIGKILL after 5s) and
// removes its directory. It is safe to call more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot act on SIGTERM
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-s.exited:
				s.exited <- err
			case <-time.After(5 * time.Second):
				_ = s.cmd.Process.Kill()
				s.exited <- <-s.exited
			}
		}
		os.RemoveAll(s.Dir)
	})
}

// Command sends one command over a fresh connection and returns the reply as
// text (simple strings, bulk strings and integers; errors become Go errors).
// It is meant for setup and inspection in tests, not for load.
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
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := readFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unsupported reply type %q", line)
	}
}

func readFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// freePort finds a free loopback port; with bus set, port+10000 (the cluster
// bus port) must be free too.
func freePort(bus bool) (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port == 6379 {
			continue
		}
		if bus {
			if port+10000 > 65535 {
				continue
			}
			l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
			if err != nil {
				continue
			}
			l2.Close()
		}
		return port, nil
	}
	return 0, errors.New("no free loopback port found")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Pause stops the server's process (SIGSTOP): it keeps its connections but
// answers nothing until Resume, like a server stalled by the kernel or a
// debugger. Stop and test cleanup resume it first.
func (s *Server) Pause() error {
	if s.cmd.Process == nil {
		return errors.New("redisserver: no process")
	}
	return s.cmd.Process.Signal(syscall.SIGSTOP)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error {
	if s.cmd.Process == nil {
		return errors.New("redisserver: no process")
	}
	return s.cmd.Process.Signal(syscall.SIGCONT)
}
