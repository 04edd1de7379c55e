package scripts_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serverTime reads TIME in µs.
func serverTime(ctx context.Context, t *testing.T, b backend) int64 {
	t.Helper()
	v, err := b.Do(ctx, "TIME")
	if err != nil {
		t.Fatal(err)
	}
	parts, _ := v.([]any)
	if len(parts) != 2 {
		t.Fatalf("TIME replied %#v", v)
	}
	sec, err1 := strconv.ParseInt(parts[0].(string), 10, 64)
	usec, err2 := strconv.ParseInt(parts[1].(string), 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("TIME replied %#v", v)
	}
	return sec*1_000_000 + usec
}

// TestServerClock leaves now unset (as the generated wrappers send it: an
// empty string) and checks from the state each script writes that it used
// Redis TIME as sec*1e6+usec: on miniredis and the sandbox exactly the
// clock the test set, on a real server an instant between two TIME calls around the script.
func TestServerClock(t *testing.T) {
	cases := []struct {
		script string
		args   []string
		// used extracts the now the script used from the key.
		used func(ctx context.Context, t *testing.T, b backend, key string) int64
	}{
		{"fixed_window", []string{"5", "1", "1", ""}, hashField("w", 0)}, // 1 µs windows: w = now
		{"sliding_log", []string{"5", "1000", "1", ""}, func(ctx context.Context, t *testing.T, b backend, key string) int64 {
			v, err := b.Do(ctx, "ZRANGE", key, "0", "0")
			if err != nil {
				t.Fatal(err)
			}
			member := v.([]any)[0].(string)
			n, err := strconv.ParseInt(strings.TrimSuffix(member, ":1"), 10, 64)
			if err != nil {
				t.Fatalf("member %q", member)
			}
			return n
		}},
		{"sliding_window", []string{"5", "1", "1", ""}, hashField("w", 0)},
		{"token_bucket", []string{"1", "1000", "5", "1", ""}, hashField("t", 0)},
		{"gcra", []string{"1", "1000", "5", "1", ""}, hashField("tat", -1000)},
		{"concurrency_acquire", []string{"2", "1000", "a", ""}, func(ctx context.Context, t *testing.T, b backend, key string) int64 {
			v, err := b.Do(ctx, "ZSCORE", key, "a")
			if err != nil {
				t.Fatal(err)
			}
			f, err := strconv.ParseFloat(v.(string), 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(f) - 1000
		}},
		{"gcra_multi", []string{"1:1000:5", "1", ""}, hashField("1:1000:5", -1000)},
		{"sliding_window_multi", []string{"5:1", "1", ""}, hashField("5:1", 0)},
	}
	for _, b := range backends(t) {
		t.Run(b.Name(), func(t *testing.T) {
			ctx := context.Background()
			for _, tc := range cases {
				key := "sluice:{clock-" + tc.script + "}:state"
				set := base + 123_456_789
				b.SetClock(set)
				t0 := serverTime(ctx, t, b)
				res, err := b.Eval(ctx, source(t, tc.script), []string{key}, tc.args)
				if err != nil || res.Err != nil {
					t.Fatalf("%s: %v %v", tc.script, err, res.Err)
				}
				t1 := serverTime(ctx, t, b)
				used := tc.used(ctx, t, b, key)
				if b.Name() != "redis" { // a settable clock
					if t0 != set || used != set {
						t.Errorf("%s: used %d, want the clock set: %d", tc.script, used, set)
					}
				} else if used < t0 || used > t1 {
					t.Errorf("%s: used %d (%s), want between TIME before %d and after %d", tc.script, used, time.UnixMicro(used).UTC(), t0, t1)
				}
			}
		})
	}
}

// hashField reads the integer prefix (before any ':') of a hash field, plus
// add.
func hashField(field string, add int64) func(ctx context.Context, t *testing.T, b backend, key string) int64 {
	return func(ctx context.Context, t *testing.T, b backend, key string) int64 {
		t.Helper()
		v, err := b.Do(ctx, "HGET", key, field)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := v.(string)
		s, _, _ = strings.Cut(s, ":")
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("HGET %s %s = %#v", key, field, v)
		}
		return n + add
	}
}
