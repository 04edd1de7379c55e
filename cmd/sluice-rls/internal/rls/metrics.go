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

// maxSeries bounds the attribute sets kept ready; past it a rule's
// statistics are still recorded, their attributes built per request.
const maxSeries = 10_000

type metrics struct {
	total, over, near, within, shadow, notFound, global, errs metric.Int64Counter
	redisErr, serviceErr                                      metric.MeasurementOption

	sets  sync.Map // domain + "\x00" + stats key → metric.MeasurementOption
	count atomic.Int64
}

// newMetrics makes the counters on mp; nil when mp is nil.
func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		return nil, nil
	}
	m := &metrics{}
	meter := mp.Meter("github.com/sluice-go/sluice/cmd/sluice-rls")
	var err error
	for _, c := range []struct {
		dst        *metric.Int64Counter
		name, desc string
	}{
		{&m.total, MetricTotalHits, "Hits (hits_addend) on a rule's limit, envoyproxy/ratelimit's total_hits."},
		{&m.over, MetricOverLimit, "Hits refused by a rule's limit (shadow ones too): over_limit."},
		{&m.near, MetricNearLimit, "Hits past the near-limit share of a rule's limit: near_limit."},
		{&m.within, MetricWithinLimit, "Hits within a rule's limit: within_limit."},
		{&m.shadow, MetricShadowMode, "Hits a shadow_mode rule would have refused: shadow_mode."},
		{&m.notFound, MetricDomainNotFound, "Requests of a domain no configuration file has: domain_not_found."},
		{&m.global, MetricGlobalShadow, "Requests over a limit answered OK by the global shadow mode."},
		{&m.errs, MetricErrors, "Requests answered with an error, by err_type: redis_error (the decision failed) or service_error (the request was refused)."},
	} {
		if *c.dst, err = meter.Int64Counter(c.name, metric.WithDescription(c.desc), metric.WithUnit("{hit}")); err != nil {
			return nil, err
		}
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

func (m *metrics) attrs(domain, key string) metric.MeasurementOption {
	id := domain + "\x00" + key
	if v, ok := m.sets.Load(id); ok {
		return v.(metric.MeasurementOption)
	}
	desc := strings.TrimPrefix(key, domain+".")
	opt := metric.WithAttributeSet(attribute.NewSet(attribute.String("domain", domain), attribute.String("descriptor", desc)))
	if m.count.Load() < maxSeries {
		if _, loaded := m.sets.LoadOrStore(id, opt); !loaded {
			m.count.Add(1)
		}
	}
	return opt
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

func (m *metrics) domainNotFound(ctx context.Context, domain string) {
	if m == nil {
		return
	}
	m.notFound.Add(ctx, 1, m.attrs(domain, ""))
}

// record counts one descriptor's hits as envoyproxy/ratelimit does: all
// in total_hits; within_limit or over_limit; near_limit the part of them
// past the near-limit share (ratio) of the limit; shadow_mode the part a
// shadow rule would have refused. The count before and after the hits is
// what the decision reports: sluice charges nothing for a refused
// request, so its hits are counted as they would have fallen.
func (m *metrics) record(ctx context.Context, domain string, it *item, charged bool, ratio float64) {
	if m == nil {
		return
	}
	opt := m.attrs(domain, it.statsKey)
	hits := int64(min(it.hits, math.MaxInt64>>1))
	m.total.Add(ctx, hits, opt)
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
			m.over.Add(ctx, hits, opt)
		} else {
			m.over.Add(ctx, after-capacity, opt)
			if d := capacity - max(near, before); d > 0 {
				m.near.Add(ctx, d, opt)
			}
		}
		if it.rule != nil && it.rule.Shadow {
			m.shadow.Add(ctx, min(hits, after-capacity), opt)
		}
		return
	}
	m.within.Add(ctx, hits, opt)
	if after > near {
		m.near.Add(ctx, min(hits, after-near), opt)
	}
}
