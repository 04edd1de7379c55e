package sluice

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
)

// Limiter makes rate-limiting decisions in Redis. It is safe for
// concurrent use; create one per client and share it.
type Limiter struct {
	client  rueidis.CommandClient
	cfg     config
	now     func() time.Time // the clock of the breaker and the local fallback: cfg.clock or time.Now
	router  *router          // the Redis node of each key, each with its own breaker
	policy  fallback         // the failure policy's decisions
	denials *denialCache     // nil: off
	undos   *undoQueue       // releases still to get through: leases callers left or could not give back
	metrics *metrics         // nil: no metrics

	goroutines *goroutines    // every goroutine the Limiter starts; Close ends them
	idle       chan *flight   // fliers waiting for a flight to send
	deadlines  sharedDeadline // the bound of calls in flight
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
		silence:          time.Second,
		breakerThreshold: 5,
		breakerCooldown:  250 * time.Millisecond,
		policy:           FailLocal,
		replicas:         1,
		localEntries:     defaultLocalEntries,
		denialCache:      10_000,
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
	l := &Limiter{client: client, cfg: cfg, metrics: m, now: cfg.clock, undos: newUndoQueue(), goroutines: newGoroutines(), idle: make(chan *flight)}
	l.deadlines.root = l.goroutines.ctx
	if l.now == nil {
		l.now = time.Now
	}
	l.router = newRouter(client, l.goroutines, func(addr string) *node {
		n := &node{addr: addr, probe: l.ping(addr), slots: make(chan struct{}, maxFlights)}
		n.breaker = newBreaker(cfg.breakerThreshold, cfg.breakerCooldown, l.now, func(from, to breakerState) {
			m.transition(addr, to, n.breaker.current())
			switch to {
			case breakerOpen:
				cfg.logger.Warn("sluice: Redis node unavailable; circuit breaker open, failure policy decides",
					"node", addr, "policy", cfg.policy.String(), "cooldown", cfg.breakerCooldown)
			case breakerClosed:
				cfg.logger.Info("sluice: Redis node reachable again; circuit breaker closed", "node", addr)
			}
		})
		return n
	})
	l.policy = newFallback(cfg)
	if cfg.denialCache > 0 {
		l.denials = newDenialCache(cfg.denialCache)
	}
	return l, nil
}

// Key returns the Redis key that holds lim's state for identity, as
// PREFIX:{TAG}:NAME where TAG is the identity or, for identities that are
// not short and plain, "~" and its SHA-256. Allow, AllowN, Peek, AllowAll,
// Reset and Acquire all use this one key for lim and identity.
func (l *Limiter) Key(identity string, lim Limit) string {
	return key(l.cfg.prefix, identity, lim.Name)
}

// FailurePolicy is the policy deciding while Redis is unavailable, for
// callers that answer its denials differently (an HTTP 503 for
// FailClosed, a 429 for a FailLocal quota).
func (l *Limiter) FailurePolicy() FailurePolicy { return l.cfg.policy }

// Allow is AllowN with a cost of 1.
func (l *Limiter) Allow(ctx context.Context, identity string, lim Limit) (Result, error) {
	return l.AllowN(ctx, identity, lim, 1)
}

// AllowN decides whether identity may spend cost units of lim now, and
// charges them if so. A denied request charges nothing; cost 0 only
// reports (it is always allowed, and Remaining is the quota left). The
// error is non-nil only for an invalid limit or cost, or when the caller's
// own context ends first; Redis failures are handled by the failure policy
// and reported through Result.Degraded.
func (l *Limiter) AllowN(ctx context.Context, identity string, lim Limit, cost int64) (Result, error) {
	return l.decide(ctx, identity, lim, cost, false)
}

// Peek reports what AllowN with a cost of 1 would decide right now —
// Allowed, Remaining, RetryAfter and ResetAfter as that call would return
// them — without charging or writing anything.
func (l *Limiter) Peek(ctx context.Context, identity string, lim Limit) (Result, error) {
	return l.decide(ctx, identity, lim, 1, true)
}

