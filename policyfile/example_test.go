package policyfile_test

import (
	"fmt"

	"github.com/sluice-go/sluice/policyfile"
)

func ExampleParse() {
	c, err := policyfile.Parse("policies.yaml", []byte(`
version: "3"
policies:
  - name: per-ip
    limit: {algorithm: gcra, rate: 100, period: 1m}
    key: ip
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	p := c.Policies[0]
	lim, err := p.SluiceLimit()
	fmt.Println(c.Version, p.Name, p.Key.Kind, lim.Algorithm, lim.Rate, lim.Period, lim.Burst, lim.Name, err)
	// Output: 3 per-ip ip gcra 100 1m0s 100 per-ip <nil>
}

// Every problem of a file, each at its file:line:col.
func ExampleErrors() {
	_, err := policyfile.Parse("policies.yaml", []byte(`
policies:
  - name: per-ip
    limit: {algorithm: gcra, rat: 100, period: 1 minute}
    key: clinet
`))
	fmt.Println(err)
	// Output:
	// policies.yaml:4:12: policies[0].limit: missing field "rate"
	// policies.yaml:4:30: policies[0].limit: unknown field "rat" (did you mean "rate"?)
	// policies.yaml:4:48: policies[0].limit.period: bad duration "1 minute": want a number and a unit (ns, us, ms, s, m, h), such as "1m", "500ms" or "1h30m"
	// policies.yaml:5:10: unknown identity "clinet": not an identity kind (ip, subject, route) nor a name under identities
}

func ExampleMarshal() {
	c, err := policyfile.Parse("policies.json", []byte(`{
  "version": "3",
  "policies": [{"name": "per-key", "limit": {"algorithm": "fixed_window", "rate": 10, "period": "90s"},
                "key": {"api_key": {"header": "X-API-Key"}}, "cost": 2}]
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := policyfile.Marshal(c)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(out))
	// Output:
	// version: "3"
	// policies:
	//   - name: per-key
	//     limit: {algorithm: fixed_window, rate: 10, period: 1m30s}
	//     key: {api_key: {header: X-API-Key}}
	//     cost: 2
}

func ExampleConfig_LimiterOptions() {
	c, err := policyfile.Parse("policies.yaml", []byte(`
limiter: {failure: closed, timeout: 50ms}
policies: [{name: p, limit: {algorithm: gcra, rate: 1, period: 1s}, key: ip}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	// sluice.New(client, c.LimiterOptions()...)
	fmt.Println(c.Limiter.Failure, c.Limiter.Timeout, len(c.LimiterOptions()))
	// Output: closed 50ms 2
}

func ExampleLoad() {
	c, err := policyfile.Load("testdata/grpc.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	c.AllPolicies(func(path string, p *policyfile.Policy) { fmt.Println(path, p.Name) })
	// Output:
	// policies[0] per-tenant
	// methods["/example.v1.Feed/*"][0] feed-streams
	// methods["/example.v1.Feed/*"][1] feed-messages
	// methods["/example.v1.Search/Query"][0] search
	// tiers.policies["free"][0] free
}

// Two spellings of one file are Equal; a changed number is not.
func ExampleEqual() {
	a, _ := policyfile.Parse("a.yaml", []byte("policies: [{name: p, limit: {algorithm: gcra, rate: 5, period: 1m}, key: ip}]"))
	b, _ := policyfile.Parse("b.json", []byte(`{"policies": [{"name": "p", "key": "ip", "limit": {"rate": 5, "period": "60s", "algorithm": "gcra", "burst": 5}}]}`))
	c, _ := policyfile.Parse("c.yaml", []byte("policies: [{name: p, limit: {algorithm: gcra, rate: 6, period: 1m}, key: ip}]"))
	a.Version, b.Version, c.Version = "", "", "" // versions are content hashes: set or clear them to compare policies
	fmt.Println(policyfile.Equal(a, b), policyfile.Equal(a, c))
	// Output: true false
}
