package sluice

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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
	// sluice.failure: "timeout" (the node was silent for the whole
	// silence timeout, or WithTimeout's bound passed), "breaker_open" or
	// "error" (a connection error, or an error reply other than a
	// script's refusal of its arguments or WRONGTYPE).
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
	// MetricBreakerState is the state of each Redis node's circuit
	// breaker (observable gauge, {state}): 0 closed, 1 half-open, 2 open;
	// attribute sluice.node as for MetricBreakerTransitions. A node is
	// reported from its breaker's first state change on; a node missing
	// has never left the closed state.
	MetricBreakerState = "sluice.breaker.state"
	// MetricLateCharges counts charges Redis made for calls whose caller
	// had its answer already ({charge}): the caller gave up, or the
	// failure policy answered it while the call was still out (a silent
	// node, or WithTimeout's bound). The charge stays in Redis, so the
	// quota it spent is never admitted twice; this is the measure of
	// quota spent without an admission. Attributes sluice.limit,
	// sluice.algorithm.
	MetricLateCharges = "sluice.late_charges"
	// MetricRetries counts calls sent again because a cluster answered
	// TRYAGAIN ({retry}): the keys of one identity were split between two
	// primaries by a slot migration, so the script did not run. The call
	// is sent again, with a pause growing from 1ms to 50ms, until it runs
	// or its caller gives up. Attributes sluice.limit, sluice.algorithm.
	MetricRetries = "sluice.redis.retries"
	// MetricScriptReloads counts NOSCRIPT replies, each answered by
	// sending the script with EVAL ({reload}): after a restart, a failover
	// or SCRIPT FLUSH, once per script and connection that meets it.
	MetricScriptReloads = "sluice.script.reloads"
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
	duration  metric.Float64Histogram
	failures  metric.Int64Counter
	breaker   metric.Int64Counter
	cacheHits metric.Int64Counter
	reloads   metric.Int64Counter
	late      metric.Int64Counter
	retries   metric.Int64Counter

	sets   sync.Map // setKey → *limitSets
	states sync.Map // node address → *atomic.Int32, the MetricBreakerState value
}

