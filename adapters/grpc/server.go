package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// HeaderMode chooses the rate-limit metadata sent in response headers.
type HeaderMode int

const (
	// HeadersDraft (the default) sends ratelimit-policy and ratelimit, the
	// values of draft-ietf-httpapi-ratelimit-headers-11's RateLimit-Policy
	// and RateLimit headers.
	HeadersDraft HeaderMode = iota
	// HeadersNone sends no rate-limit metadata; a refusal still carries
	// its details and the pushback trailer.
	HeadersNone
)

// The metadata keys the server interceptors send.
const (
	// MetadataPolicy carries the RateLimit-Policy value.
	MetadataPolicy = "ratelimit-policy"
	// MetadataRateLimit carries the RateLimit value.
	MetadataRateLimit = "ratelimit"
	// MetadataPushback is the trailer gRPC's retry policy reads: the
	// milliseconds a client waits before retrying a refused call.
	MetadataPushback = "grpc-retry-pushback-ms"
)

// DefaultExempt lists the methods exempt unless Config.NoDefaultExempt:
// the health service and both server reflection services.
var DefaultExempt = []string{
	"/grpc.health.v1.Health/*",
	"/grpc.reflection.v1.ServerReflection/*",
	"/grpc.reflection.v1alpha.ServerReflection/*",
}

// Config configures a Server. Only Limiter and at least one policy are
// required; every other zero value is a sensible default.
type Config struct {
	// Limiter makes the decisions (required).
	Limiter *sluice.Limiter
	// Policies apply to every call that is not exempt.
	Policies []Policy
	// Methods adds policies per method, "/pkg.Service/Method", or per
	// service, "/pkg.Service/*". When both match, only the method's entry
	// applies. Method policies apply in addition to Policies.
	Methods map[string][]Policy
	// Tiers adds the policies of the call's tier, as named by Tier; a tier
	// not in Tiers is DefaultTier.
	Tiers map[string][]Policy
	// Tier names the tier of a call, typically from verified claims an
	// earlier interceptor stored in its context. Required with Tiers.
	Tier func(c *Call) string
	// DefaultTier is the tier of calls whose tier is not in Tiers
	// (required with Tiers, and must be one of them).
	DefaultTier string
	// Exempt lists methods no policy applies to, spelled as in Methods
	// ("/pkg.Service/Method", "/pkg.Service/*"), in addition to
	// DefaultExempt. Exempt calls get no rate-limit metadata.
	Exempt []string
	// ExemptFunc, when set, also exempts the calls it reports.
	ExemptFunc func(ctx context.Context, fullMethod string) bool
	// NoDefaultExempt limits the health and reflection services too.
	NoDefaultExempt bool
	// Shadow puts every policy in shadow mode: decided, counted, logged
	// and reported, never refused.
	Shadow bool
	// Headers chooses the response metadata (default HeadersDraft).
	Headers HeaderMode
	// PartitionKeySecret, when set (at least 16 bytes, the same on every
	// replica), adds a pk parameter to each item, as httplimit does.
	PartitionKeySecret []byte
	// DegradedMetadata, when set, names a response header metadata key set
	// to "?1" when a decision came from the failure policy. Off by
	// default: it tells clients, attackers included, that limits are not
	// being enforced.
	DegradedMetadata string
	// ErrorDomain is the domain of the refusals' ErrorInfo (default
	// "sluice").
	ErrorDomain string
	// Logger receives shadow denials (Info) and limiter errors (Error);
	// default slog.Default().
	Logger *slog.Logger
	// MeterProvider, when set, records the counter sluice.grpc.decisions
	// with attributes sluice.policy and sluice.grpc.outcome (allowed,
	// denied, shadow_denied).
	MeterProvider metric.MeterProvider
	// Overrides, when set (an *overrides.Store), is asked for each
	// policy's identity on every call: an override exempts it, blocks it,
	// or replaces the policy's limit for it (docs/overrides.md).
	Overrides ratepolicy.Overrides
	// Version names this configuration (free text: a file's hash, a
	// release tag); Server.Version reports the one in force.
	Version string
}

// ErrConfig means New or Update was given a Config it cannot use; the
// wrapping error says which field and why.
var ErrConfig = errors.New("grpclimit: invalid config")

// Server rate limits the calls a gRPC server receives. It is safe for
// concurrent use.
//
// Update replaces its Config while it serves: a unary call is decided,
// answered and has its concurrency slots released under the one Config in
// force when it arrived; a stream, under the one in force at its open, for
// its whole life (its PerMessage policies included).
type Server struct {
	lim    *sluice.Limiter
	decide func(context.Context, *sluice.Decision, ...sluice.Check) error // nil: the Limiter's
	cur    atomic.Pointer[state]

	mu sync.Mutex // serializes Update with MiddlewareLimiter
	// noConc is set once MiddlewareLimiter has handed s out: a Config
	// with a concurrency policy is then refused.
	noConc bool
}