func (l *Limiter) decide(ctx context.Context, identity string, lim Limit, cost int64, peek bool) (Result, error) {
	if err := lim.Validate(); err != nil {
		return Result{}, err
	}
	if err := checkCost(cost); err != nil {
		return Result{}, err
	}
	if lim.Algorithm == AlgConcurrency {
		return Result{}, fmt.Errorf("%w: %s is a concurrency limit; use Acquire and Release", ErrInvalidLimit, lim.Name)
	}
	k := l.Key(identity, lim)
	var sent time.Time
	if cost <= 1 && l.denials != nil {
		sent = l.now()
		if r, ok := l.denials.get(k, sent); ok {
			r.Limit = lim
			if cost == 0 {
				// A report: always allowed, and nothing is left, since a
				// cost of 1 cannot be admitted yet.
				r.Allowed, r.RetryAfter = true, 0
			}
			l.metrics.cacheHit(ctx, lim)
			l.metrics.decision(ctx, r, time.Now())
			return r, nil
		}
	}
	req := request{kind: callRate, lim: lim, key: k, cost: cost, peek: peek}
	res, err := l.run(ctx, &req)
	if err == nil && cost == 1 && !res.Allowed {
		l.denials.put(k, res, sent, l.now())
	}
	return res, err
}

// AllowAll checks several limits of one identity (say 10 per second and
// 1000 per hour) in one atomic script: the cost is charged to every limit
// if all admit it, and to none otherwise, under the failure policy too.
// Each limit keeps the one state Allow and Peek use (Key), so the order of
// the limits does not matter and AllowAll(a, b), AllowAll(b, a) and
// Allow(a) spend the same quota of a. Every limit must use AlgGCRA, or
// every limit AlgSlidingWindow; at most 16, with distinct names. The
// Result's Limit is the binding one: the limit that denied with the longest
// wait, or the one with the least remaining.
func (l *Limiter) AllowAll(ctx context.Context, identity string, cost int64, limits ...Limit) (Result, error) {
	if len(limits) == 0 || len(limits) > 16 {
		return Result{}, fmt.Errorf("%w: AllowAll takes 1 to 16 limits, got %d", ErrInvalidLimit, len(limits))
	}
	if err := checkCost(cost); err != nil {
		return Result{}, err
	}
	alg := limits[0].Algorithm
	for i, lim := range limits {
		if err := lim.Validate(); err != nil {
			return Result{}, err
		}
		if lim.Algorithm != alg || (alg != AlgGCRA && alg != AlgSlidingWindow) {
			return Result{}, fmt.Errorf("%w: AllowAll needs all limits to be gcra or all sliding_window, got %s and %s", ErrInvalidLimit, alg, lim.Algorithm)
		}
		if slices.ContainsFunc(limits[:i], func(o Limit) bool { return o.Name == lim.Name }) {
			return Result{}, fmt.Errorf("%w: AllowAll: limit name %q given twice", ErrInvalidLimit, lim.Name)
		}
	}
	keys := make([]string, len(limits))
	for i, lim := range limits {
		keys[i] = l.Key(identity, lim)
	}
	req := request{kind: callRate, lim: limits[0], key: keys[0], multi: limits, keys: keys, cost: cost}
	return l.run(ctx, &req)
}

// Reset forgets lim's state for identity: the whole quota is back. For a
// concurrency limit it drops every holder.
func (l *Limiter) Reset(ctx context.Context, identity string, lim Limit) error {
	if err := lim.Validate(); err != nil {
		return err
	}
	k := l.Key(identity, lim)
	req := request{kind: callReset, lim: lim, key: k, keys: []string{k}, decode: decodeReset}
	if _, err := l.run(ctx, &req); err != nil {
		return fmt.Errorf("sluice: reset %s: %w", k, err)
	}
	l.policy.forget(k)
	l.denials.forget(k)
	return nil
}

func decodeReset(r rueidis.RedisResult) (decision, error) { return decision{}, r.Error() }

func checkCost(cost int64) error {
	if cost < 0 || cost > MaxCost {
		return fmt.Errorf("%w: cost must be between 0 and 2^52, got %d", ErrInvalidCost, cost)
	}
	return nil
}

// nowArg is the now argument of every script: nil (Redis TIME) unless a
// clock was configured.
func (l *Limiter) nowArg() *int64 {
	if l.cfg.clock == nil {
		return nil
	}
	us := l.cfg.clock().UnixMicro()
	return &us
}

// capacity is the largest cost lim can ever admit.
func capacity(lim Limit) int64 {
	if lim.Algorithm == AlgTokenBucket || lim.Algorithm == AlgGCRA {
		return lim.Burst
	}
	return lim.Rate
}

