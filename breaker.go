package sluice

import (
	"sync"
	"sync/atomic"
	"time"
)

// breakerState is the state of the circuit breaker guarding one Redis node.
type breakerState int32

const (
	breakerClosed   breakerState = iota // calls go to Redis
	breakerOpen                         // calls skip Redis until the cooldown ends
	breakerHalfOpen                     // the Limiter's own probe (a PING) is out; calls still skip Redis
)

func (s breakerState) String() string {
	switch s {
	case breakerClosed:
		return "closed"
	case breakerOpen:
		return "open"
	default:
		return "half-open"
	}
}

// breaker opens when its node is found down: threshold consecutive calls
// that got no answer (a connection error), or at once when calls have
// waited the silence timeout without any reply from the node. While it is
// not closed, decisions skip the node; after each cooldown the Limiter
// sends its own probe (a PING, never a caller's call), and a reply closes
// the breaker again, as does any reply a call still in flight receives. A
// closed breaker costs one atomic load per call.
type breaker struct {
	threshold int32
	cooldown  time.Duration
	now       func() time.Time
	onChange  func(from, to breakerState) // called without the lock held

	state    atomic.Int32 // breakerState; written under mu
	failures atomic.Int32 // consecutive calls without an answer

	mu       sync.Mutex
	openedAt time.Time
}

func newBreaker(threshold int, cooldown time.Duration, now func() time.Time, onChange func(from, to breakerState)) *breaker {
	return &breaker{threshold: int32(threshold), cooldown: cooldown, now: now, onChange: onChange}
}

func (b *breaker) off() bool { return b == nil || b.threshold <= 0 }

// allow reports whether a call may go to the node now. When it may not and
// the cooldown has passed, probe is true for exactly one caller, which
// starts the Limiter's probe (it does not wait for it).
func (b *breaker) allow() (ok, probe bool) {
	if b.off() || breakerState(b.state.Load()) == breakerClosed {
		return true, false
	}
	b.mu.Lock()
	st := breakerState(b.state.Load())
	switch {
	case st == breakerClosed:
		b.mu.Unlock()
		return true, false
	case st == breakerOpen && b.now().Sub(b.openedAt) >= b.cooldown:
		b.mu.Unlock()
		b.set(breakerOpen, breakerHalfOpen)
		return false, true
	}
	b.mu.Unlock()
	return false, false
}

// answered records that the node replied (to a call or to the probe): it
// is alive, so the breaker closes.
func (b *breaker) answered() {
	if b.off() {
		return
	}
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if breakerState(b.state.Load()) != breakerClosed {
		b.set(-1, breakerClosed)
	}
}

// unanswered records a call that got no answer (a connection error): the
// threshold-th in a row opens the breaker. A failed probe opens it again.
func (b *breaker) unanswered() {
	if b.off() {
		return
	}
	n := b.failures.Add(1)
	switch breakerState(b.state.Load()) {
	case breakerClosed:
		if n >= b.threshold {
			b.set(breakerClosed, breakerOpen)
		}
	case breakerHalfOpen:
		b.set(breakerHalfOpen, breakerOpen)
	}
}

// trip opens the breaker at once: the node has left calls unanswered for
// the whole silence timeout.
func (b *breaker) trip() {
	if b.off() {
		return
	}
	b.set(breakerClosed, breakerOpen)
}

// set moves the breaker from state from (any state when from is -1) to
// state to, restarting the cooldown when it opens, and reports the change
// outside the lock.
func (b *breaker) set(from, to breakerState) {
	b.mu.Lock()
	cur := breakerState(b.state.Load())
	if cur == to || from >= 0 && cur != from {
		b.mu.Unlock()
		return
	}
	if to == breakerOpen {
		b.openedAt = b.now()
	}
	b.state.Store(int32(to))
	b.mu.Unlock()
	if b.onChange != nil {
		b.onChange(cur, to)
	}
}

// retryAfter is the wait a fail-closed denial reports: the time until the
// breaker next probes the node, at least 1µs; the full cooldown when the
// breaker is not open; 1s when there is no breaker.
func (b *breaker) retryAfter() time.Duration {
	if b.off() {
		return time.Second
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if breakerState(b.state.Load()) != breakerOpen {
		return b.cooldown
	}
	return max(ceilMicros(b.cooldown-b.now().Sub(b.openedAt)), time.Microsecond)
}

func (b *breaker) current() breakerState {
	if b.off() {
		return breakerClosed
	}
	return breakerState(b.state.Load())
}
