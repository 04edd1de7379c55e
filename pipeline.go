package sluice

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/keyslot"
	"github.com/sluice-go/sluice/runtime/luart"
)

// request is one call through the decision pipeline: one script on the
// keys of one identity (or for Reset a DEL). A flight carries one or more,
// all to one node, in one pipelined write.
type request struct {
	kind callKind
	// call and decode are the script call and its decoder; a rate
	// request may leave them unset and launch builds them once the
	// breaker lets the request through (build).
	call   luart.Call
	decode decoder
	// lim and key are the limit decided and its key; for a folded call
	// (and a refund or a ReserveAll), multi and keys hold every limit in
	// call order and lim is the first.
	lim    Limit
	key    string
	multi  []Limit
	keys   []string
	each   []int64 // a folded call: every limit's remaining, retry_after and reset_after, filled by the decoder
	cost   int64
	peek   bool
	shadow bool   // Decide: a Shadow check, never folded with others (its denial must not stop their charges)
	holder string // Acquire, Extend, Release: the lease's holder ID
	check  int    // Decide: the position of the check this request decides
	// since: for a charge, the TIME (µs) Redis replied ahead of it on
	// its node (a flight's since; 0 when not asked or it failed); for a
	// refund, the time the charges were made after. charges: per key, a
	// refund's cost and the reset_after the charge replied.
	since   int64
	charges []int64
	// folded: a flight joined other checks' requests into this one's
	// multi-limit call (fold). uncharged: this check admitted on its own
	// but the call it was folded into did not, so nothing was charged.
	folded, uncharged bool
	// whole: the batch wants only its binding Result (AllowAll), so a
	// folded call replies the whole decision and not every limit's, which
	// costs the script less; unasked: a check such a call decided whose
	// own numbers were not asked for.
	whole, unasked bool
	// d and err are the reply, once the flight has landed.
	d   decision
	err error
}

// decoder reads a script's reply.
type decoder = func(luart.Reply) (decision, error)

// build sets the script call and decoder of a rate request: one limit, or
// a folded call's (multi).
func (r *request) build(now *int64) {
	if r.multi != nil {
		if r.folded && r.each == nil && !r.whole {
			r.each = make([]int64, 3*len(r.multi))
		}
		r.call, r.decode = multiCall(r.keys, r.multi, r.cost, now, r.each)
		return
	}
	a := algorithmOf(r.lim)
	r.call, r.decode = a.call(r.key, r.lim, r.cost, now, r.peek), a.decode
}

// callKind says what a request is, and so how the pipeline treats it
// (decides, undoes).
type callKind int

const (
	callRate    callKind = iota // a rate check: decided by the failure policy when Redis cannot
	callAcquire                 // a concurrency check (Acquire): likewise, with a local or no lease
	callReserve                 // Reserve, Wait: likewise, with a local reservation or none
	callRenew                   // Extend: never refused by the breaker; no fallback
	callRelease                 // Release: never refused by the breaker; no fallback; sent even for a caller who has given up
	callRefund                  // a denied batch's refund: like a release
	callCancel                  // a reservation's Cancel: like a release
	callReset                   // Reset: DEL of its keys; never refused by the breaker
)

// decides reports calls that are decisions: the breaker may refuse them,
// and the failure policy decides them when Redis cannot. The others (lease
// renewal and release, refunds, cancels, Reset) are never refused by the
// breaker: refusing them would leave a slot taken for its whole lease, or
// a quota spent that the caller meant to give back.
func (r *request) decides() bool {
	switch r.kind {
	case callRate, callAcquire, callReserve:
		return true
	}
	return false
}

// undoes reports calls that give back what an earlier call took (a slot,
// a charge, a booking): they are sent even for a caller who has given up.
func (r *request) undoes() bool {
	switch r.kind {
	case callRelease, callRefund, callCancel:
		return true
	}
	return false
}

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

