package tracediff

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/fuseadvise/fuseadvise/analysis"
	"github.com/fuseadvise/fuseadvise/trace"
)

// Side is one trace's (or rank directory's) figures, summed over ranks.
type Side struct {
	Path string `json:"path"`
	// Steps is the number of ProfilerStep#N spans (of the first rank); 0 when the trace has
	// none and the step is the trace's span (StepSource "trace span").
	Steps      int     `json:"steps"`
	StepSource string  `json:"step_source"`
	StepUs     float64 `json:"step_us"`
	// PerStepUs is StepUs over Steps (StepUs when there are no steps).
	PerStepUs float64 `json:"per_step_us"`
	GPUBusyUs float64 `json:"gpu_busy_us"`
	KernelUs  float64 `json:"kernel_us"`
	Kernels   int     `json:"kernels"`  // kernel activities on the GPU
	Launches  int     `json:"launches"` // host launch calls (cudaLaunchKernel, cudaGraphLaunch, ...)
	Ops       int     `json:"ops"`      // CPU ops recorded (cpu_op events)
	// EstSavingUs is what the analysis of this trace says fusing its chains would save
	// (patterns.Report.Totals.EstSavingUs; 0 when nothing was found).
	EstSavingUs float64 `json:"est_saving_us"`
}

// PatternDelta is one pattern's chains before and after.
type PatternDelta struct {
	Pattern         string  `json:"pattern"`
	InstancesBefore int     `json:"instances_before"`
	InstancesAfter  int     `json:"instances_after"`
	GPUBeforeUs     float64 `json:"gpu_time_before_us"`
	GPUAfterUs      float64 `json:"gpu_time_after_us"`
	EstSavingUs     float64 `json:"est_saving_before_us"` // the analysis of BEFORE's estimate for this pattern
}

// Kernel is a kernel name's launches and total GPU time in one trace.
type Kernel struct {
	Name  string  `json:"name"`
	Count int     `json:"count"`
	Us    float64 `json:"us"`
}

// Verdict compares the predicted saving with the measured one, per step (over the whole
// trace when it has no ProfilerStep spans).
type Verdict struct {
	PredictedUs   float64 `json:"predicted_saving_us"`
	BusySavingUs  float64 `json:"measured_gpu_busy_saving_us"`
	StepSavingUs  float64 `json:"measured_step_saving_us"`
	BusyPctOfPred float64 `json:"gpu_busy_saving_pct_of_predicted"`
	StepPctOfPred float64 `json:"step_saving_pct_of_predicted"`
	// Outcome is "arrived" (the GPU busy saving is at least ArrivedPct of the prediction),
	// "partly", "not arrived" (no saving, or a loss), "nothing predicted", or "not
	// comparable" (the two profiles do not run the same work: a note says why).
	Outcome string `json:"outcome"`
	Basis   string `json:"basis"` // "per step" or "whole trace"
}

// ArrivedPct is the share of the predicted saving the measured GPU busy saving must reach
// for the verdict "arrived".
const ArrivedPct = 80

// Result is the comparison.
type Result struct {
	Before      Side           `json:"before"`
	After       Side           `json:"after"`
	Patterns    []PatternDelta `json:"patterns"`
	Appeared    []Kernel       `json:"kernels_appeared"`    // in AFTER only, by GPU time
	Disappeared []Kernel       `json:"kernels_disappeared"` // in BEFORE only, by GPU time
	Verdict     Verdict        `json:"verdict"`
	Notes       []string       `json:"notes,omitempty"`
}

// Options select what Compare lists.
type Options struct {
	NTop int // kernels listed as appeared and disappeared (< 0: all)
}

