package sluice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
)

// Check is one limit of a batch decision: Limit counted for Identity, at
// Cost.
type Check struct {
	// Identity is who is counted: a user, an API key, a client address.
	// Each (Identity, Limit.Name) pair has the one state Allow, Peek,
	// Reset and Key use.
	Identity string
	// Limit is the quota: a rate limit of any algorithm, or a Concurrency
	// limit, of which an admitted batch holds a slot (Decision.Leases).
	Limit Limit
	// Cost is the units the request spends (0 only reports: always
	// allowed, nothing charged). Concurrency checks take one slot
	// whatever the cost.
	Cost int64
	// Shadow checks are decided, charged and reported like the others,
	// but their denial does not deny the batch.
	Shadow bool

	peek bool // Peek: decide a cost of 1 and write nothing
}

// MaxChecks is the most checks one Decide takes.
const MaxChecks = 64

// Decision is the answer of a batch decision.
type Decision struct {
	// Allowed reports that every enforced (not Shadow) check admitted:
	// the request may proceed, and every check that admitted is charged.
	// When it is false nothing is charged: charges already made in Redis
	// are given back before Decide returns (see Limiter.Decide for the
	// bound).
	Allowed bool
	// Results holds one Result per check, in the order of the checks. A
	// check that admitted in a denied batch reports Allowed and the
	// Remaining it has with its charge given back.
	Results []Result
	// Leases holds, for each concurrency check that took a slot in an
	// admitted batch, its Lease (release it with Release when the work is
	// done); the zero Lease for every other check.
	Leases []Lease

	asked, enforced uint64 // the checks decided, and those not Shadow
}

// Asked reports whether check i was decided. A batch that an enforced
// check's cached denial denies at once (WithDenialCache) asks nothing of
// the checks the cache cannot answer: their Results hold only the Limit.
func (d *Decision) Asked(i int) bool { return i >= 0 && i < MaxChecks && d.asked&(1<<i) != 0 }

// Binding is the decision as one Result, as AllowAll reports it: the
// Limit, Allowed and RetryAfter of the check that decided (when denied,
// the enforced check that denied with the longest wait, RetryNever before
// any; when admitted, the check with the least Remaining; the first of
// equals), Remaining the least and ResetAfter the longest over the checks
// asked, and Degraded when any of them was. Shadow checks are left out
// unless every check is one.
func (d *Decision) Binding() Result {
	var res Result
	bind, first := -1, true
	shadowOnly := true
	for i := range d.Results {
		if d.Asked(i) && d.enforced&(1<<i) != 0 {
			shadowOnly = false
		}
	}
	for i, r := range d.Results {
		if !d.Asked(i) || !shadowOnly && d.enforced&(1<<i) == 0 {
			continue
		}
		if first {
			res, bind, first = Result{Remaining: r.Remaining, ResetAfter: r.ResetAfter}, i, false
		}
		res.Remaining = min(res.Remaining, r.Remaining)
		res.ResetAfter = max(res.ResetAfter, r.ResetAfter)
		res.Degraded = res.Degraded || r.Degraded
		if binds(r, d.Results[bind], d.Allowed) {
			bind = i
		}
	}
	if bind < 0 {
		return Result{Allowed: d.Allowed}
	}
	b := d.Results[bind]
	res.Allowed, res.Limit, res.RetryAfter = d.Allowed, b.Limit, b.RetryAfter
	if d.Allowed {
		res.RetryAfter = 0
	}
	return res
}

// binds reports whether r decides a decision (allowed or not) rather than
// cur, which comes before it.
func binds(r, cur Result, allowed bool) bool {
	switch {
	case allowed:
		return r.Remaining < cur.Remaining
	case r.Allowed:
		return false
	case cur.Allowed:
		return true
	case cur.RetryAfter == RetryNever:
		return false
	case r.RetryAfter == RetryNever:
		return true
	}
	return r.RetryAfter > cur.RetryAfter
}

