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

// Server is one running redis-server (or Sentinel).
type Server struct {
	Addr string // host:port on 127.0.0.1
	Port int
	Dir  string // working directory (logs, cluster config)

	bin  string
	args []string // the full command line after bin, for Restart

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan error // receives the process's exit once; re-filled by whoever reads it
	stopped  bool
	stopOnce sync.Once
	auth     []string // AUTH arguments Command sends first (SetAuth)
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
// every node. extraArgs are appended to every node's command line (a
// later option overrides an earlier one, so "--cluster-node-timeout",
// "30000" replaces the default of 5000). All processes are stopped when
// the test ends.
func StartCluster(t testing.TB, n int, extraArgs ...string) *Cluster {
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
		c, err := startCluster(t, bin, cli, n, extraArgs)
		if err == nil {
			return c
		}
		lastErr = err
	}
	unavailable(t, "cannot start a %d-node cluster: %v", n, lastErr)
	return nil
}

func startCluster(t testing.TB, bin, cli string, n int, extra []string) (*Cluster, error) {
	t.Helper()
	c := &Cluster{}
	for i := 0; i < n; i++ {
		port, err := freePort(true)
		if err != nil {
			return nil, err
		}
		s, err := startServer(bin, port, append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		}, extra...))
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
	return spawn(bin, port, nil, extra, nil)
}

// spawn starts bin as "bin [config] --port PORT ... extra" in a fresh
// directory and waits until it answers PING. writeConfig, when set, writes
// the config file (its path is the first argument) into that directory.
func spawn(bin string, port int, writeConfig func(dir string) (string, error), extra []string, auth []string) (*Server, error) {
	dir, err := os.MkdirTemp("", "sluice-redis-")
	if err != nil {
		return nil, err
	}
	var args []string
	if writeConfig != nil {
		conf, err := writeConfig(dir)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args = append(args, conf)
	}
	args = append(args,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
		"--daemonize", "no",
	)
	if writeConfig == nil { // a data server: no persistence
		args = append(args, "--save", "", "--appendonly", "no")
	}
	args = append(args, extra...)
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, Dir: dir, bin: bin, args: args, auth: auth}
	if err := s.launch(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// launch starts the process and waits until it answers PING (a NOAUTH
// reply counts: the server is up, it wants a password).
func (s *Server) launch() error {
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	deadline := time.Now().Add(10 * time.Second)
	for {
		reply, err := s.Command("PING")
		if err == nil && reply == "PONG" || err != nil && strings.HasPrefix(err.Error(), "NOAUTH") {
			return nil
		}
		select {
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited: %v: %s", s.Port, err, lastLines(string(log), 5))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on port %d did not answer PING within 10s", s.Port)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// PID is the process ID of the running server (0 when it is not running).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// signal sends sig to the server's process.
func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("redisserver: no process")
	}
	return s.cmd.Process.Signal(sig)
}

// Kill ends the server at once (SIGKILL), as a crash would, and waits for
// the process to exit. Its directory and port stay reserved for Restart.
func (s *Server) Kill() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return errors.New("redisserver: no process")
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	if err := cmd.Process.Kill(); err != nil {
		return err
	}
	select {
	case err := <-exited:
		exited <- err
	case <-time.After(10 * time.Second):
		return fmt.Errorf("redisserver: process %d did not exit after SIGKILL", cmd.Process.Pid)
	}
	return nil
}

// Restart starts the server again, after Kill, with the same command line:
// the same port and directory, an empty dataset (no persistence) and an
// empty script cache. It waits until the server answers PING.
func (s *Server) Restart() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return errors.New("redisserver: Restart after Stop")
	}
	exited := s.exited
	s.mu.Unlock()
	select {
	case err := <-exited:
		exited <- err
	default:
		return errors.New("redisserver: Restart of a running server (Kill it first)")
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = s.launch(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // the port may not be free yet
	}
	return err
}

// Stop stops the server by its PID (SIGKILL: it keeps nothing on disk, and
// SIGTERM would wait for its next cron tick, 100 ms, for each server of
// every test) and removes its directory. It is safe to call more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		cmd, exited := s.cmd, s.exited
		s.mu.Unlock()
		if cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Kill()
			exited <- <-exited
		}
		os.RemoveAll(s.Dir)
	})
}

// SetAuth makes Command authenticate first (AUTH user password), for a
// server with requirepass or ACL users.
func (s *Server) SetAuth(user, password string) {
	s.mu.Lock()
	s.auth = []string{user, password}
	s.mu.Unlock()
}

// Command sends one command over a fresh connection and returns the reply as
// text (simple strings, bulk strings and integers; the elements of an array,
// nested ones flattened, one per line; errors become Go errors).
// It is meant for setup and inspection in tests, not for load.
func (s *Server) Command(args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", s.Addr, 10*time.Second) // generous: a loaded host

	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(conn)
	s.mu.Lock()
	auth := s.auth
	s.mu.Unlock()
	if auth != nil {
		if _, err := roundTrip(conn, r, append([]string{"AUTH"}, auth...)); err != nil {
			return "", err
		}
	}
	return roundTrip(conn, r, args)
}

// roundTrip writes one command and reads its reply.
func roundTrip(conn net.Conn, r *bufio.Reader, args []string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(r)
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (string, error) {
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
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		elems := make([]string, 0, n)
		var first error
		for i := 0; i < n; i++ {
			e, err := readReply(r)
			if err != nil && first == nil {
				first = err
			}
			elems = append(elems, e)
		}
		return strings.Join(elems, "\n"), first
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
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }
