// Package rls is sluice as Envoy's rate limit service: ShouldRateLimit of
// envoy.service.ratelimit.v3 decided by one sluice batch decision per
// request, under a configuration read by package rlsconf, plus the HTTP
// /json and /healthcheck endpoints of envoyproxy/ratelimit and its
// statistics as OpenTelemetry metrics.
package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
	"github.com/sluice-go/sluice/cmd/sluice-rls/internal/rlsconf"
	"github.com/sluice-go/sluice/overrides"
)

// Options configures a Service.
type Options struct {
	// Limiter decides (required). Its failure policy decides while Redis
	// is unavailable; with sluice.FailClosed such a request is answered
	// UNAVAILABLE, for Envoy's failure_mode_deny to decide.
	Limiter *sluice.Limiter
	// Shadow puts every rule in shadow mode: decided, charged and
	// reported (a status over its limit still says OVER_LIMIT), but the
	// overall code is always OK.
	Shadow bool
	// Headers chooses the response_headers_to_add (default HeadersDraft).
	Headers Headers
	// NearLimitRatio is the share of a limit past which hits count as
	// near_limit (default 0.8, as envoyproxy/ratelimit's NEAR_LIMIT_RATIO).
	NearLimitRatio float64
	// MeterProvider, when set, records envoyproxy/ratelimit's statistics.
	MeterProvider metric.MeterProvider
	// Clock is what a fixed window's reset counts from (default
	// time.Now); the Limiter's clock when it has one (sluice.WithClock).
	Clock func() time.Time
	// Logger receives configuration changes, and overrides that make no
	// valid limit of their rule's (default slog.Default()).
	Logger *slog.Logger
	// Overrides, when set, is asked for every descriptor a rule checks
	// whether its identity has an override (an *overrides.Store, which
	// answers from memory in steady state). The override's policy is the
	// name the rule's state is kept under, the Limit's Name (the rule's
	// name when it has an identity, else its algorithm: fixed_window, ...),
	// and its identity the one the descriptor is counted by
	// (rlsconf.Match.IdentityOf; for a descriptor's own limit,
	// rlsconf.DescriptorIdentity): what "sluice override set -policy P
	// IDENTITY" names. As in package ratepolicy: Exempt leaves the
	// descriptor unchecked (OK, nothing charged, no header item or
	// statistics); Block refuses it without asking Redis (OVER_LIMIT,
	// duration_until_reset until Until, at most overrides.MaxBlockWait),
	// and when the rule is enforced the request's other descriptors are
	// then neither asked nor charged; Limit replaces the rule's limit
	// (overrides.Override.Apply): current_limit, the decision and the
	// headers are the override's. Clock should be the Store's clock.
	Overrides ratepolicy.Overrides
}

// Headers says which response headers ShouldRateLimit asks Envoy to add.
type Headers int

const (
	// HeadersDraft adds RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers-11), one item per rule
	// decided.
	HeadersDraft Headers = iota
	// HeadersLegacy adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (a Unix time, in seconds) of the rule that binds.
	HeadersLegacy
	// HeadersBoth adds both.
	HeadersBoth
	// HeadersNone adds none.
	HeadersNone
)

// ParseHeaders reads draft, legacy, both or none.
func ParseHeaders(s string) (Headers, error) {
	switch s {
	case "draft":
		return HeadersDraft, nil
	case "legacy":
		return HeadersLegacy, nil
	case "both":
		return HeadersBoth, nil
	case "none":
		return HeadersNone, nil
	}
	return 0, fmt.Errorf("headers %q: want draft, legacy, both or none", s)
}

// Service implements envoy.service.ratelimit.v3.RateLimitService. Its
// methods are safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	o       Options
	state   atomic.Pointer[state]
	met     *metrics
	scratch sync.Pool
	badOvr  overrides.Warner // an override making no valid limit: logged once a minute
}

// state is one configuration in force, with what is prepared from it.
type state struct {
	cfg     *rlsconf.Config
	headers *headerPolicies
	limits  map[*rlsconf.Rule]*rlsv3.RateLimitResponse_RateLimit
}

