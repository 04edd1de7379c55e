// Command accuracy measures how closely sluice's rate-limiting algorithms
// follow an exact sliding log. It sends simulated traffic through the real
// Lua scripts (a sluice.Limiter on an embedded miniredis whose clock is
// driven by the simulation, so nothing sleeps), computes the exact sliding
// log in plain Go as the reference, prints markdown tables to stdout and
// writes SVG plots. docs/algorithms.md reports its output.
//
// Usage, from the repository root:
//
//	go run ./internal/accuracy [-out docs/img] [-seed 1] [-quick]
//
// The same flags give the same bytes on stdout and in every plot.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("accuracy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "docs/img", "directory for the SVG plots (created if missing); empty writes none")
	seed := fs.Uint64("seed", 1, "seed of the random traffic of scenario c")
	quick := fs.Bool("quick", false, "simulate 1 hour of scenario c instead of 10 (about 6k requests instead of 60k)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./internal/accuracy [-out DIR] [-seed N] [-quick]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "accuracy: unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		fs.Usage()
		return 2
	}
	cfg := DefaultConfig()
	cfg.Seed, cfg.Quick = *seed, *quick
	study, err := Study(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if _, err := io.WriteString(stdout, study.Markdown()); err != nil {
		fmt.Fprintf(stderr, "accuracy: %v\n", err)
		return 1
	}
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			fmt.Fprintf(stderr, "accuracy: %v\n", err)
			return 1
		}
		for name, svg := range study.Plots() {
			if err := os.WriteFile(filepath.Join(*out, name), svg, 0o644); err != nil {
				fmt.Fprintf(stderr, "accuracy: %v\n", err)
				return 1
			}
		}
	}
	return 0
}

// Result is a finished study.
type Result struct {
	Cfg       Config
	Scenarios []Scenario
	Algos     []Algo
	Outcomes  [][]Outcome // [scenario][0] is the exact log, then one per algorithm
	Stats     [][]Stats   // same shape as Outcomes
}

// Study runs every scenario through every algorithm.
func Study(ctx context.Context, cfg Config) (*Result, error) {
	algos, err := Algos(cfg)
	if err != nil {
		return nil, err
	}
	scens := Scenarios(cfg)
	outs, err := RunAll(ctx, cfg, scens, algos)
	if err != nil {
		return nil, err
	}
	r := &Result{Cfg: cfg, Scenarios: scens, Algos: algos, Outcomes: outs}
	for s, sc := range scens {
		exact := outs[s][0].Allowed
		var row []Stats
		for _, o := range outs[s] {
			row = append(row, Measure(o.Algo, cfg, sc.Times, o.Allowed, exact))
		}
		r.Stats = append(r.Stats, row)
	}
	return r, nil
}

// Markdown prints one table per scenario.
func (r *Result) Markdown() string {
	var b strings.Builder
	c := r.Cfg
	fmt.Fprintf(&b, "L = %d requests per P = %s; token bucket capacity and GCRA burst B = %d; every request costs 1.\n",
		c.Limit, seconds(c.Period), c.Burst)
	fmt.Fprintf(&b, "\"max in any P\": most requests allowed in any span (t-P, t]. \"peak burst\": most allowed in any span of length d beyond L·d/P (token bucket and GCRA guarantee at most B).\n")
	fmt.Fprintf(&b, "Wrongly allowed / denied: decisions that differ from the exact sliding log's on the same request, in %% of all requests.\n")
	for s, sc := range r.Scenarios {
		fmt.Fprintf(&b, "\n#### (%s) %s: %d requests\n\n", sc.Key, sc.Title, len(sc.Times))
		b.WriteString("| algorithm | allowed | vs exact | max in any P | peak burst | wrongly allowed | wrongly denied |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
		for _, st := range r.Stats[s] {
			fmt.Fprintf(&b, "| %s | %d | %s | %d | %.2f | %s | %s |\n",
				st.Algo, st.Allowed, diff(st.Allowed, st.Exact), st.MaxWindow, st.PeakExcess(c.Period),
				pct(st.WronglyAllowed, st.Requests), pct(st.WronglyDenied, st.Requests))
		}
	}
	return b.String()
}

func diff(a, b int) string {
	if b == 0 {
		return fmt.Sprintf("%+d", a-b)
	}
	return fmt.Sprintf("%+d (%+.1f%%)", a-b, 100*float64(a-b)/float64(b))
}

func pct(n, of int) string {
	if of == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%.3f%%)", n, 100*float64(n)/float64(of))
}

