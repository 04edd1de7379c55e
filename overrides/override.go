package overrides

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice"
)

// Kind is what an override does to a policy's decisions for its identity.
type Kind uint8

const (
	// Limit replaces the policy's rate, period and burst for the identity.
	// The policy's algorithm and Limit.Name stay, so the identity's state
	// in Redis carries over (docs/overrides.md says what that means for
	// each algorithm).
	Limit Kind = iota + 1
	// Exempt skips the policy for the identity: no check, no headers for
	// that policy.
	Exempt
	// Block denies the identity under the policy without asking Redis,
	// with a Retry-After until Until (at most an hour).
	Block
)

// String is "limit", "exempt" or "block".
func (k Kind) String() string {
	switch k {
	case Limit:
		return "limit"
	case Exempt:
		return "exempt"
	case Block:
		return "block"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind reads "limit", "exempt" or "block".
func ParseKind(s string) (Kind, error) {
	for _, k := range []Kind{Limit, Exempt, Block} {
		if s == k.String() {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%w: kind %q: want limit, exempt or block", ErrInvalid, s)
}

// The bounds on an override's text.
const (
	// MaxIdentityLen is the longest Identity, in bytes.
	MaxIdentityLen = 256
	// MaxReasonLen is the longest Reason, in bytes.
	MaxReasonLen = 256
	// MaxPolicyLen is the longest Policy name, in bytes (the adapters'
	// rule for policy names: 1 to 64 printable ASCII characters).
	MaxPolicyLen = 64
)

// Override is one identity's exception to one policy.
type Override struct {
	// Policy is the name of the policy it applies to (httplimit's and
	// grpclimit's Policy.Name, or Limit.Name when that is empty).
	Policy string
	// Identity is the key the policy's KeyFunc returns for the client,
	// as the Limiter sees it: "ip:203.0.113.7", "sub:alice",
	// "key:9f86d081884c7d659a2feaa0c55ad015" (an API key is never stored
	// raw: build its identity with ratepolicy.APIKeyKey, a subject's with
	// ratepolicy.SubjectKey; a key over 128 bytes is ratepolicy.BoundKey
	// of it). 1 to MaxIdentityLen bytes.
	Identity string
	// Kind is Limit, Exempt or Block.
	Kind Kind
	// Rate, Period and Burst replace the policy's (Kind Limit only; zero
	// for the other kinds). Rate is required; a zero Period or Burst keeps
	// the policy's. The result must be a valid limit of the policy's
	// algorithm, or the plan's limit applies (and the mismatch is
	// logged). What the next decisions see of the identity's state under
	// the new numbers is each algorithm's rule (docs/algorithms.md, "When
	// a limit changes").
	Rate   int64
	Period time.Duration
	Burst  int64
	// Until is when the override ends, kept to the microsecond (rounded
	// up); the zero time means never. The override applies at instants
	// before Until, not at Until.
	Until time.Time
	// Reason says why, for the people who read List (at most
	// MaxReasonLen bytes of UTF-8 without control characters).
	Reason string
	// Set is when it was set; Store.Set fills it from its clock.
	Set time.Time
}

// ErrInvalid means an override, a policy name or an identity was refused
// before reaching Redis; the wrapping error says which field and why.
var ErrInvalid = errors.New("overrides: invalid override")

// ErrFull means a policy already holds Options.MaxPerPolicy overrides; the
// wrapping error names the policy.
var ErrFull = errors.New("overrides: too many overrides")

// Active reports whether o applies at now: before its Until, or always
// when it has none.
func (o Override) Active(now time.Time) bool {
	return o.Until.IsZero() || now.Before(o.Until)
}

// MaxBlockWait caps the wait a Block override announces (Retry-After, t,
// duration_until_reset): a client blocked with no end, or for longer, is
// told to come back after an hour.
const MaxBlockWait = time.Hour

// BlockWait is how long a Block override o tells a client to wait at now:
// until o.Until (at least 1 µs), at most MaxBlockWait, which is also the
// wait of a block without end. Every adapter reports a block with it.
func (o Override) BlockWait(now time.Time) time.Duration {
	if o.Until.IsZero() {
		return MaxBlockWait
	}
	return min(max(o.Until.Sub(now), time.Microsecond), MaxBlockWait)
}

// Apply returns the limit a Limit override makes of the policy's limit l:
// l with o's Rate, and its Period and Burst when they are not zero. The
// algorithm and name stay l's. It fails when o is not a Limit override,
// the result is not a valid limit, or o changes the period of a fixed or
// sliding window: their state is a window index computed with the period,
// which under another period would point years ahead and hold the count
// there (also once the override is gone).
func (o Override) Apply(l sluice.Limit) (sluice.Limit, error) {
	if o.Kind != Limit {
		return l, fmt.Errorf("%w: a %s override has no limit", ErrInvalid, o.Kind)
	}
	l.Rate = o.Rate
	if o.Period != 0 {
		l.Period = o.Period
	}
	if o.Burst != 0 {
		l.Burst = o.Burst
	}
	if err := l.Validate(); err != nil {
		return l, fmt.Errorf("overrides: policy %q identity %q: %w", o.Policy, o.Identity, err)
	}
	return l, nil
}

// The bounds the scripts' arithmetic sets (sluice.Limit.Validate checks
// the rest against the policy's algorithm).
const (
	maxRate   = 1 << 40
	maxPeriod = (1 << 50) * time.Microsecond
)

// validate checks what can be checked without the policy's limit.
func (o *Override) validate(now time.Time) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if err := checkPolicy(o.Policy); err != nil {
		return err
	}
	if err := checkIdentity(o.Identity); err != nil {
		return err
	}
	switch o.Kind {
	case Limit:
		if o.Rate < 1 || o.Rate > maxRate {
			return bad("policy %q identity %q: Rate %d: want 1 to 2^40", o.Policy, o.Identity, o.Rate)
		}
		if o.Period < 0 || o.Period > maxPeriod || o.Period%time.Microsecond != 0 {
			return bad("policy %q identity %q: Period %v: want 0 (the policy's) or a whole number of microseconds up to about 35 years", o.Policy, o.Identity, o.Period)
		}
		if o.Burst < 0 || o.Burst > maxRate {
			return bad("policy %q identity %q: Burst %d: want 0 (the policy's) to 2^40", o.Policy, o.Identity, o.Burst)
		}
	case Exempt, Block:
		if o.Rate != 0 || o.Period != 0 || o.Burst != 0 {
			return bad("policy %q identity %q: a %s override takes no Rate, Period or Burst", o.Policy, o.Identity, o.Kind)
		}
	default:
		return bad("policy %q identity %q: Kind %d: want Limit, Exempt or Block", o.Policy, o.Identity, o.Kind)
	}
	if !o.Until.IsZero() && !now.Before(o.Until) {
		return bad("policy %q identity %q: Until %s is not after now (%s); leave it zero for no end",
			o.Policy, o.Identity, o.Until.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	if len(o.Reason) > MaxReasonLen {
		return bad("policy %q identity %q: Reason is %d bytes, the most is %d", o.Policy, o.Identity, len(o.Reason), MaxReasonLen)
	}
	if !utf8.ValidString(o.Reason) || strings.ContainsFunc(o.Reason, isControl) {
		return bad("policy %q identity %q: Reason must be UTF-8 without control characters", o.Policy, o.Identity)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// checkPolicy applies the adapters' rule for policy names.
func checkPolicy(p string) error {
	if p == "" || len(p) > MaxPolicyLen {
		return fmt.Errorf("%w: policy name %q: want 1 to %d printable ASCII characters", ErrInvalid, p, MaxPolicyLen)
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] > 0x7e {
			return fmt.Errorf("%w: policy name %q: want 1 to %d printable ASCII characters", ErrInvalid, p, MaxPolicyLen)
		}
	}
	return nil
}

func checkIdentity(id string) error {
	if id == "" || len(id) > MaxIdentityLen {
		return fmt.Errorf("%w: identity of %d bytes: want 1 to %d (hash long values first)", ErrInvalid, len(id), MaxIdentityLen)
	}
	return nil
}

// The value stored for an override, one line of space-separated fields:
//
//	UNTIL SET KIND RATE PERIOD BURST REASON
//
// UNTIL and SET in µs since the Unix epoch (UNTIL 0: never; the scripts
// read UNTIL), KIND one of L, E, B, PERIOD in µs, REASON the rest of the
// line (it may hold spaces). The policy is the hash's, the identity the
// field's.

// kindCodes maps a Kind to its letter in the stored value.
const kindCodes = "?LEB"

// micros is t in µs since the Unix epoch, rounded up; 0 for the zero time.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	us := t.UnixMicro()
	if t.Nanosecond()%1000 != 0 {
		us++
	}
	return us
}

// fromMicros is the inverse of micros.
func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

func encode(o *Override) string {
	b := make([]byte, 0, 64+len(o.Reason))
	b = strconv.AppendInt(b, micros(o.Until), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, micros(o.Set), 10)
	b = append(b, ' ', kindCodes[o.Kind], ' ')
	b = strconv.AppendInt(b, o.Rate, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(o.Period/time.Microsecond), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, o.Burst, 10)
	b = append(b, ' ')
	b = append(b, o.Reason...)
	return string(b)
}

// decode reads a stored value of policy's identity.
func decode(policy, identity, v string) (Override, error) {
	o := Override{Policy: policy, Identity: identity}
	fields := [6]int64{}
	rest := v
	for i := range fields {
		f, r, ok := strings.Cut(rest, " ")
		if !ok {
			return Override{}, fmt.Errorf("overrides: policy %q identity %q: malformed value %q", policy, identity, v)
		}
		rest = r
		if i == 2 {
			k := -1
			if len(f) == 1 {
				k = strings.IndexByte(kindCodes, f[0])
			}
			if k < 1 {
				return Override{}, fmt.Errorf("overrides: policy %q identity %q: unknown kind %q in %q", policy, identity, f, v)
			}
			o.Kind = Kind(k)
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return Override{}, fmt.Errorf("overrides: policy %q identity %q: malformed value %q", policy, identity, v)
		}
		fields[i] = n
	}
	if fields[3] > maxRate || fields[4] > int64(maxPeriod/time.Microsecond) || fields[5] > maxRate {
		return Override{}, fmt.Errorf("overrides: policy %q identity %q: value out of range %q", policy, identity, v)
	}
	o.Until, o.Set = fromMicros(fields[0]), fromMicros(fields[1])
	o.Rate, o.Period, o.Burst = fields[3], time.Duration(fields[4])*time.Microsecond, fields[5]
	o.Reason = rest
	return o, nil
}
