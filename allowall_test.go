package sluice

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAllowAllInto: every limit's own Result comes back from the one
// script, in the order of the limits: when the call is admitted, each
// limit's Remaining and ResetAfter are what a report (cost 0) of that
// limit alone says right after; when one limit denies, the others say
// they admit (RetryAfter 0) and nothing was charged; a cost over one
// limit's burst is RetryNever for it alone. The binding Result is
// AllowAll's. While Redis is gone, each is the failure policy's answer for
// its limit.
func TestAllowAllInto(t *testing.T) {
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
			bind, err := l.AllowAllInto(ctx, results, "u", 1, lims...)
			if err != nil {
				t.Fatal(err)
			}
			check("first", bind, true, []bool{true, true})
			if plain, err := l.AllowAll(ctx, "v", 1, lims...); err != nil || plain.Limit.Name != bind.Limit.Name || plain.Remaining != bind.Remaining {
				t.Fatalf("AllowAll on a fresh identity: %+v, %v; AllowAllInto's binding result %+v", plain, err, bind)
			}
			bind, _ = l.AllowAllInto(ctx, results, "u", 1, lims...)
			check("second", bind, true, []bool{true, true})
			bind, _ = l.AllowAllInto(ctx, results, "u", 1, lims...)
			check("the fast limit is spent", bind, false, []bool{false, true})
			if bind.Limit.Name != "fast" || results[0].RetryAfter != bind.RetryAfter {
				t.Fatalf("binding %+v, results[0] %+v: want the fast limit's wait", bind, results[0])
			}
			clk.add(2 * time.Second) // the fast limit is whole again (the sliding window's previous window too)
			clk.set(m)
			bind, _ = l.AllowAllInto(ctx, results, "u", 1, lims...)
			check("two seconds later", bind, true, []bool{true, true})
			bind, _ = l.AllowAllInto(ctx, results, "u", 1, lims...)
			check("the slow limit is spent", bind, false, []bool{true, false})
			bind, _ = l.AllowAllInto(ctx, results, "u", 3, lims...)
			if results[0].RetryAfter != RetryNever || results[1].RetryAfter == RetryNever || bind.RetryAfter != RetryNever {
				t.Fatalf("cost 3 (over the fast limit's 2): binding %+v, results %+v", bind, results)
			}
			if _, err := l.AllowAllInto(ctx, results[:1], "u", 1, lims...); !errors.Is(err, ErrInvalidLimit) {
				t.Fatalf("one result for two limits: %v, want ErrInvalidLimit", err)
			}

			sc.fail.Store(true)
			bind, err = l.AllowAllInto(ctx, results, "w", 1, lims...)
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
