package sluice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

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
	lease.local = true // nothing known to be held in Redis
	if req.cause != ErrBreakerOpen {
		// The call may have reached Redis and taken the slot although
		// its reply never came: give it back there once Redis answers,
		// or it would stay taken for the whole lease.
		l.undos.add(l, lease.key, lease.ID, lease.limit)
	}
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
// by the circuit breaker. An error means Redis could not be reached: the
// Limiter retries in the background until Redis answers or the lease would
// have expired anyway.
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
	if err := l.release(ctx, lease.key, lease.ID, lease.limit); err != nil {
		if ctx.Err() == nil {
			l.undos.add(l, lease.key, lease.ID, lease.limit)
		}
		return fmt.Errorf("sluice: release %s: %w (retried in the background; at the latest the lease expires after %v)", lease.key, err, lease.limit.Period)
	}
	return nil
}

// release removes holder id from key in Redis, bypassing the breaker.
func (l *Limiter) release(ctx context.Context, key, id string, lim Limit) error {
	call := scripts.ConcurrencyRelease.Call(scripts.ConcurrencyReleaseKeys{Holders: key},
		scripts.ConcurrencyReleaseArgs{ID: id, Now: l.nowArg()})
	req := request{kind: callRelease, call: call, decode: decodeRelease, lim: lim, key: key}
	_, err := l.run(ctx, &req)
	return err
}

// undoQueue gives back, in the background, slots that Acquires whose
// replies never came may have taken in Redis. One goroutine drains it while
// it has work and then exits; each entry is retried until it succeeds or
// its lease would have expired anyway. When the queue is full an entry is
// dropped and its slot comes back when the lease expires.
type undoQueue struct {
	ch      chan undo
	running atomic.Bool
}

type undo struct {
	key, id string
	limit   Limit
	until   time.Time // the lease's end at the latest: nothing to give back after it
}

func newUndoQueue() *undoQueue { return &undoQueue{ch: make(chan undo, 4096)} }

func (q *undoQueue) add(l *Limiter, key, id string, lim Limit) {
	select {
	case q.ch <- undo{key: key, id: id, limit: lim, until: time.Now().Add(lim.Period)}:
	default:
		return
	}
	if q.running.CompareAndSwap(false, true) {
		go q.drain(l)
	}
}

func (q *undoQueue) drain(l *Limiter) {
	for {
		select {
		case u := <-q.ch:
			if !time.Now().Before(u.until) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), max(l.cfg.timeoutMax, time.Second))
			err := l.release(ctx, u.key, u.id, u.limit)
			cancel()
			if err != nil {
				select {
				case q.ch <- u: // try again after the others
				default:
				}
				time.Sleep(50 * time.Millisecond)
			}
		default:
			q.running.Store(false)
			if len(q.ch) == 0 || !q.running.CompareAndSwap(false, true) {
				return
			}
		}
	}
}

func decodeAcquire(r rueidis.RedisResult) (decision, error) {
	m, err := scripts.ConcurrencyAcquire.Decode(r)
	return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, 0}, err
}

func decodeRelease(r rueidis.RedisResult) (decision, error) {
	m, err := scripts.ConcurrencyRelease.Decode(r)
	return decision{allowed: m.Released, remaining: m.Holders, resetAfter: m.ResetAfter}, err
}
