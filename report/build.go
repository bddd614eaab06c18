package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/bench"
	"github.com/fuseadvise/fuseadvise/patterns"
)

// The report is built once as a small document model (sections of paragraphs and
// tables of cells) and then rendered as Markdown or HTML. Cells know whether their text
// is data from the inputs (Code: op names, paths, shapes) so that each renderer can quote
// it properly; no renderer ever emits a cell's text as markup.

type cell struct {
	Text   string
	Code   bool   // data from the inputs: a code span in Markdown, <code> in HTML
	Strong bool   // emphasis (verdicts)
	Class  string // HTML class: num, ship, dns, review, noise, fail, muted
}

type table struct {
	Head []string
	Num  []bool // right-aligned columns
	Rows [][]cell
}

// para is a run of inline cells; an item is a bullet when the para belongs to a list.
type para []cell

type section struct {
	ID, Title string
	Before    []para
	List      []para
	Table     *table
	Fold      string // HTML: fold the table under this summary line (long tables)
	After     []para
	Chart     bool
}

type document struct {
	Title    string
	Sections []section
}

func txt(s string) cell  { return cell{Text: oneLine(s)} }
func code(s string) cell { return cell{Text: oneLine(s), Code: true} }
func numc(s string) cell { return cell{Text: s, Class: "num"} }

func verdictCell(v Verdict) cell {
	c := cell{Text: string(v), Strong: v != Ship}
	switch v {
	case Ship:
		c.Class = "ship"
	case DoNotShip:
		c.Class = "dns"
	case Review, UseCompile, UseLibrary:
		c.Class = "review"
	case Noise:
		c.Class = "noise"
	case Failed:
		c.Class = "fail"
	default:
		c.Class = "muted"
	}
	return c
}

func fmtMs(us float64) string {
	return fixed(us/1e3, 2) + " ms"
}

// build assembles the document for in.
func build(in Inputs) document {
	d := document{Title: "fuseadvise report"}
	sp := SpeedupsFor(in.Bench, in.Use)
	d.Sections = append(d.Sections,
		summarySection(in, sp),
		traceSection(in.Analysis, in.Trace),
		opportunitySection(in.Analysis),
	)
	if in.Analysis != nil && len(in.Analysis.Optimizers) > 0 {
		d.Sections = append(d.Sections, optimizerSection(in.Analysis))
	}
	if in.Analysis != nil && len(in.Analysis.MasterWeights) > 0 {
		d.Sections = append(d.Sections, masterWeightsSection(in.Analysis))
	}
	if in.Analysis != nil && len(in.Analysis.MultiheadAttention) > 0 {
		d.Sections = append(d.Sections, multiheadAttentionSection(in.Analysis))
	}
	d.Sections = append(d.Sections,
		generatedSection(in, sp),
		verifySection(in.Verify),
		speedupSection(in, sp),
	)
	if in.Targets && in.Bench != nil {
		d.Sections = append(d.Sections, targetsSection(in.Bench))
	}
	reading := readingSection()
	if hasLibrary(sp) {
		reading.List = append(reading.List, libraryReading()...)
	}
	d.Sections = append(d.Sections, reading)
	return d
}

// targetsSection is the check of r against the performance targets (Targets): one row per
// target, then the cases that miss each one.
func targetsSection(r *bench.Result) section {
	s := section{ID: "targets", Title: "Performance targets"}
	t := &table{Head: []string{"target", "wanted", "measured", "cases", "met"}, Num: []bool{false, false, false, true, false}}
	for _, tg := range Targets(r) {
		met := cell{Text: "yes", Class: "ship"}
		switch {
		case tg.Cases == 0:
			met = cell{Text: "no case", Class: "muted"}
		case !tg.Met && len(tg.Misses) > 0:
			met = cell{Text: fmt.Sprintf("no (%d of %d)", len(tg.Misses), tg.Cases), Strong: true, Class: "dns"}
		case !tg.Met:
			met = cell{Text: "no", Strong: true, Class: "dns"}
		}
		t.Rows = append(t.Rows, []cell{txt(tg.Name), txt(tg.Want), txt(tg.Got), numc(fmt.Sprint(tg.Cases)), met})
		for _, m := range tg.Misses {
			s.After = append(s.After, para{txt("Missed: " + tg.Name + " (" + tg.Want + "): "), code(m)})
		}
	}
	s.Table = t
	return s
}

func summarySection(in Inputs, sp []Speedup) section {
	s := section{ID: "summary", Title: "Summary"}
	if a := in.Analysis; a != nil {
		line := para{txt("Trace "), code(a.Trace.Path), txt(" on "), code(orUnknown(a.Trace.Device)),
			txt(": " + fmtMs(a.Trace.GPUBusyUs) + " GPU busy")}
		if a.Trace.Steps > 0 {
			line = append(line, txt(" over "+plural(a.Trace.Steps, "profiled step")))
		}
		if t := a.Totals; t != nil && pos(t.StepUs) {
			line = append(line, txt(" in "+fmtMs(t.StepUs)+" of step time ("+stepSource(t.StepSource)+")"))
		}
		s.List = append(s.List, append(line, txt(".")))
		s.List = append(s.List, para{txt(plural(len(a.Opportunities), "fusion opportunity") + ".")})
		tot := TotalsOf(a)
		if tot.Total != "" {
			s.List = append(s.List, para{txt(tot.Total)})
		}
		if tot.Host != "" {
			s.List = append(s.List, para{txt(tot.Host)})
		}
		if cov := CoverageOf(a); cov != "" {
			s.List = append(s.List, para{txt(cov)})
		}
		for _, adv := range tot.Advice {
			s.List = append(s.List, para{txt("For a host-bound step: "), code(adv)})
		}
	} else {
		s.List = append(s.List, para{txt("No analysis given: the trace summary and the opportunities are missing.")})
	}
	s.List = append(s.List, para{txt(plural(len(in.Generated), "kernel folder") + " generated.")})
	if v := in.Verify; v != nil {
		s.List = append(s.List, para{txt("Verification: " + countVerify(v.Folders).summary() + ".")})
	} else {
		s.List = append(s.List, para{txt("Not verified: no verification results given.")})
	}
	if in.Bench == nil {
		s.List = append(s.List, para{txt("Not benchmarked: no GPU results, so no measured speedups. The savings above are the cost model's estimates only.")})
	} else {
		t := tally(sp)
		var parts []string
		for _, v := range verdictOrder {
			if t[v] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", t[v], v))
			}
		}
		line := para{txt("Benchmarked " + plural(len(sp), "case"))}
		if in.Bench.GPU != "" {
			line = append(line, txt(" on "), code(in.Bench.GPU))
		}
		if len(parts) > 0 {
			line = append(line, txt(": "+strings.Join(parts, ", ")))
		}
		if n := decidedPerCall(sp); n > 0 {
			line = append(line, txt(fmt.Sprintf(" (%s decided on per-call time, as an eager model calls its kernels)", plural(n, "verdict"))))
		}
		s.List = append(s.List, append(line, txt(".")))
	}
	return s
}

// stepSource says where a step time came from.
func stepSource(src string) string {
	if src == "profiler steps" {
		return "the ProfilerStep spans"
	}
	return "the trace's span: no ProfilerStep"
}

// plural is "1 case", "2 cases", "3 opportunities".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "ch") {
		return strconv.Itoa(n) + " " + noun + "es"
	}
	if strings.HasSuffix(noun, "y") {
		return strconv.Itoa(n) + " " + strings.TrimSuffix(noun, "y") + "ies"
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown device"
	}
	return s
}

func traceSection(a *patterns.Report, x *TraceExtra) section {
	s := section{ID: "trace", Title: "Trace"}
	if a == nil {
		s.Before = []para{{txt("No analysis given (run "), code("fuseadvise analyze -format json"), txt(").")}}
		return s
	}
	t := a.Trace
	if x == nil {
		x = &TraceExtra{}
	}
	tb := &table{Head: []string{"", ""}}
	add := func(k string, v cell) { tb.Rows = append(tb.Rows, []cell{txt(k), v}) }
	add("trace", code(t.Path))
	add("device", code(orUnknown(t.Device)))
	if n := max(len(a.Ranks), x.Ranks); n > 1 {
		add("ranks", txt(strconv.Itoa(n)))
	}
	if t.Steps > 0 {
		add("profiled steps", txt(strconv.Itoa(t.Steps)))
	}
	add("GPU busy", txt(fmtMs(t.GPUBusyUs)))
	if x.IdleUs > 0 {
		add("GPU idle", txt(fmtMs(x.IdleUs)))
	}
	if tt := a.Totals; tt != nil && pos(tt.StepUs) {
		add("step time", txt(fmtMs(tt.StepUs)+" ("+stepSource(tt.StepSource)+"); GPU busy "+fmtPct(tt.GPUBusyPctOfStep)+" of it"))
		h := tt.Host
		v := "no"
		if h.Bound {
			v = "yes"
		}
		if pos(h.ProfilerOpUs) {
			v += fmt.Sprintf(": GPU busy %s of the step without the profiler's %s µs per recorded op", fmtPct(h.GPUBusyPctNoProfiler), fmtUs(h.ProfilerOpUs))
		}
		add("host-bound", txt(v))
		if pos(h.LaunchUs) {
			add("host cost per launch", txt(fmtUs(h.LaunchUs)+" µs (median of "+plural(h.Launches, "launch call")+", under the profiler)"))
		}
	}
	add("kernels", txt(strconv.Itoa(t.Kernels)))
	if x.Launches > 0 {
		add("launches", txt(strconv.Itoa(x.Launches)))
	}
	if t.Dataflow != "" {
		add("dataflow", code(t.Dataflow))
	}
	for i, c := range a.Calibration {
		k := "cost model"
		if len(a.Calibration) > 1 {
			k += fmt.Sprintf(" (trace %d)", i+1)
		}
		v := fmt.Sprintf("bandwidth %s GB/s (%s", shortest(c.BandwidthGBs), c.BandwidthSource)
		if c.BandwidthSamples > 0 {
			v += fmt.Sprintf(", %d kernels", c.BandwidthSamples)
		}
		v += fmt.Sprintf("), compute %s TFLOP/s, kernel overhead %s µs (%s)",
			shortest(c.ComputeTFLOPs), fmtUs(c.KernelOverheadUs), c.OverheadSource)
		add(k, txt(v))
	}
	s.Table = tb
	if len(x.TopKernels) > 0 {
		p := para{txt("Top kernels by GPU time: ")}
		for i, k := range x.TopKernels {
			if i > 0 {
				p = append(p, txt("; "))
			}
			p = append(p, code(truncRunes(k.Name, 120)), txt(fmt.Sprintf(" %s µs (%d×)", fmtUs(k.Us), k.Count)))
		}
		s.After = append(s.After, append(p, txt(".")))
	}
	for _, n := range a.Notes {
		s.After = append(s.After, para{txt("Note: "), code(n)})
	}
	return s
}

// sources lists the distinct Python source lines of an opportunity's shape groups, at most
// n, with a count of the rest.
func sources(o *patterns.Opportunity, n int) string {
	var out []string
	more := 0
	for _, g := range o.Shapes {
		for _, src := range g.Sources {
			if contains(out, src) {
				continue
			}
			if len(out) == n {
				more++
				continue
			}
			out = append(out, src)
		}
	}
	s := strings.Join(out, "; ")
	if more > 0 {
		s += fmt.Sprintf("; +%d more", more)
	}
	return s
}

func shapeGroupString(g patterns.ShapeGroup) string {
	s := fmt.Sprintf("%s %s ×%d", shapesString(g.Dims), g.DType, g.Instances)
	if !g.Valid {
		s += " (out of kernel range)"
	}
	return s
}

// optimizerSection lists the optimizer steps whose updates are not fused, with the fused
// step's estimate and the advice (no kernel is generated for them: the change is fused=True).
func optimizerSection(a *patterns.Report) section {
	s := section{ID: "optimizers", Title: "Optimizer steps"}
	s.Before = []para{{txt("Optimizer steps whose updates run unfused. The fix is a constructor argument, not a generated kernel; the fused step's time is estimated from the trace's own update kernels (docs/patterns.md, \"Optimizer steps\").")}}
	tb := &table{
		Head: []string{"optimizer", "runs as", "steps", "parameters", "GPU time µs", "est. fused µs", "est. saving µs"},
		Num:  []bool{false, false, true, false, true, true, true},
	}
	for _, f := range a.Optimizers {
		params, fused, saving := "-", "-", "-"
		if f.Params > 0 {
			params = fmt.Sprintf("%d tensors, %s %s", f.Tensors, patterns.FormatCount(f.Params), f.DType)
		}
		if f.Why == "" {
			fused, saving = fixed(f.EstFusedUs, 1), fixed(f.EstSavingUs, 1)
		}
		tb.Rows = append(tb.Rows, []cell{txt(f.Optimizer), txt(f.Impl), numc(strconv.Itoa(f.Steps)), txt(params),
			numc(fixed(f.GPUTimeUs, 1)), numc(fused), numc(saving)})
		adv := f.Advice
		if f.Why != "" {
			adv += " (no estimate: " + f.Why + ")"
		}
		s.After = append(s.After, para{txt(adv)})
	}
	s.Table = tb
	return s
}

// masterWeightsSection lists autocast's casts of fp32 GEMM weights, with the master weights'
// advice (MasterAdamW, the master_adamw folder gen writes).
func masterWeightsSection(a *patterns.Report) section {
	s := section{ID: "master-weights", Title: "Weights cast by autocast"}
	s.Before = []para{{txt("GEMM weights autocast casts to bf16 in every forward, and their gradients back to fp32 in every backward (docs/patterns.md, \"Master weights\"). The saving is the casts' GPU time in the trace.")}}
	tb := &table{
		Head: []string{"optimizer", "steps", "weights", "cast to", "kernels", "GPU µs fwd", "GPU µs bwd", "est. saving µs"},
		Num:  []bool{false, true, false, false, true, true, true, true},
	}
	for _, m := range a.MasterWeights {
		params, saving, opt := "-", "-", m.Optimizer
		if m.Tensors > 0 {
			params = fmt.Sprintf("%d tensors, %s", m.Tensors, patterns.FormatCount(m.Params))
		}
		if m.Why == "" {
			saving = fixed(m.EstSavingUs, 1)
		}
		if opt == "" {
			opt = "-"
		}
		tb.Rows = append(tb.Rows, []cell{txt(opt), numc(strconv.Itoa(m.Steps)), txt(params), txt(string(m.DType)),
			numc(strconv.Itoa(m.Kernels)), numc(fixed(m.ForwardUs, 1)), numc(fixed(m.BackwardUs, 1)), numc(saving)})
		adv := m.Text()
		s.After = append(s.After, para{txt(adv)})
	}
	s.Table = tb
	return s
}

// multiheadAttentionSection lists nn.MultiheadAttention's packed projection splits, with the
// drop-in's advice (the multihead_attention folder gen writes).
func multiheadAttentionSection(a *patterns.Report) section {
	s := section{ID: "multihead-attention", Title: "nn.MultiheadAttention's packed projection"}
	s.Before = []para{{txt("nn.MultiheadAttention splits its one q/k/v projection for the heads with a copy in the forward and zero-filled copies, their sum and a copy back in the backward (docs/patterns.md, \"nn.MultiheadAttention\"). The saving is those kernels' GPU time in the trace less the drop-in's one stack of the gradients, estimated.")}}
	tb := &table{
		Head: []string{"calls", "steps", "split", "batch_first", "dtype", "kernels", "GPU µs fwd", "GPU µs bwd", "est. saving µs"},
		Num:  []bool{true, true, false, false, false, true, true, true, true},
	}
	for _, f := range a.MultiheadAttention {
		saving := "-"
		if f.Why == "" {
			saving = fixed(f.EstSavingUs, 1)
		}
		tb.Rows = append(tb.Rows, []cell{numc(strconv.Itoa(f.Calls)), numc(strconv.Itoa(f.Steps)), txt(patterns.FormatDims(f.Shapes)),
			txt(strconv.FormatBool(f.BatchFirst)), txt(string(f.DType)), numc(strconv.Itoa(f.Kernels)),
			numc(fixed(f.ForwardUs, 1)), numc(fixed(f.BackwardUs, 1)), numc(saving)})
		adv := f.Text()
		s.After = append(s.After, para{txt(adv)})
	}
	s.Table = tb
	return s
}

func opportunitySection(a *patterns.Report) section {
	s := section{ID: "opportunities", Title: "Fusion opportunities"}
	if a == nil {
		s.Before = []para{{txt("No analysis given.")}}
		return s
	}
	if len(a.Opportunities) == 0 {
		s.Before = []para{{txt("The analyzer found no fusion opportunity in this trace.")}}
		return s
	}
	s.Before = []para{{txt("Ranked by estimated saving. GPU time is what the forward instances' kernels take now; the saving is the cost model's estimate, not a measurement.")}}
	tb := &table{
		Head: []string{"#", "pattern", "instances (fwd / bwd)", "GPU time µs", "est. fused µs", "est. saving µs", "% of GPU busy", "launches saved", "shapes (dtype)", "source lines"},
		Num:  []bool{true, false, true, true, true, true, true, true, false, false},
	}
	// a training step whose analysis estimated the fused backwards (an older one did not): each
	// time forward / backward, the share of GPU busy of both savings
	train := slices.ContainsFunc(a.Opportunities, func(o patterns.Opportunity) bool { return o.EstFusedBackwardUs > 0 })
	if train {
		s.Before = []para{{txt("Ranked by estimated saving, forward and backward. GPU time is what the instances' kernels take now, forward / backward (the backward ops the forward ones caused); the saving is the cost model's estimate of the fused forward and backward, not a measurement.")}}
		tb.Head[3], tb.Head[4], tb.Head[5], tb.Head[6] = "GPU time µs (fwd / bwd)", "est. fused µs (fwd / bwd)", "est. saving µs (fwd / bwd)", "% of GPU busy (fwd + bwd)"
	}
	for i := range a.Opportunities {
		o := &a.Opportunities[i]
		inst := strconv.Itoa(o.Instances)
		if o.BackwardInstances > 0 {
			inst += " / " + strconv.Itoa(o.BackwardInstances)
		}
		gpu, fused, saving, share := fmtUs(o.GPUTimeUs), fmtUs(o.EstFusedUs), fmtUs(o.EstSavingUs), fmtPct(o.SavingPct)
		if train {
			gpu += " / " + fmtUs(o.BackwardGPUTimeUs)
			fused += " / " + fmtUs(o.EstFusedBackwardUs)
			saving += " / " + fmtUs(o.EstBackwardSavingUs)
			if busy := a.Trace.GPUBusyUs; pos(busy) {
				share = fmtPct(100 * (o.EstSavingUs + o.EstBackwardSavingUs) / busy)
			}
		}
		var shapes []string
		for _, g := range o.Shapes {
			shapes = append(shapes, shapeGroupString(g))
		}
		src := cell{Text: "-", Class: "muted"}
		if x := sources(o, 3); x != "" {
			src = code(x)
		}
		tb.Rows = append(tb.Rows, []cell{
			numc(strconv.Itoa(i + 1)), code(o.Pattern), numc(inst), numc(gpu),
			numc(fused), numc(saving), numc(share),
			numc(strconv.Itoa(o.LaunchesSaved)), code(strings.Join(shapes, "; ")), src,
		})
		p := para{txt(fmt.Sprintf("%d. ", i+1)), code(o.Pattern)}
		if o.Fused != "" {
			p = append(p, txt(": fused as "), code(o.Fused))
		}
		for j, adv := range o.Advice {
			if j == 0 {
				p = append(p, txt(". Advice: "))
			} else {
				p = append(p, txt("; "))
			}
			p = append(p, code(adv))
		}
		s.After = append(s.After, p)
	}
	s.Table = tb
	s.After = append([]para{{txt("What to do:")}}, s.After...)
	if !hasSources(a) {
		s.After = append(s.After, para{txt("The trace has no Python stacks: record it with "), code("with_stack=True"), txt(" to get the source line of each chain.")})
	}
	return s
}

func hasSources(a *patterns.Report) bool {
	for _, o := range a.Opportunities {
		for _, g := range o.Shapes {
			if len(g.Sources) > 0 {
				return true
			}
		}
	}
	return false
}

func generatedSection(in Inputs, sp []Speedup) section {
	s := section{ID: "generated", Title: "Generated kernels"}
	if len(in.Generated) == 0 {
		s.Before = []para{{txt("No kernel folders given (run "), code("fuseadvise gen"), txt(").")}}
		return s
	}
	s.Before = []para{{txt("One folder per opportunity: the Triton kernel, the eager reference, tests and a benchmark script. Check one with "),
		code("TRITON_INTERPRET=1 python -m pytest -q ."), txt(" (CPU) or "), code("python bench.py"), txt(" (GPU).")}}
	tb := &table{
		Head: []string{"folder", "pattern", "dtype", "shapes", "est. saving µs", "est. fused µs per call", "source", "verified", "benchmark"},
		Num:  []bool{false, false, false, false, true, true, false, false, false},
	}
	for _, g := range in.Generated {
		src := g.Source.Site
		if g.Source.Trace != "" {
			src = g.Source.Trace + ": " + src
		}
		tb.Rows = append(tb.Rows, []cell{
			code(g.Name), code(g.Pattern), code(g.Dtype), code(shapesString(g.Shapes)),
			numc(fmtUs(g.EstSavingUs)), numc(estCell(g.EstFusedUs)), code(src), verifyStatus(in.Verify, g), benchStatus(sp, g),
		})
	}
	s.Table = tb
	return s
}

func estCell(us float64) string {
	if !pos(us) {
		return "-"
	}
	return fmtUs(us)
}

// matches reports whether a result row (name, pattern, dtype) belongs to folder g: by
// name when the row has one, else by pattern and dtype.
func matches(name, pattern, dtype string, g GenFolder) bool {
	if name != "" {
		return name == g.Name
	}
	return pattern == g.Pattern && (dtype == "" || dtype == g.Dtype)
}

func benchStatus(sp []Speedup, g GenFolder) cell {
	var found []Speedup
	for _, s := range sp {
		if matches(s.Case.Name, s.Case.Pattern, s.Case.Dtype, g) {
			found = append(found, s)
		}
	}
	if len(found) == 0 {
		return cell{Text: "not benchmarked", Class: "muted"}
	}
	// the worst verdict speaks for the folder
	worst := found[0]
	for _, s := range found[1:] {
		if verdictRank(s.Verdict) < verdictRank(worst.Verdict) {
			worst = s
		}
	}
	c := verdictCell(worst.Verdict)
	if vs, isNoise := worst.VsEagerDecided(); vs > 0 {
		sep := " "
		if worst.Basis == OnPerCall {
			sep = " per call: "
		}
		c.Text = speedupCell(vs, isNoise) + sep + c.Text
	}
	return c
}

// decidedPerCall counts the verdicts of sp decided on per-call time.
func decidedPerCall(sp []Speedup) int {
	n := 0
	for _, s := range sp {
		if s.Basis == OnPerCall {
			n++
		}
	}
	return n
}

func verdictRank(v Verdict) int {
	for i, x := range []Verdict{Failed, NotTimed, DoNotShip, UseLibrary, UseCompile, Review, Noise, Ship} {
		if x == v {
			return i
		}
	}
	return -1
}

func speedupSection(in Inputs, sp []Speedup) section {
	s := section{ID: "speedups", Title: "Speedups"}
	r := in.Bench
	if r == nil {
		s.Before = []para{{txt("No benchmark results: the kernels were not timed on a GPU. Run "), code("fuseadvise bench"),
			txt(" on a machine with CUDA; until then the savings above are estimates, not measurements.")}}
		// the chart then shows the cost model's predicted speedups, titled as such
		s.Chart = len(predictedBars(in)) > 0
		return s
	}
	p := para{txt("Forward pass, one call. GPU time in µs: median (p20-p80) of each provider's CUDA-graph replay, timed by CUDA events around the call alone, ")}
	if r.FlushBytes > 0 {
		p = append(p, txt(fmt.Sprintf("L2 emptied before every call without leaving dirty lines (%s written, then %s read)", fmtBytes(r.FlushBytes), fmtBytes(r.FlushBytes))))
	} else {
		p = append(p, txt("L2 flushed before every call by "), code("triton.testing.do_bench"),
			txt(" (a 256 MiB write, whose dirty lines are written back inside the timed call: these times read a few µs high at large shapes)"))
	}
	p = append(p, txt("; microsecond-scale cases: "), code("do_bench_cudagraph"),
		txt(", many calls back to back in one graph, L2-warm."))
	if hasPerCall(sp) {
		p = append(p, txt(" Per call µs: the wall time per call of the provider called as an eager model calls it (no CUDA graph, back-to-back calls, one synchronize at the end), host overhead included; in parentheses, the host's time for one call to return."))
		if k := wallCopies(r); k > 0 {
			p = append(p, txt(fmt.Sprintf(" In the backward and full modes a call is %d chains with one backward (one torch.autograd.grad) over all of them, over %d: the autograd engine's cost per backward call is paid once per step, as in a model.", k, k)))
		}
		if in.Use == UseGraphs {
			p = append(p, txt(" Verdicts are decided on GPU time: the traced model runs under CUDA graphs or torch.compile, where a kernel's host overhead is not paid per call; the per-call verdict is beside it."))
		} else {
			p = append(p, txt(" Verdicts are decided on per-call time, as an eager model pays it (the analysis does not record whether the trace ran under CUDA graphs or torch.compile; if it did, the GPU-time verdict beside it applies)."))
		}
	}
	if r.GPU != "" {
		p = append(p, txt(" GPU "), code(r.GPU))
	}
	if r.Torch != "" || r.Triton != "" {
		p = append(p, txt(", torch "), code(r.Torch), txt(", triton "), code(r.Triton))
	}
	if pos(r.CopyTBps) {
		p = append(p, txt(fmt.Sprintf(", measured copy bandwidth %s TB/s", fixed(r.CopyTBps, 2))))
	}
	s.Before = []para{append(p, txt("."))}
	if r.Command != "" || r.Date != "" {
		q := para{}
		if r.Command != "" {
			q = append(q, txt("Command: "), code(r.Command))
		}
		if r.Date != "" {
			if len(q) > 0 {
				q = append(q, txt("; "))
			}
			q = append(q, txt("date: "), code(r.Date))
		}
		s.Before = append(s.Before, q)
	}
	if len(sp) == 0 {
		s.Before = append(s.Before, para{txt("The benchmark results hold no case.")})
		return s
	}
	s.Table = speedupTable(sp, in.Use)
	s.Chart = true
	if errs := predictionSummary(sp); errs != "" {
		s.After = append(s.After, para{txt(errs)})
	}
	return s
}

// speedupTable is the speedup section's table. With per-call figures (any case has them),
// each time and speedup has a per-call column beside it, and the verdict the other figure's
// verdict.
func speedupTable(sp []Speedup, use Use) *table {
	perCall := hasPerCall(sp)
	tb := &table{}
	col := func(head string, num bool) {
		tb.Head = append(tb.Head, head)
		tb.Num = append(tb.Num, num)
	}
	col("case", false)
	col("dtype, shape", false)
	for _, p := range []string{"fused", "eager", "compile"} {
		col(p+" µs", true)
		if perCall {
			col(p+" per call µs", true)
		}
	}
	sdpa, flex, other := libraryColumns(sp)
	if sdpa {
		col("sdpa µs", true)
	}
	if flex {
		col("flex µs", true)
	}
	if other {
		col("library µs", true)
	}
	for _, p := range []string{"vs eager", "vs compile"} {
		col(p, true)
		if perCall {
			col(p+" per call", true)
		}
	}
	for _, h := range []string{"% of floor", "% of copy", "predicted µs", "prediction error"} {
		col(h, true)
	}
	col("verdict", false)
	if perCall {
		other := "per-call verdict"
		if use == UseEager {
			other = "GPU-time verdict"
		}
		col(other, false)
	}
	lib := hasLibrary(sp)
	if lib {
		col("recommended", false)
	}
	col("notes", false)
	for _, x := range sp {
		c := x.Case
		floor, cp, pred, perr := "-", "-", "-", "-"
		if x.FloorPct > 0 {
			floor = fmtPct(x.FloorPct)
		}
		if x.CopyPct > 0 {
			cp = fmtPct(x.CopyPct)
		}
		if x.HasPred {
			pred = fmtUs(c.PredictedUs)
			perr = fmtSignedPct(x.PredErrPct)
		}
		row := []cell{code(x.Label), code(x.Sub)}
		for _, t := range [][5]float64{
			{c.FusedUs, c.FusedP20, c.FusedP80, c.FusedWallUs, c.FusedHostUs},
			{c.EagerUs, c.EagerP20, c.EagerP80, c.EagerWallUs, c.EagerHostUs},
			{c.CompileUs, c.CompileP20, c.CompileP80, c.CompileWallUs, c.CompileHostUs},
		} {
			row = append(row, numc(timeCell(t[0], t[1], t[2])))
			if perCall {
				row = append(row, numc(perCallCell(t[3], t[4])))
			}
		}
		if sdpa {
			row = append(row, libraryCell(&c, "sdpa_"+c.SdpaBackend, sdpaBackends[c.SdpaBackend]))
		}
		if flex {
			row = append(row, libraryCell(&c, "flex", ""))
		}
		if other {
			row = append(row, libraryCell(&c, c.LibraryOp, LibraryNames[c.LibraryOp]))
		}
		row = append(row, numc(speedupCell(x.VsEager, x.EagerNoise)))
		if perCall {
			row = append(row, numc(speedupCell(x.WallVsEager, x.WallEagerNoise)))
		}
		row = append(row, numc(speedupCell(x.VsCompile, x.CompileNoise)))
		if perCall {
			row = append(row, numc(speedupCell(x.WallVsCompile, x.WallCompileNoise)))
		}
		row = append(row, numc(floor), numc(cp), numc(pred), numc(perr), verdictCell(x.Verdict))
		if perCall { // the column holds the verdict on the figure that does not decide for use
			other := x.CallVerdict
			if use == UseEager {
				other = x.GPUVerdict
			}
			if other == "" {
				row = append(row, cell{Text: "-", Class: "muted"})
			} else {
				row = append(row, verdictCell(other))
			}
		}
		if lib {
			if r := x.Recommendation(); r != "" {
				row = append(row, txt(r))
			} else {
				row = append(row, cell{Text: "-", Class: "muted"})
			}
		}
		tb.Rows = append(tb.Rows, append(row, code(strings.Join(x.Notes, "; "))))
	}
	return tb
}

// perCallCell is "wall (host h)", "-" when not measured.
func perCallCell(wall, host float64) string {
	if !pos(wall) {
		return "-"
	}
	if pos(host) {
		return fmtUs(wall) + " (host " + fmtUs(host) + ")"
	}
	return fmtUs(wall)
}

// fmtBytes prints a byte count in MiB, or in bytes below one MiB.
func fmtBytes(n int64) string {
	if n >= 1<<20 {
		return shortest(float64(n)/(1<<20)) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// predictionSummary describes how far the analyzer's predicted fused times were from the
// measured ones.
func predictionSummary(sp []Speedup) string {
	var errs []float64
	for _, s := range sp {
		if s.HasPred {
			errs = append(errs, math.Abs(s.PredErrPct))
		}
	}
	if len(errs) == 0 {
		return ""
	}
	sort.Float64s(errs)
	med := errs[len(errs)/2]
	if len(errs)%2 == 0 {
		med = (errs[len(errs)/2-1] + errs[len(errs)/2]) / 2
	}
	return fmt.Sprintf("Cost model: predicted fused time within %s of the measurement (median absolute error over %d cases; worst %s).",
		fmtPct(med), len(errs), fmtPct(errs[len(errs)-1]))
}

func readingSection() section {
	return section{ID: "reading", Title: "How to read this report", List: []para{
		{txt("vs eager, vs compile: the baseline's median time over the fused kernel's; above 1.0× the fused kernel is faster.")},
		{txt("(noise): the two medians differ by less than the wider of their p20-p80 spreads (or the ranges of the repeated runs' medians overlap, or lie closer than the narrower is wide), so the difference is not measurable.")},
		{txt("% of floor: the floor time (fewest bytes over the measured copy bandwidth, or FLOPs over the GEMM rate) over the fused time; 100% is as fast as the hardware allows.")},
		{txt("% of copy: an elementwise copy of the same bytes, timed the same way, over the fused time; 100% is as fast as the memory system moves that many bytes (smaller working sets do not reach the floor's bandwidth); not shown for GEMM patterns, whose floor is their arithmetic.")},
		{txt("prediction error: (predicted - measured) / measured fused time; negative means the cost model was optimistic.")},
		{txt("per call: the wall time per call of plain calls back to back (no CUDA graph), what an eager model pays, the host's overhead included; host: the time for one call to return. GPU time leaves the host out, as CUDA graphs and torch.compile do.")},
		{txt(fmt.Sprintf("verdicts: ship (measurably faster than eager); noise (within the spread); review (above %g×: check the baseline and shapes before believing it); do not ship (below %.1f×); failed (wrong results on the GPU, or the harness failed); not timed. Decided on per-call time for a model that calls its kernels eagerly, on GPU time under CUDA graphs or torch.compile (and for results without per-call times); the other figure's verdict is beside it.", ReviewAbove, ShipAtLeast))},
		{txt("verification: pass, FAIL (an output or gradient outside the tolerance), ERROR (the kernel raised), not run (refused: too large for the interpreter, or timed out), skipped (the case does not apply).")},
	}}
}

// wallCopies is the number of chains a training mode's per-call figures were taken over
// (bench.Case.WallCopies, the largest among r's cases), 0 when none was.
func wallCopies(r *bench.Result) int {
	k := 0
	for _, c := range r.Cases {
		k = max(k, c.WallCopies)
	}
	return k
}
