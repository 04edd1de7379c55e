package sluice

import (
	"sync"
	"time"
)

// breakerState is the state of the circuit breaker guarding Redis.
type breakerState int

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
// after cooldown, and closes again on the probe's success. While open, a
// decision costs a mutex and a clock read instead of a Redis timeout.
type breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time
	onChange  func(from, to breakerState)

	mu       sync.Mutex
	state    breakerState
	failures int
	openedAt time.Time
	probing  bool
}

func newBreaker(threshold int, cooldown time.Duration, now func() time.Time, onChange func(from, to breakerState)) *breaker {
	return &breaker{threshold: threshold, cooldown: cooldown, now: now, onChange: onChange}
}

// allow reports whether a call may go to Redis now.
func (b *breaker) allow() bool {
	if b == nil || b.threshold <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerClosed:
		return true
	case breakerOpen:
		if b.now().Sub(b.openedAt) < b.cooldown {
			return false
		}
		b.set(breakerHalfOpen)
		b.probing = true
		return true
	default: // half-open: only the one probe
		if b.probing {
			return false
		}
		b.probing = true
		return true
	}
}

// done records the outcome of a call that allow let through.
func (b *breaker) done(ok bool) {
	if b == nil || b.threshold <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ok {
		b.failures = 0
		b.probing = false
		if b.state != breakerClosed {
			b.set(breakerClosed)
		}
		return
	}
	b.failures++
	if b.state == breakerHalfOpen || b.failures >= b.threshold {
		b.probing = false
		b.openedAt = b.now()
		if b.state != breakerOpen {
			b.set(breakerOpen)
		}
	}
}

// abandon records that a call allow let through ended without telling
// whether Redis works (the caller gave up): nothing changes but that a
// half-open breaker may send another probe.
func (b *breaker) abandon() {
	if b == nil || b.threshold <= 0 {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

func (b *breaker) set(to breakerState) {
	from := b.state
	b.state = to
	if b.onChange != nil && from != to {
		b.onChange(from, to)
	}
}

func (b *breaker) current() breakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}
