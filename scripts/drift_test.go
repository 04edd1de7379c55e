package scripts_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsize"
)

// greedy calls a limiter of cost 1 as often as it allows over [from, to]:
// it asks again at once after an allowed request, and after a denied one
// exactly retry_after later. It returns the instants of the allowed
// requests. decide returns allowed and retry_after.
func greedy(t *testing.T, from, to int64, decide func(now int64) (bool, int64)) []int64 {
	t.Helper()
	var admitted []int64
	for now := from; now <= to; {
		ok, retry := decide(now)
		if ok {
			admitted = append(admitted, now)
			continue
		}
		if retry <= 0 {
			t.Fatalf("denied at +%d µs with retry_after %d", now-from, retry)
		}
		now += retry
	}
	return admitted
}

// TestNoDrift runs every rate script at 3 per second for 1,000 s
// ([0, 1000 s], both ends included; 200 s unless SLUICE_TEST_FULL=1, see
// internal/testsize), asking again exactly at retry_after after each
// denial. Integer arithmetic must give exactly 3 per second
// plus the burst of 3 (the window at the span's end, or the initial bucket), each
// at the exact instant: k*1 s for the windows and the log, and
// ceil(k*1e6/3) µs for the token bucket and GCRA, whose emission interval
// of 333,333.33 µs is not a whole number of µs. The sliding window counter
// must admit at exactly the instants its reference model gives.
func TestNoDrift(t *testing.T) {
	t.Parallel()
	const (
		rate   = 3
		period = int64(1_000_000)
	)
	span := testsize.Pick[int64](200, 1000) * period
	var windows, bucket []int64
	for k := int64(0); k <= span/period; k++ {
		windows = append(windows, base+k*period, base+k*period, base+k*period)
	}
	bucket = []int64{base, base, base}
	for k := int64(1); k <= span*rate/period; k++ {
		bucket = append(bucket, base+(k*period+rate-1)/rate)
	}
	sw := model.NewSlidingWindow(rate, period)
	counter := greedy(t, base, base+span, func(now int64) (bool, int64) {
		d := model.Decide(sw, now, 1)
		return d.Allowed, d.RetryAfter
	})

	cases := []struct {
		script string
		params []string
		want   []int64
	}{
		{"fixed_window", []string{"3", "1000000"}, windows},
		{"sliding_log", []string{"3", "1000000"}, windows},
		{"sliding_window", []string{"3", "1000000"}, counter},
		{"token_bucket", []string{"3", "1000000", "3"}, bucket},
		{"gcra", []string{"3", "1000000", "3"}, bucket},
	}
	for _, b := range backends(t) {
		t.Run(b.Name(), func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.script, func(t *testing.T) {
					ctx := context.Background()
					key := "sluice:{drift-" + tc.script + "}:state"
					src := source(t, tc.script)
					got := greedy(t, base, base+span, func(now int64) (bool, int64) {
						b.SetClock(now)
						res, err := b.Eval(ctx, src, []string{key}, append(slices.Clone(tc.params), "1", itoa(now)))
						if err != nil {
							t.Fatal(err)
						}
						r, err := res.ints()
						if err != nil {
							t.Fatal(err)
						}
						return r[0] == 1, r[2]
					})
					t.Logf("%s: %d admitted over %d s at 3/s", tc.script, len(got), span/period)
					if len(got) != len(tc.want) {
						t.Fatalf("%d admitted, want %d", len(got), len(tc.want))
					}
					for i := range got {
						if got[i] != tc.want[i] {
							t.Fatalf("admission %d at +%d µs, want +%d µs", i+1, got[i]-base, tc.want[i]-base)
						}
					}
				})
			}
		})
	}
}
