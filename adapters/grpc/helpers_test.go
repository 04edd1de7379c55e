package grpclimit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sluice-go/sluice"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testStart is 20 s into an epoch-aligned minute.
var testStart = time.Unix(1_700_000_000, 0)

const (
	unaryMethod  = "/grpc.testing.TestService/UnaryCall"
	streamMethod = "/grpc.testing.TestService/FullDuplexCall"
	serviceAll   = "/grpc.testing.TestService/*"
)

// env is a Limiter on miniredis with a clock the test moves.
type env struct {
	lim *sluice.Limiter
	mr  *miniredis.Miniredis
	mu  sync.Mutex
	now time.Time
}

func (e *env) clock() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return e.now }

func (e *env) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	now := e.now
	e.mu.Unlock()
	e.mr.SetTime(now)
	e.mr.FastForward(d)
}

func newEnv(t testing.TB, opts ...sluice.Option) *env {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(testStart)
	mr.ClockTTL(true)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, ForceSingleClient: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	e := &env{mr: mr, now: testStart}
	opts = append([]sluice.Option{sluice.WithClock(e.clock), sluice.WithTimeout(10 * time.Second), sluice.WithLogger(nil)}, opts...)
	if e.lim, err = sluice.New(client, opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.lim.Close() })
	return e
}

// testService answers UnaryCall and FullDuplexCall; the "x-behave"
// metadata makes a handler block until its call ends ("block"), panic
// ("panic") or fail ("fail"). Each handler that starts is counted in
// started.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
	started chan struct{} // when not nil, receives once per handler start
	proceed chan struct{} // when not nil, a handler waits for it after starting
}

func behave(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, "x-behave"); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (s *testService) act(ctx context.Context) error {
	if s.started != nil {
		s.started <- struct{}{}
	}
	if s.proceed != nil {
		<-s.proceed
	}
	switch behave(ctx) {
	case "block":
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	case "panic":
		panic("handler panics")
	case "fail":
		return status.Error(codes.FailedPrecondition, "handler fails")
	}
	return nil
}

func (s *testService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if err := s.act(ctx); err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (s *testService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	if err := s.act(stream.Context()); err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// recoverUnary and recoverStream turn a handler's panic into codes.Internal
// (a gRPC server does not recover panics), outside the rate limit's
// interceptor, as a recovery middleware would. done, when not nil, is
// called when the call (and the rate limit's release) is over.
func recoverUnary(done func()) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if v := recover(); v != nil {
				err = status.Errorf(codes.Internal, "panic: %v", v)
			}
			if done != nil {
				done()
			}
		}()
		return h(ctx, req)
	}
}

func recoverStream(done func()) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = status.Errorf(codes.Internal, "panic: %v", v)
			}
			if done != nil {
				done()
			}
		}()
		return h(srv, ss)
	}
}

// fakePeer makes the "x-test-peer" metadata the call's peer address, so
// calls over bufconn have the client addresses a test chooses.
func fakePeerUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(withFakePeer(ctx), req)
}

func fakePeerStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &ctxStream{ServerStream: ss, ctx: withFakePeer(ss.Context())})
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

func withFakePeer(ctx context.Context) context.Context {
	v := metadata.ValueFromIncomingContext(ctx, "x-test-peer")
	if len(v) == 0 {
		return ctx
	}
	ap, err := net.ResolveTCPAddr("tcp", v[0])
	if err != nil {
		panic(err)
	}
	return peer.NewContext(ctx, &peer.Peer{Addr: ap})
}

// serverOpts is how a test server is built.
type serverOpts struct {
	tcp      bool          // listen on 127.0.0.1 instead of bufconn
	fakePeer bool          // x-test-peer sets the peer (bufconn)
	done     func()        // called after each call's interceptors returned
	started  chan struct{} // see testService
	proceed  chan struct{}
	client   []grpc.DialOption
}

// startServer serves testService behind s's interceptors and returns a
// client of it.
func startServer(t testing.TB, s *Server, o serverOpts) testgrpc.TestServiceClient {
	t.Helper()
	unary := []grpc.UnaryServerInterceptor{recoverUnary(o.done)}
	stream := []grpc.StreamServerInterceptor{recoverStream(o.done)}
	if o.fakePeer {
		unary, stream = append(unary, fakePeerUnary), append(stream, fakePeerStream)
	}
	if s != nil {
		unary, stream = append(unary, s.UnaryServerInterceptor()), append(stream, s.StreamServerInterceptor())
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	testgrpc.RegisterTestServiceServer(srv, &testService{started: o.started, proceed: o.proceed})
	return serve(t, srv, o)
}

// serve serves srv over bufconn or TCP and returns a client of it.
func serve(t testing.TB, srv *grpc.Server, o serverOpts) testgrpc.TestServiceClient {
	t.Helper()
	var lis net.Listener
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, o.client...)
	target := "passthrough:///bufnet"
	if o.tcp {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis, target = l, l.Addr().String()
	} else {
		bl := bufconn.Listen(1 << 20)
		lis = bl
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(target, dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

func newServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// reply is what a client saw of one call.
type reply struct {
	err             error
	header, trailer metadata.MD
}

// get returns the first value of key in the header metadata or, for a
// trailers-only response, the trailer.
func (r reply) get(key string) string {
	if v := r.header.Get(key); len(v) > 0 {
		return v[0]
	}
	if v := r.trailer.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// unary makes one UnaryCall with the metadata pairs md.
func unary(ctx context.Context, c testgrpc.TestServiceClient, md ...string) reply {
	var r reply
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	_, r.err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	return r
}

// stream opens a FullDuplexCall with the metadata pairs md, sends msgs
// messages reading the answer to each, closes and reads to the end.
func stream(ctx context.Context, c testgrpc.TestServiceClient, msgs int, md ...string) (r reply) {
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, md...))
	defer cancel()
	s, err := c.FullDuplexCall(ctx)
	if err != nil {
		return reply{err: err}
	}
	defer func() { r.header, _ = s.Header(); r.trailer = s.Trailer() }()
	for range msgs {
		if err := s.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
			break // the server ended the stream: Recv says why
		}
		if _, err := s.Recv(); err != nil {
			r.err = err
			return r
		}
	}
	_ = s.CloseSend()
	for {
		if _, err := s.Recv(); err == io.EOF {
			return r
		} else if err != nil {
			r.err = err
			return r
		}
	}
}

// ctxT is a context with a generous deadline.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must(k KeyFunc, err error) KeyFunc {
	if err != nil {
		panic(err)
	}
	return k
}

func fixed(n int64, name string) sluice.Limit {
	return sluice.Must(sluice.FixedWindow(n, time.Minute)).Named(name)
}

// partitionKeyForTest is the pk parameter the test secret gives policy and
// key: the first 96 bits of HMAC-SHA256(secret, policy ‖ 0 ‖ key), as an
// sf-Binary.
func partitionKeyForTest(policy, key string) string {
	mac := hmac.New(sha256.New, []byte("0123456789abcdef"))
	mac.Write([]byte(policy + "\x00" + key))
	return ";pk=:" + base64.StdEncoding.EncodeToString(mac.Sum(nil)[:12]) + ":"
}

// startServerWith serves testService with the given server options (the
// interceptors) and returns a client of it.
func startServerWith(t testing.TB, o serverOpts, opts ...grpc.ServerOption) testgrpc.TestServiceClient {
	t.Helper()
	srv := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(srv, &testService{started: o.started, proceed: o.proceed})
	return serve(t, srv, o)
}