// Decide decides every check in one round trip to each Redis node
// involved, and admits the request only if every enforced check admits
// it.
//
// The checks of every identity are sent together, one pipelined write per
// node, in parallel across the nodes of a cluster. Each check is charged
// as it is decided; when an enforced check denies, the charges the others
// made are given back in a second round trip, with each algorithm's exact
// inverse (docs/limiter.md, "Batch decisions"): a denied batch leaves no
// charge. The bound: between a charge and its refund a concurrent request
// can see the charge and be denied, which it would not have been an
// instant later (never the other way round: Decide never admits more than
// the limits allow); a gcra or token_bucket check charged while its state
// was empty keeps at most 1µs plus the time its script waited behind the
// batch's TIME, and a sliding_log check keeps its charge when another
// request was logged on the same key in between.
//
// The denial cache (WithDenialCache) answers each check of cost 0 or 1 it
// holds a denial for; an enforced one denies the batch with no round trip.
// When a node cannot decide, the failure policy decides that node's checks
// (Result.Degraded). The error is non-nil only for invalid checks, a
// key of another type, the caller's own context ending, or a closed
// Limiter; then nothing is charged but what a departed caller's calls may
// still charge (as with Allow).
func (l *Limiter) Decide(ctx context.Context, checks ...Check) (Decision, error) {
	var d Decision
	err := l.DecideInto(ctx, &d, checks...)
	return d, err
}

// DecideInto is Decide writing into d, whose Results and Leases are reused
// when they are large enough: a caller deciding many requests can keep
// one Decision per goroutine and allocate nothing for them.
func (l *Limiter) DecideInto(ctx context.Context, d *Decision, checks ...Check) error {
	res, leases := d.Results, d.Leases
	*d = Decision{}
	if err := validChecks(checks); err != nil {
		return err
	}
	b := newBatch(l.e, checks, res, leases)
	err := b.decide(ctx)
	*d = b.dec
	b.free()
	return err
}

// validChecks checks the checks of a batch before anything is asked.
func validChecks(checks []Check) error {
	if n := len(checks); n == 0 || n > MaxChecks {
		return fmt.Errorf("%w: Decide takes 1 to %d checks, got %d", ErrInvalidLimit, MaxChecks, n)
	}
	for i := range checks {
		if err := checks[i].Limit.Validate(); err != nil {
			return fmt.Errorf("check %d: %w", i, err)
		}
		if err := checkCost(checks[i].Cost); err != nil {
			return fmt.Errorf("check %d: %w", i, err)
		}
	}
	return nil
}

// grow is s with length n, zeroed, reusing its array when it can.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// decideOne is the batch of one validated check, for Allow, AllowN, Peek
// and Acquire.
func (e *engine) decideOne(ctx context.Context, c Check) (Result, Lease, error) {
	b := newBatch(e, nil, nil, nil)
	b.checkBuf[0] = c
	b.checks = b.checkBuf[:1]
	b.dec.Results, b.dec.Leases = b.resBuf[:1], b.leaseBuf[:1]
	b.dec.enforced = 1
	err := b.decide(ctx)
	res, lease := b.resBuf[0], b.leaseBuf[0]
	b.free()
	return res, lease, err
}

// group is the requests of a batch that go to one node, in one flight.
type group struct {
	n      *node
	lo, hi int // its requests: reqs[lo:hi]
	f      *flight
	o      outcome
	err    error
}

// batch is one batch decision under way: its checks, the requests sent for
// them grouped by node, and what is known so far. decide runs its phases in
// order; each is a method below. Batches are pooled with room for small
// ones inline, so a decision allocates none of this.
type batch struct {
	l      *engine
	dec    Decision
	checks []Check
	keys   []string
	start  time.Time
	sent   time.Time // the denial cache's clock reading, before anything is sent
	reqs   []request // one per check the denial cache did not answer
	nodes  []*node   // each request's node
	groups []group
	// charged and local are the checks charged in Redis and those that
	// took a local slot; denied reports an enforced check that denied;
	// failed is the first error for the caller.
	charged, local uint64
	denied         bool
	failed         error
	// whole: only the batch's binding Result is wanted (AllowAll).
	whole bool

	checkBuf [8]Check
	resBuf   [8]Result
	leaseBuf [8]Lease
	keyBuf   [4]string
	reqBuf   [4]request
	nodeBuf  [4]*node
	groupBuf [2]group
}

var batches = sync.Pool{New: func() any { return new(batch) }}

