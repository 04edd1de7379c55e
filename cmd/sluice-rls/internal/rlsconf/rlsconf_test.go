package rlsconf

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policyfile"
)

func load(t *testing.T, opts Options, names ...string) *Config {
	t.Helper()
	var files []File
	for _, n := range names {
		p := filepath.Join("testdata", "valid", n)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, File{Name: p, Data: data})
	}
	c, err := Build(files, opts)
	if err != nil {
		t.Fatalf("Build(%v): %v", names, err)
	}
	return c
}

func entries(kv ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{kv[i], kv[i+1]})
	}
	return out
}

// want is what a lookup should find: no rule (rpu < 0), or a rule of rpu
// per unit whose statistics are named stats.
type want struct {
	entries []Entry
	rpu     int64 // -1: no rule
	unit    string
	stats   string
	check   func(t *testing.T, m Match)
}

func checkLookups(t *testing.T, c *Config, domain string, cases []want) {
	t.Helper()
	for _, w := range cases {
		m, ok := c.Lookup(domain, w.entries)
		if !ok {
			t.Fatalf("Lookup(%s, %v): domain unknown", domain, w.entries)
		}
		if w.rpu < 0 {
			if m.Rule != nil {
				t.Errorf("Lookup(%v) = rule %s, want none", w.entries, m.Rule.Key)
			}
			continue
		}
		if m.Rule == nil {
			t.Errorf("Lookup(%v) = no rule, want %d per %s", w.entries, w.rpu, w.unit)
			continue
		}
		if int64(m.Rule.RequestsPerUnit) != w.rpu || (w.unit != "" && m.Rule.Unit != w.unit) {
			t.Errorf("Lookup(%v) = %d per %s, want %d per %s", w.entries, m.Rule.RequestsPerUnit, m.Rule.Unit, w.rpu, w.unit)
		}
		if w.stats != "" && m.StatsKey != w.stats {
			t.Errorf("Lookup(%v).StatsKey = %q, want %q", w.entries, m.StatsKey, w.stats)
		}
		if w.check != nil {
			w.check(t, m)
		}
	}
}

// TestBasic follows envoyproxy/ratelimit's basic configuration test: the
// most specific rule applies, a value without a rule is never limited, a
// descriptor deeper or shallower than the rules has none.
func TestBasic(t *testing.T) {
	c := load(t, Options{}, "basic.yaml")
	if _, ok := c.Lookup("other", entries("client", "x")); ok {
		t.Error("an unknown domain was found")
	}
	if m, ok := c.Lookup("edge", nil); !ok || m.Rule != nil {
		t.Errorf("Lookup(edge, no entries) = %v, %v; want no rule", m.Rule, ok)
	}
	named := func(name string) func(*testing.T, Match) {
		return func(t *testing.T, m Match) {
			if m.Rule.Name != name {
				t.Errorf("%s: name %q, want %q", m.Rule.Key, m.Rule.Name, name)
			}
		}
	}
	checkLookups(t, c, "edge", []want{
		{entries: entries("tenant", "other"), rpu: -1},
		{entries: entries("tenant", "acme"), rpu: -1},
		{entries: entries("client", "partner", "extra", "x"), rpu: -1},
		{entries: entries("batch", "nightly", "job", "other"), rpu: -1},
		{entries: entries("tenant", "acme", "path", "/x"), rpu: 5, unit: "second", stats: "edge.tenant_acme.path"},
		{entries: entries("tenant", "acme", "path", "/upload"), rpu: 10, unit: "second", stats: "edge.tenant_acme.path_/upload"},
		{entries: entries("client", "anyone"), rpu: 20, unit: "minute", stats: "edge.client"},
		{entries: entries("client", "partner"), rpu: 30, unit: "minute", stats: "edge.client_partner"},
		{entries: entries("client", "internal"), rpu: -1},
		{entries: entries("region", "eu"), rpu: 1, unit: "hour", stats: "edge.region", check: named("")},
		{entries: entries("plan", "free"), rpu: 1, unit: "day", stats: "edge.plan", check: named("plan_daily")},
		{entries: entries("batch", "nightly"), rpu: 15, unit: "day", stats: "edge.batch_nightly"},
		{entries: entries("batch", "nightly", "job", "export"), rpu: 25, unit: "day", stats: "edge.batch_nightly.job_export"},
		{entries: entries("health", "x"), rpu: 0, check: func(t *testing.T, m Match) {
			if !m.Rule.Unlimited || m.Rule.Limit != (sluice.Limit{}) {
				t.Errorf("health: Unlimited %v, Limit %+v; want unlimited, no limit", m.Rule.Unlimited, m.Rule.Limit)
			}
		}},
		{entries: entries("user", "alice"), rpu: 70, stats: "edge.user_alice"},
		{entries: entries("user", "bob"), rpu: 70, stats: "edge.user_bob"},
	})
	// The limit sluice counts: a fixed window of the unit, named after
	// its algorithm, so that other numbers keep the count.
	m, _ := c.Lookup("edge", entries("client", "anyone"))
	if want := (sluice.Limit{Algorithm: sluice.AlgFixedWindow, Rate: 20, Period: time.Minute, Name: "fixed_window"}); m.Rule.Limit != want {
		t.Errorf("client's Limit = %+v, want %+v", m.Rule.Limit, want)
	}
	if got := c.Domains(); !slices.Equal(got, []string{"edge"}) {
		t.Errorf("Domains() = %v", got)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}
}

