package scripts_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestBadArguments sends malformed arguments to every script: each call
// must fail with an error reply "ERR sluice: SCRIPT: ..." naming the
// problem (not a Lua runtime error), and write nothing.
func TestBadArguments(t *testing.T) {
	const now = "1700000000000000"
	big := "4503599627370497" // 2^52 + 1
	long := strings.Repeat("x", 257)
	var specs []string
	for i := 1; i <= 17; i++ {
		specs = append(specs, fmt.Sprintf("%d:1000:1", i))
	}
	seventeen := strings.Join(specs, ",")
	cases := []struct {
		script string
		args   []string
		msg    string
	}{
		{"fixed_window", []string{}, "limit is required"},
		{"fixed_window", []string{"", "1000", "1"}, "limit is required"},
		{"fixed_window", []string{"abc", "1000", "1"}, `limit must be a non-negative decimal integer, got "abc"`},
		{"fixed_window", []string{"-1", "1000", "1"}, "limit must be a non-negative decimal integer"},
		{"fixed_window", []string{"1.5", "1000", "1"}, "limit must be a non-negative decimal integer"},
		{"fixed_window", []string{"1e3", "1000", "1"}, "limit must be a non-negative decimal integer"},
		{"fixed_window", []string{"0x10", "1000", "1"}, "limit must be a non-negative decimal integer"},
		{"fixed_window", []string{" 3", "1000", "1"}, "limit must be a non-negative decimal integer"},
		{"fixed_window", []string{"0", "1000", "1"}, "limit must be between 1 and 4503599627370496, got 0"},
		{"fixed_window", []string{big, "1000", "1"}, "limit must be between 1 and 4503599627370496"},
		{"fixed_window", []string{"99999999999999999", "1000", "1"}, "limit must be a non-negative decimal integer"},
		{"fixed_window", []string{"3", "0", "1"}, "period must be between 1 and 1125899906842624"},
		{"fixed_window", []string{"3", "1125899906842625", "1"}, "period must be between 1"},
		{"fixed_window", []string{"3", "1000"}, "cost is required"},
		{"fixed_window", []string{"3", "1000", "-1"}, "cost must be a non-negative decimal integer"},
		{"fixed_window", []string{"3", "1000", "1", "soon"}, `now must be a non-negative decimal integer, got "soon"`},
		{"fixed_window", []string{"3", "1000", "1", "-5"}, "now must be a non-negative decimal integer"},
		{"sliding_log", []string{"3", "1000", "x", now}, "cost must be a non-negative decimal integer"},
		{"sliding_log", []string{"0", "1000", "1", now}, "limit must be between 1"},
		{"sliding_window", []string{"3", "", "1", now}, "period is required"},
		{"sliding_window", []string{"1000000", "10000000000", "1", now}, "limit*period must not exceed 4503599627370496"},
		{"token_bucket", []string{"3", "1000", "0", "1", now}, "burst must be between 1"},
		{"token_bucket", []string{"3", "1000000000000", "5000", "1", now}, "burst*period/gcd(limit, period) must not exceed 4503599627370496"},
		{"token_bucket", []string{"3", "1000", "5", "1", "1.5"}, "now must be a non-negative decimal integer"},
		{"gcra", []string{"3", "1000", "", "1", now}, "burst is required"},
		{"gcra", []string{"3", "1000000000000", "5000", "1", now}, "burst*period/gcd(limit, period) must not exceed 4503599627370496"},
		{"concurrency_acquire", []string{"2", "1000", "", now}, "id must be 1 to 256 bytes"},
		{"concurrency_acquire", []string{"2", "1000", long, now}, "id must be 1 to 256 bytes"},
		{"concurrency_acquire", []string{"2", "0", "a", now}, "lease must be between 1"},
		{"concurrency_acquire", []string{"0", "1000", "a", now}, "limit must be between 1"},
		{"concurrency_release", []string{"", now}, "id must be 1 to 256 bytes"},
		{"concurrency_release", []string{"a", "x"}, "now must be a non-negative decimal integer"},
		{"gcra_multi", []string{"", "1", now}, "limits is required"},
		{"gcra_multi", []string{"10:1000", "1", now}, `limit 1: want limit:period:burst as decimal integers, got "10:1000"`},
		{"gcra_multi", []string{"10:1000:10,", "1", now}, `limit 2: want limit:period:burst as decimal integers, got ""`},
		{"gcra_multi", []string{"10:1000:10, 5:10:5", "1", now}, `limit 2: want limit:period:burst as decimal integers, got " 5:10:5"`},
		{"gcra_multi", []string{"10:1000:10,a:b:c", "1", now}, "limit 2: want limit:period:burst"},
		{"gcra_multi", []string{"10:1000:10,0:1000:1", "1", now}, "limit 2: want limit >= 1"},
		{"gcra_multi", []string{"1:1125899906842624:5", "1", now}, "limit 1: want limit >= 1, 1 <= period <= 1125899906842624, burst >= 1 and burst*period/gcd(limit, period) <= 4503599627370496"},
		{"gcra_multi", []string{"10:1000:10,010:1000:10", "1", now}, "limit 2: 10:1000:10 repeats limit 1"},
		{"gcra_multi", []string{seventeen, "1", now}, "at most 16 limits"},
		{"gcra_multi", []string{strings.Repeat("1", 1025), "1", now}, "limits is longer than 1024 bytes"},
		{"gcra_multi", []string{"10:1000:10", "-1", now}, "cost must be a non-negative decimal integer"},
		{"sliding_window_multi", []string{"10:1000:10", "1", now}, `limit 1: want limit:period as decimal integers, got "10:1000:10"`},
		{"sliding_window_multi", []string{"10:1000,10:1000", "1", now}, "limit 2: 10:1000 repeats limit 1"},
		{"sliding_window_multi", []string{"1000000:10000000000", "1", now}, "limit*period <= 4503599627370496"},
		{"sliding_window_multi", []string{"10:1000", "1", "now"}, "now must be a non-negative decimal integer"},
	}
	for _, b := range backends(t) {
		t.Run(b.Name(), func(t *testing.T) {
			ctx := context.Background()
			for i, tc := range cases {
				key := fmt.Sprintf("sluice:{bad-%d}:state", i)
				res, err := b.Eval(ctx, source(t, tc.script), []string{key}, tc.args)
				if err != nil {
					t.Fatalf("%s %q: %v", tc.script, tc.args, err)
				}
				if res.Err == nil {
					t.Errorf("%s %q: reply %v, want an error", tc.script, tc.args, res.Reply)
					continue
				}
				// rueidis drops the "ERR " prefix of the error message.
				prefix := "sluice: " + tc.script + ": "
				msg := strings.TrimPrefix(res.Err.Error(), "ERR ")
				if !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tc.msg) {
					t.Errorf("%s %q: error %q, want %q containing %q", tc.script, tc.args, msg, prefix+"...", tc.msg)
				}
				if res.PTTL[0] != -2 {
					t.Errorf("%s %q: the key exists after the error (PTTL %d)", tc.script, tc.args, res.PTTL[0])
				}
			}
		})
	}
}
