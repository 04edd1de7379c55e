package grpclimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redisserver"
)

// redisLimiter is a Limiter on a redis-server of the test's own.
func redisLimiter(t testing.TB, srv *redisserver.Server, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	client, err := rueidis.NewClient(sluice.ClientOption(srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	opts = append([]sluice.Option{sluice.WithTimeout(10 * time.Second), sluice.WithLogger(nil)}, opts...)
	lim, err := sluice.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

// free reports how many of lim's slots for identity are free, taking and
// giving back one.
func free(t *testing.T, lim *sluice.Limiter, identity string, l sluice.Limit) int64 {
	t.Helper()
	lease, res, err := lim.Acquire(ctxT(t), identity, l)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Allowed {
		return 0
	}
	if err := lim.Release(ctxT(t), lease); err != nil {
		t.Fatal(err)
	}
	return res.Remaining + 1
}

// calls drives calls of one kind, unary or stream.
type callKind struct {
	name string
	call func(ctx context.Context, c testgrpc.TestServiceClient, md ...string) reply
}

var kinds = []callKind{
	{"unary", unary},
	{"stream", func(ctx context.Context, c testgrpc.TestServiceClient, md ...string) reply {
		return stream(ctx, c, 1, md...)
	}},
}

// TestConcurrencyReleased checks that a concurrency slot is held while a
// call runs and released however the call ends: returned, failed,
// panicked, cancelled by the client; then, on a redis-server, that 1,000
// calls cancelled while they run leave every slot free.
func TestConcurrencyReleased(t *testing.T) {
	srv := redisserver.Start(t)
	lim := redisLimiter(t, srv)
	slots := sluice.Must(sluice.Concurrency(2, time.Minute)).Named("in-flight")
	s := newServer(t, Config{Limiter: lim, Policies: []Policy{{Name: "in-flight", Limit: slots, Key: Constant("c")}}})
	const id = "all:c"
	done := make(chan struct{}, 1)
	started, proceed := make(chan struct{}), make(chan struct{})
	client := startServer(t, s, serverOpts{done: func() { done <- struct{}{} }, started: started, proceed: proceed})

	for _, k := range kinds {
		for _, how := range []string{"ok", "fail", "panic", "cancel"} {
			t.Run(k.name+"/"+how, func(t *testing.T) {
				ctx, cancel := context.WithCancel(ctxT(t))
				defer cancel()
				behaveAs := how
				if how == "cancel" {
					behaveAs = "block"
				}
				res := make(chan reply, 1)
				go func() { res <- k.call(ctx, client, "x-behave", behaveAs) }()
				<-started // the handler runs: its slot is taken
				if n := free(t, lim, id, slots); n != 1 {
					t.Errorf("while the call runs %d slots are free, want 1", n)
				}
				proceed <- struct{}{}
				if how == "cancel" {
					cancel()
				}
				r := <-res
				<-done // the server's interceptors returned
				want := map[string]codes.Code{"ok": codes.OK, "fail": codes.FailedPrecondition, "panic": codes.Internal, "cancel": codes.Canceled}[how]
				if c := status.Code(r.err); c != want {
					t.Errorf("call ended %v (%v), want %v", c, r.err, want)
				}
				if n := free(t, lim, id, slots); n != 2 {
					t.Errorf("after the call %d slots are free, want 2", n)
				}
			})
		}
	}

	t.Run("1000-cancelled", func(t *testing.T) {
		for i := range 1000 {
			k := kinds[i%2]
			ctx, cancel := context.WithCancel(ctxT(t))
			res := make(chan reply, 1)
			go func() { res <- k.call(ctx, client, "x-behave", "block") }()
			select {
			case <-started:
			case r := <-res:
				cancel()
				t.Fatalf("call %d (%s) ended before its handler ran: %v", i, k.name, r.err)
			}
			proceed <- struct{}{}
			cancel()
			<-res
			<-done
		}
		if n := free(t, lim, id, slots); n != 2 {
			t.Errorf("after 1,000 cancelled calls %d slots are free, want 2: %d leaked", n, 2-n)
		}
	})
}

// TestReplicasShareOneQuota serves one policy from 3 gRPC servers over
// TCP, each with a Limiter of its own on one redis-server: 500 calls,
// unary and streams, across the three admit exactly the quota's 100.
func TestReplicasShareOneQuota(t *testing.T) {
	srv := redisserver.Start(t)
	at := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return at } // the quota never refills during the test
	quota := sluice.Must(sluice.GCRA(100, time.Hour, 100)).Named("shared")
	var clients []testgrpc.TestServiceClient
	served := make([]atomic.Int64, 3)
	for i := range 3 {
		lim := redisLimiter(t, srv, sluice.WithClock(clock))
		s := newServer(t, Config{Limiter: lim, Policies: []Policy{{Name: "shared", Limit: quota, Key: Metadata("x-tenant")}}})
		clients = append(clients, startServer(t, s, serverOpts{tcp: true, done: func() { served[i].Add(1) }}))
	}
	var ok, refused, other atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				r := kinds[i%2].call(ctxT(t), clients[i%3], "x-tenant", "acme")
				switch {
				case r.err == nil:
					ok.Add(1)
				case IsRateLimited(r.err):
					refused.Add(1)
				default:
					other.Add(1)
					t.Errorf("call %d: %v", i, r.err)
				}
			}
		})
	}
	for i := range 500 {
		work <- i
	}
	close(work)
	wg.Wait()
	if ok.Load() != 100 || refused.Load() != 400 || other.Load() != 0 {
		t.Errorf("admitted %d, refused %d, other %d; want 100, 400, 0", ok.Load(), refused.Load(), other.Load())
	}
	for i := range served {
		if served[i].Load() == 0 {
			t.Errorf("replica %d served no call", i)
		}
	}
}

