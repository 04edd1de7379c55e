package bench_test

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// report turns the samples of every round into tables and a plot.
type report struct {
	cells  []cell
	res    map[string][]sample
	rounds int
}

func newReport(cells []cell, res map[string][]sample, rounds int) *report {
	return &report{cells: cells, res: res, rounds: rounds}
}

// lookup returns the samples of group/name/g, nil when not measured.
func (r *report) lookup(group, name string, g int) []sample {
	return r.res[group+"/"+name+"/"+strconv.Itoa(g)]
}

// ratios returns a/b round by round.
func ratios(a, b []sample) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		if b[i].rate() > 0 {
			out = append(out, a[i].rate()/b[i].rate())
		}
	}
	return out
}

func rates(ss []sample) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = s.rate()
	}
	return out
}

// medianOf is the median of f over the rounds.
func medianOf(ss []sample, f func(sample) float64) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return median(xs)
}

// human writes a rate as 52.8k or 1.23M.
func human(x float64) string {
	switch {
	case x >= 1e6:
		return strconv.FormatFloat(x/1e6, 'f', 2, 64) + "M"
	case x >= 1e3:
		return strconv.FormatFloat(x/1e3, 'f', 1, 64) + "k"
	default:
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
}

func times(x float64) string {
	if x == 0 || math.IsNaN(x) {
		return "–"
	}
	if x >= 10 {
		return strconv.FormatFloat(x, 'f', 1, 64) + "×"
	}
	return strconv.FormatFloat(x, 'f', 2, 64) + "×"
}

func us(x float64) string {
	if x == 0 {
		return "–"
	}
	if x < 10 {
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}

func latency(d time.Duration) string {
	if d < 0 {
		return "−" + latency(-d)
	}
	switch {
	case d == 0:
		return "–"
	case d < 10*time.Microsecond:
		return strconv.FormatFloat(float64(d)/1e3, 'f', 2, 64) + " µs"
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) + " µs"
	default:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + " ms"
	}
}

// perRound writes each round's value: "1.31 1.36 1.40".
func perRound(xs []float64, f func(float64) string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = f(x)
	}
	return strings.Join(parts, " · ")
}

// row writes one table row for the samples of c, with the median of the
// per-round ratios rs.
func (r *report) row(b *strings.Builder, c cell, rs []float64) {
	ss := r.res[c.id()]
	if len(ss) == 0 {
		return
	}
	ratio := "–"
	if len(rs) > 0 {
		ratio = times(median(rs))
	}
	g := strconv.Itoa(c.g)
	if c.pipe > 0 {
		g = "50 conns × P" + strconv.Itoa(c.pipe)
	}
	admitted := 0.0
	var decided, degraded, timeouts int64
	for _, s := range ss {
		decided += s.decisions
		admitted += float64(s.allowed)
		degraded += s.degraded
		timeouts += s.timeouts
	}
	adm := "0%"
	if decided > 0 {
		adm = strconv.FormatFloat(100*admitted/float64(decided), 'f', 0, 64) + "%"
	}
	if degraded > 0 {
		adm += fmt.Sprintf(" (+%d degraded)", degraded)
	}
	if timeouts > 0 {
		adm += fmt.Sprintf(" (%d timed out)", timeouts)
	}
	allocs := "–"
	if c.pipe == 0 {
		allocs = strconv.FormatFloat(medianOf(ss, func(s sample) float64 {
			if s.decisions == 0 {
				return 0
			}
			return float64(s.mallocs) / float64(s.decisions)
		}), 'f', 1, 64)
	}
	fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
		c.name, g, human(median(rates(ss))), perRound(rates(ss), human), ratio,
		us(medianOf(ss, func(s sample) float64 { return s.per(s.redisCPU) })),
		us(medianOf(ss, func(s sample) float64 { return s.scriptUs })),
		us(medianOf(ss, func(s sample) float64 { return s.per(s.clientCPU) })),
		allocs,
		latency(time.Duration(medianOf(ss, func(s sample) float64 { return float64(s.p50) }))),
		latency(time.Duration(medianOf(ss, func(s sample) float64 { return float64(s.p99) }))),
		adm)
}

