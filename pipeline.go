package sluice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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
	lim    Limit
	key    string
	multi  []Limit
	keys   []string
	cost   int64
	peek   bool
	holder string // Acquire, Extend, Release: the lease's holder ID
	lease  *Lease // Acquire: the lease the caller gets
	cause  error  // why Redis could not decide (set before the failure policy runs)
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
	callRelease                 // Release: never refused by the breaker; no fallback; not a decision; sent even for a caller who has given up
	callReset                   // Reset: DEL of its keys; never refused by the breaker; not a decision
)

// bypass reports calls the breaker never refuses (lease renewal and
// release, Reset): refusing them would leave a slot taken for its whole
// lease, or a quota spent that the caller meant to give back.
func (r *request) bypass() bool { return r.kind >= callRenew }

// outcome says how a call ended, and so what the pipeline does next.
type outcome int

const (
	outcomeOK          outcome = iota // Redis decided
	outcomeCaller                     // the caller's context ended first: its error, never a local decision
	outcomeRefused                    // the script refused its arguments: a caller's mistake
	outcomeWrongType                  // the key holds another type: this key's problem alone
	outcomeUnavailable                // Redis did not decide (gone, silent, erring, or past WithTimeout): the failure policy decides
	outcomeClosed                     // the Limiter is closed
)

// errSilent and errTimeout are the causes of decisions the failure policy
// made while a call was still out: the node had answered nothing for the
// whole silence timeout, or (WithTimeout) the call waited its bound on a
// node that answers others.
var (
	errSilent  = errors.New("sluice: Redis node silent for the whole silence timeout")
	errTimeout = errors.New("sluice: no reply within WithTimeout's bound (the node answers others)")
)

// The errors of a caller whose context ended, made once: a caller giving
// up costs no allocation.
var (
	errCallerDeadline = fmt.Errorf("sluice: %w", context.DeadlineExceeded)
	errCallerCanceled = fmt.Errorf("sluice: %w", context.Canceled)
)

// callerErr is the error of a call whose caller's context ended.
func callerErr(ctx context.Context) error {
	switch err := ctx.Err(); err {
	case context.DeadlineExceeded:
		return errCallerDeadline
	case context.Canceled:
		return errCallerCanceled
	default:
		return fmt.Errorf("sluice: %w", err)
	}
}

// run is the one decision pipeline every entry point uses: breaker →
// call, outliving a caller who gives up → classify → failure policy →
// metrics.
func (l *Limiter) run(ctx context.Context, req *request) (Result, error) {
	d, o, err := l.call(ctx, req)
	var res Result
	switch o {
	case outcomeOK:
		bind := req.lim
		if p := int(d.limiting); p >= 1 && p <= len(req.multi) {
			bind = req.multi[p-1]
		}
		res = d.result(bind)
	case outcomeCaller:
		return Result{}, err
	case outcomeClosed:
		return Result{}, ErrClosed
	case outcomeRefused:
		return Result{}, fmt.Errorf("%w: %s: %w", ErrInvalidLimit, req.lim.Name, err)
	case outcomeWrongType:
		return Result{}, fmt.Errorf("%w: %s (limit %s, algorithm %s; Reset it or rename the limit): %w", ErrWrongType, req.key, req.lim.Name, req.lim.Algorithm, err)
	case outcomeUnavailable:
		l.metrics.failure(ctx, req.lim, err)
		if req.bypass() {
			return Result{}, err
		}
		req.cause = err
		res = l.degrade(req)
	}
	if req.kind <= callRenew {
		l.metrics.decision(ctx, res, req.start)
	}
	return res, nil
}

// call sends req to the node holding its keys, unless that node's breaker
// is open, and waits for the answer, the caller's context, or the node's
// silence, whichever comes first.
func (l *Limiter) call(ctx context.Context, req *request) (decision, outcome, error) {
	if l.goroutines.closed() {
		return decision{}, outcomeClosed, ErrClosed
	}
	n := l.router.nodeFor(req.key)
	req.node = n
	req.start = time.Now()
	if err := ctx.Err(); err != nil && req.kind != callRelease {
		return decision{}, outcomeCaller, callerErr(ctx) // nothing sent, nothing charged
	}
	if !req.bypass() {
		if ok, probe := n.breaker.allow(); !ok {
			if probe {
				l.probe(n)
			}
			return decision{}, outcomeUnavailable, ErrBreakerOpen
		}
	}
	select {
	case n.slots <- struct{}{}:
	default:
		if o, err := l.queue(ctx, n, req.start); o != outcomeOK {
			if req.kind == callRelease && o == outcomeCaller {
				// Nothing was sent, and a release must be: the
				// release queue sends it.
				l.giveBack(req.key, req.holder, req.lim)
			}
			return decision{}, o, err
		}
	}
	if req.decode == nil {
		req.buildRate(l.nowArg())
	}
	if !l.goroutines.add() {
		<-n.slots
		return decision{}, outcomeClosed, ErrClosed
	}
	f := flights.Get().(*flight)
	f.req = *req
	n.sending(req.start)
	select {
	case l.idle <- f: // a flier waiting for work takes it
	default:
		go l.flier(f)
	}
	return l.await(ctx, f)
}

