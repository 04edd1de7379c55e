package goredis_test

import (
	"strings"
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
