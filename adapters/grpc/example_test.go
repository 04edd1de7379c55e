package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sluice-go/sluice"
	grpclimit "github.com/sluice-go/sluice/adapters/grpc"
)

// exampleLimiter is a Limiter on an embedded miniredis whose clock stands
// still (20 s into a minute), so the outputs are stable.
func exampleLimiter() (*sluice.Limiter, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	at := time.Unix(1_700_000_000, 0)
	mr.SetTime(at)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, ForceSingleClient: true})
	if err != nil {
		panic(err)
	}
	lim, err := sluice.New(client, sluice.WithClock(func() time.Time { return at }))
	if err != nil {
		panic(err)
	}
	return lim, func() { lim.Close(); client.Close(); mr.Close() }
}

type greeter struct {
	testgrpc.UnimplementedTestServiceServer
}

func (greeter) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}

// serveExample serves greeter over bufconn with opts and returns a client.
func serveExample(opts ...grpc.ServerOption) (testgrpc.TestServiceClient, func()) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(srv, greeter{})
	go func() { _ = srv.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		panic(err)
	}
	return testgrpc.NewTestServiceClient(cc), func() { cc.Close(); srv.Stop() }
}

// A Server with one policy per API key, its unary and stream
// interceptors, and what a client sees: the RateLimit values in the
// response metadata, then a ResourceExhausted refusal with its details.
func Example() {
	lim, stop := exampleLimiter()
	defer stop()
	s, err := grpclimit.New(grpclimit.Config{
		Limiter: lim,
		Policies: []grpclimit.Policy{{Name: "per-key", Limit: sluice.Must(sluice.FixedWindow(2, time.Minute)),
			Key: grpclimit.APIKey("x-api-key")}},
	})
	if err != nil {
		panic(err)
	}
	client, done := serveExample(grpc.UnaryInterceptor(s.UnaryServerInterceptor()), grpc.StreamInterceptor(s.StreamServerInterceptor()))
	defer done()

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "secret-1")
	for range 3 {
		var header, trailer metadata.MD
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		if err == nil {
			fmt.Println("OK", header.Get("ratelimit"))
			continue
		}
		delay, _ := grpclimit.RetryDelay(err)
		fmt.Println(status.Code(err), grpclimit.IsRateLimited(err), delay, trailer.Get("grpc-retry-pushback-ms"))
		fmt.Println(status.Convert(err).Message())
	}
	// Output:
	// OK ["per-key";r=1;t=40]
	// OK ["per-key";r=0;t=40]
	// ResourceExhausted true 40s [40000]
	// Quota exceeded for per-key (2 per 60 s); retry in 40 s.
}

// Per-method and per-service policies, a tier from verified claims, and
// exemptions (health and reflection are exempt by default).
func ExampleConfig_methods() {
	lim, stop := exampleLimiter()
	defer stop()
	perMinute := func(n int64, name string) sluice.Limit {
		return sluice.Must(sluice.GCRA(n, time.Minute, n)).Named(name)
	}
	s, err := grpclimit.New(grpclimit.Config{
		Limiter: lim,
		Methods: map[string][]grpclimit.Policy{
			"/grpc.testing.TestService/*":         {{Name: "service", Limit: perMinute(100, "service"), Key: grpclimit.RemoteIP()}},
			"/grpc.testing.TestService/UnaryCall": {{Name: "unary", Limit: perMinute(10, "unary"), Key: grpclimit.Subject()}},
		},
		Tiers: map[string][]grpclimit.Policy{
			"free": {{Name: "free", Limit: perMinute(60, "free"), Key: grpclimit.Subject()}},
			"pro":  {{Name: "pro", Limit: perMinute(600, "pro"), Key: grpclimit.Subject()}},
		},
		DefaultTier: "free",
		Tier:        func(c *grpclimit.Call) string { return planOf(c.Context()) },
		Exempt:      []string{"/grpc.testing.TestService/EmptyCall"},
	})
	fmt.Println(err, s.Exempt(context.Background(), "/grpc.health.v1.Health/Check"), s.Exempt(context.Background(), "/grpc.testing.TestService/UnaryCall"))
	// Output: <nil> true false
}

func planOf(context.Context) string { return "free" }

// A concurrency policy holds a slot while the call runs; a stream's
// PerMessage policy charges each message it receives.
func ExamplePolicy_concurrencyAndMessages() {
	lim, stop := exampleLimiter()
	defer stop()
	_, err := grpclimit.New(grpclimit.Config{
		Limiter: lim,
		Policies: []grpclimit.Policy{
			{Name: "in-flight", Limit: sluice.Must(sluice.Concurrency(8, time.Minute)), Key: grpclimit.Metadata("x-tenant")},
			{Name: "messages", Limit: sluice.Must(sluice.GCRA(1000, time.Second, 1000)), Key: grpclimit.Metadata("x-tenant"), PerMessage: true},
		},
	})
	fmt.Println(err)
	// Output: <nil>
}

// The client interceptor waits for a refusal's RetryInfo when the
// deadline allows, and can rate limit the calls it makes itself.
func ExampleClient() {
	lim, stop := exampleLimiter()
	defer stop()
	c, err := grpclimit.NewClient(grpclimit.ClientConfig{
		Retries: 2, MaxWait: 5 * time.Second,
		Limiter: lim, Limit: sluice.Must(sluice.FixedWindow(1, time.Minute)).Named("upstream"),
	})
	if err != nil {
		panic(err)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, greeter{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cc, _ := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithUnaryInterceptor(c.UnaryClientInterceptor()), grpc.WithStreamInterceptor(c.StreamClientInterceptor()))
	defer cc.Close()
	tc := testgrpc.NewTestServiceClient(cc)
	for range 2 {
		_, err := tc.UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
		d, _ := grpclimit.RetryDelay(err)
		fmt.Println(status.Code(err), d)
	}
	// Output:
	// OK 0s
	// ResourceExhausted 40s
}

// go-grpc-middleware v2's ratelimit interceptor on a Server's policies.
func ExampleServer_MiddlewareLimiter() {
	lim, stop := exampleLimiter()
	defer stop()
	s, _ := grpclimit.New(grpclimit.Config{Limiter: lim,
		Policies: []grpclimit.Policy{{Name: "all", Limit: sluice.Must(sluice.FixedWindow(100, time.Second)), Key: grpclimit.Constant("all")}}})
	l, err := s.MiddlewareLimiter()
	fmt.Println(l != nil, err)
	// Output: true <nil>
}
