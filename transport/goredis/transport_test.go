package goredis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/internal/transporttest"
	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/transport/goredis"
)

// TestTransport runs the tests every transport passes
// (internal/transporttest), which the root package runs on rueidis, on a
// go-redis client: a *redis.Client, and a *redis.ClusterClient, each with
// a pooled connection per command and WithAutoPipeline.
func TestTransport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []goredis.Option
	}{
		{"pooled", nil},
		{"autopipeline", []goredis.Option{goredis.WithAutoPipeline()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			transporttest.Run(t, func(t *testing.T, addrs []string, cluster bool) luart.Transport {
				var c redis.UniversalClient
				if cluster {
					c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
				} else {
					c = redis.NewClient(&redis.Options{Addr: addrs[0]})
				}
				t.Cleanup(func() { _ = c.Close() })
				tr, err := goredis.Transport(c, tc.opts...)
				if err != nil {
					t.Fatalf("goredis.Transport: %v", err)
				}
				return tr
			})
		})
	}
}

// Transport refuses what it cannot route, saying why.
func TestTransportRefuses(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	var nilClient *redis.Client
	for _, c := range []struct {
		client redis.UniversalClient
		want   string
	}{
		{nil, "nil client"},
		{nilClient, "nil client"},
		{ring, "*redis.Ring shards keys by its own hash"},
	} {
		tr, err := goredis.Transport(c.client)
		if tr != nil || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Transport(%T): %v, %v; want an error saying %q", c.client, tr, err, c.want)
		}
	}
}

// TestAllowAllocations pins what one Allow that Redis decides allocates on
// a go-redis client: 16 (3 on rueidis, TestAllowAllocations in the root
// package): the command's []any and each argument boxed into it, go-redis'
// Cmd, its reply and its check of the pooled connection, the script call.
func TestAllowAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; the count is pinned in the tests without -race")
	}
	s := redisserver.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rdb.Close()
	tr, err := goredis.Transport(rdb)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sluice.NewFromTransport(tr, sluice.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lim := sluice.Must(sluice.GCRA(1_000_000_000, time.Second, 1_000_000_000))
	ctx := context.Background()
	var failed error
	got := testing.AllocsPerRun(500, func() {
		if r, err := l.Allow(ctx, "alloc-user", lim); (err != nil || !r.Allowed || r.Degraded) && failed == nil {
			failed = fmt.Errorf("%+v %v", r, err)
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	if got > 16 {
		t.Errorf("Allow allocates %.1f times on go-redis, want at most 16", got)
	}
}

// TestTransportSentinel runs the Limiter tests on a failover client: a
// *redis.Client that Sentinel points at the primary.
func TestTransportSentinel(t *testing.T) {
	t.Parallel()
	st := redisserver.StartSentinel(t)
	env := &transporttest.Env{Addrs: st.Addrs(), Nodes: []*redisserver.Server{st.Primary},
		Make: func(t *testing.T, addrs []string, _ bool) luart.Transport {
			c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.MasterSet, SentinelAddrs: addrs})
			t.Cleanup(func() { _ = c.Close() })
			tr, err := goredis.Transport(c)
			if err != nil {
				t.Fatalf("goredis.Transport: %v", err)
			}
			return tr
		}}
	transporttest.Limiter(t, env)
}
