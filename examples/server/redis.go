package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redisurl"
	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
)

// store is the Redis the limiter talks to.
type store struct {
	client rueidis.Client
	desc   string // for the banner
	close  func()
	// unreachable is the dial error when a single-address Redis did not
	// answer at start-up (nil otherwise). The client is usable all the
	// same: it dials again on later calls.
	unreachable error
}

// openStore connects to the Redis that -redis names, or starts an embedded
// miniredis when it is empty.
//
// A single address that cannot be dialled still gives a store, with
// unreachable set: the client dials again on each later call, so the
// Limiter's failure policy decides until that Redis answers, and Redis
// decides again from then on. Such a Redis is taken for a standalone one
// (the demo cannot ask an unreachable node whether it belongs to a
// cluster). Several addresses are cluster seeds, of which one must answer
// for the client to learn the cluster's nodes: when none does, openStore
// fails.
func openStore(redisFlag string) (*store, error) {
	if redisFlag == "" {
		return openMiniredis()
	}
	opt, err := redisurl.Parse(redisFlag)
	if err != nil {
		return nil, err
	}
	// Client-side caching buys a rate limiter nothing: every decision is a
	// script that writes.
	opt.DisableCache = true
	addrs := strings.Join(opt.InitAddress, ",")
	// A single Redis that is down at start-up still gives a client
	// (sluice.OpenClient): the failure policy decides until it answers.
	client, err := sluice.OpenClient(opt)
	var unreachable error
	if errors.Is(err, sluice.ErrUnreachable) {
		unreachable, err = err, nil
	}
	if err != nil {
		if len(opt.InitAddress) > 1 && redisurl.IsDialError(err) {
			return nil, fmt.Errorf("cannot connect to Redis at %s: none of these cluster seeds answers, and one must at start-up for the client to learn the cluster's nodes: %w", addrs, err)
		}
		return nil, fmt.Errorf("cannot connect to Redis at %s: %w", addrs, err)
	}
	kind := "Redis"
	if client.Mode() == rueidis.ClientModeCluster {
		kind = fmt.Sprintf("Redis Cluster (%d nodes)", len(client.Nodes()))
	}
	return &store{
		client:      client,
		desc:        fmt.Sprintf("%s at %s", kind, addrs),
		close:       client.Close,
		unreachable: unreachable,
	}, nil
}

// openMiniredis starts an in-process miniredis. Its TIME is the wall clock
// (the scripts read it), and ClockTTL makes keys expire with the wall clock
// too, so an idle identity's state goes away as it would in Redis.
func openMiniredis() (*store, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("cannot start the embedded miniredis: %w", err)
	}
	m.ClockTTL(true)
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{m.Addr()},
		DisableCache:      true, // miniredis has no client-side caching
		ForceSingleClient: true, // nor CLUSTER commands
	})
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("cannot connect to the embedded miniredis: %w", err)
	}
	return &store{
		client: client,
		desc:   "embedded miniredis (in memory; -redis redis://HOST:PORT for a real Redis)",
		close:  func() { client.Close(); m.Close() },
	}, nil
}

// loadScripts sends SCRIPT LOAD for the built-in scripts to every node, so
// the first request does not pay for the NOSCRIPT round trip, and checks
// that each server computes the SHA1 the generated code carries.
func loadScripts(client rueidis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := []*luart.Script{
		&scripts.FixedWindow.Script, &scripts.SlidingLog.Script, &scripts.SlidingWindow.Script,
		&scripts.TokenBucket.Script, &scripts.GCRA.Script,
	}
	for addr, node := range client.Nodes() {
		if err := luart.Load(ctx, node, all...); err != nil {
			return fmt.Errorf("loading the scripts on %s: %w", addr, err)
		}
	}
	return nil
}
