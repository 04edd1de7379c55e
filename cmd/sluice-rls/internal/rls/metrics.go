package rls

import (
	"context"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The metrics, named after envoyproxy/ratelimit's statistics as its
// Prometheus mapping exposes them. The per-rule counters carry the
// attributes domain and descriptor (the statistics' name after the
// domain: "key1_value1.key2").
const (
	MetricTotalHits      = "ratelimit_service_rate_limit_total_hits"
	MetricOverLimit      = "ratelimit_service_rate_limit_over_limit"
	MetricNearLimit      = "ratelimit_service_rate_limit_near_limit"
	MetricWithinLimit    = "ratelimit_service_rate_limit_within_limit"
	MetricShadowMode     = "ratelimit_service_rate_limit_shadow_mode"
	MetricDomainNotFound = "ratelimit_service_rate_limit_domain_not_found"
	MetricGlobalShadow   = "ratelimit_service_global_shadow_mode"
	MetricErrors         = "ratelimit_service_should_rate_limit_error"
	MetricConfigLoads    = "ratelimit_service_config_load_success"
	MetricConfigErrors   = "ratelimit_service_config_load_error"
)

// maxSeries bounds the (domain, descriptor) series kept; past it a
// rule's statistics are counted in one series whose attribute
// otel.metric.overflow is true, as the OpenTelemetry SDK itself does past
// its cardinality limit.
const maxSeries = 10_000

// series is one (domain, descriptor) pair's statistics, counted with
// atomic adds and read when the metrics are collected: a request pays no
// attribute lookup per statistic.
type series struct {
	attrs                                       attribute.Set
	rule                                        bool // a rule's, not the domain's: total_hits is reported from the start
	total, over, near, within, shadow, notFound atomic.Int64
}

type seriesKey struct{ domain, key string }

type metrics struct {
	global, errs         metric.Int64Counter
	redisErr, serviceErr metric.MeasurementOption

	series   sync.Map // seriesKey → *series
	count    atomic.Int64
	overflow series
}

// newMetrics makes the counters on mp; nil when mp is nil.
func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		return nil, nil
	}
	m := &metrics{}
	m.overflow.attrs = attribute.NewSet(attribute.Bool("otel.metric.overflow", true))
	meter := mp.Meter("github.com/sluice-go/sluice/cmd/sluice-rls")
	var err error
	for _, c := range []struct {
		dst        *metric.Int64Counter
		name, desc string
	}{
		{&m.global, MetricGlobalShadow, "Requests over a limit answered OK by the global shadow mode."},
		{&m.errs, MetricErrors, "Requests answered with an error, by err_type: redis_error (the decision failed) or service_error (the request was refused)."},
	} {
		if *c.dst, err = meter.Int64Counter(c.name, metric.WithDescription(c.desc), metric.WithUnit("{hit}")); err != nil {
			return nil, err
		}
	}
	perSeries := []struct {
		name, desc string
		of         func(*series) *atomic.Int64
		fromStart  bool // reported for a rule's series from its first request, even at 0
	}{
		{MetricTotalHits, "Hits (hits_addend) on a rule's limit, envoyproxy/ratelimit's total_hits.", func(s *series) *atomic.Int64 { return &s.total }, true},
		{MetricOverLimit, "Hits refused by a rule's limit (shadow ones too): over_limit.", func(s *series) *atomic.Int64 { return &s.over }, false},
		{MetricNearLimit, "Hits past the near-limit share of a rule's limit: near_limit.", func(s *series) *atomic.Int64 { return &s.near }, false},
		{MetricWithinLimit, "Hits within a rule's limit: within_limit.", func(s *series) *atomic.Int64 { return &s.within }, false},
		{MetricShadowMode, "Hits a shadow_mode rule would have refused: shadow_mode.", func(s *series) *atomic.Int64 { return &s.shadow }, false},
		{MetricDomainNotFound, "Requests of a domain no configuration file has: domain_not_found.", func(s *series) *atomic.Int64 { return &s.notFound }, false},
	}
	insts := make([]metric.Observable, len(perSeries))
	counters := make([]metric.Int64ObservableCounter, len(perSeries))
	for i, c := range perSeries {
		if counters[i], err = meter.Int64ObservableCounter(c.name, metric.WithDescription(c.desc), metric.WithUnit("{hit}")); err != nil {
			return nil, err
		}
		insts[i] = counters[i]
	}
	// A series is reported in a statistic from its first count on, as a
	// counter added to is (a rule's total_hits from its first request,
	// which may have cost 0).
	observe := func(o metric.Observer, s *series) {
		for i, c := range perSeries {
			if v := c.of(s).Load(); v != 0 || c.fromStart && s.rule {
				o.ObserveInt64(counters[i], v, metric.WithAttributeSet(s.attrs))
			}
		}
	}
	if _, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.series.Range(func(_, v any) bool {
			observe(o, v.(*series))
			return true
		})
		observe(o, &m.overflow)
		return nil
	}, insts...); err != nil {
		return nil, err
	}
	m.redisErr = metric.WithAttributeSet(attribute.NewSet(attribute.String("err_type", "redis_error")))
	m.serviceErr = metric.WithAttributeSet(attribute.NewSet(attribute.String("err_type", "service_error")))
	return m, nil
}

