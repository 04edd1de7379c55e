package sluice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/runtime/luart"
)

// request is one call through the decision pipeline.
type request struct {
	kind callKind
	// call and decode are the script call and its decoder; a rate
	// request leaves them unset and call builds them once the breaker
	// lets the request through (buildRate).
	call   luart.Call
	decode func(rueidis.RedisResult) (decision, error)
	// lim and key are the limit decided and its key; for AllowAll, multi
	// and keys hold every limit in call order (a decision's limiting
	// position, 1-based, picks the binding one) and lim is the first.
	lim   Limit
	key   string
	multi []Limit
	keys  []string
	cost  int64
	peek  bool
	lease *Lease // acquire
	cause error  // why Redis could not decide (set before the failure policy runs)
	// node is where the call went and start when it began (set by call).
	node  *node
	start time.Time
}

// buildRate sets the script call and decoder of a rate request: Allow,
// AllowN and Peek (one limit) or AllowAll (multi).
func (r *request) buildRate(now *int64) {
	if r.multi != nil {
		r.call, r.decode = multiCall(r.keys, r.multi, r.cost, now)
		return
	}
	r.call, r.decode = rateCall(r.key, r.lim, r.cost, now, r.peek)
}

// callKind says what a request is, and so how the pipeline treats it.
type callKind int

const (
	callRate    callKind = iota // AllowN, Peek, AllowAll: decided by the failure policy when Redis cannot
	callAcquire                 // Acquire: likewise, with a local or no lease
	callRenew                   // Extend: never refused by the breaker; no fallback
	callRelease                 // Release: never refused by the breaker; no fallback; not a decision
)

// bypass reports calls the breaker never refuses (lease renewal and
// release): refusing them would leave a slot taken for its whole lease.
func (r *request) bypass() bool { return r.kind == callRenew || r.kind == callRelease }

// outcome classifies how a call ended.
type outcome int

const (
	outcomeOK       outcome = iota // Redis decided
	outcomeCaller                  // the caller's context ended or its deadline passed
	outcomeRejected                // the script refused its arguments: a caller's mistake
	outcomeRedis                   // Redis failed, was too slow, or the breaker is open
)

// run is the one decision pipeline every entry point uses: breaker →
// timeout → call → classify the error → failure policy → metrics.
func (l *Limiter) run(ctx context.Context, req *request) (Result, error) {
	d, err := l.call(ctx, req)
	var res Result
	switch classify(ctx, err) {
	case outcomeOK:
		bind := req.lim
		if p := int(d.limiting); p >= 1 && p <= len(req.multi) {
			bind = req.multi[p-1]
		}
		res = d.result(bind)
	case outcomeCaller:
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("sluice: %w", ctx.Err())
		}
		return Result{}, fmt.Errorf("sluice: %w (the caller's deadline passed before Redis answered)", context.DeadlineExceeded)
	case outcomeRejected:
		return Result{}, fmt.Errorf("%w: %s: %w", ErrInvalidLimit, req.lim.Name, err)
	case outcomeRedis:
		l.metrics.failure(ctx, req.lim, err)
		if req.kind == callRenew || req.kind == callRelease {
			return Result{}, err
		}
		req.cause = err
		res = l.degrade(req)
	}
	if req.kind != callRelease {
		l.metrics.decision(ctx, res, req.start)
	}
	return res, nil
}

