package sluice

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/metric/noop"

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
