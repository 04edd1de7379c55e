// Command grpc is a small gRPC service rate limited by sluice, and a
// client that shows what a limited caller sees.
//
//	go run ./examples/grpc                          # server + client on an embedded miniredis, no setup
//	go run ./examples/grpc -limit 3 -window 30s     # Hello: 3 calls per 30 s per client
//	go run ./examples/grpc -serve                   # only the server, on 127.0.0.1:50051; prints grpcurl lines
//	go run ./examples/grpc -redis 127.0.0.1:6380    # a real Redis (several addresses, comma-separated: a cluster)
//	go run ./examples/grpc -config examples/grpc/policies.yaml # the limits from a policy file, reloaded on change
//
// The service, sluice.example.Greeter, is defined by hand on
// google.protobuf.StringValue (no generated code) and has three methods,
// each with its own policy:
//
//   - Hello (unary): -limit calls per -window per client: per x-api-key
//     metadata when the call has one, else per client IP (sliding log);
//   - Expensive (unary): one call per 2 s, shared by every client (GCRA);
//   - Chat (a bidirectional stream): one stream at a time per client
//     (a concurrency policy: the slot is held while the stream is open).
//
// The health service is registered and, like server reflection (which
// lets grpcurl call the service without a .proto file), exempt.
//
// Without -serve the command starts the server on a free port, runs the
// client against it and exits: the client prints every call's outcome,
// the rate-limit metadata, a refusal's details (RetryInfo, QuotaFailure,
// ErrorInfo) and the client interceptor waiting out a RetryInfo.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluice-go/sluice"
	grpclimit "github.com/sluice-go/sluice/adapters/grpc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// apiKeyHeader is the metadata key a client's API key travels in.
const apiKeyHeader = "x-api-key"

// serveAddr is -addr's default with -serve; without it the server takes a
// free port.
const serveAddr = "127.0.0.1:50051"

type config struct {
	addr   string
	redis  []string // empty: an embedded miniredis
	serve  bool
	limit  int64
	window time.Duration
	// configFile is -config: a policy file says the limits instead of
	// -limit and -window, and is reloaded when it changes.
	configFile string
}

// parseFlags reads the command line; a bad one is reported on stderr.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	var redisFlag string
	fs := flag.NewFlagSet("grpc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "", "listen address (default "+serveAddr+" with -serve, else a free port on 127.0.0.1)")
	fs.StringVar(&redisFlag, "redis", "", "Redis address host:port (several, comma-separated: a cluster); empty: an embedded miniredis")
	fs.BoolVar(&c.serve, "serve", false, "only serve, until interrupted (no client)")
	fs.Int64Var(&c.limit, "limit", 5, "Hello calls per -window per client")
	fs.DurationVar(&c.window, "window", time.Minute, "the window of -limit")
	fs.StringVar(&c.configFile, "config", "", "a policy file saying the limits instead of -limit and -window (examples/grpc/policies.yaml: the built-in ones); reloaded when it changes, and on SIGHUP; overrides from `sluice override` apply")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	bad := func(format string, a ...any) (config, error) {
		err := fmt.Errorf(format, a...)
		fmt.Fprintf(stderr, "grpc: %v\n", err)
		return c, err
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	if c.addr == "" {
		c.addr = "127.0.0.1:0"
		if c.serve {
			c.addr = serveAddr
		}
	}
	if _, _, err := net.SplitHostPort(c.addr); err != nil {
		return bad("-addr %q: want host:port", c.addr)
	}
	if redisFlag != "" {
		for _, a := range strings.Split(redisFlag, ",") {
			a = strings.TrimSpace(a)
			if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
				return bad("-redis %q: %q is not host:port", redisFlag, a)
			}
			c.redis = append(c.redis, a)
		}
	}
	if c.configFile != "" {
		if set(fs, "limit") || set(fs, "window") {
			return bad("-limit, -window and -config: the policy file says the limits; drop one of them")
		}
		hello, err := helloPolicy(c.configFile)
		if err != nil {
			return bad("%v", err)
		}
		// The client's script expects Hello's quota.
		c.limit, c.window = hello.Rate, hello.Period
	}
	if c.limit < 1 {
		return bad("-limit %d: want at least 1", c.limit)
	}
	if c.window < time.Millisecond {
		return bad("-window %v: want at least 1ms", c.window)
	}
	return c, nil
}

// The demo's limits. Their names are their state's names in Redis.
func (c config) helloLimit() sluice.Limit {
	return sluice.Must(sluice.SlidingLog(c.limit, c.window)).Named("per-client")
}

var (
	expensiveLimit = sluice.Must(sluice.GCRA(1, 2*time.Second, 1)).Named("per-method")
	chatLimit      = sluice.Must(sluice.Concurrency(1, time.Minute)).Named("in-flight")
)