// run sends one request that is not a decision (Extend, Release, Reset, a
// reservation's Cancel) on its own: breaker (Extend only) → flight,
// outliving a caller who gives up → classify → metrics. When Redis cannot
// answer, the error says why: there is nothing for the failure policy to
// decide. Decisions go through Decide, or for Reserve through reserve, on
// the same flights.
func (e *engine) run(ctx context.Context, req *request) (Result, error) {
	start := time.Now()
	_, cause, err := e.one(ctx, req)
	switch {
	case err != nil:
		return Result{}, err
	case cause != nil:
		return Result{}, cause
	}
	res := req.d.result(req.lim)
	if req.kind == callRenew {
		e.metrics.decision(ctx, res, start)
	}
	return res, nil
}

// one sends req in a flight of its own and classifies how it ended, the
// one place that does for every call outside a batch: err is the caller's
// error (its context, ErrClosed, a refused argument, a key of another
// type); otherwise Redis answered (req.d) when cause is nil, and when it
// is not, Redis could not (cause, recorded as a failure) and n is the node
// that could not.
func (e *engine) one(ctx context.Context, req *request) (n *node, cause, err error) {
	start := time.Now()
	n = e.router.nodeFor(req.key)
	one := [1]request{*req}
	o, err := e.exchange(ctx, n, start, one[:], e.nowArg(), false)
	*req = one[0]
	if o == outcomeOK {
		o, err = outcomeOf(req.err)
	}
	switch o {
	case outcomeOK:
		return n, nil, nil
	case outcomeUnavailable:
		e.metrics.failure(ctx, req.lim, err)
		return n, err, nil
	}
	return n, nil, outcomeError(o, req, err)
}

// outcomeError is the error a caller gets for a request that ended in o:
// its own context's, ErrClosed, an ErrInvalidLimit for a refused script,
// an ErrWrongType; nil for the outcomes that have a decision.
func outcomeError(o outcome, req *request, err error) error {
	switch o {
	case outcomeCaller:
		return err
	case outcomeClosed:
		return ErrClosed
	case outcomeRefused:
		return fmt.Errorf("%w: %s: %w", ErrInvalidLimit, req.lim.Name, err)
	case outcomeWrongType:
		return wrongType(req, err)
	}
	return nil
}

func wrongType(req *request, err error) error {
	return fmt.Errorf("%w: %s (limit %s, algorithm %s; Reset it or rename the limit): %w", ErrWrongType, req.key, req.lim.Name, req.lim.Algorithm, err)
}

// outcomeOf is the outcome of a request whose flight landed.
func outcomeOf(err error) (outcome, error) {
	switch classOf(err) {
	case classOK:
		return outcomeOK, nil
	case classRefused:
		return outcomeRefused, err
	case classWrongType:
		return outcomeWrongType, err
	}
	return outcomeUnavailable, err
}

// exchange sends reqs, all for node n, in one flight and waits for their
// replies (left in reqs), the caller's context, or the node's silence,
// whichever comes first; outcomeOK means the flight landed, and each
// request's err says how it fared. With since, the flight asks Redis for
// its TIME ahead of the scripts (the bound a refund needs; sinceOf).
func (e *engine) exchange(ctx context.Context, n *node, start time.Time, reqs []request, now *int64, since bool) (outcome, error) {
	f, o, err := e.launch(ctx, n, start, reqs, now, since)
	if o != outcomeOK {
		return o, err
	}
	o, err = e.await(ctx, f)
	if o == outcomeOK || o == outcomeClosed {
		e.collect(f, reqs)
	}
	return o, err
}

// collect copies the replies of a landed flight into reqs and recycles it.
func (e *engine) collect(f *flight, reqs []request) {
	for i := range reqs {
		w := &f.reqs[f.fold[i]]
		reqs[i].d, reqs[i].err, reqs[i].since = w.d, w.err, w.since
		if !w.folded || w.err != nil {
			continue
		}
		// A check folded into a multi-limit call: its own numbers, or
		// for a whole decision, the binding check the whole decision.
		k := slices.Index(w.keys, reqs[i].key)
		if w.each == nil {
			reqs[i].unasked = k != int(w.d.limiting)-1
			continue
		}
		e := w.each[3*k : 3*k+3]
		reqs[i].d = decision{allowed: e[1] == 0, remaining: e[0], retryAfter: e[1], resetAfter: e[2]}
		reqs[i].uncharged = !w.d.allowed
	}
	f.recycle()
}

