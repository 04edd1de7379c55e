package sluice

import (
	"context"
	"runtime"
	"time"

	"github.com/sluice-go/sluice/internal/keyslot"
	"github.com/sluice-go/sluice/runtime/luart"
)

// The hand-off between callers and Redis. A caller's flight (its requests
// for one node) joins the node's queue; the node's senders take everything
// queued, send it in one pipelined write, and hand each flight its replies.
// A caller waits only for its own flight, its context, and the node's
// silence signal; no goroutine is started per call, and under load one
// write and one wake-up of a sender serve many callers.

// sendersPerNode bounds the writes out on one node at once: while some
// senders' batches run in Redis or are on the wire, others hand replies
// to their callers and take the next batch. Fewer leave Redis idle while
// replies are handed out; more split the same callers into smaller
// batches (the trade-off measured in docs/benchmarks.md).
const sendersPerNode = 8

// maxBatch bounds the flights one write takes; the rest wait for the next.
const maxBatch = 256

// enqueue hands f to its node's senders, starting or waking one if fewer
// than sendersPerNode are at work.
func (e *engine) enqueue(f *flight) {
	n := f.node
	n.mu.Lock()
	n.queue = append(n.queue, f)
	start := n.senders < sendersPerNode
	if start {
		n.senders++
	}
	n.mu.Unlock()
	if !start {
		return
	}
	select {
	case n.wake <- struct{}{}: // a sender waiting for work takes it
	default:
		if !e.goroutines.add() {
			// Closed: nobody will start again, so this caller sends what
			// is queued (Close cancelled the context: nothing goes out).
			e.sendQueued(n, new(sendBuf), false)
			return
		}
		go e.sender(n)
	}
}

// take moves up to maxBatch queued flights of n into batch; when none is
// queued and stop is set, the calling sender stops counting among n's
// senders.
func (n *node) take(batch []*flight, stop bool) []*flight {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := min(len(n.queue), maxBatch)
	if k == 0 {
		if stop {
			n.senders--
		}
		return batch
	}
	batch = append(batch, n.queue[:k]...)
	rest := copy(n.queue, n.queue[k:])
	clear(n.queue[rest:])
	n.queue = n.queue[:rest]
	return batch
}

// sender sends n's queued flights until it has sent nothing for a second
// (the timer is looked at once a second, not set at each wait) or the
// Limiter closes.
func (e *engine) sender(n *node) {
	defer e.goroutines.done()
	s := new(sendBuf)
	idle := time.NewTimer(time.Second)
	defer idle.Stop()
	sent := false
	for {
		sent = e.sendQueued(n, s, true) || sent
		for waiting := true; waiting; {
			select {
			case <-n.wake: // counted among n's senders again by the waker
				waiting = false
			case <-idle.C:
				if !sent {
					return
				}
				sent = false
				idle.Reset(time.Second)
			case <-e.goroutines.ctx.Done():
				return
			}
		}
	}
}

// lingers is how many times a sender that found the queue empty lets
// the callers run before it stops: a caller whose answer it just handed
// over often asks again at once, and finds it still at work instead of
// waking it.
const lingers = 2

// sendQueued sends n's queue, batch after batch, until it is empty, and
// reports whether it sent anything.
func (e *engine) sendQueued(n *node, s *sendBuf, retries bool) (sent bool) {
	idle := 0
	for {
		batch := n.take(s.batch[:0], idle == lingers)
		s.batch = batch
		if len(batch) == 0 {
			if idle == lingers {
				return sent
			}
			idle++
			runtime.Gosched()
			continue
		}
		idle, sent = 0, true
		ctx := e.deadlines.get(batch[0].start, e.cfg.flightBound())
		e.send(ctx, s, batch, false)
		for _, f := range batch {
			if retries && f.retrying() && e.goroutines.add() {
				go e.retry(f)
				continue
			}
			e.land(f)
		}
		clear(s.batch)
	}
}

// retry sends again, after a pause that doubles, the requests of f the
// cluster answered TRYAGAIN (the script did not run: its keys are being
// migrated), then lands f.
func (e *engine) retry(f *flight) {
	defer e.goroutines.done()
	ctx := e.deadlines.get(f.start, e.cfg.flightBound())
	s := &sendBuf{batch: []*flight{f}}
	for delay := time.Millisecond; f.retrying(); delay = min(2*delay, 50*time.Millisecond) {
		f.node.replied(time.Now())
		if f.state.Load() != flightWaiting && !f.reqs[0].undoes() {
			break // nobody waits, and the scripts did not run: nothing to do
		}
		e.metrics.retry(f.reqs[0].lim)
		if !sleepCtx(ctx, delay) {
			for i := range f.reqs {
				if classOf(f.reqs[i].err) == classRetry {
					f.reqs[i].err = ctx.Err()
				}
			}
			break
		}
		e.send(ctx, s, s.batch, true)
	}
	e.land(f)
}

