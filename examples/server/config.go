package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

// config is what the command line chose.
type config struct {
	addr      string
	redis     string // "" = embedded miniredis
	framework string
	algorithm sluice.Algorithm
	limit     int64
	window    time.Duration
	headers   string
	failure   sluice.FailurePolicy
	replicas  int
	timeout   time.Duration

	// trustedProxies are the -trusted-proxies entries (none: the TCP peer
	// is the client); forwardedHeader is the header they write the client
	// address into (NoProxyHeader without trustedProxies).
	trustedProxies  []string
	forwardedHeader httplimit.ProxyHeader
	// apiKeyLimit is the quota per API key of requests with an X-API-Key
	// header (0: no API-key tier, every request is limited per IP).
	apiKeyLimit int64
	// pathLimit and globalLimit add policies beside the per-IP one: a
	// quota per request path shared by every client, and one quota for
	// the whole API (0: off).
	pathLimit, globalLimit int64

	// configFile is -config: a policy file says the limits instead of the
	// flags, and is reloaded when it changes (and on SIGHUP).
	configFile string
	// limiterFlags reports that -failure, -replicas or -timeout was given:
	// a policy file's limiter section then conflicts with them.
	limiterFlags bool
}

// limitFlags are the flags a policy file (-config) takes the place of.
var limitFlags = []string{"algorithm", "limit", "window", "headers", "trusted-proxies", "forwarded-header", "api-key-limit", "path-limit", "global-limit"}

var (
	frameworks = []string{"nethttp", "chi", "gin", "echo"}
	algorithms = []sluice.Algorithm{sluice.AlgGCRA, sluice.AlgFixedWindow, sluice.AlgSlidingWindow, sluice.AlgSlidingLog, sluice.AlgTokenBucket}
	headerSets = []string{"both", "draft", "legacy", "none"} // see headerModes
	failures   = map[string]sluice.FailurePolicy{"open": sluice.FailOpen, "closed": sluice.FailClosed, "local": sluice.FailLocal}
	// forwardedHeaders maps -forwarded-header to the header IP reads.
	forwardedHeaders = map[string]httplimit.ProxyHeader{"x-forwarded-for": httplimit.XForwardedFor, "forwarded": httplimit.Forwarded}
)

// apiKeyHeader is the request header -api-key-limit keys requests by.
const apiKeyHeader = "X-API-Key"

// errUsage marks a command line that was already explained to the user.
var errUsage = errors.New("usage")

