package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// The canonical forms (http.CanonicalHeaderKey) of the header names
// writeHeaders sets: it assigns them into the map directly.
const (
	hdrPolicy    = "Ratelimit-Policy"
	hdrRateLimit = "Ratelimit"
	hdrLimit     = "X-Ratelimit-Limit"
	hdrRemaining = "X-Ratelimit-Remaining"
	hdrReset     = "X-Ratelimit-Reset"
	hdrRetry     = "Retry-After"
)

// writeHeaders sets the rate-limit headers of d on h, replacing any values
// they had, as http.Header.Set would.
//
// It allocates twice whatever the headers: the text of every value that
// varies is written into one buffer and converted to one string, which the
// values are substrings of, and the values share one []string, each header
// getting a one-element slice of it with its capacity cut to 1 so that a
// handler appending to one header (Header().Add) copies instead of
// overwriting the next.
func (m *Middleware) writeHeaders(h http.Header, d *Decision) {
	draft := len(d.Outcomes) > 0 && (m.headers == HeadersDraft || m.headers == HeadersBoth)
	legacy := len(d.Outcomes) > 0 && (m.headers == HeadersLegacy || m.headers == HeadersBoth)
	retry := d.Status != http.StatusOK
	degraded := m.degHdr != "" && d.Degraded
	n := 0
	if draft {
		n += 2
	}
	if legacy {
		n += 3
	}
	if retry {
		n++
	}
	if degraded {
		n++
	}
	if n == 0 {
		return
	}

	var stack [256]byte
	b := stack[:0]
	var ends [6]int // where each value written into b ends
	e := 0
	policy := "" // RateLimit-Policy when it is known without writing it
	if draft {
		var pkStack [2]string
		var pks []string // the pk parameter of each outcome, with a secret
		if m.secret != nil {
			pks = pkStack[:0]
			for i := range d.Outcomes {
				pks = append(pks, m.partitionKey(&d.Outcomes[i]))
			}
		}
		if len(d.Outcomes) == 1 && pks == nil {
			policy = d.Outcomes[0].p.Item
		} else {
			for i := range d.Outcomes {
				if i > 0 {
					b = append(b, ", "...)
				}
				b = ratepolicy.AppendPolicyItem(b, d.Outcomes[i].p, pk(pks, i))
			}
		}
		ends[e], e = len(b), e+1
		for i := range d.Outcomes {
			o := &d.Outcomes[i]
			if i > 0 {
				b = append(b, ", "...)
			}
			b = ratepolicy.AppendRateLimitItem(b, o.p, o.Result, o.Denied, pk(pks, i))
		}
		ends[e], e = len(b), e+1
	}
	if legacy {
		o := binding(d)
		reset := o.Result.ResetAfter
		switch {
		case o.Denied && o.Result.RetryAfter == sluice.RetryNever:
			reset = max(reset, o.Limit.Period)
		case o.Denied:
			reset = max(reset, o.Result.RetryAfter)
		}
		at := m.clock().Add(reset)
		unix := at.Unix()
		if at.Nanosecond() > 0 {
			unix++
		}
		b = strconv.AppendInt(b, o.Limit.Rate, 10)
		ends[e], e = len(b), e+1
		b = strconv.AppendInt(b, max(o.Result.Remaining, 0), 10)
		ends[e], e = len(b), e+1
		b = strconv.AppendInt(b, unix, 10)
		ends[e], e = len(b), e+1
	}
	if retry {
		b = strconv.AppendInt(b, int64(d.RetryAfter/time.Second), 10)
		ends[e] = len(b) // the last value written
	}

	text := string(b)
	vals := make([]string, n)
	next, from := 0, 0 // the next value of vals, and of ends
	set := func(key, v string) {
		vals[next] = v
		h[key] = vals[next : next+1 : next+1]
		next++
	}
	value := func() string {
		start := 0
		if from > 0 {
			start = ends[from-1]
		}
		from++
		return text[start:ends[from-1]]
	}
	if draft {
		if v := value(); policy == "" {
			policy = v
		}
		set(hdrPolicy, policy)
		set(hdrRateLimit, value())
	}
	if legacy {
		set(hdrLimit, value())
		set(hdrRemaining, value())
		set(hdrReset, value())
	}
	if retry {
		set(hdrRetry, value())
	}
	if degraded {
		set(m.degHdr, "?1")
	}
}

// binding is the outcome the legacy headers describe: the enforced denial
// with the longest wait, else the policy with the least remaining (the
// first one on a tie).
func binding(d *Decision) *Outcome {
	var best *Outcome
	for i := range d.Outcomes {
		o := &d.Outcomes[i]
		switch {
		case best == nil:
			best = o
		case o.Denied && !o.Shadow:
			if !(best.Denied && !best.Shadow) || resetSeconds(o) > resetSeconds(best) {
				best = o
			}
		case best.Denied && !best.Shadow:
		case o.Result.Remaining < best.Result.Remaining:
			best = o
		}
	}
	return best
}

// partitionKey returns ";pk=:BASE64:" for o, or "" without a secret.
func (m *Middleware) partitionKey(o *Outcome) string {
	return ratepolicy.PartitionKey(m.secret, o.Policy, o.key)
}

// pk is pks[i], or "" when pks is nil.
func pk(pks []string, i int) string {
	if pks == nil {
		return ""
	}
	return pks[i]
}
