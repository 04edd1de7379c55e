package rls

import (
	"context"
	"strconv"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Past maxSeries (domain, descriptor) pairs, a rule's statistics go to one
// series marked otel.metric.overflow; none is lost, and the series kept
// go on counting on their own.
func TestMetricsOverflow(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithCardinalityLimit(2*maxSeries))
	m, err := newMetrics(mp)
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxSeries + 5 {
		m.record("d", &item{kind: kindUnasked, hits: 2, statsKey: "d.k_" + strconv.Itoa(i)}, false, 0.8)
	}
	m.record("d", &item{kind: kindUnasked, hits: 3, statsKey: "d.k_0"}, false, 0.8)
	m.domainNotFound("unknown")

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	type point struct {
		desc     string
		overflow bool
	}
	got := map[string]map[point]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			sum, ok := mt.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			got[mt.Name] = map[point]int64{}
			for _, p := range sum.DataPoints {
				d, _ := p.Attributes.Value("descriptor")
				o, _ := p.Attributes.Value("otel.metric.overflow")
				got[mt.Name][point{d.AsString(), o.AsBool()}] += p.Value
			}
		}
	}
	total := got[MetricTotalHits]
	if n := len(total); n != maxSeries+1 {
		t.Errorf("%d total_hits series, want %d and the overflow", n, maxSeries)
	}
	if v := total[point{"k_0", false}]; v != 5 {
		t.Errorf("total_hits of k_0 = %d, want 5", v)
	}
	if v := total[point{"", true}]; v != 2*5 {
		t.Errorf("total_hits past the bound = %d, want 10 (5 descriptors of 2 hits)", v)
	}
	if v := got[MetricDomainNotFound][point{"", true}]; v != 1 { // the domain's own series is past the bound too
		t.Errorf("domain_not_found past the bound = %d, want 1 (%v)", v, got[MetricDomainNotFound])
	}
	if v := len(got[MetricOverLimit]); v != 0 {
		t.Errorf("over_limit has %d series, want none: nothing was over", v)
	}
}