// TestRetryPolicyHonoursPushback has gRPC's own retry policy (service
// config, RESOURCE_EXHAUSTED retryable) retry a refused call after the
// grpc-retry-pushback-ms the server sent: the retry is admitted.
func TestRetryPolicyHonoursPushback(t *testing.T) {
	srv := redisserver.Start(t)
	lim := redisLimiter(t, srv)
	// one call per 200 ms, no burst: a second call at once is refused for
	// about 200 ms
	l := sluice.Must(sluice.GCRA(5, time.Second, 1)).Named("paced")
	s := newServer(t, Config{Limiter: lim, Policies: []Policy{{Name: "paced", Limit: l, Key: Constant("p")}}})
	var mu sync.Mutex
	var refusedAt time.Time
	var pushback time.Duration
	var retryAfter time.Duration
	record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		mu.Lock()
		defer mu.Unlock()
		if err != nil && refusedAt.IsZero() {
			refusedAt = time.Now()
			pushback, _ = RetryDelay(err)
		} else if err == nil && !refusedAt.IsZero() && retryAfter == 0 {
			retryAfter = time.Since(refusedAt)
		}
		return resp, err
	}
	// 30 s backoff: only the pushback can make the retry come sooner.
	cfg := `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "retryPolicy": {
		"maxAttempts": 2, "initialBackoff": "30s", "maxBackoff": "30s", "backoffMultiplier": 1,
		"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`
	srvOpts := serverOpts{tcp: true, client: []grpc.DialOption{grpc.WithDefaultServiceConfig(cfg)}}
	client := startServerWith(t, srvOpts, grpc.ChainUnaryInterceptor(record, s.UnaryServerInterceptor()))
	if r := unary(ctxT(t), client); r.err != nil {
		t.Fatal(r.err)
	}
	r := unary(ctxT(t), client)
	if r.err != nil {
		t.Fatalf("the retried call failed: %v", r.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if refusedAt.IsZero() || pushback <= 0 {
		t.Fatalf("the second call was never refused (pushback %v)", pushback)
	}
	if retryAfter < pushback {
		t.Errorf("retried %v after the refusal, before its pushback %v", retryAfter, pushback)
	}
	t.Logf("refused with a pushback of %v; retried and admitted %v later", pushback, retryAfter)
}

// TestClientInterceptor checks the client side: a refusal's RetryInfo is
// waited when the deadline allows and the retry admitted, a refusal the
// deadline cannot wait for fails at once, and the client's own limit
// refuses (Allow) or paces (Wait) outgoing calls.
func TestClientInterceptor(t *testing.T) {
	srv := redisserver.Start(t)
	lim := redisLimiter(t, srv)
	paced := sluice.Must(sluice.GCRA(5, time.Second, 1)).Named("paced")
	s := newServer(t, Config{Limiter: lim, Methods: map[string][]Policy{
		unaryMethod: {{Name: "paced", Limit: paced, Key: Constant("p")}},
	}})
	var calls atomic.Int64
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		calls.Add(1)
		return h(ctx, req)
	}
	newClient := func(cfg ClientConfig) testgrpc.TestServiceClient {
		c, err := NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return startServerWith(t, serverOpts{tcp: true, client: []grpc.DialOption{
			grpc.WithUnaryInterceptor(c.UnaryClientInterceptor()), grpc.WithStreamInterceptor(c.StreamClientInterceptor())}},
			grpc.ChainUnaryInterceptor(count, s.UnaryServerInterceptor()), grpc.StreamInterceptor(s.StreamServerInterceptor()))
	}

	t.Run("waits-retry-info", func(t *testing.T) {
		c := newClient(ClientConfig{})
		for i := range 3 {
			if r := unary(ctxT(t), c); r.err != nil {
				t.Fatalf("call %d: %v", i, r.err)
			}
		}
		if n := calls.Load(); n < 4 {
			t.Errorf("3 calls paced at 5/s reached the server %d times: none was refused and retried?", n)
		}
	})
	t.Run("fails-fast", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := unaryHourly(ctx, t, lim) // refused for about an hour
		if !IsRateLimited(err) {
			t.Fatalf("want a refusal, got %v", err)
		}
		if ctx.Err() != nil {
			t.Errorf("the client waited for a RetryInfo its deadline could not reach")
		}
	})
	t.Run("client-limit-allow", func(t *testing.T) {
		own := sluice.Must(sluice.GCRA(2, time.Hour, 2)).Named("client-own") // no window boundary to cross mid-test
		c := newClient(ClientConfig{Limiter: lim, Limit: own, Identity: t.Name(), Retries: -1})
		before := calls.Load()
		var refused error
		for range 3 {
			if r := unary(ctxT(t), c); r.err != nil {
				refused = r.err
			}
		}
		if d, ok := RetryDelay(refused); !IsRateLimited(refused) || !ok || d <= 0 {
			t.Errorf("third call: %v (retry %v), want a local refusal with RetryInfo", refused, d)
		}
		if n := calls.Load() - before; n > 2 {
			t.Errorf("the server saw %d calls, want at most 2", n)
		}
	})
	t.Run("client-limit-wait", func(t *testing.T) {
		own := sluice.Must(sluice.GCRA(10, time.Second, 1)).Named("client-paced")
		c := newClient(ClientConfig{Limiter: lim, Limit: own, Identity: t.Name(), Retries: -1})
		start := time.Now()
		for i := range 3 {
			if r := stream(ctxT(t), c, 1); r.err != nil && !IsRateLimited(r.err) {
				t.Fatalf("stream %d: %v", i, r.err)
			}
		}
		if el := time.Since(start); el < 150*time.Millisecond {
			t.Errorf("3 streams paced at 10/s opened in %v, want at least 200ms less slack", el)
		}
	})
}

