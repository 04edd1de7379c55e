package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/transporttest"
	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/transport/goredis"
)

// TestTransport runs the tests every transport passes
// (internal/transporttest), which the root package runs on rueidis, on a
// go-redis client: a *redis.Client, and a *redis.ClusterClient.
func TestTransport(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, addrs []string, cluster bool) luart.Transport {
		var c redis.UniversalClient
		if cluster {
			c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		} else {
			c = redis.NewClient(&redis.Options{Addr: addrs[0]})
		}
		t.Cleanup(func() { _ = c.Close() })
		tr, err := goredis.Transport(c)
		if err != nil {
			t.Fatalf("goredis.Transport: %v", err)
		}
		return tr
	})
}