// ConfigLoads registers envoyproxy/ratelimit's configuration counters on
// mp, read from counts (versions applied, versions refused) at each
// collection.
func ConfigLoads(mp metric.MeterProvider, counts func() (ok, failed int64)) error {
	meter := mp.Meter("github.com/sluice-go/sluice/cmd/sluice-rls")
	okC, err := meter.Int64ObservableCounter(MetricConfigLoads, metric.WithDescription("Configuration versions applied, the first included."))
	if err != nil {
		return err
	}
	failC, err := meter.Int64ObservableCounter(MetricConfigErrors, metric.WithDescription("Configuration versions refused: the last good version kept serving."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		ok, failed := counts()
		o.ObserveInt64(okC, ok)
		o.ObserveInt64(failC, failed)
		return nil
	}, okC, failC)
	return err
}

// seriesOf is the series of a domain's statistics key ("" for the
// domain itself).
func (m *metrics) seriesOf(domain, key string) *series {
	k := seriesKey{domain, key}
	if v, ok := m.series.Load(k); ok {
		return v.(*series)
	}
	if m.count.Load() >= maxSeries {
		return &m.overflow
	}
	s := &series{rule: key != "", attrs: attribute.NewSet(attribute.String("domain", domain), attribute.String("descriptor", strings.TrimPrefix(key, domain+".")))}
	if v, loaded := m.series.LoadOrStore(k, s); loaded {
		return v.(*series)
	}
	m.count.Add(1)
	return s
}

func (m *metrics) serviceError(ctx context.Context) {
	if m != nil {
		m.errs.Add(ctx, 1, m.serviceErr)
	}
}

func (m *metrics) redisError(ctx context.Context) {
	if m != nil {
		m.errs.Add(ctx, 1, m.redisErr)
	}
}

func (m *metrics) globalShadow(ctx context.Context) {
	if m != nil {
		m.global.Add(ctx, 1)
	}
}

func (m *metrics) domainNotFound(domain string) {
	if m == nil {
		return
	}
	m.seriesOf(domain, "").notFound.Add(1)
}

// record counts one descriptor's hits as envoyproxy/ratelimit does: all
// in total_hits; within_limit or over_limit; near_limit the part of them
// past the near-limit share (ratio) of the limit; shadow_mode the part a
// shadow rule would have refused. The count before and after the hits is
// what the decision reports: sluice charges nothing for a refused
// request, so its hits are counted as they would have fallen.
func (m *metrics) record(domain string, it *item, charged bool, ratio float64) {
	if m == nil {
		return
	}
	s := m.seriesOf(domain, it.statsKey)
	hits := int64(min(it.hits, math.MaxInt64>>1))
	s.total.Add(hits)
	if it.kind == kindUnasked {
		return
	}
	capacity := it.limit.Rate
	if it.limit.Burst > 0 {
		capacity = it.limit.Burst
	}
	var before int64
	switch {
	case it.kind == kindZero || it.kind == kindBlocked:
		capacity = 0
	case charged:
		before = capacity - max(it.res.Remaining, 0) - hits
	default:
		before = capacity - max(it.res.Remaining, 0)
	}
	before = max(before, 0)
	after := before + hits
	near := int64(math.Floor(float64(capacity) * ratio))
	if it.over {
		if before >= capacity {
			s.over.Add(hits)
		} else {
			s.over.Add(after - capacity)
			if d := capacity - max(near, before); d > 0 {
				s.near.Add(d)
			}
		}
		if it.rule != nil && it.rule.Shadow {
			s.shadow.Add(min(hits, after-capacity))
		}
		return
	}
	s.within.Add(hits)
	if after > near {
		s.near.Add(min(hits, after-near))
	}
}