// style is how one algorithm is drawn; the colours are the Okabe–Ito
// palette, readable with colour-blindness.
var style = map[string]Series{
	"exact sliding log":      {Color: "#000000", Width: 1, Dash: "1 3"},
	"fixed window":           {Color: "#D55E00", Width: 2.5},
	"sliding log":            {Color: "#0072B2", Width: 3.5},
	"sliding window counter": {Color: "#009E73", Width: 2.5},
	"token bucket":           {Color: "#E69F00", Width: 5},
	"GCRA":                   {Color: "#CC79A7", Width: 1.8, Dash: "6 4"},
}

// cumulative returns the staircase of allowed requests over time: x is
// (t - x0) / unit, from xmin to xmax.
func cumulative(times []int64, allowed []bool, x0 int64, unit float64, xmin, xmax float64) [][2]float64 {
	pts := [][2]float64{{xmin, 0}}
	n := 0
	for i, ok := range allowed {
		if !ok {
			continue
		}
		n++
		pts = append(pts, [2]float64{float64(times[i]-x0) / unit, float64(n)})
	}
	return append(pts, [2]float64{xmax, float64(n)})
}

func (r *Result) series(s int, f func(o Outcome) [][2]float64) []Series {
	var out []Series
	for _, o := range r.Outcomes[s][1:] {
		st := style[o.Algo]
		st.Name = o.Algo
		st.Step = true
		st.Points = f(o)
		out = append(out, st)
	}
	return out
}

// Plots renders the figures, by file name.
func (r *Result) Plots() map[string][]byte {
	c := r.Cfg
	p := c.Period.Microseconds()
	out := map[string][]byte{}
	for s, sc := range r.Scenarios {
		switch sc.Key {
		case "a", "d":
			xmin := float64(sc.Times[0]-sc.Boundary)/1e6 - 0.1
			xmax := float64(sc.Times[len(sc.Times)-1]-sc.Boundary)/1e6 + 0.1
			ser := r.series(s, func(o Outcome) [][2]float64 {
				return cumulative(sc.Times, o.Allowed, sc.Boundary, 1e6, xmin, xmax)
			})
			ser = append(ser, Series{Name: fmt.Sprintf("limit L = %d", c.Limit), Color: "#777777", Width: 1, Dash: "4 4",
				Points: [][2]float64{{xmin, float64(c.Limit)}, {xmax, float64(c.Limit)}}})
			title := fmt.Sprintf("(a) %d requests each side of a window boundary, L = %d per %s", c.Limit, c.Limit, seconds(c.Period))
			name := "boundary.svg"
			if sc.Key == "d" {
				title = fmt.Sprintf("(d) %d requests before a boundary, then 3×L per P; L = %d per %s", c.Limit, c.Limit, seconds(c.Period))
				name = "worst-case.svg"
			}
			out[name] = Chart{
				Title:    title,
				Subtitle: "GCRA and token bucket coincide; the sliding log decides exactly as the exact log",
				XLabel:   "time from the window boundary (s)",
				YLabel:   "requests allowed so far (all within one P)",
				XMin:     xmin, XMax: xmax, YMin: 0, YMax: float64(2*c.Limit) * 1.1,
				Series: ser,
				VLines: []Marker{{X: 0, Label: "window boundary"}},
			}.SVG()
		case "b":
			t0 := sc.Times[0]
			unit := float64(p)
			xmax := float64(sc.Times[len(sc.Times)-1]-t0)/unit + 0.25
			ser := r.series(s, func(o Outcome) [][2]float64 {
				return cumulative(sc.Times, o.Allowed, t0, unit, 0, xmax)
			})
			ser = append(ser,
				Series{Name: "B + L·t/P", Color: "#777777", Width: 1, Dash: "4 4",
					Points: [][2]float64{{0, float64(c.Burst)}, {xmax, float64(c.Burst) + float64(c.Limit)*xmax}}},
				Series{Name: "L·t/P", Color: "#777777", Width: 1, Dash: "1 3",
					Points: [][2]float64{{0, 0}, {xmax, float64(c.Limit) * xmax}}})
			var marks []Marker
			for k := (t0/p + 1) * p; k < sc.Times[len(sc.Times)-1]; k += p {
				label := ""
				if len(marks) == 0 {
					label = "window boundaries (dotted)"
				}
				marks = append(marks, Marker{X: float64(k-t0) / unit, Label: label})
			}
			last := float64(c.Burst) + float64(c.Limit)*xmax
			out["steady.svg"] = Chart{
				Title:    fmt.Sprintf("(b) steady traffic at 3×L: cumulative requests allowed, L = %d per %s", c.Limit, seconds(c.Period)),
				Subtitle: "GCRA and token bucket coincide; the sliding log decides exactly as the exact log",
				XLabel:   fmt.Sprintf("time since the first request (periods of %s)", seconds(c.Period)),
				YLabel:   "requests allowed so far",
				XMin:     0, XMax: xmax, YMin: 0, YMax: last * 1.05,
				Series: ser, VLines: marks,
			}.SVG()
		case "c":
			out["poisson.svg"] = r.trailingPlot(s, sc)
		}
	}
	return out
}

