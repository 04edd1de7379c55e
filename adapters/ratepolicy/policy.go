package ratepolicy

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
)

// Policy is one quota applied to requests of type R: the fields an
// adapter's own Policy type has, with its KeyFunc and CostFunc as plain
// funcs.
type Policy[R any] struct {
	// Name identifies the policy in RateLimit values, denials, logs and
	// metrics (default Limit.Name): 1 to 64 printable ASCII characters.
	Name string
	// Limit is the quota: a rate limit, or a sluice.Concurrency limit.
	Limit sluice.Limit
	// Key names the identity counted (required); ok = false skips the
	// policy for that request.
	Key func(R) (key string, ok bool)
	// Cost weighs a request (default 1); ignored by concurrency policies.
	Cost func(R) int64
	// Shadow decides and reports, never denies.
	Shadow bool
	// PerMessage marks a policy an adapter charges per message of a
	// stream rather than once at its open (the gRPC adapter's
	// Policy.PerMessage); see Select.
	PerMessage bool
}

// Compiled is a validated Policy with its RateLimit text prepared.
type Compiled[R any] struct {
	Policy[R]
	// quoted is the name as an RFC 9651 sf-String, quotes included.
	quoted string
	// item is the policy's RateLimit-Policy item, without a pk parameter:
	// "name";q=100;w=60, or "name";q=10;qu="concurrent-requests".
	item string
	// Window is the item's w: Limit.Period in seconds, rounded up (0 for
	// concurrency).
	Window int64
	// Conc reports a concurrency policy.
	Conc bool
}

// compile validates p; where names it in the error, which starts with pkg
// (the adapter's package name).
func compile[R any](pkg string, p Policy[R], where string) (*Compiled[R], error) {
	if err := p.Limit.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", pkg, where, err)
	}
	if p.Key == nil {
		return nil, fmt.Errorf("%s: %s: policy %q has no Key", pkg, where, p.Name)
	}
	if p.Name == "" {
		p.Name = p.Limit.Name
	}
	if !validName(p.Name) {
		return nil, fmt.Errorf("%s: %s: policy name %q: want 1 to 64 printable ASCII characters", pkg, where, p.Name)
	}
	c := &Compiled[R]{Policy: p, quoted: sfString(p.Name), Conc: p.Limit.Algorithm == sluice.AlgConcurrency}
	if c.Conc && p.PerMessage {
		return nil, fmt.Errorf("%s: %s: concurrency policy %q cannot be charged per message", pkg, where, p.Name)
	}
	if c.Conc {
		c.item = c.quoted + ";q=" + strconv.FormatInt(p.Limit.Rate, 10) + `;qu="concurrent-requests"`
	} else {
		c.Window = ceilSeconds(p.Limit.Period)
		c.item = c.quoted + ";q=" + strconv.FormatInt(p.Limit.Rate, 10) + ";w=" + strconv.FormatInt(c.Window, 10)
	}
	return c, nil
}

// compileAll compiles ps, naming each where[i] in errors.
func compileAll[R any](pkg string, ps []Policy[R], where string) ([]*Compiled[R], error) {
	out := make([]*Compiled[R], 0, len(ps))
	for i, p := range ps {
		c, err := compile(pkg, p, fmt.Sprintf("%s[%d]", where, i))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// checkDistinct fails when two policies that can apply to the same request
// share a name: RateLimit values and denials tell policies apart by name.
func checkDistinct[R any](pkg string, sets ...[]*Compiled[R]) error {
	var seen []string
	for _, set := range sets {
		for _, p := range set {
			if slices.Contains(seen, p.Name) {
				return fmt.Errorf("%s: two policies named %q can apply to one request", pkg, p.Name)
			}
			seen = append(seen, p.Name)
		}
	}
	return nil
}

// validName reports whether s is a usable policy name: 1 to 64 printable
// ASCII characters.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// sfString serialises an RFC 9651 String (printable ASCII only, as
// validName checks).
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(append(b, '"'))
}

// ceilSeconds rounds d up to whole seconds; never below 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
