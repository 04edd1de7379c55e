package sluice

import (
	"sync"
	"sync/atomic"
	"time"
)

// breakerState is the state of the circuit breaker guarding Redis.
type breakerState int32

const (
	breakerClosed   breakerState = iota // calls go to Redis
	breakerOpen                         // calls skip Redis until the cooldown ends
	breakerHalfOpen                     // one probe call goes to Redis
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

// breaker opens after threshold consecutive failures, lets one probe through
// after cooldown, and closes again on the probe's success. A closed breaker
// costs two atomic loads per call; while open, a decision costs a mutex and
// a clock read instead of a Redis timeout.
type breaker struct {
	threshold int32
	cooldown  time.Duration
	now       func() time.Time
	onChange  func(from, to breakerState)

	state    atomic.Int32 // breakerState; written under mu
	failures atomic.Int32 // consecutive failures

	mu       sync.Mutex
	openedAt time.Time
	probing  bool
}

func newBreaker(threshold int, cooldown time.Duration, now func() time.Time, onChange func(from, to breakerState)) *breaker {
	return &breaker{threshold: int32(threshold), cooldown: cooldown, now: now, onChange: onChange}
}

func (b *breaker) off() bool { return b == nil || b.threshold <= 0 }

// allow reports whether a call may go to Redis now, and whether it is the
// probe of a half-open breaker.
func (b *breaker) allow() (ok, probe bool) {
	if b.off() || breakerState(b.state.Load()) == breakerClosed {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch breakerState(b.state.Load()) {
	case breakerClosed:
		return true, false
	case breakerOpen:
		if b.now().Sub(b.openedAt) < b.cooldown {
			return false, false
		}
		b.set(breakerHalfOpen)
		b.probing = true
		return true, true
	default: // half-open: only the one probe
		if b.probing {
			return false, false
		}
		b.probing = true
		return true, true
	}
}

// done records the outcome of a call that allow let through.
func (b *breaker) done(ok bool) {
	if b.off() {
		return
	}
	if ok {
		if breakerState(b.state.Load()) == breakerClosed {
			if b.failures.Load() != 0 {
				b.failures.Store(0)
			}
			return
		}
		b.mu.Lock()
		b.failures.Store(0)
		b.probing = false
		b.set(breakerClosed)
		b.mu.Unlock()
		return
	}
	n := b.failures.Add(1)
	if breakerState(b.state.Load()) == breakerClosed && n < b.threshold {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if st := breakerState(b.state.Load()); st == breakerHalfOpen || st == breakerClosed && b.failures.Load() >= b.threshold {
		b.probing = false
		b.openedAt = b.now()
		b.set(breakerOpen)
	}
}

// abandon records that a call allow let through ended without telling
// whether Redis works (the caller gave up): nothing changes but that a
// half-open breaker may send another probe.
func (b *breaker) abandon() {
	if b.off() || breakerState(b.state.Load()) == breakerClosed {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// retryAfter is the wait a fail-closed denial reports: the time until the
// breaker lets a probe through, at least 1µs; the full cooldown when the
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

// set moves to state to; the caller holds mu.
func (b *breaker) set(to breakerState) {
	from := breakerState(b.state.Load())
	if from == to {
		return
	}
	b.state.Store(int32(to))
	if b.onChange != nil {
		b.onChange(from, to)
	}
}

func (b *breaker) current() breakerState {
	if b.off() {
		return breakerClosed
	}
	return breakerState(b.state.Load())
}
