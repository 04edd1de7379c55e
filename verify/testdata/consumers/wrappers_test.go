package consumers_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/verify"
	"github.com/sluice-go/sluice/verify/testdata/consumers"
)

// TestWrappers calls every generated wrapper as an application would, on
// miniredis and, when SLUICE_REDIS_ADDR names one, on a real Redis.
func TestWrappers(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		useWrappers(t, verify.RunT(t).Client)
	})
	t.Run("redis", func(t *testing.T) {
		if os.Getenv(verify.RedisAddrEnv) == "" {
			t.Skipf("%s is not set", verify.RedisAddrEnv)
		}
		r := verify.RedisT(t)
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.Addr()}, SelectDB: r.DB(), DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		useWrappers(t, c)
	})
}

func useWrappers(t *testing.T, c rueidis.Client) {
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// A lock taken and released in one round trip, with the fencing token.
	lock := consumers.LockAcquireKeys{Lock: "{res:1}:lock", Fence: "{res:1}:fence"}
	must(luart.Load(ctx, c, &consumers.LockAcquire.Script, &consumers.LockRelease.Script))
	got, err := consumers.LockAcquire.Run(ctx, c, lock, consumers.LockAcquireArgs{Owner: "w1", TTLMs: 30000})
	must(err)
	if !got.Acquired || got.Token != 1 {
		t.Fatalf("lock_acquire: %+v", got)
	}
	res := luart.Exec(ctx, c,
		consumers.LockAcquire.Call(lock, consumers.LockAcquireArgs{Owner: "w2", TTLMs: 30000}),
		consumers.LockRelease.Call(consumers.LockReleaseKeys{Lock: lock.Lock}, consumers.LockReleaseArgs{Owner: "w1", Token: got.Token}),
	)
	denied, err := consumers.LockAcquire.Decode(res[0])
	must(err)
	released, err := consumers.LockRelease.Decode(res[1])
	must(err)
	if denied.Acquired || !released.Released {
		t.Fatalf("w2 while w1 holds the lock: %+v; w1 releases: %+v", denied, released)
	}

	// An idempotency key claimed, then completed.
	entry := consumers.IdempotencyKeys{Entry: "{idem:7}:entry"}
	claim, err := consumers.Idempotency.Run(ctx, c, entry, consumers.IdempotencyArgs{Fingerprint: "c0ffee", TTLMs: 60000})
	must(err)
	outcome := "204"
	done, err := consumers.Idempotency.Run(ctx, c, entry, consumers.IdempotencyArgs{Fingerprint: "c0ffee", TTLMs: 60000, Response: &outcome})
	must(err)
	if claim.State != "new" || done.State != "done" || done.Response != "204" {
		t.Fatalf("idempotency: claim %+v, done %+v", claim, done)
	}

	// A leaderboard.
	board := consumers.LeaderboardKeys{Board: "{game:1}:board"}
	for _, p := range []struct {
		name  string
		score int64
	}{{"ada", 10}, {"bob", 30}, {"cy", 20}} {
		_, err := consumers.Leaderboard.Run(ctx, c, board, consumers.LeaderboardArgs{Player: p.name, Score: p.score, Size: 10, TTLMs: 60000})
		must(err)
	}
	cy, err := consumers.Leaderboard.Run(ctx, c, board, consumers.LeaderboardArgs{Player: "cy", Score: 5, Size: 10, TTLMs: 60000})
	must(err)
	if cy.Rank != 1 || cy.Best != 20 || cy.Percentile != 66 {
		t.Fatalf("leaderboard: %+v", cy)
	}

	// A stream consumer.
	stream := consumers.StreamClaimKeys{Stream: "{jobs:1}:stream", Dead: "{jobs:1}:dead"}
	must(c.Do(ctx, c.B().Xadd().Key(stream.Stream).Id("1-1").FieldValue().FieldValue("job", "thumb").Build()).Error())
	must(c.Do(ctx, c.B().XgroupCreate().Key(stream.Stream).Group("g").Id("0").Build()).Error())
	job, err := consumers.StreamClaim.Run(ctx, c, stream, consumers.StreamClaimArgs{Group: "g", Consumer: "w1", MinIdleMs: 60000, MaxDeliveries: 3})
	must(err)
	if job.ID != "1-1" || job.Job != "thumb" || job.Dead != 0 {
		t.Fatalf("stream_claim: %+v", job)
	}
	_, err = consumers.StreamClaim.Run(ctx, c, stream, consumers.StreamClaimArgs{Group: "nope", Consumer: "w1", MaxDeliveries: 3})
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		t.Fatalf("stream_claim with an unknown group: %v, want the script's error", err)
	}

	// A JSON document, a member removed with the list argument.
	doc := consumers.DocUpdateKeys{Doc: "{user:1}:doc"}
	_, err = consumers.DocUpdate.Run(ctx, c, doc, consumers.DocUpdateArgs{Patch: `{"a":1,"b":2}`, TTLMs: 60000})
	must(err)
	v2, err := consumers.DocUpdate.Run(ctx, c, doc, consumers.DocUpdateArgs{Patch: `{}`, Version: 1, TTLMs: 60000, Remove: []string{"a"}})
	must(err)
	if !v2.Ok || v2.Version != 2 || !verify.MustParseReply("json:`{\"_v\":2,\"b\":2}`").Match(verify.Bulk(v2.Doc)) {
		t.Fatalf("doc_update: %+v", v2)
	}

	// A feature flag.
	flags := consumers.FeatureFlagKeys{Flags: "{tenant:1}:flags"}
	on := true
	set, err := consumers.FeatureFlag.Run(ctx, c, flags, consumers.FeatureFlagArgs{Feature: 3, TTLMs: 60000, On: &on})
	must(err)
	read, err := consumers.FeatureFlag.Run(ctx, c, flags, consumers.FeatureFlagArgs{Feature: 3, TTLMs: 60000})
	must(err)
	if !set.On || !set.Changed || !read.On || read.Changed || read.Count != 1 {
		t.Fatalf("feature_flag: set %+v, read %+v", set, read)
	}
}