func TestShadow(t *testing.T) {
	c := load(t, Options{}, "shadow.yaml")
	shadow := func(want bool) func(*testing.T, Match) {
		return func(t *testing.T, m Match) {
			if m.Rule.Shadow != want {
				t.Errorf("%s: Shadow %v, want %v", m.Rule.Key, m.Rule.Shadow, want)
			}
		}
	}
	checkLookups(t, c, "edge-shadow", []want{
		{entries: entries("tenant", "acme", "path", "/x"), rpu: 5, check: shadow(false)},
		{entries: entries("tenant", "acme", "path", "/upload"), rpu: 10, check: shadow(true)},
		{entries: entries("client", "x"), rpu: 20, check: shadow(true)},
		{entries: entries("client", "partner"), rpu: 30, check: shadow(false)},
	})
}

func TestWildcard(t *testing.T) {
	c := load(t, Options{}, "wildcard.yaml")
	notShared := func(t *testing.T, m Match) {
		if m.Shared != nil {
			t.Errorf("%s: Shared %v without share_threshold", m.Rule.Key, m.Shared)
		}
	}
	checkLookups(t, c, "edge-wild", []want{
		{entries: entries("anyvalue", "1"), rpu: 20, stats: "edge-wild.anyvalue"},
		{entries: entries("path", "/api/users"), rpu: 20, stats: "edge-wild.path_/api/*", check: notShared},
		{entries: entries("path", "/api/orders"), rpu: 20, stats: "edge-wild.path_/api/*"},
		{entries: entries("path", "/api/"), rpu: 20},
		{entries: entries("tenant", "acme", "path", "/v2/x"), rpu: 20, stats: "edge-wild.tenant_acme.path_/v2/*"},
		{entries: entries("path", "/other"), rpu: -1},
		{entries: entries("exact", "/api/users"), rpu: -1}, // no eager match without '*'
		{entries: entries("middle", "abz"), rpu: -1},       // only a trailing '*' is a wildcard
		{entries: entries("middle", "a*z"), rpu: 20},       // ... elsewhere it is a character
	})
	// Without share_threshold each value has its own count.
	a, _ := c.Lookup("edge-wild", entries("path", "/api/users"))
	b, _ := c.Lookup("edge-wild", entries("path", "/api/orders"))
	if a.IdentityOf("edge-wild", entries("path", "/api/users")) == b.IdentityOf("edge-wild", entries("path", "/api/orders")) {
		t.Error("two values of a wildcard without share_threshold share an identity")
	}
}

