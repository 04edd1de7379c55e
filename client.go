package sluice

import (
	"errors"
	"fmt"
	"net"
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
//     read that answers them; a caller alone is never delayed.
//
// PipelineMultiplex, AlwaysPipelining, DisableAutoPipelining and the
// connection buffer sizes keep rueidis' defaults. DisableAutoPipelining
// stops pipelining under concurrency, and its pooled connections are
// replaced after a timeout with a handshake that waits for a stalled
// Redis, past the caller's deadline. docs/operations.md ("Deployment")
// has what each choice measured, and the command that measured it.
func ClientOption(addrs ...string) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress:   addrs,
		DisableCache:  true,
		MaxFlushDelay: 20 * time.Microsecond,
	}
}

// ErrUnreachable means the one Redis OpenClient was given did not answer
// the dial. OpenClient returns it (wrapping the dial error) with a client
// that works: check it with errors.Is, and keep the client.
var ErrUnreachable = errors.New("sluice: Redis unreachable at start-up")

// OpenClient is rueidis.NewClient(opt) for an application that must start
// while its Redis is down. When a single Redis (one address, no Sentinel)
// does not answer the dial, it still returns a client, which dials again
// on each later call, with an error wrapping ErrUnreachable: a Limiter on
// it decides by its failure policy until Redis answers, and by Redis from
// then on. Such a Redis is taken for a standalone one (a node that cannot
// be reached cannot say it belongs to a cluster). Several addresses are
// cluster seeds, of which one must answer: otherwise, as for any error but
// a failed dial (a wrong password, a TLS mismatch), the error does not
// wrap ErrUnreachable and there is no client.
func OpenClient(opt rueidis.ClientOption) (rueidis.Client, error) {
	client, err := rueidis.NewClient(opt)
	if err == nil || !isDialError(err) || len(opt.InitAddress) != 1 || opt.Sentinel.MasterSet != "" {
		return client, err
	}
	dialErr := err
	single := opt
	single.ForceSingleClient = true
	client, err = rueidis.NewClient(single)
	switch {
	case client == nil:
		return nil, dialErr
	case err == nil: // it answers now: a client that can find a cluster
		client.Close()
		return rueidis.NewClient(opt)
	case !isDialError(err):
		client.Close()
		return nil, err
	}
	return client, fmt.Errorf("%w: %w", ErrUnreachable, err)
}

// isDialError reports a failure to open a connection to Redis (refused,
// timed out, no route, unknown host), as opposed to a connection that
// opened and then failed.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