// Compare analyzes the traces (files or rank directories) before and after and compares
// them. The traces are returned too, for their warnings: before's first.
func Compare(before, after string, o Options) (*Result, []*trace.Trace, error) {
	ab, tb, err := analysis.Run(before, analysis.Options{NTop: -1})
	if err != nil {
		return nil, nil, err
	}
	aa, ta, err := analysis.Run(after, analysis.Options{NTop: -1})
	if err != nil {
		return nil, nil, err
	}
	r := &Result{Before: side(before, ab, tb), After: side(after, aa, ta)}
	r.Patterns = patternDeltas(ab, aa)
	r.Disappeared, r.Appeared = kernelDeltas(ab.Summary.TopKernels, aa.Summary.TopKernels, o.NTop)
	r.Verdict = verdict(r.Before, r.After)
	if r.Before.Steps > 0 && r.After.Steps > 0 && r.Before.Steps != r.After.Steps {
		r.Notes = append(r.Notes, fmt.Sprintf("BEFORE has %d profiler steps and AFTER %d: compare the per-step figures, not the totals", r.Before.Steps, r.After.Steps))
	}
	if (r.Before.Steps > 0) != (r.After.Steps > 0) {
		r.Notes = append(r.Notes, "only one of the traces has ProfilerStep spans: the verdict compares whole traces and step times are not comparable")
	}
	if note := sameWorkload(ab.Summary.TopKernels, aa.Summary.TopKernels, r.Before, r.After); note != "" {
		r.Notes = append(r.Notes, note)
		if r.Verdict.Outcome != "nothing predicted" {
			r.Verdict.Outcome = "not comparable" // the figures stay, the judgement does not
		}
	}
	if r.Before.Kernels == 0 {
		r.Notes = append(r.Notes, "BEFORE has no GPU kernels")
	}
	r.round()
	return r, append(tb, ta...), nil
}

// round keeps two decimals of every time, so that the JSON is stable across platforms.
func (r *Result) round() {
	for _, s := range []*Side{&r.Before, &r.After} {
		roundAll(&s.StepUs, &s.PerStepUs, &s.GPUBusyUs, &s.KernelUs, &s.EstSavingUs)
	}
	for i := range r.Patterns {
		p := &r.Patterns[i]
		roundAll(&p.GPUBeforeUs, &p.GPUAfterUs, &p.EstSavingUs)
	}
	for _, ks := range [][]Kernel{r.Appeared, r.Disappeared} {
		for i := range ks {
			roundAll(&ks[i].Us)
		}
	}
	v := &r.Verdict
	roundAll(&v.PredictedUs, &v.BusySavingUs, &v.StepSavingUs, &v.BusyPctOfPred, &v.StepPctOfPred)
}

func roundAll(vs ...*float64) {
	for _, v := range vs {
		*v = math.Round(*v*100) / 100
	}
}

// SameWorkloadPct is how far apart (per step) the launches of the kernels both traces ran
// may be before the traces are said not to look like the same workload.
const SameWorkloadPct = 10

// sameWorkload returns a note when the kernels both traces ran (the work the fused kernels
// leave alone: GEMMs, attention, optimizer) ran a different number of times per step: the
// traces then profile different work (layers, steps, batch) and the deltas are not the
// fusion's alone.
func sameWorkload(before, after []analysis.NameTime, b, a Side) string {
	counts := map[string]int{}
	for _, k := range after {
		counts[k.Name] = k.Count
	}
	var nb, na int
	for _, k := range before {
		if c, ok := counts[k.Name]; ok {
			nb += k.Count
			na += c
		}
	}
	sb, sa := 1.0, 1.0
	if b.Steps > 0 && a.Steps > 0 {
		sb, sa = float64(b.Steps), float64(a.Steps)
	}
	pb, pa := float64(nb)/sb, float64(na)/sa
	if pb == 0 && pa == 0 {
		return "the traces share no kernel name: they do not look like the same workload"
	}
	if math.Abs(pa-pb) > SameWorkloadPct/100.0*max(pb, pa) {
		return fmt.Sprintf("the kernels both traces ran were launched %d times in BEFORE and %d in AFTER (%s): the traces do not look like the same workload, so the deltas are not the fusion's alone",
			nb, na, map[bool]string{true: "per step " + strconv.FormatFloat(pb, 'f', 1, 64) + " vs " + strconv.FormatFloat(pa, 'f', 1, 64), false: "whole traces"}[b.Steps > 0 && a.Steps > 0])
	}
	return ""
}

func us(ns int64) float64 { return float64(ns) / 1e3 }

