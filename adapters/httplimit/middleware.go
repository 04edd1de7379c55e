package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// HeaderMode chooses the rate-limit headers written on every response.
type HeaderMode int

const (
	// HeadersDraft (the default) writes RateLimit-Policy and RateLimit as
	// defined by draft-ietf-httpapi-ratelimit-headers-11.
	HeadersDraft HeaderMode = iota
	// HeadersLegacy writes X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (Unix seconds) for the most restrictive policy.
	HeadersLegacy
	// HeadersBoth writes both sets.
	HeadersBoth
	// HeadersNone writes no rate-limit headers; a denial still carries
	// Retry-After.
	HeadersNone
)

// Config configures a Middleware. Only Limiter and at least one policy
// are required; every other zero value is a sensible default.
type Config struct {
	// Limiter makes the decisions (required).
	Limiter *sluice.Limiter
	// Policies apply to every request that is not exempt.
	Policies []Policy
	// Routes adds policies per route template, spelled as the router
	// spells it ("/items/{id}" for net/http and chi, "/items/:id" for gin
	// and echo), optionally preceded by a method and a space: "POST
	// /upload" applies to POST requests only, "/upload" to every method.
	// When both match, only the method's entry applies. net/http patterns
	// that name a method ("GET /items/{id}") are used as they are. Route
	// policies apply in addition to Policies; requests no route matched
	// (404s) have route "".
	Routes map[string][]Policy
	// Tiers adds the policies of the request's tier, as named by Tier
	// (anonymous, free, pro, ...). A tier Tier does not know is DefaultTier.
	Tiers map[string][]Policy
	// Tier names the tier of a request, typically from the verified
	// claims the authentication middleware stored in its context.
	// Required with Tiers.
	Tier func(r *http.Request) string
	// DefaultTier is the tier of requests whose tier is not in Tiers
	// (required with Tiers, and must be one of them).
	DefaultTier string
	// Exempt reports requests no policy applies to (health checks,
	// metrics scrapes). They get no rate-limit headers.
	Exempt func(r *http.Request, route string) bool
	// Shadow puts every policy in shadow mode: decisions are made,
	// counted, logged and reported in headers, but nothing is denied.
	Shadow bool
	// Headers chooses the header set (default HeadersDraft).
	Headers HeaderMode
	// PartitionKeySecret, when set (at least 16 bytes, the same on every
	// replica), adds a pk parameter to each RateLimit and RateLimit-Policy
	// item: the first 96 bits of HMAC-SHA256(secret, policy and identity),
	// so a client can tell its quotas apart without learning, or being able
	// to guess, the identity behind them.
	PartitionKeySecret []byte
	// DegradedHeader, when set, names a response header set to "?1" when a
	// decision came from the failure policy because Redis was unavailable.
	// Off by default: it tells clients, attackers included, that limits
	// are not being enforced.
	DegradedHeader string
	// DenyHandler writes the response of a denied request (429, or 503 when
	// the limiter fails closed). The rate-limit headers and Retry-After
	// are already set. Default: WriteProblem with d.Problem(r).
	DenyHandler func(w http.ResponseWriter, r *http.Request, d *Decision)
	// Logger receives shadow denials (Info) and limiter errors (Error);
	// default slog.Default().
	Logger *slog.Logger
	// MeterProvider, when set, records the counter sluice.http.decisions
	// with attributes sluice.policy and sluice.http.outcome (allowed,
	// denied, shadow_denied). The Limiter records its own metrics.
	MeterProvider metric.MeterProvider
	// Clock is the time X-RateLimit-Reset counts from (default time.Now).
	Clock func() time.Time
	// Overrides, when set (an *overrides.Store), is asked for each
	// policy's identity on every request: an override exempts it, blocks
	// it, or replaces the policy's limit for it (docs/overrides.md).
	Overrides ratepolicy.Overrides
	// Version names this configuration (free text: a file's hash, a
	// release tag). Decision.Version and Middleware.Version report it, so
	// a request can be traced to the configuration that decided it.
	Version string
}

// Middleware applies a Config to HTTP requests. It is safe for concurrent
// use. Handler and Wrap serve net/http; the framework adapters call Serve.
//
// Update replaces its Config while it serves: each request is decided,
// answered and has its concurrency slots released under the one Config in
// force when it arrived.
type Middleware struct {
	lim *sluice.Limiter
	cur atomic.Pointer[state]
}

// state is one validated Config, never changed once built: a request
// loads it once and uses nothing else.
type state struct {
	version string
	eng     *ratepolicy.Engine[*http.Request]
	routes  map[string][]*policy
	exempt  func(*http.Request, string) bool
	headers HeaderMode
	secret  []byte
	degHdr  string // canonical
	deny    func(http.ResponseWriter, *http.Request, *Decision)
	log     *slog.Logger
	clock   func() time.Time
}

// ErrConfig means New or Update was given a Config it cannot use; the
// wrapping error says which field and why.
var ErrConfig = errors.New("httplimit: invalid config")

// New validates cfg and returns a Middleware.
func New(cfg Config) (*Middleware, error) {
	st, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	m := &Middleware{lim: cfg.Limiter}
	m.cur.Store(st)
	return m, nil
}

// Update validates cfg as New does and, when it is valid, puts it in
// force for every request that arrives from then on; requests already
// being served finish under the Config they started with. When cfg is
// invalid, Update returns the error (wrapping ErrConfig) and the Config
// in force stays.
//
// cfg.Limiter must be the Limiter given to New: its state (the circuit
// breakers, the denial cache) is not the configuration's and carries
// over. Quotas in Redis belong to their Limit's name: a limit changed
// under the same name (Limit.Named) keeps what was spent, as its
// algorithm reads it; under a new name (the default name holds the
// numbers) it starts afresh. The denial cache is keyed by name too: an
// identity it holds under a limit raised under the same name stays
// denied until that denial's wait has passed.
func (m *Middleware) Update(cfg Config) error {
	st, err := compile(cfg)
	if err != nil {
		return err
	}
	if cfg.Limiter != m.lim {
		return fmt.Errorf("%w: httplimit: Update's Config.Limiter is not the Limiter the Middleware was made with; pass that one", ErrConfig)
	}
	m.cur.Store(st)
	return nil
}

// Version returns the Config.Version in force.
func (m *Middleware) Version() string { return m.cur.Load().version }

// compile validates cfg and builds its state.
func compile(cfg Config) (*state, error) {
	bad := func(err error) (*state, error) { return nil, fmt.Errorf("%w: %w", ErrConfig, err) }
	if cfg.Limiter == nil {
		return bad(errors.New("httplimit: no Limiter"))
	}
	if cfg.Headers < HeadersDraft || cfg.Headers > HeadersNone {
		return bad(fmt.Errorf("httplimit: unknown HeaderMode %d", int(cfg.Headers)))
	}
	if cfg.PartitionKeySecret != nil && len(cfg.PartitionKeySecret) < 16 {
		return bad(errors.New("httplimit: PartitionKeySecret must be at least 16 bytes"))
	}
	if cfg.DegradedHeader != "" && !validHeaderName(cfg.DegradedHeader) {
		return bad(fmt.Errorf("httplimit: DegradedHeader %q is not a header name", cfg.DegradedHeader))
	}
	if _, ok := cfg.Routes[""]; ok {
		return bad(errors.New(`httplimit: Routes has an empty route template`))
	}
	st := &state{
		version: cfg.Version, exempt: cfg.Exempt, headers: cfg.Headers, secret: cfg.PartitionKeySecret,
		degHdr: http.CanonicalHeaderKey(cfg.DegradedHeader), deny: cfg.DenyHandler, log: cfg.Logger, clock: cfg.Clock,
	}
	if st.deny == nil {
		st.deny = func(w http.ResponseWriter, r *http.Request, d *Decision) { WriteProblem(w, d.Problem(r)) }
	}
	if st.log == nil {
		st.log = slog.Default()
	}
	if st.clock == nil {
		st.clock = time.Now
	}
	eng, err := ratepolicy.New(ratepolicy.Config[*http.Request]{
		Pkg: "httplimit", Limiter: cfg.Limiter,
		Policies: shared(cfg.Policies), Routes: sharedMap(cfg.Routes), RoutesField: "Routes",
		Tiers: sharedMap(cfg.Tiers), Tier: cfg.Tier, DefaultTier: cfg.DefaultTier,
		Shadow: cfg.Shadow, Logger: st.log, RouteAttr: "route", Overrides: cfg.Overrides, Clock: st.clock,
		Metrics: ratepolicy.Metrics{Provider: cfg.MeterProvider, Scope: "github.com/sluice-go/sluice/adapters/httplimit",
			Name: "sluice.http.decisions", Description: "Rate-limit decisions on HTTP requests, per policy and outcome.",
			OutcomeAttr: "sluice.http.outcome"},
	})
	if err != nil {
		return bad(err)
	}
	st.eng, st.routes = eng, eng.Routes()
	return st, nil
}

