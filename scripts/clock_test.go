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
	// Every state outlives the test's reads by far (TTLs of 10 s and more),
	// so a loaded machine cannot expire a key between the script and the
	// check.
	cases := []struct {
		script string
		args   []string
		// used extracts the now the script used from its reply and key.
		used func(ctx context.Context, t *testing.T, b backend, key string, reply []int64) int64
	}{
		// The state starts with the time of the admission.
		{"fixed_window", []string{"5", "10000000", "1", ""}, stateField(0, 0)},
		{"sliding_log", []string{"5", "100000000", "1", ""}, func(ctx context.Context, t *testing.T, b backend, key string, _ []int64) int64 {
			v, err := b.Do(ctx, "ZRANGE", key, "0", "0", "WITHSCORES")
			if err != nil {
				t.Fatal(err)
			}
			_, scores := withScores(t, v)
			if len(scores) != 1 {
				t.Fatalf("ZRANGE %s = %#v", key, v)
			}
			// The score is the request's time; backends print it in decimal
			// or exponent notation.
			f, err := strconv.ParseFloat(scores[0], 64)
			if err != nil {
				t.Fatalf("score %q", scores[0])
			}
			return int64(f)
		}},
		{"sliding_window", []string{"5", "10000000", "1", ""}, stateField(0, 0)},
		// 100,000 tokens at 1 per ms take 100 s to refill.
		{"token_bucket", []string{"1", "1000", "1000000", "100000", ""}, stateField(0, 0)},
		{"gcra", []string{"1", "1000", "1000000", "100000", ""}, stateField(0, -100_000_000)},
		{"concurrency_acquire", []string{"2", "100000000", "a", ""}, func(ctx context.Context, t *testing.T, b backend, key string, _ []int64) int64 {
			v, err := b.Do(ctx, "ZSCORE", key, "a")
			if err != nil {
				t.Fatal(err)
			}
			s, _ := v.(string)
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("ZSCORE %s a = %#v", key, v)
			}
			return int64(f) - 100_000_000
		}},
		{"gcra_multi", []string{"100000", "", "", "1", "1000", "1000000"}, stateField(0, -100_000_000)},
		{"sliding_window_multi", []string{"1", "", "", "5", "10000000"}, stateField(0, 0)},
		{"fixed_window_multi", []string{"1", "", "", "5", "10000000"}, stateField(0, 0)},
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
				reply, err := res.ints()
				if err != nil || len(reply) < 4 || reply[0] != 1 {
					t.Fatalf("%s: reply %v, %v; want an admitted request", tc.script, reply, err)
				}
				used := tc.used(ctx, t, b, key, reply)
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

// stateField reads field i (0-based) of a string state "a:b:...", plus
// add.
func stateField(i int, add int64) func(ctx context.Context, t *testing.T, b backend, key string, reply []int64) int64 {
	return func(ctx context.Context, t *testing.T, b backend, key string, _ []int64) int64 {
		t.Helper()
		v, err := b.Do(ctx, "GET", key)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := v.(string)
		fields := strings.Split(s, ":")
		if i >= len(fields) {
			t.Fatalf("GET %s = %#v: no field %d", key, v, i)
		}
		n, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			t.Fatalf("GET %s = %#v", key, v)
		}
		return n + add
	}
}
