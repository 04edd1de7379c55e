package sluice

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/runtime/luart"
)

// Limiter makes rate-limiting decisions in Redis. It is safe for
// concurrent use; create one per client and share it.
//
// The Limiter is the API: it checks its arguments, builds the checks and
// requests of each call, and shapes the answers. The engine under it
// makes the decisions.
type Limiter struct {
	e *engine
}

// engine is what decides: the Redis transport and its nodes, the failure
// policy, the denial cache and the goroutines that carry calls. Its
// entry points for the Limiter are few: a batch decision (batch.decide,
// decideOne), a single call outside a batch (run, reserve), and health
// and close; the rest (flights, senders, the silence watch, refunds,
// the release queue) is its own.
type engine struct {
	client  luart.Transport
	cfg     config
	now     func() time.Time // the clock of the breaker and the local fallback: cfg.clock or time.Now
	router  *router          // the Redis node of each key, each with its own breaker
	policy  fallback         // the failure policy's decisions
	denials *denialCache     // nil: off
	undos   *undoQueue       // releases still to get through: leases callers left or could not give back
	metrics *metrics         // nil: no metrics

	goroutines *goroutines    // every goroutine the Limiter starts; Close ends them
	deadlines  sharedDeadline // the bound of calls in flight
	// anySlot: one script call may hold keys of any hash slot
	// (WithCrossSlotScripts, not on a cluster).
	anySlot bool
	// sched is readSched: this process's goroutines waiting for a core,
	// long waits being those of at least d (a test sets its own).
	sched func(d time.Duration) sched
}

// New returns a Limiter over a rueidis client. For a real Redis, rueidis'
// client-side caching buys nothing here (set DisableCache, or build the
// client from ClientOption); against miniredis set DisableCache and
// ForceSingleClient.
func New(client rueidis.Client, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	return NewFromTransport(luart.Rueidis(client), opts...)
}

