package sluice

import (
	"context"
	"fmt"
	"sync"
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
	// ({transition}); attributes sluice.node (the Redis primary's
	// host:port; "redis" for a standalone or Sentinel client, "cluster"
	// before a cluster's slot map is known) and sluice.breaker.state:
	// "open", "half-open" or "closed", the state entered.
	MetricBreakerTransitions = "sluice.breaker.transitions"
	// MetricDenialCacheHits counts denials answered by the denial cache
	// (WithDenialCache) without asking Redis ({decision}); attributes
	// sluice.limit, sluice.algorithm. They are counted in
	// MetricDecisions too.
	MetricDenialCacheHits = "sluice.denial_cache.hits"
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
	cacheHits metric.Int64Counter

	mu   sync.RWMutex
	sets map[setKey]*limitSets
}

// limitSets are one limit's attribute sets, built once: decisions record
// with a precomputed option, not a slice of attributes per call.
type limitSets struct {
	decision [2][2][]metric.AddOption // [allowed][degraded]
	duration [2][]metric.RecordOption // [degraded]
	failure  map[string][]metric.AddOption
	limit    []metric.AddOption // the limit's name and algorithm only
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

type setKey struct{ alg, name string }

func (m *metrics) setsOf(lim Limit) *limitSets {
	k := setKey{string(lim.Algorithm), lim.Name}
	m.mu.RLock()
	s := m.sets[k]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	base := []attribute.KeyValue{
		attribute.String("sluice.limit", lim.Name),
		attribute.String("sluice.algorithm", string(lim.Algorithm)),
	}
	with := func(extra ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), extra...)...))
	}
	add := func(extra ...attribute.KeyValue) []metric.AddOption { return []metric.AddOption{with(extra...)} }
	s = &limitSets{failure: map[string][]metric.AddOption{}, limit: add()}
	for _, allowed := range []bool{false, true} {
		for _, degraded := range []bool{false, true} {
			s.decision[b2i(allowed)][b2i(degraded)] = add(attribute.Bool("sluice.allowed", allowed), attribute.Bool("sluice.degraded", degraded))
		}
	}
	for _, degraded := range []bool{false, true} {
		s.duration[b2i(degraded)] = []metric.RecordOption{with(attribute.Bool("sluice.degraded", degraded))}
	}
	for _, kind := range []string{"timeout", "breaker_open", "error"} {
		s.failure[kind] = add(attribute.String("sluice.failure", kind))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old := m.sets[k]; old != nil {
		return old
	}
	m.sets[k] = s
	return s
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		return nil, nil
	}
	meter := mp.Meter("github.com/sluice-go/sluice")
	m := &metrics{sets: map[setKey]*limitSets{}}
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
	if m.cacheHits, err = meter.Int64Counter(MetricDenialCacheHits,
		metric.WithDescription("Denials answered from the local denial cache, without a round trip."), metric.WithUnit("{decision}")); err != nil {
		return nil, fmt.Errorf("sluice: metric %s: %w", MetricDenialCacheHits, err)
	}
	return m, nil
}

// decision records one decision that started at start.
func (m *metrics) decision(ctx context.Context, res Result, start time.Time) {
	if m == nil {
		return
	}
	s := m.setsOf(res.Limit)
	m.duration.Record(ctx, time.Since(start).Seconds(), s.duration[b2i(res.Degraded)]...)
	m.decisions.Add(ctx, 1, s.decision[b2i(res.Allowed)][b2i(res.Degraded)]...)
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
	m.failures.Add(ctx, 1, m.setsOf(lim).failure[kind]...)
}

// cacheHit records a denial answered by the denial cache.
func (m *metrics) cacheHit(ctx context.Context, lim Limit) {
	if m == nil {
		return
	}
	m.cacheHits.Add(ctx, 1, m.setsOf(lim).limit...)
}

// transition records a breaker state change.
func (m *metrics) transition(node string, to breakerState) {
	if m == nil {
		return
	}
	m.breaker.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String("sluice.node", node), attribute.String("sluice.breaker.state", to.String())))
}
