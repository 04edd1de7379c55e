package sluice

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// gaugeRecorder is the recorder of metrics_test.go that also keeps the
// callbacks of observable gauges, so a test can collect them.
type gaugeRecorder struct {
	*recorder
	callbacks []metric.Int64Callback
}

func (g *gaugeRecorder) Meter(string, ...metric.MeterOption) metric.Meter {
	return gaugeMeter{recMeter: recMeter{r: g.recorder}, g: g}
}

type gaugeMeter struct {
	recMeter
	g *gaugeRecorder
}

func (m gaugeMeter) Int64ObservableGauge(name string, opts ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	m.g.callbacks = append(m.g.callbacks, metric.NewInt64ObservableGaugeConfig(opts...).Callbacks()...)
	return noop.Int64ObservableGauge{}, nil
}

// collect runs the gauge callbacks and returns "attributes=value" lines, sorted.
func (g *gaugeRecorder) collect(t *testing.T) []string {
	t.Helper()
	obs := &observer{}
	for _, cb := range g.callbacks {
		if err := cb(context.Background(), obs); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(obs.got)
	return obs.got
}

type observer struct {
	noop.Int64Observer
	got []string
}

func (o *observer) Observe(v int64, opts ...metric.ObserveOption) {
	set := metric.NewObserveConfig(opts).Attributes()
	var parts []string
	for _, kv := range set.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	o.got = append(o.got, strings.Join(parts, ",")+"="+strconv.FormatInt(v, 10))
}

// The breaker state gauge follows each node's breaker, and NOSCRIPT
// replies are counted.
func TestBreakerStateAndReloadMetrics(t *testing.T) {
	ctx := context.Background()
	g := &gaugeRecorder{recorder: newRecorder()}
	l, m, clk, sc := miniLimiter(t, WithMeterProvider(g), WithBreaker(1, time.Minute))
	lim := Must(GCRA(10, time.Second, 10))
	if len(g.callbacks) != 1 {
		t.Fatalf("%d observable gauges registered, want 1 (%s)", len(g.callbacks), MetricBreakerState)
	}
	state := func() string { return strings.Join(g.collect(t), " ") }

	l.Allow(ctx, "u", lim)
	if got := state(); got != "" {
		t.Fatalf("breaker state before any change: %q; want no node reported", got)
	}
	sc.fail.Store(true)
	l.Allow(ctx, "u", lim)
	if got := state(); got != "sluice.node=redis=2" {
		t.Fatalf("breaker state with Redis down: %q; want redis=2 (open)", got)
	}
	clk.add(time.Minute)
	l.Allow(ctx, "u", lim) // starts the probe, which fails: half-open, then open again
	settle(t, l)
	if got := state(); got != "sluice.node=redis=2" {
		t.Fatalf("after a failed probe: %q", got)
	}
	sc.fail.Store(false)
	clk.add(time.Minute)
	clk.set(m)
	l.Allow(ctx, "u", lim) // starts the probe, which succeeds
	settle(t, l)
	if got := state(); got != "sluice.node=redis=0" {
		t.Fatalf("after a good probe: %q; want redis=0 (closed)", got)
	}
	if n := g.get(MetricBreakerTransitions + "{sluice.breaker.state=half-open,sluice.node=redis}"); n != 2 {
		t.Fatalf("%d transitions to half-open, want 2", n)
	}

	if got := g.get(MetricScriptReloads + "{}"); got != 1 {
		t.Fatalf("%d reloads after the first call of the script, want 1 (NOSCRIPT on an empty script cache)", got)
	}
	if err := sc.Client.Do(ctx, sc.Client.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if r, err := l.Allow(ctx, "u", lim); err != nil || r.Degraded {
			t.Fatalf("after SCRIPT FLUSH: %+v, %v", r, err)
		}
	}
	if got := g.get(MetricScriptReloads + "{}"); got != 2 {
		t.Fatalf("%d reloads after SCRIPT FLUSH and three calls, want 2", got)
	}
}
