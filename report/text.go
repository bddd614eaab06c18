package report

import (
	"fmt"
	"strings"

	"github.com/fuseadvise/fuseadvise/patterns"
)

// PlainText makes trace-derived text safe for a terminal table cell: control characters
// (escape sequences, line breaks) become spaces and invalid UTF-8 is replaced.
func PlainText(s string) string { return oneLine(s) }

// MarkdownText makes trace-derived text safe for a Markdown table cell or line: PlainText,
// then every punctuation character that could start markup is backslash-escaped.
func MarkdownText(s string) string { return mdText(s) }

// Totals is what the opportunities save together, in sentences for a report or a terminal
// (plain text: quote it for Markdown).
type Totals struct {
	// Total is the saving of the chains counted (a set sharing no op or kernel) with its
	// shares of GPU busy time and of the step time.
	Total string
	// Host, for a host-bound step, says so and what fusion saves on the host; "" otherwise.
	Host string
	// Advice fits a host-bound step (CUDA graphs, a larger batch).
	Advice []string
}

// TotalsOf describes a's totals; an analysis from before they were recorded gets the
// patterns' savings added up, said to count shared ops twice. Zero when a found nothing.
func TotalsOf(a *patterns.Report) Totals {
	if a == nil || len(a.Opportunities) == 0 && (a.Totals == nil || a.Totals.Instances == 0 && !pos(a.Totals.OptimizerSavingUs) && !pos(a.Totals.MasterWeightsSavingUs) && !pos(a.Totals.MultiheadAttentionSavingUs)) {
		return Totals{} // (generic chains alone have totals too, and so has an optimizer step)
	}
	busy := a.Trace.GPUBusyUs
	t := a.Totals
	if t == nil {
		var saving float64
		for _, o := range a.Opportunities {
			saving += o.EstSavingUs
		}
		s := fmt.Sprintf("Estimated saving %s µs, the patterns' savings added up (an analysis from before overlapping chains were resolved: chains that share ops count them twice)", fmtUs(saving))
		if pos(busy) {
			s += fmt.Sprintf(", %s of GPU busy time", fmtPct(100*saving/busy))
		}
		return Totals{Total: s + "."}
	}
	if t.Instances == 0 { // an optimizer step and no chain
		return Totals{Total: modulesTotal(t, busy, masterTotal(t, busy, optimizerTotal(t, busy, "No chain found.")))}
	}
	s := fmt.Sprintf("Estimated saving %s µs in total", fmtUs(t.EstSavingUs))
	var shares []string
	if pos(busy) {
		shares = append(shares, fmtPct(t.SavingPctOfGPUBusy)+" of GPU busy time")
	}
	if pos(t.StepUs) {
		shares = append(shares, fmtPct(t.SavingPctOfStep)+" of the step time")
	}
	if pos(t.EstBackwardSavingUs) { // a training step: the fused backwards' part
		shares = append(shares, fmtUs(t.EstBackwardSavingUs)+" µs of it in the backward")
	}
	if len(shares) > 0 {
		s += " (" + strings.Join(shares, ", ") + ")"
	}
	s += fmt.Sprintf(", from %s that share no op or kernel", plural(t.Instances, "chain"))
	if t.LeftOut > 0 {
		s += fmt.Sprintf("; %s overlapping them left out, so the patterns' rows (%s µs together) overstate it",
			plural(t.LeftOut, "chain"), fmtUs(t.SumOfPatternsUs))
	}
	out := Totals{Total: modulesTotal(t, busy, masterTotal(t, busy, optimizerTotal(t, busy, s+".")))}
	h := t.Host
	if !h.Bound {
		return out
	}
	hs := fmt.Sprintf("Host-bound: the GPU is busy %s of the step", fmtPct(t.GPUBusyPctOfStep))
	if pos(h.ProfilerOpUs) {
		hs += fmt.Sprintf(", %s once the profiler's own cost is taken out (%s µs for each of the %d recorded ops: what ops that do no work take here)",
			fmtPct(h.GPUBusyPctNoProfiler), fmtUs(h.ProfilerOpUs), h.RecordedEvents)
	}
	hs += ". The GPU saving shortens the step only once the host keeps ahead of the GPU."
	if h.LaunchesRemoved > 0 || h.OpsRemoved > 0 {
		hs += fmt.Sprintf(" On the host, fusion removes %s", plural(h.LaunchesRemoved, "launch"))
		if pos(h.LaunchUs) {
			hs += fmt.Sprintf(" × %s µs (the median launch call)", fmtUs(h.LaunchUs))
		}
		hs += " and " + plural(h.OpsRemoved, "op")
		if pos(h.OpUs) {
			hs += fmt.Sprintf(" × %s µs (the chains' median beyond their launches; %s µs without the profiler's cost)", fmtUs(h.OpUs), fmtUs(h.OpNoProfilerUs))
		}
		if pos(h.EstSavingUs) {
			hs += fmt.Sprintf(": %s to %s, at most %s of the step. These host costs are measured under the profiler, which slows every op and launch",
				fmtMs(h.EstSavingNoProfilerUs), fmtMs(h.EstSavingUs), fmtPct(h.SavingPctOfStep))
		}
		hs += "."
	}
	if h.TrainingChains > 0 {
		hs += fmt.Sprintf(" %s with a backward in the trace %s left out of the host's saving: a fused training call measured more host time than eager's chain (its autograd runs through Python; 23-229 µs a call more on an H200), so in training fusion saves GPU time, not host time.",
			plural(h.TrainingChains, "counted chain"), map[bool]string{true: "is", false: "are"}[h.TrainingChains == 1])
	}
	out.Host = hs
	out.Advice = h.Advice
	return out
}

