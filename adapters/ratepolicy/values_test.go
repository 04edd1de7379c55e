package ratepolicy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

func mustCompile(t *testing.T, p Policy[string]) *Compiled[string] {
	t.Helper()
	c, err := compile("test", p, "test")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRateLimitItem(t *testing.T) {
	perMin := mustCompile(t, pol("per-ip")) // 10 per 60 s
	conc := mustCompile(t, Policy[string]{Name: "in-flight", Limit: sluice.Must(sluice.Concurrency(2, time.Minute)), Key: fixed("k")})
	quoted := mustCompile(t, Policy[string]{Name: `a"b`, Limit: gcra(1, time.Second, 1), Key: fixed("k")})
	for _, tc := range []struct {
		name   string
		p      *Compiled[string]
		res    sluice.Result
		denied bool
		pk     string
		want   string
		wantT  int64
	}{
		{"admitted: t until the quota is whole", perMin, sluice.Result{Allowed: true, Remaining: 9, ResetAfter: 6 * time.Second}, false, "", `"per-ip";r=9;t=6`, 6},
		{"admitted: t rounded up", perMin, sluice.Result{Allowed: true, Remaining: 9, ResetAfter: 5001 * time.Millisecond}, false, "", `"per-ip";r=9;t=6`, 6},
		{"admitted, quota whole", perMin, sluice.Result{Allowed: true, Remaining: 10}, false, "", `"per-ip";r=10;t=0`, 0},
		{"denied: t until the cost is admitted", perMin, sluice.Result{RetryAfter: 2500 * time.Millisecond, ResetAfter: time.Minute}, true, "", `"per-ip";r=0;t=3`, 3},
		{"denied: t at least 1", perMin, sluice.Result{RetryAfter: time.Microsecond}, true, "", `"per-ip";r=0;t=1`, 1},
		{"denied, never fits: the window", perMin, sluice.Result{RetryAfter: sluice.RetryNever}, true, "", `"per-ip";r=0;t=60`, 60},
		{"negative remaining is 0", perMin, sluice.Result{Remaining: -3, RetryAfter: time.Second}, true, "", `"per-ip";r=0;t=1`, 1},
		{"shadow denial with a pk", perMin, sluice.Result{Remaining: 0, RetryAfter: time.Second}, true, ";pk=:AAAA:", `"per-ip";r=0;t=1;pk=:AAAA:`, 1},
		{"concurrency admitted: no t", conc, sluice.Result{Allowed: true, Remaining: 1, ResetAfter: time.Minute}, false, "", `"in-flight";r=1`, -1},
		{"concurrency denied: t until a lease expires", conc, sluice.Result{RetryAfter: 59 * time.Second}, true, "", `"in-flight";r=0;t=59`, 59},
		{"concurrency denied, never fits: at least 1", conc, sluice.Result{RetryAfter: sluice.RetryNever}, true, "", `"in-flight";r=0;t=1`, 1},
		{"quoted name", quoted, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: time.Second}, false, "", `"a\"b";r=0;t=1`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(appendRateLimitItem([]byte("x "), tc.p, tc.res, tc.denied, tc.pk)); got != "x "+tc.want {
				t.Errorf("appendRateLimitItem = %s, want x %s", got, tc.want)
			}
			if got := ResetSecondsOf(tc.p, tc.res, tc.denied); got != tc.wantT {
				t.Errorf("ResetSecondsOf = %d, want %d", got, tc.wantT)
			}
			o := Outcome[string]{P: tc.p, Result: tc.res, Denied: tc.denied}
			if got := resetSeconds(&o); got != tc.wantT {
				t.Errorf("resetSeconds = %d, want %d", got, tc.wantT)
			}
		})
	}
}

func TestRateLimitValues(t *testing.T) {
	a := mustCompile(t, pol("per-ip"))
	b := mustCompile(t, Policy[string]{Name: "in-flight", Limit: sluice.Must(sluice.Concurrency(2, time.Minute)), Key: fixed("k")})
	outcomes := []Outcome[string]{
		{P: a, Result: sluice.Result{Allowed: true, Remaining: 4, ResetAfter: 30 * time.Second}},
		{P: b, Result: sluice.Result{RetryAfter: 10 * time.Second}, Denied: true},
	}
	for _, tc := range []struct {
		name       string
		outcomes   []Outcome[string]
		pks        []string
		policy, rl string
	}{
		{"none", nil, nil, "", ""},
		{"one", outcomes[:1], nil, `"per-ip";q=10;w=60`, `"per-ip";r=4;t=30`},
		{"two, in order", outcomes, nil,
			`"per-ip";q=10;w=60, "in-flight";q=2;qu="concurrent-requests"`,
			`"per-ip";r=4;t=30, "in-flight";r=0;t=10`},
		{"with pks", outcomes, []string{";pk=:AQ==:", ";pk=:Ag==:"},
			`"per-ip";q=10;w=60;pk=:AQ==:, "in-flight";q=2;qu="concurrent-requests";pk=:Ag==:`,
			`"per-ip";r=4;t=30;pk=:AQ==:, "in-flight";r=0;t=10;pk=:Ag==:`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(appendPolicy(nil, tc.outcomes, tc.pks)); got != tc.policy {
				t.Errorf("appendPolicy = %s, want %s", got, tc.policy)
			}
			if got := string(appendRateLimit(nil, tc.outcomes, tc.pks)); got != tc.rl {
				t.Errorf("appendRateLimit = %s, want %s", got, tc.rl)
			}
		})
	}
	if got := string(appendPolicyItem([]byte("p: "), &Outcome[string]{P: a}, ";pk=:x:")); got != `p: "per-ip";q=10;w=60;pk=:x:` {
		t.Errorf("appendPolicyItem = %s", got)
	}
}

