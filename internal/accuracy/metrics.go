package main

import "time"

// Stats summarises one algorithm's decisions in one scenario.
type Stats struct {
	Algo     string
	Requests int
	Allowed  int
	Exact    int // allowed by the exact sliding log
	// MaxWindow is the most requests allowed in any span (t-P, t], over
	// every t: a true sliding maximum.
	MaxWindow int
	// PeakExcessP is P times the largest value of n - L·d/P over every
	// closed span [t1, t2] of length d holding n allowed requests: the burst
	// the algorithm let through beyond the steady rate. A token bucket or
	// GCRA of burst B keeps it at most B·P.
	PeakExcessP int64
	// WronglyAllowed and WronglyDenied count decisions that differ from the
	// exact sliding log's decision on the same request (each run on its
	// own, with its own state).
	WronglyAllowed, WronglyDenied int
}

// PeakExcess is PeakExcessP in requests.
func (s Stats) PeakExcess(period time.Duration) float64 {
	return float64(s.PeakExcessP) / float64(period.Microseconds())
}

// Measure computes the statistics of allowed against the exact reference.
func Measure(algo string, cfg Config, times []int64, allowed, exact []bool) Stats {
	st := Stats{Algo: algo, Requests: len(times)}
	var adm []int64
	for i, ok := range allowed {
		if ok {
			adm = append(adm, times[i])
			st.Allowed++
		}
		if exact[i] {
			st.Exact++
		}
		switch {
		case ok && !exact[i]:
			st.WronglyAllowed++
		case !ok && exact[i]:
			st.WronglyDenied++
		}
	}
	st.MaxWindow = MaxInWindow(adm, cfg.Period)
	st.PeakExcessP = PeakExcessP(adm, cfg.Limit, cfg.Period)
	return st
}

// MaxInWindow returns the most timestamps of ts (sorted) in any span
// (t-P, t]. The maximum is reached with t at one of the timestamps.
func MaxInWindow(ts []int64, period time.Duration) int {
	p := period.Microseconds()
	best, i := 0, 0
	for j, t := range ts {
		for ts[i] <= t-p {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

// PeakExcessP returns P × max over i <= j of (j-i+1) - L·(ts[j]-ts[i])/P,
// in exact integers, for sorted ts: the largest number of requests in a
// closed span beyond what the rate L/P refills over it. It is 0 for no
// requests.
func PeakExcessP(ts []int64, limit int64, period time.Duration) int64 {
	if len(ts) == 0 {
		return 0
	}
	p := period.Microseconds()
	t0 := ts[0]
	var best int64
	// f(k) = k·P - L·(ts[k]-t0); the excess of [ts[i], ts[j]] is
	// f(j) + P - f(i). Keep the least f(i) so far (ties in time: the first
	// index has the least f, so the span includes them all).
	minF := int64(0)
	for j, t := range ts {
		f := int64(j)*p - limit*(t-t0)
		minF = min(minF, f)
		best = max(best, f+p-minF)
	}
	return best
}
