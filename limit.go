package sluice

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Algorithm names a rate-limiting algorithm.
type Algorithm string

// The built-in algorithms. docs/algorithms.md explains each one.
const (
	// AlgFixedWindow counts requests in epoch-aligned windows [kP, (k+1)P).
	// Guarantee: at most Rate in any one window; up to 2×Rate in a span of
	// length P that straddles a window boundary.
	AlgFixedWindow Algorithm = "fixed_window"
	// AlgSlidingLog keeps one entry per admitted request. Guarantee: at most
	// Rate in every span of length Period, exactly.
	AlgSlidingLog Algorithm = "sliding_log"
	// AlgSlidingWindow weights the previous window's count by how much of it
	// still overlaps the sliding window. Guarantee: never more than Rate in
	// the approximated window; constant memory.
	AlgSlidingWindow Algorithm = "sliding_window"
	// AlgTokenBucket refills a bucket of Burst tokens continuously at Rate
	// per Period. Guarantee: at most Burst + Rate×t/Period in any span t.
	AlgTokenBucket Algorithm = "token_bucket"
	// AlgGCRA is the generic cell rate algorithm. Guarantee: at most
	// Burst + Rate×t/Period in any span t; decision for decision the same as
	// AlgTokenBucket with the same Rate, Period and Burst.
	AlgGCRA Algorithm = "gcra"
	// AlgConcurrency limits requests in flight: at most Rate holders at any
	// moment; a holder that never releases loses its slot after Period.
	AlgConcurrency Algorithm = "concurrency"
)

// Limit is one quota. Build it with a constructor (FixedWindow, SlidingLog,
// SlidingWindow, TokenBucket, GCRA, Concurrency), which validates it;
// Limiter methods validate again, so a hand-built Limit gets an error, not a
// panic.
type Limit struct {
	// Algorithm decides how requests are counted.
	Algorithm Algorithm
	// Rate is the number of requests (cost units) allowed per Period; for
	// AlgConcurrency, the most requests in flight at once.
	Rate int64
	// Period is the window or refill period, at least 1µs, in whole
	// microseconds. For AlgConcurrency, the lease: how long a slot stays
	// taken if it is never released.
	Period time.Duration
	// Burst is the bucket capacity of AlgTokenBucket and the burst of
	// AlgGCRA (most requests admitted at once); unused by the others.
	Burst int64
	// Name identifies the limit in headers, metrics and its Redis key: 1 to
	// 64 letters, digits, '.', '_' or '-'. The constructors default it to
	// "ALGORITHM-RATE-PERIOD[-BURST]" (gcra-100-60s-10), so changing a
	// limit's numbers starts it afresh; a custom name keeps the state.
	Name string
}

// ErrInvalidLimit means a Limit or a cost was rejected before reaching
// Redis; the wrapping error says which field and why.
var ErrInvalidLimit = errors.New("sluice: invalid limit")

// The scripts compute in Lua numbers (doubles), exact for integers up to
// 2^52; these bounds keep every product they form inside that range.
const (
	maxPeriod = (1 << 50) * time.Microsecond // about 35 years
	maxRate   = 1 << 40
	maxExact  = 1 << 52 // bound on Burst×Period/gcd(Rate, Period) (µs) and, for the sliding window counter, Rate×Period
)

// MaxCost is the largest cost AllowN accepts.
const MaxCost = 1 << 52

func newLimit(alg Algorithm, rate int64, period time.Duration, burst int64) (Limit, error) {
	l := Limit{Algorithm: alg, Rate: rate, Period: period, Burst: burst}
	l.Name = l.defaultName()
	return l, l.Validate()
}

// FixedWindow allows rate requests in each epoch-aligned window of the
// given length.
func FixedWindow(rate int64, window time.Duration) (Limit, error) {
	return newLimit(AlgFixedWindow, rate, window, 0)
}

// SlidingLog allows rate requests in every span of the given length,
// exactly, keeping one sorted-set member per admitted request.
func SlidingLog(rate int64, window time.Duration) (Limit, error) {
	return newLimit(AlgSlidingLog, rate, window, 0)
}

// SlidingWindow approximates SlidingLog in constant memory by weighting the
// previous window's count.
func SlidingWindow(rate int64, window time.Duration) (Limit, error) {
	return newLimit(AlgSlidingWindow, rate, window, 0)
}

