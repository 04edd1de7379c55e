package sluice

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
)

// TestMemoryPerIdentity fills one identity's state for each algorithm on a
// real redis-server and reads MEMORY USAGE of its key (SAMPLES 0: every
// element counted). docs/algorithms.md reports the figures it logs; run it
// with go test -run TestMemoryPerIdentity -v .
func TestMemoryPerIdentity(t *testing.T) {
	t.Parallel() // its own server and a virtual clock; it measures Redis' memory, not Go's
	ctx := context.Background()
	srv := redisserver.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	// A client clock that the test moves; the keys' TTLs are relative
	// (PEXPIRE), so the real server's clock does not matter.
	now := time.Now().Truncate(time.Minute).Add(30 * time.Second)
	l, err := New(client, WithClock(func() time.Time { return now }), WithTimeout(0), WithBreaker(0, 0),
		WithFailurePolicy(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	const identity = "user-42" // keys are sluice:{user-42}:NAME

	usage := func(t *testing.T, key string) (bytes int64, encoding string) {
		t.Helper()
		bytes, err := client.Do(ctx, client.B().MemoryUsage().Key(key).Samples(0).Build()).AsInt64()
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", key, err)
		}
		encoding, err = client.Do(ctx, client.B().ObjectEncoding().Key(key).Build()).ToString()
		if err != nil {
			t.Fatalf("OBJECT ENCODING %s: %v", key, err)
		}
		// Bounded memory also needs every key to go away by itself.
		if ttl, err := client.Do(ctx, client.B().Pttl().Key(key).Build()).AsInt64(); err != nil || ttl <= 0 {
			t.Errorf("PTTL %s = %d, %v: want a TTL", key, ttl, err)
		}
		return bytes, encoding
	}
	zcard := func(t *testing.T, key string) int64 {
		t.Helper()
		n, err := client.Do(ctx, client.B().Zcard().Key(key).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	allow := func(t *testing.T, lim Limit, n int, every time.Duration) (allowed int) {
		t.Helper()
		for range n {
			r, err := l.Allow(ctx, identity, lim)
			if err != nil || r.Degraded {
				t.Fatalf("%s: %+v, %v", lim.Name, r, err)
			}
			if r.Allowed {
				allowed++
			}
			now = now.Add(every)
		}
		return allowed
	}

	allKeys := func(t *testing.T) []string {
		t.Helper()
		keys, err := client.Do(ctx, client.B().Keys().Pattern("*").Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}

	var report strings.Builder
	row := func(what, key string, bytes int64, enc string) {
		fmt.Fprintf(&report, "| %s | `%s` | %s | %d |\n", what, key, enc, bytes)
	}
	const small = 256 // bytes: the bound for constant-size state

	constant := []struct {
		what string
		lim  Limit
		n    int // requests sent, 1 ms apart
	}{
		{"fixed window, L=100", Must(FixedWindow(100, time.Minute)), 150},
		{"sliding window counter, L=100", Must(SlidingWindow(100, time.Minute)), 150},
		{"token bucket, L=100, B=100", Must(TokenBucket(100, time.Minute, 100)), 150},
		{"GCRA, L=100, B=100", Must(GCRA(100, time.Minute, 100)), 150},
	}
	for _, c := range constant {
		t.Run(c.lim.Name, func(t *testing.T) {
			// Cross a window boundary so both counts of the sliding window
			// counter are set.
			now = now.Truncate(time.Minute).Add(time.Minute - 50*time.Millisecond)
			if got := allow(t, c.lim, c.n, time.Millisecond); got < 100 {
				t.Fatalf("allowed %d of %d", got, c.n)
			}
			k := l.Key(identity, c.lim)
			b, enc := usage(t, k)
			row(c.what, k, b, enc)
			if b <= 0 || b >= small {
				t.Errorf("%s: %d bytes, want constant state below %d", k, b, small)
			}
		})
	}

	var logBytes []int64
	for _, limit := range []int64{100, 1000, 10000} {
		lim := Must(SlidingLog(limit, time.Minute))
		t.Run(lim.Name, func(t *testing.T) {
			now = now.Add(2 * time.Minute)
			// Twice the limit, 1 ms apart: half are denied, and the log
			// holds exactly L members.
			if got := allow(t, lim, int(2*limit), time.Millisecond); got != int(limit) {
				t.Fatalf("allowed %d, want %d", got, limit)
			}
			k := l.Key(identity, lim)
			if n := zcard(t, k); n != limit {
				t.Errorf("ZCARD %s = %d, want L = %d", k, n, limit)
			}
			// A period later the old members are gone as new ones come in.
			now = now.Add(time.Minute)
			allow(t, lim, 10, time.Millisecond)
			if n := zcard(t, k); n != 10 {
				t.Errorf("ZCARD %s = %d after a period and 10 requests, want 10", k, n)
			}
			allow(t, lim, int(limit)-10, time.Millisecond)
			b, enc := usage(t, k)
			row(fmt.Sprintf("sliding log, L=%d (full)", limit), k, b, enc)
			logBytes = append(logBytes, b)
			// A member is "<µs>:<seq>" (about 18 bytes) with its score:
			// about 32 bytes in a listpack (up to 128 members), about 130
			// in a skiplist beyond.
			if b > 160*limit+small {
				t.Errorf("%s: %d bytes for %d members, want at most 160 per member", k, b, limit)
			}
		})
	}
	for i := 1; i < len(logBytes); i++ {
		if logBytes[i] <= logBytes[i-1] {
			t.Errorf("sliding log memory does not grow with L: %v", logBytes)
		}
	}

	for _, n := range []int64{10, 100} {
		lim := Must(Concurrency(n, time.Minute))
		t.Run(lim.Name, func(t *testing.T) {
			var leases []Lease
			for i := range n + 1 {
				lease, r, err := l.Acquire(ctx, identity, lim)
				if err != nil || r.Degraded || r.Allowed != (i < n) {
					t.Fatalf("acquire %d: %+v, %v", i, r, err)
				}
				if r.Allowed {
					leases = append(leases, lease)
				}
			}
			k := l.Key(identity, lim)
			if c := zcard(t, k); c != n {
				t.Errorf("ZCARD %s = %d, want %d holders", k, c, n)
			}
			b, enc := usage(t, k)
			row(fmt.Sprintf("concurrency, %d holders", n), k, b, enc)
			if b > 160*n+small {
				t.Errorf("%s: %d bytes for %d holders", k, b, n)
			}
			for _, lease := range leases {
				if err := l.Release(ctx, lease); err != nil {
					t.Fatal(err)
				}
			}
		})
	}

	for _, c := range []struct {
		what   string
		limits []Limit
	}{
		{"AllowAll GCRA, 10/s + 1000/h", []Limit{Must(GCRA(10, time.Second, 10)), Must(GCRA(1000, time.Hour, 1000))}},
		{"AllowAll sliding window, 10/s + 1000/h", []Limit{Must(SlidingWindow(10, time.Second)), Must(SlidingWindow(1000, time.Hour))}},
	} {
		t.Run(c.what, func(t *testing.T) {
			before := allKeys(t)
			for range 20 {
				r, err := l.AllowAll(ctx, identity, c.limits, 1)
				if err != nil || r.Degraded {
					t.Fatalf("%+v, %v", r, err)
				}
				now = now.Add(50 * time.Millisecond)
			}
			// AllowAll keeps no state of its own: each limit's key is the
			// one Allow uses, in the single-limit layout.
			var added []string
			for _, k := range allKeys(t) {
				if !slices.Contains(before, k) {
					added = append(added, k)
				}
			}
			var want []string
			for _, lim := range c.limits {
				want = append(want, l.Key(identity, lim))
			}
			slices.Sort(added)
			slices.Sort(want)
			if !slices.Equal(added, want) {
				t.Fatalf("AllowAll wrote keys %q, want each limit's own key %q", added, want)
			}
			for _, k := range added {
				if b, _ := usage(t, k); b <= 0 || b >= small {
					t.Errorf("%s: %d bytes, want below %d", k, b, small)
				}
			}
		})
	}

	info, err := srv.Command("INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	version := "?"
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			version = v
		}
	}
	t.Logf("MEMORY USAGE KEY SAMPLES 0 on redis-server %s (64-bit, default encodings):\n\n"+
		"| state | key | encoding | bytes |\n|---|---|---|---:|\n%s", version, report.String())
}
