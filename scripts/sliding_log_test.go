package scripts_test

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
)

// TestSlidingLogRenumber seeds a log whose running total is about to pass
// 2^53, the last exact Lua integer, on every backend: a request that takes
// the total exactly to 2^53 is logged as it is; the next one renumbers the
// log (the cost that left the window is subtracted from every total),
// keeping every member's time and cost, and the decisions that follow are
// those of the log before the renumbering.
func TestSlidingLogRenumber(t *testing.T) {
	const (
		limit  = "2000"
		period = int64(1_000_000)
	)
	for _, b := range backends(t) {
		t.Run(b.Name(), func(t *testing.T) {
			ctx := context.Background()
			key := "sluice:{renumber}:log"
			probe := "sluice:{renumber}:probe"
			if _, err := b.Do(ctx, "DEL", key, probe); err != nil {
				t.Fatal(err)
			}
			// 10 units at base (total 2^53 - 992), 990 units 100 ms later.
			if _, err := b.Do(ctx, "ZADD", key, itoa(base), "9007199254740000:10", itoa(base+100*ms), "9007199254740990:990"); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Do(ctx, "PEXPIRE", key, "5000"); err != nil {
				t.Fatal(err)
			}
			src := source(t, "sliding_log")
			call := func(at, cost int64) []int64 {
				t.Helper()
				b.SetClock(at)
				res, err := b.Eval(ctx, src, []string{key}, []string{limit, itoa(period), itoa(cost), itoa(at)})
				if err != nil {
					t.Fatal(err)
				}
				got, err := res.ints()
				if err != nil {
					t.Fatal(err)
				}
				if got[0] == 1 && cost > 0 {
					wantTTL(t, "after the call", res.PTTL[0], got[3], res.Spread)
				}
				return got
			}
			now := base + period // the 10 units at base have left the window
			if got := call(now, 2); !slices.Equal(got, []int64{1, 1008, 0, period}) {
				t.Fatalf("cost 2: reply %v, want [1 1008 0 %d]", got, period)
			}
			checkMembers(ctx, t, b, key, []string{loggedBefore(100*ms, 9007199254740990, 990), logged(1*sec, 9007199254740992, 2, period)}, "total at 2^53")
			if got := call(now, 1); !slices.Equal(got, []int64{1, 1007, 0, period}) {
				t.Fatalf("cost 1: reply %v, want [1 1007 0 %d]", got, period)
			}
			checkMembers(ctx, t, b, key, []string{logged(100*ms, 990, 990, period), logged(1*sec, 992, 2, period), logged(1*sec, 993, 1, period)}, "renumbered")
			// 1008 units need the 990 at 100 ms to leave: 100 ms from now.
			if got := call(now, 1008); !slices.Equal(got, []int64{0, 1007, 100 * ms, period}) {
				t.Fatalf("cost 1008: reply %v, want [0 1007 %d %d]", got, 100*ms, period)
			}
			argsAt := func(at int64) []string { return []string{limit, itoa(period), "1008", itoa(at)} }
			probeRetry(ctx, t, b, src, []string{key}, []string{probe}, argsAt, 100*ms, now, "cost 1008 after the renumbering")
		})
	}
}

// slowlogMicros returns the execution time in µs that the server's slow
// log recorded for each EVALSHA or EVAL since the last SLOWLOG RESET, and
// resets the log.
func slowlogMicros(ctx context.Context, t *testing.T, c rueidis.Client) []int64 {
	t.Helper()
	entries, err := c.Do(ctx, c.B().SlowlogGet().Count(-1).Build()).ToArray()
	if err != nil {
		t.Fatalf("SLOWLOG GET: %v", err)
	}
	var out []int64
	for _, e := range entries {
		fields, err := e.ToArray()
		if err != nil || len(fields) < 4 {
			t.Fatalf("SLOWLOG entry %v: %v", e, err)
		}
		args, err := fields[3].AsStrSlice()
		if err != nil || len(args) == 0 {
			t.Fatalf("SLOWLOG entry arguments %v: %v", fields[3], err)
		}
		if cmd := strings.ToUpper(args[0]); cmd != "EVALSHA" && cmd != "EVAL" {
			continue
		}
		us, err := fields[2].AsInt64()
		if err != nil {
			t.Fatalf("SLOWLOG entry duration %v: %v", fields[2], err)
		}
		out = append(out, us)
	}
	if err := c.Do(ctx, c.B().SlowlogReset().Build()).Error(); err != nil {
		t.Fatalf("SLOWLOG RESET: %v", err)
	}
	return out
}