// maxFlights bounds the calls out on one node at once. Past it a call waits
// for one to land, in the caller's goroutine: a caller who gives up while
// it waits has sent nothing and charged nothing, and a paused node does
// not pile up goroutines, or calls that would all be charged when it wakes.
const maxFlights = 1024

// queue waits for a free flight slot on n, the caller's context, or n's
// silence; outcomeOK means the slot is taken.
func (l *Limiter) queue(ctx context.Context, n *node, start time.Time) (outcome, error) {
	w := l.watch(n, start)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		if d, ok := w.next(); ok {
			t.Reset(d)
		}
		select {
		case n.slots <- struct{}{}:
			return outcomeOK, nil
		case <-ctx.Done():
			return outcomeCaller, callerErr(ctx)
		case <-t.C:
			if err := w.check(time.Now()); err != nil {
				if err == errSilent {
					l.silenced(n)
				}
				return outcomeUnavailable, err
			}
		}
	}
}

// flier flies f and then the flights handed to it, until none has come for
// a second or the Limiter closes: under steady load the goroutines are
// reused, and a call starts none.
func (l *Limiter) flier(f *flight) {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	for {
		l.fly(f)
		t.Reset(time.Second)
		if !l.goroutines.add() {
			return
		}
		select {
		case f = <-l.idle:
			l.goroutines.done() // the caller counted the flight already
		case <-t.C:
			l.goroutines.done()
			return
		case <-l.goroutines.ctx.Done():
			l.goroutines.done()
			return
		}
	}
}

// flight is one call to Redis. It runs on a goroutine of its own under the
// Limiter's context, not the caller's, so it outlives a caller who gives
// up or who was answered by the failure policy: its reply is still read
// (the node answered, which is what liveness means here), and what it did
// in Redis is reconciled (a lease taken for a caller who left is given
// back).
type flight struct {
	req   request
	d     decision
	err   error
	state atomic.Int32 // flightWaiting, then flightLanded (by the flight), or flightLeft or flightAnswered (by the waiter)
	done  chan struct{}
	timer *time.Timer
}

const (
	flightWaiting  int32 = iota
	flightLanded         // d and err hold the reply, for the waiter
	flightLeft           // the caller gave up: the flight reconciles on its own
	flightAnswered       // the failure policy answered the caller (silent node, WithTimeout): likewise
)

var flights = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &flight{done: make(chan struct{}, 1), timer: t}
}}

func (f *flight) recycle() {
	f.req, f.d, f.err = request{}, decision{}, nil
	f.state.Store(flightWaiting)
	flights.Put(f)
}

// fly sends the call, retries it while the cluster answers TRYAGAIN (the
// script did not run: its keys are being migrated), and hands the reply to
// the waiter, or reconciles it when the waiter has gone.
func (l *Limiter) fly(f *flight) {
	defer l.goroutines.done()
	req := &f.req
	n := req.node
	ctx := l.deadlines.get(req.start, l.cfg.flightBound())
	var d decision
	var err error
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		d, err = req.decode(l.send(ctx, req))
		if classOf(err) != classRetry {
			break
		}
		n.replied(time.Now())
		if f.state.Load() != flightWaiting && req.kind != callRelease {
			break // nobody waits, and the script did not run: nothing to do
		}
		l.metrics.retry(req.lim)
		if !sleepCtx(ctx, delay) {
			err = ctx.Err()
			break
		}
	}
	cl := classOf(err)
	n.finished(time.Now(), cl != classDown && cl != classGaveUp)
	<-n.slots
	if cl == classDown {
		n.breaker.unanswered()
		l.router.failed()
	}
	f.d, f.err = d, err
	if f.state.CompareAndSwap(flightWaiting, flightLanded) {
		f.done <- struct{}{}
		return
	}
	l.reconcile(req, d, cl, f.state.Load() == flightLeft)
	f.recycle()
}