// newBatch is a batch of l over checks (copied; nil: the caller sets
// them), its Decision's Results and Leases reusing res and leases.
func newBatch(l *engine, checks []Check, res []Result, leases []Lease) *batch {
	b := batches.Get().(*batch)
	b.l = l
	b.checks = b.checkBuf[:0]
	b.keys, b.reqs, b.nodes, b.groups = b.keyBuf[:0], b.reqBuf[:0], b.nodeBuf[:0], b.groupBuf[:0]
	if checks == nil {
		return b
	}
	b.checks = append(b.checkBuf[:0], checks...)
	n := len(checks)
	b.dec.Results, b.dec.Leases = grow(res, n), grow(leases, n)
	for i := range checks {
		if !checks[i].Shadow {
			b.dec.enforced |= 1 << i
		}
	}
	return b
}

// free returns b to the pool, holding nothing.
func (b *batch) free() {
	*b = batch{}
	batches.Put(b)
}

// decide is the batch decision of b's validated checks into b.dec
// (Results and Leases of len(checks), zeroed).
func (b *batch) decide(ctx context.Context) error {
	l := b.l
	b.start = time.Now()
	for i := range b.checks {
		b.keys = append(b.keys, l.key(b.checks[i].Identity, b.checks[i].Limit))
	}
	if b.fromCache(ctx) {
		return nil
	}
	b.request()
	b.groups = byNode(b.reqs, b.nodes, b.groups)
	if b.whole && !(len(b.groups) == 1 && foldsToOne(b.reqs, l.anySlot)) {
		// Several calls: a refund may need every limit's numbers.
		for i := range b.reqs {
			b.reqs[i].whole = false
		}
	}
	b.fly(ctx)
	if err := b.abandoned(); err != nil {
		return err
	}
	b.answers()
	if b.failed == nil {
		b.degraded(ctx)
	}
	b.dec.Allowed = !b.denied && b.failed == nil
	if !b.dec.Allowed {
		l.refund(ctx, b)
	}
	l.record(ctx, &b.dec, b.dec.asked, b.start)
	return b.failed
}

// fromCache answers from the denial cache every check it holds a denial
// for; true when that decides the batch: an enforced check denied, or
// every check was answered.
func (b *batch) fromCache(ctx context.Context) bool {
	l, d := b.l, &b.dec
	if l.denials == nil {
		return false
	}
	b.sent = l.now()
	for i := range b.checks {
		c := &b.checks[i]
		if c.Limit.Algorithm == AlgConcurrency || c.Cost > 1 {
			continue
		}
		r, ok := l.denials.get(b.keys[i], b.sent)
		if !ok || r.Limit != c.Limit {
			// None, or a denial under other numbers of the same name (a
			// reloaded policy, an override): only Redis knows what the
			// state means under these.
			continue
		}
		if c.Cost == 0 && !c.peek {
			// A report: always allowed, and nothing is left, since a
			// cost of 1 cannot be admitted yet.
			r.Allowed, r.RetryAfter = true, 0
		}
		d.Results[i], d.asked = r, d.asked|1<<i
		l.metrics.cacheHit(ctx, c.Limit)
		b.denied = b.denied || !r.Allowed && !c.Shadow
	}
	if b.denied || d.asked == 1<<len(b.checks)-1 {
		d.Allowed = !b.denied
		l.record(ctx, d, d.asked, time.Now())
		return true
	}
	return false
}

// request makes one request per check the cache did not answer, and
// notes its node.
func (b *batch) request() {
	l, d := b.l, &b.dec
	now := l.nowArg()
	for i := range b.checks {
		if d.asked&(1<<i) != 0 {
			continue
		}
		c := &b.checks[i]
		req := request{kind: callRate, lim: c.Limit, key: b.keys[i], cost: c.Cost, peek: c.peek, shadow: c.Shadow, check: i, whole: b.whole}
		if c.Limit.Algorithm == AlgConcurrency {
			d.Leases[i] = newLease(b.keys[i], c.Limit)
			req.kind, req.holder, req.cost, req.peek = callAcquire, d.Leases[i].ID, 1, false
			req.call, req.decode = acquireCall(b.keys[i], req.holder, c.Limit, now), algConcurrency.decode
		}
		b.reqs = append(b.reqs, req)
		b.nodes = append(b.nodes, l.router.nodeFor(b.keys[i]))
	}
}

