package sluice

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// recorder is a MeterProvider that keeps every counter add and histogram
// record as "name{attributes}" → sum / count, and the values of
// observable counters as of the last get.
type recorder struct {
	noop.MeterProvider
	mu       sync.Mutex
	sums     map[string]int64
	counts   map[string]int
	counters []observedCounter
}

type observedCounter struct {
	name      string
	callbacks []metric.Int64Callback
}

func newRecorder() *recorder {
	return &recorder{sums: map[string]int64{}, counts: map[string]int{}}
}

func (r *recorder) Meter(string, ...metric.MeterOption) metric.Meter { return recMeter{r: r} }

func (r *recorder) key(name string, opts []metric.AddOption) string {
	set := metric.NewAddConfig(opts).Attributes()
	var parts []string
	for _, kv := range set.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

// get collects the observable counters, then returns k's value.
func (r *recorder) get(k string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.counters {
		for _, cb := range c.callbacks {
			if err := cb(context.Background(), recObserver{r: r, name: c.name}); err != nil {
				panic(err)
			}
		}
	}
	return r.sums[k]
}

// recObserver sets what an observable counter's callback observes (its
// value so far) under r.mu, held by get.
type recObserver struct {
	metric.Int64Observer
	r    *recorder
	name string
}

func (o recObserver) Observe(v int64, opts ...metric.ObserveOption) {
	add := make([]metric.AddOption, 0, len(opts))
	for _, opt := range opts {
		if a, ok := opt.(metric.AddOption); ok {
			add = append(add, a)
		}
	}
	o.r.sums[o.r.key(o.name, add)] = v
}

type recMeter struct {
	noop.Meter
	r *recorder
}

func (m recMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return recCounter{r: m.r, name: name}, nil
}

func (m recMeter) Int64ObservableCounter(name string, opts ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	m.r.mu.Lock()
	m.r.counters = append(m.r.counters, observedCounter{name, metric.NewInt64ObservableCounterConfig(opts...).Callbacks()})
	m.r.mu.Unlock()
	return noop.Int64ObservableCounter{}, nil
}

func (m recMeter) Float64Histogram(name string, _ ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return recHistogram{r: m.r, name: name}, nil
}

type recCounter struct {
	noop.Int64Counter
	r    *recorder
	name string
}

func (c recCounter) Add(_ context.Context, v int64, opts ...metric.AddOption) {
	k := c.r.key(c.name, opts)
	c.r.mu.Lock()
	c.r.sums[k] += v
	c.r.mu.Unlock()
}

type recHistogram struct {
	noop.Float64Histogram
	r    *recorder
	name string
}

func (h recHistogram) Record(_ context.Context, v float64, opts ...metric.RecordOption) {
	add := make([]metric.AddOption, 0, len(opts))
	for _, o := range opts {
		if a, ok := o.(metric.AddOption); ok {
			add = append(add, a)
		}
	}
	k := h.r.key(h.name, add)
	h.r.mu.Lock()
	h.r.counts[k]++
	if v < 0 {
		h.r.sums[k] = -1 << 62 // a negative duration is a bug
	}
	h.r.mu.Unlock()
}

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rec := newRecorder()
	clk := newClock(time.Unix(1_800_000_000, 0))
	l, err := New(miniClient(t, m), WithMeterProvider(rec), WithClock(clk.now), WithBreaker(1, time.Second), WithLogger(nil), WithTimeout(time.Minute), WithDenialCache(0))
	if err != nil {
		t.Fatal(err)
	}
	lim := Must(GCRA(2, time.Minute, 2)).Named("api")
	for i := 0; i < 3; i++ {
		l.Allow(ctx, "u", lim)
	}
	attrs := "sluice.algorithm=gcra,sluice.allowed=%v,sluice.degraded=%v,sluice.limit=api"
	if got := rec.get(MetricDecisions + "{" + fmt.Sprintf(attrs, true, false) + "}"); got != 2 {
		t.Errorf("allowed decisions = %d, want 2; recorded %v", got, rec.sums)
	}
	if got := rec.get(MetricDecisions + "{" + fmt.Sprintf(attrs, false, false) + "}"); got != 1 {
		t.Errorf("denied decisions = %d, want 1; recorded %v", got, rec.sums)
	}
	if n := rec.counts[MetricDuration+"{sluice.algorithm=gcra,sluice.degraded=false,sluice.limit=api}"]; n != 3 {
		t.Errorf("durations recorded %d times, want 3: %v", n, rec.counts)
	}

	// Redis goes away: a failure, the breaker opens, then breaker_open failures.
	m.Close()
	l.Allow(ctx, "u", lim)
	l.Allow(ctx, "u", lim)
	if got := rec.get(MetricRedisFailures + "{sluice.algorithm=gcra,sluice.failure=error,sluice.limit=api}"); got != 1 {
		t.Errorf("error failures = %d, want 1: %v", got, rec.sums)
	}
	if got := rec.get(MetricRedisFailures + "{sluice.algorithm=gcra,sluice.failure=breaker_open,sluice.limit=api}"); got != 1 {
		t.Errorf("breaker_open failures = %d, want 1: %v", got, rec.sums)
	}
	if got := rec.get(MetricDecisions + "{" + fmt.Sprintf(attrs, true, true) + "}"); got != 2 {
		t.Errorf("degraded (fail-open) decisions = %d, want 2: %v", got, rec.sums)
	}
	if got := rec.get(MetricBreakerTransitions + "{sluice.breaker.state=open,sluice.node=redis}"); got != 1 {
		t.Errorf("breaker transitions to open = %d, want 1: %v", got, rec.sums)
	}
	// With the denial cache, a denied identity's next Allow is a cache hit.
	m2 := miniredis.RunT(t)
	rec2 := newRecorder()
	l2, _ := New(miniClient(t, m2), WithMeterProvider(rec2), WithClock(clk.now), WithLogger(nil), WithTimeout(time.Minute))
	for i := 0; i < 4; i++ {
		l2.Allow(ctx, "u", lim)
	}
	if got := rec2.get(MetricDenialCacheHits + "{sluice.algorithm=gcra,sluice.limit=api}"); got != 1 {
		t.Errorf("denial cache hits = %d, want 1 (the 4th call): %v", got, rec2.sums)
	}
	if got := rec2.get(MetricDecisions + "{" + fmt.Sprintf(attrs, false, false) + "}"); got != 2 {
		t.Errorf("denied decisions = %d, want 2 (Redis's and the cache's): %v", got, rec2.sums)
	}
	for k, v := range rec.sums {
		if v < 0 {
			t.Errorf("%s: negative duration recorded", k)
		}
	}
	if _, err := New(miniClient(t, miniredis.RunT(t)), WithMeterProvider(nil)); err == nil {
		t.Error("WithMeterProvider(nil) accepted")
	}
}
