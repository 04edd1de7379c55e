package bench_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
)

// BenchmarkHandOff measures, one caller at a time (G=1), what a decision
// costs through the Limiter and through a bare EVALSHA of the same script
// with the same key and arguments, on each of the report's two rueidis
// clients (rueidis defaults and sluice.ClientOption), in interleaved
// rounds, the three in reverse order every other round (-count is not
// needed: the rounds are the sub-benchmarks #01, #02, ...):
//
//   - allow: Limiter.Allow. The caller hands its call to a sender
//     goroutine, which makes the blocking rueidis call and hands the reply
//     back: so a caller who gives up returns at once while the call it
//     started is still read and reconciled.
//   - bare: the EVALSHA on the same client, which rueidis writes from its
//     own writer goroutine and reads in its reader goroutine (its
//     pipelined mode, once any two calls have overlapped on the
//     connection, as the Limiter's do).
//   - bare_dedicated: the EVALSHA on a connection of its own
//     (Client.Dedicate), where rueidis writes and reads the socket in the
//     caller's goroutine: no hand-off at all, and no way to leave a call
//     before its reply.
//
// Besides ns/op it reports the process's CPU per decision (client-µs/op).
// docs/benchmarks.md ("One caller: Allow against its bare call") reads it.
func BenchmarkHandOff(b *testing.B) {
	e := sharedEnv(b)
	// A limit no run reaches: every decision is an admission that Redis
	// makes (a denial could come from the Limiter's denial cache).
	lim := sluice.Must(sluice.GCRA(1_000_000_000, time.Second, 1_000_000_000))
	rounds := *roundsFlag
	for r := range rounds {
		for _, cl := range []struct {
			name string
			c    rueidis.Client
			l    *sluice.Limiter
		}{{"defaults", e.rueidis, e.sluice}, {"client_option", e.rueidisD, e.sluiceD}} {
			id := fmt.Sprintf("handoff-%s-%d", cl.name, r)
			dedicated, release := cl.c.Dedicate()
			onDedicated := evalshaGCRA(dedicated, cl.l, lim)
			cells := []struct {
				name string
				fn   decide
			}{
				{"allow", sluiceOne(cl.l, lim)},
				{"bare", evalshaGCRA(cl.c, cl.l, lim)},
				{"bare_dedicated", func(ctx context.Context, id string) (bool, error) {
					// A deadline, as the Limiter's own calls carry: the
					// dedicated connection then stays on the synchronous path.
					ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					return onDedicated(ctx, id)
				}},
			}
			if r%2 == 1 {
				slices.Reverse(cells) // no contender always runs first
			}
			for _, k := range cells {
				b.Run(cl.name+"/"+k.name, func(b *testing.B) {
					ctx := context.Background()
					cpu := selfCPU()
					for b.Loop() {
						if ok, err := k.fn(ctx, id); err != nil || !ok {
							b.Fatalf("allowed %v, error %v: want every decision an admission", ok, err)
						}
					}
					b.ReportMetric(float64(selfCPU()-cpu)/float64(b.N)/1e3, "client-µs/op")
				})
			}
			release()
		}
	}
}
