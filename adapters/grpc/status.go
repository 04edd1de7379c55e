package grpclimit

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// The ErrorInfo reasons of refusals.
const (
	// ReasonRateLimited is the reason of a refusal by a quota
	// (codes.ResourceExhausted).
	ReasonRateLimited = "RATE_LIMITED"
	// ReasonLimiterUnavailable is the reason of a refusal because the
	// Limiter fails closed while Redis is unavailable (codes.Unavailable).
	ReasonLimiterUnavailable = "RATE_LIMITER_UNAVAILABLE"
)

// retryDelay is how long a refused call waits: the longest wait among the
// enforced policies that refused it (a cost that can never fit waits its
// policy's window), rounded up to the millisecond; 1 s when the failure
// policy gave none.
func retryDelay(d *ratepolicy.Decision[*Call]) time.Duration {
	var wait time.Duration
	for i := range d.Outcomes {
		o := &d.Outcomes[i]
		if !o.Denied || o.Shadow {
			continue
		}
		w := o.Result.RetryAfter
		if w == sluice.RetryNever {
			w = o.Limit.Period
		}
		wait = max(wait, w)
	}
	if wait <= 0 {
		return time.Second
	}
	return (wait + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// pushback is the grpc-retry-pushback-ms trailer of a refusal.
func pushback(d *ratepolicy.Decision[*Call]) metadata.MD {
	return metadata.MD{MetadataPushback: {strconv.FormatInt(retryDelay(d).Milliseconds(), 10)}}
}

// refusal is the status of a refused call: ResourceExhausted with
// RetryInfo, QuotaFailure (one violation per enforced policy that
// refused) and ErrorInfo (reason RATE_LIMITED, metadata "policies": their
// names, comma-separated); Unavailable with RetryInfo and ErrorInfo
// (RATE_LIMITER_UNAVAILABLE) when only the failure policy of a Limiter
// failing closed refused. Nothing in it comes from Redis.
func (v *state) refusal(d *ratepolicy.Decision[*Call]) error {
	delay := retryDelay(d)
	secs := strconv.FormatInt(d.Wait, 10)
	names := d.Violated()
	info := &errdetails.ErrorInfo{Reason: ReasonRateLimited, Domain: v.domain,
		Metadata: map[string]string{"policies": strings.Join(names, ",")}}
	retry := &errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}
	if d.Unavailable {
		info.Reason = ReasonLimiterUnavailable
		st, err := status.New(codes.Unavailable, "The rate limiter is unavailable; retry in "+secs+" s.").WithDetails(retry, info)
		if err != nil {
			return status.Error(codes.Unavailable, "The rate limiter is unavailable; retry in "+secs+" s.")
		}
		return st.Err()
	}
	quota := &errdetails.QuotaFailure{}
	var parts []string
	for i := range d.Outcomes {
		o := &d.Outcomes[i]
		if !o.Denied || o.Shadow {
			continue
		}
		desc := o.P.Name + " (" + strconv.FormatInt(o.Limit.Rate, 10) + " per " + strconv.FormatInt(ratepolicy.WindowSeconds(o.Limit), 10) + " s)"
		if o.P.Conc {
			desc = o.P.Name + " (" + strconv.FormatInt(o.Limit.Rate, 10) + " in flight)"
		}
		parts = append(parts, desc)
		quota.Violations = append(quota.Violations, &errdetails.QuotaFailure_Violation{
			Subject: "policy:" + o.P.Name, Description: "Quota exceeded for " + desc + ".",
		})
	}
	msg := "Quota exceeded for " + strings.Join(parts, ", ") + "; retry in " + secs + " s."
	st, err := status.New(codes.ResourceExhausted, msg).WithDetails(retry, quota, info)
	if err != nil {
		return status.Error(codes.ResourceExhausted, msg)
	}
	return st.Err()
}

// RetryDelay returns the RetryInfo delay of err's status, when it has
// one: how long the server asked the client to wait before retrying.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || st == nil {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}

// IsRateLimited reports whether err is a refusal by a rate limit: a
// ResourceExhausted status whose ErrorInfo has reason RATE_LIMITED (any
// domain), so a quota can be told from an out-of-memory or message-size
// RESOURCE_EXHAUSTED.
func IsRateLimited(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == ReasonRateLimited {
			return true
		}
	}
	return false
}

var errNoLimit = errors.New("grpclimit: ClientConfig.Limiter without a Limit")