// parseFlags parses args; on a bad command line it prints why (and the
// usage) to stderr and returns errUsage.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var (
		c         config
		algorithm string
		failure   string
		proxies   string
		forwarded string
	)
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "localhost:8080", "listen address (host:port; port 0 picks a free one)")
	fs.StringVar(&c.redis, "redis", "", "Redis to use: redis://host:port[?addr=host:port&addr=...] or host:port,host:port (standalone or cluster); empty: an embedded miniredis. A single address that does not answer at start-up is taken for a standalone Redis and the -failure policy decides until it answers; of several (cluster seeds), one must answer")
	fs.StringVar(&c.framework, "framework", "nethttp", "HTTP stack: "+strings.Join(frameworks, ", ")+" (chi, gin and echo need their build tag: go run -tags gin ./examples/server -framework gin)")
	fs.StringVar(&algorithm, "algorithm", string(sluice.AlgGCRA), "algorithm: "+joinAlgorithms())
	fs.Int64Var(&c.limit, "limit", 10, "requests per window for each client IP (also the burst of gcra and token_bucket)")
	fs.DurationVar(&c.window, "window", time.Minute, "window, or refill period of gcra and token_bucket")
	fs.StringVar(&c.headers, "headers", "both", "rate-limit headers: both (draft RateLimit-* and X-RateLimit-*), draft, legacy, none")
	fs.StringVar(&failure, "failure", "local", "when Redis is unavailable: local (an in-memory share of the quota; the library's default), open (admit), closed (deny with 503)")
	fs.IntVar(&c.replicas, "replicas", 1, "with -failure local: how many replicas share the quota")
	fs.DurationVar(&c.timeout, "timeout", 0, "a bound on how long one request waits for a Redis that answers; past it the -failure policy decides that request (default 0: no bound; a Redis silent for 1s is taken for gone whatever this says)")
	fs.StringVar(&proxies, "trusted-proxies", "", "comma-separated CIDR prefixes (or addresses) of your own proxies and load balancers, e.g. 10.0.0.0/8,fd00::/8: when the TCP peer is one of them, the client IP is read from -forwarded-header (its rightmost hop that is not a trusted proxy); empty: the TCP peer is the client and forwarding headers are ignored")
	fs.StringVar(&forwarded, "forwarded-header", "x-forwarded-for", "with -trusted-proxies: the header they write the client address into: x-forwarded-for or forwarded (RFC 7239)")
	fs.Int64Var(&c.apiKeyLimit, "api-key-limit", 0, "requests per window for each API key: a request with an "+apiKeyHeader+" header is limited per key (hashed, never stored) at this rate instead of per client IP (also the burst of gcra and token_bucket); 0: off, every request is limited per client IP. The demo does not check keys: a real API verifies them, or a client can send a new key for a new quota")
	fs.Int64Var(&c.pathLimit, "path-limit", 0, "requests per window for each request path, shared by every client: a second policy beside the per-IP one (one batch decision, one round trip); 0: off")
	fs.Int64Var(&c.globalLimit, "global-limit", 0, "requests per window for the whole API, shared by every client: another policy beside the others; 0: off")
	fs.StringVar(&c.configFile, "config", "", "a policy file (docs/policies.md) saying the limits instead of the flags above, e.g. examples/server/policies.yaml; the server reloads it when it changes, and on SIGHUP, and obeys the overrides set with `sluice override`")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: server [flags]\n\nA small API rate limited per client IP (or per API key, with -api-key-limit) by sluice.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, errUsage // the flag package has printed the error and the usage
	}
	bad := func(format string, a ...any) (config, error) {
		fmt.Fprintf(stderr, "server: "+format+"\n", a...)
		fmt.Fprintf(stderr, "run 'server -h' for the flags\n")
		return c, errUsage
	}
	if fs.NArg() > 0 {
		return bad("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if c.configFile != "" {
		for _, name := range limitFlags {
			if set(fs, name) {
				return bad("-%s and -config: the policy file says the limits; drop one of them", name)
			}
		}
	}
	c.limiterFlags = set(fs, "failure") || set(fs, "replicas") || set(fs, "timeout")
	if !slices.Contains(frameworks, c.framework) {
		return bad("-framework %q: want one of %s", c.framework, strings.Join(frameworks, ", "))
	}
	if _, ok := builtIn[c.framework]; !ok {
		return bad("-framework %s: this binary was built without it; run go run -tags %s ./examples/server -framework %s (the default build compiles net/http only)", c.framework, c.framework, c.framework)
	}
	c.algorithm = sluice.Algorithm(algorithm)
	if !slices.Contains(algorithms, c.algorithm) {
		return bad("-algorithm %q: want one of %s", algorithm, joinAlgorithms())
	}
	if !slices.Contains(headerSets, c.headers) {
		return bad("-headers %q: want one of %s", c.headers, strings.Join(headerSets, ", "))
	}
	p, ok := failures[failure]
	if !ok {
		return bad("-failure %q: want open, closed or local", failure)
	}
	c.failure = p
	if c.replicas < 1 {
		return bad("-replicas %d: want at least 1", c.replicas)
	}
	if c.timeout < 0 {
		return bad("-timeout %v: must not be negative", c.timeout)
	}
	if _, err := c.rateLimit(); err != nil {
		return bad("-limit %d -window %v: %v", c.limit, c.window, err)
	}
	for _, f := range []struct {
		name string
		n    int64
	}{{"path-limit", c.pathLimit}, {"global-limit", c.globalLimit}} {
		if f.n < 0 {
			return bad("-%s %d: want 0 (off) or more", f.name, f.n)
		}
		if _, err := c.limitOf(f.n); f.n > 0 && err != nil {
			return bad("-%s %d -window %v: %v", f.name, f.n, c.window, err)
		}
	}
	if c.apiKeyLimit < 0 {
		return bad("-api-key-limit %d: want 0 (off) or more", c.apiKeyLimit)
	}
	if c.apiKeyLimit > 0 {
		if _, err := c.keyLimit(); err != nil {
			return bad("-api-key-limit %d -window %v: %v", c.apiKeyLimit, c.window, err)
		}
	}

	header, ok := forwardedHeaders[strings.ToLower(forwarded)]
	if !ok {
		return bad("-forwarded-header %q: want x-forwarded-for or forwarded", forwarded)
	}
	if proxies != "" {
		for _, p := range strings.Split(proxies, ",") {
			p = strings.TrimSpace(p)
			if _, err := httplimit.IP(httplimit.IPOptions{TrustedProxies: []string{p}}); err != nil {
				if e := errors.Unwrap(err); e != nil {
					err = e
				}
				return bad("-trusted-proxies %q: %q is not a CIDR prefix (10.0.0.0/8, fd00::/8) or an address: %v", proxies, p, err)
			}
			c.trustedProxies = append(c.trustedProxies, p)
		}
		c.forwardedHeader = header
	} else if set(fs, "forwarded-header") {
		return bad("-forwarded-header %s needs -trusted-proxies: add -trusted-proxies with the CIDR prefixes of the proxies that write the header (e.g. -trusted-proxies 10.0.0.0/8); without them any client could choose its own address", forwarded)
	}
	return c, nil
}

// set reports whether the command line gave the flag name.
func set(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// rateLimit builds the per-IP limit every rate-limited route shares. Burst
// is the limit itself, so every algorithm admits -limit requests at once.
func (c config) rateLimit() (sluice.Limit, error) {
	return c.limitOf(c.limit)
}

// keyLimit builds the per-API-key limit of -api-key-limit: the same
// algorithm and window as the per-IP one, with its own name (so its own
// state in Redis).
func (c config) keyLimit() (sluice.Limit, error) {
	l, err := c.limitOf(c.apiKeyLimit)
	if err != nil {
		return l, err
	}
	return l.Named("per-key"), nil
}

// limitOf builds a limit of n requests per -window with -algorithm, of
// burst n.
func (c config) limitOf(n int64) (sluice.Limit, error) {
	switch c.algorithm {
	case sluice.AlgFixedWindow:
		return sluice.FixedWindow(n, c.window)
	case sluice.AlgSlidingWindow:
		return sluice.SlidingWindow(n, c.window)
	case sluice.AlgSlidingLog:
		return sluice.SlidingLog(n, c.window)
	case sluice.AlgTokenBucket:
		return sluice.TokenBucket(n, c.window, n)
	default:
		return sluice.GCRA(n, c.window, n)
	}
}

func joinAlgorithms() string {
	s := make([]string, len(algorithms))
	for i, a := range algorithms {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}