// sendBuf is a sender's scratch space, kept from one write to the next:
// the commands of a write, their replies, the request each belongs to,
// and the requests to send again as EVAL.
type sendBuf struct {
	batch   []*flight
	cmds    []luart.Cmd
	replies []luart.Reply
	idx     []reqRef
	eval    []reqRef
}

// reqRef names one request of a batch: flight f's request r, or with r
// -1 the flight's TIME.
type reqRef struct{ f, r int32 }

// send sends the requests of batch (with retry, only those answered
// TRYAGAIN) in one pipelined write, each flight's TIME ahead of its
// scripts when it asks for one, and sets their replies; then the scripts
// Redis did not have go once more as EVAL, in a second write.
func (e *engine) send(ctx context.Context, s *sendBuf, batch []*flight, retry bool) {
	cmds, idx := s.cmds[:0], s.idx[:0]
	for fi, f := range batch {
		for i := range f.reqs {
			req := &f.reqs[i]
			if retry && classOf(req.err) != classRetry {
				continue
			}
			if f.since && !retry && e.timeAhead(f, i) {
				// TIME on the node of this request's slot, ahead of its
				// script: a bound on when it charged, on that node's clock.
				f.timeKeys = append(f.timeKeys, req.key)
				cmds = append(cmds, luart.Cmd{Op: luart.OpTime, Keys: f.timeKeys[len(f.timeKeys)-1:]})
				idx = append(idx, reqRef{int32(fi), int32(-1 - i)})
			}
			if req.kind == callReset {
				cmds = append(cmds, luart.Cmd{Op: luart.OpDel, Keys: req.keys})
			} else {
				cmds = append(cmds, luart.Cmd{Op: luart.OpEvalSha, Call: req.call})
			}
			idx = append(idx, reqRef{int32(fi), int32(i)})
		}
	}
	replies := s.replies[:0]
	for range cmds {
		replies = append(replies, luart.Reply{})
	}
	e.client.Send(ctx, cmds, replies)
	eval := s.eval[:0]
	for j, r := range replies {
		ref := idx[j]
		f := batch[ref.f]
		if ref.r < 0 {
			e.timeOf(f, int(-1-ref.r), timeOf(r))
			continue
		}
		if cmds[j].Op == luart.OpEvalSha && r.IsNoScript() {
			eval = append(eval, ref)
			continue
		}
		req := &f.reqs[ref.r]
		req.d, req.err = req.decode(r)
	}
	if len(eval) > 0 {
		e.metrics.reload(ctx, len(eval))
		cmds = cmds[:0]
		for _, ref := range eval {
			cmds = append(cmds, luart.Cmd{Op: luart.OpEval, Call: batch[ref.f].reqs[ref.r].call})
		}
		replies = replies[:len(cmds)]
		e.client.Send(ctx, cmds, replies)
		for j, ref := range eval {
			req := &batch[ref.f].reqs[ref.r]
			req.d, req.err = req.decode(replies[j])
		}
	}
	// Kept for the next write, holding nothing.
	clear(cmds)
	clear(replies)
	s.cmds, s.idx, s.replies, s.eval = cmds[:0], idx[:0], replies[:0], eval[:0]
}

// timeAhead reports whether f's request i gets a TIME of its own ahead of
// it: the first request, and on a cluster the first of each hash slot
// (while the slot map is not known, one flight's slots may be on several
// nodes, whose clocks and order of execution are their own).
func (e *engine) timeAhead(f *flight, i int) bool {
	if i == 0 {
		return true
	}
	if !e.router.cluster {
		return false
	}
	s := keyslot.Of(f.reqs[i].key)
	for k := range i {
		if keyslot.Of(f.reqs[k].key) == s {
			return false
		}
	}
	return true
}

// timeOf sets t, the TIME sent ahead of f's request i, as the since of
// every request it is ahead of: on a cluster those of i's slot, else all.
func (e *engine) timeOf(f *flight, i int, t int64) {
	s := keyslot.Of(f.reqs[i].key)
	for k := i; k < len(f.reqs); k++ {
		if !e.router.cluster || keyslot.Of(f.reqs[k].key) == s {
			f.reqs[k].since = t
		}
	}
}

// land ends f's round trip: the node's liveness and breaker learn how it
// went, and the replies go to the waiter, or are reconciled when the
// waiter has gone.
func (e *engine) land(f *flight) {
	n := f.node
	down, reply := false, false
	for i := range f.reqs {
		switch classOf(f.reqs[i].err) {
		case classDown:
			down = true
		case classGaveUp:
		default:
			reply = true
		}
	}
	n.finished(time.Now(), reply)
	<-n.slots
	if down && !reply {
		n.breaker.unanswered()
		e.router.failed()
	}
	if f.state.CompareAndSwap(flightWaiting, flightLanded) {
		f.done <- struct{}{}
		return
	}
	left := f.state.Load() == flightLeft
	for i := range f.reqs {
		e.reconcile(&f.reqs[i], classOf(f.reqs[i].err), left)
	}
	f.recycle()
}
