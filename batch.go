package sluice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
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

	asked uint64
}

// Asked reports whether check i was decided. A batch that an enforced
// check's cached denial denies at once (WithDenialCache) asks nothing of
// the checks the cache cannot answer: their Results hold only the Limit.
func (d *Decision) Asked(i int) bool { return i >= 0 && i < MaxChecks && d.asked&(1<<i) != 0 }

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
	n := len(checks)
	res, leases := d.Results, d.Leases
	*d = Decision{}
	if n == 0 || n > MaxChecks {
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
	d.Results = grow(res, n)
	d.Leases = grow(leases, n)
	return l.decide(ctx, d, checks)
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
func (l *Limiter) decideOne(ctx context.Context, c Check) (Result, Lease, error) {
	var res [1]Result
	var leases [1]Lease
	checks := [1]Check{c}
	d := Decision{Results: res[:], Leases: leases[:]}
	err := l.decide(ctx, &d, checks[:])
	return res[0], leases[0], err
}

// group is the requests of a batch that go to one node, in one flight.
type group struct {
	n      *node
	lo, hi int // its requests: reqs[lo:hi]
	f      *flight
	o      outcome
	err    error
	t0     int64 // the flight's TIME (µs), the bound its refunds start from
}

// decide is the batch decision of validated checks into d (Results and
// Leases of len(checks), zeroed).
func (l *Limiter) decide(ctx context.Context, d *Decision, checks []Check) error {
	start := time.Now()
	var kbuf [4]string
	keys := kbuf[:0]
	for i := range checks {
		keys = append(keys, l.Key(checks[i].Identity, checks[i].Limit))
	}

	// The denial cache: an enforced check it denies denies the batch
	// before anything is sent.
	var sent time.Time
	if l.denials != nil {
		sent = l.now()
		denied := false
		for i := range checks {
			c := &checks[i]
			if c.Limit.Algorithm == AlgConcurrency || c.Cost > 1 {
				continue
			}
			r, ok := l.denials.get(keys[i], sent)
			if !ok {
				continue
			}
			r.Limit = c.Limit
			if c.Cost == 0 && !c.peek {
				// A report: always allowed, and nothing is left, since a
				// cost of 1 cannot be admitted yet.
				r.Allowed, r.RetryAfter = true, 0
			}
			d.Results[i], d.asked = r, d.asked|1<<i
			l.metrics.cacheHit(ctx, c.Limit)
			denied = denied || !r.Allowed && !c.Shadow
		}
		if denied || d.asked == 1<<len(checks)-1 {
			d.Allowed = !denied
			l.record(ctx, d, d.asked, time.Now())
			return nil
		}
	}

	// One request per check the cache did not answer, grouped by node.
	now := l.nowArg()
	var rbuf [4]request
	reqs := rbuf[:0]
	var nbuf [4]*node
	nodes := nbuf[:0]
	for i := range checks {
		if d.asked&(1<<i) != 0 {
			continue
		}
		c := &checks[i]
		req := request{kind: callRate, lim: c.Limit, key: keys[i], cost: c.Cost, peek: c.peek, shadow: c.Shadow, check: i}
		if c.Limit.Algorithm == AlgConcurrency {
			d.Leases[i] = newLease(keys[i], c.Limit)
			req.kind, req.holder, req.cost, req.peek = callAcquire, d.Leases[i].ID, 1, false
			req.call, req.decode = acquireCall(keys[i], req.holder, c.Limit, now), algConcurrency.decode
		}
		reqs = append(reqs, req)
		nodes = append(nodes, l.router.nodeFor(keys[i]))
	}
	var gbuf [2]group
	groups := byNode(reqs, nodes, gbuf[:0])
	// A refund may be needed: ask each node its TIME first. Not when the
	// checks all go to one node in one multi-limit call, which is atomic.
	since := len(reqs) > 1 && now == nil && !(len(groups) == 1 && foldsToOne(reqs))
	l.flyGroups(ctx, start, reqs, groups, now, since)
	if now != nil {
		for gi := range groups {
			groups[gi].t0 = *now // the client clock the scripts used is the refunds' bound
		}
	}

	// The caller left, or the Limiter closed: what landed is reconciled
	// as a flight does for a caller who left.
	for gi := range groups {
		if g := &groups[gi]; g.o == outcomeCaller || g.o == outcomeClosed {
			for ri := range groups {
				if o := groups[ri].o; o == outcomeOK {
					for i := groups[ri].lo; i < groups[ri].hi; i++ {
						l.reconcile(&reqs[i], classOf(reqs[i].err), true)
					}
				}
			}
			if g.o == outcomeClosed {
				return ErrClosed
			}
			return g.err
		}
	}

	// Redis's answers.
	var charged, local uint64
	var failed error
	denied := false
	for gi := range groups {
		g := &groups[gi]
		if g.o != outcomeOK {
			continue
		}
		for i := g.lo; i < g.hi; i++ {
			req := &reqs[i]
			o, err := outcomeOf(req.err)
			switch o {
			case outcomeOK:
			case outcomeRefused, outcomeWrongType:
				failed = cmpErr(failed, outcomeError(o, req, err))
				continue
			default:
				continue // the failure policy decides it, below
			}
			c := &checks[req.check]
			r := req.d.result(req.lim)
			d.Results[req.check], d.asked = r, d.asked|1<<req.check
			if r.Allowed && !req.uncharged && (req.kind == callAcquire || req.cost > 0 && !req.peek) {
				charged |= 1 << req.check
			}
			if !r.Allowed {
				denied = denied || !c.Shadow
				if req.kind == callAcquire {
					d.Leases[req.check] = Lease{}
				} else if req.cost == 1 {
					l.denials.put(req.key, r, sent, l.now())
				}
			}
		}
	}

	// The failure policy decides what Redis could not. Its rate checks are
	// first only asked (a peek); when nothing denies, the concurrency slots
	// are taken and then the rate checks charged, so a batch denied by the
	// failure policy charges nothing locally but in a race with another
	// caller on the same local state.
	if failed == nil {
		at := l.now()
		var dbuf [4]int
		var bbuf [4]*breaker
		degraded, breakers := dbuf[:0], bbuf[:0] // the requests, and the breakers of their nodes
		for gi := range groups {
			g := &groups[gi]
			for i := g.lo; i < g.hi; i++ {
				cause := g.err
				if g.o == outcomeOK {
					if o, _ := outcomeOf(reqs[i].err); o != outcomeUnavailable {
						continue
					}
					cause = reqs[i].err
				}
				reqs[i].err = cause
				degraded, breakers = append(degraded, i), append(breakers, g.n.breaker)
				l.metrics.failure(ctx, reqs[i].lim, cause)
			}
		}
		decideLocal := func(req *request, b *breaker, peek bool) Result {
			if req.kind == callAcquire {
				if peek {
					return Result{Allowed: true, Limit: req.lim, Degraded: true}
				}
				r := l.policy.acquire(req.key, req.holder, req.lim, at, b)
				if r.Allowed {
					d.Leases[req.check].local = true
					local |= 1 << req.check
				}
				return r
			}
			return l.policy.decide([]string{req.key}, []Limit{req.lim}, req.cost, req.peek || peek, at, b)
		}
		first := 0
		if len(degraded) == 1 {
			first = 1 // one check: its own decision is all there is to ask
		}
		for pass := first; pass < 3 && len(degraded) > 0; pass++ {
			// 0: peek every check; 1: take the slots; 2: charge the rates.
			for k, i := range degraded {
				req := &reqs[i]
				if pass == 1 && req.kind != callAcquire || pass == 2 && req.kind == callAcquire {
					continue
				}
				r := decideLocal(req, breakers[k], pass == 0 || denied)
				if req.kind == callAcquire && !r.Allowed {
					d.Leases[req.check] = Lease{}
				}
				d.Results[req.check], d.asked = r, d.asked|1<<req.check
				denied = denied || !r.Allowed && !checks[req.check].Shadow
			}
			if denied {
				break
			}
		}
	}

	d.Allowed = !denied && failed == nil
	if !d.Allowed {
		l.refund(ctx, d, checks, reqs, groups, charged, local)
	}
	l.record(ctx, d, d.asked, start)
	return failed
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
// each; a group that landed has its replies in reqs and its TIME in t0.
func (l *Limiter) flyGroups(ctx context.Context, start time.Time, reqs []request, groups []group, now *int64, since bool) {
	for gi := range groups {
		g := &groups[gi]
		g.f, g.o, g.err = l.launch(ctx, g.n, start, reqs[g.lo:g.hi], now, since)
	}
	for gi := range groups {
		g := &groups[gi]
		if g.o != outcomeOK {
			continue
		}
		if g.o, g.err = l.await(ctx, g.f); g.o == outcomeOK || g.o == outcomeClosed {
			g.t0 = g.f.t0
			l.collect(g.f, reqs[g.lo:g.hi])
		}
	}
}

// record counts the decisions of the checks in asked.
func (l *Limiter) record(ctx context.Context, d *Decision, asked uint64, start time.Time) {
	if l.metrics == nil {
		return
	}
	for i := range d.Results {
		if asked&(1<<i) != 0 {
			l.metrics.decision(ctx, d.Results[i], start)
		}
	}
}

// refund gives back the charges of a denied batch: in Redis one refund
// script per identity and one release per slot taken, all in one round
// trip per node; local slots are released at once.
func (l *Limiter) refund(ctx context.Context, d *Decision, checks []Check, reqs []request, groups []group, charged, local uint64) {
	for i := range d.Leases {
		if local&(1<<i) != 0 {
			l.policy.release(d.Leases[i].key, d.Leases[i].ID)
		}
		d.Leases[i] = Lease{}
	}
	if charged == 0 {
		return
	}
	var obuf [4]request
	out := obuf[:0]
	var nbuf [4]*node
	nodes := nbuf[:0]
	for gi := range groups {
		g := &groups[gi]
		for i := g.lo; i < g.hi; i++ {
			req := &reqs[i]
			if charged&(1<<req.check) == 0 {
				continue
			}
			r := &d.Results[req.check]
			if req.kind == callAcquire {
				out = append(out, releaseRequest(req.key, req.holder, req.lim, l.nowArg()))
				nodes = append(nodes, g.n)
				r.Remaining = min(r.Remaining+1, req.lim.Rate)
				if r.Remaining == req.lim.Rate {
					r.ResetAfter = 0
				}
				continue
			}
			r.Remaining = min(r.Remaining+req.cost, capacity(req.lim))
			r.ResetAfter = resetAfterRefund(r.ResetAfter, req.lim, req.cost, r.Remaining)
			l.denials.forget(req.key) // a denial cached for this key may no longer hold
			// One refund per identity: the charges of later requests
			// on the same identity join the first's.
			j := 0
			for j < len(out) && (out[j].kind != callRefund || checks[out[j].check].Identity != checks[req.check].Identity) {
				j++
			}
			if j == len(out) {
				out = append(out, request{kind: callRefund, lim: req.lim, key: req.key, check: req.check, since: g.t0})
				nodes = append(nodes, g.n)
			}
			o := &out[j]
			o.keys = append(o.keys, req.key)
			o.multi = append(o.multi, req.lim)
			o.charges = append(o.charges, req.cost, req.d.resetAfter)
		}
	}
	now := l.nowArg()
	for i := range out {
		if out[i].kind == callRefund {
			out[i].call, out[i].decode = refundCall(&out[i], now)
		}
	}
	var gbuf [2]group
	start := time.Now()
	gs := byNode(out, nodes, gbuf[:0])
	l.flyGroups(ctx, start, out, gs, now, false)
	for gi := range gs {
		g := &gs[gi]
		if g.o != outcomeOK {
			for i := g.lo; i < g.hi; i++ {
				if g.o == outcomeCaller {
					continue // the flight goes on without the caller
				}
				l.metrics.failure(ctx, out[i].lim, g.err)
				if out[i].kind == callRelease && g.o == outcomeUnavailable {
					l.giveBack(out[i].key, out[i].holder, out[i].lim)
				}
			}
			continue
		}
		for i := g.lo; i < g.hi; i++ {
			if err := out[i].err; err != nil {
				if out[i].kind == callRelease {
					l.giveBack(out[i].key, out[i].holder, out[i].lim)
				}
				l.metrics.failure(ctx, out[i].lim, err)
			}
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
