package main

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/internal/redisurl"
)

func TestParseFlagsDefaults(t *testing.T) {
	var stderr bytes.Buffer
	c, err := parseFlags(nil, &stderr)
	if err != nil {
		t.Fatalf("parseFlags(nil) = %v; stderr: %s", err, stderr.String())
	}
	if c.addr != "localhost:8080" || c.framework != "nethttp" || c.algorithm != sluice.AlgGCRA ||
		c.limit != 10 || c.window != time.Minute || c.headers != "both" || c.failure != sluice.FailLocal || c.timeout != 0 || c.redis != "" ||
		c.trustedProxies != nil || c.forwardedHeader != httplimit.NoProxyHeader || c.apiKeyLimit != 0 {
		t.Fatalf("defaults = %+v", c)
	}
	lim, err := c.rateLimit()
	if err != nil || lim.Rate != 10 || lim.Burst != 10 || lim.Period != time.Minute {
		t.Fatalf("default limit = %+v, %v; want GCRA 10 per minute, burst 10", lim, err)
	}
}

func TestParseFlagsEveryAlgorithmBurstIsLimit(t *testing.T) {
	for _, a := range algorithms {
		c, err := parseFlags([]string{"-algorithm", string(a), "-limit", "7", "-window", "1h"}, new(bytes.Buffer))
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		lim, err := c.rateLimit()
		if err != nil || lim.Algorithm != a || lim.Rate != 7 || lim.Period != time.Hour {
			t.Fatalf("%s: limit %+v, %v", a, lim, err)
		}
		if (a == sluice.AlgGCRA || a == sluice.AlgTokenBucket) && lim.Burst != 7 {
			t.Fatalf("%s: burst %d, want 7 (= -limit)", a, lim.Burst)
		}
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-framework", "django"}, `-framework "django": want one of nethttp, chi, gin, echo`},
		{[]string{"-algorithm", "leaky"}, `-algorithm "leaky": want one of gcra, fixed_window`},
		{[]string{"-limit", "0"}, "-limit 0"},
		{[]string{"-limit", "ten"}, `invalid value "ten" for flag -limit`},
		{[]string{"-window", "0s"}, "-window 0s"},
		{[]string{"-window", "soon"}, `invalid value "soon" for flag -window`},
		{[]string{"-headers", "all"}, `-headers "all": want one of both, draft, legacy, none`},
		{[]string{"-failure", "maybe"}, `-failure "maybe": want open, closed or local`},
		{[]string{"-replicas", "0"}, "-replicas 0: want at least 1"},
		{[]string{"-timeout", "-1s"}, "-timeout -1s: must not be negative"},
		{[]string{"-trusted-proxies", "10.0.0.0/8,"}, `-trusted-proxies "10.0.0.0/8,": "" is not a CIDR prefix`},
		{[]string{"-trusted-proxies", "10.0.0.0/8,256.0.0.1"}, `"256.0.0.1" is not a CIDR prefix (10.0.0.0/8, fd00::/8) or an address`},
		{[]string{"-forwarded-header", "x-forwarded-for"}, "-forwarded-header x-forwarded-for needs -trusted-proxies: add -trusted-proxies with the CIDR prefixes"},
		{[]string{"-forwarded-header", "via"}, `-forwarded-header "via": want x-forwarded-for or forwarded`},
		{[]string{"-api-key-limit", "-1"}, "-api-key-limit -1: want 0 (off) or more"},
		{[]string{"-nosuchflag"}, "flag provided but not defined: -nosuchflag"},
		{[]string{"extra"}, "unexpected arguments: extra"},
	} {
		var stderr bytes.Buffer
		_, err := parseFlags(tc.args, &stderr)
		if err != errUsage {
			t.Errorf("parseFlags(%q) = %v, want errUsage", tc.args, err)
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("parseFlags(%q) printed %q; want it to contain %q", tc.args, stderr.String(), tc.want)
		}
	}
}

func TestParseFlagsProxiesAndAPIKeys(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		proxies []string
		header  httplimit.ProxyHeader
	}{
		{[]string{"-trusted-proxies", "127.0.0.0/8"}, []string{"127.0.0.0/8"}, httplimit.XForwardedFor},
		{[]string{"-trusted-proxies", "10.0.0.0/8, 192.0.2.7,fd00::/8", "-forwarded-header", "Forwarded"}, []string{"10.0.0.0/8", "192.0.2.7", "fd00::/8"}, httplimit.Forwarded},
		{[]string{"-trusted-proxies", ""}, nil, httplimit.NoProxyHeader},
	} {
		c, err := parseFlags(tc.args, new(bytes.Buffer))
		if err != nil || !slices.Equal(c.trustedProxies, tc.proxies) || c.forwardedHeader != tc.header {
			t.Errorf("parseFlags(%q): proxies %q, header %v, %v; want %q, %v", tc.args, c.trustedProxies, c.forwardedHeader, err, tc.proxies, tc.header)
		}
	}
	c, err := parseFlags([]string{"-algorithm", "token_bucket", "-limit", "3", "-api-key-limit", "40", "-window", "1h"}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	ip, err := c.rateLimit()
	if err != nil {
		t.Fatal(err)
	}
	key, err := c.keyLimit()
	if err != nil || key.Algorithm != sluice.AlgTokenBucket || key.Rate != 40 || key.Burst != 40 || key.Period != time.Hour || key.Name != "per-key" {
		t.Fatalf("keyLimit = %+v, %v; want token_bucket 40 per hour, burst 40, named per-key", key, err)
	}
	if ip.Name == key.Name {
		t.Fatalf("the per-IP and per-key limits share the name %q (and so their state)", ip.Name)
	}
}

