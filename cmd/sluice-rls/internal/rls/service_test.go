package rls

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/cmd/sluice-rls/internal/rlsconf"
	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/reload"
)

// The configurations of envoyproxy/ratelimit's integration tests, as
// their facts are: rules per second, minute, hour and day.
const (
	basicYAML = `domain: basic
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	anotherYAML = `domain: another
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key4
    rate_limit: {unit: day, requests_per_unit: 20}
`
	reloadYAML = `domain: reload
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: block
    rate_limit: {unit: second, requests_per_unit: 0}
`
)

// TestBasicLimits plays envoyproxy/ratelimit's basic integration scenario:
// an unknown domain, a rule per second, a rule per minute taken past its
// limit, two rules of one request where the second runs out, and a reset
// counting down. Where it over-counts, sluice is exact: a refused request
// charges none of its rules.
func TestBasicLimits(t *testing.T) {
	r := newRig(t, redisClient(t), nil, config(t, map[string]string{"basic.yaml": basicYAML, "another.yaml": anotherYAML}), nil)

	want(t, r.call(request("foo", 1, d("hello", "world"))), ok, st{code: ok})
	want(t, r.call(request("basic", 1, d("key1", "foo"))), ok, st{ok, 50, second, 49, 1})

	for i := range 25 {
		code, remaining := ok, uint32(20-(i+1))
		if i >= 20 {
			code, remaining = over, 0
		}
		want(t, r.call(request("another", 1, d("key2", "7741"))), code, st{code, 20, minute, remaining, 50})
	}
	if got := [4]int64{r.counter(MetricTotalHits, "key2"), r.counter(MetricWithinLimit, "key2"), r.counter(MetricOverLimit, "key2"), r.counter(MetricNearLimit, "key2")}; got != [4]int64{25, 20, 5, 4} {
		t.Errorf("key2 total, within, over, near = %v, want [25 20 5 4]", got)
	}

	// Two rules in one request: once key3 (10 per hour) runs out, the
	// request is refused and key2 is charged nothing.
	for i := range 15 {
		code, rem1, rem2 := ok, uint32(20-(i+1)), uint32(10-(i+1))
		if i >= 10 {
			code, rem1, rem2 = over, 10, 0
		}
		want(t, r.call(request("another", 1, d("key2", "9001"), d("key3", "9001"))), code,
			st{ok, 20, minute, rem1, 50}, st{code, 10, hour, rem2, 3590})
	}

	resp1 := r.call(request("another", 1, d("key4", "durTest")))
	r.clock.Advance(2 * time.Second)
	resp2 := r.call(request("another", 1, d("key4", "durTest")))
	if a, b := resp1.Statuses[0].GetDurationUntilReset().GetSeconds(), resp2.Statuses[0].GetDurationUntilReset().GetSeconds(); a != 86390 || b != 86388 {
		t.Errorf("day window resets in %d then %d s, want 86390 then 86388", a, b)
	}
}

// TestWindows: each unit's window is aligned to the Unix epoch, as
// envoyproxy/ratelimit aligns it: full until the last microsecond of the
// window, whole again at the next.
func TestWindows(t *testing.T) {
	r := newRig(t, redisClient(t), nil, config(t, map[string]string{"w.yaml": `domain: w
descriptors:
  - key: s
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: h
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: d
    rate_limit: {unit: day, requests_per_unit: 2}
`}), nil)
	for _, tc := range []struct {
		key    string
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
		period time.Duration
	}{{"s", second, time.Second}, {"m", minute, time.Minute}, {"h", hour, time.Hour}, {"d", day, 24 * time.Hour}} {
		now := r.clock.Now()
		left := tc.period - time.Duration(now.UnixNano()%int64(tc.period))
		secs := int64((left + time.Second - 1) / time.Second)
		want(t, r.call(request("w", 1, d(tc.key, "x"))), ok, st{ok, 2, tc.unit, 1, secs})
		want(t, r.call(request("w", 1, d(tc.key, "x"))), ok, st{ok, 2, tc.unit, 0, secs})
		want(t, r.call(request("w", 1, d(tc.key, "x"))), over, st{over, 2, tc.unit, 0, secs})
		r.clock.Advance(left - time.Microsecond)
		want(t, r.call(request("w", 1, d(tc.key, "x"))), over, st{over, 2, tc.unit, 0, 1})
		r.clock.Advance(time.Microsecond)
		full := int64(tc.period / time.Second)
		want(t, r.call(request("w", 1, d(tc.key, "x"))), ok, st{ok, 2, tc.unit, 1, full})
	}
}

// TestReloadWhileServing changes the configuration directory under a
// serving service, requests flowing: a new domain is served once its file
// is there, a rule's count carries over a change of its numbers, a broken
// file is refused while the last good version serves.
func TestReloadWhileServing(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, map[string]string{"basic.yaml": basicYAML})
	r := newRig(t, redisClient(t), nil, nil, nil)
	applied := make(chan *rlsconf.Config, 16)
	w, err := reload.WatchDir(context.Background(), dir, rlsconf.IsConfigFile,
		func(dir string) (*rlsconf.Config, error) { return rlsconf.Load(dir, rlsconf.Options{}) },
		func(c *rlsconf.Config) error {
			if err := r.svc.Update(c); err != nil {
				return err
			}
			applied <- c
			return nil
		}, reload.Options{Debounce: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	<-applied

	// Requests keep flowing through every reload; none may fail.
	stop := make(chan struct{})
	var flowing sync.WaitGroup
	var errs atomic.Int64
	for range 4 {
		flowing.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := r.client.ShouldRateLimit(context.Background(), request("basic", 1, d("key1", "bg"))); err != nil {
					errs.Add(1)
				}
			}
		})
	}
	defer func() {
		close(stop)
		flowing.Wait()
		if n := errs.Load(); n > 0 {
			t.Errorf("%d requests failed while the configuration changed", n)
		}
	}()
	waitApplied := func() {
		t.Helper()
		select {
		case <-applied:
		case <-time.After(time.Minute):
			t.Fatal("the change was never applied")
		}
	}

	want(t, r.call(request("reload", 1, d("key1", "foo"))), ok, st{code: ok})
	want(t, r.call(request("basic", 1, d("one_per_minute", "u"))), ok, st{ok, 1, minute, 0, 50})

	writeConfig(t, dir, map[string]string{"reload.yaml": reloadYAML})
	waitApplied()
	want(t, r.call(request("reload", 1, d("key1", "foo"))), ok, st{ok, 50, second, 49, 1})
	want(t, r.call(request("reload", 1, d("block", "foo"))), over, st{over, 0, second, 0, 1})

	// New numbers, the same count.
	writeConfig(t, dir, map[string]string{"basic.yaml": strings.Replace(basicYAML, "requests_per_unit: 1}", "requests_per_unit: 2}", 1)})
	waitApplied()
	want(t, r.call(request("basic", 1, d("one_per_minute", "u"))), ok, st{ok, 2, minute, 0, 50})
	want(t, r.call(request("basic", 1, d("one_per_minute", "u"))), over, st{over, 2, minute, 0, 50})

	// A broken file is refused; the version in force keeps serving.
	writeConfig(t, dir, map[string]string{"broken.yaml": "domain: basic\n"})
	if err := w.Reload(); err == nil || !strings.Contains(err.Error(), "duplicate domain 'basic'") {
		t.Fatalf("broken version: %v", err)
	}
	if w.Status().Failures == 0 {
		t.Error("the refusal was not counted")
	}
	want(t, r.call(request("reload", 1, d("key1", "foo"))), ok, st{ok, 50, second, 48, 1})
}

// TestWildcards: with share_threshold every value a wildcard matches
// counts against one quota; without it each value has its own.
func TestWildcards(t *testing.T) {
	r := newRig(t, redisClient(t), nil, config(t, map[string]string{"s.yaml": `domain: share-threshold-test
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    rate_limit: {unit: hour, requests_per_unit: 10}
`}), nil)
	for i := range 10 {
		want(t, r.call(request("share-threshold-test", 1, d("files", fmt.Sprintf("files/f%d.pdf", i)))), ok, st{ok, 10, hour, uint32(9 - i), 3590})
	}
	want(t, r.call(request("share-threshold-test", 1, d("files", "files/another.csv"))), over, st{over, 10, hour, 0, 3590})
	for i := range 10 {
		want(t, r.call(request("share-threshold-test", 1, d("files_no_share", fmt.Sprintf("files_no_share/f%d.pdf", i)))), ok, st{ok, 10, hour, 9, 3590})
	}
	want(t, r.call(request("share-threshold-test", 1, d("files", "other/x"))), ok, st{code: ok})
	if n := r.counter(MetricTotalHits, "files_files/*"); n != 11 {
		t.Errorf("files_files/* total_hits %d, want 11", n)
	}
}

// TestReplaces: a rule that replaces another by name takes its place in a
// request where both apply.
func TestReplaces(t *testing.T) {
	r := newRig(t, redisClient(t), nil, config(t, map[string]string{"r.yaml": `domain: replaces
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}
  - key: premium
    rate_limit:
      unit: minute
      requests_per_unit: 5
      replaces:
        - name: per_user
