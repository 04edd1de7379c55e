package scripts_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestPeek: on every rate script, a call with peek = 1 replies exactly what
// the same call without it replies next, and writes nothing. Random costs
// and times over virtual clocks (miniredis and the sandbox, whose TTLs
// follow the clock; a real server's TTLs follow the wall clock, which would
// make short-lived states expire between the two calls).
func TestPeek(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		script string
		args   []string // before cost
		cap    int
	}{
		{"fixed_window", []string{"5", "1000000"}, 5},
		{"sliding_log", []string{"5", "1000000"}, 5},
		{"sliding_window", []string{"5", "1000000"}, 5},
		{"token_bucket", []string{"3", "1000000", "5"}, 5},
		{"gcra", []string{"3", "1000000", "5"}, 5},
	}
	for _, b := range []backend{newMiniredis(t), newSandbox(t)} {
		for _, c := range cases {
			t.Run(b.Name()+"/"+c.script, func(t *testing.T) {
				src := source(t, c.script)
				key := "sluice:{peek}:" + c.script
				rng := rand.New(rand.NewPCG(7, uint64(len(c.script))))
				now := int64(1_800_000_000_000_000)
				for step := 0; step < 300; step++ {
					now += rng.Int64N(300_000)
					b.SetClock(now)
					cost := fmt.Sprint(rng.IntN(c.cap + 2))
					args := append(append([]string(nil), c.args...), cost, fmt.Sprint(now))
					before := snapshot(ctx, t, b, key)
					peek, err := b.Eval(ctx, src, []string{key}, append(args, "1"))
					if err != nil {
						t.Fatal(err)
					}
					if after := snapshot(ctx, t, b, key); after != before {
						t.Fatalf("step %d: peek wrote: %s -> %s", step, before, after)
					}
					real, err := b.Eval(ctx, src, []string{key}, args)
					if err != nil {
						t.Fatal(err)
					}
					p, perr := peek.ints()
					r, rerr := real.ints()
					if perr != nil || rerr != nil || fmt.Sprint(p) != fmt.Sprint(r) {
						t.Fatalf("step %d cost %s: peek replied %v (%v), the call %v (%v)", step, cost, p, perr, r, rerr)
					}
				}
				bad, err := b.Eval(ctx, src, []string{key}, append(append(append([]string(nil), c.args...), "1", ""), "yes"))
				if err != nil || bad.Err == nil {
					t.Fatalf("peek \"yes\": %+v, %v; want the script's refusal", bad, err)
				}
			})
		}
	}
}