// fly sends the requests, one flight per node, and waits for them. A
// refund may be needed, so each node is asked its TIME first; not when
// the checks all go to one node in one multi-limit call, which is atomic.
func (b *batch) fly(ctx context.Context) {
	now := b.l.nowArg()
	since := len(b.reqs) > 1 && now == nil && !(len(b.groups) == 1 && foldsToOne(b.reqs, b.l.anySlot))
	b.l.flyGroups(ctx, b.start, b.reqs, b.groups, now, since)
	if now != nil {
		for i := range b.reqs {
			b.reqs[i].since = *now // the client clock the scripts used is the refunds' bound
		}
	}
}

// abandoned is the caller's error when it left or the Limiter closed
// while the flights were out; what landed is reconciled as a flight does
// for a caller who left.
func (b *batch) abandoned() error {
	for gi := range b.groups {
		o := b.groups[gi].o
		if o != outcomeCaller && o != outcomeClosed {
			continue
		}
		for ri := range b.groups {
			if g := &b.groups[ri]; g.o == outcomeOK {
				for i := g.lo; i < g.hi; i++ {
					b.l.reconcile(&b.reqs[i], classOf(b.reqs[i].err), true)
				}
			}
		}
		if o == outcomeClosed {
			return ErrClosed
		}
		return b.groups[gi].err
	}
	return nil
}

// answers takes Redis's answers: each check's Result, what was charged,
// and whether an enforced check denied.
func (b *batch) answers() {
	l, d := b.l, &b.dec
	for gi := range b.groups {
		g := &b.groups[gi]
		if g.o != outcomeOK {
			continue
		}
		for i := g.lo; i < g.hi; i++ {
			req := &b.reqs[i]
			if req.unasked {
				continue // decided by its folded call, reported by the binding check
			}
			switch o, err := outcomeOf(req.err); o {
			case outcomeOK:
			case outcomeRefused, outcomeWrongType:
				b.failed = cmpErr(b.failed, outcomeError(o, req, err))
				continue
			default:
				continue // the failure policy decides it (degraded)
			}
			r := req.d.result(req.lim)
			d.Results[req.check], d.asked = r, d.asked|1<<req.check
			if r.Allowed && !req.uncharged && (req.kind == callAcquire || req.cost > 0 && !req.peek) {
				b.charged |= 1 << req.check
			}
			if r.Allowed {
				continue
			}
			b.denied = b.denied || !b.checks[req.check].Shadow
			if req.kind == callAcquire {
				d.Leases[req.check] = Lease{}
			} else if req.cost == 1 && !req.whole {
				// (A whole decision's numbers are not this limit's own.)
				l.denials.put(req.key, r, b.sent, l.now())
			}
		}
	}
}

// degraded has the failure policy decide what Redis could not. Its rate
// checks are first only asked (a peek); when nothing denies, the
// concurrency slots are taken and then the rate checks charged, so a batch
// denied by the failure policy charges nothing locally but in a race with
// another caller on the same local state.
func (b *batch) degraded(ctx context.Context) {
	var dbuf [4]int
	var bbuf [4]*breaker
	idx, breakers := b.unanswered(ctx, dbuf[:0], bbuf[:0])
	if len(idx) == 0 {
		return
	}
	at := b.l.now()
	first := 0
	if len(idx) == 1 {
		first = 1 // one check: its own decision is all there is to ask
	}
	for pass := first; pass < 3; pass++ {
		// 0: peek every check; 1: take the slots; 2: charge the rates.
		for k, i := range idx {
			req := &b.reqs[i]
			if pass == 1 && req.kind != callAcquire || pass == 2 && req.kind == callAcquire {
				continue
			}
			r := b.byPolicy(req, breakers[k], at, pass == 0 || b.denied)
			if req.kind == callAcquire && !r.Allowed {
				b.dec.Leases[req.check] = Lease{}
			}
			b.dec.Results[req.check], b.dec.asked = r, b.dec.asked|1<<req.check
			b.denied = b.denied || !r.Allowed && !b.checks[req.check].Shadow
		}
		if b.denied {
			return
		}
	}
}

