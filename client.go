package sluice

import (
	"time"

	"github.com/redis/rueidis"
)

// ClientOption returns the rueidis options sluice recommends for the
// client a Limiter runs on, for the Redis servers (or Sentinels, or
// cluster nodes) at addrs. Set anything else the deployment needs (TLS,
// credentials, Sentinel, timeouts) on the result before
// rueidis.NewClient:
//
//   - DisableCache: scripts are never served from rueidis' client-side
//     cache, and keeping it on slows lone calls.
//   - MaxFlushDelay 20µs: under concurrency each connection's writer waits
//     up to 20µs after a write, so more calls share each write and the
//     read that answers them. With 128 callers that cut the client's CPU
//     per decision by about a fifth in the side-by-side benchmark
//     (docs/benchmarks.md); a caller alone is never delayed.
//
// PipelineMultiplex, AlwaysPipelining, DisableAutoPipelining and the
// connection buffer sizes keep rueidis' defaults, which measured best or
// equal (docs/benchmarks.md, "rueidis options"). DisableAutoPipelining
// speeds up a caller alone but stops pipelining under concurrency, and its
// pooled connections are replaced after a timeout with a handshake that
// waits for a stalled Redis, past the caller's deadline.
func ClientOption(addrs ...string) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress:   addrs,
		DisableCache:  true,
		MaxFlushDelay: 20 * time.Microsecond,
	}
}