`}), nil)
	want(t, r.call(request("replaces", 1, d("user", "a"))), ok, st{ok, 1, minute, 0, 50})
	want(t, r.call(request("replaces", 1, d("user", "a"))), over, st{over, 1, minute, 0, 50})
	for i := range 5 {
		want(t, r.call(request("replaces", 1, d("user", "a"), d("premium", "yes"))), ok, st{code: ok}, st{ok, 5, minute, uint32(4 - i), 50})
	}
	want(t, r.call(request("replaces", 1, d("user", "a"), d("premium", "yes"))), over, st{code: ok}, st{over, 5, minute, 0, 50})
}

// TestShadowMode: a shadow rule over its limit answers OK and is counted
// in shadow_mode; the global shadow mode answers OK overall, the statuses
// still saying which rule is over.
func TestShadowMode(t *testing.T) {
	const yaml = `domain: shadow
descriptors:
  - key: watched
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: enforced
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	r := newRig(t, redisClient(t), nil, config(t, map[string]string{"s.yaml": yaml}), nil)
	want(t, r.call(request("shadow", 1, d("watched", "x"))), ok, st{ok, 1, minute, 0, 50})
	want(t, r.call(request("shadow", 1, d("watched", "x"))), ok, st{ok, 1, minute, 0, 50})
	want(t, r.call(request("shadow", 1, d("watched", "x"), d("enforced", "x"))), ok, st{ok, 1, minute, 0, 50}, st{ok, 1, minute, 0, 50})
	want(t, r.call(request("shadow", 1, d("watched", "x"), d("enforced", "x"))), over, st{ok, 1, minute, 0, 50}, st{over, 1, minute, 0, 50})
	if got := [2]int64{r.counter(MetricShadowMode, "watched"), r.counter(MetricOverLimit, "watched")}; got != [2]int64{3, 3} {
		t.Errorf("watched shadow_mode, over_limit = %v, want [3 3]", got)
	}

	g := newRig(t, redisClient(t), nil, config(t, map[string]string{"s.yaml": yaml}), func(o *Options) { o.Shadow = true })
	want(t, g.call(request("shadow", 1, d("enforced", "x"))), ok, st{ok, 1, minute, 0, 50})
	want(t, g.call(request("shadow", 1, d("enforced", "x"))), ok, st{over, 1, minute, 0, 50})
	if n := g.counter(MetricGlobalShadow, ""); n != 1 {
		t.Errorf("global_shadow_mode %d, want 1", n)
	}
}

