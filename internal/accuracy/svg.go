package main

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Series is one line of a chart.
type Series struct {
	Name   string
	Color  string
	Dash   string  // SVG stroke-dasharray; empty for solid
	Width  float64 // stroke width in px
	Points [][2]float64
	// Step draws a staircase: each value holds until the next x.
	Step bool
}

// Chart is a line chart with linear axes.
type Chart struct {
	Title, Subtitle string
	XLabel, YLabel  string
	XMin, XMax      float64
	YMin, YMax      float64
	Series          []Series
	// VLines are labelled vertical markers at x.
	VLines []Marker
}

// Marker is a labelled vertical line.
type Marker struct {
	X     float64
	Label string
}

const (
	svgW, svgH                     = 760, 460
	padL, padR, padT, padB float64 = 70, 200, 62, 56
)

// SVG renders the chart. The output depends only on the chart: the same
// chart gives the same bytes.
func (c Chart) SVG() []byte {
	var b bytes.Buffer
	pw := svgW - padL - padR
	ph := svgH - padT - padB
	sx := func(x float64) float64 { return padL + (x-c.XMin)/(c.XMax-c.XMin)*pw }
	sy := func(y float64) float64 { return padT + ph - (y-c.YMin)/(c.YMax-c.YMin)*ph }

	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<text x="%s" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", num(padL), esc(c.Title))
	if c.Subtitle != "" {
		fmt.Fprintf(&b, `<text x="%s" y="42" fill="#555555">%s</text>`+"\n", num(padL), esc(c.Subtitle))
	}

	// Grid and ticks.
	b.WriteString(`<g stroke="#e4e4e4" stroke-width="1">` + "\n")
	xt := ticks(c.XMin, c.XMax, 8)
	yt := ticks(c.YMin, c.YMax, 6)
	for _, x := range xt {
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(sx(x)), num(padT), num(sx(x)), num(padT+ph))
	}
	for _, y := range yt {
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(padL), num(sy(y)), num(padL+pw), num(sy(y)))
	}
	b.WriteString("</g>\n")
	b.WriteString(`<g fill="#333333">` + "\n")
	for _, x := range xt {
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(sx(x)), num(padT+ph+18), tickLabel(x, xt))
	}
	for _, y := range yt {
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="end">%s</text>`+"\n", num(padL-8), num(sy(y)+4), tickLabel(y, yt))
	}
	b.WriteString("</g>\n")
	// Axes.
	fmt.Fprintf(&b, `<path d="M%s %sV%sH%s" fill="none" stroke="#333333" stroke-width="1"/>`+"\n", num(padL), num(padT), num(padT+ph), num(padL+pw))
	fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(padL+pw/2), num(svgH-14), esc(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(18 %s) rotate(-90)" text-anchor="middle">%s</text>`+"\n", num(padT+ph/2), esc(c.YLabel))

	// Markers.
	for _, m := range c.VLines {
		x := num(sx(m.X))
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#888888" stroke-dasharray="2 3"/>`+"\n", x, num(padT), x, num(padT+ph))
		fmt.Fprintf(&b, `<text x="%s" y="%s" fill="#555555" font-size="11">%s</text>`+"\n", num(sx(m.X)+4), num(padT+12), esc(m.Label))
	}

	// Series, clipped to the plot area.
	fmt.Fprintf(&b, `<clipPath id="plot"><rect x="%s" y="%s" width="%s" height="%s"/></clipPath>`+"\n", num(padL), num(padT-2), num(pw+2), num(ph+4))
	b.WriteString(`<g clip-path="url(#plot)" fill="none" stroke-linejoin="round">` + "\n")
	// Wide lines first, so a narrow line on top of an identical wide one
	// stays visible.
	order := make([]int, len(c.Series))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return c.Series[order[i]].Width > c.Series[order[j]].Width })
	for _, i := range order {
		s := c.Series[i]
		if len(s.Points) == 0 {
			continue
		}
		var d strings.Builder
		for i, p := range s.Points {
			switch {
			case i == 0:
				fmt.Fprintf(&d, "M%s %s", num(sx(p[0])), num(sy(p[1])))
			case s.Step:
				fmt.Fprintf(&d, "H%sV%s", num(sx(p[0])), num(sy(p[1])))
			default:
				fmt.Fprintf(&d, "L%s %s", num(sx(p[0])), num(sy(p[1])))
			}
		}
		dash := ""
		if s.Dash != "" {
			dash = ` stroke-dasharray="` + s.Dash + `"`
		}
		fmt.Fprintf(&b, `<path d="%s" stroke="%s" stroke-width="%s"%s/>`+"\n", d.String(), s.Color, num(s.Width), dash)
	}
	b.WriteString("</g>\n")

	// Legend.
	lx, ly := padL+pw+16, padT+6
	for i, s := range c.Series {
		y := ly + float64(i)*22
		dash := ""
		if s.Dash != "" {
			dash = ` stroke-dasharray="` + s.Dash + `"`
		}
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="%s"%s/>`+"\n",
			num(lx), num(y), num(lx+26), num(y), s.Color, num(max(s.Width, 2)), dash)
		fmt.Fprintf(&b, `<text x="%s" y="%s">%s</text>`+"\n", num(lx+32), num(y+4), esc(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// ticks returns about n round values covering [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	span := hi - lo
	if span <= 0 || n < 1 {
		return []float64{lo}
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9; k++ {
		v := k * step
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		out = append(out, v)
	}
	return out
}

// tickLabel prints v with as few decimals as the tick spacing needs.
func tickLabel(v float64, all []float64) string {
	dec := 0
	if len(all) > 1 {
		step := all[1] - all[0]
		for dec < 6 && math.Abs(step*math.Pow(10, float64(dec))-math.Round(step*math.Pow(10, float64(dec)))) > 1e-6 {
			dec++
		}
	}
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// num prints a coordinate with at most two decimals.
func num(v float64) string {
	s := strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
	if s == "-0" {
		s = "0"
	}
	return s
}

func esc(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}