// New returns a Service with no configuration: it answers UNAVAILABLE
// until Update gives it one.
func New(o Options) (*Service, error) {
	if o.Limiter == nil {
		return nil, errors.New("rls: no Limiter")
	}
	if o.Headers < HeadersDraft || o.Headers > HeadersNone {
		return nil, fmt.Errorf("rls: unknown Headers %d", o.Headers)
	}
	if o.NearLimitRatio == 0 {
		o.NearLimitRatio = 0.8
	}
	if o.NearLimitRatio < 0 || o.NearLimitRatio > 1 {
		return nil, fmt.Errorf("rls: NearLimitRatio %v: want a share from 0 to 1", o.NearLimitRatio)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Service{o: o}
	s.badOvr.Every = time.Minute
	var err error
	if s.met, err = newMetrics(o.MeterProvider); err != nil {
		return nil, err
	}
	s.scratch.New = func() any { return new(work) }
	return s, nil
}

// Update puts c in force: the next request is decided under it. Counts
// carry over for every rule whose descriptors and algorithm stay the
// same, whatever its numbers, as envoyproxy/ratelimit's do.
func (s *Service) Update(c *rlsconf.Config) error {
	if c == nil {
		return errors.New("rls: Update(nil)")
	}
	st := &state{cfg: c, limits: map[*rlsconf.Rule]*rlsv3.RateLimitResponse_RateLimit{}}
	var rules []*rlsconf.Rule
	for _, d := range c.Domains() {
		c.Rules(d, func(r *rlsconf.Rule) {
			rules = append(rules, r)
			if !r.Unlimited {
				st.limits[r] = &rlsv3.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: unitOf(r.Unit)}
			}
		})
	}
	var err error
	if st.headers, err = newHeaderPolicies(s.o.Limiter, rules); err != nil {
		return err
	}
	s.state.Store(st)
	return nil
}

// Config returns the configuration in force, or nil.
func (s *Service) Config() *rlsconf.Config {
	if st := s.state.Load(); st != nil {
		return st.cfg
	}
	return nil
}

// unitOf is the response's unit of a unit name.
func unitOf(name string) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch name {
	case "second":
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case "minute":
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case "hour":
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case "day":
		return rlsv3.RateLimitResponse_RateLimit_DAY
	case "week":
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	case "month":
		return rlsv3.RateLimitResponse_RateLimit_MONTH
	case "year":
		return rlsv3.RateLimitResponse_RateLimit_YEAR
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

// overrideUnit is the unit name of a descriptor's limit override, whose
// enum numbers are the response's.
func overrideUnit(u rlsv3.RateLimitResponse_RateLimit_Unit) (string, bool) {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return "second", true
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return "minute", true
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return "hour", true
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return "day", true
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return "week", true
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return "month", true
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return "year", true
	}
	return "", false
}

// kind is what a descriptor of a request comes to.
type kind uint8

const (
	kindNone      kind = iota // no rule, or a rule another replaces: OK
	kindUnlimited             // OK, unasked
	kindChecked               // a check of the batch
	kindZero                  // a rule of 0 requests per unit: refuses any cost, unasked
	kindUnasked               // a check left out of a batch a zero rule, a block or a cached denial refused
	kindExempt                // an Exempt override: OK, unasked
	kindBlocked               // a Block override: refused, unasked
)

// item is one descriptor of a request.
type item struct {
	kind     kind
	entries  []rlsconf.Entry
	rule     *rlsconf.Rule // the rule, or the override's own
	header   *rlsconf.Rule // the rule named in RateLimit headers (an override's: the rule it overrides, if any)
	statsKey string
	limit    sluice.Limit   // the limit applied: the rule's, or an override's
	override overrides.Kind // the kind of the override that applied (Limit or Block), 0 when none did
	hits     uint64
	shadow   bool // the rule's shadow_mode or quota_mode
	check    int  // its check in the batch
	over     bool // refused (its status says OVER_LIMIT unless shadow)
	res      sluice.Result
	reset    time.Duration // its duration_until_reset
}

// work is one request's scratch space, pooled.
type work struct {
	items     []item
	entries   []rlsconf.Entry
	replacing []string
	checks    []sluice.Check
	dec       sluice.Decision
	buf       []byte
	outs      []ratepolicy.Outcome[req]
}

func (w *work) reset(n int) {
	w.items = slices.Grow(w.items[:0], n)[:n]
	clear(w.items)
	w.entries, w.replacing, w.checks, w.buf = w.entries[:0], w.replacing[:0], w.checks[:0], w.buf[:0]
}