// optimizerTotal is s followed by the optimizer steps' saving with fused=True, where the
// analysis estimated one: another change than the chains', and GPU time no chain holds.
func optimizerTotal(t *patterns.Totals, busy float64, s string) string {
	return s + otherSaving(t, busy, "The optimizer steps with fused=True", "Optimizer steps",
		t.OptimizerSavingUs, t.OptimizerPctOfGPUBusy, t.OptimizerSavingPctOfStep)
}

// masterTotal is s followed by the master weights' saving, where offered.
func masterTotal(t *patterns.Totals, busy float64, s string) string {
	return s + otherSaving(t, busy, "The GEMM weights kept in bf16 with fp32 masters in the optimizer (no autocast casts)",
		"Weights cast by autocast", t.MasterWeightsSavingUs, t.MasterWeightsPctOfGPUBusy, t.MasterWeightsSavingPctOfStep)
}

// modulesTotal is s followed by the drop-in modules' saving, where offered.
func modulesTotal(t *patterns.Totals, busy float64, s string) string {
	return s + otherSaving(t, busy, "nn.MultiheadAttention swapped for the drop-in without the packed projection's copies",
		"nn.MultiheadAttention's packed projection", t.MultiheadAttentionSavingUs, t.MultiheadAttentionPctOfGPUBusy, t.MultiheadAttentionSavingPctOfStep)
}

// otherSaving is the sentence for a saving apart from the chains' (what, us, its shares of
// GPU busy time and of the step, and the section that has the details); "" without one.
func otherSaving(t *patterns.Totals, busy float64, what, see string, us, pctBusy, pctStep float64) string {
	if !pos(us) {
		return ""
	}
	s := fmt.Sprintf(" %s: %s µs more", what, fmtUs(us))
	var shares []string
	if pos(busy) {
		shares = append(shares, fmtPct(pctBusy)+" of GPU busy time")
	}
	if pos(t.StepUs) {
		shares = append(shares, fmtPct(pctStep)+" of the step time")
	}
	if len(shares) > 0 {
		s += " (" + strings.Join(shares, ", ") + ")"
	}
	return s + "; see " + see + "."
}

