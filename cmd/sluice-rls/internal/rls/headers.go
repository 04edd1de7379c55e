package rls

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
	"github.com/sluice-go/sluice/cmd/sluice-rls/internal/rlsconf"
	"github.com/sluice-go/sluice/overrides"
)

// req is the request type of the header policies: they are never asked
// for a key.
type req = struct{}

// headerPolicies are the rules as ratepolicy's compiled policies, whose
// RateLimit-Policy items are prepared once per configuration.
type headerPolicies struct {
	compiled map[*rlsconf.Rule]*ratepolicy.Compiled[req]
}

// newHeaderPolicies compiles the rules that have a Limit.
func newHeaderPolicies(lim *sluice.Limiter, rules []*rlsconf.Rule) (*headerPolicies, error) {
	hp := &headerPolicies{compiled: map[*rlsconf.Rule]*ratepolicy.Compiled[req]{}}
	noKey := func(req) (string, bool) { return "", false }
	routes := map[string][]ratepolicy.Policy[req]{}
	for i, r := range rules {
		if r.Limit.Algorithm == "" {
			continue
		}
		routes[strconv.Itoa(i)] = []ratepolicy.Policy[req]{{Name: headerName(r), Limit: r.Limit, Key: noKey}}
	}
	if len(routes) == 0 {
		return hp, nil
	}
	eng, err := ratepolicy.New(ratepolicy.Config[req]{Pkg: "rls", Limiter: lim, Routes: routes, RoutesField: "rules"})
	if err != nil {
		return nil, err
	}
	for k, ps := range eng.Routes() {
		i, _ := strconv.Atoi(k)
		hp.compiled[rules[i]] = ps[0]
	}
	return hp, nil
}

// headerName is a rule's name in RateLimit headers: its name, else its
// key, cut to 64 printable characters.
func headerName(r *rlsconf.Rule) string {
	for _, s := range []string{r.Name, r.Key} {
		if s != "" && len(s) <= 64 && printable(s) {
			return s
		}
	}
	b := []byte(r.Key)
	if len(b) > 64 {
		b = b[:64]
	}
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// headers are the response_headers_to_add of a decided request.
func (s *Service) headers(st *state, w *work, now time.Time) []*corev3.HeaderValue {
	if s.o.Headers == HeadersNone {
		return nil
	}
	w.outs = w.outs[:0]
	bind := -1 // the item the legacy headers describe
	for i := range w.items {
		it := &w.items[i]
		if it.kind != kindChecked && it.kind != kindBlocked {
			continue
		}
		p := st.headers.compiled[it.header]
		if p == nil {
			continue
		}
		o := ratepolicy.Outcome[req]{P: p, Limit: it.limit, Result: it.res, Denied: it.over, Shadow: it.shadow, Override: it.override}
		if it.rule != it.header {
			o.Override = overrides.Limit // a descriptor's own limit
		}
		w.outs = append(w.outs, o)
		if bind < 0 || binds(it, &w.items[bind]) {
			bind = i
		}
	}
	if len(w.outs) == 0 {
		return nil
	}
	var hv []*corev3.HeaderValue
	if s.o.Headers == HeadersDraft || s.o.Headers == HeadersBoth {
		b, d := ratepolicy.AppendDraft(w.buf[:0], w.outs, nil)
		w.buf = b
		policy, rateLimit := d.Values(string(b))
		hv = append(hv, &corev3.HeaderValue{Key: "RateLimit-Policy", Value: policy}, &corev3.HeaderValue{Key: "RateLimit", Value: rateLimit})
	}
	if s.o.Headers == HeadersLegacy || s.o.Headers == HeadersBoth {
		it := &w.items[bind]
		reset := now.Add(it.reset)
		unix := reset.Unix()
		if reset.Nanosecond() > 0 {
			unix++
		}
		hv = append(hv,
			&corev3.HeaderValue{Key: "X-RateLimit-Limit", Value: strconv.FormatInt(it.limit.Rate, 10)},
			&corev3.HeaderValue{Key: "X-RateLimit-Remaining", Value: strconv.FormatInt(max(it.res.Remaining, 0), 10)},
			&corev3.HeaderValue{Key: "X-RateLimit-Reset", Value: strconv.FormatInt(unix, 10)})
	}
	return hv
}

// binds reports whether item a describes the request rather than b: an
// enforced refusal before anything else (the longest wait first), then
// the least remaining.
func binds(a, b *item) bool {
	ad, bd := a.over && !a.shadow, b.over && !b.shadow
	switch {
	case ad != bd:
		return ad
	case ad:
		return a.reset > b.reset
	}
	return a.res.Remaining < b.res.Remaining
}