// unaryHourly makes two unary calls through the client interceptor to a
// server allowing one per hour, and returns the second's error.
func unaryHourly(ctx context.Context, t *testing.T, lim *sluice.Limiter) error {
	t.Helper()
	hourly := sluice.Must(sluice.GCRA(1, time.Hour, 1)).Named("hourly-unary") // no window boundary to cross mid-test
	s := newServer(t, Config{Limiter: lim, Policies: []Policy{{Name: "hourly-unary", Limit: hourly, Key: Constant("hu")}}})
	cl, err := NewClient(ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	client := startServerWith(t, serverOpts{tcp: true, client: []grpc.DialOption{grpc.WithUnaryInterceptor(cl.UnaryClientInterceptor())}},
		grpc.UnaryInterceptor(s.UnaryServerInterceptor()))
	if r := unary(ctx, client); r.err != nil {
		t.Fatal(r.err)
	}
	return unary(ctx, client).err
}

// TestPerMessage charges a PerMessage policy once per message a stream
// receives, and once for a unary call.
func TestPerMessage(t *testing.T) {
	e := newEnv(t)
	s := newServer(t, Config{Limiter: e.lim, Policies: []Policy{
		{Name: "messages", Limit: fixed(3, "messages"), Key: Constant("m"), PerMessage: true},
		{Name: "opens", Limit: fixed(10, "opens"), Key: Constant("o")},
	}})
	client := startServer(t, s, serverOpts{})
	r := stream(ctxT(t), client, 3)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := r.get(MetadataRateLimit); got != `"opens";r=9;t=40` {
		t.Errorf("stream open metadata %q: the open charges the other policies only", got)
	}
	r = stream(ctxT(t), client, 1)
	if !IsRateLimited(r.err) {
		t.Fatalf("4th message: %v, want a refusal", r.err)
	}
	if d, _ := RetryDelay(r.err); d != 40*time.Second || r.trailer.Get(MetadataPushback)[0] != "40000" {
		t.Errorf("refused message: retry %v, trailer %v", d, r.trailer)
	}
	u := unary(ctxT(t), client)
	if !IsRateLimited(u.err) {
		t.Errorf("unary call after 3 messages: %v, want a refusal (one message)", u.err)
	}
}

// TestTCPPeer keys calls over TCP by their real peer, and reads
// x-forwarded-for only from a trusted peer.
func TestTCPPeer(t *testing.T) {
	e := newEnv(t)
	trusting := must(IP(IPOptions{Header: XForwardedFor, TrustedProxies: []string{"127.0.0.1"}}))
	s := newServer(t, Config{Limiter: e.lim, Methods: map[string][]Policy{
		unaryMethod:  {{Name: "peer", Limit: fixed(1, "peer"), Key: RemoteIP()}},
		streamMethod: {{Name: "xff", Limit: fixed(1, "xff"), Key: trusting}},
	}})
	client := startServer(t, s, serverOpts{tcp: true})
	if r := unary(ctxT(t), client, "x-forwarded-for", "203.0.113.1"); r.err != nil {
		t.Fatal(r.err)
	}
	if r := unary(ctxT(t), client, "x-forwarded-for", "203.0.113.2"); !IsRateLimited(r.err) {
		t.Errorf("RemoteIP believed x-forwarded-for: %v", r.err)
	}
	for i, want := range []bool{false, false, true} {
		xff := []string{"203.0.113.1", "203.0.113.2", "203.0.113.1"}[i]
		if r := stream(ctxT(t), client, 1, "x-forwarded-for", xff); IsRateLimited(r.err) != want {
			t.Errorf("stream %d from %s behind the trusted peer: %v", i, xff, r.err)
		}
	}
}

// TestDefaultExempt leaves health and reflection alone unless told.
func TestDefaultExempt(t *testing.T) {
	e := newEnv(t)
	s := newServer(t, Config{Limiter: e.lim, Policies: []Policy{{Name: "p", Limit: fixed(1, "p"), Key: Constant("x")}}})
	for _, m := range []string{"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"} {
		if !s.Exempt(context.Background(), m) {
			t.Errorf("%s not exempt", m)
		}
	}
	if s.Exempt(context.Background(), unaryMethod) {
		t.Errorf("%s exempt", unaryMethod)
	}
	s = newServer(t, Config{Limiter: e.lim, NoDefaultExempt: true, Policies: []Policy{{Name: "p", Limit: fixed(1, "p"), Key: Constant("x")}}})
	if s.Exempt(context.Background(), "/grpc.health.v1.Health/Check") {
		t.Error("NoDefaultExempt: health still exempt")
	}
}

// TestConfigErrors checks that New refuses what cannot work.
func TestConfigErrors(t *testing.T) {
	e := newEnv(t)
	p := Policy{Name: "p", Limit: fixed(1, "p"), Key: Constant("x")}
	for name, cfg := range map[string]Config{
		"no limiter":       {Policies: []Policy{p}},
		"no policies":      {Limiter: e.lim},
		"no key":           {Limiter: e.lim, Policies: []Policy{{Name: "p", Limit: fixed(1, "p")}}},
		"bad name":         {Limiter: e.lim, Policies: []Policy{{Name: "p\n", Limit: fixed(1, "p"), Key: Constant("x")}}},
		"duplicate":        {Limiter: e.lim, Policies: []Policy{p, p}},
		"method pattern":   {Limiter: e.lim, Methods: map[string][]Policy{"pkg.Svc/M": {p}}},
		"wildcard method":  {Limiter: e.lim, Methods: map[string][]Policy{"/pkg.Svc/Get*": {p}}},
		"exempt pattern":   {Limiter: e.lim, Policies: []Policy{p}, Exempt: []string{"Svc"}},
		"short secret":     {Limiter: e.lim, Policies: []Policy{p}, PartitionKeySecret: []byte("short")},
		"degraded key":     {Limiter: e.lim, Policies: []Policy{p}, DegradedMetadata: "Sluice-Degraded"},
		"tiers no func":    {Limiter: e.lim, Tiers: map[string][]Policy{"a": {p}}, DefaultTier: "a"},
		"tiers no default": {Limiter: e.lim, Tiers: map[string][]Policy{"a": {p}}, Tier: func(*Call) string { return "" }},
		"per-message slot": {Limiter: e.lim, Policies: []Policy{{Name: "c", Limit: sluice.Must(sluice.Concurrency(1, time.Minute)), Key: Constant("x"), PerMessage: true}}},
		"header mode":      {Limiter: e.lim, Policies: []Policy{p}, Headers: HeaderMode(7)},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
	if _, err := NewClient(ClientConfig{Limiter: e.lim}); !errors.Is(err, ErrConfig) {
		t.Errorf("client without a Limit: %v", err)
	}
}

// TestMiddlewareLimiter runs go-grpc-middleware's ratelimit interceptor on
// MiddlewareLimiter: the quota applies, the pushback trailer survives (the
// middleware drops the details), and concurrency policies are refused.
func TestMiddlewareLimiter(t *testing.T) {
	e := newEnv(t)
	s := newServer(t, Config{Limiter: e.lim, Policies: []Policy{{Name: "p", Limit: fixed(1, "p"), Key: Constant("x")}}})
	ml, err := s.MiddlewareLimiter()
	if err != nil {
		t.Fatal(err)
	}
	client := startServerWith(t, serverOpts{}, grpc.UnaryInterceptor(ratelimit.UnaryServerInterceptor(ml)),
		grpc.StreamInterceptor(ratelimit.StreamServerInterceptor(ml)))
	if r := unary(ctxT(t), client); r.err != nil {
		t.Fatal(r.err)
	}
	r := unary(ctxT(t), client)
	if status.Code(r.err) != codes.ResourceExhausted || r.get(MetadataPushback) != "40000" {
		t.Errorf("second call: %v, pushback %q", r.err, r.get(MetadataPushback))
	}
	conc := newServer(t, Config{Limiter: e.lim, Policies: []Policy{{Name: "c", Limit: sluice.Must(sluice.Concurrency(1, time.Minute)), Key: Constant("x")}}})
	if _, err := conc.MiddlewareLimiter(); !errors.Is(err, ErrConfig) {
		t.Errorf("concurrency policy: %v", err)
	}
}