func TestShareThreshold(t *testing.T) {
	c := load(t, Options{}, "share_threshold.yaml")
	shared := func(want ...string) func(*testing.T, Match) {
		return func(t *testing.T, m Match) {
			if !slices.Equal(m.Shared, want) {
				t.Errorf("%s: Shared %q, want %q", m.Rule.Key, m.Shared, want)
			}
		}
	}
	checkLookups(t, c, "edge-share", []want{
		{entries: entries("object", "img/a.png"), rpu: 100, stats: "edge-share.object_img/*", check: shared("img/*")},
		{entries: entries("object", "img/b.gif"), rpu: 100, stats: "edge-share.object_img/*", check: shared("img/*")},
		{entries: entries("tenant", "acme", "object", "doc/x"), rpu: 200, stats: "edge-share.tenant_acme.object_doc/*", check: shared("", "doc/*")},
		{entries: entries("object", "top/1", "object", "sub/2"), rpu: 300, stats: "edge-share.object_top/*.object_sub/*", check: shared("top/*", "sub/*")},
		// share_threshold wins over value_to_metric and detailed_metric.
		{entries: entries("route", "v1/users", "verb", "GET"), rpu: 60, stats: "edge-share.route_v1/*.verb", check: shared("v1/*", "")},
		{entries: entries("service", "svc/user", "call", "get"), rpu: 80, stats: "edge-share.service_svc/*.call_get", check: shared("svc/*", "")},
		// A wildcard without share_threshold below one with it.
		{entries: entries("dir", "d/x", "file", "f/y", "kind", "pdf"), rpu: 120, stats: "edge-share.dir_d/*.file_f/*.kind", check: shared("d/*", "", "")},
		// A value written out wins over a wildcard, and is not shared.
		{entries: entries("name", "one"), rpu: 50, stats: "edge-share.name_one", check: shared()},
		{entries: entries("name", "other"), rpu: 100, stats: "edge-share.name_o*", check: shared("o*")},
		{entries: entries("name", "oz"), rpu: 100, stats: "edge-share.name_o*", check: shared("o*")},
	})
	// Every value a shared wildcard matches is one identity.
	m1, _ := c.Lookup("edge-share", entries("object", "img/a.png"))
	m2, _ := c.Lookup("edge-share", entries("object", "img/b.gif"))
	id1, id2 := m1.IdentityOf("edge-share", entries("object", "img/a.png")), m2.IdentityOf("edge-share", entries("object", "img/b.gif"))
	if id1 != id2 {
		t.Errorf("shared wildcard: identities %q and %q differ", id1, id2)
	}
	if want := "rls/edge-share/object=img%2F*"; id1 != want {
		t.Errorf("identity %q, want %q", id1, want)
	}
}

func TestMergeDomains(t *testing.T) {
	c := load(t, Options{MergeDomains: true}, "merge_a.yaml", "merge_b.yaml")
	checkLookups(t, c, "edge-merged", []want{
		{entries: entries("a", "one"), rpu: 10},
		{entries: entries("b", "two"), rpu: 20},
	})
	_, err := Build([]File{{"a.yaml", []byte("domain: d\n")}, {"b.yaml", []byte("domain: d\n")}}, Options{})
	wantErrors(t, err, "b.yaml:1:9: duplicate domain 'd' in config file (first in a.yaml:1:9)")
}

