package grpclimit

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/allocs"
	"github.com/sluice-go/sluice/internal/canned"
)

// cannedLimiter is a Limiter on miniredis whose script replies are canned
// after the first: what a decision costs in the process, without the
// round trip (httplimit's alloc test does the same).
func cannedLimiter(t testing.TB) *sluice.Limiter {
	t.Helper()
	mr := miniredis.RunT(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, ForceSingleClient: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	lim, err := sluice.New(canned.New(client), sluice.WithTimeout(time.Minute), sluice.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	l := sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named("warm-up")
	for range 3 {
		if _, err := lim.AllowN(context.Background(), "warm-up", l, 1); err != nil {
			t.Fatal(err)
		}
	}
	return lim
}

// fakeTransport is the ServerTransportStream grpc.SetHeader and SetTrailer
// write to: it keeps nothing.
type fakeTransport struct{ md metadata.MD }

func (f *fakeTransport) Method() string                  { return unaryMethod }
func (f *fakeTransport) SetHeader(md metadata.MD) error  { f.md = md; return nil }
func (f *fakeTransport) SendHeader(md metadata.MD) error { return nil }
func (f *fakeTransport) SetTrailer(md metadata.MD) error { return nil }

// overheadSetup is a unary call's context as a gRPC server builds it (a
// peer, the transport stream) and the interceptors compared: a bare one
// that only calls the handler, and the Server's with one policy keyed by
// the peer address, on a canned Limiter.
func overheadSetup(t testing.TB) (ctx context.Context, bare, limited grpc.UnaryServerInterceptor, ft *fakeTransport, lim *sluice.Limiter) {
	lim = cannedLimiter(t)
	big := sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named("a")
	s, err := New(Config{Limiter: lim, Logger: quiet, Policies: []Policy{{Name: "a", Limit: big, Key: RemoteIP()}}})
	if err != nil {
		t.Fatal(err)
	}
	ft = &fakeTransport{}
	ctx = peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, ft)
	bare = func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	return ctx, bare, s.UnaryServerInterceptor(), ft, lim
}

var (
	benchInfo    = &grpc.UnaryServerInfo{FullMethod: unaryMethod}
	benchHandler = func(context.Context, any) (any, error) { return nil, nil }
)

// BenchmarkUnaryOverhead runs a unary call through a bare interceptor and
// through the Server's (one policy, on a Limiter whose Redis replies are
// canned), and the Limiter's batch of one check alone: the interceptor's
// own cost is limited - bare - batch.
func BenchmarkUnaryOverhead(b *testing.B) {
	ctx, bare, limited, _, lim := overheadSetup(b)
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = bare(ctx, nil, benchInfo, benchHandler)
		}
	})
	b.Run("limited", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := limited(ctx, nil, benchInfo, benchHandler); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("batch-alone", func(b *testing.B) {
		b.ReportAllocs()
		var d sluice.Decision
		check := sluice.Check{Identity: "ip:192.0.2.1", Limit: sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named("a"), Cost: 1}
		for b.Loop() {
			if err := lim.DecideInto(ctx, &d, check); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// allocBudget is what the unary interceptor allocates itself per admitted
// call, on top of the Limiter's batch: the key, the metadata's text, the
// []string its values share, and the metadata map.
const allocBudget = 5

// TestAllocations pins the interceptor's own allocations per admitted
// unary call (not its time: that is the benchmark's).
func TestAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	ctx, _, limited, ft, lim := overheadSetup(t)
	var d sluice.Decision
	check := sluice.Check{Identity: "ip:192.0.2.1", Limit: sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named("a"), Cost: 1}
	batch := allocs.PerRun(5, 1000, func() {
		if err := lim.DecideInto(ctx, &d, check); err != nil {
			t.Fatal(err)
		}
	})
	got := allocs.PerRun(5, 1000, func() {
		if _, err := limited(ctx, nil, benchInfo, benchHandler); err != nil {
			t.Fatal(err)
		}
	})
	if ft.md.Get(MetadataRateLimit) == nil {
		t.Fatalf("no rate-limit metadata set: %v", ft.md)
	}
	own := got - batch
	t.Logf("%.0f allocations per call, %.0f the Limiter's batch: %.0f the interceptor's own", got, batch, own)
	if own > allocBudget {
		t.Errorf("the interceptor allocates %.0f times per call on top of the Limiter, want at most %d", own, allocBudget)
	}
}
