package sluice

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// ErrClosed means the Limiter was closed: it makes no more decisions.
var ErrClosed = errors.New("sluice: limiter closed")

// goroutines counts the goroutines a Limiter starts (calls in flight, the
// release queue, probes, slot map refreshes) so that Close can end them and
// wait for them. After Close no new one starts.
type goroutines struct {
	n      atomic.Int64 // goroutines running, plus closedBit once closed
	idle   chan struct{}
	once   sync.Once
	ctx    context.Context // the Limiter's own: cancelled by Close
	cancel context.CancelFunc
}

const closedBit = int64(1) << 62

func newGoroutines() *goroutines {
	ctx, cancel := context.WithCancel(context.Background())
	return &goroutines{idle: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// start runs f on a new goroutine unless the Limiter is closed.
func (g *goroutines) start(f func()) bool {
	if !g.add() {
		return false
	}
	go func() {
		defer g.done()
		f()
	}()
	return true
}

// add counts one goroutine about to start; false once closed.
func (g *goroutines) add() bool {
	for {
		n := g.n.Load()
		if n&closedBit != 0 {
			return false
		}
		if g.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// done counts one goroutine ended.
func (g *goroutines) done() {
	if g.n.Add(-1) == closedBit {
		close(g.idle)
	}
}

func (g *goroutines) closed() bool { return g.n.Load()&closedBit != 0 }

// close cancels the Limiter's context and waits for every goroutine.
func (g *goroutines) close() {
	g.once.Do(func() {
		g.cancel()
		if g.n.Add(closedBit) == closedBit {
			close(g.idle)
		}
	})
	<-g.idle
}

// Close ends every goroutine the Limiter started and waits for them: calls
// still in flight are abandoned (rueidis drops their replies), releases
// still queued are dropped (those slots come back when their leases
// expire), and later calls return ErrClosed. It does not close the rueidis
// client, which the caller owns. Close is safe to call more than once.
func (l *Limiter) Close() { l.e.close() }

func (e *engine) close() { e.goroutines.close() }
