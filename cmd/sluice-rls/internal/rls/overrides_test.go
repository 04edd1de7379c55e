package rls

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/admin"
	"github.com/sluice-go/sluice/cmd/sluice-rls/internal/rlsconf"
	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/overrides"
)

// ovrYAML has a rule counted per descriptor (policy fixed_window,
// identities rls/edge/remote_address=ADDR), one counted per client
// address as an application counts it (policy per-ip, identities
// ip:ADDR), and a rule per path beside them.
const ovrYAML = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 100}
`

const ovrGatewayYAML = `domain: gw
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: minute, requests_per_unit: 2, identity: ip}
`

// The names an operator gives the rule of ovrYAML and one address.
const (
	policyA   = "fixed_window"
	identityA = "rls/edge/remote_address=192.0.2.7"
)

// ovrRig is a rig whose Service obeys the overrides of a Store on a
// client of its own with client-side caching on, on the rig's clock.
type ovrRig struct {
	*rig
	srv   *redisserver.Server
	store *overrides.Store
}

var quiet = slog.New(slog.DiscardHandler)

func newOvrRig(t *testing.T, adjust func(*Options)) *ovrRig {
	t.Helper()
	srv := redisserver.Start(t)
	clk := newClock()
	store := newStore(t, srv, clk)
	r := newRig(t, newClient(t, []string{srv.Addr}, false), clk,
		config(t, map[string]string{"edge.yaml": ovrYAML, "gw.yaml": ovrGatewayYAML}), func(o *Options) {
			o.Overrides = store
			if adjust != nil {
				adjust(o)
			}
		})
	return &ovrRig{rig: r, srv: srv, store: store}
}

// newStore is a Store of srv's overrides on a client that caches (as
// sluice-rls makes it), on clk.
func newStore(t *testing.T, srv *redisserver.Server, clk *clock) *overrides.Store {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	store, err := overrides.New(c, overrides.Options{Logger: quiet, Clock: clk.Now, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !store.ClientCache() {
		t.Fatal("the Store does not read through the client's cache")
	}
	return store
}

// set stores o and waits until the Service's Store has heard of it.
func (r *ovrRig) set(o overrides.Override) {
	r.t.Helper()
	if err := r.store.Set(context.Background(), o); err != nil {
		r.t.Fatal(err)
	}
	r.sync(o.Policy)
}

func (r *ovrRig) remove(policy, identity string) {
	r.t.Helper()
	if ok, err := r.store.Remove(context.Background(), policy, identity); err != nil || !ok {
		r.t.Fatalf("Remove(%s, %s) = %v, %v", policy, identity, ok, err)
	}
	r.sync(policy)
}

func (r *ovrRig) sync(policy string) {
	r.t.Helper()
	if err := r.store.Sync(context.Background(), policy); err != nil {
		r.t.Fatal(err)
	}
}

// commands is what srv has run so far, INFO left out (INFO commandstats).
func commands(t *testing.T, srv *redisserver.Server) int64 {
	t.Helper()
	out, err := srv.Command("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(out, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q", line)
		}
		n += v
	}
	return n
}

func headerMap(resp *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}

// TestOverrideNames: the policy and identity of a rule's override are the
// limit name and identity of its state, as the Limiter keys it.
func TestOverrideNames(t *testing.T) {
	c := config(t, map[string]string{"edge.yaml": ovrYAML, "gw.yaml": ovrGatewayYAML})
	for _, tc := range []struct {
		domain, policy, identity string
	}{
		{"edge", policyA, identityA},
		{"gw", "per-ip", "ip:192.0.2.7"},
	} {
		entries := []rlsconf.Entry{{Key: "remote_address", Value: "192.0.2.7"}}
		m, ok := c.Lookup(tc.domain, entries)
		if !ok || m.Rule == nil {
			t.Fatalf("%s: no rule", tc.domain)
		}
		if m.Rule.Limit.Name != tc.policy || m.IdentityOf(tc.domain, entries) != tc.identity {
			t.Errorf("%s: policy %q identity %q, want %q %q", tc.domain, m.Rule.Limit.Name, m.IdentityOf(tc.domain, entries), tc.policy, tc.identity)
		}
	}
}

// TestOverrideRaise: a Limit override raises one address's limit (the
// others keep the rule's): the decision, current_limit and the headers
// are the override's; removing it restores the rule's limit, over the
// same count.
func TestOverrideRaise(t *testing.T) {
	r := newOvrRig(t, nil)
	r.set(overrides.Override{Policy: policyA, Identity: identityA, Kind: overrides.Limit, Rate: 5, Reason: "load test"})

	for i := range 6 {
		code, remaining := ok, uint32(4-i)
		if i == 5 {
			code, remaining = over, 0
		}
		resp := r.call(request("edge", 1, d("remote_address", "192.0.2.7")))
		want(t, resp, code, st{code, 5, minute, remaining, 50})
		if i == 0 {
			if h, w := headerMap(resp), map[string]string{
				"RateLimit-Policy": `"edge.remote_address";q=5;w=60`,
				"RateLimit":        `"edge.remote_address";r=4;t=50`,
			}; fmt.Sprint(h) != fmt.Sprint(w) {
				t.Errorf("headers %v, want %v", h, w)
			}
		}
	}
	// Another address keeps the rule's 2.
	want(t, r.call(request("edge", 1, d("remote_address", "192.0.2.8"))), ok, st{ok, 2, minute, 1, 50})

	// Removed: the rule's 2 again, and the 5 counted are over it until
	// the window ends.
	r.remove(policyA, identityA)
	resp := r.call(request("edge", 1, d("remote_address", "192.0.2.7")))
	want(t, resp, over, st{over, 2, minute, 0, 50})
	if p := headerMap(resp)["RateLimit-Policy"]; p != `"edge.remote_address";q=2;w=60` {
		t.Errorf("RateLimit-Policy %q after the removal", p)
	}
	r.clock.Advance(time.Minute)
	want(t, r.call(request("edge", 1, d("remote_address", "192.0.2.7"))), ok, st{ok, 2, minute, 1, 50})
}

// TestOverrideBlock: a blocked address is OVER_LIMIT until the override's
// Until, the request asks Redis nothing (its other descriptor is reported
// unasked and charged nothing), and at Until the rule applies again.
func TestOverrideBlock(t *testing.T) {
	r := newOvrRig(t, nil)
	r.set(overrides.Override{Policy: policyA, Identity: identityA, Kind: overrides.Block, Until: start.Add(90 * time.Second)})

	req := request("edge", 1, d("remote_address", "192.0.2.7"), d("path", "/a"))
	r.call(req) // the Store reads the change
	before := commands(t, r.srv)
	resp := r.call(req)
	if n := commands(t, r.srv) - before; n != 0 {
		t.Errorf("a blocked request sent Redis %d commands, want 0", n)
	}
	want(t, resp, over, st{over, 2, minute, 0, 90}, st{ok, 100, minute, 0, 50})
	if h, w := headerMap(resp), map[string]string{
		"RateLimit-Policy": `"edge.remote_address";q=2;w=60`,
		"RateLimit":        `"edge.remote_address";r=0;t=90`,
	}; fmt.Sprint(h) != fmt.Sprint(w) {
		t.Errorf("headers %v, want %v", h, w)
	}
	if got := r.counter(MetricOverLimit, "remote_address"); got != 2 {
		t.Errorf("over_limit %d, want 2", got)
	}
	// The path was charged nothing.
	want(t, r.call(request("edge", 1, d("path", "/a"))), ok, st{ok, 100, minute, 99, 50})

	// Until counts on the Store's clock: blocked until its last µs.
	r.clock.Advance(90*time.Second - time.Microsecond)
	want(t, r.call(req), over, st{over, 2, minute, 0, 1}, st{ok, 100, minute, 0, 0})
	r.clock.Advance(time.Microsecond)
	want(t, r.call(req), ok, st{ok, 2, minute, 1, 20}, st{ok, 100, minute, 99, 20})
}

// TestOverrideBlockShadow: under -shadow a block is reported, never
// enforced: the status says OVER_LIMIT, the overall code OK, and the
// request's other descriptors are decided and charged.
func TestOverrideBlockShadow(t *testing.T) {
	r := newOvrRig(t, func(o *Options) { o.Shadow = true })
	r.set(overrides.Override{Policy: policyA, Identity: identityA, Kind: overrides.Block})
	resp := r.call(request("edge", 1, d("remote_address", "192.0.2.7"), d("path", "/a")))
	want(t, resp, ok, st{over, 2, minute, 0, 3600}, st{ok, 100, minute, 99, 50})
	if got := r.counter(MetricGlobalShadow, ""); got != 1 {
		t.Errorf("global_shadow_mode %d, want 1", got)
	}
}

// TestOverrideExempt: an exempt address is OK, charged nothing and left
// out of the headers; once the exemption is removed it has the whole of
// the rule's limit.
func TestOverrideExempt(t *testing.T) {
	r := newOvrRig(t, nil)
	r.set(overrides.Override{Policy: policyA, Identity: identityA, Kind: overrides.Exempt, Until: start.Add(time.Hour), Reason: "monitoring"})
	var resp *rlsv3.RateLimitResponse
	for i := range 10 {
		resp = r.call(request("edge", 1, d("remote_address", "192.0.2.7"), d("path", "/a")))
		want(t, resp, ok, st{code: ok, remaining: 4294967295}, st{ok, 100, minute, uint32(99 - i), 50})
	}
	if h, w := headerMap(resp), map[string]string{
		"RateLimit-Policy": `"edge.path";q=100;w=60`,
		"RateLimit":        `"edge.path";r=90;t=50`,
	}; fmt.Sprint(h) != fmt.Sprint(w) {
		t.Errorf("headers %v, want %v", h, w)
	}
	if got := r.counter(MetricTotalHits, "remote_address"); got != 0 {
		t.Errorf("total_hits of the exempt rule %d, want 0", got)
	}
	r.remove(policyA, identityA)
	want(t, r.call(request("edge", 1, d("remote_address", "192.0.2.7"))), ok, st{ok, 2, minute, 1, 50})
}

// TestOverrideCLI: the operator's command names a rule's overrides as
// the Service looks them up, and lists them so.
func TestOverrideCLI(t *testing.T) {
	r := newOvrRig(t, nil)
	url := "redis://" + r.srv.Addr
	cli := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := admin.Run(context.Background(), args, &out, &errOut); code != admin.ExitOK {
			t.Fatalf("sluice %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
		}
		return out.String()
	}
	// The CLI's clock is the real one: these never end.
	cli("override", "set", "-redis", url, "-policy", "per-ip", "-block", "-reason", "abuse", "ip:192.0.2.9")
	cli("override", "set", "-redis", url, "-policy", "fixed_window", "-rate", "5", "rls/edge/remote_address=192.0.2.10")
	r.sync("per-ip")
	r.sync("fixed_window")

	want(t, r.call(request("gw", 1, d("remote_address", "192.0.2.9"))), over, st{over, 2, minute, 0, 3600})
	want(t, r.call(request("gw", 1, d("remote_address", "192.0.2.8"))), ok, st{ok, 2, minute, 1, 50})
	want(t, r.call(request("edge", 1, d("remote_address", "192.0.2.10"))), ok, st{ok, 5, minute, 4, 50})

	list := cli("override", "list", "-redis", url)
	for _, w := range []string{"per-ip", "ip:192.0.2.9", "block", "abuse", "fixed_window", "rls/edge/remote_address=192.0.2.10"} {
		if !strings.Contains(list, w) {
			t.Errorf("override list lacks %q:\n%s", w, list)
		}
	}
	cli("override", "rm", "-redis", url, "-policy", "per-ip", "ip:192.0.2.9")
	r.sync("per-ip")
	want(t, r.call(request("gw", 1, d("remote_address", "192.0.2.9"))), ok, st{ok, 2, minute, 1, 50})
}

// TestOverridesCostNothing: in steady state, requests to a Service with a
// Store (holding overrides of other addresses, and a raised limit of one
// address sent) send Redis exactly the commands of the same requests to a
// Service without one: the Store sends nothing.
func TestOverridesCostNothing(t *testing.T) {
	const yaml = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1000000}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1000000}
`
	srv := redisserver.Start(t)
	clk := newClock()
	store := newStore(t, srv, clk)
	ctx := context.Background()
	for i := range 50 {
		o := overrides.Override{Policy: policyA, Identity: "rls/edge/remote_address=198.51.100." + strconv.Itoa(i), Kind: overrides.Block}
		if i == 0 {
			o = overrides.Override{Policy: policyA, Identity: "rls/edge/remote_address=192.0.2.0", Kind: overrides.Limit, Rate: 2000000}
		}
		if err := store.Set(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Sync(ctx, policyA); err != nil {
		t.Fatal(err)
	}
	cfg := config(t, map[string]string{"edge.yaml": yaml})
	plain := newRig(t, newClient(t, []string{srv.Addr}, false), clk, cfg, nil)
	with := newRig(t, newClient(t, []string{srv.Addr}, false), clk, cfg, func(o *Options) { o.Overrides = store })
	var reqs []*rlsv3.RateLimitRequest
	for i := range 10 {
		reqs = append(reqs, request("edge", 1, d("remote_address", "192.0.2."+strconv.Itoa(i)), d("path", "/a")))
	}
	run := func(r *rig) int64 {
		for _, req := range reqs { // steady state: scripts loaded, overrides read
			r.call(req)
		}
		before := commands(t, srv)
		for i := range 100 {
			if resp := r.call(reqs[i%len(reqs)]); resp.GetOverallCode() != ok {
				t.Fatalf("request %d refused: %v", i, resp)
			}
		}
		return commands(t, srv) - before
	}
	without, withStore := run(plain), run(with)
	t.Logf("100 admitted requests of 2 descriptors: %d commands without overrides, %d with", without, withStore)
	if withStore != without {
		t.Errorf("with a Store %d commands, without %d: want the same", withStore, without)
	}
	// The raised address was decided under its override.
	want(t, with.call(reqs[0]), ok, st{ok, 2000000, minute, 2000000 - 23, 50}, st{ok, 1000000, minute, 1000000 - 221, 50})
}

// TestOverrideDescriptorLimit: a descriptor's own limit (Envoy's) counts
// the descriptor's state, and an override of that state applies to it.
func TestOverrideDescriptorLimit(t *testing.T) {
	r := newOvrRig(t, nil)
	req := request("edge", 1, d("remote_address", "192.0.2.7"))
	req.Descriptors[0].Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE}
	want(t, r.call(req), ok, st{ok, 3, minute, 2, 50})
	r.set(overrides.Override{Policy: policyA, Identity: identityA, Kind: overrides.Block, Until: start.Add(10 * time.Second)})
	want(t, r.call(req), over, st{over, 3, minute, 0, 10})
	r.set(overrides.Override{Policy: policyA, Identity: identityA, Kind: overrides.Limit, Rate: 10})
	want(t, r.call(req), ok, st{ok, 10, minute, 8, 50})
}

// TestCurrentLimit: current_limit of a Limit override is its rate per its
// period when that is a unit, else per the rule's unit, rounded down.
func TestCurrentLimit(t *testing.T) {
	rule := &rlsconf.Rule{Name: "r", Unit: "minute"}
	for _, tc := range []struct {
		rate   int64
		period time.Duration
		rpu    uint32
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{30, time.Minute, 30, minute},
		{3, time.Second, 3, second},
		{500, 24 * time.Hour, 500, day},
		{30, 90 * time.Second, 20, minute},
		{1, 2 * time.Minute, 1, minute}, // half a request a minute: at least 1
	} {
		cl := currentLimit(rule, sluice.Limit{Algorithm: sluice.AlgGCRA, Rate: tc.rate, Period: tc.period, Burst: tc.rate, Name: "r"})
		if cl.GetRequestsPerUnit() != tc.rpu || cl.GetUnit() != tc.unit || cl.GetName() != "r" {
			t.Errorf("%d per %v: current_limit %v, want %d per %v", tc.rate, tc.period, cl, tc.rpu, tc.unit)
		}
	}
}
