package sluice

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/runtime/luart"

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

	l      *engine
	key    string
	cost   int64
	at     time.Time     // when it conforms, on the Limiter's clock
	need   time.Duration // not OK: the wait it would have needed, or RetryNever
	tat    int64         // what Redis wrote, for Cancel
	rem    int64
	actAt  int64  // when it conforms, on the script's clock (µs)
	closed bool   // not OK because the failure policy is FailClosed
	parts  []part // ReserveAll: every limit's booking
}

// part is one limit's booking in a reservation of ReserveAll.
type part struct {
	lim       Limit
	key       string
	cost      int64
	tat, rem  int64
	localWait time.Duration // FailLocal: the limit's own delay
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
	d := r.at.Sub(t)
	if d <= 0 {
		return 0
	}
	return ceilMicros(d)
}

// Cancel gives back what the reservation has not used, as far as it still
// can: nothing once it conforms (the caller may have acted), and never the
// emissions of the reservations booked after it, whose moments stay as
// promised; the rest of its emission comes back at once. Cancelling a
// reservation not made, or twice, does nothing. Like Release it is never
// refused by the circuit breaker and goes on after ctx ends.
func (r *Reservation) Cancel(ctx context.Context) error {
	return r.cancel(ctx, nil)
}

// CancelAt is Cancel as of t, on the Limiter's clock (the one Delay
// measures from), for a caller that gave the reservation up at t and
// cancels later: it gives back nothing if the reservation conforms by t,
// and otherwise what it would have given back at t. On Redis TIME, t is
// carried to Redis's clock by the offset the reservation was booked with.
func (r *Reservation) CancelAt(ctx context.Context, t time.Time) error {
	return r.cancel(ctx, &t)
}

func (r *Reservation) cancel(ctx context.Context, at *time.Time) error {
	if r == nil || !r.OK || r.l == nil || r.cost == 0 {
		return nil
	}
	l := r.l
	cost := r.cost
	r.cost = 0 // once
	now, nowArg := l.now(), l.nowArg()
	if at != nil {
		// The script's clock ran actAt when the Limiter's ran r.at.
		us := at.UnixMicro() + r.actAt - r.at.UnixMicro()
		now, nowArg = *at, &us
	}
	if r.parts != nil {
		return r.cancelParts(ctx, now, nowArg)
	}
	if r.Degraded {
		l.policy.unreserve(r.key, r.Limit, cost, r.at, now)
		return nil
	}
	rv := algorithmOf(r.Limit).reserve
	req := request{kind: callCancel, lim: r.Limit, key: r.key, decode: rv.decodeCancel,
		call: rv.cancel(r.key, r.Limit, cost, r.tat, r.rem, r.actAt, nowArg)}
	if _, err := l.run(ctx, &req); err != nil {
		return fmt.Errorf("sluice: cancel %s: %w", r.key, err)
	}
	l.denials.forget(r.key)
	return nil
}

