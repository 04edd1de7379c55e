package sluice

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names and attributes recorded when WithMeterProvider is given.
// Attributes carry the limit's name and algorithm, never the identity, so
// their cardinality is the number of limits configured.
const (
	// MetricDecisions counts decisions ({decision}); attributes
	// sluice.limit, sluice.algorithm, sluice.allowed, sluice.degraded.
	MetricDecisions = "sluice.decisions"
	// MetricDuration is the time a decision took, Redis round trip
	// included (s); attributes sluice.limit, sluice.algorithm, sluice.degraded.
	MetricDuration = "sluice.decision.duration"
	// MetricRedisFailures counts decisions Redis could not make
	// ({failure}); attributes sluice.limit, sluice.algorithm, and
	// sluice.failure: "timeout", "breaker_open" or "error".
	MetricRedisFailures = "sluice.redis.failures"
	// MetricBreakerTransitions counts circuit breaker state changes
	// ({transition}); attribute sluice.breaker.state: "open", "half-open"
	// or "closed", the state entered.
	MetricBreakerTransitions = "sluice.breaker.transitions"
)

// WithMeterProvider records the metrics above with mp (an OpenTelemetry
// MeterProvider, such as the SDK's). Without it nothing is recorded and
// decisions pay nothing for metrics.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return fmt.Errorf("%w: WithMeterProvider(nil)", ErrInvalidOption)
		}
		c.meterProvider = mp
		return nil
	}
}

// metrics holds the instruments; a nil *metrics records nothing.
type metrics struct {
	decisions metric.Int64Counter
	duration  metric.Float64Histogram
	failures  metric.Int64Counter
	breaker   metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		return nil, nil
	}
	meter := mp.Meter("github.com/sluice-go/sluice")
	m := &metrics{}
	var err error
	if m.decisions, err = meter.Int64Counter(MetricDecisions,
		metric.WithDescription("Rate-limit decisions."), metric.WithUnit("{decision}")); err != nil {
		return nil, fmt.Errorf("sluice: metric %s: %w", MetricDecisions, err)
	}
	if m.duration, err = meter.Float64Histogram(MetricDuration,
		metric.WithDescription("Time taken by one decision, Redis round trip included."), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)); err != nil {
		return nil, fmt.Errorf("sluice: metric %s: %w", MetricDuration, err)
	}
	if m.failures, err = meter.Int64Counter(MetricRedisFailures,
		metric.WithDescription("Decisions that Redis could not make; the failure policy made them."), metric.WithUnit("{failure}")); err != nil {
		return nil, fmt.Errorf("sluice: metric %s: %w", MetricRedisFailures, err)
	}
	if m.breaker, err = meter.Int64Counter(MetricBreakerTransitions,
		metric.WithDescription("Circuit breaker state changes."), metric.WithUnit("{transition}")); err != nil {
		return nil, fmt.Errorf("sluice: metric %s: %w", MetricBreakerTransitions, err)
	}
	return m, nil
}

func limitAttrs(lim Limit) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("sluice.limit", lim.Name),
		attribute.String("sluice.algorithm", string(lim.Algorithm)),
	}
}

// decision records one decision that started at start.
func (m *metrics) decision(ctx context.Context, res Result, start time.Time) {
	if m == nil {
		return
	}
	attrs := limitAttrs(res.Limit)
	m.duration.Record(ctx, time.Since(start).Seconds(),
		metric.WithAttributes(append(attrs, attribute.Bool("sluice.degraded", res.Degraded))...))
	m.decisions.Add(ctx, 1, metric.WithAttributes(append(attrs,
		attribute.Bool("sluice.allowed", res.Allowed), attribute.Bool("sluice.degraded", res.Degraded))...))
}

// failure records a decision Redis could not make.
func (m *metrics) failure(ctx context.Context, lim Limit, err error) {
	if m == nil {
		return
	}
	kind := "error"
	switch {
	case err == ErrBreakerOpen:
		kind = "breaker_open"
	case isTimeout(err):
		kind = "timeout"
	}
	m.failures.Add(ctx, 1, metric.WithAttributes(append(limitAttrs(lim), attribute.String("sluice.failure", kind))...))
}

// transition records a breaker state change.
func (m *metrics) transition(to breakerState) {
	if m == nil {
		return
	}
	m.breaker.Add(context.Background(), 1, metric.WithAttributes(attribute.String("sluice.breaker.state", to.String())))
}
