package scripts_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/scripts"
)

// A GCRA limit of 3 per second with a burst of 3: three requests pass at
// once, the fourth must wait one emission interval (1/3 s, rounded up to
// the µs), and at that instant it passes.
func ExampleGCRAScript_Run() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	keys := scripts.GCRAKeys{State: "rl:{user:42}:gcra"}
	now := int64(1_700_000_000_000_000) // µs; leave Now nil to use the server's clock
	for i := 0; i < 5; i++ {
		res, err := scripts.GCRA.Run(ctx, client, keys, scripts.GCRAArgs{Limit: 3, Period: 1_000_000, Burst: 3, Cost: 1, Now: &now})
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry_after=%dµs reset_after=%dµs\n", res.Allowed, res.Remaining, res.RetryAfter, res.ResetAfter)
		now += res.RetryAfter
	}
	// Output:
	// allowed=true remaining=2 retry_after=0µs reset_after=333334µs
	// allowed=true remaining=1 retry_after=0µs reset_after=666667µs
	// allowed=true remaining=0 retry_after=0µs reset_after=1000000µs
	// allowed=false remaining=0 retry_after=333334µs reset_after=1000000µs
	// allowed=true remaining=0 retry_after=0µs reset_after=1000000µs
}

// Two limits on one identity, checked and charged together: 2 per second
// and 3 per 10 seconds, each on its own key (the state the gcra script
// keeps for that limit alone). limiting names the limit that decided.
func ExampleGCRAMultiScript_Run() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	keys := scripts.GCRAMultiKeys{States: []string{"rl:{user:42}:gcra-2-1s", "rl:{user:42}:gcra-3-10s"}}
	now := int64(1_700_000_000_000_000)
	for _, wait := range []int64{0, 0, 0, 500_000, 500_000} {
		now += wait
		res, err := scripts.GCRAMulti.Run(ctx, client, keys, scripts.GCRAMultiArgs{Cost: 1, Now: &now, Limits: []int64{2, 1_000_000, 2, 3, 10_000_000, 3}})
		if err != nil {
			panic(err)
		}
		fmt.Printf("+%dms allowed=%v remaining=%d retry_after=%dµs limiting=%d\n", wait/1000, res.Allowed, res.Remaining, res.RetryAfter, res.Limiting)
	}
	// Output:
	// +0ms allowed=true remaining=1 retry_after=0µs limiting=1
	// +0ms allowed=true remaining=0 retry_after=0µs limiting=1
	// +0ms allowed=false remaining=0 retry_after=500000µs limiting=1
	// +500ms allowed=true remaining=0 retry_after=0µs limiting=1
	// +500ms allowed=false remaining=0 retry_after=2333334µs limiting=2
}