// ExemptRoutes returns a Config.Exempt func exempting the given routes,
// named as Config.Routes names them: "GET /healthz" (that method only) or
// "/healthz" (every method).
func ExemptRoutes(routes ...string) func(r *http.Request, route string) bool {
	set := map[string]bool{}
	for _, rt := range routes {
		set[rt] = true
	}
	return func(r *http.Request, route string) bool {
		return route != "" && (set[route] || set[r.Method+" "+route])
	}
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return s != ""
}

// Handler is the net/http middleware. It reads the route template from
// Request.Pattern, which http.ServeMux sets only once it has routed: wrap
// each handler you register (mux.Handle("GET /items/{id}", m.Handler(h))),
// or wrap the whole mux with Wrap.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.Serve(w, r, r.Pattern, next.ServeHTTP)
	})
}

// Wrap limits every request to mux, looking up the route template that mux
// will choose (ServeMux.Handler) before deciding, or, when no policy or
// exemption depends on the route, only for requests a policy denied (see
// ServeRouteFunc).
func (m *Middleware) Wrap(mux *http.ServeMux) http.Handler {
	routeOf := func(r *http.Request) string {
		_, route := mux.Handler(r)
		return route
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.ServeRouteFunc(w, r, routeOf, mux.ServeHTTP)
	})
}

// Serve is the whole middleware, for adapters: it decides whether r may
// proceed under the policies for route (the route template, "" when none
// matched), sets the rate-limit headers on w, and then either calls next
// or writes the denial. It reports whether next was called; an adapter
// aborts its framework's chain when it was not.
//
// Concurrency slots taken for the request are released when next returns,
// or panics (the panic then continues), with a context that outlives the
// request's cancellation.
func (m *Middleware) Serve(w http.ResponseWriter, r *http.Request, route string, next func(http.ResponseWriter, *http.Request)) (passed bool) {
	return m.cur.Load().serve(w, r, route, nil, next)
}

// ServeRouteFunc is Serve for adapters that find the route template at a
// cost (Wrap asks the ServeMux, the chi adapter searches chi's tree): it
// calls route at most once, before deciding when Config.Routes or
// Config.Exempt make the decision depend on the route, and otherwise only
// when a policy denied (enforced or shadow), which reports the route
// (Decision.Route, the shadow-denial log). Allowed requests then skip the
// lookup.
func (m *Middleware) ServeRouteFunc(w http.ResponseWriter, r *http.Request, route func(*http.Request) string, next func(http.ResponseWriter, *http.Request)) (passed bool) {
	st := m.cur.Load()
	if len(st.routes) > 0 || st.exempt != nil {
		return st.serve(w, r, route(r), nil, next)
	}
	return st.serve(w, r, "", route, next)
}

// serve is Serve under st; routeOf, when not nil, looks the route up only
// for a decision that reports it (see decide), and route is "".
func (st *state) serve(w http.ResponseWriter, r *http.Request, route string, routeOf func(*http.Request) string, next func(http.ResponseWriter, *http.Request)) bool {
	if st.exempt != nil && st.exempt(r, route) {
		next(w, r)
		return true
	}
	d := st.decide(r, route, routeOf)
	if err := d.err; err != nil {
		decisions.Put(d)
		st.fail(w, r, err)
		return false
	}
	st.writeHeaders(w.Header(), d)
	if d.Status != http.StatusOK {
		st.deny(w, r, d) // d is the DenyHandler's now: never reused
		return false
	}
	// Nothing reads d from here on: it is reused by a later request.
	leases := d.leases
	decisions.Put(d)
	if len(leases) > 0 {
		defer st.release(r, leases)
	}
	next(w, r)
	return true
}

// fail answers a request the Limiter returned an error for. The client
// gets a generic problem; the error is logged.
func (st *state) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	if r.Context().Err() != nil {
		status = http.StatusServiceUnavailable
		st.log.Debug("httplimit: request ended before the rate-limit decision", "err", err)
	} else {
		st.log.Error("httplimit: rate-limit decision failed", "err", err)
	}
	WriteProblem(w, Problem{Type: "about:blank", Title: http.StatusText(status), Status: status})
}

func (st *state) release(r *http.Request, leases []ratepolicy.Lease[*http.Request]) {
	st.eng.Release(r.Context(), leases)
}