// call sends req's script to the node holding its keys, under that node's
// breaker and the per-call timeout, and tells the breaker what the outcome
// says about the node.
func (l *Limiter) call(ctx context.Context, req *request) (decision, error) {
	n := l.router.nodeFor(req.key)
	req.node = n
	start := time.Now()
	req.start = start
	probe := false
	if !req.bypass() {
		var ok bool
		if ok, probe = n.breaker.allow(); !ok {
			return decision{}, ErrBreakerOpen
		}
	}
	if req.decode == nil {
		req.buildRate(l.nowArg())
	}
	t := l.timeoutFor(n, probe)
	cctx, own := ctx, false
	if t > 0 {
		switch dl, ok := ctx.Deadline(); {
		case ctx == context.Background():
			cctx, own = n.deadlines.get(start, t), true
		case ctx.Done() == nil:
			cctx, own = &withValues{Context: ctx, d: n.deadlines.get(start, t)}, true
		case !ok || dl.Sub(start) > t:
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, t)
			defer cancel()
			own = true
		}
	}
	n.sending(start)
	d, err := req.decode(luart.Do(cctx, l.metrics.scriptsVia(l.client), req.call))
	end := time.Now()
	// The node counts as silent when calls have waited on it for a whole
	// timeout without any reply (the upper bound when there is none).
	silent := err != nil && n.silentFor(end, cmp.Or(t, l.cfg.timeoutMax))
	n.finished()
	if err != nil && ctx.Err() == nil && isTimeout(err) {
		if dl, ok := cctx.Deadline(); ok && !end.Before(dl) && !own {
			// The socket deadline rueidis set was the caller's: its
			// deadline passed, even if ctx.Err() is not set yet.
			err = errCallerDeadline{err}
		} else if !ok || end.Before(dl) {
			// Neither deadline has passed: rueidis failed this call with
			// a deadline it took from another one (a connection attempt
			// made on behalf of several calls). It says nothing about the
			// node unless the node is silent.
			own = false
		}
	}
	switch classify(ctx, err) {
	case outcomeOK, outcomeRejected:
		n.replied(end, end.Sub(start))
		if !req.bypass() {
			n.breaker.done(true)
		}
	case outcomeCaller:
		// A caller giving up says nothing about the node, unless its
		// deadline passed while the node had left calls unanswered for a
		// whole timeout: callers whose deadlines are all shorter than the
		// timeout must not keep a silent node's breaker closed (rueidis
		// would go on queueing their calls on it).
		silent = silent && ctx.Err() != context.Canceled
		if !req.bypass() {
			if silent {
				n.breaker.done(false)
			} else {
				n.breaker.abandon()
			}
		}
		if silent {
			l.router.failed()
		}
	default:
		if isTimeout(err) && (n.answeredSince(start) || !own && !silent) {
			// The node answered other calls while this one waited: it is
			// up, and this process or its queue is overloaded. That is no
			// reason to stop asking it. Nor is a deadline that was not
			// this call's, while the node still answers.
			if !req.bypass() {
				n.breaker.abandon()
			}
			break
		}
		if !req.bypass() && err != ErrBreakerOpen {
			n.breaker.done(false)
		}
		l.router.failed()
	}
	return d, err
}

// timeoutFor is the deadline of one call to n: WithTimeout's, or the
// adaptive one (4× the node's recent slowest reply, within the bounds of
// WithAdaptiveTimeout). A half-open breaker's probe, the one call that
// decides whether the node is back, gets the upper bound, so a loaded
// host cannot starve it.
func (l *Limiter) timeoutFor(n *node, probe bool) time.Duration {
	lo, hi := l.cfg.timeoutMin, l.cfg.timeoutMax
	if !l.cfg.adaptive {
		if probe && lo > 0 {
			return max(lo, hi)
		}
		return lo
	}
	if probe {
		return hi
	}
	return n.latency.timeout(lo, hi)
}

// classify says whose the error is.
func classify(ctx context.Context, err error) outcome {
	switch {
	case err == nil:
		return outcomeOK
	case errors.As(err, new(errCallerDeadline)), ctx.Err() != nil:
		return outcomeCaller
	case rejected(err):
		return outcomeRejected
	}
	return outcomeRedis
}

// errCallerDeadline marks a timeout that was the caller's own deadline.
type errCallerDeadline struct{ err error }

func (e errCallerDeadline) Error() string { return e.err.Error() }
func (e errCallerDeadline) Unwrap() error { return e.err }

// rejected reports whether err is a script's refusal of its arguments
// ("ERR sluice: SCRIPT: ..."): a caller's mistake, not a Redis failure, so
// the failure policy and the breaker stay out of it.
func rejected(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.Contains(re.Error(), "sluice: ")
}

// isTimeout reports whether err is a deadline or network timeout.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
