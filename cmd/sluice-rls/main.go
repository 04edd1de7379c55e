// Command sluice-rls is sluice as Envoy's rate limit service: it
// implements envoy.service.ratelimit.v3.RateLimitService on sluice's
// Limiter, reading envoyproxy/ratelimit's configuration unchanged, and
// decides each request's descriptors in one batch decision, so that a
// request refused by any rule charges none of them.
//
//	go run ./cmd/sluice-rls                                   # the sample configuration on an embedded miniredis
//	go run ./cmd/sluice-rls -config /etc/ratelimit/config -redis redis://10.0.0.5:6379
//
// It serves gRPC on -grpc (the rate limit service and grpc.health.v1) and
// HTTP on -http: /json (a RateLimitRequest as JSON, as envoyproxy/ratelimit
// takes it), /healthcheck and /metrics (Prometheus). The configuration
// directory is reloaded when it changes and on SIGHUP; SIGINT or SIGTERM
// stops it gracefully: health says NOT_SERVING, requests in flight finish,
// then the servers close. It obeys the per-identity overrides that
// "sluice override" keeps in Redis (-overrides, on by default).
// docs/envoy.md in the repository has the Envoy side, the migration from
// envoyproxy/ratelimit, the overrides' names and the metrics.
package main

import (
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"github.com/redis/rueidis"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice-rls/internal/rls"
	"github.com/sluice-go/sluice/cmd/sluice-rls/internal/rlsconf"
	"github.com/sluice-go/sluice/internal/redisurl"
	"github.com/sluice-go/sluice/overrides"
	"github.com/sluice-go/sluice/reload"
)

// sample is the configuration served without -config.
//
//go:embed config/*.yaml
var sample embed.FS

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, hup, nil)
	stop()
	os.Exit(code)
}

// options are the command line's.
type options struct {
	config       string
	grpcAddr     string
	httpAddr     string
	redis        string
	prefix       string
	shadow       bool
	headers      rls.Headers
	failure      sluice.FailurePolicy
	replicas     int
	timeout      time.Duration
	denialCache  int
	mergeDomains bool
	crossSlot    bool
	nearLimit    float64
	drain        time.Duration
	logLevel     slog.Level
	overrides    bool
	clock        func() time.Time // tests: a virtual clock for the Limiter and the service
	onListen     func(grpcAddr, httpAddr string)
}

// parseFlags reads the command line; a bad one is reported on stderr.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("sluice-rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sluice-rls [flags]\n\nEnvoy's rate limit service (envoy.service.ratelimit.v3) on sluice, with envoyproxy/ratelimit's configuration.\n\n")
		fs.PrintDefaults()
	}
	var headers, failure, logLevel string
	fs.StringVar(&o.config, "config", "", "`DIR`ectory of envoyproxy/ratelimit's YAML configuration files (*.yaml, *.yml), reloaded when it changes and on SIGHUP; empty: the sample configuration built in (cmd/sluice-rls/config)")
	fs.StringVar(&o.grpcAddr, "grpc", ":8081", "gRPC listen `address`: the rate limit service and grpc.health.v1")
	fs.StringVar(&o.httpAddr, "http", ":8080", "HTTP listen `address`: /json, /healthcheck and /metrics")
	fs.StringVar(&o.redis, "redis", "", "Redis `URL`: redis://[user:password@]host:port, rediss:// for TLS, more cluster seeds as ?addr=host:port, a Sentinel master as ?master_set=NAME, or host:port,host:port; empty: an embedded miniredis (in memory, this process only)")
	fs.StringVar(&o.prefix, "prefix", "sluice", "the prefix of every Redis key; an application's sluice Limiter shares a quota only under the same prefix")
	fs.BoolVar(&o.shadow, "shadow", false, "global shadow mode: decide and count every rule, refuse nothing (envoyproxy/ratelimit's SHADOW_MODE)")
	fs.StringVar(&headers, "headers", "draft", "response headers for Envoy to add: draft (RateLimit-Policy and RateLimit), legacy (X-RateLimit-Limit, -Remaining, -Reset), both or none")
	fs.StringVar(&failure, "failure", "local", "while Redis is unavailable: local (an in-memory share of each limit, with -replicas), open (admit), closed (answer UNAVAILABLE: Envoy's failure_mode_deny decides)")
	fs.IntVar(&o.replicas, "replicas", 1, "with -failure local: how many replicas of this service share the limits")
	fs.DurationVar(&o.timeout, "timeout", 0, "bound on how long a decision waits for a Redis that answers (0: none but Envoy's own deadline)")
	fs.IntVar(&o.denialCache, "denial-cache", 0, "remember this many refusals per limit and refuse locally until they end (0: off); a request refused from it reports its other descriptors unasked")
	fs.BoolVar(&o.crossSlot, "cross-slot", true, "decide all of a request's descriptors in one script call even though their keys are in different hash slots, which a standalone or Sentinel Redis runs; set false behind a proxy of a sharded Redis (Envoy's or twemproxy's Redis proxy, a clustered Redis Enterprise database), which refuses such a call. Ignored on a Redis Cluster")
	fs.BoolVar(&o.mergeDomains, "merge-domains", false, "let several files hold one domain, merged (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)")
	fs.Float64Var(&o.nearLimit, "near-limit-ratio", 0.8, "the share of a limit past which hits count as near_limit")
	fs.DurationVar(&o.drain, "drain", 10*time.Second, "on SIGINT or SIGTERM, how long requests in flight may take to finish")
	fs.BoolVar(&o.overrides, "overrides", true, "obey per-identity overrides kept in Redis under -prefix (\"sluice override set -policy NAME IDENTITY\"): the policy is a rule's limit name, the identity the one its descriptor is counted by; read through a second client with client-side caching, so a request costs nothing more in steady state")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	bad := func(format string, a ...any) (options, error) {
		err := fmt.Errorf(format, a...)
		fmt.Fprintf(stderr, "sluice-rls: %v\n", err)
		return o, err
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q (the configuration directory goes in -config)", fs.Arg(0))
	}
	var err error
	if o.headers, err = rls.ParseHeaders(headers); err != nil {
		return bad("-%v", err)
	}
	switch failure {
	case "local":
		o.failure = sluice.FailLocal
	case "open":
		o.failure = sluice.FailOpen
	case "closed":
		o.failure = sluice.FailClosed
	default:
		return bad("-failure %q: want local, open or closed", failure)
	}
	if o.replicas < 1 {
		return bad("-replicas %d: want at least 1", o.replicas)
	}
	if o.replicas > 1 && o.failure != sluice.FailLocal {
		return bad("-replicas is the size of -failure local's share; drop it or use -failure local")
	}
	if o.timeout < 0 || o.drain < 0 || o.denialCache < 0 {
		return bad("-timeout, -drain and -denial-cache must not be negative")
	}
	if o.nearLimit <= 0 || o.nearLimit > 1 {
		return bad("-near-limit-ratio %v: want a share above 0, at most 1", o.nearLimit)
	}
	if err := o.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return bad("-log-level %q: want debug, info, warn or error", logLevel)
	}
	for _, a := range []struct{ flag, addr string }{{"grpc", o.grpcAddr}, {"http", o.httpAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return bad("-%s %q: want host:port (or :port)", a.flag, a.addr)
		}
	}
	if o.config != "" {
		if st, err := os.Stat(o.config); err != nil || !st.IsDir() {
			return bad("-config %q: want a directory of YAML files", o.config)
		}
	}
	return o, nil
}

// run serves until ctx ends and returns the exit code: 0 after a graceful
// stop, 1 when it cannot start, 2 for a bad command line. hup reloads the
// configuration.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, hup <-chan os.Signal, adjust func(*options)) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if adjust != nil {
		adjust(&o)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	fail := func(err error) int {
		fmt.Fprintf(stderr, "sluice-rls: %v\n", err)
		return 1
	}

	// Metrics: envoyproxy/ratelimit's names, as its Prometheus mapping
	// writes them, and sluice's own.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo(),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithoutSuffixes))
	if err != nil {
		return fail(err)
	}
	// No traces here: exemplars would only cost every measurement a look
	// for a span.
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
	defer mp.Shutdown(context.Background())

	st, err := openStore(o)
	if err != nil {
		return fail(err)
	}
	defer st.close()
	limOpts := []sluice.Option{sluice.WithPrefix(o.prefix), sluice.WithFailurePolicy(o.failure), sluice.WithTimeout(o.timeout),
		sluice.WithDenialCache(o.denialCache), sluice.WithCrossSlotScripts(o.crossSlot), sluice.WithMeterProvider(mp), sluice.WithLogger(log)}
	if o.failure == sluice.FailLocal {
		limOpts = append(limOpts, sluice.WithReplicas(o.replicas))
	}
	if o.clock != nil {
		limOpts = append(limOpts, sluice.WithClock(o.clock))
	}
	limiter, err := sluice.New(st.client, limOpts...)
	if err != nil {
		return fail(err)
	}
	defer limiter.Close()
	ropts := rls.Options{Limiter: limiter, Shadow: o.shadow, Headers: o.headers, NearLimitRatio: o.nearLimit,
		MeterProvider: mp, Clock: o.clock, Logger: log}
	ovrDesc := "off (-overrides=false)"
	if o.overrides {
		store, closeStore, err := openOverrides(o, st.client, log)
		if err != nil {
			return fail(err)
		}
		defer closeStore()
		ropts.Overrides = store
		ovrDesc = "from Redis, cached by the client (sluice override set|list|rm -prefix " + o.prefix + ")"
		if !store.ClientCache() {
			ovrDesc = "from Redis, a local copy refreshed every second (sluice override set|list|rm -prefix " + o.prefix + ")"
		}
	}
	svc, err := rls.New(ropts)
	if err != nil {
		return fail(err)
	}
	health := rls.NewHealth(svc)
	apply := func(c *rlsconf.Config) error {
		if err := svc.Update(c); err != nil {
			return err
		}
		for _, w := range c.Warnings {
			log.Warn("sluice-rls: configuration: " + w.Error())
		}
		health.Update()
		return nil
	}

	// The configuration: a watched directory, or the sample.
	var watcher *reload.Watcher
	desc := "the built-in sample configuration (cmd/sluice-rls/config; -config DIR for your own)"
	opts := rlsconf.Options{MergeDomains: o.mergeDomains}
	if o.config != "" {
		watcher, err = reload.WatchDir(ctx, o.config, rlsconf.IsConfigFile,
			// The directory as given, so that errors name its files so.
			func(string) (*rlsconf.Config, error) { return rlsconf.Load(o.config, opts) }, apply,
			reload.Options{Logger: log, MeterProvider: mp})
		if err != nil {
			return fail(err)
		}
		defer watcher.Close()
		desc = o.config + ", reloaded when it changes and on SIGHUP"
		if err := rls.ConfigLoads(mp, func() (int64, int64) { s := watcher.Status(); return s.Successes, s.Failures }); err != nil {
			return fail(err)
		}
	} else {
		c, err := sampleConfig(opts)
		if err != nil {
			return fail(err)
		}
		if err := apply(c); err != nil {
			return fail(err)
		}
	}

	grpcLn, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return fail(fmt.Errorf("cannot listen on %s: %w (choose another with -grpc)", o.grpcAddr, err))
	}
	httpLn, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		grpcLn.Close()
		return fail(fmt.Errorf("cannot listen on %s: %w (choose another with -http)", o.httpAddr, err))
	}
	// Workers serve the streams, 64 per core (a goroutine more starts
	// when all are busy): a worker's stack has grown already, where a
	// goroutine per request grows a fresh one every time, a tenth of the
	// service's CPU at 128 streams (2% with the workers; pprof).
	gs := grpc.NewServer(grpc.NumStreamWorkers(uint32(64 * runtime.GOMAXPROCS(0))))
	rlsv3.RegisterRateLimitServiceServer(gs, svc)
	health.Register(gs)
	mux := http.NewServeMux()
	mux.Handle("/json", svc.JSONHandler())
	mux.Handle("/healthcheck", health)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 2)
	go func() { served <- gs.Serve(grpcLn) }()
	go func() {
		if err := hs.Serve(httpLn); !errors.Is(err, http.ErrServerClosed) {
			served <- err
		}
	}()

	cfg := svc.Config()
	fmt.Fprintf(stdout, "sluice-rls: gRPC on %s, HTTP on %s (/json, /healthcheck, /metrics)\n", grpcLn.Addr(), httpLn.Addr())
	fmt.Fprintf(stdout, "state in %s\nconfiguration: %s; domains: %s\noverrides: %s\n", st.desc, desc, strings.Join(cfg.Domains(), ", "), ovrDesc)
	if o.onListen != nil {
		o.onListen(grpcLn.Addr().String(), httpLn.Addr().String())
	}

	code := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-hup:
			if watcher == nil {
				log.Info("sluice-rls: SIGHUP: the built-in configuration does not change")
				continue
			}
			if err := watcher.Reload(); err != nil {
				log.Error("sluice-rls: SIGHUP: the new version was refused; the version in force keeps serving", "err", err)
			}
		case err := <-served:
			fmt.Fprintf(stderr, "sluice-rls: serving failed: %v\n", err)
			code = 1
			break loop
		}
	}

	// Graceful stop: health first, so that Envoy and load balancers move
	// away, then the requests in flight finish, bounded by -drain.
	health.Shutdown()
	drained := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(drained)
	}()
	dctx, cancel := context.WithTimeout(context.Background(), o.drain)
	defer cancel()
	_ = hs.Shutdown(dctx)
	select {
	case <-drained:
	case <-dctx.Done():
		gs.Stop()
	}
	fmt.Fprintln(stdout, "sluice-rls: stopped")
	return code
}

// sampleConfig is the built-in configuration.
func sampleConfig(opts rlsconf.Options) (*rlsconf.Config, error) {
	entries, err := fs.ReadDir(sample, "config")
	if err != nil {
		return nil, err
	}
	var files []rlsconf.File
	for _, e := range entries {
		data, err := sample.ReadFile(path.Join("config", e.Name()))
		if err != nil {
			return nil, err
		}
		files = append(files, rlsconf.File{Name: path.Join("cmd/sluice-rls/config", e.Name()), Data: data})
	}
	return rlsconf.Build(files, opts)
}

// openOverrides is the overrides Store of the Redis -redis names. On a
// real Redis it has a client of its own with client-side caching on (the
// Limiter's has it off: its every call is a script that writes), so that
// a request asks Redis nothing about overrides until one changes; on the
// embedded miniredis, which has no client tracking, or a Redis that does
// not answer at start-up, it reads the Limiter's client and keeps a local
// copy refreshed at most once a second.
func openOverrides(o options, limClient rueidis.Client, log *slog.Logger) (*overrides.Store, func(), error) {
	opts := overrides.Options{Prefix: o.prefix, Logger: log, Clock: o.clock}
	if o.redis == "" {
		s, err := overrides.New(limClient, opts)
		return s, func() {}, err
	}
	copt, err := redisurl.Parse(o.redis)
	if err != nil {
		return nil, nil, err
	}
	copt.DisableCache = false
	c, err := rueidis.NewClient(copt)
	if err != nil {
		// Redis is down at start-up: the Limiter's client, which dials
		// again on later calls, serves the overrides from a local copy.
		log.Warn("sluice-rls: overrides: Redis unreachable; overrides apply once it answers, refreshed every second", "err", err)
		opts.Cache = overrides.CacheLocal
		s, err := overrides.New(limClient, opts)
		return s, func() {}, err
	}
	s, err := overrides.New(c, opts)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("overrides: %w", err)
	}
	return s, c.Close, nil
}

// store is the Redis the Limiter talks to.
type store struct {
	client rueidis.Client
	desc   string
	close  func()
}

// openStore connects to the Redis -redis names, or starts an embedded
// miniredis when it is empty.
func openStore(o options) (*store, error) {
	if o.redis == "" {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("cannot start the embedded miniredis: %w", err)
		}
		m.ClockTTL(true)
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("cannot connect to the embedded miniredis: %w", err)
		}
		return &store{client: client, desc: "an embedded miniredis (in memory; -redis redis://HOST:PORT for a real Redis)", close: func() { client.Close(); m.Close() }}, nil
	}
	opt, err := redisurl.Parse(o.redis)
	if err != nil {
		return nil, err
	}
	opt.DisableCache = true // every decision is a script that writes
	addrs := strings.Join(opt.InitAddress, ",")
	client, err := sluice.OpenClient(opt)
	if errors.Is(err, sluice.ErrUnreachable) {
		err = nil // the failure policy decides until it answers
	}
	if err != nil {
		return nil, fmt.Errorf("cannot connect to Redis at %s: %w", addrs, err)
	}
	kind := "Redis"
	switch {
	case opt.Sentinel.MasterSet != "":
		kind = "Redis (Sentinel master " + opt.Sentinel.MasterSet + ")"
	case client.Mode() == rueidis.ClientModeCluster:
		kind = fmt.Sprintf("Redis Cluster (%d nodes)", len(client.Nodes()))
	}
	return &store{client: client, desc: kind + " at " + addrs, close: client.Close}, nil
}
