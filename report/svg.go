package report

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fuseadvise/fuseadvise/bench"
)

// Scale is the chart's time axis.
type Scale int

const (
	ScaleAuto   Scale = iota // log when the times span more than AutoLogRatio, else linear
	ScaleLinear              // linear from zero
	ScaleLog                 // log10, from and to 1, 2 or 5 times a power of ten
)

// AutoLogRatio is the largest/smallest time ratio above which ScaleAuto draws a log axis.
const AutoLogRatio = 30.0

func (s Scale) String() string {
	switch s {
	case ScaleLinear:
		return "linear"
	case ScaleLog:
		return "log"
	}
	return "auto"
}

// ParseScale reads "auto", "linear" or "log".
func ParseScale(s string) (Scale, error) {
	switch s {
	case "", "auto":
		return ScaleAuto, nil
	case "linear", "lin":
		return ScaleLinear, nil
	case "log":
		return ScaleLog, nil
	}
	return ScaleAuto, fmt.Errorf("report: unknown chart scale %q (want auto, linear or log)", s)
}

// The chart's geometry, in SVG user units (pixels).
const (
	chartW    = 960
	labelW    = 300 // left column: case labels
	valueW    = 96  // right margin: value text after the longest bar
	barH      = 12
	barGap    = 3
	groupPad  = 18
	headH     = 62 // title and legend
	axisH     = 44
	labelRune = 36 // longest bold label drawn, in runes: 36 bold runes of 12px sans fit labelW with a gap before the bars
)

// series are the bars of one group, in drawing order: GPU time, and the per-call wall and
// host time drawn as a marker on the bar.
var series = []struct {
	name, color string
	get         func(c *bench.Case) (med, p20, p80 float64)
	perCall     func(c *bench.Case) (wall, host float64)
}{
	{"fused (Triton)", "#1a73e8",
		func(c *bench.Case) (float64, float64, float64) { return c.FusedUs, c.FusedP20, c.FusedP80 },
		func(c *bench.Case) (float64, float64) { return c.FusedWallUs, c.FusedHostUs }},
	{"eager", "#8a8f98",
		func(c *bench.Case) (float64, float64, float64) { return c.EagerUs, c.EagerP20, c.EagerP80 },
		func(c *bench.Case) (float64, float64) { return c.EagerWallUs, c.EagerHostUs }},
	{"torch.compile", "#e8a317",
		func(c *bench.Case) (float64, float64, float64) { return c.CompileUs, c.CompileP20, c.CompileP80 },
		func(c *bench.Case) (float64, float64) { return c.CompileWallUs, c.CompileHostUs }},
}

// anyPerCall reports whether a timed case of cases has a per-call time to mark.
func anyPerCall(cases []bench.Case) bool {
	for i := range cases {
		for _, s := range series {
			if wall, _ := s.perCall(&cases[i]); timedForChart(&cases[i]) && pos(wall) {
				return true
			}
		}
	}
	return false
}

// axis maps times to x coordinates.
type axis struct {
	log    bool
	lo, hi float64 // domain: microseconds (linear) or log10 microseconds (log)
	x0, x1 float64
}

func (a axis) x(v float64) float64 {
	if a.log {
		if v <= 0 {
			return a.x0
		}
		v = math.Log10(v)
	}
	f := (v - a.lo) / (a.hi - a.lo)
	return a.x0 + math.Max(0, math.Min(1, f))*(a.x1-a.x0)
}

// ticks returns the axis ticks and their labels.
func (a axis) ticks() ([]float64, []string) {
	var vs []float64
	if a.log {
		mults := []float64{1}
		if a.hi-a.lo <= 3 {
			mults = []float64{1, 2, 5}
		}
		// at most about maxDecadeTicks ticks, however many decades the times span
		stride := math.Max(1, math.Ceil((a.hi-a.lo)/maxDecadeTicks))
		for k := math.Floor(a.lo); k <= math.Ceil(a.hi); k += stride {
			for _, m := range mults {
				v := m * math.Pow(10, k)
				if l := math.Log10(v); l >= a.lo-1e-9 && l <= a.hi+1e-9 {
					vs = append(vs, v)
				}
			}
		}
	} else {
		step := niceStep(a.hi / 5)
		for v := 0.0; v <= a.hi*(1+1e-9); v += step {
			vs = append(vs, v)
		}
	}
	labels := make([]string, len(vs))
	for i, v := range vs {
		labels[i] = tickLabel(v)
	}
	return vs, labels
}

