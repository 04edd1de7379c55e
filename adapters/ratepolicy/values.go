package ratepolicy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"

	"github.com/sluice-go/sluice"
)

// ResetSeconds is the t parameter of o: on a denial the whole seconds until
// the same cost is admitted (the window w when it never fits); otherwise
// until the quota is whole again (ResetAfter). Concurrency policies that
// admitted report no t (-1): when a slot frees is not known.
func ResetSeconds[R any](o *Outcome[R]) int64 { return ResetSecondsOf(o.P, o.Result, o.Denied) }

// ResetSecondsOf is ResetSeconds of policy p's result res.
func ResetSecondsOf[R any](p *Compiled[R], res sluice.Result, denied bool) int64 {
	switch {
	case denied && res.RetryAfter == sluice.RetryNever:
		return max(p.Window, 1)
	case denied:
		return max(CeilSeconds(res.RetryAfter), 1)
	case p.Conc:
		return -1
	default:
		return CeilSeconds(res.ResetAfter)
	}
}

// AppendPolicyItem appends p's RateLimit-Policy item and pk (a
// PartitionKey parameter, or "").
func AppendPolicyItem[R any](b []byte, p *Compiled[R], pk string) []byte {
	return append(append(b, p.Item...), pk...)
}

// AppendRateLimitItem appends p's RateLimit item for res:
// "name";r=REMAINING;t=SECONDS and pk (t left out for a concurrency policy
// that admitted).
func AppendRateLimitItem[R any](b []byte, p *Compiled[R], res sluice.Result, denied bool, pk string) []byte {
	b = append(b, p.Quoted...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(res.Remaining, 0), 10)
	if t := ResetSecondsOf(p, res, denied); t >= 0 {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	return append(b, pk...)
}

// AppendPolicy appends the RateLimit-Policy value of outcomes: their items
// joined by ", ", each followed by pks[i] when pks is not nil.
func AppendPolicy[R any](b []byte, outcomes []Outcome[R], pks []string) []byte {
	for i := range outcomes {
		if i > 0 {
			b = append(b, ", "...)
		}
		pk := ""
		if pks != nil {
			pk = pks[i]
		}
		b = AppendPolicyItem(b, outcomes[i].P, pk)
	}
	return b
}

// AppendRateLimit appends the RateLimit value of outcomes.
func AppendRateLimit[R any](b []byte, outcomes []Outcome[R], pks []string) []byte {
	for i := range outcomes {
		o := &outcomes[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		pk := ""
		if pks != nil {
			pk = pks[i]
		}
		b = AppendRateLimitItem(b, o.P, o.Result, o.Denied, pk)
	}
	return b
}

// PartitionKey returns ";pk=:BASE64:", the first 96 bits of
// HMAC-SHA256(secret, policy ‖ 0 ‖ key), or "" without a secret.
func PartitionKey(secret []byte, policy, key string) string {
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
