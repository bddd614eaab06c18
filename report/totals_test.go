package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/patterns"
)

// stepAnalysis is the misleading case of issue 15: the patterns' savings add up to 13% of
// GPU busy time on a step whose GPU is idle 92% of the time, and two of them overlap.
func stepAnalysis(totals *patterns.Totals) *patterns.Report {
	return &patterns.Report{
		Trace: patterns.TraceSummary{Path: "t.json.gz", Device: "NVIDIA H200", GPUBusyUs: 6000},
		Opportunities: []patterns.Opportunity{
			{Pattern: "add_layernorm", Instances: 4, EstSavingUs: 500, CountedInstances: 4, CountedSavingUs: 500},
			{Pattern: "layernorm_linear", Instances: 4, EstSavingUs: 294},
		},
		Totals: totals,
	}
}

func hostBoundTotals() *patterns.Totals {
	return &patterns.Totals{
		EstSavingUs: 500, Instances: 4, LeftOut: 4, SumOfPatternsUs: 794, SavingPctOfGPUBusy: 8.33,
		StepUs: 75000, StepSource: "profiler steps", SavingPctOfStep: 0.67, GPUBusyInStepsUs: 6000, GPUBusyPctOfStep: 8,
		Host: patterns.Host{Bound: true, LaunchUs: 9.5, Launches: 900, OpUs: 30, OpNoProfilerUs: 12, ProfilerOpUs: 15,
			RecordedEvents: 3000, StepNoProfilerUs: 30000, GPUBusyPctNoProfiler: 20, LaunchesRemoved: 8, OpsRemoved: 4,
			EstSavingUs: 196, EstSavingNoProfilerUs: 124, SavingPctOfStep: 0.26,
			Advice: []string{`torch.compile(mode="reduce-overhead")`, "a larger batch"}},
	}
}

func TestTotalsOf(t *testing.T) {
	tests := []struct {
		name         string
		totals       *patterns.Totals
		total        []string // in Total
		host         []string // in Host ("" for none)
		advice       int
		notInSummary []string
	}{
		{
			name: "an analysis from before totals adds the rows up and says so",
			total: []string{"Estimated saving 794 µs", "the patterns' savings added up",
				"chains that share ops count them twice", "13% of GPU busy time"},
		},
		{
			name:   "host-bound: a non-overlapping total, its share of the step, the host saving",
			totals: hostBoundTotals(),
			total: []string{"Estimated saving 500 µs in total (8.3% of GPU busy time, 0.7% of the step time)",
				"from 4 chains that share no op or kernel", "4 chains overlapping them left out", "(794 µs together) overstate it"},
			host: []string{"Host-bound: the GPU is busy 8.0% of the step, 20% once the profiler's own cost is taken out",
				"15.0 µs for each of the 3000 recorded ops", "8 launches × 9.50 µs", "4 ops × 30.0 µs",
				"12.0 µs without the profiler's cost", "0.12 ms to 0.20 ms, at most 0.3% of the step"},
			advice:       2,
			notInSummary: []string{"794 µs in total"},
		},
		{
			name: "a busy step: no host paragraph",
			totals: func() *patterns.Totals {
				tt := hostBoundTotals()
				tt.Host.Bound, tt.Host.Advice = false, nil
				return tt
			}(),
			total: []string{"Estimated saving 500 µs in total"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := stepAnalysis(tc.totals)
			got := TotalsOf(a)
			for _, want := range tc.total {
				if !strings.Contains(got.Total, want) {
					t.Errorf("total lacks %q:\n%s", want, got.Total)
				}
			}
			if len(tc.host) == 0 && got.Host != "" {
				t.Errorf("host paragraph for a step that is not host-bound: %s", got.Host)
			}
			for _, want := range tc.host {
				if !strings.Contains(got.Host, want) {
					t.Errorf("host lacks %q:\n%s", want, got.Host)
				}
			}
			if len(got.Advice) != tc.advice {
				t.Errorf("advice %q", got.Advice)
			}
			// the report's summary carries the same sentences, and never the old overlapping total
			var md bytes.Buffer
			if err := Markdown(&md, Inputs{Analysis: a}); err != nil {
				t.Fatal(err)
			}
			summary, _, _ := strings.Cut(md.String(), "## Trace")
			for _, want := range []string{mdText(got.Total), mdText(got.Host)} {
				if !strings.Contains(summary, want) {
					t.Errorf("summary lacks %q:\n%s", want, summary)
				}
			}
			for _, no := range tc.notInSummary {
				if strings.Contains(summary, no) {
					t.Errorf("summary has %q:\n%s", no, summary)
				}
			}
			if tc.totals != nil && !strings.Contains(summary, "ms of step time (the ProfilerStep spans)") {
				t.Errorf("summary lacks the step time:\n%s", summary)
			}
		})
	}
	if got := TotalsOf(&patterns.Report{}); got.Total != "" || got.Host != "" {
		t.Errorf("no opportunity: %+v", got)
	}
}

