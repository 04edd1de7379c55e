package sluice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
)

// RetryNever is Result.RetryAfter when the cost asked for can never be
// admitted (it exceeds the limit's capacity).
const RetryNever time.Duration = -1

// Result is one decision.
type Result struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool
	// Limit is the limit that decided; for AllowAll, the binding one.
	Limit Limit
	// Remaining is the largest cost that would be admitted right after
	// this decision.
	Remaining int64
	// RetryAfter is 0 when allowed; otherwise the shortest wait after which
	// the same cost is admitted (at least 1µs), or RetryNever.
	RetryAfter time.Duration
	// ResetAfter is the time until the limit's state is empty (or the
	// bucket full): after it, the identity has its whole quota back.
	ResetAfter time.Duration
	// Degraded reports that Redis could not be asked and the decision
	// comes from the failure policy.
	Degraded bool
}

// FailurePolicy says what a decision is when Redis errs, is slow, or the
// circuit breaker is open.
type FailurePolicy int

const (
	// FailOpen admits every request while Redis is unavailable (default):
	// an outage of the limiter never becomes an outage of the API.
	FailOpen FailurePolicy = iota
	// FailClosed denies every request while Redis is unavailable.
	FailClosed
	// FailLocal decides with an in-process quota: each replica admits its
	// share (Rate/replicas, at least 1) of every limit; see WithLocalFallback.
	FailLocal
)

func (p FailurePolicy) String() string {
	switch p {
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	case FailLocal:
		return "fail-local"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// ErrInvalidCost means a negative cost was passed.
var ErrInvalidCost = errors.New("sluice: invalid cost")

// ErrInvalidOption means New was given an option value it cannot use; the
// wrapping error names the option.
var ErrInvalidOption = errors.New("sluice: invalid option")

// ErrBreakerOpen is the cause logged for decisions made without asking
// Redis because the circuit breaker is open.
var ErrBreakerOpen = errors.New("sluice: circuit breaker open")

type config struct {
	prefix           string
	policy           FailurePolicy
	replicas         int
	timeout          time.Duration
	breakerThreshold int
	breakerCooldown  time.Duration
	clock            func() time.Time
	logger           *slog.Logger
	meterProvider    metric.MeterProvider
}

// Option configures a Limiter.
type Option func(*config) error

// WithPrefix sets the first part of every key (default "sluice"): keys are
// PREFIX:{IDENTITY}:LIMIT-NAME. It must be 1 to 64 bytes without braces,
// spaces or control characters.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if prefix == "" || len(prefix) > 64 || strings.ContainsAny(prefix, "{} \t\r\n") || !printable(prefix) {
			return fmt.Errorf("%w: WithPrefix(%q): want 1 to 64 printable bytes without braces or spaces", ErrInvalidOption, prefix)
		}
		c.prefix = prefix
		return nil
	}
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// WithFailurePolicy chooses what happens when Redis is unavailable
// (default FailOpen).
func WithFailurePolicy(p FailurePolicy) Option {
	return func(c *config) error {
		if p < FailOpen || p > FailLocal {
			return fmt.Errorf("%w: WithFailurePolicy(%d): unknown policy", ErrInvalidOption, int(p))
		}
		c.policy = p
		return nil
	}
}

// WithLocalFallback selects FailLocal for a fleet of the given number of
// replicas: while Redis is unavailable each replica admits 1/replicas of
// every limit from memory.
func WithLocalFallback(replicas int) Option {
	return func(c *config) error {
		if replicas < 1 {
			return fmt.Errorf("%w: WithLocalFallback(%d): replicas must be at least 1", ErrInvalidOption, replicas)
		}
		c.policy, c.replicas = FailLocal, replicas
		return nil
	}
}

// WithTimeout bounds each call to Redis (default 100ms); past it the
// failure policy decides. 0 means only the caller's context bounds it.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithTimeout(%v): must not be negative", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}

// WithBreaker sets the circuit breaker: after threshold consecutive
// failures, decisions skip Redis for cooldown, then one probe call decides
// whether to close it again (default 5 failures, 1s). A threshold of 0
// turns the breaker off.
func WithBreaker(threshold int, cooldown time.Duration) Option {
	return func(c *config) error {
		if threshold < 0 || cooldown <= 0 && threshold > 0 {
			return fmt.Errorf("%w: WithBreaker(%d, %v): want threshold >= 0 and a positive cooldown", ErrInvalidOption, threshold, cooldown)
		}
		c.breakerThreshold, c.breakerCooldown = threshold, cooldown
		return nil
	}
}

