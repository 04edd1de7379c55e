package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testsize"
)

var (
	quickOnce  sync.Once
	quickStudy *Result
	quickErr   error
)

// quick runs the study with -quick once for all tests.
func quick(t *testing.T) *Result {
	t.Helper()
	quickOnce.Do(func() {
		cfg := DefaultConfig()
		cfg.Quick = true
		quickStudy, quickErr = Study(context.Background(), cfg)
	})
	if quickErr != nil {
		t.Fatal(quickErr)
	}
	return quickStudy
}

// stats returns the statistics of algo in scenario key.
func stats(t *testing.T, r *Result, key, algo string) Stats {
	t.Helper()
	for s, sc := range r.Scenarios {
		if sc.Key != key {
			continue
		}
		for _, st := range r.Stats[s] {
			if st.Algo == algo {
				return st
			}
		}
	}
	t.Fatalf("no %s in scenario %s", algo, key)
	return Stats{}
}

func decisions(t *testing.T, r *Result, s int, algo string) []bool {
	t.Helper()
	for _, o := range r.Outcomes[s] {
		if o.Algo == algo {
			return o.Allowed
		}
	}
	t.Fatalf("no %s", algo)
	return nil
}

func TestMaxInWindow(t *testing.T) {
	p := 10 * time.Microsecond
	for _, tc := range []struct {
		ts   []int64
		want int
	}{
		{nil, 0},
		{[]int64{5}, 1},
		{[]int64{0, 9}, 2},
		{[]int64{0, 10}, 1}, // (t-P, t] excludes t-P
		{[]int64{0, 1, 2, 12, 13}, 3},
		{[]int64{0, 3, 3, 3, 12, 13}, 4},
		{[]int64{0, 5, 9, 14, 15, 16, 17}, 5},
	} {
		if got := MaxInWindow(tc.ts, p); got != tc.want {
			t.Errorf("MaxInWindow(%v) = %d, want %d", tc.ts, got, tc.want)
		}
	}
}

func TestPeakExcess(t *testing.T) {
	// L = 1 per 10 µs: n requests over a closed span of d µs exceed the
	// rate by n - d/10; PeakExcessP is 10 times that.
	p := 10 * time.Microsecond
	for _, tc := range []struct {
		ts   []int64
		want int64
	}{
		{nil, 0},
		{[]int64{7}, 10},
		{[]int64{0, 0, 0}, 30},
		{[]int64{0, 10, 20, 30}, 10},    // exactly at the rate
		{[]int64{0, 5, 10, 15}, 25},     // 4 over 15 µs: 40 - 15
		{[]int64{0, 100, 100, 101}, 29}, // the pair at 100 and 101: 30 - 1
	} {
		if got := PeakExcessP(tc.ts, 1, p); got != tc.want {
			t.Errorf("PeakExcessP(%v) = %d, want %d", tc.ts, got, tc.want)
		}
	}
}

func TestExactLog(t *testing.T) {
	got := Exact(2, 10*time.Microsecond, []int64{0, 1, 2, 10, 11, 11, 20, 21})
	want := []bool{true, true, false, true, true, false, true, true}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Exact = %v, want %v", got, want)
		}
	}
}

func TestScenarios(t *testing.T) {
	cfg := DefaultConfig()
	for _, q := range []bool{true, false} {
		cfg.Quick = q
		for _, sc := range Scenarios(cfg) {
			if !sort.SliceIsSorted(sc.Times, func(i, j int) bool { return sc.Times[i] < sc.Times[j] }) {
				t.Errorf("scenario %s: times not sorted", sc.Key)
			}
			if sc.Key == "c" && !q && len(sc.Times) < 50_000 {
				t.Errorf("scenario c has %d requests, want at least 50000", len(sc.Times))
			}
		}
	}
}

