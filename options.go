package sluice

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// FailurePolicy says what a decision is when Redis errs, is slow, or the
// circuit breaker is open.
type FailurePolicy int

const (
	// FailOpen admits every request while Redis is unavailable:
	// an outage of the limiter never becomes an outage of the API.
	FailOpen FailurePolicy = iota
	// FailClosed denies every request while Redis is unavailable.
	FailClosed
	// FailLocal (the default) decides with an in-process quota: each
	// replica admits its share (Rate/replicas, at least 1) of every limit;
	// see WithLocalFallback. Never unlimited, and no outage of the API.
	FailLocal
)

func (p FailurePolicy) String() string {
	switch p {
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	case FailLocal:
		return "fail-local"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// ErrInvalidCost means a cost below 0 or above MaxCost was passed. It is
// separate from ErrInvalidLimit so a caller can tell a bad request weight
// from a bad configuration; a cost above a limit's capacity is not an
// error but a denial with RetryNever.
var ErrInvalidCost = errors.New("sluice: invalid cost")

// ErrInvalidOption means New was given an option value it cannot use; the
// wrapping error names the option.
var ErrInvalidOption = errors.New("sluice: invalid option")

// ErrBreakerOpen is the cause recorded (in the sluice.redis.failures
// metric, as "breaker_open") for decisions the failure policy made without
// asking Redis because the circuit breaker was open. Decisions never return
// it: a caller sees a Result with Degraded set.
var ErrBreakerOpen = errors.New("sluice: circuit breaker open")

type config struct {
	prefix           string
	policy           FailurePolicy
	replicas         int
	adaptive         bool          // timeout from observed latency, within [timeoutMin, timeoutMax]
	timeoutMin       time.Duration // the fixed timeout when not adaptive (0: none)
	timeoutMax       time.Duration
	breakerThreshold int
	denialCache      int // entries; 0: off
	breakerCooldown  time.Duration
	clock            func() time.Time
	logger           *slog.Logger
	meterProvider    metric.MeterProvider
}

// Option configures a Limiter.
type Option func(*config) error

// WithPrefix sets the first part of every key (default "sluice"): keys are
// PREFIX:{IDENTITY}:LIMIT-NAME. It must be 1 to 64 bytes without braces,
// spaces or control characters.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if prefix == "" || len(prefix) > 64 || strings.ContainsAny(prefix, "{} \t\r\n") || !printable(prefix) {
			return fmt.Errorf("%w: WithPrefix(%q): want 1 to 64 printable bytes without braces or spaces", ErrInvalidOption, prefix)
		}
		c.prefix = prefix
		return nil
	}
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// WithFailurePolicy chooses what happens when Redis is unavailable
// (default FailLocal with one replica: each process admits the whole quota
// of every limit from memory; WithLocalFallback sets the fleet's size).
func WithFailurePolicy(p FailurePolicy) Option {
	return func(c *config) error {
		if p < FailOpen || p > FailLocal {
			return fmt.Errorf("%w: WithFailurePolicy(%d): unknown policy", ErrInvalidOption, int(p))
		}
		c.policy = p
		return nil
	}
}

// WithLocalFallback selects FailLocal for a fleet of the given number of
// replicas: while Redis is unavailable each replica admits 1/replicas of
// every limit from memory.
func WithLocalFallback(replicas int) Option {
	return func(c *config) error {
		if replicas < 1 {
			return fmt.Errorf("%w: WithLocalFallback(%d): replicas must be at least 1", ErrInvalidOption, replicas)
		}
		c.policy, c.replicas = FailLocal, replicas
		return nil
	}
}

// WithTimeout gives every call to Redis a fixed deadline d; past it the
// failure policy decides. 0 means only the caller's context bounds a call.
// The default is an adaptive timeout (WithAdaptiveTimeout(100ms, 1s)),
// which a loaded host does not mistake for an outage. A half-open
// breaker's probe waits at least 1s either way.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithTimeout(%v): must not be negative", ErrInvalidOption, d)
		}
		c.adaptive, c.timeoutMin, c.timeoutMax = false, d, max(d, time.Second)
		return nil
	}
}

// WithAdaptiveTimeout derives each call's deadline from the latency
// observed on its Redis node: 4× the recent slowest reply (a high-water
// mark that follows slower replies at once and decays over a few thousand
// calls), never below lo nor above hi. It is the default, with lo = 100ms
// and hi = 1s: replies slowed by a busy host or Redis raise the timeout
// instead of turning into failures. A half-open breaker's probe gets hi.
func WithAdaptiveTimeout(lo, hi time.Duration) Option {
	return func(c *config) error {
		if lo <= 0 || hi < lo {
			return fmt.Errorf("%w: WithAdaptiveTimeout(%v, %v): want 0 < lo <= hi", ErrInvalidOption, lo, hi)
		}
		c.adaptive, c.timeoutMin, c.timeoutMax = true, lo, hi
		return nil
	}
}

// WithBreaker sets the circuit breaker: after threshold consecutive
// failures, decisions skip Redis for cooldown, then one probe call decides
// whether to close it again (default 5 failures, 1s). A threshold of 0
// turns the breaker off.
func WithBreaker(threshold int, cooldown time.Duration) Option {
	return func(c *config) error {
		if threshold < 0 || cooldown <= 0 && threshold > 0 {
			return fmt.Errorf("%w: WithBreaker(%d, %v): want threshold >= 0 and a positive cooldown", ErrInvalidOption, threshold, cooldown)
		}
		c.breakerThreshold, c.breakerCooldown = threshold, cooldown
		return nil
	}
}

// WithDenialCache sets how many denied identities (per limit) the Limiter
// remembers to answer locally (default 10,000; 0 turns the cache off).
// After Redis denies a cost of 1 with RetryAfter d, later requests of cost
// 1 for that identity and limit are denied from memory, without a round
// trip, until d has passed: exactly what Redis would answer, since a limit
// that denies a cost of 1 can admit nothing until then. Other costs,
// AllowAll and concurrency limits always ask Redis. A Reset on this
// Limiter clears its entry; a Reset made by another replica is seen when
// the cached denial runs out. Memory: about 200 bytes per entry.
func WithDenialCache(size int) Option {
	return func(c *config) error {
		if size < 0 {
			return fmt.Errorf("%w: WithDenialCache(%d): size must not be negative", ErrInvalidOption, size)
		}
		c.denialCache = size
		return nil
	}
}

// WithClock makes the scripts use this clock instead of Redis TIME: each
// call sends now in microseconds. Use it for tests and simulations, or when
// every replica's clock is trusted more than the server's. By default the
// Redis server's clock decides, so replica clock skew cannot matter.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: WithClock(nil)", ErrInvalidOption)
		}
		c.clock = now
		return nil
	}
}

// WithLogger sets where breaker state changes are logged (default
// slog.Default(); nil discards them). Decisions themselves are never logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			l = slog.New(slog.NewTextHandler(io.Discard, nil))
		}
		c.logger = l
		return nil
	}
}