// state is one validated Config, never changed once built: a call loads
// it once and uses nothing else.
type state struct {
	version   string
	eng       *ratepolicy.Engine[*Call]
	methods   map[string][]*ratepolicy.Compiled[*Call] // "/pkg.Svc/Method"
	services  map[string][]*ratepolicy.Compiled[*Call] // "/pkg.Svc/" (from "/pkg.Svc/*")
	exMethods map[string]bool
	exSvcs    map[string]bool // "/pkg.Svc/"
	exFunc    func(context.Context, string) bool
	headers   HeaderMode
	secret    []byte
	degraded  string
	domain    string
	log       *slog.Logger
}

// New validates cfg and returns a Server.
func New(cfg Config) (*Server, error) { return newStubbable(cfg, nil) }

// newStubbable is New with decide deciding in place of the Limiter (nil: the
// Limiter), under this Config and every Update's.
func newStubbable(cfg Config, decide func(context.Context, *sluice.Decision, ...sluice.Check) error) (*Server, error) {
	v, err := compile(cfg, decide)
	if err != nil {
		return nil, err
	}
	s := &Server{lim: cfg.Limiter, decide: decide}
	s.cur.Store(v)
	return s, nil
}

// Update validates cfg as New does and, when it is valid, puts it in
// force for every call that arrives from then on; calls and streams
// already being served finish under the Config they started with. When
// cfg is invalid, Update returns the error (wrapping ErrConfig) and the
// Config in force stays.
//
// cfg.Limiter must be the Limiter given to New: its state (the circuit
// breakers, the denial cache) is not the configuration's and carries
// over. Quotas in Redis belong to their Limit's name, as with httplimit's
// Update. Once MiddlewareLimiter has been called, a Config with a
// concurrency policy is refused, as MiddlewareLimiter refuses one.
func (s *Server) Update(cfg Config) error {
	v, err := compile(cfg, s.decide)
	if err != nil {
		return err
	}
	if cfg.Limiter != s.lim {
		return fmt.Errorf("%w: grpclimit: Update's Config.Limiter is not the Limiter the Server was made with; pass that one", ErrConfig)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noConc {
		if err := v.middlewareReady(); err != nil {
			return err
		}
	}
	s.cur.Store(v)
	return nil
}

// Version returns the Config.Version in force.
func (s *Server) Version() string { return s.cur.Load().version }

// compile validates cfg and builds its state.
func compile(cfg Config, decide func(context.Context, *sluice.Decision, ...sluice.Check) error) (*state, error) {
	bad := func(err error) (*state, error) { return nil, fmt.Errorf("%w: %w", ErrConfig, err) }
	if cfg.Limiter == nil {
		return bad(errors.New("grpclimit: no Limiter"))
	}
	if cfg.Headers < HeadersDraft || cfg.Headers > HeadersNone {
		return bad(fmt.Errorf("grpclimit: unknown HeaderMode %d", int(cfg.Headers)))
	}
	if cfg.PartitionKeySecret != nil && len(cfg.PartitionKeySecret) < 16 {
		return bad(errors.New("grpclimit: PartitionKeySecret must be at least 16 bytes"))
	}
	if d := cfg.DegradedMetadata; d != "" && (strings.ToLower(d) != d || !validMetadataKey(d)) {
		return bad(fmt.Errorf("grpclimit: DegradedMetadata %q is not a lower-case metadata key", d))
	}
	for m := range cfg.Methods {
		if !validPattern(m) {
			return bad(fmt.Errorf(`grpclimit: Methods key %q: want "/pkg.Service/Method" or "/pkg.Service/*"`, m))
		}
	}
	v := &state{
		version: cfg.Version,
		methods: map[string][]*ratepolicy.Compiled[*Call]{}, services: map[string][]*ratepolicy.Compiled[*Call]{},
		exMethods: map[string]bool{}, exSvcs: map[string]bool{}, exFunc: cfg.ExemptFunc,
		headers: cfg.Headers, secret: cfg.PartitionKeySecret, degraded: cfg.DegradedMetadata,
		domain: cfg.ErrorDomain, log: cfg.Logger,
	}
	if v.domain == "" {
		v.domain = "sluice"
	}
	if v.log == nil {
		v.log = slog.Default()
	}
	exempt := cfg.Exempt
	if !cfg.NoDefaultExempt {
		exempt = append(append([]string(nil), DefaultExempt...), exempt...)
	}
	for _, m := range exempt {
		if !validPattern(m) {
			return bad(fmt.Errorf(`grpclimit: Exempt %q: want "/pkg.Service/Method" or "/pkg.Service/*"`, m))
		}
		if svc, ok := strings.CutSuffix(m, "*"); ok {
			v.exSvcs[svc] = true
		} else {
			v.exMethods[m] = true
		}
	}
	eng, err := ratepolicy.New(ratepolicy.Config[*Call]{
		Pkg: "grpclimit", Limiter: cfg.Limiter, Decide: decide,
		Policies: shared(cfg.Policies), Routes: sharedMap(cfg.Methods), RoutesField: "Methods",
		Tiers: sharedMap(cfg.Tiers), Tier: cfg.Tier, DefaultTier: cfg.DefaultTier,
		Shadow: cfg.Shadow, Logger: v.log, RouteAttr: "method", Overrides: cfg.Overrides,
		Metrics: ratepolicy.Metrics{Provider: cfg.MeterProvider, Scope: "github.com/sluice-go/sluice/adapters/grpc",
			Name: "sluice.grpc.decisions", Description: "Rate-limit decisions on gRPC calls, per policy and outcome.",
			OutcomeAttr: "sluice.grpc.outcome"},
	})
	if err != nil {
		return bad(err)
	}
	v.eng = eng
	for k, ps := range eng.Routes() {
		if svc, ok := strings.CutSuffix(k, "*"); ok {
			v.services[svc] = ps
		} else {
			v.methods[k] = ps
		}
	}
	return v, nil
}

// validPattern reports "/pkg.Svc/Method" or "/pkg.Svc/*".
func validPattern(m string) bool {
	rest, ok := strings.CutPrefix(m, "/")
	if !ok {
		return false
	}
	svc, method, ok := strings.Cut(rest, "/")
	return ok && svc != "" && method != "" && !strings.Contains(method, "/") &&
		(method == "*" || !strings.Contains(method, "*"))
}

func validMetadataKey(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return !strings.HasPrefix(s, "grpc-")
}

// svcPrefix is "/pkg.Svc/" of "/pkg.Svc/Method" (a substring: no copy).
func svcPrefix(method string) string {
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		return method[:i+1]
	}
	return method
}