// TestOptimizerInReport: the optimizer step's fused=True saving is a sentence of its own after
// the chains' total (also when no chain was found), and the report has its section with the
// advice; an analysis without optimizer findings has neither.
func TestOptimizerInReport(t *testing.T) {
	finding := patterns.OptimizerFinding{Optimizer: "AdamW", Impl: "foreach", Steps: 2, Kernels: 32, GPUTimeUs: 1576.1,
		EstFusedUs: 526.6, EstSavingUs: 1049.5, Advice: "AdamW (foreach) runs 16 kernels a step: construct it with fused=True"}
	withOpt := func(a *patterns.Report) *patterns.Report {
		a.Optimizers = []patterns.OptimizerFinding{finding}
		a.Totals.OptimizerSavingUs, a.Totals.OptimizerPctOfGPUBusy, a.Totals.OptimizerSavingPctOfStep = 1049.5, 17.49, 1.4
		return a
	}
	chains := withOpt(stepAnalysis(hostBoundTotals()))
	none := withOpt(&patterns.Report{Trace: patterns.TraceSummary{Path: "t.json.gz", GPUBusyUs: 6000},
		Totals: &patterns.Totals{StepUs: 75000, StepSource: "profiler steps"}})
	for name, a := range map[string]*patterns.Report{"with chains": chains, "no chain": none} {
		t.Run(name, func(t *testing.T) {
			tot := TotalsOf(a).Total
			if !strings.Contains(tot, "The optimizer steps with fused=True: 1050 µs more (17% of GPU busy time, 1.4% of the step time)") {
				t.Errorf("total lacks the optimizer sentence:\n%s", tot)
			}
			var md bytes.Buffer
			if err := Markdown(&md, Inputs{Analysis: a}); err != nil {
				t.Fatal(err)
			}
			_, sec, ok := strings.Cut(md.String(), "## Optimizer steps")
			if !ok || !strings.Contains(sec, "construct it with fused=True") || !strings.Contains(sec, "| AdamW") || !strings.Contains(sec, "1049.5") {
				t.Errorf("no optimizer section with the advice and the estimate:\n%s", md.String())
			}
		})
	}
	var md bytes.Buffer
	if err := Markdown(&md, Inputs{Analysis: stepAnalysis(hostBoundTotals())}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(md.String(), "Optimizer steps") || strings.Contains(md.String(), "fused=True") {
		t.Errorf("an analysis without optimizer findings mentions them:\n%s", md.String())
	}
}

// TestOptimizerInPR: PR.md says the optimizer's fix, with its estimate, before the kernels.
func TestOptimizerInPR(t *testing.T) {
	a := stepAnalysis(hostBoundTotals())
	a.Optimizers = []patterns.OptimizerFinding{{Optimizer: "AdamW", Impl: "foreach", Steps: 2, GPUTimeUs: 1576.1,
		EstFusedUs: 526.6, EstSavingUs: 1049.5, Advice: "AdamW (foreach) runs 16 kernels a step: construct it with fused=True"}}
	in := Inputs{Analysis: a}
	var pr bytes.Buffer
	if err := prMarkdown(&pr, in, prItems(in)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pr.String(), "## The optimizer step (no kernel needed)\n\n- AdamW (foreach) runs 16 kernels a step: construct it with fused=True. Estimated GPU saving 1050 µs over the trace's 2 steps") {
		t.Errorf("PR.md lacks the optimizer's advice:\n%s", pr.String())
	}
}