// WithClock makes the scripts use this clock instead of Redis TIME: each
// call sends now in microseconds. Use it for tests and simulations, or when
// every replica's clock is trusted more than the server's. By default the
// Redis server's clock decides, so replica clock skew cannot matter.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: WithClock(nil)", ErrInvalidOption)
		}
		c.clock = now
		return nil
	}
}

// WithLogger sets where breaker state changes are logged (default
// slog.Default(); nil discards them). Decisions themselves are never logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			l = slog.New(slog.NewTextHandler(io.Discard, nil))
		}
		c.logger = l
		return nil
	}
}

// Limiter makes rate-limiting decisions in Redis. It is safe for
// concurrent use; create one per client and share it.
type Limiter struct {
	client  rueidis.CommandClient
	cfg     config
	now     func() time.Time // the clock of the breaker and the local fallback: cfg.clock or time.Now
	breaker *breaker
	local   *localFallback
	metrics *metrics // nil: no metrics
}

// New returns a Limiter over client. For a real Redis, rueidis' client-side
// caching buys nothing here (set DisableCache); against miniredis set
// DisableCache and ForceSingleClient.
func New(client rueidis.Client, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	cfg := config{
		prefix:           "sluice",
		timeout:          100 * time.Millisecond,
		breakerThreshold: 5,
		breakerCooldown:  time.Second,
		replicas:         1,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	m, err := newMetrics(cfg.meterProvider)
	if err != nil {
		return nil, err
	}
	l := &Limiter{client: client, cfg: cfg, metrics: m, now: cfg.clock}
	if l.now == nil {
		l.now = time.Now
	}
	l.breaker = newBreaker(cfg.breakerThreshold, cfg.breakerCooldown, l.now, func(from, to breakerState) {
		m.transition(to)
		switch to {
		case breakerOpen:
			cfg.logger.Warn("sluice: Redis unavailable; circuit breaker open, failure policy decides",
				"policy", cfg.policy.String(), "cooldown", cfg.breakerCooldown)
		case breakerClosed:
			cfg.logger.Info("sluice: Redis reachable again; circuit breaker closed")
		}
	})
	if cfg.policy == FailLocal {
		l.local = newLocalFallback(cfg.replicas)
	}
	return l, nil
}

// Key returns the Redis key that holds lim's state for identity, as
// PREFIX:{TAG}:NAME where TAG is the identity or, for identities that are
// not short and plain, "~" and its SHA-256.
func (l *Limiter) Key(identity string, lim Limit) string {
	return key(l.cfg.prefix, identity, lim.Name)
}

// Allow is AllowN with a cost of 1.
func (l *Limiter) Allow(ctx context.Context, identity string, lim Limit) (Result, error) {
	return l.AllowN(ctx, identity, lim, 1)
}

// Peek reports what AllowN with a cost of 1 would decide, without charging
// anything: Remaining is the quota left.
func (l *Limiter) Peek(ctx context.Context, identity string, lim Limit) (Result, error) {
	return l.AllowN(ctx, identity, lim, 0)
}

// AllowN decides whether identity may spend cost units of lim now, and
// charges them if so. A denied request charges nothing; cost 0 only
// reports. The error is non-nil only for an invalid limit or cost, or when
// ctx itself ends; Redis failures are handled by the failure policy and
// reported through Result.Degraded.
func (l *Limiter) AllowN(ctx context.Context, identity string, lim Limit, cost int64) (Result, error) {
	if err := lim.Validate(); err != nil {
		return Result{}, err
	}
	if err := checkCost(cost); err != nil {
		return Result{}, err
	}
	if lim.Algorithm == AlgConcurrency {
		return Result{}, fmt.Errorf("%w: %s is a concurrency limit; use Acquire and Release", ErrInvalidLimit, lim.Name)
	}
	start := time.Now()
	k := l.Key(identity, lim)
	call := rateCall(k, lim, cost, l.nowArg())
	d, err := l.do(ctx, call, decodeRate)
	var res Result
	if err != nil {
		if res, err = l.fallback(ctx, k, lim, cost, err); err != nil {
			return res, err
		}
	} else {
		res = d.result(lim)
	}
	l.metrics.decision(ctx, res, start)
	return res, nil
}

// AllowAll checks several limits of one identity (say 10 per second and
// 1000 per hour) in one atomic script: the cost is charged to every limit
// if all admit it, and to none otherwise. Every limit must use AlgGCRA, or
// every limit AlgSlidingWindow; at most 16, with distinct names. The
// Result's Limit is the binding one: the limit that denied, or the one
// with the least remaining.
func (l *Limiter) AllowAll(ctx context.Context, identity string, cost int64, limits ...Limit) (Result, error) {
	if len(limits) == 0 || len(limits) > 16 {
		return Result{}, fmt.Errorf("%w: AllowAll takes 1 to 16 limits, got %d", ErrInvalidLimit, len(limits))
	}
	if err := checkCost(cost); err != nil {
		return Result{}, err
	}
	alg := limits[0].Algorithm
	names := make([]string, len(limits))
	specs := make([]string, len(limits))
	for i, lim := range limits {
		if err := lim.Validate(); err != nil {
			return Result{}, err
		}
		if lim.Algorithm != alg || (alg != AlgGCRA && alg != AlgSlidingWindow) {
			return Result{}, fmt.Errorf("%w: AllowAll needs all limits to be gcra or all sliding_window, got %s and %s", ErrInvalidLimit, alg, lim.Algorithm)
		}
		if slices.Contains(names[:i], lim.Name) {
			return Result{}, fmt.Errorf("%w: AllowAll: limit name %q given twice", ErrInvalidLimit, lim.Name)
		}
		names[i] = lim.Name
		if alg == AlgGCRA {
			specs[i] = fmt.Sprintf("%d:%d:%d", lim.Rate, lim.periodMicros(), lim.Burst)
		} else {
			specs[i] = fmt.Sprintf("%d:%d", lim.Rate, lim.periodMicros())
		}
	}
	start := time.Now()
	k := key(l.cfg.prefix, identity, "all:"+strings.Join(names, "+"))
	now := l.nowArg()
	var call luart.Call
	if alg == AlgGCRA {
		call = scripts.GcraMulti.Call(scripts.GcraMultiKeys{State: k},
			scripts.GcraMultiArgs{Limits: strings.Join(specs, ","), Cost: cost, Now: now})
	} else {
		call = scripts.SlidingWindowMulti.Call(scripts.SlidingWindowMultiKeys{State: k},
			scripts.SlidingWindowMultiArgs{Limits: strings.Join(specs, ","), Cost: cost, Now: now})
	}
	d, err := l.do(ctx, call, func(_ *luart.Script, r rueidis.RedisResult) (decision, error) {
		if alg == AlgGCRA {
			m, err := scripts.GcraMulti.Decode(r)
			return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, m.Limiting}, err
		}
		m, err := scripts.SlidingWindowMulti.Decode(r)
		return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, m.Limiting}, err
	})
	if err != nil {
		// The fallback charges each limit on its own; report the most
		// restrictive outcome.
		var worst Result
		for i, lim := range limits {
			r, ferr := l.fallback(ctx, key(l.cfg.prefix, identity, lim.Name), lim, cost, err)
			if ferr != nil {
				return r, ferr
			}
			if i == 0 || !r.Allowed && worst.Allowed || r.Allowed == worst.Allowed && r.Remaining < worst.Remaining {
				worst = r
			}
		}
		l.metrics.decision(ctx, worst, start)
		return worst, nil
	}
	bind := limits[0]
	if d.limiting >= 1 && int(d.limiting) <= len(limits) {
		bind = limits[d.limiting-1]
	}
	res := d.result(bind)
	l.metrics.decision(ctx, res, start)
	return res, nil
}