// TestStatsKeys follows envoyproxy/ratelimit's tests of detailed_metric and
// value_to_metric: which values the name of a rule's statistics holds.
func TestStatsKeys(t *testing.T) {
	const nested = `
domain: nested
descriptors:
  - key: k1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: k1
    value: fixed
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: k2
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5000}
    descriptors:
      - key: k3
        detailed_metric: true
      - key: k3
        value: picked
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: inner
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: top
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: inner
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value_to_metric: true
        descriptors:
          - key: subject
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: m1
    descriptors:
      - key: m2
        value_to_metric: true
        descriptors:
          - key: m3
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: wild
    value: foo*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: wild2
    value: foo*
    descriptors:
      - key: other
        value_to_metric: true
        descriptors:
          - key: last
            rate_limit: {unit: minute, requests_per_unit: 20}
  - key: u
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 10}
  - key: dm
    value_to_metric: true
    descriptors:
      - key: dm2
        value_to_metric: true
        descriptors:
          - key: dm3
            detailed_metric: true
            rate_limit: {unit: minute, requests_per_unit: 60}
`
	c, err := Build([]File{{"nested.yaml", []byte(nested)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkLookups(t, c, "nested", []want{
		{entries: entries("k1", "v"), rpu: 500, stats: "nested.k1_v"},
		{entries: entries("k2", "v2"), rpu: 5000, stats: "nested.k2_v2"},
		{entries: entries("k2", "v2", "k3", "picked"), rpu: 5, stats: "nested.k2_v2.k3_picked"},
		{entries: entries("plain", "p"), rpu: 100, stats: "nested.plain"},
		{entries: entries("plain", "p", "inner", "i"), rpu: 5, stats: "nested.plain.inner"},
		{entries: entries("top", "t"), rpu: 100, stats: "nested.top_t"},
		{entries: entries("top", "t", "inner", "i"), rpu: 5, stats: "nested.top_t.inner_i"},
		{entries: entries("route", "draw", "method", "GET", "subject", "123"), rpu: 60, stats: "nested.route_draw.method_GET.subject"},
		{entries: entries("route", "", "method", "GET", "subject", "123"), rpu: 60, stats: "nested.route.method_GET.subject"},
		{entries: entries("route", "", "method", "", "subject", "1"), rpu: 60, stats: "nested.route.method.subject"},
		{entries: entries("m1", "X", "m2", "Y", "m3", "Z"), rpu: 60, stats: "nested.m1.m2_Y.m3"},
		{entries: entries("wild", "foo1"), rpu: 20, stats: "nested.wild_foo1"},
		{entries: entries("wild2", "foo1", "other", "bar", "last", "X"), rpu: 20, stats: "nested.wild2_foo*.other_bar.last"},
		{entries: entries("u", "alice", "action", "readfile", "resource", "docs"), rpu: 10, stats: "nested.u_alice.action_readfile.resource"},
		{entries: entries("dm", "draw", "dm2", "GET", "dm3", "123"), rpu: 60, stats: "nested.dm_draw.dm2_GET.dm3_123"},
	})
}

// TestExtensions covers sluice's own keys: algorithm, burst and identity.
func TestExtensions(t *testing.T) {
	const file = `
domain: ext
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 20}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket}
  - key: c
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_window}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 100, name: per-ip, identity: ip}
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100, name: per-key, identity: api_key}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100, name: per-tenant, identity: {header: X-Tenant}}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
`
	c, err := Build([]File{{"ext.yaml", []byte(file)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim := func(kv ...string) (Match, string) {
		m, _ := c.Lookup("ext", entries(kv...))
		return m, m.IdentityOf("ext", entries(kv...))
	}
	m, id := lim("a", "x")
	if want := (sluice.Limit{Algorithm: sluice.AlgGCRA, Rate: 10, Period: time.Second, Burst: 20, Name: "gcra"}); m.Rule.Limit != want {
		t.Errorf("a: %+v, want %+v", m.Rule.Limit, want)
	}
	if id != "rls/ext/a=x" {
		t.Errorf("a: identity %q", id)
	}
	if m, _ := lim("b", "x"); m.Rule.Limit.Burst != 10 {
		t.Errorf("b: burst %d, want requests_per_unit (10)", m.Rule.Limit.Burst)
	}
	if m, _ := lim("c", "x"); m.Rule.Limit.Algorithm != sluice.AlgSlidingWindow || m.Rule.Limit.Period != time.Hour {
		t.Errorf("c: %+v", m.Rule.Limit)
	}
	for _, tc := range []struct {
		kv       []string
		identity string
		name     string
	}{
		{[]string{"remote_address", "192.0.2.7"}, "ip:192.0.2.7", "per-ip"},
		{[]string{"remote_address", "2001:db8:1:2:3:4:5:6"}, "ip:2001:db8:1:2::/64", "per-ip"},
		{[]string{"remote_address", "::ffff:192.0.2.7"}, "ip:192.0.2.7", "per-ip"},
		{[]string{"remote_address", "not an address"}, "rls/ext/remote_address=not an address", "per-ip"},
		{[]string{"api_key", "secret"}, "key:2bb80d537b1da3e38bd30361aa855686", "per-key"},
		{[]string{"tenant", "acme"}, "hdr:x-tenant:acme", "per-tenant"},
	} {
		m, id := lim(tc.kv...)
		if id != tc.identity || m.Rule.Limit.Name != tc.name {
			t.Errorf("%v: identity %q, limit %q; want %q, %q", tc.kv, id, m.Rule.Limit.Name, tc.identity, tc.name)
		}
	}
	if m, _ := lim("zero", "x"); m.Rule == nil || m.Rule.Limit != (sluice.Limit{}) || m.Rule.RequestsPerUnit != 0 {
		t.Errorf("zero: %+v", m.Rule)
	}
}

func TestDescriptorIdentityInjective(t *testing.T) {
	seen := map[string][]string{}
	for _, tc := range [][]string{
		{"d", "a", "b/c=d"},
		{"d", "a", "b", "c", "d"},
		{"d/a", "b", "c"},
		{"d", "a", "b%2Fc%3Dd"},
		{"d", "a=b", ""},
		{"d", "a", "=b"},
	} {
		id := DescriptorIdentity(tc[0], entries(tc[1:]...), nil)
		if prev, ok := seen[id]; ok {
			t.Errorf("%v and %v share identity %q", prev, tc, id)
		}
		seen[id] = tc
	}
}

func wantErrors(t *testing.T, err error, want ...string) {
	t.Helper()
	var es policyfile.Errors
	if !errors.As(err, &es) {
		t.Fatalf("error %v (%T), want policyfile.Errors", err, err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Error())
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestRefused follows envoyproxy/ratelimit's invalid configuration tests,
// and refuses what sluice cannot count; each problem at its place.
func TestRefused(t *testing.T) {
	cases := []struct {
		name, file string
		want       []string
	}{
		{"empty domain", "descriptors:\n", []string{"f.yaml:1:1: config file cannot have empty domain"}},
		{"empty file", "", []string{"f.yaml:1:1: config file cannot have empty domain"}},
		{"blank domain", "domain: ''\n", []string{`f.yaml:1:9: config file cannot have empty domain`}},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", []string{"f.yaml:3:5: descriptor has empty key"}},
		{"duplicate key", "domain: d\ndescriptors:\n  - key: k\n    value: v\n\n  - key: k\n    value: v\n",
			[]string{"f.yaml:6:5: duplicate descriptor composite key 'd.k_v' (first at f.yaml:3:5)"}},
		{"composite keys collide", "domain: d\ndescriptors:\n  - key: k_v\n  - key: k\n    value: v\n",
			[]string{"f.yaml:4:5: duplicate descriptor composite key 'd.k_v' (first at f.yaml:3:5)"}},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n",
			[]string{"f.yaml:5:13: invalid rate limit unit 'fortnight' (want second, minute, hour, day, week, month or year)"}},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n",
			[]string{"f.yaml:5:7: invalid rate limit unit '' (want second, minute, hour, day, week, month or year)"}},
		{"unknown unit name", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: unknown, requests_per_unit: 5}\n",
			[]string{"f.yaml:4:24: invalid rate limit unit 'unknown' (want second, minute, hour, day, week, month or year)"}},
		{"bad yaml", "'''\n", []string{"f.yaml:2:1: error loading config file: found unexpected end of stream"}},
		{"misspelled rate_limit", "domain: d\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: day\n      requests_per_unit: 5\n",
			[]string{`f.yaml:4:5: config error, unknown key 'ratelimit' in a descriptor (did you mean "rate_limit"?)`}},
		{"misspelled requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n",
			[]string{`f.yaml:6:7: config error, unknown key 'requestsperunit' in rate_limit (did you mean "requests_per_unit"?)`}},
		{"non-string key", "0.25: d\ndescriptors:\n  - key: k\n", []string{
			"f.yaml:1:1: config error, key is not of type string: 0.25",
			"f.yaml:1:1: config file cannot have empty domain",
		}},
		{"list of strings", "domain: d\ndescriptors:\n  - a\n  - b\n", []string{
			"f.yaml:3:5: config error, yaml file contains list of type other than map: a",
			"f.yaml:4:5: config error, yaml file contains list of type other than map: b",
		}},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name:\n      unit: second\n      requests_per_unit: 5\n",
			[]string{"f.yaml:7:16: should not have an empty replaces entry"}},
		{"replaces self", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name: self\n      unit: second\n      requests_per_unit: 5\n",
			[]string{"f.yaml:7:17: replaces should not contain name of same descriptor"}},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n",
			[]string{"f.yaml:6:13: should not specify rate limit unit when unlimited"}},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: {unit: day, requests_per_unit: 1}\n",
			[]string{"f.yaml:3:5: share_threshold can only be used with wildcard values (ending with '*'), but found key 'k_v'"}},
		{"float value", "domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n",
			[]string{"f.yaml:4:12: config error, value: 1.5 is not a whole number (quote it to mean text)"}},
		{"fractional requests", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 2.5}\n",
			[]string{"f.yaml:4:48: requests_per_unit: want a whole number from 0 to 4294967295, not 2.5"}},
		{"negative requests", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: -1}\n",
			[]string{"f.yaml:4:48: requests_per_unit: want a whole number from 0 to 4294967295, not -1"}},
		{"quoted requests", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: '5'}\n",
			[]string{`f.yaml:4:48: requests_per_unit: want a whole number from 0 to 4294967295, not the string "5"`}},
		{"value a mapping", "domain: d\ndescriptors:\n  - key: k\n    value: {a: b}\n",
			[]string{"f.yaml:4:12: value: want a string, not a mapping", "f.yaml:4:13: config error, unknown key 'a' in a mapping"}},
		{"shadow_mode a string", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: 'true'\n",
			[]string{`f.yaml:4:18: shadow_mode: want true or false, not the string "true"`}},
		{"top level a list", "- domain: d\n", []string{"f.yaml:1:1: a config file is a mapping with a domain and its descriptors, not a list"}},
		{"key given twice", "domain: d\ndomain: e\n", []string{"f.yaml:2:1: key \"domain\" given twice (first at line 1)"}},
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, algorithm: gcr}\n",
			[]string{`f.yaml:4:62: algorithm 'gcr': want one of fixed_window, gcra, token_bucket, sliding_window, sliding_log or concurrency (did you mean "gcra"?)`}},
		{"burst for a fixed window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, burst: 5}\n",
			[]string{"f.yaml:4:58: burst is for gcra and token_bucket, not fixed_window"}},
		{"algorithm beside unlimited", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, algorithm: gcra}\n",
			[]string{"f.yaml:4:46: algorithm means nothing beside unlimited"}},
		{"identity without a name", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, identity: ip}\n",
			[]string{"f.yaml:4:61: identity needs the rule's name to be the name of the application's limit it shares (1 to 64 letters, digits, '.', '_' or '-'), got name ''"}},
		{"unknown identity", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, name: n, identity: addr}\n",
			[]string{"f.yaml:4:70: identity: want ip, api_key, subject, {header: NAME} or {metadata: NAME}"}},
		{"extension outside rate_limit", "domain: d\ndescriptors:\n  - key: k\n    algorithm: gcra\n",
			[]string{"f.yaml:4:5: config error, unknown key 'algorithm' in a descriptor (sluice's algorithm goes in rate_limit)"}},
		{"every problem at once", "domain: d\ndescriptors:\n  - value: v\n  - key: k\n    rate_limit: {unit: fortnight}\n",
			[]string{"f.yaml:3:5: descriptor has empty key", "f.yaml:5:24: invalid rate limit unit 'fortnight' (want second, minute, hour, day, week, month or year)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build([]File{{"f.yaml", []byte(tc.file)}}, Options{})
			wantErrors(t, err, tc.want...)
		})
	}
	// Two files: the duplicate domain, and a descriptor given twice in a
	// merged domain.
	basic, err := os.ReadFile("testdata/valid/basic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build([]File{{"basic.yaml", basic}, {"dup.yaml", []byte("domain: edge\ndescriptors:\n")}}, Options{})
	wantErrors(t, err, "dup.yaml:1:9: duplicate domain 'edge' in config file (first in basic.yaml:4:9)")
	merge, err := os.ReadFile("testdata/valid/merge_a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build([]File{{"a.yaml", merge}, {"a2.yaml", merge}}, Options{MergeDomains: true})
	wantErrors(t, err, "a2.yaml:4:5: duplicate descriptor composite key 'edge-merged.a_one' (first at a.yaml:4:5)")
}

// TestAcceptedAsEnvoyDoes: what envoyproxy/ratelimit's reader accepts is
// accepted (numbers and booleans as text, YAML 1.1 booleans, a known key
// in a place where it means nothing, a rule without a unit when
// unlimited), the last with a warning.
func TestAcceptedAsEnvoyDoes(t *testing.T) {
	const file = `domain: 5
descriptors:
  - key: port
    value: 8080
    shadow_mode: yes
    unit: minute
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: flag
    value: true
    rate_limit:
      unlimited: true
  - key: meta
    metadata: {anything: [1, 2.5, {x: y}]}
    rate_limit: {unit: second, requests_per_unit: 1}
`
	c, err := Build([]File{{"f.yaml", []byte(file)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkLookups(t, c, "5", []want{
		{entries: entries("port", "8080"), rpu: 3, check: func(t *testing.T, m Match) {
			if !m.Rule.Shadow {
				t.Error("shadow_mode: yes is not true")
			}
		}},
		{entries: entries("flag", "true"), rpu: 0},
		{entries: entries("meta", "x"), rpu: 1},
	})
	if len(c.Warnings) != 1 || c.Warnings[0].Error() != "f.yaml:6:5: unit means nothing in a descriptor and is ignored (as envoyproxy/ratelimit ignores it)" {
		t.Errorf("warnings: %v", c.Warnings)
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Load(dir, Options{}); err == nil || !strings.Contains(err.Error(), "holds no configuration file") {
		t.Errorf("empty dir: %v", err)
	}
	write("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write("b.yml", "domain: b\n")
	write(".hidden.yaml", "not: read\n")
	write("notes.txt", "not read\n")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Domains(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("domains %v", got)
	}
	if len(c.Files) != 2 {
		t.Errorf("files %v", c.Files)
	}
}

func TestLookupAllocations(t *testing.T) {
	c := load(t, Options{}, "basic.yaml")
	e := entries("tenant", "acme", "path", "/upload")
	allocs := testing.AllocsPerRun(100, func() {
		if m, _ := c.Lookup("edge", e); m.Rule == nil {
			t.Fatal("no rule")
		}
	})
	if allocs != 0 {
		t.Errorf("Lookup of a plain rule allocates %.0f times", allocs)
	}
}