// fold joins the rate checks of reqs that one multi-limit script can
// decide together into wire, the requests a flight sends: checks of the
// same algorithm (gcra, sliding_window or fixed_window, the ones with a
// multi-limit script), enforced, of the same cost, on distinct keys of one
// hash slot (the limits of one identity), at most 16 in one call. The slot
// holds on a standalone Redis too, unless anySlot (WithCrossSlotScripts):
// proxies in front of a sharded Redis (Redis Enterprise's clustered
// databases, Envoy) refuse a script whose keys span slots. fold[i] is the
// request of wire that decides reqs[i]. One call instead of several costs
// Redis less, and is atomic: when one of its checks denies, the others are
// not charged, so nothing of them needs a refund.
func fold(wire []request, fold []int, reqs []request, anySlot bool) ([]request, []int) {
	for i := range reqs {
		r := &reqs[i]
		j := -1
		if len(reqs) > 1 && foldable(r) {
			for w := range wire {
				if joins(&wire[w], r, anySlot) {
					j = w
					break
				}
			}
		}
		if j >= 0 {
			w := &wire[j]
			if !w.folded {
				w.folded = true
				w.multi = append(make([]Limit, 0, 4), w.lim)
				w.keys = append(make([]string, 0, 4), w.key)
			}
			w.multi, w.keys = append(w.multi, r.lim), append(w.keys, r.key)
		} else {
			wire = append(wire, *r)
			j = len(wire) - 1
		}
		fold = append(fold, j)
	}
	return wire, fold
}

// foldsToOne reports whether fold makes one call of all of reqs.
func foldsToOne(reqs []request, anySlot bool) bool {
	if len(reqs) > 16 || !foldable(&reqs[0]) {
		return false
	}
	for i := 1; i < len(reqs); i++ {
		if !foldable(&reqs[i]) || !oneCall(&reqs[0], &reqs[i], anySlot) || slices.ContainsFunc(reqs[:i], func(o request) bool { return o.key == reqs[i].key }) {
			return false
		}
	}
	return true
}

// foldable reports a check's request that a multi-limit call can take.
func foldable(r *request) bool {
	a := r.lim.Algorithm
	return r.kind == callRate && r.multi == nil && r.decode == nil && !r.peek && !r.shadow && (a == AlgGCRA || a == AlgSlidingWindow || a == AlgFixedWindow)
}

// oneCall reports checks one multi-limit call can decide together: one
// algorithm, one cost, one hash slot unless anySlot.
func oneCall(a, b *request, anySlot bool) bool {
	return a.lim.Algorithm == b.lim.Algorithm && a.cost == b.cost && (anySlot || keyslot.Of(a.key) == keyslot.Of(b.key))
}

// joins reports whether r can be folded into w: a wire request that is
// still a single check, or already a fold, with room and not r's key.
func joins(w, r *request, anySlot bool) bool {
	switch {
	case w.folded:
		return len(w.keys) < 16 && !slices.Contains(w.keys, r.key) && oneCall(w, r, anySlot)
	case foldable(w):
		return w.key != r.key && oneCall(w, r, anySlot)
	}
	return false
}

// launch sends reqs to n, unless n's breaker is open, as one flight.
func (e *engine) launch(ctx context.Context, n *node, start time.Time, reqs []request, now *int64, since bool) (*flight, outcome, error) {
	if e.goroutines.closed() {
		return nil, outcomeClosed, ErrClosed
	}
	first := &reqs[0]
	if err := ctx.Err(); err != nil && !first.undoes() {
		return nil, outcomeCaller, callerErr(ctx) // nothing sent, nothing charged
	}
	// The silence signal is taken before the breaker is asked: a node
	// found silent after this trips the breaker before it wakes the
	// signal's waiters, so a call let through waits on a signal that the
	// next silence still wakes.
	quiet := *n.quiet.Load()
	if first.decides() {
		if ok, probe := n.breaker.allow(); !ok {
			if probe {
				e.probe(n)
			}
			return nil, outcomeUnavailable, errBreakerOpen
		}
	}
	select {
	case n.slots <- struct{}{}:
	default:
		if o, err := e.queue(ctx, n, start, quiet); o != outcomeOK {
			if first.kind == callRelease && o == outcomeCaller {
				// Nothing was sent, and a release must be: the
				// release queue sends it.
				e.giveBack(first.key, first.holder, first.lim)
			}
			return nil, o, err
		}
	}
	// The flight is not counted among the Limiter's goroutines: the
	// node's senders are, and one of them, or after Close the caller
	// itself (enqueue), lands every flight queued.
	f := flights.Get().(*flight)
	f.reqs, f.fold = fold(f.reqs[:0], f.fold[:0], reqs, e.anySlot)
	for i := range f.reqs {
		if f.reqs[i].decode == nil {
			f.reqs[i].build(now)
		}
	}
	f.node, f.start, f.since, f.quiet = n, start, since, quiet
	n.sending(start)
	e.enqueue(f)
	return f, outcomeOK, nil
}