func TestPartitionKey(t *testing.T) {
	secret := []byte("0123456789abcdef")
	if got := partitionKey(nil, "p", "k"); got != "" {
		t.Errorf("no secret: %q, want none", got)
	}
	// The first 96 bits of HMAC-SHA256(secret, policy ‖ 0 ‖ key), as an
	// sf-Binary.
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("per-ip\x00ip:192.0.2.1"))
	want := ";pk=:" + base64.StdEncoding.EncodeToString(mac.Sum(nil)[:12]) + ":"
	got := partitionKey(secret, "per-ip", "ip:192.0.2.1")
	if got != want || len(got) != len(";pk=::")+16 {
		t.Errorf("partitionKey = %s, want %s", got, want)
	}
	for _, other := range [][3]string{
		{"0123456789abcdeF", "per-ip", "ip:192.0.2.1"}, // another secret
		{string(secret), "per-key", "ip:192.0.2.1"},    // another policy
		{string(secret), "per-ip", "ip:192.0.2.2"},     // another identity
		{string(secret), "per-ip\x00ip", ":192.0.2.1"}, // the separator cannot be moved
		{string(secret), "per-i", "p\x00ip:192.0.2.1"},
	} {
		if partitionKey([]byte(other[0]), other[1], other[2]) == got {
			t.Errorf("partitionKey(%q, %q, %q) is the same as per-ip's on 192.0.2.1", other[0], other[1], other[2])
		}
	}
}

// TestAppendDraft checks the two values AppendDraft locates: after the
// bytes already in the buffer and before any appended later, the policy
// item of a lone policy without a secret left unwritten, and the pk
// parameter of each item with a secret.
func TestAppendDraft(t *testing.T) {
	a := mustCompile(t, pol("per-ip"))
	b := mustCompile(t, Policy[string]{Name: "in-flight", Limit: sluice.Must(sluice.Concurrency(2, time.Minute)), Key: fixed("k")})
	outcomes := []Outcome[string]{
		{P: a, Key: "ip:192.0.2.1", Result: sluice.Result{Allowed: true, Remaining: 4, ResetAfter: 30 * time.Second}},
		{P: b, Key: "k", Result: sluice.Result{RetryAfter: 10 * time.Second}, Denied: true},
	}
	secret := []byte("0123456789abcdef")
	pks := []string{partitionKey(secret, "per-ip", "ip:192.0.2.1"), partitionKey(secret, "in-flight", "k")}
	for _, tc := range []struct {
		name       string
		outcomes   []Outcome[string]
		secret     []byte
		policy, rl string
		written    int // bytes AppendDraft appends
	}{
		{"none", nil, nil, "", "", 0},
		{"one: its item, not written", outcomes[:1], nil, `"per-ip";q=10;w=60`, `"per-ip";r=4;t=30`, len(`"per-ip";r=4;t=30`)},
		{"two", outcomes, nil,
			`"per-ip";q=10;w=60, "in-flight";q=2;qu="concurrent-requests"`,
			`"per-ip";r=4;t=30, "in-flight";r=0;t=10`, -1},
		{"one with a secret", outcomes[:1], secret, `"per-ip";q=10;w=60` + pks[0], `"per-ip";r=4;t=30` + pks[0], -1},
		{"two with a secret", outcomes, secret,
			`"per-ip";q=10;w=60` + pks[0] + `, "in-flight";q=2;qu="concurrent-requests"` + pks[1],
			`"per-ip";r=4;t=30` + pks[0] + `, "in-flight";r=0;t=10` + pks[1], -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf, d := AppendDraft([]byte("before"), tc.outcomes, tc.secret)
			if want := tc.written; want >= 0 && len(buf) != len("before")+want {
				t.Errorf("appended %q, want %d bytes", buf[len("before"):], want)
			}
			policy, rl := d.Values(string(append(buf, "after"...)))
			if policy != tc.policy || rl != tc.rl {
				t.Errorf("Values = %s | %s, want %s | %s", policy, rl, tc.policy, tc.rl)
			}
		})
	}
}
