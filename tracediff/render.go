package tracediff

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/analysis"
)

// WriteText writes r as box tables, or as Markdown.
func (r *Result) WriteText(w io.Writer, markdown bool) error {
	analysis.Heading(w, markdown, 2, "Before and after")
	b, a := r.Before, r.After
	rows := [][]string{
		{"file", b.Path, a.Path, "", ""},
		{"steps", steps(b), steps(a), "", ""},
		row("step time µs", b.StepUs, a.StepUs),
	}
	if b.Steps > 0 || a.Steps > 0 {
		rows = append(rows, row("step time per step µs", b.PerStepUs, a.PerStepUs))
	}
	rows = append(rows,
		row("GPU busy µs", b.GPUBusyUs, a.GPUBusyUs),
		row("kernel time µs", b.KernelUs, a.KernelUs),
		intRow("kernels", b.Kernels, a.Kernels),
		intRow("launch calls", b.Launches, a.Launches),
		intRow("CPU ops", b.Ops, a.Ops),
		row("est saving µs (analysis)", b.EstSavingUs, a.EstSavingUs),
	)
	if err := analysis.WriteTable(w, markdown, "lrrrr", []string{"", "before", "after", "delta", "delta %"}, rows); err != nil {
		return err
	}

	fmt.Fprintln(w)
	analysis.Heading(w, markdown, 3, "Chains by pattern")
	if len(r.Patterns) == 0 {
		fmt.Fprintln(w, "No chain of the catalog was found in either trace.")
	} else {
		rows = rows[:0]
		for _, p := range r.Patterns {
			rows = append(rows, []string{p.Pattern, strconv.Itoa(p.InstancesBefore), strconv.Itoa(p.InstancesAfter),
				f1(p.GPUBeforeUs), f1(p.GPUAfterUs), signed(p.GPUAfterUs - p.GPUBeforeUs), deltaPct(p.GPUBeforeUs, p.GPUAfterUs), f1(p.EstSavingUs)})
		}
		if err := analysis.WriteTable(w, markdown, "lrrrrrrr", []string{"pattern", "instances before", "after", "GPU µs before", "after", "delta", "delta %", "est saving µs"}, rows); err != nil {
			return err
		}
	}

	for _, part := range []struct {
		title string
		v     []Kernel
	}{{"Kernels gone (in BEFORE only)", r.Disappeared}, {"Kernels new (in AFTER only)", r.Appeared}} {
		fmt.Fprintln(w)
		analysis.Heading(w, markdown, 3, part.title)
		if len(part.v) == 0 {
			fmt.Fprintln(w, "None.")
			continue
		}
		rows = rows[:0]
		for _, k := range part.v {
			rows = append(rows, []string{analysis.Shorten(k.Name, 90), strconv.Itoa(k.Count), f1(k.Us)})
		}
		if err := analysis.WriteTable(w, markdown, "lrr", []string{"name", "count", "GPU µs"}, rows); err != nil {
			return err
		}
	}

	fmt.Fprintln(w)
	analysis.Heading(w, markdown, 3, "Did the predicted saving arrive?")
	fmt.Fprintln(w, analysis.CellText(r.Verdict.Sentence(), markdown))
	for _, n := range r.Notes {
		fmt.Fprintf(w, "\nnote: %s\n", analysis.CellText(n, markdown))
	}
	return nil
}

// Sentence says the verdict in one line.
func (v Verdict) Sentence() string {
	basis := "per step"
	if v.Basis != "per step" {
		basis = "over the whole trace"
	}
	if v.Outcome == "not comparable" {
		return fmt.Sprintf("Not comparable: the two profiles do not run the same work (see the notes). Measured %s: GPU busy saving %s µs, step time saving %s µs, against %s µs predicted.",
			basis, f1(v.BusySavingUs), f1(v.StepSavingUs), f1(v.PredictedUs))
	}
	if v.Outcome == "nothing predicted" {
		return fmt.Sprintf("Nothing predicted: the analysis of BEFORE found no saving. Measured %s: GPU busy %s µs, step time %s µs.",
			basis, signed(-v.BusySavingUs), signed(-v.StepSavingUs))
	}
	return fmt.Sprintf("%s: predicted saving %s µs %s; measured GPU busy saving %s µs (%s of predicted), step time saving %s µs (%s of predicted).",
		capitalize(v.Outcome), f1(v.PredictedUs), basis, f1(v.BusySavingUs), pct(v.BusyPctOfPred), f1(v.StepSavingUs), pct(v.StepPctOfPred))
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func steps(s Side) string {
	if s.Steps == 0 {
		return "none (trace span)"
	}
	return strconv.Itoa(s.Steps)
}

func row(name string, before, after float64) []string {
	return []string{name, f1(before), f1(after), signed(after - before), deltaPct(before, after)}
}

func intRow(name string, before, after int) []string {
	d := strconv.Itoa(after - before)
	if after > before {
		d = "+" + d
	}
	return []string{name, strconv.Itoa(before), strconv.Itoa(after), d, deltaPct(float64(before), float64(after))}
}

func deltaPct(before, after float64) string {
	if before == 0 {
		if after == 0 {
			return "0.0%"
		}
		return "new"
	}
	return signedPct((after - before) / before * 100)
}

func f1(v float64) string { return strconv.FormatFloat(zero(v), 'f', 1, 64) }

func pct(v float64) string { return f1(v) + "%" }

func signed(v float64) string {
	s := f1(v)
	if !strings.HasPrefix(s, "-") && s != "0.0" {
		s = "+" + s
	}
	return s
}

func signedPct(v float64) string { return signed(v) + "%" }

// zero turns values that print as -0.0 into 0.
func zero(v float64) float64 {
	if math.Abs(v) < 0.05 {
		return 0
	}
	return v
}