// send is the command of req: its script, or for Reset a DEL.
func (l *Limiter) send(ctx context.Context, req *request) rueidis.RedisResult {
	if req.kind == callReset {
		return l.client.Do(ctx, l.client.B().Del().Key(req.keys...).Build())
	}
	return luart.Do(ctx, l.metrics.scriptsVia(l.client), req.call)
}

// await waits for f's reply, the caller's context, or the node's silence.
func (l *Limiter) await(ctx context.Context, f *flight) (decision, outcome, error) {
	n := f.req.node
	w := l.watch(n, f.req.start)
	t := f.timer
	for {
		// The flight counts in the node's inflight until it lands, so
		// the node's silence is watched while it is out.
		var tc <-chan time.Time
		if d, ok := w.next(); ok {
			t.Reset(d)
			tc = t.C
		}
		select {
		case <-f.done:
			t.Stop()
			return l.landed(f)
		case <-ctx.Done():
			t.Stop()
			if !f.state.CompareAndSwap(flightWaiting, flightLeft) {
				<-f.done
				return l.landed(f)
			}
			return decision{}, outcomeCaller, callerErr(ctx)
		case <-tc:
			err := w.check(time.Now())
			if err == nil {
				continue
			}
			if !f.state.CompareAndSwap(flightWaiting, flightAnswered) {
				<-f.done
				return l.landed(f)
			}
			if err == errSilent {
				l.silenced(n)
			}
			return decision{}, outcomeUnavailable, err
		}
	}
}

// watcher is what a waiting caller watches besides its call: the node's
// silence (with its PING confirmation) and WithTimeout's bound.
type watcher struct {
	l              *Limiter
	n              *node
	bound, recheck time.Time // recheck: the next look once silence is suspected
	due            time.Time // when the look being taken was due: at the wake time, or at once if that had passed
}

func (l *Limiter) watch(n *node, start time.Time) watcher {
	w := watcher{l: l, n: n}
	if l.cfg.timeout > 0 {
		w.bound = start.Add(l.cfg.timeout)
	}
	return w
}

// next is how long to wait before looking again; false when there is
// nothing to watch.
func (w *watcher) next() (time.Duration, bool) {
	var wake time.Time
	if !w.recheck.IsZero() {
		wake = earliest(w.recheck, w.bound)
	} else {
		wake = earliest(w.n.silentAt(w.l.cfg.silence), w.bound)
	}
	if wake.IsZero() {
		return 0, false
	}
	now := time.Now()
	w.due = wake
	if now.After(wake) {
		w.due = now
	}
	return wake.Sub(now), true
}

// check looks at now: errSilent when the node is silent (confirmed),
// errTimeout past the bound, nil to go on waiting.
func (w *watcher) check(now time.Time) error {
	silent, recheck := w.l.silentNode(w.n, now, now.Sub(w.due))
	w.recheck = recheck
	switch {
	case silent:
		return errSilent
	case !w.bound.IsZero() && !now.Before(w.bound):
		return errTimeout
	}
	return nil
}

// earliest is the earliest of the times that are set; zero if none is.
func earliest(ts ...time.Time) time.Time {
	var e time.Time
	for _, t := range ts {
		if !t.IsZero() && (e.IsZero() || t.Before(e)) {
			e = t
		}
	}
	return e
}

// silentNode reports whether n is silent at now, confirmed: calls have
// waited on it the whole silence timeout with no reply of any kind, and
// the Limiter's own PING, sent when that was first seen, has had a quarter
// of the timeout more without a reply either. Until then it returns when
// to look again. The second look, and late, guard against this process
// being starved of CPU, which from inside looks like a silent node:
// replies that arrived but wait for a core to be read are read by the
// second look, and a look taken late (late after it was due: this
// goroutine, like the ones reading replies, waited for a core) confirms
// nothing, but starts the confirmation again.
func (l *Limiter) silentNode(n *node, now time.Time, late time.Duration) (bool, time.Time) {
	if !n.silent(now, l.cfg.silence) {
		return false, time.Time{}
	}
	confirm := l.cfg.silence / 4
	sus := n.suspect.Load()
	if sus == 0 || sus < n.lastReply.Load() || late > max(confirm/5, 50*time.Millisecond) {
		n.suspect.CompareAndSwap(sus, now.UnixNano())
		l.probe(n)
		return false, now.Add(confirm)
	}
	if at := time.Unix(0, sus).Add(confirm); now.Before(at) {
		return false, at
	}
	return true, time.Time{}
}

