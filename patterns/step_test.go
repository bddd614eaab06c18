package patterns

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/fuseadvise/fuseadvise/trace"
)

// chainTrace is a trace of n ops on one thread, each nesting one child (op 2i nests
// 2i+1), for hand-built instances.
func chainTrace(n int) *trace.Trace {
	t := &trace.Trace{Path: "synthetic"}
	for i := range n {
		t.Ops = append(t.Ops, trace.Op{Name: "aten::op", Kind: trace.KindCPUOp, Parent: -1, Start: int64(i) * 10_000, Dur: 5_000})
	}
	return t
}

// ranks builds one instance per chain of op ids, each saving the microseconds given.
func ranks(chains [][]int32, saving []float64) []ranked {
	var out []ranked
	for i, ops := range chains {
		out = append(out, ranked{in: &Instance{Pattern: "p", Ops: ops},
			est: estimate{savingUs: saving[i], modeled: true, kernels: len(ops), fusedKernels: 1}})
	}
	return out
}

// The total counts a non-overlapping set of chains with the largest saving: on a path
// A-B-C (A and B share an op, B and C another) with savings 3, 4, 3 it is A and C (6), not
// B, the largest alone, that a greedy pick would take (4).
func TestCountedBestSet(t *testing.T) {
	tr := chainTrace(4)
	tests := []struct {
		name   string
		chains [][]int32
		saving []float64
		want   []bool
	}{
		{"path: the two ends beat the middle", [][]int32{{0, 1}, {1, 2}, {2, 3}}, []float64{3, 4, 3}, []bool{true, false, true}},
		{"path: the middle beats the two ends", [][]int32{{0, 1}, {1, 2}, {2, 3}}, []float64{1, 4, 2}, []bool{false, true, false}},
		{"disjoint chains all count", [][]int32{{0}, {1}, {2, 3}}, []float64{1, 1, 1}, []bool{true, true, true}},
		{"a chain nested in another's op overlaps it", [][]int32{{0}, {1}}, []float64{1, 2}, []bool{false, true}},
		{"equal savings: the chain removing more launches", [][]int32{{0, 1, 2}, {2, 3}}, []float64{5, 5}, []bool{true, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := tr
			if strings.HasPrefix(tc.name, "a chain nested") {
				tr = chainTrace(2)
				tr.Ops[0].Children = []int32{1}
				tr.Ops[1].Parent = 0
			}
			if got := counted([]*trace.Trace{tr}, ranks(tc.chains, tc.saving)); !slices.Equal(got, tc.want) {
				t.Errorf("counted = %v, want %v", got, tc.want)
			}
		})
	}
	// the same chains in different traces (ranks) never overlap
	two := ranks([][]int32{{0, 1}, {0, 1}}, []float64{1, 1})
	two[1].ti = 1
	if got := counted([]*trace.Trace{tr, chainTrace(4)}, two); !slices.Equal(got, []bool{true, true}) {
		t.Errorf("two ranks: counted = %v", got)
	}
}

// A group of overlapping chains larger than maxExact is solved greedily, and what it
// keeps still shares no op.
func TestCountedLargeGroup(t *testing.T) {
	n := maxExact + 6
	tr := chainTrace(n + 1)
	var chains [][]int32
	var saving []float64
	for i := range n {
		chains = append(chains, []int32{int32(i), int32(i + 1)})
		saving = append(saving, float64(1+i%3))
	}
	keep := counted([]*trace.Trace{tr}, ranks(chains, saving))
	for i := 1; i < n; i++ {
		if keep[i] && keep[i-1] {
			t.Fatalf("chains %d and %d share op %d and both count", i-1, i, i)
		}
	}
	if !slices.Contains(keep, true) {
		t.Fatal("nothing counted")
	}
}

