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
// values are substrings of (each found by where it was written, whatever
// the order), and the values share one []string, each header getting a
// one-element slice of it with its capacity cut to 1 so that a handler
// appending to one header (Header().Add) copies instead of overwriting the
// next.
func (st *state) writeHeaders(h http.Header, d *Decision) {
	set := st.headerSet(d)
	n := set.count()
	if n == 0 {
		return
	}
	var stack [256]byte
	b := stack[:0]
	var draft ratepolicy.Draft
	var legacy legacyValues
	var retry span
	if set.draft {
		// d.core's outcomes are the ones d.Outcomes copies, in order.
		b, draft = ratepolicy.AppendDraft(b, d.core.Outcomes, st.secret)
	}
	if set.legacy {
		b, legacy = appendLegacy(b, binding(d), st.clock())
	}
	if set.retry {
		b, retry = appendInt(b, int64(d.RetryAfter/time.Second))
	}
	text := string(b)
	w := headerSetter{h: h, vals: make([]string, n)}
	if set.draft {
		policy, rateLimit := draft.Values(text)
		w.set(hdrPolicy, policy)
		w.set(hdrRateLimit, rateLimit)
	}
	if set.legacy {
		w.set(hdrLimit, legacy.limit.of(text))
		w.set(hdrRemaining, legacy.remaining.of(text))
		w.set(hdrReset, legacy.reset.of(text))
	}
	if set.retry {
		w.set(hdrRetry, retry.of(text))
	}
	if set.degraded {
		w.set(st.degHdr, "?1")
	}
}

// headerSet is which headers writeHeaders sets for a decision.
type headerSet struct {
	draft    bool // RateLimit-Policy and RateLimit
	legacy   bool // X-RateLimit-Limit, -Remaining and -Reset
	retry    bool // Retry-After
	degraded bool // the DegradedHeader
}

// headerSet is which headers d gets under st's HeaderMode and DegradedHeader.
func (st *state) headerSet(d *Decision) headerSet {
	some := len(d.Outcomes) > 0
	return headerSet{
		draft:    some && (st.headers == HeadersDraft || st.headers == HeadersBoth),
		legacy:   some && (st.headers == HeadersLegacy || st.headers == HeadersBoth),
		retry:    d.Status != http.StatusOK,
		degraded: st.degHdr != "" && d.Degraded,
	}
}

// count is the number of headers in s.
func (s headerSet) count() int {
	n := 0
	if s.draft {
		n += 2
	}
	if s.legacy {
		n += 3
	}
	if s.retry {
		n++
	}
	if s.degraded {
		n++
	}
	return n
}

// span is where one header value lies in the text writeHeaders builds.
type span struct{ start, end int }

// of is the value in text.
func (s span) of(text string) string { return text[s.start:s.end] }

// appendInt appends v to b, and returns where it lies.
func appendInt(b []byte, v int64) ([]byte, span) {
	start := len(b)
	b = strconv.AppendInt(b, v, 10)
	return b, span{start, len(b)}
}

// legacyValues is where the X-RateLimit-* values lie.
type legacyValues struct{ limit, remaining, reset span }

// appendLegacy appends the X-RateLimit-* values of o to b, the reset as
// the Unix second, rounded up, at which now plus o's wait falls.
func appendLegacy(b []byte, o *Outcome, now time.Time) ([]byte, legacyValues) {
	at := now.Add(legacyReset(o))
	unix := at.Unix()
	if at.Nanosecond() > 0 {
		unix++
	}
	var v legacyValues
	b, v.limit = appendInt(b, o.Limit.Rate)
	b, v.remaining = appendInt(b, max(o.Result.Remaining, 0))
	b, v.reset = appendInt(b, unix)
	return b, v
}

// legacyReset is how long until o's X-RateLimit-Reset: until the quota is
// whole again, and on a denial at least until the request would be
// admitted (its period when it never would).
func legacyReset(o *Outcome) time.Duration {
	reset := o.Result.ResetAfter
	switch {
	case o.Denied && o.Result.RetryAfter == sluice.RetryNever:
		reset = max(reset, o.Limit.Period)
	case o.Denied:
		reset = max(reset, o.Result.RetryAfter)
	}
	return reset
}

// headerSetter sets headers to values that share one []string.
type headerSetter struct {
	h    http.Header
	vals []string
	next int // the next element of vals
}

// set sets key to v, a one-element slice of vals with its capacity cut to 1.
func (w *headerSetter) set(key, v string) {
	w.vals[w.next] = v
	w.h[key] = w.vals[w.next : w.next+1 : w.next+1]
	w.next++
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
