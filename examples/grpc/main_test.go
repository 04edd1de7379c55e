package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice/internal/redisserver"
)

// testTimeout bounds a whole run: generous, for a loaded machine.
const testTimeout = 2 * time.Minute

// runDemo runs the command with args, as `go run ./examples/grpc` does,
// and returns its exit code and output.
func runDemo(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	code = run(ctx, args, &out, &errOut)
	t.Logf("grpc %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// checkDemo checks the client's printed outcomes for -limit n: exactly n
// Hello calls admitted with their remaining quota counting down, then a
// refusal with its decoded details and trailer; an API key's own quota;
// Expensive refused within its 2 s with a RetryInfo the client
// interceptor waits out (2 attempts), and Hello's 60 s one it does not
// (1 attempt); a second Chat stream refused while the first is open and a
// third admitted once it closed.
func checkDemo(t *testing.T, out string, n int) {
	t.Helper()
	lines := strings.Split(out, "\n")
	find := func(prefix string) (int, string) {
		t.Helper()
		for i, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return i, l
			}
		}
		t.Fatalf("no line starting %q in\n%s", prefix, out)
		return 0, ""
	}
	ok := regexp.MustCompile(`^Hello #(\d+): OK "hello, world"  ratelimit: "per-client";r=(\d+);t=(\d+)$`)
	var admitted int
	for _, l := range lines {
		if m := ok.FindStringSubmatch(l); m != nil {
			admitted++
			if m[1] != strconv.Itoa(admitted) || m[2] != strconv.Itoa(n-admitted) || m[3] != "60" {
				t.Errorf("%q: want Hello #%d with r=%d;t=60", l, admitted, n-admitted)
			}
		}
	}
	if admitted != n {
		t.Errorf("%d Hello calls admitted, want exactly %d (-limit %d)", admitted, n, n)
	}
	i, l := find(fmt.Sprintf("Hello #%d: ", n+1))
	want := fmt.Sprintf(`Hello #%d: ResourceExhausted "Quota exceeded for per-client (%d per 60 s); retry in 60 s."`, n+1, n)
	if l != want {
		t.Errorf("the refusal is\n%s\nwant\n%s", l, want)
	}
	if d := retryDelay(t, lines[i+1]); d <= 50*time.Second || d > time.Minute {
		t.Errorf("Hello's RetryInfo %v: want the rest of its 1 m window", d)
	}
	for j, want := range []string{
		"  QuotaFailure  policy:per-client: Quota exceeded for per-client (" + strconv.Itoa(n) + " per 60 s).",
		"  ErrorInfo     reason RATE_LIMITED, domain sluice, policies per-client",
	} {
		if got := lines[i+2+j]; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	trailer := regexp.MustCompile(`^  trailer       ratelimit: "per-client";r=0;t=60; ratelimit-policy: "per-client";q=` + strconv.Itoa(n) + `;w=60; grpc-retry-pushback-ms: (\d+)$`)
	if m := trailer.FindStringSubmatch(lines[i+4]); m == nil {
		t.Errorf("the trailer line is %q", lines[i+4])
	} else if ms, _ := strconv.Atoi(m[1]); ms < 50_000 || ms > 60_000 {
		t.Errorf("grpc-retry-pushback-ms %d: want the rest of the 1 m window", ms)
	}
	if _, l := find("Hello: OK "); l != fmt.Sprintf(`Hello: OK "hello, key holder"  ratelimit: "per-client";r=%d;t=60`, n-1) {
		t.Errorf("the API key's call: %q, want it admitted on a quota of its own", l)
	}

	// Expensive: admitted once, then refused (a second time only if a
	// loaded machine let 2 s pass between two calls).
	i, _ = find("Expensive #1: OK ")
	for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "Expensive #") && strings.Contains(lines[i+1], ": OK ") {
		i++
	}
	if i+2 >= len(lines) {
		t.Fatalf("no refusal of Expensive in:\n%s", strings.Join(lines, "\n"))
	}
	if want := `ResourceExhausted "Quota exceeded for per-method (1 per 2 s); retry in 2 s."`; !strings.HasSuffix(lines[i+1], ": "+want) {
		t.Errorf("%q: want %s", lines[i+1], want)
	}
	if d := retryDelay(t, lines[i+2]); d <= 0 || d > 2*time.Second {
		t.Errorf("Expensive's RetryInfo %v: want (0, 2s]", d)
	}
	// Through the interceptor: refused, waited out, admitted (2 attempts);
	// or, if a loaded machine let the 2 s pass first, admitted at once.
	if _, l := find("Expensive: "); !strings.HasPrefix(l, `Expensive: OK "AGAIN" after 2 attempts in `) && !strings.HasPrefix(l, `Expensive: OK "AGAIN" after 1 attempt in `) {
		t.Errorf("%q: want the interceptor to wait out the RetryInfo and the call admitted", l)
	}
	if _, l := find("Hello: ResourceExhausted"); !strings.HasPrefix(l, "Hello: ResourceExhausted after 1 attempt in ") || !strings.HasSuffix(l, "is over MaxWait, so it fails at once") {
		t.Errorf("%q: want the interceptor to fail at once on a RetryInfo over MaxWait", l)
	}

	for _, want := range []string{
		`Chat #1: open, echoed "one"  ratelimit: "in-flight";r=0`,
		`Chat #2 (while #1 is open): ResourceExhausted "Quota exceeded for in-flight (1 in flight); retry in 60 s."`,
		"Chat #1: closed; its slot is free",
		`Chat #3: open, echoed "three"  ratelimit: "in-flight";r=0`,
	} {
		find(want)
	}
}

