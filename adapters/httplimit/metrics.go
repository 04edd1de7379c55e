package httplimit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// metrics records one counter; attribute sets are built once per policy.
type metrics struct {
	decisions metric.Int64Counter
	sets      map[*policy][3]metric.AddOption // allowed, denied, shadow_denied
}

func newMetrics(mp metric.MeterProvider, ps []*policy) (*metrics, error) {
	if mp == nil {
		return nil, nil
	}
	meter := mp.Meter("github.com/sluice-go/sluice/adapters/httplimit")
	c, err := meter.Int64Counter("sluice.http.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions on HTTP requests, per policy and outcome."))
	if err != nil {
		return nil, err
	}
	m := &metrics{decisions: c, sets: map[*policy][3]metric.AddOption{}}
	for _, p := range ps {
		var s [3]metric.AddOption
		for i, outcome := range []string{"allowed", "denied", "shadow_denied"} {
			s[i] = metric.WithAttributeSet(attribute.NewSet(
				attribute.String("sluice.policy", p.Policy.Name),
				attribute.String("sluice.http.outcome", outcome)))
		}
		m.sets[p] = s
	}
	return m, nil
}

func (m *metrics) record(ctx context.Context, o *Outcome) {
	if m == nil {
		return
	}
	i := 0
	switch {
	case o.Denied && o.Shadow:
		i = 2
	case o.Denied:
		i = 1
	}
	m.decisions.Add(ctx, 1, m.sets[o.p][i])
}
