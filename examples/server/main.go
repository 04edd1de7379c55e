// Command server is a small HTTP API rate limited per client IP by sluice:
// the same quota for every replica that shares one Redis.
//
//	go run ./examples/server                          # embedded miniredis, no setup
//	go run ./examples/server -redis redis://127.0.0.1:6379
//	go run -tags gin ./examples/server -framework gin -algorithm sliding_window -limit 100 -window 1m
//	go run ./examples/server -trusted-proxies 10.0.0.0/8 # client IP from X-Forwarded-For behind a proxy
//	go run ./examples/server -api-key-limit 100          # requests with an X-API-Key: 100 per key
//	go run ./examples/server -config examples/server/policies.yaml # limits from a policy file, reloaded on change
//
// The default build compiles net/http only; chi, gin and echo are built in
// by their build tags (-tags chi,gin,echo for all three).
//
// A single-address -redis that does not answer at start-up is not fatal:
// the -failure policy decides until it does.
//
// GET / and GET /hello/{name} are rate limited; GET /healthz is not. Every
// response carries the rate-limit headers; past the quota the answer is a
// 429 with Retry-After and an application/problem+json body. While traffic
// flows the server prints one line per second counting the decisions.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run serves until ctx ends and returns the exit code: 0 after a clean
// shutdown, 1 when the server cannot start, 2 for a bad command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "server: %v\n", err)
		return 1
	}

	st, err := openStore(cfg.redis)
	if err != nil {
		return fail(err)
	}
	defer st.close()
	if st.unreachable != nil {
		// The client dials again on later calls; until one succeeds the
		// Limiter's breaker keeps the calls away and the failure policy
		// decides. The scripts are loaded by EVAL on the first NOSCRIPT.
		fmt.Fprintf(stderr, "server: %s unreachable (%v); the -failure policy (%v) decides until it answers\n", st.desc, st.unreachable, cfg.failure)
	} else if err := loadScripts(st.client); err != nil {
		return fail(err)
	}

	counts := newStats()
	opts := []sluice.Option{sluice.WithMeterProvider(counts.provider)}
	if cfg.configFile != "" {
		fileOpts, _, err := limiterOptions(cfg)
		if err != nil {
			return fail(err)
		}
		if len(fileOpts) > 0 {
			cfg.failure, cfg.timeout = -1, 0 // the file's limiter section says
			opts = append(opts, fileOpts...)
		}
	}
	if cfg.timeout > 0 {
		opts = append(opts, sluice.WithTimeout(cfg.timeout))
	}
	switch {
	case cfg.failure < 0: // set by the policy file
	case cfg.failure == sluice.FailLocal:
		opts = append(opts, sluice.WithReplicas(cfg.replicas))
	default:
		opts = append(opts, sluice.WithFailurePolicy(cfg.failure))
	}
	limiter, err := sluice.New(st.client, opts...)
	if err != nil {
		return fail(err)
	}
	defer limiter.Close()
	var (
		handler http.Handler
		lim     sluice.Limit
		fl      *fileLimits
	)
	if cfg.configFile != "" {
		if fl, err = startFileLimits(ctx, cfg, limiter, st.client, stderr); err != nil {
			return fail(err)
		}
		defer fl.stop()
		handler, err = newRouter(cfg.framework, fl.mw)
	} else {
		if lim, err = cfg.rateLimit(); err != nil {
			return fail(err)
		}
		handler, err = newHandler(cfg, limiter, lim)
	}
	if err != nil {
		return fail(err)
	}

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fail(fmt.Errorf("cannot listen on %s: %w (choose another with -addr)", cfg.addr, err))
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}

	if fl != nil {
		fmt.Fprintf(stdout, "sluice demo on %s: limits from %s (version %s), reloaded when it changes or on SIGHUP; overrides from `sluice override`\n",
			cfg.framework, cfg.configFile, fl.mw.Version())
	} else {
		fmt.Fprintf(stdout, "sluice demo on %s: %s, %s per client IP\n", cfg.framework, cfg.algorithm, describe(lim))
	}
	if cfg.apiKeyLimit > 0 {
		keyLim, _ := cfg.keyLimit() // checked by parseFlags
		fmt.Fprintf(stdout, "requests with an %s header: %s per API key\n", apiKeyHeader, describe(keyLim))
	}
	if cfg.pathLimit > 0 {
		l, _ := cfg.limitOf(cfg.pathLimit)
		fmt.Fprintf(stdout, "and %s per request path, shared by every client\n", describe(l))
	}
	if cfg.globalLimit > 0 {
		l, _ := cfg.limitOf(cfg.globalLimit)
		fmt.Fprintf(stdout, "and %s for the whole API\n", describe(l))
	}
	if len(cfg.trustedProxies) > 0 {
		fmt.Fprintf(stdout, "client IP from %s when the peer is in %s\n", headerNames[cfg.forwardedHeader], strings.Join(cfg.trustedProxies, ","))
	}
	fmt.Fprintf(stdout, "state in %s\n", st.desc)
	fmt.Fprintf(stdout, "GET / and GET /hello/{name} are rate limited; GET /healthz is not\n")
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())
	fmt.Fprintf(stdout, "try: curl -i http://%s/\n", curlHost(cfg.addr, ln.Addr()))
	if cfg.apiKeyLimit > 0 {
		fmt.Fprintf(stdout, "try: curl -i -H '%s: demo' http://%s/\n", apiKeyHeader, curlHost(cfg.addr, ln.Addr()))
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	reportCtx, stopReport := context.WithCancel(context.Background())
	reported := make(chan struct{})
	go func() { counts.report(reportCtx, stdout, time.Second); close(reported) }()
	defer func() { stopReport(); <-reported }()

	select {
	case err := <-served:
		return fail(fmt.Errorf("serve: %w", err))
	case <-ctx.Done():
	}
	fmt.Fprintln(stdout, "shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fail(fmt.Errorf("shutdown: %w", err))
	}
	return 0
}