// unanswered lists the requests Redis did not decide and the breakers of
// their nodes, recording each failure's cause.
func (b *batch) unanswered(ctx context.Context, idx []int, breakers []*breaker) ([]int, []*breaker) {
	for gi := range b.groups {
		g := &b.groups[gi]
		for i := g.lo; i < g.hi; i++ {
			cause := g.err
			if g.o == outcomeOK {
				if o, _ := outcomeOf(b.reqs[i].err); o != outcomeUnavailable {
					continue
				}
				cause = b.reqs[i].err
			}
			b.reqs[i].err = cause
			idx, breakers = append(idx, i), append(breakers, g.n.breaker)
			b.l.metrics.failure(ctx, b.reqs[i].lim, cause)
		}
	}
	return idx, breakers
}

// byPolicy is the failure policy's answer to req; with peek it takes
// nothing.
func (b *batch) byPolicy(req *request, br *breaker, at time.Time, peek bool) Result {
	p := b.l.policy
	if req.kind != callAcquire {
		return p.decide([]string{req.key}, []Limit{req.lim}, req.cost, req.peek || peek, at, br)
	}
	if peek {
		return Result{Allowed: true, Limit: req.lim, Degraded: true}
	}
	r := p.acquire(req.key, req.holder, req.lim, at, br)
	if r.Allowed {
		b.dec.Leases[req.check].local = true
		b.local |= 1 << req.check
	}
	return r
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// byNode orders reqs (and nodes alike) so that the requests of each node
// are together, and returns the groups.
func byNode(reqs []request, nodes []*node, groups []group) []group {
	for lo := 0; lo < len(reqs); {
		n := nodes[lo]
		hi := lo + 1
		for i := hi; i < len(reqs); i++ {
			if nodes[i] == n {
				reqs[hi], reqs[i] = reqs[i], reqs[hi]
				nodes[hi], nodes[i] = nodes[i], nodes[hi]
				hi++
			}
		}
		groups = append(groups, group{n: n, lo: lo, hi: hi})
		lo = hi
	}
	return groups
}

// flyGroups sends each group's requests in a flight of its own, all of them
// before waiting for any (the nodes answer in parallel), and then waits for
// each; a group that landed has its replies in reqs (and, when asked,
// each request's TIME in since).
func (e *engine) flyGroups(ctx context.Context, start time.Time, reqs []request, groups []group, now *int64, since bool) {
	for gi := range groups {
		g := &groups[gi]
		g.f, g.o, g.err = e.launch(ctx, g.n, start, reqs[g.lo:g.hi], now, since)
	}
	for gi := range groups {
		g := &groups[gi]
		if g.o != outcomeOK {
			continue
		}
		if g.o, g.err = e.await(ctx, g.f); g.o == outcomeOK || g.o == outcomeClosed {
			e.collect(g.f, reqs[g.lo:g.hi])
		}
	}
}

// record counts the decisions of the checks in asked.
func (e *engine) record(ctx context.Context, d *Decision, asked uint64, start time.Time) {
	if e.metrics == nil {
		return
	}
	for i := range d.Results {
		if asked&(1<<i) != 0 {
			e.metrics.decision(ctx, d.Results[i], start)
		}
	}
}

// refund gives back the charges of a denied batch: in Redis one refund
// script per identity and one release per slot taken, all in one round
// trip per node; local slots are released at once.
func (e *engine) refund(ctx context.Context, b *batch) {
	d := &b.dec
	for i := range d.Leases {
		if b.local&(1<<i) != 0 {
			e.policy.release(d.Leases[i].key, d.Leases[i].ID)
		}
		d.Leases[i] = Lease{}
	}
	if b.charged == 0 {
		return
	}
	var obuf [4]request
	var nbuf [4]*node
	out, nodes := b.refunds(obuf[:0], nbuf[:0])
	now := e.nowArg()
	for i := range out {
		if out[i].kind == callRefund {
			out[i].call, out[i].decode = refundCall(&out[i], now)
		}
	}
	var gbuf [2]group
	gs := byNode(out, nodes, gbuf[:0])
	e.flyGroups(ctx, time.Now(), out, gs, now, false)
	for gi := range gs {
		e.refunded(ctx, &gs[gi], out)
	}
}

// refunds lists the requests that give back b's charges, and their nodes:
// a release per slot taken, one refund per identity for its rate charges;
// each check's Result is set to what it has with its charge given back.
func (b *batch) refunds(out []request, nodes []*node) ([]request, []*node) {
	for gi := range b.groups {
		g := &b.groups[gi]
		for i := g.lo; i < g.hi; i++ {
			req := &b.reqs[i]
			if b.charged&(1<<req.check) == 0 {
				continue
			}
			r := &b.dec.Results[req.check]
			if req.kind == callAcquire {
				out = append(out, releaseRequest(req.key, req.holder, req.lim, b.l.nowArg()))
				nodes = append(nodes, g.n)
				r.Remaining = min(r.Remaining+1, req.lim.Rate)
				if r.Remaining == req.lim.Rate {
					r.ResetAfter = 0
				}
				continue
			}
			r.Remaining = min(r.Remaining+req.cost, capacity(req.lim))
			r.ResetAfter = resetAfterRefund(r.ResetAfter, req.lim, req.cost, r.Remaining)
			b.l.denials.forget(req.key) // a denial cached for this key may no longer hold
			// One refund per identity: the charges of later requests
			// on the same identity join the first's.
			j := 0
			for j < len(out) && (out[j].kind != callRefund || b.checks[out[j].check].Identity != b.checks[req.check].Identity) {
				j++
			}
			if j == len(out) {
				out = append(out, request{kind: callRefund, lim: req.lim, key: req.key, check: req.check, since: req.since})
				nodes = append(nodes, g.n)
			}
			o := &out[j]
			o.keys = append(o.keys, req.key)
			o.multi = append(o.multi, req.lim)
			o.charges = append(o.charges, req.cost, req.d.resetAfter)
		}
	}
	return out, nodes
}

// refunded records how the refunds of g fared; a release that did not get
// through is retried in the background.
func (e *engine) refunded(ctx context.Context, g *group, out []request) {
	for i := g.lo; i < g.hi; i++ {
		err := out[i].err
		if g.o != outcomeOK {
			if g.o == outcomeCaller {
				continue // the flight goes on without the caller
			}
			err = g.err
		}
		if err == nil {
			continue
		}
		e.metrics.failure(ctx, out[i].lim, err)
		if out[i].kind == callRelease && (g.o == outcomeOK || g.o == outcomeUnavailable) {
			e.giveBack(out[i].key, out[i].holder, out[i].lim)
		}
	}
}

// resetAfterRefund is the ResetAfter of a check whose charge of cost was
// given back, from the one it replied: 0 when the quota is whole again
// (Remaining is the capacity exactly when the state is empty, for every
// algorithm), the charge's emission less for gcra and token_bucket, and
// otherwise the charge's (an upper bound: never earlier than the truth).
func resetAfterRefund(reset time.Duration, lim Limit, cost, remaining int64) time.Duration {
	switch {
	case remaining >= capacity(lim):
		return 0
	case lim.Algorithm == AlgGCRA || lim.Algorithm == AlgTokenBucket:
		// The emission of cost, rounded down to whole µs; in lowest terms
		// cost × period stays below 2^52 (Validate), where the raw
		// product could overflow.
		g := gcd(lim.Rate, lim.periodMicros())
		emission := time.Duration(cost*(lim.periodMicros()/g)/(lim.Rate/g)) * time.Microsecond
		return max(reset-emission, 0)
	}
	return reset
}

// refundCall builds the refund script call of req: its keys, and per key
// the limit and the charge (charges: cost and reset_after per key).
func refundCall(req *request, now *int64) (luart.Call, decoder) {
	args := make([]int64, 0, 6*len(req.keys))
	for i, lim := range req.multi {
		args = append(args, algorithmOf(lim).refund, lim.Rate, lim.periodMicros(), lim.Burst, req.charges[2*i], req.charges[2*i+1])
	}
	call := scripts.Refund.Call(scripts.RefundKeys{States: req.keys}, scripts.RefundArgs{Since: req.since, Now: now, Charges: args})
	return call, decodeRefund
}

func decodeRefund(r luart.Reply) (decision, error) {
	m, err := scripts.Refund.DecodeReply(r)
	return decision{remaining: m.Changed}, err
}

// newLease is a lease of lim on key with a fresh random holder ID.
func newLease(key string, lim Limit) Lease {
	var idb [16]byte
	_, _ = rand.Read(idb[:])
	return Lease{ID: hex.EncodeToString(idb[:]), key: key, limit: lim}
}