// degrade is the failure policy's decision for req when Redis cannot
// decide.
func (l *Limiter) degrade(req *request) Result {
	if req.kind == callAcquire {
		return l.degradeAcquire(req)
	}
	keys, limits := req.keys, req.multi
	if limits == nil {
		keys, limits = []string{req.key}, []Limit{req.lim}
	}
	return l.policy.decide(keys, limits, req.cost, req.peek, l.now(), req.node.breaker)
}

var peekTrue = true

// rateCall builds the script call of one rate limit and its decoder.
func rateCall(k string, lim Limit, cost int64, now *int64, peek bool) (luart.Call, func(rueidis.RedisResult) (decision, error)) {
	p := lim.periodMicros()
	var pk *bool
	if peek {
		pk = &peekTrue
	}
	switch lim.Algorithm {
	case AlgFixedWindow:
		return scripts.FixedWindow.Call(scripts.FixedWindowKeys{State: k}, scripts.FixedWindowArgs{Limit: lim.Rate, Period: p, Cost: cost, Now: now, Peek: pk}), decodeFixedWindow
	case AlgSlidingLog:
		return scripts.SlidingLog.Call(scripts.SlidingLogKeys{Log: k}, scripts.SlidingLogArgs{Limit: lim.Rate, Period: p, Cost: cost, Now: now, Peek: pk}), decodeSlidingLog
	case AlgSlidingWindow:
		return scripts.SlidingWindow.Call(scripts.SlidingWindowKeys{State: k}, scripts.SlidingWindowArgs{Limit: lim.Rate, Period: p, Cost: cost, Now: now, Peek: pk}), decodeSlidingWindow
	case AlgTokenBucket:
		return scripts.TokenBucket.Call(scripts.TokenBucketKeys{State: k}, scripts.TokenBucketArgs{Limit: lim.Rate, Period: p, Burst: lim.Burst, Cost: cost, Now: now, Peek: pk}), decodeTokenBucket
	default:
		return scripts.GCRA.Call(scripts.GCRAKeys{State: k}, scripts.GCRAArgs{Limit: lim.Rate, Period: p, Burst: lim.Burst, Cost: cost, Now: now, Peek: pk}), decodeGcra
	}
}

// multiCall builds the AllowAll script call for limits of one algorithm
// (validated by the caller), one key per limit, and its decoder.
func multiCall(keys []string, limits []Limit, cost int64, now *int64) (luart.Call, func(rueidis.RedisResult) (decision, error)) {
	if limits[0].Algorithm == AlgGCRA {
		nums := make([]int64, 0, 3*len(limits))
		for _, lim := range limits {
			nums = append(nums, lim.Rate, lim.periodMicros(), lim.Burst)
		}
		return scripts.GCRAMulti.Call(scripts.GCRAMultiKeys{States: keys}, scripts.GCRAMultiArgs{Cost: cost, Now: now, Limits: nums}), decodeGcraMulti
	}
	nums := make([]int64, 0, 2*len(limits))
	for _, lim := range limits {
		nums = append(nums, lim.Rate, lim.periodMicros())
	}
	return scripts.SlidingWindowMulti.Call(scripts.SlidingWindowMultiKeys{States: keys}, scripts.SlidingWindowMultiArgs{Cost: cost, Now: now, Limits: nums}), decodeSlidingWindowMulti
}

// The decoders turn each script's generated, typed reply into a decision.
func decodeFixedWindow(r rueidis.RedisResult) (decision, error) {
	m, err := scripts.FixedWindow.Decode(r)
	return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, 0}, err
}

func decodeSlidingLog(r rueidis.RedisResult) (decision, error) {
	m, err := scripts.SlidingLog.Decode(r)
	return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, 0}, err
}

func decodeSlidingWindow(r rueidis.RedisResult) (decision, error) {
	m, err := scripts.SlidingWindow.Decode(r)
	return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, 0}, err
}

func decodeTokenBucket(r rueidis.RedisResult) (decision, error) {
	m, err := scripts.TokenBucket.Decode(r)
	return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, 0}, err
}

func decodeGcra(r rueidis.RedisResult) (decision, error) {
	m, err := scripts.GCRA.Decode(r)
	return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, 0}, err
}

func decodeGcraMulti(r rueidis.RedisResult) (decision, error) {
	m, err := scripts.GCRAMulti.Decode(r)
	return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, m.Limiting}, err
}

func decodeSlidingWindowMulti(r rueidis.RedisResult) (decision, error) {
	m, err := scripts.SlidingWindowMulti.Decode(r)
	return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, m.Limiting}, err
}