func tickLabel(v float64) string {
	if v == 0 {
		return "0"
	}
	if v >= 1 && v < bigNum {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// niceFloor rounds v down to 1, 2 or 5 times a power of ten.
func niceFloor(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{5, 2, 1} {
		if m*p <= v*(1+1e-9) {
			return m * p
		}
	}
	return p
}

// The axis spans at most minAxisUs to maxAxisUs (longer bars stop at its end), so that
// rounding its ends to nice numbers cannot overflow to infinity or underflow to zero, and
// a log axis gets a tick at most every few decades.
const (
	minAxisUs      = 1e-300
	maxAxisUs      = 1e300
	maxDecadeTicks = 12
)

// newAxis fits the axis to the timed values of cases.
func newAxis(cases []bench.Case, scale Scale, x0, x1 float64) axis {
	lo, hi := math.Inf(1), 0.0
	for i := range cases {
		if !timedForChart(&cases[i]) {
			continue
		}
		for _, s := range series {
			med, p20, p80 := s.get(&cases[i])
			wall, _ := s.perCall(&cases[i])
			for _, v := range []float64{med, p20, p80, wall} {
				if pos(v) {
					lo = math.Min(lo, v)
					hi = math.Max(hi, v)
				}
			}
		}
	}
	if hi == 0 {
		return axis{lo: 0, hi: 1, x0: x0, x1: x1}
	}
	lo = math.Min(math.Max(lo, minAxisUs), maxAxisUs)
	hi = math.Min(math.Max(hi, minAxisUs), maxAxisUs)
	if scale == ScaleAuto {
		scale = ScaleLinear
		if hi/lo > AutoLogRatio {
			scale = ScaleLog
		}
	}
	if scale == ScaleLog {
		l, h := math.Log10(niceFloor(lo)), math.Log10(niceStep(hi))
		if h <= l {
			h = l + 1
		}
		return axis{log: true, lo: l, hi: h, x0: x0, x1: x1}
	}
	step := niceStep(hi / 5)
	return axis{lo: 0, hi: math.Ceil(hi/step-1e-9) * step, x0: x0, x1: x1}
}

func timedForChart(c *bench.Case) bool { return c.Error == "" && pos(c.FusedUs) }

// writeTimeSVG draws the time chart of r: for every case, grouped horizontal bars of the
// fused, eager and torch.compile medians with p20-p80 whiskers on scale, labelled with the
// case, its speedup over eager and the verdict. Without benchmark results it draws a note
// saying so. All text is escaped.
func writeTimeSVG(w *bufio.Writer, r *bench.Result, scale Scale, use Use) {
	var cases []bench.Case
	if r != nil {
		cases = r.Cases
	}
	groupH := 3*barH + 2*barGap + groupPad
	h := headH + len(cases)*groupH + axisH
	if len(cases) == 0 {
		h = 90
	}
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-labelledby="fa-time-title" font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="12">`+"\n", chartW, h, chartW, h)
	title := "Fused vs eager vs torch.compile: median time per call"
	if r != nil && r.GPU != "" {
		title += " on " + r.GPU
	}
	p(`<title id="fa-time-title">%s</title>`+"\n", esc(title))
	p(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartW, h)
	p(`<text x="12" y="24" font-size="15" font-weight="bold" fill="#202124">%s</text>`+"\n", esc(title))
	if len(cases) == 0 {
		p(`<text x="12" y="56" fill="#5f6368">No benchmark results: the kernels were not timed (no GPU run).</text>` + "\n")
		p("</svg>\n")
		return
	}
	ax := newAxis(cases, scale, labelW, chartW-valueW)
	scaleName := "linear"
	if ax.log {
		scaleName = "log"
	}
	// legend
	lx := 12
	for _, s := range series {
		p(`<rect x="%d" y="36" width="12" height="12" fill="%s"/>`, lx, s.color)
		p(`<text x="%d" y="46" fill="#202124">%s</text>`+"\n", lx+16, esc(s.name))
		lx += 16 + 8*len(s.name) + 16
	}
	legend := "bars: median GPU µs (" + scaleName + " scale); whiskers: p20-p80"
	if anyPerCall(cases) {
		legend += "; ◇ per call (no CUDA graph)"
	}
	p(`<text x="%d" y="46" fill="#5f6368">%s</text>`+"\n", lx+8, esc(legend))

	top := headH
	bottom := top + len(cases)*groupH
	// grid and axis
	vs, labels := ax.ticks()
	for i, v := range vs {
		x := ax.x(v)
		p(`<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#e0e0e0"/>`, num(x), top-4, num(x), bottom)
		p(`<text x="%s" y="%d" text-anchor="middle" fill="#5f6368">%s</text>`+"\n", num(x), bottom+16, esc(labels[i]))
	}
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#5f6368"/>`+"\n", labelW, bottom, chartW-valueW, bottom)
	p(`<text x="%s" y="%d" text-anchor="middle" fill="#202124">time per call, µs (%s)</text>`+"\n", num((ax.x0+ax.x1)/2), bottom+34, scaleName)

	for i := range cases {
		c := &cases[i]
		s := speedup(*c, use)
		y := top + i*groupH
		if i%2 == 1 {
			p(`<rect x="0" y="%d" width="%d" height="%d" fill="#f7f8fa"/>`+"\n", y-groupPad/2, chartW, groupH)
		}
		p(`<g>`)
		p(`<title>%s</title>`, esc(s.Label+" "+s.Sub+": "+string(s.Verdict)))
		p(`<text x="12" y="%d" font-weight="bold" fill="#202124">%s</text>`, y+11, esc(truncRunes(s.Label, labelRune)))
		p(`<text x="12" y="%d" fill="#5f6368">%s</text>`, y+25, esc(truncRunes(s.Sub, labelRune+6)))
		line3 := string(s.Verdict)
		if vs, isNoise := s.VsEagerDecided(); vs > 0 {
			on := " vs eager: "
			if s.Basis == OnPerCall {
				on = " vs eager per call: "
			}
			line3 = speedupCell(vs, isNoise) + on + line3
		}
		p(`<text x="12" y="%d" fill="%s">%s</text>`+"\n", y+39, verdictColor(s.Verdict), esc(line3))
		if !timedForChart(c) {
			why := "not timed"
			if c.Error != "" {
				why += ": " + c.Error
			}
			p(`<text x="%d" y="%d" fill="#b3261e">%s</text></g>`+"\n", labelW+6, y+25, esc(truncRunes(why, 80)))
			continue
		}
		for j, sr := range series {
			med, p20, p80 := sr.get(c)
			by := y + j*(barH+barGap)
			if !pos(med) {
				p(`<text x="%d" y="%d" fill="#5f6368">%s: not timed</text>`+"\n", labelW+6, by+barH-2, esc(sr.name))
				continue
			}
			xe := ax.x(med)
			p(`<rect x="%d" y="%d" width="%s" height="%d" fill="%s"><title>%s</title></rect>`,
				labelW, by, num(math.Max(1, xe-labelW)), barH, sr.color, esc(sr.name+": "+timeCell(med, p20, p80)+" µs"))
			end := xe
			if pos(p20) && pos(p80) {
				a, b := ax.x(p20), ax.x(p80)
				cy := by + barH/2
				p(`<path d="M%s %dH%sM%s %dv%dM%s %dv%d" stroke="#202124" stroke-width="1.2" fill="none"/>`,
					num(a), cy, num(b), num(a), cy-4, 8, num(b), cy-4, 8)
				end = math.Max(end, b)
			}
			if wall, host := sr.perCall(c); pos(wall) {
				x, cy := ax.x(wall), by+barH/2
				p(`<path d="M%s %dl5 5l-5 5l-5 -5z" fill="#ffffff" stroke="#202124" stroke-width="1.2"><title>%s</title></path>`,
					num(x), cy-5, esc(sr.name+" per call: "+perCallCell(wall, host)+" µs"))
				end = math.Max(end, x+5)
			}
			p(`<text x="%s" y="%d" fill="#202124">%s</text>`+"\n", num(end+5), by+barH-2, esc(fmtUs(med)))
		}
		p("</g>\n")
	}
	p("</svg>\n")
}

func verdictColor(v Verdict) string {
	switch v {
	case Ship:
		return "#137333"
	case DoNotShip, Failed:
		return "#b3261e"
	case Review, UseCompile, UseLibrary:
		return "#b06000"
	}
	return "#5f6368"
}

// num prints a coordinate with at most one decimal.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// esc escapes s for XML and HTML text and attribute values; characters XML forbids
// (control characters, invalid UTF-8) become U+FFFD.
func esc(s string) string {
	return html.EscapeString(xmlSafe(s))
}

func xmlSafe(s string) string {
	ok := true
	for _, r := range s {
		if !xmlChar(r) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	return strings.Map(func(r rune) rune {
		if !xmlChar(r) {
			return utf8.RuneError
		}
		return r
	}, s)
}

func xmlChar(r rune) bool {
	switch {
	case r == utf8.RuneError:
		return false
	case r == '\t' || r == '\n' || r == '\r':
		return true
	case r < 0x20:
		return false
	case r >= 0xD800 && r <= 0xDFFF, r == 0xFFFE, r == 0xFFFF:
		return false
	}
	return true
}

// truncRunes shortens s to n runes, marking the cut with an ellipsis.
func truncRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// A bar of the speedup chart: one case's speedup over eager and over torch.compile, on the
// verdict's basis, or the cost model's predicted speedup over the chain now.
type speedBar struct {
	label, sub, line3 string
	line3Color        string
	vsEager           float64 // 0: none
	vsCompile         float64 // 0: none
	why               string  // why there is no bar ("not timed: ...")
}

// maxSpeedAxis caps the speedup axis: a longer bar stops at its end, its label still exact.
const maxSpeedAxis = 100.0

// SVG draws the speedup chart: for every benchmarked case, fused's speedup over eager (a
// bar) and over torch.compile (a thinner, lighter bar) on the verdict's basis, on a linear
// axis from 0 with a 1.0× line, each bar labelled with its value. Without benchmark results
// it draws the cost model's predicted speedup of each generated folder over its shape's
// GPU time per call in the trace, titled as a prediction; with neither, a note. All text
// is escaped; the output is a standalone SVG document that can also be placed inline in
// HTML.
func SVG(w io.Writer, in Inputs) error {
	bw := bufio.NewWriter(w)
	writeSVG(bw, in)
	return bw.Flush()
}

func writeSVG(w *bufio.Writer, in Inputs) {
	var bars []speedBar
	title := "Fused kernel speedup over eager and torch.compile"
	basisNote := ""
	predicted := false
	if in.Bench != nil && len(in.Bench.Cases) > 0 {
		if in.Bench.GPU != "" {
			title += " on " + in.Bench.GPU
		}
		bars, basisNote = measuredBars(in)
	} else {
		bars = predictedBars(in)
		predicted = len(bars) > 0
		if predicted {
			title = "Fused kernel speedup over the traced chain: predicted by the cost model, not measured"
		}
	}
	writeSpeedSVG(w, title, basisNote, bars, predicted)
}

// measuredBars are the bench's cases as bars, and the legend's note on their basis.
func measuredBars(in Inputs) ([]speedBar, string) {
	var out []speedBar
	perCall, gpu := 0, 0
	for _, c := range in.Bench.Cases {
		s := speedup(c, in.Use)
		b := speedBar{label: s.Label, sub: s.Sub, line3: string(s.Verdict), line3Color: verdictColor(s.Verdict)}
		if s.Basis == OnPerCall {
			perCall++
			b.vsCompile = s.WallVsCompile
		} else {
			gpu++
			b.vsCompile = s.VsCompile
		}
		b.vsEager, _ = s.VsEagerDecided()
		if b.vsEager > 0 {
			b.line3 = s.Basis.String() + ": " + b.line3
		}
		if !timedForChart(&s.Case) || b.vsEager == 0 {
			b.vsEager, b.vsCompile = 0, 0
			b.why = "not timed"
			if c.Error != "" {
				b.why += ": " + c.Error
			}
		}
		out = append(out, b)
	}
	note := "speedup on each verdict's basis"
	switch {
	case gpu == 0:
		note = "speedup per call (host overhead included)"
	case perCall == 0:
		note = "speedup on GPU time"
	}
	return out, note
}

func (b Basis) String() string { return string(b) }

// predictedBars are the generated folders with an estimated fused time and a traced time per
// call for their shape, as predicted speedups over the chain.
func predictedBars(in Inputs) []speedBar {
	var out []speedBar
	for _, g := range in.Generated {
		it := prItem{g: g, group: findShapeGroup(in.Analysis, g)}
		now, n := nowPerCall(&it)
		if !pos(now) || !pos(g.EstFusedUs) {
			continue
		}
		vs := now / g.EstFusedUs
		line3 := fmt.Sprintf("est. %s µs vs %s µs now (%s)", fmtUs(g.EstFusedUs), fmtUs(now), plural(n, "instance"))
		color := "#137333"
		if vs < 1 {
			color = "#b3261e"
		}
		out = append(out, speedBar{label: g.Name, sub: g.Dtype + " " + shapesString(g.Shapes), line3: line3, line3Color: color, vsEager: vs})
	}
	return out
}

// speedAxis is the linear speedup axis: from 0 to a nice number at least 1.5× and the
// largest speedup (at most maxSpeedAxis).
func speedAxis(bars []speedBar, x0, x1 float64) axis {
	hi := 1.5
	for _, b := range bars {
		for _, v := range []float64{b.vsEager, b.vsCompile} {
			if pos(v) {
				hi = math.Max(hi, math.Min(v, maxSpeedAxis))
			}
		}
	}
	step := niceStep(hi / 5)
	return axis{lo: 0, hi: math.Ceil(hi/step-1e-9) * step, x0: x0, x1: x1}
}

// speedLabel is a bar's value, as "2.3×".
func speedLabel(v float64) string {
	if v >= 100 {
		return fixed(v, 0) + "×"
	}
	if v >= 10 {
		return fixed(v, 1) + "×"
	}
	return fixed(v, 2) + "×"
}

const (
	eagerColor     = "#1a73e8"
	compileColor   = "#f4b400"
	predictedColor = "#7baaf7" // lighter than a measured bar
	eagerBarH      = 18
	compileBarH    = 10
	insideMin      = 64         // a bar at least this wide holds its label inside
	speedHeadH     = headH + 14 // title, legend, and the 1.0× line's label below them
)

func writeSpeedSVG(w *bufio.Writer, title, basisNote string, bars []speedBar, predicted bool) {
	groupH := 3*barH + 2*barGap + groupPad
	h := speedHeadH + len(bars)*groupH + axisH
	if len(bars) == 0 {
		h = 90
	}
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-labelledby="fa-chart-title" font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="12">`+"\n", chartW, h, chartW, h)
	p(`<title id="fa-chart-title">%s</title>`+"\n", esc(title))
	p(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartW, h)
	p(`<text x="12" y="24" font-size="15" font-weight="bold" fill="#202124">%s</text>`+"\n", esc(title))
	if len(bars) == 0 {
		p(`<text x="12" y="56" fill="#5f6368">No benchmark results: the kernels were not timed (no GPU run), and no generated folder has a predicted time.</text>` + "\n")
		p("</svg>\n")
		return
	}
	ax := speedAxis(bars, labelW, chartW-valueW)
	// legend
	lx := 12
	legend := []struct{ name, color string }{{"vs eager", eagerColor}, {"vs torch.compile", compileColor}}
	if predicted {
		legend = legend[:1]
		legend[0].name = "predicted vs the traced chain"
		legend[0].color = predictedColor
		basisNote = "estimated fused µs against the trace's GPU µs per call"
	}
	for _, l := range legend {
		p(`<rect x="%d" y="36" width="12" height="12" fill="%s"/>`, lx, l.color)
		p(`<text x="%d" y="46" fill="#202124">%s</text>`+"\n", lx+16, esc(l.name))
		lx += 16 + 7*utf8.RuneCountInString(l.name) + 16
	}
	p(`<text x="%d" y="46" fill="#5f6368">%s</text>`+"\n", lx+8, esc(basisNote+"; right of the 1.0× line is faster"))

	top := speedHeadH
	bottom := top + len(bars)*groupH
	vs, labels := ax.ticks()
	for i, v := range vs {
		x := ax.x(v)
		p(`<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#e0e0e0"/>`, num(x), top-4, num(x), bottom)
		p(`<text x="%s" y="%d" text-anchor="middle" fill="#5f6368">%s</text>`+"\n", num(x), bottom+16, esc(labels[i]+"×"))
	}
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#5f6368"/>`+"\n", labelW, bottom, chartW-valueW, bottom)
	p(`<text x="%s" y="%d" text-anchor="middle" fill="#202124">speedup of the fused kernel (linear, × faster)</text>`+"\n", num((ax.x0+ax.x1)/2), bottom+34)

	for i := 1; i < len(bars); i += 2 {
		p(`<rect x="0" y="%d" width="%d" height="%d" fill="#f7f8fa"/>`+"\n", top+i*groupH-groupPad/2, chartW, groupH)
	}
	// the 1.0× reference line, under the bars and their labels
	x1 := ax.x(1)
	p(`<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#202124" stroke-width="1.5" stroke-dasharray="4 3"/>`, num(x1), top-8, num(x1), bottom)
	p(`<text x="%s" y="%d" text-anchor="middle" fill="#202124">1.0×</text>`+"\n", num(x1), top-10)
	for i, b := range bars {
		y := top + i*groupH
		p(`<g>`)
		p(`<title>%s</title>`, esc(b.label+" "+b.sub+": "+b.line3))
		p(`<text x="12" y="%d" font-weight="bold" fill="#202124">%s</text>`, y+11, esc(truncRunes(b.label, labelRune)))
		p(`<text x="12" y="%d" fill="#5f6368">%s</text>`, y+25, esc(truncRunes(b.sub, labelRune+6)))
		p(`<text x="12" y="%d" fill="%s">%s</text>`+"\n", y+39, b.line3Color, esc(truncRunes(b.line3, labelRune+6)))
		if b.vsEager == 0 {
			p(`<text x="%d" y="%d" fill="#b3261e">%s</text></g>`+"\n", labelW+6, y+25, esc(truncRunes(b.why, 80)))
			continue
		}
		inside := "#ffffff"
		if predicted {
			inside = "#202124"
		}
		speedBarSVG(p, ax, y+2, eagerBarH, legend[0].color, inside, b.vsEager, legend[0].name)
		if b.vsCompile > 0 {
			speedBarSVG(p, ax, y+2+eagerBarH+barGap, compileBarH, compileColor, "#202124", b.vsCompile, "vs torch.compile")
		}
		p("</g>\n")
	}
	p("</svg>\n")
}

// speedBarSVG draws one bar of value v from the axis's 0, its label inside the bar's end when
// the bar is long enough, else just after it; a bar past the axis's end stops there.
func speedBarSVG(p func(string, ...any), ax axis, y, h int, color, inside string, v float64, what string) {
	xe := ax.x(v)
	wd := math.Max(1, xe-ax.x0)
	p(`<rect x="%s" y="%d" width="%s" height="%d" fill="%s"><title>%s</title></rect>`,
		num(ax.x0), y, num(wd), h, color, esc(what+": "+speedLabel(v)))
	ty := y + h/2 + 4
	if wd >= insideMin && h >= eagerBarH {
		p(`<text x="%s" y="%d" text-anchor="end" font-weight="bold" fill="%s">%s</text>`+"\n", num(xe-5), ty, inside, esc(speedLabel(v)))
		return
	}
	size := ""
	if h < eagerBarH {
		size = ` font-size="10"`
	}
	p(`<text x="%s" y="%d"%s fill="#202124">%s</text>`+"\n", num(xe+5), ty, size, esc(speedLabel(v)))
}
