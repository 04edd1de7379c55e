package bench_test

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestSameDecisions checks that the compared limiters, configured exactly
// as in the benchmarks, admit the same requests of the same scripted
// burst on a fresh identity, so the benchmarks compare like with like.
func TestSameDecisions(t *testing.T) {
	e := testEnv(t)
	families := []struct {
		name      string
		scenarios []scenario
	}{
		{"gcra", gcraScenarios(e)},
		{"fixed_window", fixedScenarios(e)},
		{"allow_all", multiScenarios(e)},
	}
	for _, f := range families {
		for _, s := range f.scenarios {
			t.Run(f.name+"/"+s.name, func(t *testing.T) {
				// deny: a burst of limit+10 admits exactly the first
				// limit; admit: a burst admits everything.
				burst, want := denyBurst+10, denyBurst
				if s.name == "admit" {
					burst, want = admitBurstCheck, admitBurstCheck
				}
				for _, c := range s.contenders {
					id := "fresh-" + f.name + "-" + s.name + "-" + c.name
					got := burstDecisions(t, c.fn, id, burst)
					wantSeq := make([]bool, burst)
					for i := range want {
						wantSeq[i] = true
					}
					if !slices.Equal(got, wantSeq) {
						t.Errorf("%s: burst of %d on a fresh identity admitted %v, want the first %d only", c.name, burst, got, want)
					}
				}
			})
		}
	}
}

// burstDecisions sends n requests for id, one after the other. A fixed
// window of the deny scenarios is an hour long and epoch aligned in
// sluice: should an hour boundary fall inside the burst, the burst is
// repeated on a new identity.
func burstDecisions(t *testing.T, fn decide, id string, n int) []bool {
	t.Helper()
	ctx := context.Background()
	for attempt := 0; ; attempt++ {
		start := time.Now().Truncate(time.Hour)
		out := make([]bool, n)
		for i := range out {
			ok, err := fn(ctx, id)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			out[i] = ok
		}
		if time.Now().Truncate(time.Hour).Equal(start) || attempt > 0 {
			return out
		}
		id += "-again"
	}
}
