package httplimit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// The problem types of draft-ietf-httpapi-ratelimit-headers-11.
const (
	// ProblemQuotaExceeded is the type of a 429: the client exceeded one or
	// more quota policies.
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// ProblemTemporaryReducedCapacity is the type of a 503 sent when the
	// limiter fails closed: the server cannot serve the request for now.
	ProblemTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// Problem is an RFC 9457 problem details object. Fields marshal in this
// order; empty ones are left out.
type Problem struct {
	Type     string `json:"type,omitempty"`
	Title    string `json:"title,omitempty"`
	Status   int    `json:"status,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// ViolatedPolicies names the policies that denied (the draft's
	// extension member).
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// Problem returns the problem details of a denial: quota-exceeded with 429,
// or temporary-reduced-capacity with 503. Instance is the request path;
// detail names the policies and the wait. Nothing in it comes from Redis.
func (d *Decision) Problem(r *http.Request) Problem {
	p := Problem{Status: d.Status, ViolatedPolicies: d.Violated()}
	if r != nil && r.URL != nil {
		p.Instance = r.URL.EscapedPath()
	}
	secs := strconv.FormatInt(int64(d.RetryAfter.Seconds()), 10)
	if d.Status == http.StatusServiceUnavailable {
		p.Type = ProblemTemporaryReducedCapacity
		p.Title = "Temporarily reduced capacity"
		p.Detail = "The rate limiter is unavailable; retry in " + secs + " s."
		return p
	}
	p.Type = ProblemQuotaExceeded
	p.Title = "Quota exceeded"
	var names []string
	for _, o := range d.Outcomes {
		if o.Denied && !o.Shadow {
			names = append(names, fmt.Sprintf("%s (%d per %d s)", o.Policy, o.Limit.Rate, ratepolicy.WindowSeconds(o.Limit)))
			if o.p.Conc {
				names[len(names)-1] = fmt.Sprintf("%s (%d in flight)", o.Policy, o.Limit.Rate)
			}
		}
	}
	p.Detail = "Quota exceeded for " + strings.Join(names, ", ") + "; retry in " + secs + " s."
	return p
}

// WriteProblem writes p as application/problem+json with status p.Status
// (500 if unset).
func WriteProblem(w http.ResponseWriter, p Problem) {
	if p.Status == 0 {
		p.Status = http.StatusInternalServerError
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		buf.Reset()
		buf.WriteString(`{"status":` + strconv.Itoa(p.Status) + "}\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(p.Status)
	_, _ = w.Write(buf.Bytes())
}