// TestOpenStoreUnreachable: a single address that refuses connections
// gives a client to use and the dial error; several addresses none of which
// answers are an error; so is a peer that accepts connections but is not
// a Redis (it answered: it is not down).
func TestOpenStoreUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// A port nothing listens on: bind one, and close it.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := free.Addr().String()
	free.Close()

	st, err := openStore("redis://" + down)
	if err != nil {
		t.Fatalf("openStore(%s, down) = %v; want a store", down, err)
	}
	defer st.close()
	if st.unreachable == nil || !redisurl.IsDialError(st.unreachable) || st.client == nil || st.desc != "Redis at "+down {
		t.Fatalf("openStore(%s, down): unreachable %v, desc %q; want the dial error and Redis at %s", down, st.unreachable, st.desc, down)
	}

	if _, err := openStore(down + "," + down); err == nil || !strings.Contains(err.Error(), "none of these cluster seeds answers") {
		t.Fatalf("openStore of two seeds, both down = %v; want an error saying none answers", err)
	}
	if st, err := openStore(ln.Addr().String()); err == nil {
		st.close()
		t.Fatalf("openStore(%s, not Redis) succeeded", ln.Addr())
	} else if strings.Contains(err.Error(), "unreachable") || redisurl.IsDialError(err) {
		t.Fatalf("openStore(%s, not Redis) = %v; want a failure that is not a dial error", ln.Addr(), err)
	}
}

// TestStats drives a real Limiter on the embedded miniredis and checks the
// summary lines read from its metrics: one line per busy second with that
// second's counts, none for an idle one.
func TestStats(t *testing.T) {
	st, err := openStore("")
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	s := newStats()
	limiter, err := sluice.New(st.client, sluice.WithMeterProvider(s.provider), sluice.WithTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	lim := sluice.Must(sluice.GCRA(10, time.Hour, 10))
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	var out bytes.Buffer
	s.flush(ctx, &out, at)
	if out.Len() != 0 {
		t.Fatalf("idle second printed %q", out.String())
	}
	for i := 0; i < 12; i++ {
		if _, err := limiter.Allow(ctx, "ip:192.0.2.1", lim); err != nil {
			t.Fatal(err)
		}
	}
	s.flush(ctx, &out, at)
	s.flush(ctx, &out, at.Add(time.Second)) // nothing new: nothing printed
	if _, err := limiter.Allow(ctx, "ip:192.0.2.2", lim); err != nil {
		t.Fatal(err)
	}
	s.flush(ctx, &out, at.Add(2*time.Second))
	want := "03:04:05 allowed=10 denied=2 degraded=0\n03:04:07 allowed=1 denied=0 degraded=0\n"
	if out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
}

// TestStatsDegraded counts decisions the failure policy made while Redis
// was gone, and prints the last partial second when reporting stops.
func TestStatsDegraded(t *testing.T) {
	st, err := openStore("")
	if err != nil {
		t.Fatal(err)
	}
	s := newStats()
	limiter, err := sluice.New(st.client, sluice.WithMeterProvider(s.provider), sluice.WithTimeout(0), sluice.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	st.close() // Redis is gone: FailOpen admits, degraded
	lim := sluice.Must(sluice.FixedWindow(10, time.Hour))
	for i := 0; i < 3; i++ {
		res, err := limiter.Allow(context.Background(), "ip:192.0.2.1", lim)
		if err != nil || !res.Allowed || !res.Degraded {
			t.Fatalf("Allow with Redis gone = %+v, %v; want allowed and degraded", res, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	s.report(ctx, &out, time.Hour)
	if !strings.HasSuffix(out.String(), " allowed=3 denied=0 degraded=3\n") {
		t.Fatalf("report after stop printed %q", out.String())
	}
}

func TestCurlHost(t *testing.T) {
	bound := fakeAddr("127.0.0.1:41234")
	for asked, want := range map[string]string{
		"localhost:8080": "localhost:41234",
		":8080":          "localhost:41234",
		"0.0.0.0:0":      "localhost:41234",
		"127.0.0.1:0":    "127.0.0.1:41234",
	} {
		if got := curlHost(asked, bound); got != want {
			t.Errorf("curlHost(%q) = %q, want %q", asked, got, want)
		}
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }
