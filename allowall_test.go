package sluice

import (
	"context"
	"testing"
	"time"
)

// TestDecideEachLimit: a batch of limits of one identity, decided in one
// multi-limit script, reports every limit's own Result in the order of
// the checks: when the batch is admitted, each limit's Remaining and
// ResetAfter are what a report (cost 0) of that limit alone says right
// after; when one limit denies, the others say they admit (RetryAfter 0)
// and nothing was charged; a cost over one limit's burst is RetryNever for
// it alone. Decision.Binding is AllowAll's Result. While Redis is gone,
// each is the failure policy's answer for its limit.
func TestDecideEachLimit(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		fast, slow Limit
	}{
		{"gcra", Must(GCRA(2, time.Second, 2)).Named("fast"), Must(GCRA(3, 10*time.Second, 3)).Named("slow")},
		{"sliding_window", Must(SlidingWindow(2, time.Second)).Named("fast"), Must(SlidingWindow(3, 10*time.Second)).Named("slow")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, m, clk, sc := miniLimiter(t, WithDenialCache(0))
			lims := []Limit{tc.fast, tc.slow}
			results := make([]Result, 2)
			var d Decision
			into := func(id string, cost int64) (Result, error) {
				d.Results = results
				err := l.DecideInto(ctx, &d, Check{Identity: id, Limit: lims[0], Cost: cost}, Check{Identity: id, Limit: lims[1], Cost: cost})
				return d.Binding(), err
			}
			report := func(lim Limit) Result {
				t.Helper()
				r, err := l.AllowN(ctx, "u", lim, 0)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			check := func(what string, bind Result, wantAllowed bool, wantEach []bool) {
				t.Helper()
				if bind.Allowed != wantAllowed {
					t.Fatalf("%s: binding %+v, want allowed %v", what, bind, wantAllowed)
				}
				for i, r := range results {
					if r.Limit.Name != lims[i].Name || r.Allowed != wantEach[i] || r.Degraded {
						t.Fatalf("%s: results[%d] = %+v, want limit %s allowed %v", what, i, r, lims[i].Name, wantEach[i])
					}
					if r.Allowed != (r.RetryAfter == 0) {
						t.Fatalf("%s: results[%d] = %+v: allowed and a wait", what, i, r)
					}
					rep := report(lims[i])
					if r.Remaining != rep.Remaining || r.ResetAfter != rep.ResetAfter {
						t.Fatalf("%s: results[%d] remaining %d reset %v; a report right after says %d, %v", what, i, r.Remaining, r.ResetAfter, rep.Remaining, rep.ResetAfter)
					}
				}
			}
			bind, err := into("u", 1)
			if err != nil {
				t.Fatal(err)
			}
			check("first", bind, true, []bool{true, true})
			if plain, err := l.AllowAll(ctx, "v", lims, 1); err != nil || plain.Limit.Name != bind.Limit.Name || plain.Remaining != bind.Remaining {
				t.Fatalf("AllowAll on a fresh identity: %+v, %v; the batch's binding result %+v", plain, err, bind)
			}
			bind, _ = into("u", 1)
			check("second", bind, true, []bool{true, true})
			bind, _ = into("u", 1)
			check("the fast limit is spent", bind, false, []bool{false, true})
			if bind.Limit.Name != "fast" || results[0].RetryAfter != bind.RetryAfter {
				t.Fatalf("binding %+v, results[0] %+v: want the fast limit's wait", bind, results[0])
			}
			clk.add(2 * time.Second) // the fast limit is whole again (the sliding window's previous window too)
			clk.set(m)
			bind, _ = into("u", 1)
			check("two seconds later", bind, true, []bool{true, true})
			bind, _ = into("u", 1)
			check("the slow limit is spent", bind, false, []bool{true, false})
			bind, _ = into("u", 3)
			if results[0].RetryAfter != RetryNever || results[1].RetryAfter == RetryNever || bind.RetryAfter != RetryNever {
				t.Fatalf("cost 3 (over the fast limit's 2): binding %+v, results %+v", bind, results)
			}

			sc.fail.Store(true)
			bind, err = into("w", 1)
			if err != nil || !bind.Degraded || !bind.Allowed {
				t.Fatalf("Redis gone: %+v, %v; want a degraded admission (FailLocal)", bind, err)
			}
			for i, r := range results {
				if !r.Degraded || !r.Allowed || r.Limit.Name != lims[i].Name {
					t.Fatalf("Redis gone: results[%d] = %+v", i, r)
				}
			}
		})
	}
}
