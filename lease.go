package sluice

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/runtime/luart"
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
	res, lease, err := l.e.decideOne(ctx, Check{Identity: identity, Limit: lim, Cost: 1})
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
	return l.e.renew(ctx, lease)
}

// renew is Extend of a valid lease: from the failure policy for a lease it
// took, else in Redis.
func (e *engine) renew(ctx context.Context, lease Lease) (Result, error) {
	if lease.local {
		return e.policy.acquire(lease.key, lease.ID, lease.limit, e.now(), nil), nil
	}
	req := request{kind: callRenew, call: acquireCall(lease.key, lease.ID, lease.limit, e.nowArg()), decode: algConcurrency.decode,
		lim: lease.limit, key: lease.key, holder: lease.ID}
	res, err := e.run(ctx, &req)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("sluice: extend %s: %w (the renewal may still be made: the lease ends at its old expiry or the new one)", lease.key, err)
		}
		return Result{}, fmt.Errorf("sluice: extend %s: %w (the lease expires at its old time)", lease.key, err)
	}
	return res, nil
}

// acquireCall is the script call of an Acquire (or for Extend, the
// renewal) of holder id on key.
func acquireCall(key, id string, lim Limit, now *int64) luart.Call {
	return scripts.ConcurrencyAcquire.Call(scripts.ConcurrencyAcquireKeys{Holders: key},
		scripts.ConcurrencyAcquireArgs{Limit: lim.Rate, Lease: lim.periodMicros(), ID: id, Now: now})
}

// releaseRequest is the pipeline request of the release of holder id from
// key.
func releaseRequest(key, id string, lim Limit, now *int64) request {
	call := scripts.ConcurrencyRelease.Call(scripts.ConcurrencyReleaseKeys{Holders: key},
		scripts.ConcurrencyReleaseArgs{ID: id, Now: now})
	return request{kind: callRelease, call: call, decode: decodeRelease, lim: lim, key: key, holder: id}
}

// Release gives back a slot taken by Acquire. Releasing a zero Lease, or
// one already released or expired, does nothing. Release is never refused
// by the circuit breaker, and a caller's context that has ended or ends
// does not stop it: the release is sent and completed in the background,
// and the error says so. When Redis cannot be reached the Limiter retries
// in the background until Redis answers, the lease would have expired
// anyway, or Close.
func (l *Limiter) Release(ctx context.Context, lease Lease) error {
	if lease.ID == "" {
		return nil
	}
	return l.e.release(ctx, lease)
}

// release is Release of a lease: to the failure policy for a lease it
// took, else in Redis, and in the background when Redis does not answer.
func (e *engine) release(ctx context.Context, lease Lease) error {
	if lease.local {
		e.policy.release(lease.key, lease.ID)
		return nil
	}
	req := releaseRequest(lease.key, lease.ID, lease.limit, e.nowArg())
	_, err := e.run(ctx, &req)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrClosed):
		return fmt.Errorf("sluice: release %s: %w (the lease expires after %v)", lease.key, err, lease.limit.Period)
	case ctx.Err() != nil:
		// The flight goes on without the caller, and retries if it fails.
		return fmt.Errorf("sluice: release %s: %w (the release goes on in the background)", lease.key, err)
	}
	e.giveBack(lease.key, lease.ID, lease.limit)
	return fmt.Errorf("sluice: release %s: %w (retried in the background; at the latest the lease expires after %v)", lease.key, err, lease.limit.Period)
}

// undoQueue holds the releases still to get through: leases taken in Redis
// for callers who had gone (reconcile), and releases that Redis did not
// answer. One goroutine drains it while it has work and then exits; each
// entry is retried, with a growing pause while Redis does not answer,
// until it gets through, its lease would have expired anyway (on the
// Limiter's clock), or Close. When the queue is full an entry is dropped
// and its slot comes back when the lease expires.
type undoQueue struct {
	ch      chan undo
	running atomic.Bool
}

type undo struct {
	key, id string
	limit   Limit
	until   time.Time // the lease's end at the latest, on the Limiter's clock: nothing to give back after it
}

func newUndoQueue() *undoQueue { return &undoQueue{ch: make(chan undo, 4096)} }

// giveBack queues the release of holder id from key.
func (e *engine) giveBack(key, id string, lim Limit) {
	q := e.undos
	select {
	case q.ch <- undo{key: key, id: id, limit: lim, until: e.now().Add(lim.Period)}:
	default:
		return
	}
	if q.running.CompareAndSwap(false, true) && !e.goroutines.start(e.drainUndos) {
		q.running.Store(false)
	}
}

func (e *engine) drainUndos() {
	q := e.undos
	ctx := e.goroutines.ctx
	pause := 10 * time.Millisecond
	for {
		select {
		case u := <-q.ch:
			if !e.now().Before(u.until) {
				continue
			}
			req := releaseRequest(u.key, u.id, u.limit, e.nowArg())
			_, err := e.run(ctx, &req)
			if err == nil {
				pause = 10 * time.Millisecond
				continue
			}
			select {
			case q.ch <- u: // try again after the others
			default:
			}
			if !sleepCtx(ctx, pause) {
				q.running.Store(false)
				return
			}
			pause = min(2*pause, time.Second)
		default:
			q.running.Store(false)
			if len(q.ch) == 0 || !q.running.CompareAndSwap(false, true) {
				return
			}
		}
	}
}

func decodeRelease(r luart.Reply) (decision, error) {
	m, err := scripts.ConcurrencyRelease.DecodeReply(r)
	return decision{allowed: m.Released, remaining: m.Holders, resetAfter: m.ResetAfter}, err
}