// maxFlights bounds the calls out on one node at once. Past it a call waits
// for one to land, in the caller's goroutine: a caller who gives up while
// it waits has sent nothing and charged nothing, and a paused node does
// not pile up calls that would all be charged when it wakes.
const maxFlights = 1024

// queue waits for a free flight slot on n, the caller's context, n's
// silence (quiet), or WithTimeout's bound; outcomeOK means the slot is
// taken.
func (e *engine) queue(ctx context.Context, n *node, start time.Time, quiet chan struct{}) (outcome, error) {
	var bound <-chan time.Time
	if e.cfg.timeout > 0 {
		t := time.NewTimer(time.Until(start.Add(e.cfg.timeout)))
		defer t.Stop()
		bound = t.C
	}
	select {
	case n.slots <- struct{}{}:
		return outcomeOK, nil
	case <-ctx.Done():
		return outcomeCaller, callerErr(ctx)
	case <-quiet:
		return outcomeUnavailable, errSilent
	case <-bound:
		return outcomeUnavailable, errTimeout
	}
}

// flight is one caller's round trip to one Redis node: its requests, sent
// by the node's senders in one pipelined write with other callers'
// (sender.go). It outlives a caller who gives up or who was answered by
// the failure policy: its replies are still read (the node answered,
// which is what liveness means here), and what it did in Redis is
// reconciled (a lease taken for a caller who left is given back).
type flight struct {
	reqs     []request // what it sends: reqs with the checks fold joined
	fold     []int     // for each of the caller's requests, the one of reqs that decides it
	node     *node
	start    time.Time
	since    bool          // send TIME ahead of the scripts
	quiet    chan struct{} // the node's silence signal as the call started
	timeKeys []string      // the keys whose node each TIME of a send goes to
	state    atomic.Int32  // flightWaiting, then flightLanded (by the sender), or flightLeft or flightAnswered (by the waiter)
	done     chan struct{}
	timer    *time.Timer // WithTimeout's bound
}

const (
	flightWaiting  int32 = iota
	flightLanded         // the requests hold their replies, for the waiter
	flightLeft           // the caller gave up: the flight reconciles on its own
	flightAnswered       // the failure policy answered the caller (silent node, WithTimeout): likewise
)

var flights = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &flight{done: make(chan struct{}, 1), timer: t}
}}

func (f *flight) recycle() {
	clear(f.reqs)
	f.reqs = f.reqs[:0]
	f.node, f.since, f.quiet = nil, false, nil
	clear(f.timeKeys)
	f.timeKeys = f.timeKeys[:0]
	f.state.Store(flightWaiting)
	flights.Put(f)
}

// retrying reports whether a request of f was answered TRYAGAIN.
func (f *flight) retrying() bool {
	for i := range f.reqs {
		if classOf(f.reqs[i].err) == classRetry {
			return true
		}
	}
	return false
}

// timeOf reads a TIME reply as µs; 0 when it failed.
func timeOf(r luart.Reply) int64 {
	t, err := r.Time()
	if err != nil {
		return 0
	}
	return t
}

