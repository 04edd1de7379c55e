package scripts_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-go/sluice/internal/testsize"
	"github.com/sluice-go/sluice/scripts"
)

const (
	hour       = int64(3_600_000_000)
	goroutines = 256
)

// perRoutine is the requests each goroutine sends: 400 with
// SLUICE_TEST_FULL=1 (internal/testsize), else 100, still 256 times the
// limit.
var perRoutine = testsize.Pick(100, 400)

// hammer runs decide from goroutines×perRoutine concurrent callers, each
// with a distinct now that moves forward by 1 µs per call (so callers'
// clocks are slightly out of order when they reach the server), and
// returns how many were allowed.
func hammer(t *testing.T, decide func(ctx context.Context, now int64) (bool, error)) int64 {
	t.Helper()
	ctx := context.Background()
	start := (base/hour + 1) * hour // an hour boundary: every call falls in one window
	var seq, allowed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perRoutine; i++ {
				ok, err := decide(ctx, start+seq.Add(1))
				if err != nil {
					errs <- err
					return
				}
				if ok {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return allowed.Load()
}

// TestConcurrentExactness sends 256 goroutines × perRoutine requests for one
// identity, limit 100 per hour, to a real redis-server through the
// generated wrappers (EVALSHA, pipelined by rueidis): exactly 100 must be
// allowed by the fixed window, the sliding log, the token bucket (capacity
// 100) and GCRA (burst 100), and by gcra_multi and fixed_window_multi with
// 100/hour as their tightest limit; the sliding window counter, alone or in
// sliding_window_multi, must allow at most 100. fixed_window_multi gets
// keys of two hash slots, as a standalone Redis allows.
func TestConcurrentExactness(t *testing.T) {
	t.Parallel()
	r := newRedis(t)
	if r == nil {
		t.Skip("needs a real redis-server")
	}
	c := r.client
	const limit = 100
	cases := []struct {
		name   string
		exact  bool
		decide func(ctx context.Context, now int64) (bool, error)
	}{
		{"fixed_window", true, func(ctx context.Context, now int64) (bool, error) {
			res, err := scripts.FixedWindow.Run(ctx, c, scripts.FixedWindowKeys{State: "sluice:{conc-fw}:state"},
				scripts.FixedWindowArgs{Limit: limit, Period: hour, Cost: 1, Now: &now})
			return res.Allowed, err
		}},
		{"sliding_log", true, func(ctx context.Context, now int64) (bool, error) {
			res, err := scripts.SlidingLog.Run(ctx, c, scripts.SlidingLogKeys{Log: "sluice:{conc-sl}:log"},
				scripts.SlidingLogArgs{Limit: limit, Period: hour, Cost: 1, Now: &now})
			return res.Allowed, err
		}},
		{"sliding_window", false, func(ctx context.Context, now int64) (bool, error) {
			res, err := scripts.SlidingWindow.Run(ctx, c, scripts.SlidingWindowKeys{State: "sluice:{conc-sw}:state"},
				scripts.SlidingWindowArgs{Limit: limit, Period: hour, Cost: 1, Now: &now})
			return res.Allowed, err
		}},
		{"token_bucket", true, func(ctx context.Context, now int64) (bool, error) {
			res, err := scripts.TokenBucket.Run(ctx, c, scripts.TokenBucketKeys{State: "sluice:{conc-tb}:state"},
				scripts.TokenBucketArgs{Limit: limit, Period: hour, Burst: limit, Cost: 1, Now: &now})
			return res.Allowed, err
		}},
		{"gcra", true, func(ctx context.Context, now int64) (bool, error) {
			res, err := scripts.GCRA.Run(ctx, c, scripts.GCRAKeys{State: "sluice:{conc-gcra}:state"},
				scripts.GCRAArgs{Limit: limit, Period: hour, Burst: limit, Cost: 1, Now: &now})
			return res.Allowed, err
		}},
		{"gcra_multi", true, func(ctx context.Context, now int64) (bool, error) {
			res, err := scripts.GCRAMulti.Run(ctx, c, scripts.GCRAMultiKeys{States: []string{"sluice:{conc-gm}:second", "sluice:{conc-gm}:hour"}},
				scripts.GCRAMultiArgs{Cost: 1, Now: &now, Limits: []int64{1000, 1_000_000, 1000, 100, hour, 100}})
			return res.Allowed, err
		}},
		{"sliding_window_multi", false, func(ctx context.Context, now int64) (bool, error) {
			res, err := scripts.SlidingWindowMulti.Run(ctx, c, scripts.SlidingWindowMultiKeys{States: []string{"sluice:{conc-swm}:second", "sluice:{conc-swm}:hour"}},
				scripts.SlidingWindowMultiArgs{Cost: 1, Now: &now, Limits: []int64{1000, 1_000_000, 100, hour}})
			return res.Allowed, err
		}},
		{"fixed_window_multi", true, func(ctx context.Context, now int64) (bool, error) {
			res, err := scripts.FixedWindowMulti.Run(ctx, c, scripts.FixedWindowMultiKeys{States: []string{"sluice:{conc-fwm-second}:state", "sluice:{conc-fwm-hour}:state"}},
				scripts.FixedWindowMultiArgs{Cost: 1, Now: &now, Limits: []int64{1000, 1_000_000, 100, hour}})
			return res.Allowed, err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := hammer(t, tc.decide)
			t.Logf("%s: %d of %d requests allowed (limit %d per hour)", tc.name, got, goroutines*perRoutine, limit)
			if got > limit || (tc.exact && got != limit) {
				t.Errorf("%d allowed, want %s %d", got, map[bool]string{true: "exactly", false: "at most"}[tc.exact], limit)
			}
		})
	}
}

// TestConcurrentHolders runs 256 goroutines × perRoutine acquire/release cycles
// on one concurrency limiter of 10 slots on a real redis-server, with the
// server's clock (now unset). Every goroutine that is allowed counts itself
// in an atomic holder count, holds the slot for one more round trip to the
// server, and counts itself out before releasing: the count must never
// exceed 10, and every release must find its lease.
func TestConcurrentHolders(t *testing.T) {
	t.Parallel()
	r := newRedis(t)
	if r == nil {
		t.Skip("needs a real redis-server")
	}
	c := r.client
	const slots = 10
	key := scripts.ConcurrencyAcquireKeys{Holders: "sluice:{conc-holders}:holders"}
	var holders, peak, acquired atomic.Int64
	var seq atomic.Int64
	decide := func(ctx context.Context, _ int64) (bool, error) {
		id := fmt.Sprintf("op-%d", seq.Add(1))
		res, err := scripts.ConcurrencyAcquire.Run(ctx, c, key,
			scripts.ConcurrencyAcquireArgs{Limit: slots, Lease: 60_000_000, ID: id})
		if err != nil || !res.Allowed {
			return false, err
		}
		acquired.Add(1)
		n := holders.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		// Hold the slot for one more round trip, as real work would.
		err = c.Do(ctx, c.B().Ping().Build()).Error()
		holders.Add(-1)
		if err != nil {
			return true, err
		}
		rel, err := scripts.ConcurrencyRelease.Run(ctx, c, scripts.ConcurrencyReleaseKeys(key),
			scripts.ConcurrencyReleaseArgs{ID: id})
		if err == nil && !rel.Released {
			err = fmt.Errorf("release of %s: not held", id)
		}
		return true, err
	}
	hammer(t, decide)
	t.Logf("%d of %d acquisitions allowed; at most %d holders at once (limit %d)", acquired.Load(), goroutines*perRoutine, peak.Load(), slots)
	if peak.Load() > slots {
		t.Errorf("%d holders at once, want at most %d", peak.Load(), slots)
	}
	if acquired.Load() == 0 {
		t.Error("no acquisition was allowed")
	}
	left, err := c.Do(context.Background(), c.B().Zcard().Key(key.Holders).Build()).AsInt64()
	if err != nil || left != 0 {
		t.Errorf("ZCARD after all releases = %d, %v; want 0", left, err)
	}
}