// trailingPlot shows, for scenario c, how many requests each algorithm has
// allowed in the trailing window (t-P, t] around the largest burst of the
// first simulated hour.
func (r *Result) trailingPlot(s int, sc Scenario) []byte {
	c := r.Cfg
	p := c.Period.Microseconds()
	// The busiest P of the first hour of offered traffic.
	hour := sc.Times[0] + int64(time.Hour/time.Microsecond)
	busiest, best, i := sc.Times[0], 0, 0
	for j, t := range sc.Times {
		if t > hour {
			break
		}
		for sc.Times[i] <= t-p {
			i++
		}
		if j-i+1 > best {
			best, busiest = j-i+1, t
		}
	}
	from, to := busiest-3*p, busiest+4*p
	step := p / 120 // 0.5 s at P = 60 s
	unit := float64(p)
	trailing := func(allowed []bool) [][2]float64 {
		var pts [][2]float64
		lo, hi := 0, 0 // allowed requests with index in [lo, hi) are in (t-P, t]
		for t := from; t <= to; t += step {
			for hi < len(sc.Times) && sc.Times[hi] <= t {
				hi++
			}
			for lo < hi && sc.Times[lo] <= t-p {
				lo++
			}
			n := 0
			for k := lo; k < hi; k++ {
				if allowed[k] {
					n++
				}
			}
			pts = append(pts, [2]float64{float64(t-busiest) / unit, float64(n)})
		}
		return pts
	}
	ser := r.series(s, func(o Outcome) [][2]float64 { return trailing(o.Allowed) })
	for k := range ser {
		ser[k].Step = false
	}
	offered := make([]bool, len(sc.Times))
	for k := range offered {
		offered[k] = true
	}
	ser = append(ser, Series{Name: "offered", Color: "#999999", Width: 1, Points: trailing(offered)})
	xmin, xmax := float64(from-busiest)/unit, float64(to-busiest)/unit
	ser = append(ser, Series{Name: fmt.Sprintf("limit L = %d", c.Limit), Color: "#777777", Width: 1, Dash: "4 4",
		Points: [][2]float64{{xmin, float64(c.Limit)}, {xmax, float64(c.Limit)}}})
	ymax := 0.0
	for _, se := range ser {
		for _, pt := range se.Points {
			ymax = max(ymax, pt[1])
		}
	}
	return Chart{
		Title:    fmt.Sprintf("(c) requests allowed in the trailing %s around a burst (seed %d)", seconds(c.Period), c.Seed),
		Subtitle: fmt.Sprintf("Poisson traffic at 0.9×L plus bursts; the busiest %s of the first hour is at 0", seconds(c.Period)),
		XLabel:   fmt.Sprintf("time from the busiest moment (periods of %s)", seconds(c.Period)),
		YLabel:   "requests in (t-P, t]",
		XMin:     xmin, XMax: xmax, YMin: 0, YMax: ymax * 1.08,
		Series: ser,
	}.SVG()
}