// ShouldRateLimit decides a request: every descriptor that a rule limits
// is one check of one batch decision (one round trip to each Redis node
// involved), so a request that any enforced rule refuses charges none of
// them. hits_addend is each check's cost.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	domain, descs := req.GetDomain(), req.GetDescriptors()
	if domain == "" {
		s.met.serviceError(ctx)
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(descs) == 0 {
		s.met.serviceError(ctx)
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	st := s.state.Load()
	if st == nil {
		s.met.serviceError(ctx)
		return nil, status.Error(codes.Unavailable, "no rate limit configuration loaded")
	}
	w := s.scratch.Get().(*work)
	defer s.scratch.Put(w)
	w.reset(len(descs))
	if err := s.match(ctx, st, w, domain, req); err != nil {
		s.met.serviceError(ctx)
		return nil, err
	}
	if err := s.decide(ctx, w); err != nil {
		s.met.redisError(ctx)
		return nil, err
	}
	return s.respond(ctx, st, w, domain), nil
}

// match finds each descriptor's rule and what it costs.
func (s *Service) match(ctx context.Context, st *state, w *work, domain string, req *rlsv3.RateLimitRequest) error {
	cfg := st.cfg
	known := cfg.HasDomain(domain)
	if !known {
		s.met.domainNotFound(domain)
	}
	descs := req.GetDescriptors()
	for i, d := range descs {
		start := len(w.entries)
		for _, e := range d.GetEntries() {
			w.entries = append(w.entries, rlsconf.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		it := &w.items[i]
		it.entries = w.entries[start:len(w.entries):len(w.entries)]
		it.hits = hitsOf(req, d)
		if !known {
			continue
		}
		m, _ := cfg.Lookup(domain, it.entries)
		if o := d.GetLimit(); o != nil {
			unit, ok := overrideUnit(rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit()))
			if !ok {
				return status.Errorf(codes.InvalidArgument, "descriptor %d: limit: unit %v: want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR", i, o.GetUnit())
			}
			r := &rlsconf.Rule{Key: descriptorKey(domain, it.entries), RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit}
			if r.RequestsPerUnit > 0 {
				period, _ := rlsconf.UnitPeriod(unit)
				r.Limit = sluice.Limit{Algorithm: sluice.AlgFixedWindow, Rate: int64(r.RequestsPerUnit), Period: period, Name: string(sluice.AlgFixedWindow)}
			}
			it.rule, it.header, it.statsKey = r, m.Rule, r.Key
			if r.Limit.Algorithm == "" {
				it.kind = kindZero
				continue
			}
			// The override counts the descriptor itself, as a rule's
			// default identity does (shared wildcards aside).
			s.check(ctx, w, it, rlsconf.DescriptorIdentity(domain, it.entries, nil), r.Limit)
			continue
		}
		if m.Rule == nil {
			continue
		}
		it.rule, it.header, it.statsKey = m.Rule, m.Rule, m.StatsKey
		w.replacing = append(w.replacing, m.Rule.Replaces...)
		switch {
		case m.Rule.Unlimited:
			it.kind = kindUnlimited
		case m.Rule.Limit.Algorithm == "":
			it.kind = kindZero
			it.shadow = m.Rule.Shadow || m.Rule.Quota
		default:
			it.shadow = m.Rule.Shadow || m.Rule.Quota
			s.check(ctx, w, it, m.IdentityOf(domain, it.entries), m.Rule.Limit)
		}
	}
	// A rule that another replaces is left out, and so is its check.
	keep := w.checks[:0]
	refused := false // a zero rule refuses the request
	blocked := false // an enforced rule's Block override refuses it
	for i := range w.items {
		it := &w.items[i]
		if it.rule != nil && it.rule.Name != "" && slices.Contains(w.replacing, it.rule.Name) {
			it.kind = kindNone
		}
		switch it.kind {
		case kindChecked:
			c := w.checks[it.check]
			c.Cost = int64(min(it.hits, sluice.MaxCost))
			c.Shadow = it.shadow || s.o.Shadow
			it.check = len(keep)
			keep = append(keep, c)
		case kindZero:
			refused = refused || it.hits > 0 && !it.shadow && !s.o.Shadow
		case kindBlocked:
			blocked = blocked || !it.shadow && !s.o.Shadow
		}
	}
	w.checks = keep
	if blocked {
		// Refused whatever the others answer: ask Redis nothing, as a
		// cached denial does.
		for i := range w.items {
			if it := &w.items[i]; it.kind == kindChecked {
				it.kind = kindUnasked
			}
		}
		w.checks = w.checks[:0]
	} else if refused {
		// Nothing is charged: the other checks only report.
		keep = w.checks[:0]
		for i := range w.items {
			it := &w.items[i]
			if it.kind != kindChecked {
				continue
			}
			if it.limit.Algorithm == sluice.AlgConcurrency {
				it.kind = kindUnasked // a report would take a slot
				continue
			}
			c := w.checks[it.check]
			c.Cost = 0
			it.check = len(keep)
			keep = append(keep, c)
		}
		w.checks = keep
	}
	if len(w.checks) > sluice.MaxChecks {
		return status.Errorf(codes.InvalidArgument, "%d descriptors with limits in one request: at most %d", len(w.checks), sluice.MaxChecks)
	}
	return nil
}

// check makes descriptor it a check of identity under lim, or what an
// override of identity under lim's name makes of it: exempt, blocked, or a
// check under the override's limit.
func (s *Service) check(ctx context.Context, w *work, it *item, identity string, lim sluice.Limit) {
	it.kind, it.limit = kindChecked, lim
	if s.o.Overrides != nil {
		if o, ok := s.o.Overrides.Lookup(ctx, lim.Name, identity); ok {
			switch o.Kind {
			case overrides.Exempt:
				it.kind = kindExempt
				return
			case overrides.Block:
				wait := o.BlockWait(s.o.Clock())
				it.kind, it.override = kindBlocked, overrides.Block
				it.res = sluice.Result{Limit: lim, RetryAfter: wait, ResetAfter: wait}
				return
			case overrides.Limit:
				if l, err := o.Apply(lim); err == nil {
					it.limit, it.override = l, overrides.Limit
				} else {
					s.unusable(err)
				}
			}
		}
	}
	w.checks = append(w.checks, sluice.Check{Identity: identity, Limit: it.limit})
	it.check = len(w.checks) - 1
}

// unusable logs, at most once a minute, a Limit override that makes no
// valid limit of its rule's (the rule's own limit applies).
func (s *Service) unusable(err error) {
	s.badOvr.Warn(s.o.Logger, "sluice-rls: override ignored; the rule's own limit applies", err)
}

// hitsOf is the cost of descriptor d: its own hits_addend when set, else
// the request's, at least 1; is_negative_hits gives nothing back here
// and only reports.
func hitsOf(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) uint64 {
	if d.GetIsNegativeHits() {
		return 0
	}
	if h := d.GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	return uint64(max(1, req.GetHitsAddend()))
}

// descriptorKey is envoyproxy/ratelimit's name for a descriptor:
// "domain.key1_value1.key2".
func descriptorKey(domain string, entries []rlsconf.Entry) string {
	n := len(domain)
	for _, e := range entries {
		n += 2 + len(e.Key) + len(e.Value)
	}
	b := make([]byte, 0, n)
	b = append(b, domain...)
	for _, e := range entries {
		b = append(b, '.')
		b = append(b, e.Key...)
		if e.Value != "" {
			b = append(b, '_')
			b = append(b, e.Value...)
		}
	}
	return string(b)
}

// ErrStoreUnavailable is the error of a request that Redis could not
// decide while the Limiter fails closed.
var ErrStoreUnavailable = status.Error(codes.Unavailable, "rate limit store unavailable (failing closed): Envoy's failure_mode_deny decides")

// decide makes the batch decision.
func (s *Service) decide(ctx context.Context, w *work) error {
	if len(w.checks) == 0 {
		return nil
	}
	lim := s.o.Limiter
	if err := lim.DecideInto(ctx, &w.dec, w.checks...); err != nil {
		switch {
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			return status.FromContextError(err).Err()
		case errors.Is(err, sluice.ErrClosed):
			return status.Error(codes.Unavailable, "rate limit service shutting down")
		}
		return status.Errorf(codes.Internal, "sluice-rls: %v", err)
	}
	if lim.FailurePolicy() == sluice.FailClosed && !w.dec.Allowed {
		for i, r := range w.dec.Results {
			if r.Degraded && !r.Allowed && !w.checks[i].Shadow {
				return ErrStoreUnavailable
			}
		}
	}
	return nil
}

// respond writes the response and records the statistics.
func (s *Service) respond(ctx context.Context, st *state, w *work, domain string) *rlsv3.RateLimitResponse {
	n := len(w.items)
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	sts := make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
	var durs []durationpb.Duration
	now := s.o.Clock()
	over := false
	for i := range w.items {
		it := &w.items[i]
		ds := &sts[i]
		resp.Statuses[i] = ds
		ds.Code = rlsv3.RateLimitResponse_OK
		switch it.kind {
		case kindNone:
			continue
		case kindUnlimited, kindExempt:
			ds.LimitRemaining = math.MaxUint32
			continue
		}
		if durs == nil {
			durs = make([]durationpb.Duration, n)
		}
		ds.CurrentLimit = st.limits[it.rule]
		switch {
		case it.override == overrides.Limit:
			ds.CurrentLimit = currentLimit(it.rule, it.limit)
		case ds.CurrentLimit == nil: // a descriptor's own limit
			ds.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: it.rule.RequestsPerUnit, Unit: unitOf(it.rule.Unit)}
		}
		period, _ := rlsconf.UnitPeriod(it.rule.Unit)
		var reset time.Duration
		switch it.kind {
		case kindZero:
			it.over = it.hits > 0
			reset = windowLeft(now, period)
		case kindUnasked:
			reset = windowLeft(now, period)
		case kindBlocked:
			it.over = true
			reset = it.res.RetryAfter
		case kindChecked:
			if !w.dec.Asked(it.check) {
				// A cached denial of another check refused the request
				// before this one was asked.
				it.kind = kindUnasked
				reset = windowLeft(now, period)
				break
			}
			it.res = w.dec.Results[it.check]
			it.over = !it.res.Allowed
			ds.LimitRemaining = uint32(min(max(it.res.Remaining, 0), math.MaxUint32))
			reset = resetOf(it.res, it.limit, now)
		}
		it.reset = reset
		ds.DurationUntilReset = &durs[i]
		ds.DurationUntilReset.Seconds = ceilSeconds(reset)
		if it.over && !it.shadow {
			ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			over = true
		}
		charged := w.dec.Allowed && it.kind == kindChecked && it.res.Allowed && w.checks[it.check].Cost > 0
		s.met.record(domain, it, charged, s.o.NearLimitRatio)
	}
	if over {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		if s.o.Shadow {
			resp.OverallCode = rlsv3.RateLimitResponse_OK
			s.met.globalShadow(ctx)
		}
	}
	resp.ResponseHeadersToAdd = s.headers(st, w, now)
	return resp
}

// currentLimit is the current_limit of rule r under l, an override's
// limit: l's rate per l's period when that is a unit, else per the rule's
// unit, scaled (rounded down, at least 1).
func currentLimit(r *rlsconf.Rule, l sluice.Limit) *rlsv3.RateLimitResponse_RateLimit {
	cl := &rlsv3.RateLimitResponse_RateLimit{Name: r.Name, Unit: unitOf(r.Unit)}
	unit, _ := rlsconf.UnitPeriod(r.Unit)
	for name, p := range rlsconf.Units {
		if p == l.Period {
			cl.Unit, unit = unitOf(name), p
			break
		}
	}
	rate := float64(l.Rate)
	if unit != l.Period && l.Period > 0 {
		rate = math.Floor(rate * float64(unit) / float64(l.Period))
	}
	cl.RequestsPerUnit = uint32(min(max(rate, 1), math.MaxUint32))
	return cl
}

// windowLeft is the time from now to the end of the window of period
// that holds it, windows aligned to the Unix epoch.
func windowLeft(now time.Time, period time.Duration) time.Duration {
	if period <= 0 {
		return 0
	}
	return period - time.Duration(now.UnixNano()%int64(period))
}

// resetOf is a status's duration_until_reset: for a fixed window the
// end of the current window, as envoyproxy/ratelimit reports it; for the
// other algorithms, when denied the wait until the same cost is admitted,
// else until the quota is whole again.
func resetOf(r sluice.Result, lim sluice.Limit, now time.Time) time.Duration {
	switch {
	case lim.Algorithm == sluice.AlgFixedWindow || lim.Algorithm == sluice.AlgConcurrency:
		return windowLeft(now, lim.Period)
	case !r.Allowed && r.RetryAfter == sluice.RetryNever:
		return lim.Period
	case !r.Allowed:
		return r.RetryAfter
	}
	return r.ResetAfter
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