// headerModes maps -headers to the middleware's header sets.
var headerModes = map[string]httplimit.HeaderMode{
	"both":   httplimit.HeadersBoth,
	"draft":  httplimit.HeadersDraft,
	"legacy": httplimit.HeadersLegacy,
	"none":   httplimit.HeadersNone,
}

// headerNames spells each forwarding header for the banner.
var headerNames = map[httplimit.ProxyHeader]string{
	httplimit.XForwardedFor: "X-Forwarded-For",
	httplimit.Forwarded:     "Forwarded",
}

// The tiers of -api-key-limit: requests with an API key, and the others.
const (
	tierAPIKey = "api-key"
	tierIP     = "ip"
)

// newHandler is the API on the chosen framework behind one policy: lim per
// client IP (the connection's peer, or with -trusted-proxies the address
// those proxies forwarded), shared by every rate-limited route; /healthz
// is exempt. With -api-key-limit, requests carrying an API key are instead
// in a tier of their own, limited per key.
func newHandler(cfg config, limiter *sluice.Limiter, lim sluice.Limit) (http.Handler, error) {
	health := healthRoute(cfg.framework)
	ip, err := httplimit.IP(httplimit.IPOptions{Header: cfg.forwardedHeader, TrustedProxies: cfg.trustedProxies})
	if err != nil {
		return nil, err
	}
	perIP := httplimit.Policy{Name: "per-ip", Limit: lim, Key: ip}
	var shared []httplimit.Policy // -path-limit, -global-limit: beside per-ip (or per-key) on every request
	if cfg.pathLimit > 0 {
		l, _ := cfg.limitOf(cfg.pathLimit) // checked by parseFlags
		shared = append(shared, httplimit.Policy{Name: "per-path", Limit: l.Named("per-path"), Key: requestPath})
	}
	if cfg.globalLimit > 0 {
		l, _ := cfg.limitOf(cfg.globalLimit)
		shared = append(shared, httplimit.Policy{Name: "global", Limit: l.Named("global"), Key: httplimit.Constant("api")})
	}
	hc := httplimit.Config{
		Limiter:  limiter,
		Policies: append([]httplimit.Policy{perIP}, shared...),
		Headers:  headerModes[cfg.headers],
		Exempt:   func(_ *http.Request, route string) bool { return route == health },
	}
	if cfg.apiKeyLimit > 0 {
		keyLim, err := cfg.keyLimit()
		if err != nil {
			return nil, err
		}
		// The tier is chosen by the same KeyFunc that keys it, so a
		// request is in the API-key tier exactly when it has a key to be
		// counted by (a blank header is no key: per IP).
		apiKey := httplimit.APIKey(apiKeyHeader)
		hc.Policies = shared
		hc.Tiers = map[string][]httplimit.Policy{
			tierAPIKey: {{Name: "per-key", Limit: keyLim, Key: apiKey}},
			tierIP:     {perIP},
		}
		hc.DefaultTier = tierIP
		hc.Tier = func(r *http.Request) string {
			if _, ok := apiKey(r); ok {
				return tierAPIKey
			}
			return tierIP
		}
	}
	mw, err := httplimit.New(hc)
	if err != nil {
		return nil, err
	}
	return newRouter(cfg.framework, mw)
}

// requestPath keys a request by its method and path: -path-limit's quota
// per path. (Paths come from clients: the Limiter hashes long or unusual
// ones into its keys.)
func requestPath(r *http.Request) (string, bool) { return "path:" + r.Method + " " + r.URL.Path, true }

// describe says what the limit admits, e.g. "10 requests per 1m0s
// (bursts of 10)".
func describe(l sluice.Limit) string {
	s := fmt.Sprintf("%d requests per %v", l.Rate, l.Period)
	if l.Algorithm == sluice.AlgGCRA || l.Algorithm == sluice.AlgTokenBucket {
		s += fmt.Sprintf(" (bursts of %d)", l.Burst)
	}
	return s
}

// curlHost is the host:port to show in the curl line: the one asked for,
// with the port actually bound, and localhost for an empty or
// unspecified host.
func curlHost(asked string, bound net.Addr) string {
	host, _, err := net.SplitHostPort(asked)
	if err != nil {
		host = ""
	}
	_, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return bound.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
