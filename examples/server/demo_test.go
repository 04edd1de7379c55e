package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests below run the demo as its users do: a built binary, started on
// a free port, spoken to over HTTP.

// allFrameworks are the build tags that compile every framework in.
const allFrameworks = "chi,gin,echo"

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary builds the demo once per test binary and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "sluice-demo-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "server")
		// Every framework is built in: the tests run each one.
		out, err := exec.Command("go", "build", "-tags", allFrameworks, "-o", buildBin, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// startupDeadline bounds how long a demo may take to listen and answer
// /healthz; generous, for a loaded machine.
const startupDeadline = 60 * time.Second

// demo is one running server process.
type demo struct {
	t    *testing.T
	cmd  *exec.Cmd
	base string // http://127.0.0.1:PORT

	mu     sync.Mutex
	lines  []string // stdout, line by line
	stderr strings.Builder

	exited   chan struct{}
	exitErr  error
	stopOnce sync.Once
}

var listening = regexp.MustCompile(`^listening on (http://\S+)$`)

// startDemo starts the demo on a free loopback port with args (the
// defaults otherwise), waits until /healthz answers, and stops it (checking
// a clean exit) when the test ends.
func startDemo(t *testing.T, args ...string) *demo {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &demo{t: t, cmd: cmd, exited: make(chan struct{})}
	cmd.Stderr = &lockedWriter{mu: &d.mu, w: &d.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.lines = append(d.lines, line)
			d.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
	}()
	go func() {
		<-scanned // Wait must not run before the pipe is drained
		d.exitErr = cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Errorf("demo %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, d.output(), d.errors())
		}
	})

	deadline := time.After(startupDeadline)
	select {
	case d.base = <-addr:
	case <-d.exited:
		t.Fatalf("demo %v exited before listening: %v\nstdout:\n%s\nstderr:\n%s", args, d.exitErr, d.output(), d.errors())
	case <-deadline:
		t.Fatalf("demo %v did not listen within %v\nstdout:\n%s\nstderr:\n%s", args, startupDeadline, d.output(), d.errors())
	}
	for {
		resp, err := client.Get(d.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		select {
		case <-d.exited:
			t.Fatalf("demo %v exited: %v\nstderr:\n%s", args, d.exitErr, d.errors())
		case <-deadline:
			t.Fatalf("demo %v: /healthz not ready within %v (last: %v)", args, startupDeadline, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and waits for the process (SIGKILL after 15s); it
// reports anything but a clean exit with status 0.
func (d *demo) stop() error {
	var err error
	d.stopOnce.Do(func() {
		select {
		case <-d.exited:
			err = fmt.Errorf("exited on its own: %v", d.exitErr)
			return
		default:
		}
		if e := d.cmd.Process.Signal(syscall.SIGTERM); e != nil {
			err = e
			return
		}
		select {
		case <-d.exited:
			if d.exitErr != nil {
				err = fmt.Errorf("after SIGTERM: %v", d.exitErr)
			}
		case <-time.After(15 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
			err = errors.New("still running 15s after SIGTERM; killed")
		}
	})
	return err
}

func (d *demo) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.lines, "\n")
}

func (d *demo) errors() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.String()
}

var summary = regexp.MustCompile(`^\d\d:\d\d:\d\d allowed=(\d+) denied=(\d+) degraded=(\d+)$`)

// totals adds up the per-second summary lines printed so far.
func (d *demo) totals() (allowed, denied, degraded int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.lines {
		if m := summary.FindStringSubmatch(l); m != nil {
			a, _ := strconv.Atoi(m[1])
			n, _ := strconv.Atoi(m[2])
			g, _ := strconv.Atoi(m[3])
			allowed, denied, degraded = allowed+a, denied+n, degraded+g
		}
	}
	return
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// client is the tests' HTTP client: generous timeout, no redirects.
var client = &http.Client{
	Timeout: 30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

// response is what a test looks at in one answer.
type response struct {
	code   int
	header http.Header
	body   string
}

func get(t *testing.T, url string) response {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: string(b)}
}