// NewFromTransport returns a Limiter over any Redis client that has a
// luart.Transport: module transport/goredis has the one of a go-redis v9
// client. The Limiter decides the same way over every Transport; New is
// NewFromTransport(luart.Rueidis(client)).
func NewFromTransport(client luart.Transport, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil transport", ErrInvalidOption)
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
	if len(cfg.localSet) > 0 && cfg.policy != FailLocal {
		return nil, fmt.Errorf("%w: %s configures FailLocal, but the failure policy is %s", ErrInvalidOption, cfg.localSet[0], cfg.policy)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	m, err := newMetrics(cfg.meterProvider)
	if err != nil {
		return nil, err
	}
	e := &engine{client: client, cfg: cfg, metrics: m, now: cfg.clock, undos: newUndoQueue(), goroutines: newGoroutines(), sched: readSched}
	e.deadlines.root = e.goroutines.ctx
	if e.now == nil {
		e.now = time.Now
	}
	e.router = newRouter(client, e.goroutines, func(addr string) *node {
		n := newNode(addr, cfg.silence, e.ping(addr), e.watchNode)
		n.breaker = newBreaker(cfg.breakerThreshold, cfg.breakerCooldown, e.now, func(from, to breakerState) {
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
	e.policy = newFallback(cfg)
	if cfg.denialCache > 0 {
		e.denials = newDenialCache(cfg.denialCache)
	}
	e.anySlot = cfg.crossSlot && !e.router.cluster
	return &Limiter{e: e}, nil
}

// Key returns the Redis key that holds lim's state for identity, as
// PREFIX:{TAG}:NAME where TAG is the identity or, for identities that are
// not short and plain, "~" and its SHA-256. Allow, AllowN, Peek, AllowAll,
// Reset and Acquire all use this one key for lim and identity.
func (l *Limiter) Key(identity string, lim Limit) string {
	return l.e.key(identity, lim)
}

// key is the Redis key of lim's state for identity (Limiter.Key).
func (e *engine) key(identity string, lim Limit) string {
	return key(e.cfg.prefix, identity, lim.Name)
}

// FailurePolicy is the policy deciding while Redis is unavailable, for
// callers that answer its denials differently (an HTTP 503 for
// FailClosed, a 429 for a FailLocal quota).
func (l *Limiter) FailurePolicy() FailurePolicy { return l.e.cfg.policy }

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
	return l.rate(ctx, Check{Identity: identity, Limit: lim, Cost: cost})
}

// Peek reports what AllowN with a cost of 1 would decide right now —
// Allowed, Remaining, RetryAfter and ResetAfter as that call would return
// them — without charging or writing anything.
func (l *Limiter) Peek(ctx context.Context, identity string, lim Limit) (Result, error) {
	return l.rate(ctx, Check{Identity: identity, Limit: lim, Cost: 1, peek: true})
}

// rate is the batch of one rate check.
func (l *Limiter) rate(ctx context.Context, c Check) (Result, error) {
	if err := c.Limit.Validate(); err != nil {
		return Result{}, err
	}
	if err := checkCost(c.Cost); err != nil {
		return Result{}, err
	}
	if c.Limit.Algorithm == AlgConcurrency {
		return Result{}, fmt.Errorf("%w: %s is a concurrency limit; use Acquire and Release", ErrInvalidLimit, c.Limit.Name)
	}
	res, _, err := l.e.decideOne(ctx, c)
	return res, err
}

// AllowAll decides cost against several limits of one identity (say 10
// per second and 1000 per hour), all or nothing: the cost is charged to
// every limit if all admit it, and to none otherwise, under the failure
// policy too. It is Decide with one check per limit, answered as one
// Result (Decision.Binding): its Limit is the binding one, the limit that
// denied with the longest wait, or the one with the least remaining. Each
// limit keeps the one state Allow and Peek use (Key), so AllowAll(a, b),
// AllowAll(b, a) and Allow(a) spend the same quota of a. Limits of one
// algorithm with a multi-limit script (all gcra, all sliding_window, or
// all fixed_window) are decided in one atomic script call; others are charged and, when one
// denies, refunded exactly as Decide does. Up to MaxChecks rate limits,
// with distinct names; DecideInto reports every limit's own Result.
func (l *Limiter) AllowAll(ctx context.Context, identity string, limits []Limit, cost int64) (Result, error) {
	if len(limits) == 0 || len(limits) > MaxChecks {
		return Result{}, fmt.Errorf("%w: AllowAll takes 1 to %d limits, got %d", ErrInvalidLimit, MaxChecks, len(limits))
	}
	for i, lim := range limits {
		if lim.Algorithm == AlgConcurrency {
			return Result{}, fmt.Errorf("%w: %s is a concurrency limit; use Acquire or Decide", ErrInvalidLimit, lim.Name)
		}
		if slices.ContainsFunc(limits[:i], func(o Limit) bool { return o.Name == lim.Name }) {
			return Result{}, fmt.Errorf("%w: AllowAll: limit name %q given twice", ErrInvalidLimit, lim.Name)
		}
		if err := lim.Validate(); err != nil {
			return Result{}, err
		}
	}
	if err := checkCost(cost); err != nil {
		return Result{}, err
	}
	b := newBatch(l.e, nil, nil, nil)
	b.whole = true
	for _, lim := range limits {
		b.checks = append(b.checks, Check{Identity: identity, Limit: lim, Cost: cost})
	}
	n := len(limits)
	b.dec.Results, b.dec.Leases = grow(b.resBuf[:0], n), grow(b.leaseBuf[:0], n)
	b.dec.enforced = 1<<n - 1
	err := b.decide(ctx)
	res := b.dec.Binding()
	b.free()
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// Reset forgets lim's state for identity: the whole quota is back. For a
// concurrency limit it drops every holder.
func (l *Limiter) Reset(ctx context.Context, identity string, lim Limit) error {
	if err := lim.Validate(); err != nil {
		return err
	}
	return l.e.reset(ctx, l.Key(identity, lim), lim)
}

// reset deletes lim's state at k in Redis, and this Limiter's memory of
// it (the failure policy's, the denial cache's).
func (e *engine) reset(ctx context.Context, k string, lim Limit) error {
	req := request{kind: callReset, lim: lim, key: k, keys: []string{k}, decode: decodeReset}
	if _, err := e.run(ctx, &req); err != nil {
		return fmt.Errorf("sluice: reset %s: %w", k, err)
	}
	e.policy.forget(k)
	e.denials.forget(k)
	return nil
}

func decodeReset(r luart.Reply) (decision, error) { return decision{}, r.Err() }

func checkCost(cost int64) error {
	if cost < 0 || cost > MaxCost {
		return fmt.Errorf("%w: cost must be between 0 and 2^52, got %d", ErrInvalidCost, cost)
	}
	return nil
}

// nowArg is the now argument of every script: nil (Redis TIME) unless a
// clock was configured.
func (e *engine) nowArg() *int64 {
	if e.cfg.clock == nil {
		return nil
	}
	us := e.cfg.clock().UnixMicro()
	return &us
}

// capacity is the largest cost lim can ever admit.
func capacity(lim Limit) int64 {
	if lim.Algorithm == AlgTokenBucket || lim.Algorithm == AlgGCRA {
		return lim.Burst
	}
	return lim.Rate
}