// Exempt reports whether no policy of the Config in force applies to
// fullMethod.
func (s *Server) Exempt(ctx context.Context, fullMethod string) bool {
	return s.cur.Load().exempt(ctx, fullMethod)
}

// exempt reports whether no policy of v applies to fullMethod.
func (v *state) exempt(ctx context.Context, fullMethod string) bool {
	return v.exMethods[fullMethod] || v.exSvcs[svcPrefix(fullMethod)] || v.exFunc != nil && v.exFunc(ctx, fullMethod)
}

// applicable lists the policies of c: common, method's (or service's),
// tier's.
func (v *state) applicable(c *Call) [3][]*ratepolicy.Compiled[*Call] {
	var mp []*ratepolicy.Compiled[*Call]
	if len(v.methods) > 0 || len(v.services) > 0 {
		if ps, ok := v.methods[c.method]; ok {
			mp = ps
		} else {
			mp = v.services[svcPrefix(c.method)]
		}
	}
	return v.eng.Applicable(c, mp)
}

// scratch is one decision's scratch space, recycled: the Call its
// KeyFuncs see and the Decision with its arrays.
type scratch struct {
	call Call
	d    ratepolicy.Decision[*Call]
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

func getScratch(ctx context.Context, method string, stream bool, msg any) *scratch {
	sc := scratches.Get().(*scratch)
	sc.call = Call{ctx: ctx, method: method, stream: stream, msg: msg}
	sc.d.Reset()
	return sc
}

func putScratch(sc *scratch) {
	sc.call = Call{}
	scratches.Put(sc)
}

// decide decides sc's call under the policies sel selects. It returns the
// error the call must end with (a refusal, or a failure of the Limiter),
// or nil when the call proceeds.
func (v *state) decide(sc *scratch, sets [3][]*ratepolicy.Compiled[*Call], sel ratepolicy.Select) error {
	ctx := sc.call.ctx
	if err := v.eng.Decide(ctx, &sc.call, sets, sel, &sc.d); err != nil {
		return v.fail(ctx, err)
	}
	v.eng.Settle(ctx, &sc.d, sc.call.method)
	if sc.d.Denied {
		return v.refusal(&sc.d)
	}
	return nil
}

// fail answers a call the Limiter returned an error for: the client gets
// a generic status, never the error's text, which is logged.
func (v *state) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		v.log.Debug("grpclimit: call ended before the rate-limit decision", "err", err)
		return status.FromContextError(ctx.Err()).Err()
	}
	v.log.Error("grpclimit: rate-limit decision failed", "err", err)
	return status.Error(codes.Internal, "rate-limit decision failed")
}