// Reset forgets lim's state for identity: the whole quota is back.
func (l *Limiter) Reset(ctx context.Context, identity string, lim Limit) error {
	if err := lim.Validate(); err != nil {
		return err
	}
	k := l.Key(identity, lim)
	if err := l.client.Do(ctx, l.client.B().Del().Key(k).Build()).Error(); err != nil {
		return fmt.Errorf("sluice: reset %s: %w", k, err)
	}
	return nil
}

// Lease is a slot taken by Acquire. Give it back with Release.
type Lease struct {
	// ID identifies the holder (random, 128 bits).
	ID    string
	key   string
	limit Limit
	local bool // taken from the local fallback
}

// Acquire takes one of lim.Rate in-flight slots for identity for at most
// lim.Period (the lease). If Result.Allowed, call Release with the Lease
// when the work is done; a holder that never does loses the slot when the
// lease expires. lim must be a Concurrency limit.
func (l *Limiter) Acquire(ctx context.Context, identity string, lim Limit) (Lease, Result, error) {
	if err := lim.Validate(); err != nil {
		return Lease{}, Result{}, err
	}
	if lim.Algorithm != AlgConcurrency {
		return Lease{}, Result{}, fmt.Errorf("%w: Acquire needs a concurrency limit, got %s", ErrInvalidLimit, lim.Algorithm)
	}
	start := time.Now()
	var idb [16]byte
	_, _ = rand.Read(idb[:])
	lease := Lease{ID: hex.EncodeToString(idb[:]), key: l.Key(identity, lim), limit: lim}
	call := scripts.ConcurrencyAcquire.Call(scripts.ConcurrencyAcquireKeys{Holders: lease.key},
		scripts.ConcurrencyAcquireArgs{Limit: lim.Rate, Lease: lim.periodMicros(), Id: lease.ID, Now: l.nowArg()})
	d, err := l.do(ctx, call, func(_ *luart.Script, r rueidis.RedisResult) (decision, error) {
		m, err := scripts.ConcurrencyAcquire.Decode(r)
		return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, 0}, err
	})
	if err != nil {
		if ctx.Err() != nil {
			return Lease{}, Result{}, fmt.Errorf("sluice: %w", ctx.Err())
		}
		if errors.As(err, new(errRejected)) {
			return Lease{}, Result{}, fmt.Errorf("%w: %s: %w", ErrInvalidLimit, lim.Name, err)
		}
		l.metrics.failure(ctx, lim, err)
		var res Result
		switch l.cfg.policy {
		case FailLocal:
			res = l.local.acquire(lease.key, lim)
			lease.local = true
		case FailClosed:
			res = Result{Limit: lim, RetryAfter: l.cfg.breakerCooldown, Degraded: true}
		default:
			lease.local = true // nothing to release in Redis
			res = Result{Allowed: true, Limit: lim, Remaining: lim.Rate - 1, Degraded: true}
		}
		l.metrics.decision(ctx, res, start)
		if !res.Allowed {
			return Lease{}, res, nil
		}
		return lease, res, nil
	}
	res := d.result(lim)
	l.metrics.decision(ctx, res, start)
	if !res.Allowed {
		return Lease{}, res, nil
	}
	return lease, res, nil
}

