package sluice_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/internal/transporttest"
	"github.com/sluice-go/sluice/runtime/luart"
)

// TestRueidisTransport runs the tests every transport passes
// (internal/transporttest) on luart.Rueidis; module transport/goredis runs
// the same on go-redis.
func TestRueidisTransport(t *testing.T) {
	t.Parallel() // its own servers; no timing it asserts depends on a quiet machine
	transporttest.Run(t, func(t *testing.T, addrs []string, cluster bool) luart.Transport {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatalf("rueidis.NewClient: %v", err)
		}
		t.Cleanup(c.Close)
		return luart.Rueidis(c)
	})
}

// TestRueidisTransportSentinel runs the Limiter tests on a rueidis client
// that Sentinel points at the primary (transport/goredis does the same on
// a go-redis failover client).
func TestRueidisTransportSentinel(t *testing.T) {
	t.Parallel()
	st := redisserver.StartSentinel(t)
	env := &transporttest.Env{Addrs: st.Addrs(), Nodes: []*redisserver.Server{st.Primary},
		Make: func(t *testing.T, addrs []string, _ bool) luart.Transport {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, Sentinel: rueidis.SentinelOption{MasterSet: st.MasterSet}, DisableCache: true})
			if err != nil {
				t.Fatalf("rueidis.NewClient: %v", err)
			}
			t.Cleanup(c.Close)
			return luart.Rueidis(c)
		}}
	transporttest.Limiter(t, env)
}
