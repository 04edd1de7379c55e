package reload

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names and attributes recorded when Options.MeterProvider is
// given. Every one carries sluice.reload.file, the file's absolute path.
const (
	// MetricSuccesses counts the versions applied after the first
	// ({version}).
	MetricSuccesses = "sluice.reload.successes"
	// MetricFailures counts the versions refused ({version}); attribute
	// sluice.reload.stage: "read" (the file could not be read, or kept
	// changing while it was loaded), "load" or "apply".
	MetricFailures = "sluice.reload.failures"
	// MetricVersion is the version in force (observable gauge, s): the
	// Unix time it was applied at, with attribute sluice.reload.version,
	// its Digest.
	MetricVersion = "sluice.reload.version"
)

// metrics records a Watcher's metrics; nil records nothing.
type metrics struct {
	successes, failures metric.Int64Counter
	file                attribute.KeyValue
	okSet               metric.AddOption
	failSets            map[string]metric.AddOption // per stage
	reg                 metric.Registration
}

func newMetrics(mp metric.MeterProvider, w *Watcher) (*metrics, error) {
	if mp == nil {
		return nil, nil
	}
	meter := mp.Meter("github.com/sluice-go/sluice/reload")
	m := &metrics{file: attribute.String("sluice.reload.file", w.path), failSets: map[string]metric.AddOption{}}
	var err error
	if m.successes, err = meter.Int64Counter(MetricSuccesses, metric.WithUnit("{version}"),
		metric.WithDescription("Versions of a watched file applied after the first.")); err != nil {
		return nil, err
	}
	if m.failures, err = meter.Int64Counter(MetricFailures, metric.WithUnit("{version}"),
		metric.WithDescription("Versions of a watched file refused; the version in force kept serving.")); err != nil {
		return nil, err
	}
	gauge, err := meter.Int64ObservableGauge(MetricVersion, metric.WithUnit("s"),
		metric.WithDescription("The version of a watched file in force: the Unix time it was applied at."))
	if err != nil {
		return nil, err
	}
	m.okSet = metric.WithAttributeSet(attribute.NewSet(m.file))
	for _, stage := range []string{"read", "load", "apply"} {
		m.failSets[stage] = metric.WithAttributeSet(attribute.NewSet(m.file, attribute.String("sluice.reload.stage", stage)))
	}
	m.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := w.Status()
		o.ObserveInt64(gauge, s.LoadedAt.Unix(), metric.WithAttributes(m.file, attribute.String("sluice.reload.version", s.Version)))
		return nil
	}, gauge)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) success() {
	if m != nil {
		m.successes.Add(context.Background(), 1, m.okSet)
	}
}

func (m *metrics) failure(stage string) {
	if m != nil {
		m.failures.Add(context.Background(), 1, m.failSets[stage])
	}
}

func (m *metrics) unregister() {
	if m != nil {
		_ = m.reg.Unregister()
	}
}
