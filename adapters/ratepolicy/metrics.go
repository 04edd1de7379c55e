package ratepolicy

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// metrics records one counter; attribute sets are built once per policy.
type metrics[R any] struct {
	decisions metric.Int64Counter
	sets      map[*Compiled[R]][3]metric.AddOption // allowed, denied, shadow_denied
}

func newMetrics[R any](c Metrics, ps []*Compiled[R]) (*metrics[R], error) {
	if c.Provider == nil {
		return nil, nil
	}
	meter := c.Provider.Meter(c.Scope)
	ctr, err := meter.Int64Counter(c.Name, metric.WithUnit("{decision}"), metric.WithDescription(c.Description))
	if err != nil {
		return nil, err
	}
	m := &metrics[R]{decisions: ctr, sets: map[*Compiled[R]][3]metric.AddOption{}}
	for _, p := range ps {
		var s [3]metric.AddOption
		for i, outcome := range []string{"allowed", "denied", "shadow_denied"} {
			s[i] = metric.WithAttributeSet(attribute.NewSet(
				attribute.String("sluice.policy", p.Name),
				attribute.String(c.OutcomeAttr, outcome)))
		}
		m.sets[p] = s
	}
	return m, nil
}

func (m *metrics[R]) record(ctx context.Context, o *Outcome[R]) {
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
	m.decisions.Add(ctx, 1, m.sets[o.P][i])
}