// UnaryServerInterceptor rate limits unary calls: one decision of every
// applicable policy before the handler runs. A refused call gets the
// refusal status, the pushback trailer and the rate-limit metadata; an
// admitted one the metadata, and its concurrency slots are released when
// the handler returns or panics (the panic continues), with a context that
// outlives the call's cancellation.
func (s *Server) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		v := s.cur.Load()
		if v.exempt(ctx, info.FullMethod) {
			return handler(ctx, req)
		}
		sc := getScratch(ctx, info.FullMethod, false, req)
		if err := v.decide(sc, v.applicable(&sc.call), ratepolicy.AllPolicies); err != nil {
			if md := v.refusedTrailer(&sc.d); md != nil {
				_ = grpc.SetTrailer(ctx, md)
			}
			putScratch(sc)
			return nil, err
		}
		if md := v.header(&sc.d, nil); md != nil {
			_ = grpc.SetHeader(ctx, md)
		}
		leases := sc.d.Leases
		putScratch(sc)
		if len(leases) > 0 {
			defer v.eng.Release(ctx, leases)
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor rate limits streams: the policies that are not
// PerMessage are decided once at the open, before the handler runs (a
// refusal ends the stream with it), and the PerMessage ones on every
// message the handler receives. Concurrency slots are held until the
// handler returns or panics.
func (s *Server) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		v := s.cur.Load()
		if v.exempt(ctx, info.FullMethod) {
			return handler(srv, ss)
		}
		sc := getScratch(ctx, info.FullMethod, true, nil)
		sets := v.applicable(&sc.call)
		if err := v.decide(sc, sets, ratepolicy.OpenPolicies); err != nil {
			if md := v.refusedTrailer(&sc.d); md != nil {
				ss.SetTrailer(md)
			}
			putScratch(sc)
			return err
		}
		if md := v.header(&sc.d, nil); md != nil {
			_ = ss.SetHeader(md)
		}
		leases := sc.d.Leases
		putScratch(sc)
		if len(leases) > 0 {
			defer v.eng.Release(ctx, leases)
		}
		if v.eng.HasPerMessage() && hasPerMessage(sets) {
			ss = &meteredStream{ServerStream: ss, v: v, method: info.FullMethod, sets: sets}
		}
		return handler(srv, ss)
	}
}

func hasPerMessage(sets [3][]*ratepolicy.Compiled[*Call]) bool {
	for _, set := range sets {
		for _, p := range set {
			if p.PerMessage {
				return true
			}
		}
	}
	return false
}

// meteredStream charges the PerMessage policies of a stream on each
// message received, under the Config in force at the stream's open.
type meteredStream struct {
	grpc.ServerStream
	v      *state
	method string
	sets   [3][]*ratepolicy.Compiled[*Call]
}

// RecvMsg receives a message and charges it; a refused message is dropped
// and RecvMsg returns the refusal (the handler should return it).
func (m *meteredStream) RecvMsg(msg any) error {
	if err := m.ServerStream.RecvMsg(msg); err != nil {
		return err
	}
	sc := getScratch(m.ServerStream.Context(), m.method, true, msg)
	defer putScratch(sc)
	err := m.v.decide(sc, m.sets, ratepolicy.MessagePolicies)
	if err != nil && sc.d.Denied {
		m.ServerStream.SetTrailer(pushback(&sc.d))
	}
	return err
}

// refusedTrailer is the trailer of a refused call: the rate-limit
// metadata and grpc-retry-pushback-ms, or nil when the Limiter failed.
// A refusal sends no header metadata: a response with headers commits the
// call, and gRPC's retry policy no longer retries it; without them the
// refusal is trailers-only and the pushback is honoured.
func (v *state) refusedTrailer(d *ratepolicy.Decision[*Call]) metadata.MD {
	if !d.Denied {
		return nil
	}
	return v.header(d, pushback(d))
}

// header is the rate-limit metadata of d added to md (nil: a new MD), or
// md when d has none.
//
// It allocates the text of the values once (they are substrings of it),
// one []string they share, and the map.
func (v *state) header(d *ratepolicy.Decision[*Call], md metadata.MD) metadata.MD {
	draft := v.headers == HeadersDraft && len(d.Outcomes) > 0
	degraded := v.degraded != "" && d.Degraded
	if !draft && !degraded {
		return md
	}
	n := 0
	if draft {
		n = 2
	}
	if degraded {
		n++
	}
	vals := make([]string, n)
	if md == nil {
		md = make(metadata.MD, n)
	}
	if draft {
		var stack [256]byte
		b, values := ratepolicy.AppendDraft(stack[:0], d.Outcomes, v.secret)
		vals[0], vals[1] = values.Values(string(b))
		md[MetadataPolicy] = vals[0:1:1]
		md[MetadataRateLimit] = vals[1:2:2]
	}
	if degraded {
		vals[n-1] = "?1"
		md[v.degraded] = vals[n-1 : n : n]
	}
	return md
}