func side(path string, a *analysis.Result, traces []*trace.Trace) Side {
	s := Side{Path: path, StepSource: "profiler steps", Launches: a.Summary.Launches, KernelUs: a.Summary.KernelUs}
	for i, t := range traces {
		for _, st := range t.Steps {
			s.StepUs += us(st.Dur)
			if st.Num < 0 {
				s.StepSource = "trace span"
			} else if i == 0 {
				s.Steps++
			}
		}
		s.GPUBusyUs += us(t.GPUBusyNs())
		s.Kernels += t.KernelCount()
		for j := range t.Ops {
			if t.Ops[j].Kind == trace.KindCPUOp {
				s.Ops++
			}
		}
	}
	if s.StepSource == "trace span" {
		s.Steps = 0
	}
	s.PerStepUs = s.StepUs / float64(max(s.Steps, 1))
	if a.Totals != nil {
		s.EstSavingUs = a.Totals.EstSavingUs
	}
	return s
}

func patternDeltas(before, after *analysis.Result) []PatternDelta {
	byID := map[string]*PatternDelta{}
	var order []string
	get := func(id string) *PatternDelta {
		d := byID[id]
		if d == nil {
			d = &PatternDelta{Pattern: id}
			byID[id] = d
			order = append(order, id)
		}
		return d
	}
	for _, op := range before.Opportunities {
		d := get(op.Pattern)
		d.InstancesBefore += op.Instances
		d.GPUBeforeUs += op.GPUTimeUs
		d.EstSavingUs += op.EstSavingUs
	}
	for _, op := range after.Opportunities {
		d := get(op.Pattern)
		d.InstancesAfter += op.Instances
		d.GPUAfterUs += op.GPUTimeUs
	}
	out := make([]PatternDelta, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	slices.SortStableFunc(out, func(a, b PatternDelta) int {
		if c := cmp.Compare(b.GPUBeforeUs-b.GPUAfterUs, a.GPUBeforeUs-a.GPUAfterUs); c != 0 {
			return c
		}
		return cmp.Compare(a.Pattern, b.Pattern)
	})
	return out
}

// kernelDeltas returns the kernels only before has (gone) and only after has (new), each
// by GPU time, at most n of each (n < 0: all).
func kernelDeltas(before, after []analysis.NameTime, n int) (gone, added []Kernel) {
	only := func(a, b []analysis.NameTime) []Kernel {
		in := map[string]bool{}
		for _, k := range b {
			in[k.Name] = true
		}
		var out []Kernel
		for _, k := range a {
			if !in[k.Name] {
				out = append(out, Kernel{Name: k.Name, Count: k.Count, Us: k.Us})
			}
		}
		slices.SortStableFunc(out, func(x, y Kernel) int {
			if c := cmp.Compare(y.Us, x.Us); c != 0 {
				return c
			}
			return cmp.Compare(x.Name, y.Name)
		})
		if n >= 0 && len(out) > n {
			out = out[:n]
		}
		return out
	}
	return only(before, after), only(after, before)
}

func verdict(b, a Side) Verdict {
	v := Verdict{Basis: "whole trace"}
	nb, na := 1.0, 1.0
	if b.Steps > 0 && a.Steps > 0 {
		v.Basis = "per step"
		nb, na = float64(b.Steps), float64(a.Steps)
	}
	v.PredictedUs = b.EstSavingUs / nb
	v.BusySavingUs = b.GPUBusyUs/nb - a.GPUBusyUs/na
	v.StepSavingUs = b.StepUs/nb - a.StepUs/na
	switch {
	case v.PredictedUs <= 0:
		v.Outcome = "nothing predicted"
		return v
	case v.BusySavingUs >= v.PredictedUs*ArrivedPct/100:
		v.Outcome = "arrived"
	case v.BusySavingUs > 0:
		v.Outcome = "partly"
	default:
		v.Outcome = "not arrived"
	}
	v.BusyPctOfPred = v.BusySavingUs / v.PredictedUs * 100
	v.StepPctOfPred = v.StepSavingUs / v.PredictedUs * 100
	return v
}

// WriteJSON writes r as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}
