package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice"
)

// The per-second summary comes from the Limiter's own OpenTelemetry
// metrics (sluice.WithMeterProvider): a manual reader collects the
// sluice.decisions counter once a second, and the difference from the last
// collection is printed. A real deployment would hand the same provider a
// periodic reader and an exporter instead.

// counts is a snapshot or a difference of the decision counter.
type counts struct {
	allowed, denied, degraded int64
}

func (c counts) sub(o counts) counts {
	return counts{c.allowed - o.allowed, c.denied - o.denied, c.degraded - o.degraded}
}

func (c counts) zero() bool { return c == counts{} }

// stats reads the decision counter of one MeterProvider.
type stats struct {
	reader   *sdkmetric.ManualReader
	provider *sdkmetric.MeterProvider
	last     counts
}

func newStats() *stats {
	r := sdkmetric.NewManualReader()
	return &stats{reader: r, provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))}
}

// total collects the counter's cumulative values.
func (s *stats) total(ctx context.Context) (counts, error) {
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(ctx, &rm); err != nil {
		return counts{}, err
	}
	var c counts
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != sluice.MetricDecisions {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				if isTrue(dp.Attributes, "sluice.allowed") {
					c.allowed += dp.Value
				} else {
					c.denied += dp.Value
				}
				if isTrue(dp.Attributes, "sluice.degraded") {
					c.degraded += dp.Value
				}
			}
		}
	}
	return c, nil
}

func isTrue(set attribute.Set, key attribute.Key) bool {
	v, ok := set.Value(key)
	return ok && v.AsBool()
}

// report prints what each second counted until ctx ends, then what the
// last partial second counted.
func (s *stats) report(ctx context.Context, w io.Writer, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.flush(context.Background(), w, time.Now())
			return
		case now := <-t.C:
			s.flush(ctx, w, now)
		}
	}
}

// flush prints the decisions counted since the last flush, if any: an
// idle server prints nothing.
func (s *stats) flush(ctx context.Context, w io.Writer, now time.Time) {
	c, err := s.total(ctx)
	if err != nil {
		return
	}
	d := c.sub(s.last)
	s.last = c
	if d.zero() {
		return
	}
	fmt.Fprintf(w, "%s allowed=%d denied=%d degraded=%d\n", now.Format("15:04:05"), d.allowed, d.denied, d.degraded)
}
