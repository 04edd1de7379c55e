package overrides_test

import (
	"context"
	"flag"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/overrides"
	"github.com/sluice-go/sluice/scripts"
)

// BenchmarkInScript compares the two places an override can be read for
// a decision, on one redis-server: inside the decision's script (the
// built-in gcra.lua with an HGET of the identity's override prepended: a
// command more in Redis per decision, and a key in the identity's slot),
// and in the client (the same script, plus Store.Lookup answered from
// rueidis' cache), beside the script alone. 1,000 identities, every call
// admitted; "redis-µs/call" is the time Redis spent in the script per
// call (INFO commandstats), the figure that bounds a server's decisions
// per second.
//
//	go test -run '^$' -bench InScript -benchmem -count 5 ./overrides
func BenchmarkInScript(b *testing.B) {
	srv := redisserver.Start(b)
	for _, tc := range inScriptVariants(b, srv) {
		for _, parallel := range []bool{false, true} {
			name := tc.name + "/G=1"
			if parallel {
				name = tc.name + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				idOf := make([]string, ids)
				for i := range idOf {
					idOf[i] = "id-" + strconv.Itoa(i)
				}
				if err := tc.decide(idOf[0]); err != nil { // loads the script
					b.Fatal(err)
				}
				usec0, calls0 := scriptTime(b, srv)
				b.ReportAllocs()
				b.ResetTimer()
				if parallel {
					var next atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := tc.decide(idOf[next.Add(1)%ids]); err != nil {
								b.Error(err)
								return
							}
						}
					})
				} else {
					for i := range b.N {
						if err := tc.decide(idOf[i%ids]); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				usec, calls := scriptTime(b, srv)
				if calls > calls0 {
					b.ReportMetric(float64(usec-usec0)/float64(calls-calls0), "redis-µs/call")
				}
			})
		}
	}
}

// ids is how many identities the in-script measurements rotate over.
const ids = 1000

// inScriptVariant is one way to decide for an identity.
type inScriptVariant struct {
	name   string
	decide func(id string) error
}

// inScriptVariants are the script alone, the script with an HGET in its
// body, and the script with Store.Lookup beside it, on srv.
func inScriptVariants(tb testing.TB, srv *redisserver.Server) []inScriptVariant {
	addrs := []string{srv.Addr}
	client := newClient(tb, addrs, false)
	store, err := overrides.New(newClient(tb, addrs, true), overrides.Options{Logger: quiet, Timeout: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Set(ctx, overrides.Override{Policy: "p", Identity: "id-7", Kind: overrides.Limit, Rate: 10}); err != nil {
		tb.Fatal(err)
	}
	plain := rueidis.NewLuaScript(scripts.GCRA.Source)
	withHGET := rueidis.NewLuaScript("redis.call('HGET', KEYS[2], ARGV[7])\n" + scripts.GCRA.Source)
	hgetArgs := append(gcraArgs[:6:6], "p")
	return []inScriptVariant{
		{"script", func(id string) error {
			return plain.Exec(ctx, client, []string{"{" + id + "}:gcra"}, gcraArgs).Error()
		}},
		{"script+HGET", func(id string) error {
			return withHGET.Exec(ctx, client, []string{"{" + id + "}:gcra", "{" + id + "}:overrides"}, hgetArgs).Error()
		}},
		{"script+Lookup", func(id string) error {
			store.Lookup(ctx, "p", id)
			return plain.Exec(ctx, client, []string{"{" + id + "}:gcra"}, gcraArgs).Error()
		}},
	}
}

var inScriptRounds = flag.Int("inscript.rounds", 0, "interleaved rounds of TestInScriptReport (0: skip it); docs/overrides.md has a run of 30")

// TestInScriptReport measures what BenchmarkInScript does, in interleaved
// rounds of 2,000 calls per variant on one connection, and prints the
// fastest round and the median of each (on a shared machine noise only
// adds time: the fastest round is the least disturbed):
//
//	go test ./overrides -run InScriptReport -v -inscript.rounds 30
func TestInScriptReport(t *testing.T) {
	if *inScriptRounds == 0 {
		t.Skip("a measurement, not a test: run it with -inscript.rounds N")
	}
	srv := redisserver.Start(t)
	variants := inScriptVariants(t, srv)
	idOf := make([]string, ids)
	for i := range idOf {
		idOf[i] = "id-" + strconv.Itoa(i)
	}
	const calls = 2000
	client := make([][]float64, len(variants)) // ns per call, per round
	server := make([][]float64, len(variants)) // Redis µs per call, per round
	for round := 0; round <= *inScriptRounds; round++ {
		for vi, v := range variants {
			u0, c0 := scriptTime(t, srv)
			start := time.Now()
			for i := range calls {
				if err := v.decide(idOf[i%ids]); err != nil {
					t.Fatal(err)
				}
			}
			elapsed := time.Since(start)
			u1, c1 := scriptTime(t, srv)
			if round == 0 {
				continue // loads the scripts, warms the caches
			}
			client[vi] = append(client[vi], float64(elapsed.Nanoseconds())/calls)
			server[vi] = append(server[vi], float64(u1-u0)/float64(c1-c0))
		}
	}
	t.Logf("%d rounds of %d calls each, 1 connection, GCRA, %d identities, all admitted", *inScriptRounds, calls, ids)
	t.Logf("%-14s %22s %22s", "", "client µs/call", "Redis µs/call")
	t.Logf("%-14s %10s %11s %10s %11s", "variant", "fastest", "median", "fastest", "median")
	for vi, v := range variants {
		slices.Sort(client[vi])
		slices.Sort(server[vi])
		n := len(client[vi])
		t.Logf("%-14s %10.1f %11.1f %10.2f %11.2f", v.name, client[vi][0]/1000, client[vi][n/2]/1000, server[vi][0], server[vi][n/2])
	}
}

// gcraArgs: 1<<30 per second, bursts of 1<<30, cost 1, Redis TIME.
var gcraArgs = []string{strconv.Itoa(1 << 30), "1000000", strconv.Itoa(1 << 30), "1", "", ""}

// scriptTime is the µs Redis spent in EVALSHA and EVAL, and their calls.
func scriptTime(tb testing.TB, srv *redisserver.Server) (usec, calls int64) {
	tb.Helper()
	out, err := srv.Command("INFO", "commandstats")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if name != "cmdstat_evalsha" && name != "cmdstat_eval" || !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	return usec, calls
}