// TestUnlimited: an unlimited rule answers OK with the most remaining,
// asking nothing of Redis.
func TestUnlimited(t *testing.T) {
	client := redisClient(t)
	r := newRig(t, client, nil, config(t, map[string]string{"u.yaml": `domain: u
descriptors:
  - key: internal
    rate_limit: {unlimited: true}
  - key: internal
    value: audited
    rate_limit: {unit: second, requests_per_unit: 1}
`}), nil)
	for range 3 {
		want(t, r.call(request("u", 1, d("internal", "svc"))), ok, st{code: ok, remaining: math.MaxUint32})
	}
	if n, err := client.Do(context.Background(), client.B().Dbsize().Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("DBSIZE %d (%v): an unlimited rule wrote to Redis", n, err)
	}
	want(t, r.call(request("u", 1, d("internal", "audited"))), ok, st{ok, 1, second, 0, 1})
}

// TestNested: the most specific rule of nested descriptors applies, and
// only to a descriptor exactly as deep.
func TestNested(t *testing.T) {
	r := newRig(t, redisClient(t), nil, config(t, map[string]string{"n.yaml": `domain: nested
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: path
        value: /upload
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 20}
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 2}
`}), nil)
	want(t, r.call(request("nested", 1, d("tenant", "acme", "path", "/x"))), ok, st{ok, 5, second, 4, 1})
	want(t, r.call(request("nested", 1, d("tenant", "acme", "path", "/upload"))), ok, st{ok, 10, second, 9, 1})
	want(t, r.call(request("nested", 1, d("tenant", "acme"))), ok, st{code: ok})
	want(t, r.call(request("nested", 1, d("tenant", "other", "path", "/x"))), ok, st{code: ok})
	want(t, r.call(request("nested", 1, d("tenant", "acme", "path", "/x", "extra", "1"))), ok, st{code: ok})
	want(t, r.call(request("nested", 1, d("client", "c"))), ok, st{ok, 20, minute, 19, 50})
	want(t, r.call(request("nested", 1, d("client", "c", "method", "GET"))), ok, st{ok, 2, minute, 1, 50})
	// The two levels are counted apart.
	want(t, r.call(request("nested", 1, d("client", "c"), d("client", "c", "method", "GET"))), ok, st{ok, 20, minute, 18, 50}, st{ok, 2, minute, 0, 50})
}

