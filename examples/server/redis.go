package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
)

// store is the Redis the limiter talks to.
type store struct {
	client rueidis.Client
	desc   string // for the banner
	close  func()
}

// openStore connects to the Redis that -redis names, or starts an embedded
// miniredis when it is empty.
func openStore(redisFlag string) (*store, error) {
	if redisFlag == "" {
		return openMiniredis()
	}
	opt, err := clientOption(redisFlag)
	if err != nil {
		return nil, err
	}
	// Client-side caching buys a rate limiter nothing: every decision is a
	// script that writes.
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to Redis at %s: %w", strings.Join(opt.InitAddress, ","), err)
	}
	kind := "Redis"
	if client.Mode() == rueidis.ClientModeCluster {
		kind = fmt.Sprintf("Redis Cluster (%d nodes)", len(client.Nodes()))
	}
	return &store{
		client: client,
		desc:   fmt.Sprintf("%s at %s", kind, strings.Join(opt.InitAddress, ",")),
		close:  client.Close,
	}, nil
}

// clientOption reads -redis: a redis://, rediss:// or unix:// URL (with
// more cluster seeds as ?addr=host:port), or a comma-separated list of
// host:port.
func clientOption(s string) (rueidis.ClientOption, error) {
	if strings.Contains(s, "://") {
		opt, err := rueidis.ParseURL(s)
		if err != nil {
			return opt, fmt.Errorf("-redis %q: %w", s, err)
		}
		return opt, nil
	}
	var opt rueidis.ClientOption
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		host, port, err := net.SplitHostPort(a)
		if err != nil || port == "" {
			return opt, fmt.Errorf("-redis %q: %q is not host:port (or use a redis:// URL)", s, a)
		}
		if host == "" {
			a = net.JoinHostPort("127.0.0.1", port)
		}
		opt.InitAddress = append(opt.InitAddress, a)
	}
	return opt, nil
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
