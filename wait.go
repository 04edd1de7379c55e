package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/scripts"
)

// ErrNotReserved means Wait or Reserve could not book the cost: it would
// conform later than the caller will wait (its context's deadline, or the
// maximum wait), it exceeds the limit's burst, or Redis is unavailable and
// the failure policy is FailClosed. Nothing was charged. The wrapping error
// says which, and wraps context.DeadlineExceeded in the first case.
var ErrNotReserved = errors.New("sluice: not reserved")

// Reservation is a cost booked by Reserve or Wait: it is charged, and
// conforms after its delay, when the caller may act.
type Reservation struct {
	// OK reports that the cost is reserved. When it is false nothing was
	// charged.
	OK bool
	// Limit is the limit reserved on.
	Limit Limit
	// Degraded reports that Redis could not be asked and the failure
	// policy decided: FailLocal reserved on this replica's share,
	// FailOpen admitted at once, FailClosed reserved nothing.
	Degraded bool

	l      *Limiter
	key    string
	cost   int64
	at     time.Time     // when it conforms, on the Limiter's clock
	need   time.Duration // not OK: the wait it would have needed, or RetryNever
	tat    int64         // what Redis wrote, for Cancel
	rem    int64
	actAt  int64 // when it conforms, on the script's clock (µs)
	closed bool  // not OK because the failure policy is FailClosed
}

// Delay is DelayFrom the Limiter's clock now.
func (r *Reservation) Delay() time.Duration {
	if r.l == nil {
		return 0
	}
	return r.DelayFrom(r.l.now())
}

// DelayFrom is how long after t the reservation conforms: 0 when it does
// already. For a reservation not made it is the wait the cost would have
// needed from when it was asked, or RetryNever.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	if !r.OK {
		return r.need
	}
	return max(ceilMicros(r.at.Sub(t)), 0)
}

// Cancel gives back what the reservation has not used, as far as it still
// can: nothing once it conforms (the caller may have acted), and never the
// emissions of the reservations booked after it, whose moments stay as
// promised; the rest of its emission comes back at once. Cancelling a
// reservation not made, or twice, does nothing. Like Release it is never
// refused by the circuit breaker and goes on after ctx ends.
func (r *Reservation) Cancel(ctx context.Context) error {
	if r == nil || !r.OK || r.l == nil || r.cost == 0 {
		return nil
	}
	l := r.l
	cost := r.cost
	r.cost = 0 // once
	if r.Degraded {
		if lf, ok := l.policy.(*localFallback); ok {
			lf.unreserve(r.key, r.Limit, cost, r.at, l.now())
		}
		return nil
	}
	call := scripts.GCRACancel.Call(scripts.GCRACancelKeys{State: r.key}, scripts.GCRACancelArgs{
		Limit: r.Limit.Rate, Period: r.Limit.periodMicros(), Cost: cost, Tat: r.tat, Rem: r.rem, ActAt: r.actAt, Now: l.nowArg()})
	req := request{kind: callCancel, call: call, decode: decodeCancel, lim: r.Limit, key: r.key}
	if _, err := l.run(ctx, &req); err != nil {
		return fmt.Errorf("sluice: cancel %s: %w", r.key, err)
	}
	l.denials.forget(r.key)
	return nil
}

func decodeCancel(r rueidis.RedisResult) (decision, error) {
	_, err := scripts.GCRACancel.Decode(r)
	return decision{}, err
}

// Reserve is ReserveN with a cost of 1.
func (l *Limiter) Reserve(ctx context.Context, identity string, lim Limit, maxWait time.Duration) (*Reservation, error) {
	return l.ReserveN(ctx, identity, lim, 1, maxWait)
}

