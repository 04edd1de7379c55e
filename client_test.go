package sluice

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
)

// TestOpenClientRedisDown: with its one Redis down, OpenClient still gives
// a client and says the Redis is unreachable; a Limiter on it decides by
// the failure policy (FailLocal: degraded), and by Redis once Redis is
// back. Cluster seeds of which none answers are an error, and no client.
func TestOpenClientRedisDown(t *testing.T) {
	ctx := context.Background()
	s := redisserver.Start(t)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	client, err := OpenClient(ClientOption(s.Addr))
	if !errors.Is(err, ErrUnreachable) || client == nil {
		t.Fatalf("OpenClient with Redis down: client %v, err %v; want a client and ErrUnreachable", client, err)
	}
	defer client.Close()
	l, err := New(client, quiet...)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lim := Must(GCRA(100, time.Hour, 100))
	r, err := l.Allow(ctx, "u", lim)
	if err != nil || !r.Allowed || !r.Degraded {
		t.Fatalf("Allow with Redis down: %+v, %v; want a degraded admission", r, err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, ok := waitFor(time.Minute, func() bool {
		r, err := l.Allow(ctx, "u", lim)
		return err == nil && !r.Degraded
	}); !ok {
		t.Fatal("Redis came back, but a minute later the Limiter still did not decide by it")
	}
	if n, err := s.Command("EXISTS", l.Key("u", lim)); err != nil || n != "1" {
		t.Fatalf("EXISTS %s: %q, %v; want the state in Redis", l.Key("u", lim), n, err)
	}

	// Cluster seeds: one must answer.
	if c, err := OpenClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:1", "127.0.0.1:2"}, DisableCache: true}); err == nil || errors.Is(err, ErrUnreachable) || c != nil {
		t.Fatalf("two unreachable seeds: client %v, err %v; want an error and no client", c, err)
	}
}