// await waits for f's replies, the caller's context, the node's silence,
// or WithTimeout's bound; outcomeOK means the flight landed (collect its
// replies).
//
// A call that is not a decision (a release, a refund, Reset) has nothing
// for the failure policy to answer, so it does not give up when the node
// is found silent: it waits as long as the node answers anything, and
// gives up only when nothing at all came from the node for the whole
// silence timeout after it was sent. A release sent as a stalled node
// comes back thus frees its slot as soon as the node runs it.
func (e *engine) await(ctx context.Context, f *flight) (outcome, error) {
	var bound <-chan time.Time
	if e.cfg.timeout > 0 {
		f.timer.Reset(time.Until(f.start.Add(e.cfg.timeout)))
		bound = f.timer.C
		defer f.timer.Stop()
	}
	quiet := f.quiet
	var own *time.Timer
	var silent <-chan time.Time
	if !f.reqs[0].decides() {
		quiet = nil
		own = time.NewTimer(e.ownSilence(f))
		defer own.Stop()
		silent = own.C
	}
	var cause error
	for cause == nil {
		select {
		case <-f.done:
			return e.landed()
		case <-ctx.Done():
			if !f.state.CompareAndSwap(flightWaiting, flightLeft) {
				<-f.done
				return e.landed()
			}
			return outcomeCaller, callerErr(ctx)
		case <-quiet:
			cause = errSilent
		case <-silent:
			if d := e.ownSilence(f); d > 0 {
				own.Reset(d) // the node answered something meanwhile
				continue
			}
			cause = errSilent
		case <-bound:
			cause = errTimeout
		}
	}
	if !f.state.CompareAndSwap(flightWaiting, flightAnswered) {
		<-f.done
		return e.landed()
	}
	return outcomeUnavailable, cause
}

// ownSilence is how long until f's node has been silent for the whole
// silence timeout since f was sent: nothing from it since the later of f's
// start and its last reply.
func (e *engine) ownSilence(f *flight) time.Duration {
	from := max(f.start.UnixNano(), f.node.lastReply.Load())
	return time.Until(time.Unix(0, from).Add(e.cfg.silence))
}

// landed is the outcome of a flight whose waiter is still there.
func (e *engine) landed() (outcome, error) {
	if e.goroutines.closed() {
		return outcomeClosed, ErrClosed
	}
	return outcomeOK, nil
}

// watchNode is the watchdog's look at n, armed while calls wait on it
// (node.sending): when they have waited the whole silence timeout with no
// reply of any kind, and silentNode confirms it, the breaker opens and
// every waiting call is woken to be answered by the failure policy.
// Otherwise it looks again when the node could next turn silent.
func (e *engine) watchNode(n *node) {
	now := time.Now()
	if e.goroutines.closed() {
		n.watching.Store(false)
		return
	}
	at := n.silentAt(e.cfg.silence)
	if at.IsZero() {
		// Nothing waits: the watch is off until a call arms it. A call
		// that started since silentAt was read found it still on.
		n.watching.Store(false)
		if n.inflight.Load() > 0 && n.watching.CompareAndSwap(false, true) {
			n.look(now, n.silentAt(e.cfg.silence))
		}
		return
	}
	if now.Before(at) {
		n.look(now, at)
		return
	}
	silent, recheck := e.silentNode(n, now, now.Sub(time.Unix(0, n.due.Load())))
	if silent {
		e.silenced(n) // the breaker first: see launch
		n.hush()
		recheck = now.Add(e.cfg.silence / 4)
	}
	n.look(now, recheck)
}