// TestDescriptorLimit: a limit sent in a descriptor (envoy's per-descriptor
// override) is the limit applied, in a configured domain.
func TestDescriptorLimit(t *testing.T) {
	r := newRig(t, redisClient(t), nil, config(t, map[string]string{"basic.yaml": basicYAML}), func(o *Options) { o.Headers = HeadersDraft })
	req := func(domain string) *rlsv3.RateLimitRequest {
		q := request(domain, 1, d("key1", "v", "custom", "x"))
		q.Descriptors[0].Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE}
		return q
	}
	for i := range 3 {
		want(t, r.call(req("basic")), ok, st{ok, 3, minute, uint32(2 - i), 50})
	}
	resp := r.call(req("basic"))
	want(t, resp, over, st{over, 3, minute, 0, 50})
	want(t, r.call(req("unknown-domain")), ok, st{code: ok})
	bad := req("basic")
	bad.Descriptors[0].Limit.Unit = typev3.RateLimitUnit_UNKNOWN
	if _, err := r.client.ShouldRateLimit(context.Background(), bad); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a limit of unknown unit: %v, want InvalidArgument", err)
	}
}

// TestHitsAddend: hits_addend is each check's cost; a descriptor's own
// hits_addend wins, and 0 only reports.
func TestHitsAddend(t *testing.T) {
	r := newRig(t, redisClient(t), nil, config(t, map[string]string{"another.yaml": anotherYAML}), nil)
	want(t, r.call(request("another", 5, d("key2", "h"))), ok, st{ok, 20, minute, 15, 50})
	q := request("another", 5, d("key2", "h"))
	q.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	want(t, r.call(q), ok, st{ok, 20, minute, 15, 50})
	want(t, r.call(request("another", 16, d("key2", "h"))), over, st{over, 20, minute, 15, 50})
	want(t, r.call(request("another", 15, d("key2", "h"))), ok, st{ok, 20, minute, 0, 50})
	if n := r.counter(MetricTotalHits, "key2"); n != 5+0+16+15 {
		t.Errorf("total_hits %d, want 36", n)
	}
}

