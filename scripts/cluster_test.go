package scripts_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
)

// TestCluster runs every script, through the generated wrappers, for many
// identities on a 3-master Redis Cluster, all in one batch (luart.Exec
// splits it by slot). Keys are built as prefix:{identity}:suffix, so the
// keys of one identity share a slot wherever it lands; each script must
// work on whichever node owns it.
func TestCluster(t *testing.T) {
	t.Parallel()
	if _, err := redisserver.Binary(); err != nil && os.Getenv("CI") != "true" {
		t.Skipf("redis-server not found (%v)", err)
	}
	cl := redisserver.StartCluster(t, 3)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	now := base
	batch := func(holder string) (calls []luart.Call, names []string) {
		for i := 0; i < 20; i++ {
			id := fmt.Sprintf("user-%d", i)
			key := func(suffix string) string { return "sluice:{" + id + "}:" + suffix }
			calls = append(calls,
				scripts.FixedWindow.Call(scripts.FixedWindowKeys{State: key("fw")}, scripts.FixedWindowArgs{Limit: 1, Period: 1_000_000, Cost: 1, Now: &now}),
				scripts.SlidingLog.Call(scripts.SlidingLogKeys{Log: key("sl")}, scripts.SlidingLogArgs{Limit: 1, Period: 1_000_000, Cost: 1, Now: &now}),
				scripts.SlidingWindow.Call(scripts.SlidingWindowKeys{State: key("sw")}, scripts.SlidingWindowArgs{Limit: 1, Period: 1_000_000, Cost: 1, Now: &now}),
				scripts.TokenBucket.Call(scripts.TokenBucketKeys{State: key("tb")}, scripts.TokenBucketArgs{Limit: 1, Period: 1_000_000, Burst: 1, Cost: 1, Now: &now}),
				scripts.GCRA.Call(scripts.GCRAKeys{State: key("gcra")}, scripts.GCRAArgs{Limit: 1, Period: 1_000_000, Burst: 1, Cost: 1, Now: &now}),
				scripts.ConcurrencyAcquire.Call(scripts.ConcurrencyAcquireKeys{Holders: key("conc")}, scripts.ConcurrencyAcquireArgs{Limit: 1, Lease: 1_000_000, ID: holder, Now: &now}),
				scripts.GCRAMulti.Call(scripts.GCRAMultiKeys{States: []string{key("gm-1"), key("gm-2")}}, scripts.GCRAMultiArgs{Cost: 1, Now: &now, Limits: []int64{1, 1_000_000, 1, 10, 60_000_000, 10}}),
				scripts.SlidingWindowMulti.Call(scripts.SlidingWindowMultiKeys{States: []string{key("swm-1"), key("swm-2")}}, scripts.SlidingWindowMultiArgs{Cost: 1, Now: &now, Limits: []int64{1, 1_000_000, 10, 60_000_000}}),
				scripts.FixedWindowMulti.Call(scripts.FixedWindowMultiKeys{States: []string{key("fwm-1"), key("fwm-2")}}, scripts.FixedWindowMultiArgs{Cost: 1, Now: &now, Limits: []int64{1, 1_000_000, 10, 60_000_000}}),
			)
			names = append(names, "fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra", "concurrency_acquire", "gcra_multi", "sliding_window_multi", "fixed_window_multi")
		}
		return calls, names
	}
	// Twice: the first batch admits every call, the second (another holder
	// for the concurrency limiter) denies every one.
	for round, want := range []int64{1, 0} {
		calls, names := batch(fmt.Sprintf("op-%d", round))
		for i, r := range luart.Exec(ctx, c, calls...) {
			v, err := r.ToArray()
			if err != nil {
				t.Fatalf("round %d, %s: %v", round+1, names[i], err)
			}
			allowed, err := v[0].AsInt64()
			if err != nil || allowed != want {
				t.Errorf("round %d, %s: allowed %d (%v), want %d", round+1, names[i], allowed, err, want)
			}
		}
	}
	rel, err := scripts.ConcurrencyRelease.Run(ctx, c, scripts.ConcurrencyReleaseKeys{Holders: "sluice:{user-3}:conc"}, scripts.ConcurrencyReleaseArgs{ID: "op-0", Now: &now})
	if err != nil || !rel.Released {
		t.Errorf("release on the cluster: %+v, %v", rel, err)
	}
}