// landed takes the reply of a flight whose waiter is still there.
func (l *Limiter) landed(f *flight) (decision, outcome, error) {
	d, err := f.d, f.err
	f.recycle()
	switch classOf(err) {
	case classOK:
		return d, outcomeOK, nil
	case classRefused:
		return d, outcomeRefused, err
	case classWrongType:
		return d, outcomeWrongType, err
	case classGaveUp:
		if l.goroutines.closed() {
			return d, outcomeClosed, ErrClosed
		}
	}
	return d, outcomeUnavailable, err
}

// silenced opens n's breaker: calls have waited on it for the whole
// silence timeout and it answered none.
func (l *Limiter) silenced(n *node) {
	n.breaker.trip()
	l.router.failed()
}

// reconcile puts right in Redis what a flight did for a waiter who had
// already gone (cancelled, or answered by the failure policy): a lease it
// took (or may have taken, when no reply came) is given back, and so is a
// release that did not get through for a caller who gave up (one answered
// by the failure policy retries it itself); a rate charge stays (the quota
// it spent is counted, never over-admitted) and is recorded.
func (l *Limiter) reconcile(req *request, d decision, cl class, callerLeft bool) {
	unknown := cl == classDown || cl == classGaveUp
	switch req.kind {
	case callAcquire:
		if cl == classOK && d.allowed || unknown {
			l.giveBack(req.key, req.holder, req.lim)
		}
	case callRelease:
		if unknown && callerLeft {
			l.giveBack(req.key, req.holder, req.lim)
		}
	case callRate:
		if cl == classOK && d.allowed && req.cost > 0 && !req.peek {
			l.metrics.lateCharge(req.lim)
		}
	}
}

// probe starts the Limiter's own liveness probe of n (a PING) unless one
// is out; its reply closes the breaker, its failure opens it again.
func (l *Limiter) probe(n *node) {
	if !n.probing.CompareAndSwap(false, true) {
		return
	}
	if !l.goroutines.start(func() {
		defer n.probing.Store(false)
		ctx, cancel := context.WithTimeout(l.goroutines.ctx, max(l.cfg.silence, time.Second))
		defer cancel()
		if err := n.probe(ctx); err != nil {
			n.breaker.unanswered()
			l.router.failed()
			return
		}
		n.replied(time.Now())
	}) {
		n.probing.Store(false)
	}
}

// ping is the probe of a node: a PING on the client of its address (a
// cluster primary), or on the Limiter's client.
func (l *Limiter) ping(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var c rueidis.CommandClient = l.client
		if nl, ok := l.client.(interface {
			Nodes() map[string]rueidis.Client
		}); ok && l.router.cluster {
			if nc := nl.Nodes()[addr]; nc != nil {
				c = nc
			}
		}
		err := c.Do(ctx, c.B().Ping().Build()).Error()
		if _, ok := rueidis.IsRedisErr(err); ok {
			return nil // an error reply (LOADING, NOAUTH, ...) is still an answer
		}
		return err
	}
}

// class is what an error from a call means; classOf is the one place that
// decides it.
type class int

const (
	classOK        class = iota
	classRefused         // the script refused its arguments ("ERR sluice: SCRIPT: ...")
	classWrongType       // WRONGTYPE: the key holds another type
	classRetry           // TRYAGAIN: the keys are being migrated; the script did not run
	classServer          // another error reply: the node answered but did not decide (LOADING, OOM, READONLY, BUSY, ...)
	classGaveUp          // the Limiter's own bound or Close ended the call: says nothing of the node
	classDown            // no answer: the connection failed
)

func classOf(err error) class {
	if err == nil {
		return classOK
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		msg := re.Error()
		switch {
		case strings.Contains(msg, "sluice: "):
			return classRefused
		case strings.HasPrefix(msg, "WRONGTYPE"):
			return classWrongType
		case re.IsTryAgain():
			return classRetry
		}
		return classServer
	}
	switch {
	case errors.Is(err, luart.ErrMalformedReply):
		return classServer
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return classGaveUp
	}
	return classDown
}

// sleepCtx waits d unless ctx ends first (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