// TestRefusedRequestChargesNothing: a request of three descriptors whose
// third is over its limit charges none of the three, whether its fixed
// windows go in one script call (-cross-slot, the default: atomic) or in
// one call each (refunded).
func TestRefusedRequestChargesNothing(t *testing.T) {
	for _, cross := range []bool{true, false} {
		t.Run(fmt.Sprint("cross-slot=", cross), func(t *testing.T) {
			r := newRig(t, redisClient(t), nil, config(t, map[string]string{"t.yaml": threeYAML}), nil, sluice.WithCrossSlotScripts(cross))
			checkRefusedChargesNothing(t, func(q *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse { return r.call(q) })
		})
	}
}

const threeYAML = `domain: three
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: gcra}
  - key: c
    rate_limit: {unit: hour, requests_per_unit: 1}
`

func checkRefusedChargesNothing(t *testing.T, call func(*rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse) {
	t.Helper()
	three := request("three", 1, d("a", "x"), d("b", "x"), d("c", "x"))
	want(t, call(three), ok, st{ok, 10, hour, 9, 3590}, st{ok, 10, hour, 9, 0}, st{ok, 1, hour, 0, 3590})
	for range 5 {
		want(t, call(three), over, st{ok, 10, hour, 9, 3590}, st{ok, 10, hour, 9, 0}, st{over, 1, hour, 0, 3590})
	}
	// What a and b have left: one request's worth gone, not six.
	q := request("three", 0, d("a", "x"), d("b", "x"))
	for _, dd := range q.Descriptors {
		dd.HitsAddend = wrapperspb.UInt64(0)
	}
	want(t, call(q), ok, st{ok, 10, hour, 9, 3590}, st{ok, 10, hour, 9, 0})
}

// TestHeaders: the draft RateLimit fields of every rule decided, and on
// request the X-RateLimit fields of the rule that binds.
func TestHeaders(t *testing.T) {
	const yaml = `domain: h
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: plan
    rate_limit: {name: daily, unit: day, requests_per_unit: 2}
`
	headers := func(resp *rlsv3.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, h := range resp.GetResponseHeadersToAdd() {
			m[h.GetKey()] = h.GetValue()
		}
		return m
	}
	r := newRig(t, redisClient(t), nil, config(t, map[string]string{"h.yaml": yaml}), nil)
	got := headers(r.call(request("h", 1, d("client", "c"), d("plan", "free"))))
	if w := map[string]string{
		"RateLimit-Policy": `"h.client";q=20;w=60, "daily";q=2;w=86400`,
		"RateLimit":        `"h.client";r=19;t=50, "daily";r=1;t=86390`,
	}; fmt.Sprint(got) != fmt.Sprint(w) {
		t.Errorf("draft headers %v, want %v", got, w)
	}
	r.call(request("h", 1, d("plan", "free")))
	got = headers(r.call(request("h", 1, d("plan", "free"))))
	if w := `"daily";r=0;t=86390`; got["RateLimit"] != w {
		t.Errorf("RateLimit %q, want %q", got["RateLimit"], w)
	}

	l := newRig(t, redisClient(t), nil, config(t, map[string]string{"h.yaml": yaml}), func(o *Options) { o.Headers = HeadersLegacy })
	got = headers(l.call(request("h", 1, d("client", "c"), d("plan", "free"))))
	reset := strconv.FormatInt(start.Add(50*time.Second).Unix(), 10)
	if w := map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": strconv.FormatInt(start.Add(86390*time.Second).Unix(), 10)}; fmt.Sprint(got) != fmt.Sprint(w) {
		t.Errorf("legacy headers %v, want %v (client's reset would be %s)", got, w, reset)
	}
	n := newRig(t, redisClient(t), nil, config(t, map[string]string{"h.yaml": yaml}), func(o *Options) { o.Headers = HeadersNone })
	if got := n.call(request("h", 1, d("client", "c"))).GetResponseHeadersToAdd(); len(got) != 0 {
		t.Errorf("HeadersNone: %v", got)
	}
}

// TestFleet plays Envoy in front of three replicas of the service on one
// redis-server, and on a 3-master Redis Cluster: requests spread over
// them, exactly the limit is admitted, and a request refused by its third
// descriptor charges none of the three.
func TestFleet(t *testing.T) {
	t.Run("redis-server", func(t *testing.T) {
		srv := redisserver.Start(t)
		testFleet(t, func() rueidis.Client { return newClient(t, []string{srv.Addr}, false) })
	})
	t.Run("cluster", func(t *testing.T) {
		c := redisserver.StartCluster(t, 3)
		testFleet(t, func() rueidis.Client { return newClient(t, c.Addrs(), true) })
	})
}

func testFleet(t *testing.T, client func() rueidis.Client) {
	const limit, requests, workers = 100, 400, 16
	cfg := config(t, map[string]string{"f.yaml": `domain: fleet
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: sliding_window}
`, "t.yaml": threeYAML})
	clk := newClock()
	var replicas []*rig
	for range 3 {
		replicas = append(replicas, newRig(t, client(), clk, cfg, nil))
	}
	var admitted, refused, next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= requests {
					return
				}
				resp, err := replicas[i%3].client.ShouldRateLimit(context.Background(),
					request("fleet", 1, d("client", "c1"), d("route", "/r")))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.GetOverallCode() == ok {
					admitted.Add(1)
				} else {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != limit || refused.Load() != requests-limit {
		t.Errorf("admitted %d, refused %d of %d; want exactly %d admitted", admitted.Load(), refused.Load(), requests, limit)
	}
	// The route rule was charged only by the admitted requests.
	want(t, replicas[0].call(request("fleet", 0, d("route", "/r"))), ok, st{code: ok, rpu: 1000, unit: hour, remaining: 1000 - limit - 1})

	i := 0
	checkRefusedChargesNothing(t, func(q *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		i++
		return replicas[i%3].call(q)
	})
}

// TestOneQuotaAcrossGatewayAndApp: a rule with identity: ip and the name
// of an httplimit policy counts the same quota as that policy, so the
// gateway's requests and the application's together get the limit once.
func TestOneQuotaAcrossGatewayAndApp(t *testing.T) {
	client := redisClient(t)
	clk := newClock()
	r := newRig(t, client, clk, config(t, map[string]string{"g.yaml": `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10, name: per-ip, identity: ip}
`}), nil)
	appLimiter, err := sluice.New(client, sluice.WithClock(clk.Now), sluice.WithTimeout(30*time.Second), sluice.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer appLimiter.Close()
	ip, err := httplimit.IP(httplimit.IPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Config{Limiter: appLimiter, Policies: []httplimit.Policy{{
		Name: "per-ip", Limit: sluice.Must(sluice.FixedWindow(10, time.Minute)).Named("per-ip"), Key: ip,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	app := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	var gateway, application int
	for i := range 14 {
		if i%2 == 0 {
			if r.call(request("edge", 1, d("remote_address", "192.0.2.7"))).GetOverallCode() == ok {
				gateway++
			}
			continue
		}
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.7:4242"
		rec := httptest.NewRecorder()
		app.ServeHTTP(rec, req)
		if rec.Code == http.StatusNoContent {
			application++
		}
	}
	if gateway+application != 10 || gateway != 5 || application != 5 {
		t.Errorf("admitted %d at the gateway and %d in the application, want 5 and 5: one quota of 10", gateway, application)
	}
	if k := appLimiter.Key("ip:192.0.2.7", sluice.Must(sluice.FixedWindow(10, time.Minute)).Named("per-ip")); k != "sluice:{ip:192.0.2.7}:per-ip" {
		t.Errorf("the application's key is %q", k)
	}
}

// TestFailurePolicy: while Redis is down, a Limiter failing closed has
// requests answered UNAVAILABLE (for Envoy's failure_mode_deny), one
// failing open has them admitted.
func TestFailurePolicy(t *testing.T) {
	for _, tc := range []struct {
		policy sluice.FailurePolicy
		code   codes.Code
	}{{sluice.FailClosed, codes.Unavailable}, {sluice.FailOpen, codes.OK}} {
		srv := redisserver.Start(t)
		r := newRig(t, newClient(t, []string{srv.Addr}, false), nil, config(t, map[string]string{"another.yaml": anotherYAML}), nil,
			sluice.WithFailurePolicy(tc.policy), sluice.WithSilenceTimeout(100*time.Millisecond))
		want(t, r.call(request("another", 1, d("key2", "f"))), ok, st{ok, 20, minute, 19, 50})
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		resp, err := r.client.ShouldRateLimit(context.Background(), request("another", 1, d("key2", "f")))
		if status.Code(err) != tc.code {
			t.Errorf("%v: %v, %v; want %v", tc.policy, resp, err, tc.code)
		}
		if tc.code == codes.OK && resp.GetOverallCode() != ok {
			t.Errorf("%v: %v, want OK", tc.policy, resp)
		}
	}
}

// TestRefusedRequests: what envoyproxy/ratelimit refuses as an error.
func TestRefusedRequests(t *testing.T) {
	r := newRig(t, redisClient(t), nil, nil, nil)
	if _, err := r.client.ShouldRateLimit(context.Background(), request("basic", 1, d("key1", "x"))); status.Code(err) != codes.Unavailable {
		t.Errorf("no configuration: %v, want Unavailable", err)
	}
	if err := r.svc.Update(config(t, map[string]string{"basic.yaml": basicYAML})); err != nil {
		t.Fatal(err)
	}
	for _, q := range []*rlsv3.RateLimitRequest{request("", 1, d("key1", "x")), request("basic", 1)} {
		if _, err := r.client.ShouldRateLimit(context.Background(), q); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", q, err)
		}
	}
	if n := r.counter(MetricErrors, ""); n != 3 {
		t.Errorf("should_rate_limit errors %d, want 3", n)
	}
}

// TestDenialCache: with the Limiter's denial cache, a request a cached
// denial refuses is answered without Redis; its other descriptors, not
// asked, report OK with nothing known to remain.
func TestDenialCache(t *testing.T) {
	r := newRig(t, redisClient(t), nil, config(t, map[string]string{"t.yaml": threeYAML}), nil, sluice.WithDenialCache(100))
	three := request("three", 1, d("a", "x"), d("b", "x"), d("c", "x"))
	want(t, r.call(three), ok, st{ok, 10, hour, 9, 3590}, st{ok, 10, hour, 9, 0}, st{ok, 1, hour, 0, 3590})
	want(t, r.call(three), over, st{ok, 10, hour, 9, 3590}, st{ok, 10, hour, 9, 0}, st{over, 1, hour, 0, 3590})
	want(t, r.call(three), over, st{ok, 10, hour, 0, 3590}, st{ok, 10, hour, 0, 3590}, st{over, 1, hour, 0, 3590})
	// Nothing was charged by the refused requests.
	want(t, r.call(request("three", 1, d("a", "x"))), ok, st{ok, 10, hour, 8, 3590})
}