// ReserveN books cost units of lim for identity at the first moment they
// conform, if that is at most maxWait from now, in one round trip: the
// cost is charged then, and the Reservation says when the caller may act
// (Delay). Every process on the Redis shares the limit: a fleet of workers
// reserving on one identity together keeps to its rate exactly, each
// served in the order of its reservation. A reservation that would need
// longer than maxWait is not made and charges nothing (OK false; Delay is
// the wait it would need). lim must be a GCRA limit (see docs/limiter.md
// for why the others cannot reserve); its state is the one Allow uses.
func (l *Limiter) ReserveN(ctx context.Context, identity string, lim Limit, cost int64, maxWait time.Duration) (*Reservation, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	if lim.Algorithm != AlgGCRA {
		return nil, fmt.Errorf("%w: %s: only gcra limits can reserve, got %s", ErrInvalidLimit, lim.Name, lim.Algorithm)
	}
	if cost < 1 || cost > MaxCost {
		return nil, fmt.Errorf("%w: a reservation's cost must be between 1 and 2^52, got %d", ErrInvalidCost, cost)
	}
	maxWait = min(max(maxWait, 0), maxPeriod)
	k := l.Key(identity, lim)
	res := &Reservation{Limit: lim, l: l, key: k, cost: cost}
	call := scripts.GCRAReserve.Call(scripts.GCRAReserveKeys{State: k}, scripts.GCRAReserveArgs{
		Limit: lim.Rate, Period: lim.periodMicros(), Burst: lim.Burst, Cost: cost, MaxWait: int64(maxWait / time.Microsecond), Now: l.nowArg()})
	req := request{kind: callReserve, call: call, decode: decodeReserve, lim: lim, key: k, cost: cost}
	start := time.Now()
	n := l.router.nodeFor(k)
	one := [1]request{req}
	o, err := l.exchange(ctx, n, start, one[:], l.nowArg(), false)
	req = one[0]
	if o == outcomeOK {
		o, err = outcomeOf(req.err)
	}
	switch o {
	case outcomeOK:
		d := req.d
		res.OK = d.allowed
		if d.allowed {
			res.at = l.now().Add(micros(d.remaining))
			res.tat, res.rem, res.actAt = d.resetAfter, d.limiting, d.retryAfter
		} else if d.remaining < 0 {
			res.need = RetryNever
		} else {
			res.need = micros(d.remaining)
		}
	case outcomeCaller:
		return nil, err
	case outcomeClosed:
		return nil, ErrClosed
	case outcomeRefused:
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidLimit, lim.Name, err)
	case outcomeWrongType:
		return nil, wrongType(&req, err)
	case outcomeUnavailable:
		l.metrics.failure(ctx, lim, err)
		res.Degraded = true
		now := l.now()
		switch p := l.policy.(type) {
		case failOpen:
			res.OK, res.at = true, now
		case *localFallback:
			var delay time.Duration
			res.OK, delay = p.reserve(k, lim, cost, maxWait, now)
			res.at = now.Add(delay)
			if !res.OK {
				res.need = delay
			}
		default:
			res.closed, res.need = true, n.breaker.retryAfter()
		}
	}
	l.metrics.decision(ctx, Result{Allowed: res.OK, Limit: lim, Degraded: res.Degraded}, start)
	return res, nil
}

// decodeReserve reads gcra_reserve's reply into a decision: allowed is ok,
// remaining the delay, retryAfter act_at, resetAfter and limiting the TAT
// written and its remainder.
func decodeReserve(r rueidis.RedisResult) (decision, error) {
	m, err := scripts.GCRAReserve.Decode(r)
	return decision{allowed: m.Ok, remaining: m.Delay, retryAfter: m.ActAt, resetAfter: m.Tat, limiting: m.Rem}, err
}

// Wait is WaitN with a cost of 1.
func (l *Limiter) Wait(ctx context.Context, identity string, lim Limit) (*Reservation, error) {
	return l.WaitN(ctx, identity, lim, 1)
}

// WaitN blocks until cost units of lim conform for identity, sharing the
// limit with every process on the Redis, as golang.org/x/time/rate's WaitN
// does in one process. It reserves at once (ReserveN), up to ctx's
// deadline: when the cost cannot conform before the deadline it returns
// at once an error wrapping ErrNotReserved and context.DeadlineExceeded,
// and nothing is charged. When ctx ends during the wait the reservation is
// cancelled (what it can still give back comes back) and ctx's error
// returned. While Redis is unavailable the failure policy decides, and the
// Reservation says so (Degraded): FailLocal waits on this replica's share,
// FailOpen does not wait, FailClosed returns ErrNotReserved.
func (l *Limiter) WaitN(ctx context.Context, identity string, lim Limit, cost int64) (*Reservation, error) {
	if err := ctx.Err(); err != nil {
		return nil, callerErr(ctx)
	}
	maxWait := maxPeriod
	if dl, ok := ctx.Deadline(); ok {
		maxWait = time.Until(dl)
		if maxWait <= 0 {
			return nil, callerErr(ctx)
		}
	}
	r, err := l.ReserveN(ctx, identity, lim, cost, maxWait)
	if err != nil {
		return nil, err
	}
	if !r.OK {
		switch {
		case r.closed:
			return r, fmt.Errorf("%w: %s: Redis is unavailable and the failure policy is FailClosed", ErrNotReserved, lim.Name)
		case r.need == RetryNever:
			return r, fmt.Errorf("%w: %s: cost %d exceeds the burst %d", ErrNotReserved, lim.Name, cost, lim.Burst)
		}
		return r, fmt.Errorf("%w: %s: cost %d would wait %v, past the context's deadline: %w", ErrNotReserved, lim.Name, cost, r.need, context.DeadlineExceeded)
	}
	delay := r.Delay()
	if delay <= 0 {
		return r, nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return r, nil
	case <-ctx.Done():
		_ = r.Cancel(context.WithoutCancel(ctx))
		return r, callerErr(ctx)
	}
}