// Release gives back a slot taken by Acquire. Releasing a zero Lease, or
// one already released or expired, does nothing.
func (l *Limiter) Release(ctx context.Context, lease Lease) error {
	if lease.ID == "" {
		return nil
	}
	if lease.local {
		if l.local != nil {
			l.local.release(lease.key)
		}
		return nil
	}
	call := scripts.ConcurrencyRelease.Call(scripts.ConcurrencyReleaseKeys{Holders: lease.key},
		scripts.ConcurrencyReleaseArgs{Id: lease.ID, Now: l.nowArg()})
	if _, err := l.do(ctx, call, func(_ *luart.Script, r rueidis.RedisResult) (decision, error) {
		_, err := scripts.ConcurrencyRelease.Decode(r)
		return decision{}, err
	}); err != nil {
		return fmt.Errorf("sluice: release %s: %w (the lease expires by itself after %v)", lease.key, err, lease.limit.Period)
	}
	return nil
}

func checkCost(cost int64) error {
	if cost < 0 || cost > MaxCost {
		return fmt.Errorf("%w: cost must be between 0 and 2^52, got %d", ErrInvalidCost, cost)
	}
	return nil
}

// errRejected marks a script's own refusal of its arguments ("ERR sluice:
// ..."): a caller's mistake, not a Redis failure, so the failure policy
// and the breaker stay out of it.
type errRejected struct{ err error }

func (e errRejected) Error() string { return e.err.Error() }
func (e errRejected) Unwrap() error { return e.err }

// rejected reports whether err is a script's refusal of its arguments.
func rejected(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.Contains(re.Error(), "sluice: ")
}

// decision is the reply shared by the rate scripts, in µs.
type decision struct {
	allowed                           bool
	remaining, retryAfter, resetAfter int64
	limiting                          int64
}

