package sluice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/scripts"
)

// Lease is a slot taken by Acquire. Give it back with Release; renew it
// with Extend while the work goes on past the limit's Period.
type Lease struct {
	// ID identifies the holder (random, 128 bits).
	ID    string
	key   string
	limit Limit
	local bool // taken from the local fallback, or admitted by FailOpen: nothing held in Redis
}

// Acquire takes one of lim.Rate in-flight slots for identity for at most
// lim.Period (the lease). If Result.Allowed, call Release with the Lease
// when the work is done (defer it); a holder that never does loses the
// slot when the lease expires. lim must be a Concurrency limit. While Redis
// is unavailable the failure policy decides: FailOpen admits (nothing to
// release), FailClosed denies, FailLocal takes a local slot that expires
// like a Redis one.
func (l *Limiter) Acquire(ctx context.Context, identity string, lim Limit) (Lease, Result, error) {
	if err := lim.Validate(); err != nil {
		return Lease{}, Result{}, err
	}
	if lim.Algorithm != AlgConcurrency {
		return Lease{}, Result{}, fmt.Errorf("%w: Acquire needs a concurrency limit, got %s", ErrInvalidLimit, lim.Algorithm)
	}
	var idb [16]byte
	_, _ = rand.Read(idb[:])
	lease := Lease{ID: hex.EncodeToString(idb[:]), key: l.Key(identity, lim), limit: lim}
	req := l.acquireRequest(&lease, false)
	res, err := l.run(ctx, &req)
	if err != nil || !res.Allowed {
		return Lease{}, res, err
	}
	return lease, res, nil
}

// Extend renews lease for another lim.Period from now, so work that runs
// longer than the lease keeps its slot. If the lease has expired meanwhile,
// Extend takes a slot again when one is free; Result.Allowed false means
// the slot is lost. Extend is never refused by the circuit breaker: an
// error means Redis could not be reached and the lease runs out at its old
// expiry.
func (l *Limiter) Extend(ctx context.Context, lease Lease) (Result, error) {
	if lease.ID == "" {
		return Result{}, fmt.Errorf("%w: Extend of a zero Lease", ErrInvalidLimit)
	}
	if lease.local {
		if l.local == nil {
			return Result{Allowed: true, Limit: lease.limit, Degraded: true}, nil
		}
		return l.local.acquire(lease.key, lease.ID, lease.limit, l.now()), nil
	}
	req := l.acquireRequest(&lease, true)
	res, err := l.run(ctx, &req)
	if err != nil {
		return Result{}, fmt.Errorf("sluice: extend %s: %w (the lease expires at its old time)", lease.key, err)
	}
	return res, nil
}

// acquireRequest is the pipeline request of Acquire (renew false) and
// Extend (renew true, which bypasses the breaker and has no fallback).
func (l *Limiter) acquireRequest(lease *Lease, renew bool) request {
	call := scripts.ConcurrencyAcquire.Call(scripts.ConcurrencyAcquireKeys{Holders: lease.key},
		scripts.ConcurrencyAcquireArgs{Limit: lease.limit.Rate, Lease: lease.limit.periodMicros(), ID: lease.ID, Now: l.nowArg()})
	kind := callAcquire
	if renew {
		kind = callRenew
	}
	return request{kind: kind, call: call, decode: decodeAcquire, lim: lease.limit, key: lease.key, lease: lease}
}

// degradeAcquire is the failure policy's decision for an Acquire.
func (l *Limiter) degradeAcquire(req *request) Result {
	lease := req.lease
	lease.local = true // nothing held in Redis
	switch l.cfg.policy {
	case FailLocal:
		return l.local.acquire(lease.key, lease.ID, lease.limit, l.now())
	case FailClosed:
		return Result{Limit: lease.limit, RetryAfter: req.node.breaker.retryAfter(), Degraded: true}
	}
	return Result{Allowed: true, Limit: lease.limit, Remaining: lease.limit.Rate - 1, Degraded: true}
}

// Release gives back a slot taken by Acquire. Releasing a zero Lease, or
// one already released or expired, does nothing. Release is never refused
// by the circuit breaker; an error means Redis could not be reached, and
// the slot comes back by itself when the lease expires.
func (l *Limiter) Release(ctx context.Context, lease Lease) error {
	if lease.ID == "" {
		return nil
	}
	if lease.local {
		if l.local != nil {
			l.local.release(lease.key, lease.ID)
		}
		return nil
	}
	call := scripts.ConcurrencyRelease.Call(scripts.ConcurrencyReleaseKeys{Holders: lease.key},
		scripts.ConcurrencyReleaseArgs{ID: lease.ID, Now: l.nowArg()})
	req := request{kind: callRelease, call: call, decode: decodeRelease, lim: lease.limit, key: lease.key}
	if _, err := l.run(ctx, &req); err != nil {
		return fmt.Errorf("sluice: release %s: %w (the lease expires by itself after %v)", lease.key, err, lease.limit.Period)
	}
	return nil
}

func decodeAcquire(r rueidis.RedisResult) (decision, error) {
	m, err := scripts.ConcurrencyAcquire.Decode(r)
	return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, 0}, err
}

func decodeRelease(r rueidis.RedisResult) (decision, error) {
	m, err := scripts.ConcurrencyRelease.Decode(r)
	return decision{allowed: m.Released, remaining: m.Holders, resetAfter: m.ResetAfter}, err
}