// limitSets are one limit's attribute sets, built once: decisions record
// with a precomputed option, not a slice of attributes per call, and are
// counted with an atomic add, read when the metrics are collected.
type limitSets struct {
	decided  [2][2]atomic.Int64         // [allowed][degraded]: MetricDecisions
	decision [2][2]metric.ObserveOption // [allowed][degraded]
	duration [2][]metric.RecordOption   // [degraded]
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
	if s, ok := m.sets.Load(k); ok {
		return s.(*limitSets)
	}
	base := []attribute.KeyValue{
		attribute.String("sluice.limit", lim.Name),
		attribute.String("sluice.algorithm", string(lim.Algorithm)),
	}
	with := func(extra ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), extra...)...))
	}
	add := func(extra ...attribute.KeyValue) []metric.AddOption { return []metric.AddOption{with(extra...)} }
	s := &limitSets{failure: map[string][]metric.AddOption{}, limit: add()}
	for _, allowed := range []bool{false, true} {
		for _, degraded := range []bool{false, true} {
			s.decision[b2i(allowed)][b2i(degraded)] = with(attribute.Bool("sluice.allowed", allowed), attribute.Bool("sluice.degraded", degraded))
		}
	}
	for _, degraded := range []bool{false, true} {
		s.duration[b2i(degraded)] = []metric.RecordOption{with(attribute.Bool("sluice.degraded", degraded))}
	}
	for _, kind := range []string{"timeout", "breaker_open", "error"} {
		s.failure[kind] = add(attribute.String("sluice.failure", kind))
	}
	old, _ := m.sets.LoadOrStore(k, s)
	return old.(*limitSets)
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		return nil, nil
	}
	meter := mp.Meter("github.com/sluice-go/sluice")
	m := &metrics{}
	var err error
	// A limit's decisions are reported from the first on, as a counter
	// added to is.
	if _, err = meter.Int64ObservableCounter(MetricDecisions,
		metric.WithDescription("Rate-limit decisions."), metric.WithUnit("{decision}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			m.sets.Range(func(_, v any) bool {
				s := v.(*limitSets)
				for a := range s.decided {
					for d := range s.decided[a] {
						if n := s.decided[a][d].Load(); n != 0 {
							o.Observe(n, s.decision[a][d])
						}
					}
				}
				return true
			})
			return nil
		})); err != nil {
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
	if m.reloads, err = meter.Int64Counter(MetricScriptReloads,
		metric.WithDescription("NOSCRIPT replies answered by sending the script with EVAL."), metric.WithUnit("{reload}")); err != nil {
		return nil, fmt.Errorf("sluice: metric %s: %w", MetricScriptReloads, err)
	}
	if m.late, err = meter.Int64Counter(MetricLateCharges,
		metric.WithDescription("Charges Redis made for calls whose caller had its answer already."), metric.WithUnit("{charge}")); err != nil {
		return nil, fmt.Errorf("sluice: metric %s: %w", MetricLateCharges, err)
	}
	if m.retries, err = meter.Int64Counter(MetricRetries,
		metric.WithDescription("Calls sent again after a TRYAGAIN reply (a slot migration)."), metric.WithUnit("{retry}")); err != nil {
		return nil, fmt.Errorf("sluice: metric %s: %w", MetricRetries, err)
	}
	if _, err = meter.Int64ObservableGauge(MetricBreakerState,
		metric.WithDescription("Circuit breaker state per Redis node: 0 closed, 1 half-open, 2 open."), metric.WithUnit("{state}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			m.states.Range(func(node, v any) bool {
				o.Observe(int64(v.(*atomic.Int32).Load()), metric.WithAttributes(attribute.String("sluice.node", node.(string))))
				return true
			})
			return nil
		})); err != nil {
		return nil, fmt.Errorf("sluice: metric %s: %w", MetricBreakerState, err)
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
	s.decided[b2i(res.Allowed)][b2i(res.Degraded)].Add(1)
}

// failure records a decision Redis could not make.
func (m *metrics) failure(ctx context.Context, lim Limit, err error) {
	if m == nil {
		return
	}
	kind := "error"
	switch err {
	case errBreakerOpen:
		kind = "breaker_open"
	case errSilent, errTimeout:
		kind = "timeout"
	}
	m.failures.Add(ctx, 1, m.setsOf(lim).failure[kind]...)
}

// lateCharge records a charge made for a caller who had its answer already.
func (m *metrics) lateCharge(lim Limit) {
	if m == nil {
		return
	}
	m.late.Add(context.Background(), 1, m.setsOf(lim).limit...)
}

// retry records a call sent again after TRYAGAIN.
func (m *metrics) retry(lim Limit) {
	if m == nil {
		return
	}
	m.retries.Add(context.Background(), 1, m.setsOf(lim).limit...)
}

// cacheHit records a denial answered by the denial cache.
func (m *metrics) cacheHit(ctx context.Context, lim Limit) {
	if m == nil {
		return
	}
	m.cacheHits.Add(ctx, 1, m.setsOf(lim).limit...)
}

// transition records a breaker state change to to; now is the breaker's
// state when the change is reported (changes are reported outside the
// breaker's lock, so two may be reported out of order: the gauge takes the
// state the breaker is in, not the last one reported).
func (m *metrics) transition(node string, to, now breakerState) {
	if m == nil {
		return
	}
	v, _ := m.states.LoadOrStore(node, new(atomic.Int32))
	switch now {
	case breakerClosed:
		v.(*atomic.Int32).Store(0)
	case breakerHalfOpen:
		v.(*atomic.Int32).Store(1)
	default:
		v.(*atomic.Int32).Store(2)
	}
	m.breaker.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String("sluice.node", node), attribute.String("sluice.breaker.state", to.String())))
}

// reload counts n NOSCRIPT replies of a pipelined batch (each sent again
// as EVAL).
func (m *metrics) reload(ctx context.Context, n int) {
	if m != nil {
		m.reloads.Add(ctx, int64(n))
	}
}