const tableHead = "| contender | G | decisions/s (median) | each round | ratio | Redis CPU µs/decision | script µs/call | client CPU µs/decision | allocs/decision | p50 | p99 | admitted |\n" +
	"|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n"

// table writes the rows of group, each with its per-round ratio to the
// samples ref returns for it (row ÷ ref).
func (r *report) table(b *strings.Builder, group string, ref func(c cell) []sample) {
	b.WriteString(tableHead)
	for _, c := range r.cells {
		if c.group == group {
			r.row(b, c, ratios(r.res[c.id()], ref(c)))
		}
	}
}

// A target is one ratio the performance work aims at: the decisions per
// second of cell num over those of cell den (cell ids), round by round, at
// least want; or with cpu, num's client CPU per decision over den's, at
// most want. want is 0 for a yardstick with no target. The run order
// keeps each target's two cells next to each other (runOrder).
type target struct {
	what     string
	num, den string
	want     float64
	cpu      bool
}

// ratio is tg's ratio, round by round.
func (tg target) ratio(r *report) []float64 {
	a, b := r.res[tg.num], r.res[tg.den]
	if !tg.cpu {
		return ratios(a, b)
	}
	var out []float64
	for i := range min(len(a), len(b)) {
		if d := b[i].per(b[i].clientCPU); d > 0 {
			out = append(out, a[i].per(a[i].clientCPU)/d)
		}
	}
	return out
}

var targets = []target{
	// The Limiter's own cost: Allow ÷ the EVALSHA it sends, made by hand
	// on the same client (evalsha_gcra), with either client's options.
	{"G=1: Allow ÷ its bare EVALSHA", "throughput/sluice/1", "throughput/evalsha_gcra/1", 0.95, false},
	{"G=128: Allow ÷ its bare EVALSHA", "throughput/sluice/128", "throughput/evalsha_gcra/128", 0.9, false},
	{"G=512: Allow ÷ its bare EVALSHA", "throughput/sluice/512", "throughput/evalsha_gcra/512", 0.9, false},
	{"G=1: Allow ÷ its bare EVALSHA, on sluice.ClientOption", "throughput/sluice_recommended/1", "throughput/evalsha_gcra_recommended/1", 0.95, false},
	{"G=128: Allow ÷ its bare EVALSHA, on sluice.ClientOption", "throughput/sluice_recommended/128", "throughput/evalsha_gcra_recommended/128", 0.9, false},
	{"G=512: Allow ÷ its bare EVALSHA, on sluice.ClientOption", "throughput/sluice_recommended/512", "throughput/evalsha_gcra_recommended/512", 0.9, false},
	{"G=128: client CPU per decision, Allow ÷ bare EVALSHA", "throughput/sluice/128", "throughput/evalsha_gcra/128", 1.4, true},
	{"G=512: client CPU per decision, Allow ÷ bare EVALSHA", "throughput/sluice/512", "throughput/evalsha_gcra/512", 1.4, true},
	{"G=128: client CPU per decision, Allow ÷ bare EVALSHA, on sluice.ClientOption", "throughput/sluice_recommended/128", "throughput/evalsha_gcra_recommended/128", 1.4, true},
	{"G=512: client CPU per decision, Allow ÷ bare EVALSHA, on sluice.ClientOption", "throughput/sluice_recommended/512", "throughput/evalsha_gcra_recommended/512", 1.4, true},
	{"G=128: sluice ÷ `redis-benchmark -P 16` ceiling", "throughput/sluice/128", "throughput/ceiling_P16/800", 0.80, false},
	{"G=128: sluice on sluice.ClientOption ÷ ceiling", "throughput/sluice_recommended/128", "throughput/ceiling_P16/800", 0.80, false},
	{"G=128: sluice ÷ the bare GCRA script through rueidis (a yardstick, no target)", "throughput/sluice/128", "throughput/bare_script/128", 0, false},
	{"G=128: sluice on go-redis ÷ sluice on rueidis (no target)", "throughput/sluice_goredis/128", "throughput/sluice/128", 0, false},
	{"G=128: sluice on go-redis, WithAutoPipeline ÷ sluice on rueidis (no target)", "throughput/sluice_goredis_ap/128", "throughput/sluice/128", 0, false},
	{"G=128: sluice ÷ redis_rate", "throughput/sluice/128", "throughput/redis_rate/128", 3, false},
	{"G=128: sluice on sluice.ClientOption ÷ redis_rate", "throughput/sluice_recommended/128", "throughput/redis_rate/128", 3, false},
	{"G=1: sluice ÷ redis_rate", "throughput/sluice/1", "throughput/redis_rate/1", 1.1, false},
	{"G=1: AllowAll of 16 limits ÷ 16 sequential Allows", "allow_all/sluice_allowall16/1", "allow_all/sluice_16_allows/1", 10, false},
	{"G=128: AllowAll of 16 limits ÷ 16 sequential Allows", "allow_all/sluice_allowall16/128", "allow_all/sluice_16_allows/128", 10, false},
	{"G=1: denied hot identity, denial cache ÷ WithDenialCache(0)", "denial/sluice_cache/1", "denial/sluice_nocache/1", 20, false},
	{"G=128: denied hot identity, denial cache ÷ WithDenialCache(0)", "denial/sluice_cache/128", "denial/sluice_nocache/128", 20, false},
}