// The sliding log script decides exactly as the exact log computed in Go,
// so it never allows more than L in any span of length P.
func TestSlidingLogIsExact(t *testing.T) {
	r := quick(t)
	for _, sc := range r.Scenarios {
		st := stats(t, r, sc.Key, "sliding log")
		if st.MaxWindow > int(r.Cfg.Limit) {
			t.Errorf("(%s) sliding log allowed %d in one period, limit %d", sc.Key, st.MaxWindow, r.Cfg.Limit)
		}
		if st.WronglyAllowed != 0 || st.WronglyDenied != 0 {
			t.Errorf("(%s) sliding log differs from the exact log: %d wrongly allowed, %d wrongly denied",
				sc.Key, st.WronglyAllowed, st.WronglyDenied)
		}
		if st.Allowed == 0 || st.Allowed == len(sc.Times) {
			t.Errorf("(%s) sliding log allowed %d of %d: the scenario does not test the limit", sc.Key, st.Allowed, len(sc.Times))
		}
	}
}

// The fixed window lets through 2L in one period across a boundary.
func TestFixedWindowBoundary(t *testing.T) {
	r := quick(t)
	l := int(r.Cfg.Limit)
	st := stats(t, r, "a", "fixed window")
	if st.MaxWindow != 2*l || st.Allowed != 2*l {
		t.Errorf("(a) fixed window: max in one period %d, allowed %d; want %d and %d", st.MaxWindow, st.Allowed, 2*l, 2*l)
	}
	// Still never more than L in one aligned window.
	p := r.Cfg.Period.Microseconds()
	for s, sc := range r.Scenarios {
		per := map[int64]int{}
		for i, ok := range decisions(t, r, s, "fixed window") {
			if ok {
				per[sc.Times[i]/p]++
			}
		}
		for w, n := range per {
			if n > l {
				t.Errorf("(%s) fixed window allowed %d in window %d", sc.Key, n, w)
			}
		}
	}
}

// GCRA and the token bucket never let through more than B + L·t/P in any
// span t, and decide identically.
func TestBucketBound(t *testing.T) {
	r := quick(t)
	bp := r.Cfg.Burst * r.Cfg.Period.Microseconds()
	for s, sc := range r.Scenarios {
		for _, algo := range []string{"token bucket", "GCRA"} {
			st := stats(t, r, sc.Key, algo)
			if st.PeakExcessP > bp {
				t.Errorf("(%s) %s: peak burst %.3f above B = %d", sc.Key, algo, st.PeakExcess(r.Cfg.Period), r.Cfg.Burst)
			}
		}
		tb, g := decisions(t, r, s, "token bucket"), decisions(t, r, s, "GCRA")
		for i := range tb {
			if tb[i] != g[i] {
				t.Errorf("(%s) request %d: token bucket allowed=%v, GCRA allowed=%v", sc.Key, i, tb[i], g[i])
				break
			}
		}
	}
	// The bound is reached: a full bucket spent at once.
	if st := stats(t, r, "a", "GCRA"); st.PeakExcessP != bp {
		t.Errorf("(a) GCRA peak burst %.3f, want exactly B = %d", st.PeakExcess(r.Cfg.Period), r.Cfg.Burst)
	}
}

// The sliding window counter stays near L in (a) but not in (d), its
// worst case, where it approaches 2L.
func TestSlidingWindowCounter(t *testing.T) {
	r := quick(t)
	l := int(r.Cfg.Limit)
	if st := stats(t, r, "a", "sliding window counter"); st.MaxWindow > l+l/50 {
		t.Errorf("(a) sliding window counter allowed %d in one period", st.MaxWindow)
	}
	if st := stats(t, r, "d", "sliding window counter"); st.MaxWindow < 19*l/10 || st.MaxWindow >= 2*l {
		t.Errorf("(d) sliding window counter allowed %d in one period, want in [1.9L, 2L)", st.MaxWindow)
	}
}

