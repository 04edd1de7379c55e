package sluice

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/sluice-go/sluice/internal/allocs"
	"github.com/sluice-go/sluice/internal/redisserver"
)

// BenchmarkAllow measures one Allow on a private redis-server, with the
// defaults (no metrics) and with metrics on a no-op-like recorder.
func BenchmarkAllow(b *testing.B) {
	s := redisserver.Start(b)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	lim := Must(GCRA(1_000_000_000, time.Second, 1_000_000_000))
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		opts []Option
	}{
		{"defaults", nil},
		{"metrics", []Option{WithMeterProvider(noop.NewMeterProvider())}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, err := New(c, bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if r, err := l.Allow(ctx, "bench-user", lim); err != nil || !r.Allowed {
					b.Fatalf("%+v %v", r, err)
				}
			}
		})
	}
}

// TestAllowAllocations pins what one Allow that Redis decides allocates:
// at most 3 with the defaults (the key, the call's argument slice and one
// inside rueidis) and at most 2 more with metrics on.
func TestAllowAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; the count is pinned in the tests without -race")
	}
	s := redisserver.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lim := Must(GCRA(1_000_000_000, time.Second, 1_000_000_000))
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []Option
		max  float64
	}{
		{"defaults", nil, 3},
		{"metrics", []Option{WithMeterProvider(noop.NewMeterProvider())}, 5},
	} {
		l, err := New(c, append(tc.opts, WithTimeout(time.Minute))...)
		if err != nil {
			t.Fatal(err)
		}
		var failed error
		got := allocs.PerRun(5, 200, func() {
			if r, err := l.Allow(ctx, "alloc-user", lim); (err != nil || !r.Allowed) && failed == nil {
				failed = fmt.Errorf("%+v %v", r, err)
			}
		})
		if failed != nil {
			t.Fatalf("%s: %v", tc.name, failed)
		}
		if got > tc.max {
			t.Errorf("%s: Allow allocates %.1f times, want at most %.0f", tc.name, got, tc.max)
		}
	}
}
