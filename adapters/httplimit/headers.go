package httplimit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
)

// writeHeaders sets the rate-limit headers of d on h.
func (m *Middleware) writeHeaders(h http.Header, d *Decision) {
	if len(d.Outcomes) > 0 && (m.headers == HeadersDraft || m.headers == HeadersBoth) {
		var pol, rl strings.Builder
		for i := range d.Outcomes {
			o := &d.Outcomes[i]
			pk := m.partitionKey(o)
			if i > 0 {
				pol.WriteString(", ")
				rl.WriteString(", ")
			}
			pol.WriteString(o.p.item)
			pol.WriteString(pk)
			rl.WriteString(o.p.name)
			rl.WriteString(";r=")
			rl.WriteString(strconv.FormatInt(max(o.Result.Remaining, 0), 10))
			if t := resetSeconds(o); t >= 0 {
				rl.WriteString(";t=")
				rl.WriteString(strconv.FormatInt(t, 10))
			}
			rl.WriteString(pk)
		}
		h.Set("RateLimit-Policy", pol.String())
		h.Set("RateLimit", rl.String())
	}
	if len(d.Outcomes) > 0 && (m.headers == HeadersLegacy || m.headers == HeadersBoth) {
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
		h.Set("X-RateLimit-Limit", strconv.FormatInt(o.Limit.Rate, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(max(o.Result.Remaining, 0), 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(unix, 10))
	}
	if d.Status != http.StatusOK {
		h.Set("Retry-After", strconv.FormatInt(int64(d.RetryAfter/time.Second), 10))
	}
	if m.degHdr != "" && d.Degraded {
		h.Set(m.degHdr, "?1")
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
	if m.secret == nil {
		return ""
	}
	mac := hmac.New(sha256.New, m.secret)
	mac.Write([]byte(o.Policy))
	mac.Write([]byte{0})
	mac.Write([]byte(o.key))
	sum := mac.Sum(nil)
	return ";pk=:" + base64.StdEncoding.EncodeToString(sum[:12]) + ":"
}
