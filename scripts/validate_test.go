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
	cases := []struct {
		script string
		args   []string
		msg    string
		n      int  // keys: 0 for one, -1 for none
		repeat bool // the same key n times
	}{
		{script: "fixed_window", args: []string{}, msg: "limit is required"},
		{script: "fixed_window", args: []string{"", "1000", "1"}, msg: "limit is required"},
		{script: "fixed_window", args: []string{"abc", "1000", "1"}, msg: `limit must be a non-negative decimal integer, got "abc"`},
		{script: "fixed_window", args: []string{"-1", "1000", "1"}, msg: "limit must be a non-negative decimal integer"},
		{script: "fixed_window", args: []string{"1.5", "1000", "1"}, msg: "limit must be a non-negative decimal integer"},
		{script: "fixed_window", args: []string{"1e3", "1000", "1"}, msg: "limit must be a non-negative decimal integer"},
		{script: "fixed_window", args: []string{"0x10", "1000", "1"}, msg: "limit must be a non-negative decimal integer"},
		{script: "fixed_window", args: []string{" 3", "1000", "1"}, msg: "limit must be a non-negative decimal integer"},
		{script: "fixed_window", args: []string{"0", "1000", "1"}, msg: "limit must be between 1 and 4503599627370496, got 0"},
		{script: "fixed_window", args: []string{big, "1000", "1"}, msg: "limit must be between 1 and 4503599627370496"},
		{script: "fixed_window", args: []string{"99999999999999999", "1000", "1"}, msg: "limit must be a non-negative decimal integer"},
		{script: "fixed_window", args: []string{"3", "0", "1"}, msg: "period must be between 1 and 1125899906842624"},
		{script: "fixed_window", args: []string{"3", "1125899906842625", "1"}, msg: "period must be between 1"},
		{script: "fixed_window", args: []string{"3", "1000"}, msg: "cost is required"},
		{script: "fixed_window", args: []string{"3", "1000", "-1"}, msg: "cost must be a non-negative decimal integer"},
		{script: "fixed_window", args: []string{"3", "1000", "1", "soon"}, msg: `now must be a non-negative decimal integer, got "soon"`},
		{script: "gcra_multi", args: []string{"1", now, "2", "10", "1000", "10"}, msg: `each must be 1, 0 or empty, got "2"`},
		{script: "fixed_window", args: []string{"3", "1000", "1", "-5"}, msg: "now must be a non-negative decimal integer"},
		{script: "sliding_log", args: []string{"3", "1000", "x", now}, msg: "cost must be a non-negative decimal integer"},
		{script: "sliding_log", args: []string{"0", "1000", "1", now}, msg: "limit must be between 1"},
		{script: "sliding_window", args: []string{"3", "", "1", now}, msg: "period is required"},
		{script: "sliding_window", args: []string{"1000000", "10000000000", "1", now}, msg: "limit*period must not exceed 4503599627370496"},
		{script: "token_bucket", args: []string{"3", "1000", "0", "1", now}, msg: "burst must be between 1"},
		{script: "token_bucket", args: []string{"3", "1000000000000", "5000", "1", now}, msg: "burst*period/gcd(limit, period) must not exceed 4503599627370496"},
		{script: "token_bucket", args: []string{"3", "1000", "5", "1", "1.5"}, msg: "now must be a non-negative decimal integer"},
		{script: "gcra", args: []string{"3", "1000", "", "1", now}, msg: "burst is required"},
		{script: "gcra", args: []string{"3", "1000000000000", "5000", "1", now}, msg: "burst*period/gcd(limit, period) must not exceed 4503599627370496"},
		{script: "concurrency_acquire", args: []string{"2", "1000", "", now}, msg: "id must be 1 to 256 bytes"},
		{script: "concurrency_acquire", args: []string{"2", "1000", long, now}, msg: "id must be 1 to 256 bytes"},
		{script: "concurrency_acquire", args: []string{"2", "0", "a", now}, msg: "lease must be between 1"},
		{script: "concurrency_acquire", args: []string{"0", "1000", "a", now}, msg: "limit must be between 1"},
		{script: "concurrency_release", args: []string{"", now}, msg: "id must be 1 to 256 bytes"},
		{script: "concurrency_release", args: []string{"a", "x"}, msg: "now must be a non-negative decimal integer"},
		{script: "gcra_multi", args: []string{"1", now, ""}, msg: "want 1 to 16 keys, one per limit, got 0", n: -1},
		{script: "gcra_multi", args: []string{"1", now, "", "10", "1000"}, msg: "want cost, now, each and 3 numbers (limit, period, burst) per key: 6 arguments for 1 key, got 5"},
		{script: "gcra_multi", args: []string{"1", now, "", "10", "1000", "10", "5"}, msg: "6 arguments for 1 key, got 7"},
		{script: "gcra_multi", args: []string{"1", now, "", "10", "1000", "10", "5", "10", "5"}, msg: "12 arguments for 3 keys, got 9", n: 3},
		{script: "gcra_multi", args: []string{"1", now, "", "10", "1000", "10", "5", "10", "5"}, msg: "key 2 repeats key 1", n: 2, repeat: true},
		{script: "gcra_multi", args: []string{"1", now, "", "10", "1000", "10", "a", "10", "5"}, msg: `limit 2: limit must be a non-negative decimal integer, got "a"`, n: 2},
		{script: "gcra_multi", args: []string{"1", now, "", "10", "1000", "10", "0", "1000", "1"}, msg: "limit 2: limit must be between 1 and 4503599627370496, got 0", n: 2},
		{script: "gcra_multi", args: []string{"1", now, "", "10", "1000", "10", "5", "0", "1"}, msg: "limit 2: period must be between 1 and 1125899906842624, got 0", n: 2},
		{script: "gcra_multi", args: []string{"1", now, "", "10", "1000", "10", "5", "10", ""}, msg: "limit 2: burst is required", n: 2},
		{script: "gcra_multi", args: []string{"1", now, "", "1", "1125899906842624", "5"}, msg: "limit 1: burst*period/gcd(limit, period) must not exceed 4503599627370496"},
		{script: "gcra_multi", args: []string{"-1", now, "", "10", "1000", "10"}, msg: "cost must be a non-negative decimal integer"},
		{script: "gcra_multi", args: []string{"1", "soon", "", "10", "1000", "10"}, msg: `now must be a non-negative decimal integer, got "soon"`},
		{script: "gcra_multi", args: limitArgs(now, 17, "10", "1000", "10"), msg: "want 1 to 16 keys, one per limit, got 17", n: 17},
		{script: "sliding_window_multi", args: []string{"1", now, "", "10", "1000", "10"}, msg: "want cost, now, each and 2 numbers (limit, period) per key: 5 arguments for 1 key, got 6"},
		{script: "sliding_window_multi", args: []string{"1", now, "", "10", "1000", "0", "1000"}, msg: "limit 2: limit must be between 1", n: 2},
		{script: "sliding_window_multi", args: []string{"1", now, "", "10", "1000", "10", "1000"}, msg: "key 2 repeats key 1", n: 2, repeat: true},
		{script: "sliding_window_multi", args: []string{"1", now, "", "1000000", "10000000000"}, msg: "limit 1: limit*period must not exceed 4503599627370496"},
		{script: "sliding_window_multi", args: []string{"1", "now", "", "10", "1000"}, msg: "now must be a non-negative decimal integer"},
		{script: "sliding_window_multi", args: limitArgs(now, 17, "10", "1000"), msg: "want 1 to 16 keys, one per limit, got 17", n: 17},
		{script: "fixed_window_multi", args: []string{"1", now, ""}, msg: "want 1 to 16 keys, one per limit, got 0", n: -1},
		{script: "fixed_window_multi", args: []string{"1", now, "", "10", "1000", "10"}, msg: "want cost, now, each and 2 numbers (limit, period) per key: 5 arguments for 1 key, got 6"},
		{script: "fixed_window_multi", args: []string{"1", now, "", "10", "1000"}, msg: "7 arguments for 2 keys, got 5", n: 2},
		{script: "fixed_window_multi", args: []string{"1", now, "", "10", "1000", "10", "1000"}, msg: "key 2 repeats key 1", n: 2, repeat: true},
		{script: "fixed_window_multi", args: []string{"1", now, "", "10", "1000", "0", "1000"}, msg: "limit 2: limit must be between 1 and 4503599627370496, got 0", n: 2},
		{script: "fixed_window_multi", args: []string{"1", now, "", "10", "1000", "10", "1125899906842625"}, msg: "limit 2: period must be between 1 and 1125899906842624", n: 2},
		{script: "fixed_window_multi", args: []string{"1", now, "", "10", "1000", "10", ""}, msg: "limit 2: period is required", n: 2},
		{script: "fixed_window_multi", args: []string{"1", now, "x", "10", "1000"}, msg: `each must be 1, 0 or empty, got "x"`},
		{script: "fixed_window_multi", args: []string{"4503599627370497", now, "", "10", "1000"}, msg: "cost must be between 0 and 4503599627370496"},
		{script: "fixed_window_multi", args: []string{"1", "now", "", "10", "1000"}, msg: "now must be a non-negative decimal integer"},
		{script: "fixed_window_multi", args: limitArgs(now, 17, "10", "1000"), msg: "want 1 to 16 keys, one per limit, got 17", n: 17},
	}
	for _, b := range backends(t) {
		t.Run(b.Name(), func(t *testing.T) {
			ctx := context.Background()
			for i, tc := range cases {
				var keys []string
				for k := 0; k < max(tc.n, 1) && tc.n >= 0; k++ {
					key := fmt.Sprintf("sluice:{bad-%d}:state-%d", i, k+1)
					if tc.repeat {
						key = fmt.Sprintf("sluice:{bad-%d}:state", i)
					}
					keys = append(keys, key)
				}
				res, err := b.Eval(ctx, source(t, tc.script), keys, tc.args)
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
				for k, pttl := range res.PTTL {
					if pttl != -2 {
						t.Errorf("%s %q: key %s exists after the error (PTTL %d)", tc.script, tc.args, keys[k], pttl)
					}
				}
			}
		})
	}
}

// limitArgs returns the ARGV of a multi-limit script for n limits of the
// same numbers: cost 1, now, then the numbers n times.
func limitArgs(now string, n int, numbers ...string) []string {
	args := []string{"1", now, ""}
	for i := 0; i < n; i++ {
		args = append(args, numbers...)
	}
	return args
}