func (d decision) result(lim Limit) Result {
	r := Result{Allowed: d.allowed, Limit: lim, Remaining: d.remaining, ResetAfter: micros(d.resetAfter)}
	if d.retryAfter < 0 {
		r.RetryAfter = RetryNever
	} else {
		r.RetryAfter = micros(d.retryAfter)
	}
	return r
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// nowArg is the now argument of every script: nil (Redis TIME) unless a
// clock was configured.
func (l *Limiter) nowArg() *int64 {
	if l.cfg.clock == nil {
		return nil
	}
	us := l.cfg.clock().UnixMicro()
	return &us
}

// rateCall builds the script call of one rate limit.
func rateCall(k string, lim Limit, cost int64, now *int64) luart.Call {
	p := lim.periodMicros()
	switch lim.Algorithm {
	case AlgFixedWindow:
		return scripts.FixedWindow.Call(scripts.FixedWindowKeys{State: k}, scripts.FixedWindowArgs{Limit: lim.Rate, Period: p, Cost: cost, Now: now})
	case AlgSlidingLog:
		return scripts.SlidingLog.Call(scripts.SlidingLogKeys{Log: k}, scripts.SlidingLogArgs{Limit: lim.Rate, Period: p, Cost: cost, Now: now})
	case AlgSlidingWindow:
		return scripts.SlidingWindow.Call(scripts.SlidingWindowKeys{State: k}, scripts.SlidingWindowArgs{Limit: lim.Rate, Period: p, Cost: cost, Now: now})
	case AlgTokenBucket:
		return scripts.TokenBucket.Call(scripts.TokenBucketKeys{State: k}, scripts.TokenBucketArgs{Limit: lim.Rate, Period: p, Burst: lim.Burst, Cost: cost, Now: now})
	default:
		return scripts.Gcra.Call(scripts.GcraKeys{State: k}, scripts.GcraArgs{Limit: lim.Rate, Period: p, Burst: lim.Burst, Cost: cost, Now: now})
	}
}

// decodeRate decodes the reply of any single-limit rate script: they share
// one reply shape (allowed, remaining, retry_after, reset_after). The
// decoder is given the call's own script so errors name it.
func decodeRate(s *luart.Script, r rueidis.RedisResult) (decision, error) {
	d := luart.NewDecoder(s, r, 4)
	out := decision{allowed: d.Bool(0, "allowed"), remaining: d.Int(1, "remaining"), retryAfter: d.Int(2, "retry_after"), resetAfter: d.Int(3, "reset_after")}
	return out, d.Err()
}

// do runs one call under the breaker and the per-call timeout.
func (l *Limiter) do(ctx context.Context, call luart.Call, decode func(*luart.Script, rueidis.RedisResult) (decision, error)) (decision, error) {
	if !l.breaker.allow() {
		return decision{}, ErrBreakerOpen
	}
	cctx := ctx
	if l.cfg.timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, l.cfg.timeout)
		defer cancel()
	}
	d, err := decode(call.Script, luart.Do(cctx, l.client, call))
	if err != nil && rejected(err) {
		l.breaker.done(true)
		return d, errRejected{err}
	}
	if err != nil && ctx.Err() != nil {
		// The caller gave up: no decision is wanted, and the call says
		// nothing about Redis either way.
		l.breaker.abandon()
		return d, err
	}
	l.breaker.done(err == nil)
	return d, err
}

// fallback decides by the failure policy after err.
func (l *Limiter) fallback(ctx context.Context, k string, lim Limit, cost int64, err error) (Result, error) {
	if ctx.Err() != nil {
		return Result{}, fmt.Errorf("sluice: %w", ctx.Err())
	}
	if errors.As(err, new(errRejected)) {
		return Result{}, fmt.Errorf("%w: %s: %w", ErrInvalidLimit, lim.Name, err)
	}
	l.metrics.failure(ctx, lim, err)
	switch l.cfg.policy {
	case FailLocal:
		return l.local.decide(k, lim, cost, l.now()), nil
	case FailClosed:
		return Result{Limit: lim, RetryAfter: l.cfg.breakerCooldown, Degraded: true}, nil
	default:
		return Result{Allowed: true, Limit: lim, Remaining: max(0, max(lim.Rate, lim.Burst)-cost), Degraded: true}, nil
	}
}

// isTimeout reports whether err is a deadline or network timeout.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