// silentNode reports whether n is silent at now, confirmed: calls have
// waited on it the whole silence timeout with no reply of any kind, and
// the Limiter's own PING, sent when that was first seen, has had a quarter
// of the timeout more without a reply either. Until then it returns when
// to look again. The second look, and late, guard against this process
// being starved of CPU, which from inside looks like a silent node:
// replies that arrived but wait for a core to be read are read by the
// second look, and a look taken late (late after it was due: the
// watchdog, like the goroutines reading replies, waited for a core)
// confirms nothing, but starts the confirmation again; so does a look on
// time that finds goroutines of this process waited for a core meanwhile.
func (e *engine) silentNode(n *node, now time.Time, late time.Duration) (bool, time.Time) {
	if !n.silent(now, e.cfg.silence) {
		return false, n.silentAt(e.cfg.silence)
	}
	confirm := e.cfg.silence / 4
	slack := max(confirm/5, 50*time.Millisecond)
	sus := n.suspect.Load()
	if sus == 0 || sus < n.lastReply.Load() || late > slack {
		n.suspect.CompareAndSwap(sus, now.UnixNano())
		s := e.sched(slack)
		n.sched.Store(&s)
		e.probe(n)
		return false, now.Add(confirm)
	}
	if at := time.Unix(0, sus).Add(confirm); now.Before(at) {
		return false, at
	}
	// A look on time is not enough: a timer wakes the watchdog at once,
	// while the goroutines reading replies, woken by the network, wait
	// their turn behind every runnable goroutine. If goroutines of this
	// process waited long for a core since the suspicion, or a crowd
	// waits now, replies may be waiting to be read: start again, until
	// calls have waited starvedSilences silence timeouts.
	if s, s0 := e.sched(slack), n.sched.Load(); s0 != nil && s.starved(*s0) && now.Before(n.silentAt(starvedSilences*e.cfg.silence)) {
		n.suspect.Store(now.UnixNano())
		n.sched.Store(&s)
		e.probe(n)
		return false, now.Add(confirm)
	}
	return true, time.Time{}
}

// starvedSilences is how many silence timeouts calls may wait on a node
// while this process is starved of CPU before the node is taken for
// silent all the same.
const starvedSilences = 4

// silenced opens n's breaker: calls have waited on it for the whole
// silence timeout and it answered none.
func (e *engine) silenced(n *node) {
	n.breaker.trip()
	e.router.failed()
}

// reconcile puts right in Redis what a request did for a waiter who had
// already gone (cancelled, or answered by the failure policy): a lease it
// took (or may have taken, when no reply came) is given back, and so is a
// release that did not get through for a caller who gave up (one answered
// by the failure policy retries it itself); a rate charge stays (the quota
// it spent is counted, never over-admitted) and is recorded.
func (e *engine) reconcile(req *request, cl class, callerLeft bool) {
	unknown := cl == classDown || cl == classGaveUp
	switch req.kind {
	case callAcquire:
		if cl == classOK && req.d.allowed || unknown {
			e.giveBack(req.key, req.holder, req.lim)
		}
	case callRelease:
		if unknown && callerLeft {
			e.giveBack(req.key, req.holder, req.lim)
		}
	case callRate:
		if cl == classOK && req.d.allowed && !req.uncharged && req.cost > 0 && !req.peek {
			e.metrics.lateCharge(req.lim)
		}
	case callReserve:
		if cl == classOK && req.d.allowed {
			e.cancelLeft(req)
		}
	}
}

// probe starts the Limiter's own liveness probe of n (a PING) unless one
// is out; its reply closes the breaker, its failure opens it again.
func (e *engine) probe(n *node) {
	if !n.probing.CompareAndSwap(false, true) {
		return
	}
	if !e.goroutines.start(func() {
		// No caller waits for the probe, so it may take its time: a
		// process starved of CPU can need seconds to dial and greet a
		// restarted node, and a probe cut short would only be sent again.
		ctx, cancel := context.WithTimeout(e.goroutines.ctx, max(2*e.cfg.silence, 5*time.Second))
		err := n.probe(ctx)
		cancel()
		// The probe is over before its answer is told: the breaker may go
		// half-open again as soon as it hears (a failure opens it, and its
		// cooldown can pass before this goroutine runs again on a loaded
		// machine), and the probe that half-open state starts must find
		// none out, or the breaker would wait half-open for a probe that
		// never comes.
		n.probing.Store(false)
		if err != nil {
			n.breaker.unanswered()
			e.router.failed()
			return
		}
		n.replied(time.Now())
	}) {
		n.probing.Store(false)
	}
}

// ping is the probe of a node: a PING to its address (a cluster
// primary), or to the client's node.
func (e *engine) ping(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		a := addr
		if !e.router.cluster {
			a = ""
		}
		err := e.client.Ping(ctx, a)
		if _, ok := luart.ServerError(err); ok {
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
	if msg, ok := luart.ServerError(err); ok {
		switch {
		case strings.Contains(msg, "sluice: "):
			return classRefused
		case strings.HasPrefix(msg, "WRONGTYPE"):
			return classWrongType
		case strings.HasPrefix(msg, "TRYAGAIN"):
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