// The command prints the same tables and writes the same plots as a
// separate run of the study with the same seed: same seed, same bytes
// (with SLUICE_TEST_FULL=1 only).
func TestDeterministic(t *testing.T) {
	if !testsize.Full() {
		t.Skip("a second run of the whole study, 10s: with SLUICE_TEST_FULL=1, which CI sets")
	}
	r := quick(t)
	dir := filepath.Join(t.TempDir(), "img")
	var out, errb bytes.Buffer
	if code := run([]string{"-quick", "-seed", "1", "-out", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got, want := out.String(), r.Markdown(); got != want {
		t.Errorf("two runs with seed %d printed different tables:\n%s\n---\n%s", r.Cfg.Seed, got, want)
	}
	plots := r.Plots()
	if len(plots) == 0 {
		t.Fatal("no plots")
	}
	for name, b := range plots {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s differs between two runs", name)
		}
	}
	// A different seed changes scenario c.
	cfg := r.Cfg
	cfg.Seed++
	a, b := Scenarios(r.Cfg)[2].Times, Scenarios(cfg)[2].Times
	if len(a) == len(b) && a[0] == b[0] && a[len(a)-1] == b[len(b)-1] {
		t.Errorf("seeds %d and %d gave the same traffic", r.Cfg.Seed, cfg.Seed)
	}
}

// Every plot is well-formed XML with a title, axes and one path per series.
func TestPlotsAreSVG(t *testing.T) {
	r := quick(t)
	names := []string{}
	for name, b := range r.Plots() {
		names = append(names, name)
		dec := xml.NewDecoder(bytes.NewReader(b))
		paths, texts := 0, 0
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if se, ok := tok.(xml.StartElement); ok {
				switch se.Name.Local {
				case "path":
					paths++
				case "text":
					texts++
				}
			}
		}
		if paths < len(r.Algos)+1 || texts < 10 {
			t.Errorf("%s: %d paths and %d texts", name, paths, texts)
		}
		for _, a := range r.Algos {
			if !bytes.Contains(b, []byte(">"+a.Name+"<")) {
				t.Errorf("%s: no legend entry for %s", name, a.Name)
			}
		}
	}
	sort.Strings(names)
	if got := strings.Join(names, " "); got != "boundary.svg poisson.svg steady.svg worst-case.svg" {
		t.Errorf("plots: %s", got)
	}
}

func TestRunFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-bogus"}, &out, &errb); code != 2 {
		t.Errorf("-bogus: exit %d, want 2", code)
	}
	if code := run([]string{"extra"}, &out, &errb); code != 2 {
		t.Errorf("extra argument: exit %d, want 2", code)
	}
	if code := run([]string{"-h"}, &out, &errb); code != 0 {
		t.Errorf("-h: exit %d, want 0", code)
	}
}

// No drift: at 3 per second with burst 5, GCRA and the token bucket admit
// the k-th request after the burst at exactly ceil(k·10⁶/3) µs, so over
// 1000 s (300 s unless SLUICE_TEST_FULL=1, internal/testsize) exactly
// 3·seconds + 5 requests pass, however long it runs. The loop
// waits exactly retry_after each time and checks that 1 µs less is denied.
func TestNoDrift(t *testing.T) {
	ctx := context.Background()
	const burst = 5
	seconds := testsize.Pick(300, 1000)
	for _, lim := range []sluice.Limit{
		sluice.Must(sluice.GCRA(3, time.Second, burst)),
		sluice.Must(sluice.TokenBucket(3, time.Second, burst)),
	} {
		t.Run(string(lim.Algorithm), func(t *testing.T) {
			start := origin
			s, err := NewSim(start)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			allowed := 0
			for {
				r, err := s.AllowN(ctx, lim, 1)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed {
					want := start // the burst
					if k := int64(allowed - burst + 1); k > 0 {
						want = start + (k*1_000_000+2)/3 // the k-th after it: ceil(k·10⁶/3)
					}
					if s.Now() != want {
						t.Fatalf("request %d allowed at +%d µs, want +%d µs", allowed+1, s.Now()-start, want-start)
					}
					allowed++
					continue
				}
				wait := r.RetryAfter.Microseconds()
				if wait < 1 {
					t.Fatalf("denied with retry_after %v", r.RetryAfter)
				}
				if wait > 1 {
					s.Set(s.Now() + wait - 1)
					if r, err := s.AllowN(ctx, lim, 1); err != nil || r.Allowed {
						t.Fatalf("allowed 1 µs before retry_after (err %v)", err)
					}
					s.Set(s.Now() + 1)
				} else {
					s.Set(s.Now() + wait)
				}
				if s.Now() > start+int64(seconds)*1_000_000 {
					break
				}
			}
			if allowed != 3*seconds+burst {
				t.Errorf("allowed %d over %d s, want %d", allowed, seconds, 3*seconds+burst)
			}
		})
	}
}
