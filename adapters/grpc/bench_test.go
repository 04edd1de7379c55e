package grpclimit

import (
	"context"
	"errors"
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
// that only calls the handler; the Server's with one policy keyed by the
// peer address on a canned Limiter (limited); and the same Server whose
// decisions are stubbed (stubbed): the admitting Decision the Limiter gave
// once, replayed, so what it costs is the interceptor's own work.
func overheadSetup(t testing.TB) (ctx context.Context, bare, limited, stubbed grpc.UnaryServerInterceptor, ft *fakeTransport) {
	lim := cannedLimiter(t)
	big := sluice.Must(sluice.GCRA(1<<30, time.Second, 1<<30)).Named("a")
	cfg := Config{Limiter: lim, Logger: quiet, Policies: []Policy{{Name: "a", Limit: big, Key: RemoteIP()}}}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var once sluice.Decision
	if err := lim.DecideInto(context.Background(), &once, sluice.Check{Identity: "ip:192.0.2.1", Limit: big, Cost: 1}); err != nil || !once.Allowed {
		t.Fatalf("the Decision to replay: %+v, %v", once, err)
	}
	replay := func(_ context.Context, d *sluice.Decision, checks ...sluice.Check) error {
		if len(checks) != 1 {
			return errors.New("stub: want one check")
		}
		*d = once
		return nil
	}
	stub, err := newStubbable(cfg, replay)
	if err != nil {
		t.Fatal(err)
	}
	ft = &fakeTransport{}
	ctx = peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, ft)
	bare = func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	return ctx, bare, s.UnaryServerInterceptor(), stub.UnaryServerInterceptor(), ft
}

var (
	benchInfo    = &grpc.UnaryServerInfo{FullMethod: unaryMethod}
	benchHandler = func(context.Context, any) (any, error) { return nil, nil }
)

// BenchmarkUnaryOverhead runs a unary call through a bare interceptor,
// through the Server's with its decisions stubbed (the interceptor's own
// cost is stubbed - bare), and through the Server's on a Limiter whose
// Redis replies are canned (the process's whole cost of a decision,
// without the round trip).
func BenchmarkUnaryOverhead(b *testing.B) {
	ctx, bare, limited, stubbed, _ := overheadSetup(b)
	for _, c := range []struct {
		name string
		f    grpc.UnaryServerInterceptor
	}{{"bare", bare}, {"stubbed", stubbed}, {"limited", limited}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.f(ctx, nil, benchInfo, benchHandler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// allocBudget is what the unary interceptor allocates itself per admitted
// call: the key, the metadata's text, the []string its values share, and
// the metadata map.
const allocBudget = 5

// TestAllocations pins the interceptor's own allocations per admitted
// unary call, with its decisions stubbed (not its time: that is the
// benchmark's).
func TestAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	ctx, _, _, stubbed, ft := overheadSetup(t)
	own := allocs.PerRun(5, 1000, func() {
		if _, err := stubbed(ctx, nil, benchInfo, benchHandler); err != nil {
			t.Fatal(err)
		}
	})
	if ft.md.Get(MetadataRateLimit) == nil {
		t.Fatalf("no rate-limit metadata set: %v", ft.md)
	}
	t.Logf("the interceptor allocates %.0f times per call", own)
	if own > allocBudget {
		t.Errorf("the interceptor allocates %.0f times per call, want at most %d", own, allocBudget)
	}
}