// TokenBucket allows bursts of up to capacity requests, refilled at rate per
// period. The bucket starts full.
func TokenBucket(rate int64, period time.Duration, capacity int64) (Limit, error) {
	return newLimit(AlgTokenBucket, rate, period, capacity)
}

// GCRA allows rate requests per period with bursts of up to burst.
func GCRA(rate int64, period time.Duration, burst int64) (Limit, error) {
	return newLimit(AlgGCRA, rate, period, burst)
}

// Concurrency allows at most n requests in flight; a lease not released
// expires after lease.
func Concurrency(n int64, lease time.Duration) (Limit, error) {
	return newLimit(AlgConcurrency, n, lease, 0)
}

// Must returns l or panics with err. Use it only for package-level limits
// whose values are constants.
func Must(l Limit, err error) Limit {
	if err != nil {
		panic(err)
	}
	return l
}

// Named returns a copy of l with the given name.
func (l Limit) Named(name string) Limit {
	l.Name = name
	return l
}

// Validate reports whether l can be used.
func (l Limit) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidLimit, fmt.Sprintf(format, args...))
	}
	switch l.Algorithm {
	case AlgFixedWindow, AlgSlidingLog, AlgSlidingWindow, AlgTokenBucket, AlgGCRA, AlgConcurrency:
	case "":
		return bad("no algorithm; build limits with sluice.GCRA, sluice.FixedWindow, ...")
	default:
		return bad("unknown algorithm %q", l.Algorithm)
	}
	if l.Rate <= 0 {
		return bad("%s: rate must be at least 1, got %d", l.Algorithm, l.Rate)
	}
	if l.Rate > maxRate {
		return bad("%s: rate %d is above the maximum %d", l.Algorithm, l.Rate, int64(maxRate))
	}
	if l.Period < time.Microsecond {
		return bad("%s: period must be at least 1µs, got %v", l.Algorithm, l.Period)
	}
	if l.Period > maxPeriod {
		return bad("%s: period %v is above the maximum %v", l.Algorithm, l.Period, maxPeriod)
	}
	if l.Period%time.Microsecond != 0 {
		return bad("%s: period %v is not a whole number of microseconds", l.Algorithm, l.Period)
	}
	if l.Algorithm == AlgTokenBucket || l.Algorithm == AlgGCRA {
		if l.Burst < 1 {
			return bad("%s: burst must be at least 1, got %d", l.Algorithm, l.Burst)
		}
		if l.Burst > maxRate {
			return bad("%s: burst %d is above the maximum %d", l.Algorithm, l.Burst, int64(maxRate))
		}
	}
	switch {
	case (l.Algorithm == AlgTokenBucket || l.Algorithm == AlgGCRA) && l.Burst > maxExact/(l.periodMicros()/gcd(l.Rate, l.periodMicros())):
		return bad("%s: burst × period / gcd(rate, period) must not exceed 2^52 (burst %d, rate %d over %v); lower the burst or use a rate that divides the period more evenly", l.Algorithm, l.Burst, l.Rate, l.Period)
	case l.Algorithm == AlgSlidingWindow && l.Rate > maxExact/l.periodMicros():
		return bad("%s: rate × period must not exceed 2^52 µs (rate %d over %v); shorten the period or lower the rate", l.Algorithm, l.Rate, l.Period)
	}
	if !validName(l.Name) {
		return bad("%s: name %q must be 1 to 64 letters, digits, '.', '_' or '-'", l.Algorithm, l.Name)
	}
	return nil
}

// validName keeps names safe in Redis keys, metric attributes and the
// quoted strings of RateLimit headers.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (l Limit) defaultName() string {
	n := string(l.Algorithm) + "-" + strconv.FormatInt(l.Rate, 10) + "-" + formatPeriod(l.Period)
	if l.Algorithm == AlgTokenBucket || l.Algorithm == AlgGCRA {
		n += "-" + strconv.FormatInt(l.Burst, 10)
	}
	return n
}

// formatPeriod writes a period compactly: 1s, 90s, 1500ms, 250us.
func formatPeriod(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d%time.Millisecond == 0:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	default:
		return strconv.FormatInt(int64(d/time.Microsecond), 10) + "us"
	}
}

// periodMicros is Period in whole microseconds.
func (l Limit) periodMicros() int64 { return int64(l.Period / time.Microsecond) }

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
