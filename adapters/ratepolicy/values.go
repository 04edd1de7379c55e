package ratepolicy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/overrides"
)

// resetSeconds is the t parameter of o: on a denial the whole seconds until
// the same cost is admitted (the window w when it never fits); otherwise
// until the quota is whole again (ResetAfter). Concurrency policies that
// admitted report no t (-1): when a slot frees is not known.
func resetSeconds[R any](o *Outcome[R]) int64 { return ResetSecondsOf(o.P, o.Result, o.Denied) }

// ResetSecondsOf is resetSeconds of policy p's result res. A cost that
// never fits waits the window of the limit res was decided under
// (res.Limit: an override's period may differ from the policy's).
func ResetSecondsOf[R any](p *Compiled[R], res sluice.Result, denied bool) int64 {
	switch {
	case denied && res.RetryAfter == sluice.RetryNever:
		w := p.Window
		if res.Limit.Period > 0 {
			w = WindowSeconds(res.Limit)
		}
		return max(w, 1)
	case denied:
		return max(ceilSeconds(res.RetryAfter), 1)
	case p.Conc:
		return -1
	default:
		return ceilSeconds(res.ResetAfter)
	}
}

// WindowSeconds is the w of limit l in RateLimit-Policy: its period in
// seconds, rounded up (0 for a concurrency limit).
func WindowSeconds(l sluice.Limit) int64 {
	if l.Algorithm == sluice.AlgConcurrency {
		return 0
	}
	return ceilSeconds(l.Period)
}

// appendPolicyItem appends o's RateLimit-Policy item and pk (a
// partitionKey parameter, or ""): the policy's prepared item, or, when a
// Limit override changed its limit, one written for the limit applied.
func appendPolicyItem[R any](b []byte, o *Outcome[R], pk string) []byte {
	p := o.P
	if o.Override != overrides.Limit {
		return append(append(b, p.item...), pk...)
	}
	b = append(b, p.quoted...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, o.Limit.Rate, 10)
	if p.Conc {
		b = append(b, `;qu="concurrent-requests"`...)
	} else {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, WindowSeconds(o.Limit), 10)
	}
	return append(b, pk...)
}

// appendRateLimitItem appends p's RateLimit item for res:
// "name";r=REMAINING;t=SECONDS and pk (t left out for a concurrency policy
// that admitted).
func appendRateLimitItem[R any](b []byte, p *Compiled[R], res sluice.Result, denied bool, pk string) []byte {
	b = append(b, p.quoted...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(res.Remaining, 0), 10)
	if t := ResetSecondsOf(p, res, denied); t >= 0 {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	return append(b, pk...)
}

// appendPolicy appends the RateLimit-Policy value of outcomes: their items
// joined by ", ", each followed by pks[i] when pks is not nil.
func appendPolicy[R any](b []byte, outcomes []Outcome[R], pks []string) []byte {
	for i := range outcomes {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendPolicyItem(b, &outcomes[i], pkAt(pks, i))
	}
	return b
}

// appendRateLimit appends the RateLimit value of outcomes.
func appendRateLimit[R any](b []byte, outcomes []Outcome[R], pks []string) []byte {
	for i := range outcomes {
		o := &outcomes[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendRateLimitItem(b, o.P, o.Result, o.Denied, pkAt(pks, i))
	}
	return b
}

// pkAt is pks[i], or "" when pks is nil.
func pkAt(pks []string, i int) string {
	if pks == nil {
		return ""
	}
	return pks[i]
}

// Draft locates the two values AppendDraft wrote: the RateLimit-Policy
// value and the RateLimit value of draft-ietf-httpapi-ratelimit-headers-11
// (the HTTP headers, and the gRPC adapter's ratelimit-policy and ratelimit
// metadata).
type Draft struct {
	// policy is the RateLimit-Policy value when it is known without being
	// written: the item of a lone policy without a pk parameter.
	policy string
	// The RateLimit-Policy value is text[start:mid] (unless policy is
	// set), the RateLimit value text[mid:end].
	start, mid, end int
}

// AppendDraft appends to b the RateLimit-Policy value of outcomes, then
// their RateLimit value, each item followed by its pk parameter (see
// partitionKey) when secret is not nil. The RateLimit-Policy value of a
// lone policy without a pk parameter or a Limit override is its prepared
// item, and is not appended. An item reports the limit applied
// (Outcome.Limit).
//
// The values are found with Draft.Values in the text of the bytes
// returned (more may be appended to them before the text is made), so
// that an adapter converts all its values into one string at once.
func AppendDraft[R any](b []byte, outcomes []Outcome[R], secret []byte) ([]byte, Draft) {
	var pkStack [2]string
	var pks []string // the pk parameter of each outcome, with a secret
	if secret != nil {
		pks = pkStack[:0]
		for i := range outcomes {
			pks = append(pks, partitionKey(secret, outcomes[i].P.Name, outcomes[i].Key))
		}
	}
	d := Draft{start: len(b)}
	if len(outcomes) == 1 && pks == nil && outcomes[0].Override != overrides.Limit {
		d.policy = outcomes[0].P.item
	} else {
		b = appendPolicy(b, outcomes, pks)
	}
	d.mid = len(b)
	b = appendRateLimit(b, outcomes, pks)
	d.end = len(b)
	return b, d
}

// Values returns the RateLimit-Policy and RateLimit values, substrings of
// text (when written there): text is the string of the bytes AppendDraft
// returned, or of bytes that start with them.
func (d Draft) Values(text string) (policy, rateLimit string) {
	policy = d.policy
	if policy == "" {
		policy = text[d.start:d.mid]
	}
	return policy, text[d.mid:d.end]
}

// partitionKey returns ";pk=:BASE64:", the first 96 bits of
// HMAC-SHA256(secret, policy ‖ 0 ‖ key), or "" without a secret.
func partitionKey(secret []byte, policy, key string) string {
	if secret == nil {
		return ""
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(policy))
	mac.Write([]byte{0})
	mac.Write([]byte(key))
	sum := mac.Sum(nil)
	return ";pk=:" + base64.StdEncoding.EncodeToString(sum[:12]) + ":"
}
