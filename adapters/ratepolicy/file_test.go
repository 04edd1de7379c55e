package ratepolicy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/policyfile"
)

// fakeReq is a request of a made-up adapter: a context and named values.
type fakeReq struct {
	ctx    context.Context
	values map[string]string
}

// fakeAdapter counts the KeyFuncs it builds.
func fakeAdapter(built map[string]int) FileAdapter[fakeReq] {
	value := func(name string) func(fakeReq) (string, bool) {
		return func(r fakeReq) (string, bool) { v, ok := r.values[name]; return v, ok && v != "" }
	}
	return FileAdapter[fakeReq]{
		Name: "fake", Routes: "routes", Without: []string{"methods", "error_domain"},
		Context: func(r fakeReq) context.Context { return r.ctx },
		IP: func(o IPOptions) (func(fakeReq) (string, bool), error) {
			built["ip"]++
			if _, err := NewResolver("fake", o); err != nil {
				return nil, err
			}
			return func(r fakeReq) (string, bool) { return "ip:" + r.values["peer"], true }, nil
		},
		APIKey: func(h string) func(fakeReq) (string, bool) {
			built["api_key"]++
			get := value(h)
			return func(r fakeReq) (string, bool) { v, _ := get(r); return APIKeyKey(v) }
		},
		Header: func(h string) func(fakeReq) (string, bool) {
			built["header"]++
			get := value(h)
			return func(r fakeReq) (string, bool) {
				v, ok := get(r)
				return Tagged("hdr:"+h, v), ok
			}
		},
		Route: func(route string) func(fakeReq) (string, bool) {
			built["route"]++
			if route == "" {
				return nil
			}
			return func(fakeReq) (string, bool) { return Tagged("route", route), true }
		},
		HeaderValue: value,
	}
}

func parse(t *testing.T, src string) *policyfile.Config {
	t.Helper()
	c, err := policyfile.Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A named identity is built once however many policies use it, and once
// per routes entry when it keys by the route.
func TestFromFileBuildsNamedIdentitiesOnce(t *testing.T) {
	c := parse(t, `
identities:
  client: {ip: {trusted_proxies: [10.0.0.0/8], header: x-forwarded-for}}
  where: {join: [route, client]}
policies:
  - {name: a, limit: {algorithm: gcra, rate: 1, period: 1s}, key: client}
  - {name: b, limit: {algorithm: gcra, rate: 1, period: 1s}, key: {first_of: [client, {api_key: {header: k}}]}}
routes:
  /x: [{name: c, limit: {algorithm: gcra, rate: 1, period: 1s}, key: where}, {name: d, limit: {algorithm: gcra, rate: 1, period: 1s}, key: where}]
  /y: [{name: e, limit: {algorithm: gcra, rate: 1, period: 1s}, key: where}]
`)
	built := map[string]int{}
	fc, err := FromFile(c, fakeAdapter(built))
	if err != nil {
		t.Fatal(err)
	}
	if built["ip"] != 1 || built["route"] != 2 || built["api_key"] != 1 {
		t.Errorf("built %v, want ip once, route once per entry, api_key once", built)
	}
	r := fakeReq{ctx: context.Background(), values: map[string]string{"peer": "192.0.2.1"}}
	want, _ := Join(
		func(fakeReq) (string, bool) { return "route:/x", true },
		func(fakeReq) (string, bool) { return "ip:192.0.2.1", true })(r)
	if k, _ := fc.Routes["/x"][0].Key(r); k != want {
		t.Errorf("key under /x = %q, want %q", k, want)
	}
	if fc.Policies[0].Limit.Name != "a" || fc.Routes["/y"][0].Name != "e" {
		t.Errorf("policies %+v", fc.Policies[0])
	}
}

// A Config built by hand is checked as a parsed one: a circle of named
// identities, an unknown one, fields the adapter lacks, a bad limit.
func TestFromFileHandBuilt(t *testing.T) {
	ref := func(n string) policyfile.Identity { return policyfile.Identity{Kind: policyfile.KindRef, Ref: n} }
	c := &policyfile.Config{
		Identities: map[string]policyfile.Identity{
			"a": {Kind: policyfile.KindFirstOf, Parts: []policyfile.Identity{ref("b")}},
			"b": ref("a"),
		},
		Policies: []policyfile.Policy{
			{Name: "p", Limit: policyfile.Limit{Algorithm: "gcra", Rate: 1, Period: 1e9, Burst: 1}, Key: ref("a")},
			{Name: "q", Limit: policyfile.Limit{Algorithm: "gcra", Rate: 0, Period: 1e9, Burst: 1}, Key: ref("nobody")},
			{Name: "r", Limit: policyfile.Limit{Algorithm: "gcra", Rate: 1, Period: 1e9, Burst: 1}, Key: policyfile.Identity{Kind: policyfile.KindMetadata, Name: "x"}},
		},
		Methods:     map[string][]policyfile.Policy{},
		ErrorDomain: "d",
	}
	_, err := FromFile(c, fakeAdapter(map[string]int{}))
	var es policyfile.Errors
	if !errors.As(err, &es) {
		t.Fatalf("FromFile = %v, want policyfile.Errors", err)
	}
	for _, want := range []string{
		"error_domain: not for fake", "methods: not for fake", `identity "a" refers to itself`,
		`unknown identity "nobody"`, "rate must be at least 1", "metadata identity: not for fake",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
}

// The tier of a request: a value read, looked up in the table when there
// is one; "" (the default tier) when there is none.
func TestFromFileTier(t *testing.T) {
	r := func(values map[string]string, claims map[string]string) fakeReq {
		return fakeReq{ctx: WithClaims(context.Background(), claims), values: values}
	}
	for _, tc := range []struct {
		tiers string
		req   fakeReq
		want  string
	}{
		{"header: plan", r(map[string]string{"plan": "pro"}, nil), "pro"},
		{"header: plan", r(nil, nil), ""},
		{"{header: plan, table: {acme: pro}}", r(map[string]string{"plan": "acme"}, nil), "pro"},
		{"{header: plan, table: {acme: pro}}", r(map[string]string{"plan": "pro"}, nil), ""},
		{"claim: plan", r(nil, map[string]string{"plan": "pro"}), "pro"},
		{"claim: plan", r(nil, map[string]string{"org": "pro"}), ""},
		{`{key: {api_key: {header: k}}, table: {"key:2bb80d537b1da3e38bd30361aa855686": pro}}`, r(map[string]string{"k": "secret"}, nil), "pro"},
		{`{key: {api_key: {header: k}}, table: {"key:2bb80d537b1da3e38bd30361aa855686": pro}}`, r(map[string]string{"k": "other"}, nil), ""},
		{`{key: {api_key: {header: k}}, table: {"key:2bb80d537b1da3e38bd30361aa855686": pro}}`, r(nil, nil), ""},
	} {
		src := strings.Replace("tiers: {SRC, default: free, policies: {free: [], pro: [{name: p, limit: {algorithm: gcra, rate: 1, period: 1s}, key: ip}]}}",
			"SRC", strings.TrimSuffix(strings.TrimPrefix(tc.tiers, "{"), "}"), 1)
		fc, err := FromFile(parse(t, src), fakeAdapter(map[string]int{}))
		if err != nil {
			t.Fatal(err)
		}
		if got := fc.Tier(tc.req); got != tc.want || fc.DefaultTier != "free" {
			t.Errorf("%s: tier of %v = %q, want %q", tc.tiers, tc.req.values, got, tc.want)
		}
	}
}