// markdown renders every table of the run.
func (r *report) markdown() string {
	var b strings.Builder
	b.WriteString("#### Targets (ratios of decisions per second, or of client CPU per decision, per round, same run)\n\n")
	b.WriteString("| ratio | each round | median | target | met |\n|---|---|---:|---:|---|\n")
	for _, tg := range targets {
		got := tg.ratio(r)
		m := median(got)
		want, met := "≥ "+times(tg.want), "no"
		if tg.cpu {
			want = "≤ " + times(tg.want)
		}
		switch {
		case tg.want == 0:
			want, met = "–", "–"
		case len(got) > 0 && (!tg.cpu && m >= tg.want || tg.cpu && m <= tg.want):
			met = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", tg.what, perRound(got, times), times(m), want, met)
	}
	same := func(name string) func(cell) []sample {
		return func(c cell) []sample { return r.lookup("throughput", name, c.g) }
	}
	b.WriteString("\n#### GCRA throughput against G (10,000 identities, 100/s each; ratio: sluice ÷ row, same G, per round)\n\n")
	b.WriteString(tableHead)
	for _, c := range r.cells {
		if c.group != "throughput" {
			continue
		}
		var rs []float64
		switch {
		case c.pipe > 0:
			rs = ratios(r.lookup("throughput", "sluice", 128), r.res[c.id()])
		case c.name != "sluice":
			rs = ratios(r.lookup("throughput", "sluice", c.g), r.res[c.id()])
		}
		r.row(&b, c, rs)
	}
	b.WriteString("\nRatio here is sluice (defaults, same G; the ceiling rows: G=128) divided by the row: above 1 sluice decides more per second.\n")
	b.WriteString("\n#### rueidis options for sluice (defaults otherwise; ratio: row ÷ sluice on the plain client at the same G)\n\n")
	r.table(&b, "options", same("sluice"))
	b.WriteString("\n#### Every algorithm (same workload; ratio: row ÷ sluice GCRA at the same G)\n\n")
	r.table(&b, "algorithms", same("sluice"))
	b.WriteString("\n#### 16 limits per request (ratio: row ÷ sixteen sequential sluice Allows at the same G)\n\n")
	r.table(&b, "allow_all", func(c cell) []sample { return r.lookup("allow_all", "sluice_16_allows", c.g) })
	b.WriteString("\n#### A denied hot identity (GCRA 10/h, primed; ratio: row ÷ sluice WithDenialCache(0) at the same G)\n\n")
	r.table(&b, "denial", func(c cell) []sample { return r.lookup("denial", "sluice_nocache", c.g) })
	return b.String()
}

// throughputSVG plots decisions/s against G for sluice, its peers and
// the bare script, with the redis-benchmark ceilings as dashed lines.
func (r *report) throughputSVG() string {
	type series struct {
		name, label, color string
	}
	lines := []series{
		{"sluice", "sluice (defaults)", "#d62728"},
		{"sluice_recommended", "sluice on sluice.ClientOption (MaxFlushDelay 20µs)", "#ff7f0e"},
		{"sluice_goredis", "sluice on a go-redis client (transport/goredis)", "#e377c2"},
		{"sluice_goredis_ap", "sluice on go-redis, WithAutoPipeline", "#bcbd22"},
		{"bare_script", "bare GCRA script (rueidis)", "#7f7f7f"},
		{"redis_rate", "go-redis/redis_rate", "#1f77b4"},
		{"throttled", "throttled/v2", "#2ca02c"},
		{"ulule", "ulule/limiter (fixed window)", "#9467bd"},
	}
	const (
		w, h                   = 820, 440
		left, right, top, bott = 70, 290, 40, 50
	)
	pw, ph := float64(w-left-right), float64(h-top-bott)
	maxY := 0.0
	for _, s := range lines {
		for _, g := range goroutines {
			maxY = max(maxY, median(rates(r.lookup("throughput", s.name, g))))
		}
	}
	ceilings := []struct {
		name, label, color, dash string
	}{{"ceiling_P16", "redis-benchmark -P 16", "#000", "6 4"}, {"ceiling_P64", "redis-benchmark -P 64", "#888", "2 3"}}
	for _, c := range ceilings {
		for _, g := range []int{800, 3200} {
			maxY = max(maxY, median(rates(r.lookup("throughput", c.name, g))))
		}
	}
	step := niceStep(maxY / 5)
	top_ := math.Ceil(maxY/step) * step
	if top_ == 0 {
		top_ = 1
	}
	x := func(g int) float64 { return float64(left) + pw*math.Log2(float64(g))/math.Log2(512) }
	y := func(v float64) float64 { return float64(top) + ph*(1-v/top_) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14">GCRA decisions per second against concurrent callers (median of %d rounds)</text>`+"\n", left, r.rounds)
	for v := 0.0; v <= top_+step/2; v += step {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, float64(left)+pw, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(v)+4, human(v))
	}
	for _, g := range goroutines {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#ddd"/>`+"\n", x(g), x(g), top, float64(top)+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x(g), float64(top)+ph+16, g)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">G, goroutines sharing one client (log scale)</text>`+"\n", float64(left)+pw/2, h-10)
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">decisions/s</text>`+"\n", float64(top)+ph/2)
	ly := top + 10
	legend := func(label, color, dash string) {
		da := ""
		if dash != "" {
			da = ` stroke-dasharray="` + dash + `"`
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", w-right+14, w-right+38, ly, ly, color, da)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", w-right+44, ly+4, xmlEscape(label))
		ly += 20
	}
	for _, c := range ceilings {
		v := median(rates(r.lookup("throughput", c.name, map[string]int{"ceiling_P16": 800, "ceiling_P64": 3200}[c.name])))
		if v == 0 {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="%s"/>`+"\n", left, float64(left)+pw, y(v), y(v), c.color, c.dash)
		legend(c.label+" ("+human(v)+")", c.color, c.dash)
	}
	for _, s := range lines {
		var pts []string
		for _, g := range goroutines {
			ss := r.lookup("throughput", s.name, g)
			if len(ss) == 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(g), y(median(rates(ss)))))
		}
		if len(pts) == 0 {
			continue
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), s.color)
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], s.color)
		}
		legend(s.label, s.color, "")
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// checkSVG fails t unless svg is well-formed XML with an svg root.
func checkSVG(t *testing.T, svg string) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(svg))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("plot is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("plot root element is %q, want svg", root)
	}
}

// writeGenerated replaces the text between the BEGIN and END markers of
// name in the file at path.
func writeGenerated(t *testing.T, path, name, body string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin := "<!-- BEGIN " + name + " (generated by bench; do not edit) -->\n"
	end := "<!-- END " + name + " -->"
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q … %q markers", path, strings.TrimSpace(begin), end)
	}
	s = s[:i+len(begin)] + "\n" + body + "\n" + s[j:]
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}

func numCPU() int { return runtime.NumCPU() }

func goVersion() string { return runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH }
