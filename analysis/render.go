package analysis

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/report"
)

func sortNameTimes(v []NameTime) {
	slices.SortStableFunc(v, func(a, b NameTime) int {
		if c := cmp.Compare(b.Us, a.Us); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

// WriteTable writes rows under a header, as a box table or as Markdown: analyze's tables,
// also used by the verbs that print alongside it (diff). align has one entry per column: 'l'
// or 'r'. Cells pass through CellText.
func WriteTable(w io.Writer, markdown bool, align string, header []string, rows [][]string) error {
	al := make(tw.Alignment, len(align))
	for i, c := range align {
		al[i] = tw.AlignLeft
		if c == 'r' {
			al[i] = tw.AlignRight
		}
	}
	opts := []tablewriter.Option{
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithAlignment(al),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
	}
	if markdown {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewMarkdown()))
	} else {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{Symbols: tw.NewSymbols(tw.StyleLight)})))
	}
	t := tablewriter.NewTable(w, opts...)
	t.Header(toAny(header)...)
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = CellText(c, markdown)
		}
		if err := t.Append(toAny(cells)...); err != nil {
			return err
		}
	}
	return t.Render()
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// CellText makes trace-derived text (op and kernel names, paths, python frames) safe for
// the output: no escape sequences or line breaks reach a terminal, no markup a Markdown page.
func CellText(s string, markdown bool) string {
	if markdown {
		return report.MarkdownText(s)
	}
	return report.PlainText(s)
}

// f1 formats microseconds with one decimal.
func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// fwdBwd formats a forward and a backward time as "fwd / bwd" (one decimal each).
func fwdBwd(fwd, bwd float64) string { return f1(fwd) + " / " + f1(bwd) }

func pct(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + "%" }

// Shorten cuts long (templated C++) kernel names for tables; JSON keeps them whole.
func Shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// Heading writes a section title: a Markdown heading of level, or the plain line.
func Heading(w io.Writer, markdown bool, level int, s string) {
	if markdown {
		fmt.Fprintf(w, "%s %s\n\n", strings.Repeat("#", level), s)
		return
	}
	fmt.Fprintf(w, "%s\n\n", s)
}

func writeSummary(w io.Writer, a *Result, markdown bool) error {
	t, s := a.Trace, a.Summary
	Heading(w, markdown, 2, "Trace")
	busyPct := 0.0
	if t.GPUBusyUs+s.IdleUs > 0 {
		busyPct = 100 * t.GPUBusyUs / (t.GPUBusyUs + s.IdleUs)
	}
	dataflow := t.Dataflow
	if dataflow == "" {
		dataflow = "inferred"
	}
	rows := [][]string{
		{"file", t.Path},
		{"device", t.Device},
		{"ranks", strconv.Itoa(s.Ranks)},
		{"steps", stepsString(t.Steps)},
		{"GPU busy", f1(t.GPUBusyUs) + " µs"},
		{"GPU idle in steps", f1(s.IdleUs) + " µs (busy " + pct(busyPct) + ")"},
	}
	if tt := a.Totals; tt != nil {
		src := "ProfilerStep spans"
		if tt.StepSource != "profiler steps" {
			src = "the trace's span: no ProfilerStep"
		}
		rows = append(rows, []string{"step time", f1(tt.StepUs) + " µs (" + src + ")"})
		h := tt.Host
		bound := "no"
		if h.Bound {
			bound = "yes"
		}
		rows = append(rows, []string{"host-bound", fmt.Sprintf("%s: GPU busy %s of the step, %s without the profiler's %s µs per recorded op",
			bound, pct(tt.GPUBusyPctOfStep), pct(h.GPUBusyPctNoProfiler), f1(h.ProfilerOpUs))})
	}
	rows = append(rows, [][]string{
		{"kernels", strconv.Itoa(t.Kernels)},
		{"launches", strconv.Itoa(s.Launches)},
		{"dataflow", dataflow},
	}...)
	if err := WriteTable(w, markdown, "ll", []string{"trace", "value"}, rows); err != nil {
		return err
	}
	if err := writeRanks(w, a, markdown); err != nil {
		return err
	}
	for _, part := range []struct {
		title string
		v     []NameTime
	}{{"Top kernels by GPU time", s.TopKernels}, {"Top ops by GPU time (inclusive)", s.TopOps}} {
		if len(part.v) == 0 {
			continue
		}
		fmt.Fprintln(w)
		Heading(w, markdown, 3, part.title)
		rows = rows[:0]
		for _, k := range part.v {
			share := 0.0
			if t.GPUBusyUs > 0 {
				share = 100 * k.Us / t.GPUBusyUs
			}
			rows = append(rows, []string{Shorten(k.Name, 90), strconv.Itoa(k.Count), f1(k.Us), pct(share)})
		}
		if err := WriteTable(w, markdown, "lrrr", []string{"name", "count", "GPU µs", "% busy"}, rows); err != nil {
			return err
		}
	}
	return nil
}

// writeOpportunities prints the ranked opportunities, then each one's shape groups and advice.
func writeOpportunities(w io.Writer, a *Result, markdown bool) error {
	fmt.Fprintln(w)
	Heading(w, markdown, 2, "Fusion opportunities")
	cov := report.CoverageOf(a.Report)
	if len(a.Opportunities) == 0 {
		fmt.Fprintln(w, "No chain of the catalog was found.")
		for _, line := range []string{report.TotalsOf(a.Report).Total, cov} { // generic chains alone count too
			if line != "" {
				fmt.Fprintf(w, "\n%s\n", CellText(line, markdown))
			}
		}
		return nil
	}
	// a training trace whose analysis estimated the fused backwards (an older one did not): the
	// times forward / backward, the share of GPU busy of both savings
	train := slices.ContainsFunc(a.Opportunities, func(o patterns.Opportunity) bool { return o.EstFusedBackwardUs > 0 })
	var rows [][]string
	for i, o := range a.Opportunities {
		row := []string{strconv.Itoa(i + 1), o.Pattern, strconv.Itoa(o.Instances), strconv.Itoa(o.BackwardInstances),
			f1(o.GPUTimeUs), f1(o.EstFusedUs), f1(o.EstSavingUs), pct(o.SavingPct), strconv.Itoa(o.LaunchesSaved)}
		if train {
			row[4], row[5], row[6] = fwdBwd(o.GPUTimeUs, o.BackwardGPUTimeUs), fwdBwd(o.EstFusedUs, o.EstFusedBackwardUs),
				fwdBwd(o.EstSavingUs, o.EstBackwardSavingUs)
			if busy := a.Trace.GPUBusyUs; busy > 0 {
				row[7] = pct((o.EstSavingUs + o.EstBackwardSavingUs) / busy * 100)
			}
		}
		if a.Totals != nil {
			row = append(row, strconv.Itoa(o.CountedInstances))
		}
		rows = append(rows, row)
	}
	align, head := "rlrrrrrrr", []string{"#", "pattern", "instances", "bwd", "GPU µs", "est fused µs", "est saving µs", "% busy", "launches saved"}
	if train {
		head = []string{"#", "pattern", "instances", "bwd", "GPU µs fwd / bwd", "est fused µs fwd / bwd", "est saving µs fwd / bwd", "% busy (fwd + bwd)", "launches saved"}
	}
	if a.Totals != nil { // the instances in the total: chains of another pattern that share their ops may save more
		align, head = align+"r", append(head, "in total")
	}
	if err := WriteTable(w, markdown, align, head, rows); err != nil {
		return err
	}
	tot := report.TotalsOf(a.Report)
	for _, line := range []string{tot.Total, cov, tot.Host} {
		if line != "" {
			fmt.Fprintf(w, "\n%s\n", CellText(line, markdown))
		}
	}
	if len(tot.Advice) > 0 {
		fmt.Fprintln(w)
	}
	for _, adv := range tot.Advice {
		fmt.Fprintf(w, "- %s\n", CellText("For a host-bound step: "+adv, markdown))
	}
	for i, o := range a.Opportunities {
		fmt.Fprintln(w)
		Heading(w, markdown, 3, CellText(fmt.Sprintf("%d. %s: %s", i+1, o.Pattern, o.Fused), markdown))
		rows = rows[:0]
		head := []string{"shapes", "dtype", "instances", "GPU µs", "est fused µs", "est saving µs"}
		if train {
			head = []string{"shapes", "dtype", "instances", "GPU µs fwd / bwd", "est fused µs fwd / bwd", "est saving µs fwd / bwd"}
		}
		for _, g := range o.Shapes {
			row := []string{patterns.FormatDims(g.Dims), string(g.DType), strconv.Itoa(g.Instances), f1(g.GPUTimeUs), f1(g.EstFusedUs), f1(g.EstSavingUs)}
			if train {
				row[3], row[4], row[5] = fwdBwd(g.GPUTimeUs, g.BackwardGPUTimeUs), fwdBwd(g.EstFusedUs, g.EstFusedBackwardUs),
					fwdBwd(g.EstSavingUs, g.EstBackwardSavingUs)
			}
			rows = append(rows, row)
		}
		if err := WriteTable(w, markdown, "llrrrr", head, rows); err != nil {
			return err
		}
		var src []string
		for _, g := range o.Shapes {
			for _, s := range g.Sources {
				if !slices.Contains(src, s) {
					src = append(src, s)
				}
			}
		}
		for _, s := range src {
			fmt.Fprintf(w, "- source: %s\n", CellText(s, markdown))
		}
		for _, adv := range o.Advice {
			fmt.Fprintf(w, "- %s\n", CellText(adv, markdown))
		}
	}
	return nil
}

// maxGenericRows is how many chains outside the catalog the text lists (the JSON's
// "generic_chains" holds them all).
const maxGenericRows = 10

// writeGenericChains prints the chains of memory-bound ops no catalog pattern claims, by
// estimated saving, then GPU time; nothing when there are none.
func writeGenericChains(w io.Writer, a *Result, markdown bool) error {
	cs := a.GenericChains
	if len(cs) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	Heading(w, markdown, 2, "Chains outside the catalog")
	// in training (a chain's backward ops in the trace): its time and saving forward / backward
	training := slices.ContainsFunc(cs, func(c patterns.GenericChain) bool { return c.BackwardGPUTimeUs > 0 })
	head := []string{"#", "ops", "shape", "dtype", "instances", "GPU µs", "kernels", "est saving µs", "not recoverable"}
	if training {
		head[5], head[7] = "GPU µs fwd / bwd", "est saving µs fwd / bwd"
	}
	var rows [][]string
	for i, c := range cs[:min(len(cs), maxGenericRows)] {
		why := c.Unrecoverable
		if why == "" {
			why = "-"
		}
		ops := c.Ops
		if c.GEMM != "" { // the GEMM head: the chain is its epilogue
			ops = append([]string{c.GEMM + " (GEMM)"}, ops...)
		}
		gpu, saving := f1(c.GPUTimeUs), f1(c.EstSavingUs)
		if training {
			gpu, saving = fwdBwd(c.GPUTimeUs, c.BackwardGPUTimeUs), fwdBwd(c.EstSavingUs, c.EstBackwardSavingUs)
		}
		rows = append(rows, []string{strconv.Itoa(i + 1), opSequence(ops, 60), patterns.FormatDims([][]int64{c.Dims}),
			string(c.DType), strconv.Itoa(c.Instances), gpu, strconv.Itoa(c.Kernels), saving, why})
	}
	if err := WriteTable(w, markdown, "rlllrrrrl", head, rows); err != nil {
		return err
	}
	more := ""
	if len(cs) > maxGenericRows {
		more = fmt.Sprintf(" %d more in the JSON.", len(cs)-maxGenericRows)
	}
	fmt.Fprintf(w, "\n%s\n", CellText("gen writes one fused kernel for each chain with an op program (generic-* folders); a chain that cannot be recovered from the trace says why and gets none."+more, markdown))
	return nil
}

// writeOptimizers prints the optimizer steps whose updates are not fused, with the fused
// step's estimate and the advice; nothing when there are none.
func writeOptimizers(w io.Writer, a *Result, markdown bool) error {
	if len(a.Optimizers) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	Heading(w, markdown, 2, "Optimizer steps")
	var rows [][]string
	for _, f := range a.Optimizers {
		params := "-"
		if f.Params > 0 {
			params = fmt.Sprintf("%d tensors, %s", f.Tensors, patterns.FormatCount(f.Params))
		}
		dtype, fused, saving := "-", "-", "-"
		if f.DType != "" {
			dtype = string(f.DType)
		}
		if f.Why == "" {
			fused, saving = f1(f.EstFusedUs), f1(f.EstSavingUs)
		}
		rows = append(rows, []string{f.Optimizer, f.Impl, strconv.Itoa(f.Steps), params, dtype, strconv.Itoa(f.Kernels), f1(f.GPUTimeUs), fused, saving})
	}
	if err := WriteTable(w, markdown, "llrllrrrr", []string{"optimizer", "runs as", "steps", "parameters", "dtype", "kernels", "GPU µs", "est fused µs", "est saving µs"}, rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, f := range a.Optimizers {
		s := f.Advice
		if f.Why != "" {
			s += " (no estimate: " + f.Why + ")"
		}
		fmt.Fprintf(w, "- %s\n", CellText(s, markdown))
	}
	return nil
}

// writeMasterWeights prints the training steps whose autocast casts fp32 GEMM weights, with
// the master weights' advice; nothing when there are none.
func writeMasterWeights(w io.Writer, a *Result, markdown bool) error {
	if len(a.MasterWeights) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	Heading(w, markdown, 2, "Weights cast by autocast")
	var rows [][]string
	for _, m := range a.MasterWeights {
		params, saving := "-", "-"
		if m.Tensors > 0 {
			params = fmt.Sprintf("%d tensors, %s", m.Tensors, patterns.FormatCount(m.Params))
		}
		if m.Why == "" {
			saving = f1(m.EstSavingUs)
		}
		opt := m.Optimizer
		if opt == "" {
			opt = "-"
		}
		rows = append(rows, []string{opt, strconv.Itoa(m.Steps), params, string(m.DType), strconv.Itoa(m.Kernels), f1(m.ForwardUs), f1(m.BackwardUs), saving})
	}
	if err := WriteTable(w, markdown, "lrllrrrr", []string{"optimizer", "steps", "weights", "cast to", "kernels", "GPU µs fwd", "GPU µs bwd", "est saving µs"}, rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, m := range a.MasterWeights {
		s := m.Text()
		fmt.Fprintf(w, "- %s\n", CellText(s, markdown))
	}
	return nil
}

// writeMultiheadAttention prints the traces whose nn.MultiheadAttention splits its packed
// projection with copies, with the drop-in's advice; nothing when there are none.
func writeMultiheadAttention(w io.Writer, a *Result, markdown bool) error {
	if len(a.MultiheadAttention) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	Heading(w, markdown, 2, "nn.MultiheadAttention's packed projection")
	var rows [][]string
	for _, f := range a.MultiheadAttention {
		saving := "-"
		if f.Why == "" {
			saving = f1(f.EstSavingUs)
		}
		rows = append(rows, []string{strconv.Itoa(f.Calls), strconv.Itoa(f.Steps), patterns.FormatDims(f.Shapes), strconv.FormatBool(f.BatchFirst),
			string(f.DType), strconv.Itoa(f.Kernels), f1(f.ForwardUs), f1(f.BackwardUs), saving})
	}
	if err := WriteTable(w, markdown, "rrllrrrrr", []string{"calls", "steps", "split", "batch_first", "dtype", "kernels", "GPU µs fwd", "GPU µs bwd", "est saving µs"}, rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, f := range a.MultiheadAttention {
		s := f.Text()
		fmt.Fprintf(w, "- %s\n", CellText(s, markdown))
	}
	return nil
}

// opSequence joins ops with arrows, cut after whole ops at about n bytes.
func opSequence(ops []string, n int) string {
	s := ""
	for i, o := range ops {
		if i > 0 {
			if len(s) > n {
				return s + " → …"
			}
			s += " → "
		}
		s += o
	}
	return s
}

// stepsString says "unknown" rather than 0 when the trace marks no step.
func stepsString(n int) string {
	if n == 0 {
		return "unknown (no ProfilerStep#N or optimizer step in the trace)"
	}
	return strconv.Itoa(n)
}

// WriteText writes r for a terminal (box tables) or, with markdown, as a Markdown page:
// the trace summary, the ranked opportunities with their shape groups, sources and advice,
// then the notes. Text from the trace is made safe for either.
func (r *Result) WriteText(w io.Writer, markdown bool) error {
	a := r
	if markdown {
		fmt.Fprintf(w, "# fuseadvise analysis\n\n")
	}
	if err := writeSummary(w, a, markdown); err != nil {
		return err
	}
	if err := writeOpportunities(w, a, markdown); err != nil {
		return err
	}
	if err := writeGenericChains(w, a, markdown); err != nil {
		return err
	}
	if err := writeOptimizers(w, a, markdown); err != nil {
		return err
	}
	if err := writeMasterWeights(w, a, markdown); err != nil {
		return err
	}
	if err := writeMultiheadAttention(w, a, markdown); err != nil {
		return err
	}
	if len(a.Notes) > 0 {
		fmt.Fprintln(w)
		Heading(w, markdown, 3, "Notes")
		for _, n := range a.Notes {
			fmt.Fprintf(w, "- %s\n", CellText(n, markdown))
		}
	}
	return nil
}

// maxRankRows is how many ranks the per-rank table lists one by one; beyond it, the ranks
// with the longest steps (the JSON's "ranks" holds them all).
const maxRankRows = 32

// writeRanks prints, for an analysis of several ranks, one row per rank (GPU busy, step
// time, kernels, the top opportunity's saving on it) and the spread of each column
// (min, median, max), so a straggler stands out. It prints nothing for one trace.
func writeRanks(w io.Writer, a *Result, markdown bool) error {
	if len(a.Ranks) < 2 {
		return nil
	}
	var top *patterns.Opportunity
	saving := map[int]float64{}
	if len(a.Opportunities) > 0 {
		top = &a.Opportunities[0]
		for _, rs := range top.PerRank {
			saving[rs.Rank] = rs.EstSavingUs
		}
	}
	head := []string{"rank", "GPU busy µs", "step µs", "kernels"}
	align := "rrrr"
	if top != nil {
		head, align = append(head, "top saving µs ("+top.Pattern+")"), align+"r"
	}
	cols := make([][]float64, len(head)-1)
	row := func(label string, v []float64) []string {
		r := []string{label, f1(v[0]), f1(v[1]), strconv.FormatFloat(v[2], 'f', -1, 64)}
		if top != nil {
			r = append(r, f1(v[3]))
		}
		return r
	}
	values := make([][]float64, len(a.Ranks))
	for i, rk := range a.Ranks {
		values[i] = []float64{rk.GPUBusyUs, rk.StepUs, float64(rk.Kernels), saving[rk.Rank]}
		for c := range cols {
			cols[c] = append(cols[c], values[i][c])
		}
	}
	shown := make([]int, len(a.Ranks))
	for i := range shown {
		shown[i] = i
	}
	fmt.Fprintln(w)
	Heading(w, markdown, 3, "Ranks")
	if len(shown) > maxRankRows {
		slices.SortStableFunc(shown, func(i, j int) int { return cmp.Compare(values[j][1], values[i][1]) })
		shown = shown[:maxRankRows]
		fmt.Fprintf(w, "%d ranks: the %d with the longest steps, then the spread over all of them (-format json lists every rank).\n\n", len(a.Ranks), maxRankRows)
	}
	var rows [][]string
	for _, i := range shown {
		rows = append(rows, row(strconv.Itoa(a.Ranks[i].Rank), values[i]))
	}
	for _, s := range []struct {
		label string
		pick  func([]float64) float64
	}{{"min", slices.Min[[]float64]}, {"median", median}, {"max", slices.Max[[]float64]}} {
		v := make([]float64, len(cols))
		for c := range cols {
			v[c] = s.pick(cols[c])
		}
		rows = append(rows, row(s.label, v))
	}
	return WriteTable(w, markdown, align, head, rows)
}

// median of v (the mean of the middle two for an even count); v is not changed.
func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