// The overlapping total (issue 15): a pre-norm block whose add is both dropout_add's and
// add_layernorm's, and whose LayerNorm is both add_layernorm's and layernorm_linear's. The
// patterns' savings overlap; the total counts each op once, says how many chains it left out,
// and agrees with the opportunities' counted parts.
func TestTotalsOverlap(t *testing.T) {
	drop := op{name: "dropout", in: []string{"f32:8x128x768", "=0.1", "=True"},
		kids: []op{{name: "native_dropout", in: []string{"f32:8x128x768", "=0.1", "=True"}}}}
	ln := op{name: "layer_norm", in: []string{"f32:8x128x768", "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}}
	tr := synth(
		op{name: "add", in: []string{"f32:8x128x768", "f32:1x128x768", "=1"}},
		drop, ln,
		op{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", "f32:768"}},
		drop,
		op{name: "add", in: []string{"f32:8x128x768", "f32:8x128x768", "=1"}},
		ln,
	)
	cm := DefaultCostModel()
	cm.BandwidthGBs = 3000
	r, err := Analyze([]*trace.Trace{tr}, Options{Cost: cm})
	if err != nil {
		t.Fatal(err)
	}
	tt := r.Totals
	if tt == nil {
		t.Fatal("no totals")
	}
	var sum, countedUs float64
	inst, countedN := 0, 0
	for _, o := range r.Opportunities {
		sum += o.EstSavingUs
		countedUs += o.CountedSavingUs
		inst += o.Instances
		countedN += o.CountedInstances
		if o.CountedInstances > o.Instances || o.CountedSavingUs > o.EstSavingUs+0.01 {
			t.Errorf("%s: counted %d (%v us) of %d (%v us)", o.Pattern, o.CountedInstances, o.CountedSavingUs, o.Instances, o.EstSavingUs)
		}
	}
	if inst != 4 || tt.Instances+tt.LeftOut != inst || tt.Instances != countedN || tt.LeftOut == 0 {
		t.Errorf("instances %d, counted %d (opportunities: %d), left out %d", inst, tt.Instances, countedN, tt.LeftOut)
	}
	if math.Abs(tt.SumOfPatternsUs-sum) > 0.02 || math.Abs(tt.EstSavingUs-countedUs) > 0.02 || !(tt.EstSavingUs < tt.SumOfPatternsUs) {
		t.Errorf("total %v us, counted %v us, rows %v us (sum %v)", tt.EstSavingUs, countedUs, tt.SumOfPatternsUs, sum)
	}
	// both rounded to 0.01: the share from the unrounded saving, so within the saving's rounding
	if tol := 0.01 + 0.005/r.Trace.GPUBusyUs*100; math.Abs(tt.SavingPctOfGPUBusy-tt.EstSavingUs/r.Trace.GPUBusyUs*100) > tol {
		t.Errorf("%% of busy %v, want %v (%v / %v)", tt.SavingPctOfGPUBusy, tt.EstSavingUs/r.Trace.GPUBusyUs*100, tt.EstSavingUs, r.Trace.GPUBusyUs)
	}
	note := strings.Join(r.Notes, "\n")
	if !strings.Contains(note, "do not add up") || !strings.Contains(note, "the total counts the") {
		t.Errorf("notes: %s", note)
	}
}

// hostBoundTrace is a bias_gelu chain whose step lasts busyPct*step of GPU work: a step
// of 92% idle GPU unless padding ops are given, then those are leaf ops that launch
// nothing and take pad ns each (what a profiler's per-op cost looks like).
func hostBoundTrace(idlePct float64, pads int, pad int64) *trace.Trace {
	tr := biasGeluTrace()
	busy := float64(tr.GPUBusyNs())
	end := tr.Steps[0].Dur
	for range pads {
		id := int32(len(tr.Ops))
		tr.Ops = append(tr.Ops, trace.Op{Name: "aten::view", Kind: trace.KindCPUOp, Start: end, Dur: pad, Parent: -1, Bwd: -1, Fwd: -1, Py: -1})
		tr.Threads[0].Roots = append(tr.Threads[0].Roots, id)
		end += pad
	}
	tr.Steps[0].Dur = int64(busy / (1 - idlePct/100))
	return tr
}

// "13% of GPU busy time" on a 92%-idle step (issue 15): the total is also given as a share
// of the step, the step is named host-bound, with what fusion saves on the host and the
// advice that fits.
func TestTotalsHostBound(t *testing.T) {
	cm := DefaultCostModel()
	cm.BandwidthGBs = 10000
	r, err := Analyze([]*trace.Trace{hostBoundTrace(92, 0, 0)}, Options{Cost: cm})
	if err != nil {
		t.Fatal(err)
	}
	tt := r.Totals
	if tt == nil || len(r.Opportunities) != 1 {
		t.Fatalf("totals %+v, %d opportunities", tt, len(r.Opportunities))
	}
	if math.Abs(tt.GPUBusyPctOfStep-8) > 0.05 || tt.StepSource != "trace span" {
		t.Errorf("busy %v%% of the step (%s), want 8%%", tt.GPUBusyPctOfStep, tt.StepSource)
	}
	if want := tt.SavingPctOfGPUBusy * 0.08; math.Abs(tt.SavingPctOfStep-want) > 0.05 || tt.SavingPctOfStep >= tt.SavingPctOfGPUBusy/10 {
		t.Errorf("saving %v%% of busy, %v%% of the step, want %.2f", tt.SavingPctOfGPUBusy, tt.SavingPctOfStep, want)
	}
	h := tt.Host
	if !h.Bound || h.LaunchesRemoved != 1 || h.OpsRemoved != 1 || h.ProfilerOpUs != 0 {
		t.Errorf("host %+v", h)
	}
	// no launch events in a synthetic trace: the op cost is the op's whole host time (10 us)
	if h.OpUs != 10 || h.EstSavingUs != 10 || h.EstSavingNoProfilerUs != 10 {
		t.Errorf("op %v us, saving %v / %v us", h.OpUs, h.EstSavingUs, h.EstSavingNoProfilerUs)
	}
	adv := strings.Join(h.Advice, "\n")
	for _, want := range []string{"CUDA graphs", `torch.compile(mode="reduce-overhead")`, "larger batch"} {
		if !strings.Contains(adv, want) {
			t.Errorf("advice lacks %q: %s", want, adv)
		}
	}

	// A busy step is not host-bound and gets no host advice.
	r, err = Analyze([]*trace.Trace{hostBoundTrace(20, 0, 0)}, Options{Cost: cm})
	if err != nil {
		t.Fatal(err)
	}
	if h := r.Totals.Host; h.Bound || len(h.Advice) > 0 {
		t.Errorf("20%% idle: host %+v", h)
	}
}

// Raw idle gaps are not the judgement: a step that is 80% idle only because every recorded
// op costs the profiler 20 us (ops that do no work take that long) is not host-bound once
// that cost is taken out.
func TestHostBoundWithoutProfilerCost(t *testing.T) {
	tr := biasGeluTrace()
	busy := us(tr.GPUBusyNs())
	stepUs := busy / 0.2
	pads := int((stepUs - us(tr.Steps[0].Dur)) / 20)
	tr = hostBoundTrace(80, pads, 20_000)
	r, err := Analyze([]*trace.Trace{tr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := r.Totals.Host
	if h.ProfilerOpUs != 20 || h.RecordedEvents != pads+3 {
		t.Errorf("profiler cost %v us over %d events, want 20 over %d", h.ProfilerOpUs, h.RecordedEvents, pads+3)
	}
	if r.Totals.GPUBusyPctOfStep > 21 || h.GPUBusyPctNoProfiler < HostBoundBelowPct || h.Bound {
		t.Errorf("busy %v%% raw, %v%% without the profiler: bound %v", r.Totals.GPUBusyPctOfStep, h.GPUBusyPctNoProfiler, h.Bound)
	}
}

// On the shared traces: gpt2_train_bf16 (recorded with shapes and an execution trace, GPU
// idle 89% of the step) is host-bound even without the profiler's per-op cost, its total is
// smaller than the patterns' rows added up and a small share of the step (6%, the fused
// backwards' saving counted with the forwards'), and no host saving (its chains all train);
// the launch cost
// is the median of its 972 launch calls (822 cudaLaunchKernel, 150 cuLaunchKernelEx).
// mlp_blocks_infer_fp32 keeps its GPU busy and is not host-bound.
func TestTotalsShared(t *testing.T) {
	dir := shared.Require(t, "traces", "h200")
	for _, tc := range []struct {
		name     string
		bound    bool
		launches int
	}{
		{"gpt2_train_bf16", true, 972},
		{"mlp_blocks_infer_fp32", false, 72},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := trace.Open(dir + "/" + tc.name + ".json.gz")
			if err != nil {
				t.Fatal(err)
			}
			r, err := Analyze([]*trace.Trace{tr}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			tt, h := r.Totals, r.Totals.Host
			if h.Bound != tc.bound || h.Launches != tc.launches || h.LaunchUs < 5 || h.LaunchUs > 15 {
				t.Errorf("bound %v, %d launch calls of %v us", h.Bound, h.Launches, h.LaunchUs)
			}
			if tt.LeftOut == 0 || tt.EstSavingUs >= tt.SumOfPatternsUs || tt.SavingPctOfStep >= tt.SavingPctOfGPUBusy {
				t.Errorf("total %v us (%v%% of busy, %v%% of the step), rows %v us, %d left out",
					tt.EstSavingUs, tt.SavingPctOfGPUBusy, tt.SavingPctOfStep, tt.SumOfPatternsUs, tt.LeftOut)
			}
			if tc.bound && (tt.SavingPctOfStep > 7 || h.ProfilerOpUs < 5 || h.GPUBusyPctNoProfiler <= tt.GPUBusyPctOfStep) {
				t.Errorf("%v%% of the step; profiler %v us per op, busy %v%% -> %v%%",
					tt.SavingPctOfStep, h.ProfilerOpUs, tt.GPUBusyPctOfStep, h.GPUBusyPctNoProfiler)
			}
			// a training step: every counted chain has a backward, and a fused training call
			// costs the host more than eager's, so none saves host time
			if tc.bound && (h.TrainingChains != tt.Instances || h.LaunchesRemoved != 0 || h.EstSavingUs != 0) {
				t.Errorf("%d of %d counted chains in training; host saving %d launches, %v us",
					h.TrainingChains, tt.Instances, h.LaunchesRemoved, h.EstSavingUs)
			}
		})
	}
}