// run serves and, without -serve, runs the client; it returns the exit
// code: 0 when done (or, with -serve, after an interrupt), 1 when the
// server cannot start or the client fails, 2 for a bad command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "grpc: %v\n", err)
		return 1
	}
	client, desc, closeRedis, err := openRedis(cfg.redis)
	if err != nil {
		return fail(err)
	}
	defer closeRedis()
	limiter, err := sluice.New(client)
	if err != nil {
		return fail(err)
	}
	defer limiter.Close()
	var srv *grpc.Server
	if cfg.configFile != "" {
		var stop func()
		srv, stop, err = newFileServer(ctx, cfg, limiter, client, stderr)
		if stop != nil {
			defer stop()
		}
	} else {
		srv, err = newServer(cfg, limiter)
	}
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fail(fmt.Errorf("cannot listen on %s: %w (choose another with -addr)", cfg.addr, err))
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer srv.Stop()

	addr := ln.Addr().String()
	fmt.Fprintf(stdout, "%s on %s, state in %s\n", serviceName, addr, desc)
	if cfg.configFile != "" {
		fmt.Fprintf(stdout, "limits from %s, reloaded when it changes:\n", cfg.configFile)
		printFileLimits(stdout, cfg.configFile)
	} else {
		fmt.Fprintf(stdout, "  Hello      %q: %d calls per %v per %s, else per client IP\n", "per-client", cfg.limit, cfg.window, apiKeyHeader)
		fmt.Fprintf(stdout, "  Expensive  %q: 1 call per 2s, shared by every client\n", "per-method")
		fmt.Fprintf(stdout, "  Chat       %q: 1 open stream per %s, else per client IP\n", "in-flight", apiKeyHeader)
	}
	if cfg.serve {
		fmt.Fprintf(stdout, "try: grpcurl -plaintext -d '\"you\"' %s %s/Hello\n", addr, serviceName)
		fmt.Fprintf(stdout, "try: grpcurl -plaintext -v -H '%s: demo' -d '\"you\"' %s %s/Hello\n", apiKeyHeader, addr, serviceName)
		select {
		case err := <-served:
			return fail(fmt.Errorf("serve: %w", err))
		case <-ctx.Done():
		}
		fmt.Fprintln(stdout, "shutting down")
		return 0
	}
	if err := demo(ctx, addr, cfg, stdout); err != nil {
		return fail(err)
	}
	return 0
}

// newServer is the gRPC server with its policies: one per method.
func newServer(cfg config, limiter *sluice.Limiter) (*grpc.Server, error) {
	if err := registerDescriptor(); err != nil {
		return nil, err
	}
	client := grpclimit.FirstOf(grpclimit.APIKey(apiKeyHeader), grpclimit.RemoteIP())
	limits, err := grpclimit.New(grpclimit.Config{
		Limiter: limiter,
		Methods: map[string][]grpclimit.Policy{
			methodHello:     {{Name: "per-client", Limit: cfg.helloLimit(), Key: client}},
			methodExpensive: {{Name: "per-method", Limit: expensiveLimit, Key: grpclimit.Method()}},
			methodChat:      {{Name: "in-flight", Limit: chatLimit, Key: client}},
		},
	})
	if err != nil {
		return nil, err
	}
	return grpcServer(limits), nil
}

// grpcServer is the gRPC server of the service behind limits.
func grpcServer(limits *grpclimit.Server) *grpc.Server {
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(limits.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(limits.StreamServerInterceptor()),
	)
	srv.RegisterService(&greeterDesc, greeter{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	reflection.Register(srv)
	return srv
}

// openRedis connects to the Redis at addrs, or starts an embedded
// miniredis when there is none. Its TIME is the wall clock, which the
// scripts read.
func openRedis(addrs []string) (rueidis.Client, string, func(), error) {
	if len(addrs) == 0 {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, "", nil, fmt.Errorf("cannot start the embedded miniredis: %w", err)
		}
		m.ClockTTL(true) // keys expire on the wall clock, as in Redis
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()},
			DisableCache: true, ForceSingleClient: true}) // miniredis has neither client-side caching nor CLUSTER
		if err != nil {
			m.Close()
			return nil, "", nil, fmt.Errorf("cannot connect to the embedded miniredis: %w", err)
		}
		return client, "an embedded miniredis (-redis HOST:PORT for a real Redis)", func() { client.Close(); m.Close() }, nil
	}
	// Client-side caching buys a rate limiter nothing: every decision is
	// a script that writes.
	opt := rueidis.ClientOption{InitAddress: addrs, DisableCache: true, ForceSingleClient: len(addrs) == 1}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, "", nil, fmt.Errorf("cannot connect to Redis at %s: %w", strings.Join(addrs, ","), err)
	}
	kind := "Redis"
	if len(addrs) > 1 {
		kind = fmt.Sprintf("Redis Cluster (%d nodes)", len(client.Nodes()))
	}
	return client, kind + " at " + strings.Join(addrs, ","), client.Close, nil
}