// CoverageOf says what share of the memory-bound kernel time (kernels not launched by a
// GEMM, convolution or attention op) the chains found claim, all of them and the counted
// set, forward and with their backward kernels; "" for an analysis from before coverage was
// recorded or a trace without memory-bound kernels.
func CoverageOf(a *patterns.Report) string {
	if a == nil || a.Coverage == nil || !pos(a.Coverage.MemoryBoundUs) {
		return ""
	}
	c := a.Coverage
	what := "kernels not launched by a GEMM, convolution or attention op"
	if c.ClaimedKernels == 0 && !pos(c.ClaimedWithBackwardUs) {
		s := fmt.Sprintf("Coverage: the chains found claim none of the memory-bound kernel time (%s µs; %s)", fmtUs(c.MemoryBoundUs), what)
		if o := optimizerClaims(c); o != "" {
			s += fmt.Sprintf("; %s, %s", o, fmtPct(c.WithOptimizerPct))
		}
		return s + "." + unclaimedOf(c)
	}
	s := fmt.Sprintf("Coverage: the chains found claim %s of the memory-bound kernel time (%s of %s µs; %s)",
		fmtPct(c.ClaimedPct), fmtUs(c.ClaimedUs), fmtUs(c.MemoryBoundUs), what)
	bwd := c.ClaimedWithBackwardUs > c.ClaimedUs // a training trace: the chains' backward kernels too
	if bwd {
		s += fmt.Sprintf(", %s with their backward kernels", fmtPct(c.ClaimedWithBackwardPct))
	}
	if c.CountedUs != c.ClaimedUs || c.CountedWithBackwardUs != c.ClaimedWithBackwardUs {
		s += fmt.Sprintf("; the counted chains %s (%s µs)", fmtPct(c.CountedPct), fmtUs(c.CountedUs))
		if bwd {
			s += fmt.Sprintf(", %s with their backward", fmtPct(c.CountedWithBackwardPct))
		}
	}
	if o := optimizerClaims(c); o != "" {
		s += fmt.Sprintf("; with %s, %s", o, fmtPct(c.WithOptimizerPct))
	}
	return s + "." + unclaimedOf(c)
}

// optimizerClaims names what the optimizer's and the modules' advice claim of the
// memory-bound time: the optimizer steps fused=True fuses, the weights' casts master weights
// remove, nn.MultiheadAttention's copies the drop-in removes ("" for none).
func optimizerClaims(c *patterns.Coverage) string {
	var parts []string
	if pos(c.OptimizerUs) {
		parts = append(parts, fmt.Sprintf("the optimizer steps that fused=True would fuse (%s µs)", fmtUs(c.OptimizerUs)))
	}
	if pos(c.MasterWeightsUs) {
		parts = append(parts, fmt.Sprintf("the weights' casts that master weights remove (%s µs)", fmtUs(c.MasterWeightsUs)))
	}
	if pos(c.MultiheadAttentionUs) {
		parts = append(parts, fmt.Sprintf("nn.MultiheadAttention's copies that the drop-in removes (%s µs)", fmtUs(c.MultiheadAttentionUs)))
	}
	return strings.Join(parts, " and ")
}

// unclaimedShown is how many of Coverage.Unclaimed the coverage line names.
const unclaimedShown = 4

// autocastShown is the share of the memory-bound time (%) from which the coverage line names
// autocast's unclaimed casts into GEMMs.
const autocastShown = 1.0

// unclaimedOf names where the largest shares of the memory-bound time no chain claims go
// (" Not claimed, the most: ..."), "" when the analysis has no such breakdown.
func unclaimedOf(c *patterns.Coverage) string {
	if len(c.Unclaimed) == 0 {
		return ""
	}
	var parts []string
	for _, u := range c.Unclaimed[:min(len(c.Unclaimed), unclaimedShown)] {
		parts = append(parts, fmt.Sprintf("%s %s µs (%s)", u.Op, fmtUs(u.Us), fmtPct(u.Pct)))
	}
	s := " Not claimed, the most: " + strings.Join(parts, ", ") + "."
	if a := c.Autocast; a != nil && a.Pct >= autocastShown {
		s += fmt.Sprintf(" Autocast's casts into GEMMs take %s µs of it (%s of the memory-bound time; weights %s µs, activations %s µs; %s µs of it"+
			" ToCopyBackward0, the gradients cast back): torch.compile fuses an activation's casts into the kernels"+
			" beside them (the chains here take those of their own outputs, where GEMMs alone read them); a weight's"+
			" are autocast's cost of fp32 weights, once a step.",
			fmtUs(a.WeightsUs+a.ActivationsUs), fmtPct(a.Pct), fmtUs(a.WeightsUs), fmtUs(a.ActivationsUs), fmtUs(a.BackwardUs))
	}
	for _, u := range c.Unclaimed[:min(len(c.Unclaimed), unclaimedShown)] {
		if strings.HasPrefix(u.Op, "optimizer step (") && !strings.Contains(u.Op, ", fused") && !strings.Contains(u.Op, "Fused") { // FusedAdam: apex
			s += " No chain holds an optimizer step: torch.optim's fused=True (Adam, AdamW, SGD) runs its updates in a few fused kernels."
			break
		}
	}
	return s
}
