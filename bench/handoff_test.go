package bench_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
)

// BenchmarkHandOff measures, one caller at a time (G=1), what a decision
// costs through the Limiter and through a bare EVALSHA of the same script
// with the same key and arguments, on each of the report's two rueidis
// clients (rueidis defaults and sluice.ClientOption), in interleaved
// rounds (-count is not needed: the rounds are the sub-benchmarks #01,
// #02, ...):
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
	per := strconv.FormatInt(lim.Period.Microseconds(), 10)
	args := []string{strconv.FormatInt(lim.Rate, 10), per, strconv.FormatInt(lim.Burst, 10), "1", "", ""}
	rounds := *roundsFlag
	for r := range rounds {
		for _, cl := range []struct {
			name string
			c    rueidis.Client
			l    *sluice.Limiter
		}{{"defaults", e.rueidis, e.sluice}, {"client_option", e.rueidisD, e.sluiceD}} {
			id := fmt.Sprintf("handoff-%s-%d", cl.name, r)
			key := cl.l.Key(id, lim)
			bare := func(c rueidis.CoreClient) func(ctx context.Context) error {
				return func(ctx context.Context) error {
					res := c.Do(ctx, c.B().Evalsha().Sha1(scripts.GCRA.SHA1).Numkeys(1).Key(key).Arg(args...).Build())
					if luart.IsNoScript(res) {
						res = c.Do(ctx, c.B().Eval().Script(scripts.GCRA.Source).Numkeys(1).Key(key).Arg(args...).Build())
					}
					v, err := res.AsIntSlice()
					if err == nil && (len(v) != 4 || v[0] != 1) {
						err = fmt.Errorf("gcra replied %v, want an admission", v)
					}
					return err
				}
			}
			dedicated, release := cl.c.Dedicate()
			for _, k := range []struct {
				name string
				fn   func(ctx context.Context) error
			}{
				{"allow", func(ctx context.Context) error {
					r, err := cl.l.Allow(ctx, id, lim)
					if err == nil && !r.Allowed {
						err = fmt.Errorf("denied: %+v", r)
					}
					return err
				}},
				{"bare", bare(cl.c)},
				{"bare_dedicated", func(ctx context.Context) error {
					// A deadline, as the Limiter's own calls carry: the
					// dedicated connection then stays on the synchronous path.
					ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					return bare(dedicated)(ctx)
				}},
			} {
				b.Run(cl.name+"/"+k.name, func(b *testing.B) {
					ctx := context.Background()
					cpu := selfCPU()
					for b.Loop() {
						if err := k.fn(ctx); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(selfCPU()-cpu)/float64(b.N)/1e3, "client-µs/op")
				})
			}
			release()
		}
	}
}