// retryDelay reads a "  RetryInfo     retry_delay D" line.
func retryDelay(t *testing.T, line string) time.Duration {
	t.Helper()
	s, ok := strings.CutPrefix(line, "  RetryInfo     retry_delay ")
	if !ok {
		t.Fatalf("%q is not a RetryInfo line", line)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return d
}

// TestDemo runs the server and the client on an embedded miniredis, as
// `go run ./examples/grpc -limit 3` does.
func TestDemo(t *testing.T) {
	code, out, stderr := runDemo(t, "-limit", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(out, "sluice.example.Greeter on 127.0.0.1:") || !strings.Contains(out, "state in an embedded miniredis") {
		t.Errorf("banner: %q", strings.SplitN(out, "\n", 2)[0])
	}
	checkDemo(t, out, 3)
}

// TestDemoRedis runs the demo on a real redis-server and on a 3-master
// Redis Cluster: the same outcomes.
func TestDemoRedis(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redisserver.Start(t)
		code, out, stderr := runDemo(t, "-redis", srv.Addr)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if !strings.Contains(out, "state in Redis at "+srv.Addr+"\n") {
			t.Errorf("banner: %q", strings.SplitN(out, "\n", 2)[0])
		}
		checkDemo(t, out, 5)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redisserver.StartCluster(t, 3)
		code, out, stderr := runDemo(t, "-redis", strings.Join(c.Addrs(), ","), "-limit", "2")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if !strings.Contains(out, "state in Redis Cluster (3 nodes) at ") {
			t.Errorf("banner: %q", strings.SplitN(out, "\n", 2)[0])
		}
		checkDemo(t, out, 2)
	})
}

// lineWriter hands each line written to it to a channel.
type lineWriter struct {
	w     *io.PipeWriter
	lines chan string
}

func newLineWriter() *lineWriter {
	r, w := io.Pipe()
	lw := &lineWriter{w: w, lines: make(chan string, 100)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lw.lines <- sc.Text()
		}
		close(lw.lines)
	}()
	return lw
}

func (lw *lineWriter) Write(p []byte) (int, error) { return lw.w.Write(p) }

// TestServe runs -serve on a free port: it prints the grpcurl lines with
// the address it listens on; the service is limited, the health service is
// not, reflection describes the service (what grpcurl needs); an
// interrupt ends it with exit code 0.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	serveCtx, stop := context.WithCancel(ctx)
	out := newLineWriter()
	var errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(serveCtx, []string{"-serve", "-addr", "127.0.0.1:0", "-limit", "2"}, out, &errOut)
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
			t.Log(l)
			if m := hint.FindStringSubmatch(l); m != nil {
				addr = m[1]
			}
		case <-ctx.Done():
			t.Fatal("no grpcurl line")
		}
	}

	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for i := range 3 {
		err := cc.Invoke(ctx, methodHello, wrapperspb.String("you"), new(wrapperspb.StringValue))
		if want := map[bool]codes.Code{true: codes.OK, false: codes.ResourceExhausted}[i < 2]; status.Code(err) != want {
			t.Errorf("Hello #%d: %v, want %v", i+1, err, want)
		}
	}
	health := healthpb.NewHealthClient(cc)
	for range 5 {
		if res, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health check: %v %v, want SERVING: the health service is exempt", res, err)
		}
	}
	refl, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: serviceName}}); err != nil {
		t.Fatal(err)
	}
	res, err := refl.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if fds := res.GetFileDescriptorResponse().GetFileDescriptorProto(); len(fds) == 0 {
		t.Errorf("reflection found no file for %s: %v", serviceName, res)
	}
	_ = refl.CloseSend()

	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after the interrupt, want 0: %s", code, errOut.String())
		}
	case <-ctx.Done():
		t.Fatal("the server did not stop")
	}
	var last string
	for l := range out.lines {
		last = l
	}
	if last != "shutting down" {
		t.Errorf("last line %q, want shutting down", last)
	}
}

// TestFlags: a bad command line exits 2 with an error naming the flag;
// -h exits 0; a Redis that does not answer exits 1.
func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-limit", "0"}, "-limit 0: want at least 1"},
		{[]string{"-window", "0s"}, "-window 0s: want at least 1ms"},
		{[]string{"-addr", "50051"}, `-addr "50051": want host:port`},
		{[]string{"-redis", "localhost"}, `-redis "localhost": "localhost" is not host:port`},
		{[]string{"-redis", "127.0.0.1:7000,:7001"}, `":7001" is not host:port`},
		{[]string{"-nonsense"}, "flag provided but not defined: -nonsense"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		code, _, stderr := runDemo(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if code, _, stderr := runDemo(t, "-h"); code != 0 || !strings.Contains(stderr, "-serve") {
		t.Errorf("-h: exit %d, %q; want 0 and the flags", code, stderr)
	}
	// Port 1 on loopback: nothing listens there (never the shared 6379).
	if code, _, stderr := runDemo(t, "-redis", "127.0.0.1:1"); code != 1 || !strings.Contains(stderr, "cannot connect to Redis at 127.0.0.1:1") {
		t.Errorf("-redis 127.0.0.1:1: exit %d, %q; want 1 and the address", code, stderr)
	}
}