// cancelParts cancels every limit of a ReserveAll reservation: one
// gcra_cancel per limit, in one round trip (the keys share a node).
func (r *Reservation) cancelParts(ctx context.Context, now time.Time, nowArg *int64) error {
	l := r.l
	if r.Degraded {
		for _, p := range r.parts {
			l.policy.unreserve(p.key, p.lim, p.cost, r.at, now)
		}
		return nil
	}
	reqs := make([]request, len(r.parts))
	for i, p := range r.parts {
		rv := algorithmOf(p.lim).reserve
		reqs[i] = request{kind: callCancel, call: rv.cancel(p.key, p.lim, p.cost, p.tat, p.rem, r.actAt, nowArg),
			decode: rv.decodeCancel, lim: p.lim, key: p.key}
	}
	o, err := l.exchange(ctx, l.router.nodeFor(r.parts[0].key), time.Now(), reqs, nowArg, false)
	if o == outcomeOK {
		for i := range reqs {
			if err == nil && reqs[i].err != nil {
				err = reqs[i].err
			}
			l.denials.forget(reqs[i].key)
		}
	}
	if err != nil {
		return fmt.Errorf("sluice: cancel %s: %w", r.key, err)
	}
	return nil
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
// the wait it would need). lim must be a GCRA or token-bucket limit (see
// docs/limiter.md for why the others cannot reserve); its state is the
// one Allow uses.
func (l *Limiter) ReserveN(ctx context.Context, identity string, lim Limit, cost int64, maxWait time.Duration) (*Reservation, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	rv := algorithmOf(lim).reserve
	if rv == nil {
		return nil, fmt.Errorf("%w: %s: only gcra and token_bucket limits can reserve, got %s", ErrInvalidLimit, lim.Name, lim.Algorithm)
	}
	if cost < 1 || cost > MaxCost {
		return nil, fmt.Errorf("%w: a reservation's cost must be between 1 and 2^52, got %d", ErrInvalidCost, cost)
	}
	maxWait = min(max(maxWait, 0), maxPeriod)
	k := l.Key(identity, lim)
	res := &Reservation{Limit: lim, l: l.e, key: k, cost: cost}
	req := request{kind: callReserve, lim: lim, key: k, cost: cost, decode: rv.decode,
		call: rv.call(k, lim, cost, int64(maxWait/time.Microsecond), l.e.nowArg())}
	err := l.e.reserve(ctx, &req, res, func(d decision) {
		res.tat, res.rem = d.resetAfter, d.limiting
	}, func(p fallback, now time.Time, b *breaker) {
		var delay time.Duration
		res.OK, delay, res.closed = p.reserve(k, lim, cost, maxWait, now, b)
		if res.OK {
			res.at = now.Add(delay)
		} else {
			res.need = delay
		}
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// reserve sends a reservation's request (one script call) and fills res
// from Redis's answer: OK, when it conforms, or the wait it would need,
// and through booked what the script wrote. When Redis cannot answer the
// failure policy books (byPolicy, given the clock reading and the node's
// breaker) and res is Degraded.
func (e *engine) reserve(ctx context.Context, req *request, res *Reservation, booked func(decision), byPolicy func(fallback, time.Time, *breaker)) error {
	start := time.Now()
	n, cause, err := e.one(ctx, req)
	switch {
	case err != nil:
		return err
	case cause != nil:
		res.Degraded = true
		byPolicy(e.policy, e.now(), n.breaker)
	default:
		d := req.d
		res.OK = d.allowed
		switch {
		case d.allowed:
			res.at, res.actAt = e.now().Add(micros(d.remaining)), d.retryAfter
			booked(d)
		case d.remaining < 0:
			res.need = RetryNever
		default:
			res.need = micros(d.remaining)
		}
	}
	e.metrics.decision(ctx, Result{Allowed: res.OK, Limit: req.lim, Degraded: res.Degraded}, start)
	return nil
}

// cancelLeft cancels the booking a reservation request made for a caller
// who had gone (reconcile): nobody will wait for it.
func (e *engine) cancelLeft(req *request) {
	if req.keys != nil {
		// A ReserveAll's bookings stay: their states are not at hand
		// here. Unused, they only ever admit less.
		return
	}
	r := &Reservation{OK: true, Limit: req.lim, l: e, key: req.key, cost: req.cost,
		tat: req.d.resetAfter, rem: req.d.limiting, actAt: req.d.retryAfter}
	e.goroutines.start(func() { _ = r.Cancel(e.goroutines.ctx) })
}

// Booking is one limit of a ReserveAll and the cost it books.
type Booking struct {
	Limit Limit // a GCRA limit
	Cost  int64 // at least 1
}

// ReserveAll reserves on several GCRA limits of one identity at once (say
// 500 requests and 200,000 tokens per minute of an upstream API), all or
// nothing, in one round trip: the reservation conforms at the first moment
// every limit admits its booking's cost, if that is at most maxWait away,
// and each limit books its cost at that common moment, so that acting
// then keeps every limit. At most 16 limits, with distinct names. While
// Redis is unavailable the failure policy decides as for ReserveN, limit
// by limit (FailLocal books each on this replica's share and the
// reservation conforms when the last does).
func (l *Limiter) ReserveAll(ctx context.Context, identity string, bookings []Booking, maxWait time.Duration) (*Reservation, error) {
	if len(bookings) == 0 || len(bookings) > 16 {
		return nil, fmt.Errorf("%w: ReserveAll takes 1 to 16 limits, got %d", ErrInvalidLimit, len(bookings))
	}
	res := &Reservation{l: l.e, parts: make([]part, len(bookings)), cost: 1}
	args := make([]int64, 0, 4*len(bookings))
	keys := make([]string, len(bookings))
	for i, c := range bookings {
		if err := c.Limit.Validate(); err != nil {
			return nil, err
		}
		switch {
		case c.Limit.Algorithm != AlgGCRA:
			return nil, fmt.Errorf("%w: %s: ReserveAll takes gcra limits only, got %s", ErrInvalidLimit, c.Limit.Name, c.Limit.Algorithm)
		case c.Cost < 1 || c.Cost > MaxCost:
			return nil, fmt.Errorf("%w: booking %d: a reservation's cost must be between 1 and 2^52, got %d", ErrInvalidCost, i, c.Cost)
		}
		for _, o := range bookings[:i] {
			if o.Limit.Name == c.Limit.Name {
				return nil, fmt.Errorf("%w: ReserveAll: limit name %q given twice", ErrInvalidLimit, c.Limit.Name)
			}
		}
		keys[i] = l.Key(identity, c.Limit)
		res.parts[i] = part{lim: c.Limit, key: keys[i], cost: c.Cost}
		args = append(args, c.Limit.Rate, c.Limit.periodMicros(), c.Limit.Burst, c.Cost)
	}
	res.Limit, res.key = bookings[0].Limit, keys[0]
	maxWait = min(max(maxWait, 0), maxPeriod)
	call := scripts.GCRAReserveMulti.Call(scripts.GCRAReserveMultiKeys{States: keys}, scripts.GCRAReserveMultiArgs{
		MaxWait: int64(maxWait / time.Microsecond), Now: l.e.nowArg(), Limits: args})
	var states string
	req := request{kind: callReserve, call: call, lim: bookings[0].Limit, key: keys[0], keys: keys, cost: 1,
		decode: func(r luart.Reply) (decision, error) {
			m, err := scripts.GCRAReserveMulti.DecodeReply(r)
			states = m.States
			return decision{allowed: m.Ok, remaining: m.Delay, retryAfter: m.ActAt}, err
		}}
	err := l.e.reserve(ctx, &req, res, func(decision) {
		for i, st := range strings.Split(states, ",") {
			if i < len(res.parts) {
				t, r, _ := strings.Cut(st, ":")
				res.parts[i].tat, _ = strconv.ParseInt(t, 10, 64)
				res.parts[i].rem, _ = strconv.ParseInt(r, 10, 64)
			}
		}
	}, func(p fallback, now time.Time, b *breaker) {
		res.bookParts(p, maxWait, now, b)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// bookParts books every part of a ReserveAll reservation with the failure
// policy, all or nothing: the reservation conforms when the last part
// does; when one part cannot be booked, those booked are given back.
func (r *Reservation) bookParts(p fallback, maxWait time.Duration, now time.Time, b *breaker) {
	r.OK, r.at = true, now
	for i, pt := range r.parts {
		ok, wait, closed := p.reserve(pt.key, pt.lim, pt.cost, maxWait, now, b)
		if !ok {
			for _, done := range r.parts[:i] {
				p.unreserve(done.key, done.lim, done.cost, now.Add(done.localWait), now)
			}
			r.OK, r.need, r.closed = false, wait, closed
			return
		}
		r.parts[i].localWait = wait
		r.at = maxTime(r.at, now.Add(wait))
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
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
