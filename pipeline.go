package sluice

import (
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
	call   luart.Call
	decode func(rueidis.RedisResult) (decision, error)
	// limits are the limits decided, in call order; a decision's limiting
	// position (1-based) picks the binding one.
	limits []Limit
	// bypass marks calls the breaker never refuses (lease release and
	// renewal): refusing them would leave a slot taken for its whole lease.
	bypass bool
	// degrade is the failure policy's decision when Redis cannot decide; nil
	// means the call has no fallback and the failure is returned as an error.
	degrade func(cause error) Result
	// quiet marks calls that are not decisions (Release): no decision metric.
	quiet bool
}

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
func (l *Limiter) run(ctx context.Context, req request) (Result, error) {
	start := time.Now()
	d, err := l.call(ctx, req)
	var res Result
	switch classify(ctx, err) {
	case outcomeOK:
		bind := req.limits[0]
		if p := int(d.limiting); p >= 1 && p <= len(req.limits) {
			bind = req.limits[p-1]
		}
		res = d.result(bind)
	case outcomeCaller:
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("sluice: %w", ctx.Err())
		}
		return Result{}, fmt.Errorf("sluice: %w (the caller's deadline passed before Redis answered)", context.DeadlineExceeded)
	case outcomeRejected:
		return Result{}, fmt.Errorf("%w: %s: %w", ErrInvalidLimit, req.limits[0].Name, err)
	case outcomeRedis:
		l.metrics.failure(ctx, req.limits[0], err)
		if req.degrade == nil {
			return Result{}, err
		}
		res = req.degrade(err)
	}
	if !req.quiet {
		l.metrics.decision(ctx, res, start)
	}
	return res, nil
}

// call sends req's script under the breaker and the per-call timeout and
// tells the breaker what the outcome says about Redis.
func (l *Limiter) call(ctx context.Context, req request) (decision, error) {
	if !req.bypass && !l.breaker.allow() {
		return decision{}, ErrBreakerOpen
	}
	cctx, own := ctx, false
	if t := l.cfg.timeout; t > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > t {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, t)
			defer cancel()
			own = true
		}
	}
	d, err := req.decode(luart.Do(cctx, l.client, req.call))
	if err != nil && !own && ctx.Err() == nil && isTimeout(err) {
		if _, ok := ctx.Deadline(); ok {
			// The socket deadline rueidis set was the caller's: its
			// deadline passed, even if ctx.Err() is not set yet.
			err = errCallerDeadline{err}
		}
	}
	if req.bypass {
		return d, err
	}
	switch classify(ctx, err) {
	case outcomeOK, outcomeRejected:
		l.breaker.done(true)
	case outcomeCaller:
		l.breaker.abandon()
	default:
		if err != ErrBreakerOpen {
			l.breaker.done(false)
		}
	}
	return d, err
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