func median(xs []int64) int64 {
	s := slices.Clone(xs)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// TestSlidingLogLargeCost runs the sliding log through its generated
// wrapper on a real redis-server whose slow log records every command: a
// limit of 2^40 per hour charged 10^6 at a time. Each admitted call must
// take under 1 ms of Redis time (the median of 20, so that one call
// descheduled on a loaded machine cannot fail the test) and leave a key of
// under 1 KB (MEMORY USAGE) after the first call, since the log holds one
// member per request, not per unit of cost. A log of 1,100 such requests
// is then full; a denied call, which finds its retry_after by binary search
// over the log, must take under 1 ms too, and its retry_after must be the
// time until the oldest request leaves (longer for larger costs).
func TestSlidingLogLargeCost(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "100000")
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := luart.Load(ctx, c, &scripts.SlidingLog.Script); err != nil {
		t.Fatal(err)
	}
	const (
		limit = int64(1) << 40
		cost  = int64(1_000_000)
	)
	keys := scripts.SlidingLogKeys{Log: "sluice:{large-cost}:log"}
	run := func(now, cost int64) scripts.SlidingLogResult {
		t.Helper()
		res, err := scripts.SlidingLog.Run(ctx, c, keys, scripts.SlidingLogArgs{Limit: limit, Period: hour, Cost: cost, Now: &now})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	slowlogMicros(ctx, t, c) // drop what the connection set-up logged

	now := base
	first := run(now, cost)
	if !first.Allowed || first.Remaining != limit-cost {
		t.Fatalf("first call: %+v, want allowed with %d remaining", first, limit-cost)
	}
	bytes, err := c.Do(ctx, c.B().MemoryUsage().Key(keys.Log).Samples(0).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("key after one call of cost %d: %d bytes", cost, bytes)
	if bytes >= 1024 {
		t.Errorf("MEMORY USAGE %s = %d bytes, want under 1 KB", keys.Log, bytes)
	}
	for i := 1; i < 20; i++ {
		now++
		if res := run(now, cost); !res.Allowed {
			t.Fatalf("call %d: %+v, want allowed", i+1, res)
		}
	}
	admitted := slowlogMicros(ctx, t, c)
	if len(admitted) != 20 {
		t.Fatalf("the slow log holds %d script calls, want 20", len(admitted))
	}
	t.Logf("Redis time per admitted call of cost %d (µs): median %d, all %v", cost, median(admitted), admitted)
	if m := median(admitted); m >= 1000 {
		t.Errorf("median Redis time of an admitted call %d µs, want under 1000", m)
	}

	// Fill the log: limit/cost = 1,099,511 calls of 10^6 would; 1,100 of
	// 10^9 minus what is logged do.
	big := int64(1_000_000_000)
	for left := limit - 20*cost; left > 0; left -= big {
		now++
		if res := run(now, min(big, left)); !res.Allowed {
			t.Fatalf("filling: %+v, want allowed", res)
		}
	}
	n, err := c.Do(ctx, c.B().Zcard().Key(keys.Log).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	slowlogMicros(ctx, t, c)
	var denied []int64
	for i := 0; i < 20; i++ {
		res := run(now, cost+int64(i)*big) // each needs more of the log to leave
		if res.Allowed || res.Remaining != 0 {
			t.Fatalf("full log: %+v, want denied", res)
		}
		if want := base + hour - now; i == 0 && res.RetryAfter != want {
			t.Errorf("retry_after %d µs, want %d: until the first request, logged at %d, leaves", res.RetryAfter, want, base)
		}
		denied = append(denied, res.RetryAfter)
	}
	if !slices.IsSorted(denied) || denied[len(denied)-1] <= denied[0] {
		t.Errorf("retry_after of growing costs %v, want growing", denied)
	}
	micros := slowlogMicros(ctx, t, c)
	if len(micros) != 20 {
		t.Fatalf("the slow log holds %d script calls, want 20", len(micros))
	}
	t.Logf("Redis time per denied call on a log of %d members (µs): median %d, all %v", n, median(micros), micros)
	if m := median(micros); m >= 1000 {
		t.Errorf("median Redis time of a denied call %d µs, want under 1000", m)
	}
}
