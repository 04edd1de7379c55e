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
	// see WithReplicas. Never unlimited, and no outage of the API.
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

// errBreakerOpen is the cause recorded (in the sluice.redis.failures
// metric, as "breaker_open") for decisions the failure policy made without
// asking Redis because the circuit breaker was open. Decisions never return
// it: a caller sees a Result with Degraded set.
var errBreakerOpen = errors.New("sluice: circuit breaker open")

// ErrWrongType means a key holds a value of another type than the limit's
// script keeps there: typically a limit whose algorithm changed while its
// name was kept, or a key written by something else under the Limiter's
// prefix. The wrapping error names the key. Only that call fails: the
// breaker and the other keys are untouched. Reset the key, or give the
// limit a new name.
var ErrWrongType = errors.New("sluice: key holds the wrong type")

type config struct {
	prefix           string
	policy           FailurePolicy
	replicas         int
	localEntries     int           // the local fallback's bound, in entries
	localSet         []string      // the options given that configure FailLocal only
	timeout          time.Duration // the most a decision waits on a node that answers (0: the caller's context only)
	silence          time.Duration // calls waiting this long with no reply of any kind: the node is down
	breakerThreshold int
	denialCache      int  // entries; 0: off
	crossSlot        bool // WithCrossSlotScripts
	breakerCooldown  time.Duration
	clock            func() time.Time
	logger           *slog.Logger
	meterProvider    metric.MeterProvider
}

// flightBound is how long a call sent to Redis is waited for at most,
// whoever waits for it: the caller, or the Limiter once the caller has its
// answer. Past it (or past rueidis' own ConnWriteTimeout, 10s by default)
// the connection is taken for broken.
func (c *config) flightBound() time.Duration {
	return max(c.timeout, 2*c.silence, 10*time.Second)
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
// of every limit from memory; WithReplicas sets the fleet's size).
func WithFailurePolicy(p FailurePolicy) Option {
	return func(c *config) error {
		if p < FailOpen || p > FailLocal {
			return fmt.Errorf("%w: WithFailurePolicy(%d): unknown policy", ErrInvalidOption, int(p))
		}
		c.policy = p
		return nil
	}
}

// WithReplicas sets the number of replicas sharing the limits, the size of
// FailLocal's share: while Redis is unavailable each replica admits
// 1/replicas of every limit from memory (default 1). It configures
// FailLocal only: New refuses it beside another failure policy, whatever
// the order of the options.
func WithReplicas(replicas int) Option {
	return func(c *config) error {
		if replicas < 1 {
			return fmt.Errorf("%w: WithReplicas(%d): replicas must be at least 1", ErrInvalidOption, replicas)
		}
		c.replicas, c.localSet = replicas, append(c.localSet, "WithReplicas")
		return nil
	}
}

// WithLocalFallbackSize bounds the memory of the FailLocal quota (New
// refuses it beside another failure policy): at most entries
// identity-and-limit states are kept (default 1,048,576; docs/operations.md,
// "Memory", has the heap they take). Past the bound the least-used states
// are dropped in a way that keeps every limit safe: an identity seen again
// starts no fresher than the state dropped last in its shard, so no
// identity is admitted more than its share.
func WithLocalFallbackSize(entries int) Option {
	return func(c *config) error {
		if entries < localShards {
			return fmt.Errorf("%w: WithLocalFallbackSize(%d): want at least %d entries", ErrInvalidOption, entries, localShards)
		}
		c.localEntries, c.localSet = entries, append(c.localSet, "WithLocalFallbackSize")
		return nil
	}
}

// WithTimeout bounds how long one decision waits on a Redis node that is
// answering (default 0: no bound but the caller's context). A node that
// answers decides every call however long its queue; past d the failure
// policy decides this one call, and the breaker stays as it is, since the
// node is busy, not gone. The call itself goes on, and what it charges in
// Redis is kept (never an over-admission). A node that is silent is another
// matter: see WithSilenceTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithTimeout(%v): must not be negative", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}

// WithSilenceTimeout sets when a Redis node counts as gone (default 1s):
// once calls have waited d on it without any reply from it, and a PING the
// Limiter then sends has had d/4 more without a reply either (so at most
// 1.25 d after the node stopped answering). A process starved of CPU looks
// like a silent node from inside, so a look that runs late, or finds that
// goroutines of this process waited long for a core meanwhile
// (runtime/metrics), starts that confirmation again, until calls have
// waited 4 d. Then the waiting calls and the later ones are decided by the
// failure policy, and the node's circuit breaker opens. A busy node keeps
// answering and is never taken for gone; a caller's own deadline or
// cancellation never counts. d must be at least 1ms.
func WithSilenceTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: WithSilenceTimeout(%v): must be at least 1ms", ErrInvalidOption, d)
		}
		c.silence = d
		return nil
	}
}

// WithBreaker sets each Redis node's circuit breaker (default 5, 250ms).
// It opens after threshold consecutive calls got no answer from the node
// (connection errors), or at once when the node is silent (see
// WithSilenceTimeout); while open, decisions skip the node and make no
// round trip (docs/operations.md, "The failure matrix", has what one
// costs). After each cooldown the Limiter probes the node with a PING of
// its own, in the background: no caller waits for it. A reply, to the
// probe or to any call still in flight, closes the breaker. A threshold
// of 0 turns the breaker off: every call then goes to Redis, and a silent
// node costs each one the silence timeout.
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
// trip, until d has passed, and requests of cost 0 (reports) are answered
// from memory with Remaining 0: exactly what Redis would answer, since a
// limit that denies a cost of 1 can admit nothing until then. Other costs
// and concurrency limits always ask Redis. A Reset on this
// Limiter clears its entry; a Reset made by another replica is seen when
// the cached denial runs out. Its memory is bounded by size
// (docs/operations.md, "Memory", has what an entry takes).
func WithDenialCache(size int) Option {
	return func(c *config) error {
		if size < 0 {
			return fmt.Errorf("%w: WithDenialCache(%d): size must not be negative", ErrInvalidOption, size)
		}
		c.denialCache = size
		return nil
	}
}

// WithCrossSlotScripts says whether the Redis behind the client runs a
// script whose keys are in different hash slots (default false). A
// standalone or Sentinel-managed Redis does; a proxy in front of shards
// (Redis Enterprise's clustered databases, Envoy's or twemproxy's Redis
// proxy) refuses it. When on, a batch decision (Decide) of checks on
// different identities, with the same algorithm and cost, sends them in
// one multi-limit script call (gcra, sliding_window and fixed_window have
// one) instead of one call each: Redis spends less on it, and it is
// atomic, so a batch one check refuses charges none of the others without
// the refund a batch of several calls needs. The checks of one identity
// share a slot and are folded so whether or not it is on. It is ignored
// on a Redis Cluster, where a script's keys must share a slot.
func WithCrossSlotScripts(on bool) Option {
	return func(c *config) error {
		c.crossSlot = on
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
