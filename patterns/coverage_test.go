package patterns

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/fuseadvise/fuseadvise/trace"
)

// coverageFloors are the training traces' coverage with the optimizer's advice (Kineto alone)
// as measured on 2026-12-05, less half a point: TestCoverageH200 fails where a change takes a
// claim away (raise them as claims grow).
var coverageFloors = map[string]float64{
	"bert_train_bf16": 86.3, "convnext_tiny_train_bf16": 96.7, "gpt2_train_bf16": 89.3, "gpt2_train_sdpa_stack": 86.2,
	"llama_train_bf16": 86.0, "mlp_blocks_train_bf16": 97.5, "torchnn_encoder_train_bf16": 87.7,
}

// TestCoverage checks the split of kernel time on synthetic traces where each op launches
// one 5 µs kernel: what counts as memory-bound, and what the chains claim of it.
func TestCoverage(t *testing.T) {
	ln := func(in string) op {
		return op{name: "layer_norm", in: []string{in, "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}}
	}
	tests := []struct {
		name string
		ops  []op
		// extra adds activities no op of the list launches
		extra                              func(*trace.Trace)
		memUs, computeUs, otherUs, claimed float64
		counted                            []float64 // counted_us is one of these (which overlapping chain the set keeps is the cost model's)
	}{
		{"bias_gelu claims two of three memory-bound kernels", []op{
			{name: "mm", in: []string{"bf16:1024x768", "bf16:768x3072"}},
			{name: "add", in: []string{"bf16:1024x3072", "bf16:3072", "=1"}},
			{name: "gelu", in: []string{"bf16:1024x3072", "=tanh"}},
			{name: "mul", in: []string{"bf16:1024x768", "#"}},
		}, nil, 15, 5, 0, 10, []float64{10}},
		{"linear_gelu: the GEMM is not claimed, nor counted as memory-bound", []op{
			{name: "linear", in: []string{"bf16:8x128x768", "bf16:3072x768", "bf16:3072"}},
			{name: "gelu", in: []string{"bf16:8x128x3072", ""}},
		}, nil, 5, 5, 0, 5, []float64{5}},
		{"casts nested in a GEMM are memory-bound and not claimed", []op{
			{name: "linear", in: []string{"bf16:8x128x768", "bf16:3072x768", "bf16:3072"}, kids: []op{
				{name: "to", in: []string{"f32:3072x768", "=15"}},
			}},
			{name: "gelu", in: []string{"bf16:8x128x3072", ""}},
		}, nil, 10, 5, 0, 5, []float64{5}},
		{"no chain: nothing claimed; unattributed, graph and NCCL kernels are other", []op{
			{name: "mul", in: []string{"bf16:1024x768", "#"}},
			{name: "bmm", in: []string{"bf16:8x128x64", "bf16:8x64x128"}},
			{name: "_flash_attention_forward", in: []string{"bf16:8x12x128x64"}},
			{name: "convolution_backward", in: []string{"bf16:8x64x32x32"}},
		}, func(tr *trace.Trace) {
			tr.Acts = append(tr.Acts,
				trace.Activity{Name: "elementwise_kernel", Dur: 7_000, Op: -1},
				trace.Activity{Name: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", Dur: 3_000, Op: 0},
				trace.Activity{Name: "elementwise_kernel", Dur: 1_000, Op: 0, Graph: true},
				trace.Activity{Name: "Memcpy HtoD", Kind: trace.ActMemcpy, Dur: 50_000, Op: 0})
		}, 5, 15, 11, 0, []float64{0}},
		{"overlapping chains: every chain claims, the counted set one of them", []op{
			{name: "add", in: []string{"f32:8x128x768", "f32:8x128x768", "=1"}},
			ln("f32:8x128x768"),
			{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", "f32:768"}},
		}, nil, 10, 5, 0, 10, []float64{5, 10}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := synth(tc.ops...)
			if tc.extra != nil {
				tc.extra(tr)
			}
			r, err := Analyze([]*trace.Trace{tr}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			c := r.Coverage
			if c == nil {
				t.Fatal("no coverage")
			}
			if c.MemoryBoundUs != tc.memUs || c.ComputeUs != tc.computeUs || c.OtherUs != tc.otherUs {
				t.Errorf("memory-bound %v, compute %v, other %v µs; want %v, %v, %v", c.MemoryBoundUs, c.ComputeUs, c.OtherUs, tc.memUs, tc.computeUs, tc.otherUs)
			}
			if c.ClaimedUs != tc.claimed {
				t.Errorf("claimed %v µs, want %v", c.ClaimedUs, tc.claimed)
			}
			if want := round2(tc.claimed / tc.memUs * 100); c.ClaimedPct != want {
				t.Errorf("claimed %v%%, want %v%%", c.ClaimedPct, want)
			}
			ok := false
			for _, v := range tc.counted {
				ok = ok || c.CountedUs == v
			}
			if !ok || c.CountedUs > c.ClaimedUs {
				t.Errorf("counted %v µs, want one of %v (at most claimed %v)", c.CountedUs, tc.counted, c.ClaimedUs)
			}
			if c.ClaimedWithBackwardUs != c.ClaimedUs {
				t.Errorf("with backward %v µs, want the forward's %v (no backward here)", c.ClaimedWithBackwardUs, c.ClaimedUs)
			}
		})
	}
}

// TestCoverageBackward: the backward ops a chain's forward ops caused add their
// memory-bound kernels to the with-backward figures, with what the autograd engine runs for
// a node's gradients after it (inside its "autograd::engine::evaluate_function: NAME" op: a
// gradient's cast to its input's dtype, a broadcast input's sum; not the gradients of one
// tensor added up, which stays); the GEMM's backward only where the
// pattern's backward sums the GEMM's bias itself (SumsGEMMBias: linear_gelu's).
func TestCoverageBackward(t *testing.T) {
	x, h := "bf16:8x128x768", "bf16:8x128x3072"
	build := func() *trace.Trace {
		tr := synth(
			op{name: "linear", in: []string{x, "bf16:3072x768", "bf16:3072"}}, // 0
			op{name: "gelu", in: []string{h, ""}},                             // 1
			op{name: "gelu_engine", kids: []op{ // 2: the node (3) and, after it, a cast (5)
				{name: "gelu_node", kids: []op{{name: "gelu_backward", in: []string{h, h, "=none"}}}},
				{name: "to", in: []string{h}}}},
			op{name: "addmm_engine", kids: []op{ // 6: the node (7), the bias' sum (9), and x's two gradients added up (10)
				{name: "addmm_node", kids: []op{{name: "mm", in: []string{"bf16:3072x1024", "bf16:1024x768"}}}},
				{name: "sum", in: []string{h, "=[0, 1]"}},
				{name: "add_", in: []string{x, x}}}},
		)
		for id, name := range map[int32]string{2: "GeluBackward0", 6: "AddmmBackward0"} {
			tr.Ops[id].Name = "autograd::engine::evaluate_function: " + name
			tr.Ops[id+1].Name = name
		}
		for _, id := range []int32{2, 3, 6, 7} { // the engine's and the nodes' own records launch nothing
			tr.Acts[tr.Ops[id].Acts[0]].Op = -1
			tr.Ops[id].Acts = nil
		}
		tr.Ops[0].Bwd, tr.Ops[7].Fwd = 7, 0
		tr.Ops[1].Bwd, tr.Ops[3].Fwd = 3, 1
		return tr
	}
	lg, _ := Lookup("linear_gelu")
	sums := lg.SumsGEMMBias
	t.Cleanup(func() { lg.SumsGEMMBias = sums })
	// memory-bound: gelu, gelu_backward, the cast, the sum and the add_, 5 µs each; the add_
	// is the engine's with or without fusion
	for _, tc := range []struct {
		name     string
		sumsBias bool
		withBwd  float64
	}{
		{"the bias' sum claimed: the fused backward sums it", true, 20},
		{"the GEMM's backward left out", false, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg.SumsGEMMBias = tc.sumsBias
			r, err := Analyze([]*trace.Trace{build()}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			c := r.Coverage
			if c == nil || c.MemoryBoundUs != 25 || c.ClaimedUs != 5 || c.ClaimedWithBackwardUs != tc.withBwd || c.CountedWithBackwardUs != tc.withBwd {
				t.Fatalf("coverage %+v; want 25 µs memory-bound, 5 claimed, %v with the backward", c, tc.withBwd)
			}
			if len(r.Opportunities) != 1 || r.Opportunities[0].BackwardGPUTimeUs != 5+5+10 {
				t.Errorf("opportunities %+v: want linear_gelu's backward time 20 µs (the nodes with the engine's cast and sum; the mm's kernel 5)", r.Opportunities)
			}
		})
	}
}

// TestCoverageH200 measures coverage on the shared H200 traces (Kineto alone) and checks
// that the classes add up to the kernel time and the claims nest; -v prints the figures
// docs/patterns.md quotes.
func TestCoverageH200(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the shared H200 traces")
	}
	dir := shared.Require(t, "traces", "h200")
	paths, err := filepath.Glob(filepath.Join(dir, "*.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("| trace | memory-bound µs | of kernel time | claimed µs | claimed | counted µs | counted | claimed with backward | and the optimizer step |")
	t.Logf("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	n := 0
	var unclaimed []string
	for _, path := range paths {
		if strings.HasSuffix(path, ".et.json.gz") {
			continue
		}
		n++
		tr, err := trace.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Analyze([]*trace.Trace{tr}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var kernelUs float64
		for _, a := range tr.Acts {
			if a.Kind == trace.ActKernel {
				kernelUs += us(a.Dur)
			}
		}
		c := r.Coverage
		name := strings.TrimSuffix(filepath.Base(path), ".json.gz")
		if c == nil {
			t.Errorf("%s: no coverage", name)
			continue
		}
		if d := c.MemoryBoundUs + c.ComputeUs + c.OtherUs - kernelUs; d > 0.1 || d < -0.1 {
			t.Errorf("%s: classes add up to %v µs, the kernels to %v", name, c.MemoryBoundUs+c.ComputeUs+c.OtherUs, kernelUs)
		}
		if !(c.CountedUs <= c.ClaimedUs && c.ClaimedUs <= c.ClaimedWithBackwardUs && c.ClaimedWithBackwardUs <= c.MemoryBoundUs &&
			c.CountedUs <= c.CountedWithBackwardUs && c.CountedWithBackwardUs <= c.ClaimedWithBackwardUs) {
			t.Errorf("%s: claims do not nest: %+v", name, c)
		}
		if c.OptimizerUs > 0 && !(c.WithOptimizerPct >= c.ClaimedWithBackwardPct && c.WithOptimizerPct <= 100) {
			t.Errorf("%s: with the optimizer step %v%%, below the chains' %v%% or past 100", name, c.WithOptimizerPct, c.ClaimedWithBackwardPct)
		}
		if floor, ok := coverageFloors[name]; ok && c.WithOptimizerPct < floor {
			t.Errorf("%s: %v%% of the memory-bound time claimed with the optimizer's advice, below the %v%% it reached (docs/patterns.md, \"Coverage\"): a change dropped claims", name, c.WithOptimizerPct, floor)
		}
		withOpt := "-"
		if c.OptimizerUs > 0 {
			withOpt = fmt.Sprintf("%.1f%%", c.WithOptimizerPct)
		}
		t.Logf("| %s | %.0f | %.1f%% | %.0f | %.1f%% | %.0f | %.1f%% | %.1f%% | %s |", name, c.MemoryBoundUs, 100*c.MemoryBoundUs/kernelUs,
			c.ClaimedUs, c.ClaimedPct, c.CountedUs, c.CountedPct, c.ClaimedWithBackwardPct, withOpt)
		var rest float64 // the unclaimed shares sum to at most what no chain claims
		for _, u := range c.Unclaimed {
			rest += u.Us
		}
		left := c.MemoryBoundUs - c.ClaimedWithBackwardUs
		if (len(c.Unclaimed) == 0) != (left < 0.1) || rest > left+0.1*float64(len(c.Unclaimed)) {
			t.Errorf("%s: unclaimed %v µs in %d ops, not claimed %v", name, rest, len(c.Unclaimed), left)
		}
		unclaimed = append(unclaimed, fmt.Sprintf("| %s | %s |", name, unclaimedCells(c.Unclaimed[:min(3, len(c.Unclaimed))])))
	}
	if n != 10 {
		t.Errorf("%d H200 traces, want 10", n)
	}
	t.Logf("| trace | not claimed, the largest three (µs, share of memory-bound) |")
	t.Logf("|---|---|")
	for _, l := range unclaimed {
		t.Log(l)
	}
}

func unclaimedCells(us []UnclaimedOp) string {
	var parts []string
	for _, u := range us {
		parts = append(parts, fmt.Sprintf("%s %.0f (%.1f%%)", u.Op, u.Us, u.Pct))
	}
	return strings.Join(parts, ", ")
}

// TestUnclaimed: the memory-bound time no chain claims is named by the optimizer step, the
// backward node or the outermost ATen op it runs in (a GEMM's nested cast by both ops), the
// largest first, with its share; claimed kernels are left out.
func TestUnclaimed(t *testing.T) {
	tr := synth(
		op{name: "linear", in: []string{"bf16:8x128x768", "bf16:3072x768", "bf16:3072"}, kids: []op{
			{name: "to", in: []string{"f32:3072x768", "=15"}},
		}},
		op{name: "gelu", in: []string{"bf16:8x128x3072", ""}}, // linear_gelu claims it
		op{name: "layer_norm", in: []string{"f32:8x128x768", "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}, kids: []op{
			{name: "native_layer_norm", in: []string{"f32:8x128x768", "=[768]", "f32:768", "f32:768", "=1e-05"}},
		}},
		// x ** s with s a Python float the trace does not record: no chain (a number the caller
		// passes is generated as an arithmetic op's operand only)
		op{name: "pow", in: []string{"bf16:1024x768", "#"}},
		op{name: "pow", in: []string{"bf16:1024x768", "#"}},
	)
	// the last two pows: one in a backward node, one in an optimizer step (names as recorded)
	wrap := func(child int32, name string) {
		parent := int32(len(tr.Ops))
		c := &tr.Ops[child]
		tr.Ops = append(tr.Ops, trace.Op{Name: name, Kind: trace.KindUserAnnotation, Thread: c.Thread, Start: c.Start, Dur: c.Dur,
			Parent: -1, Children: []int32{child}, Bwd: -1, Fwd: -1, Py: -1, Step: -1, ExternalID: -1, RecordFunctionID: -1, EvIdx: -1, Seq: -1, FwdThreadID: -1})
		tr.Ops[child].Parent = parent
	}
	var pows []int32
	for i := range tr.Ops {
		if tr.Ops[i].Name == "aten::pow" {
			pows = append(pows, int32(i))
		}
	}
	wrap(pows[0], "autograd::engine::evaluate_function: PowBackward0")
	wrap(pows[1], "Optimizer.step#AdamW.step")
	if got := unclaimedLabel(tr, pows[1]); got != "optimizer step (AdamW)" {
		t.Errorf("a foreach step's kernel: %q", got)
	}
	tr.Ops[pows[1]].Name = "aten::_fused_adamw_"
	if got := unclaimedLabel(tr, pows[1]); got != "optimizer step (AdamW, fused)" {
		t.Errorf("a fused step's kernel: %q", got)
	}
	tr.Ops[pows[1]].Name = "aten::pow"
	tr.Acts[tr.Ops[pows[1]].Acts[0]].Dur = 20_000 // the optimizer's kernel the longest
	r, err := Analyze([]*trace.Trace{tr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range r.Coverage.Unclaimed {
		got = append(got, fmt.Sprintf("%s %v %d %v", u.Op, u.Us, u.Kernels, u.Pct))
	}
	want := []string{
		"optimizer step (AdamW) 20 1 44.44",
		"aten::layer_norm 10 2 22.22", // its own kernel and native_layer_norm's (synth: one an op)
		"PowBackward0 5 1 11.11",
		"aten::to in aten::linear 5 1 11.11",
	}
	if !slices.Equal(got, want) {
		t.Errorf("unclaimed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestAutocastCasts: autocast's casts into GEMMs that no chain claims are told apart by what
// they cast: a linear's input (an activation), its weight and bias (weights), a cast whose dims
// are both the input's and the weight's (the GEMM's first cast is the input's: autocast casts
// the arguments in order), a matmul's operands (activations); forward, and each
// ToCopyBackward0 by the forward cast it links to. A cast outside a GEMM, and its backward, is
// not one.
func TestAutocastCasts(t *testing.T) {
	tr := synth(
		op{name: "linear", in: []string{"bf16:8x128x768", "f32:3072x768", "f32:3072"}, kids: []op{
			{name: "to", in: []string{"f32:8x128x768", "=15"}}, // the input
			{name: "to", in: []string{"f32:3072x768", "=15"}},  // the weight
			{name: "to", in: []string{"f32:3072", "=15"}},      // the bias
		}},
		op{name: "linear", in: []string{"f32:768x768", "f32:768x768"}, kids: []op{
			{name: "to", in: []string{"f32:768x768", "=15"}}, // the input's: the first
			{name: "to", in: []string{"f32:768x768", "=15"}}, // the weight's
		}},
		op{name: "matmul", in: []string{"f32:8x12x128x128", "bf16:8x12x128x64"}, kids: []op{
			{name: "to", in: []string{"f32:8x12x128x128", "=15"}},
		}},
		op{name: "to", in: []string{"bf16:4096x8192", "=6"}}, // a loss' upcast: no GEMM's
	)
	casts := map[string]int32{}
	for i := range tr.Ops {
		o := &tr.Ops[i]
		if o.Name == "aten::to" && o.Parent >= 0 {
			casts[tr.Ops[o.Parent].Name+" "+fmt.Sprint(o.Inputs[0].Dims)+" "+fmt.Sprint(len(casts))] = int32(i)
		} else if o.Name == "aten::to" {
			casts["top"] = int32(i)
		}
	}
	// ToCopyBackward0 nodes (as the engine records them) for three of the casts
	b := newTail(tr)
	backward := func(fwd int32) {
		n := b.op("ToCopyBackward0", b.op(evaluateFunction+"ToCopyBackward0", -1))
		tr.Ops[n].Fwd, tr.Ops[fwd].Bwd = fwd, n
		b.kernel(b.op("aten::to", n), "copy_kernel", 7)
	}
	var weight, act int32 = -1, -1
	for k, id := range casts {
		switch {
		case strings.HasPrefix(k, "aten::linear [3072 768]"):
			weight = id
		case strings.HasPrefix(k, "aten::matmul"):
			act = id
		}
	}
	backward(weight)
	backward(act)
	backward(casts["top"])
	b.done()

	for k, id := range casts {
		ok, w := castOperand(tr, id)
		want := strings.HasPrefix(k, "aten::linear [3072") || strings.HasPrefix(k, "aten::linear [768 768] 4")
		if k == "top" {
			if ok {
				t.Errorf("%s: a cast outside a GEMM taken for autocast's", k)
			}
			continue
		}
		if !ok || w != want {
			t.Errorf("%s: cast %v, weight %v; want a cast, weight %v", k, ok, w, want)
		}
	}
	r, err := Analyze([]*trace.Trace{tr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// forward: 3 activation casts and 3 weight casts of 5 µs; backward: one of each, 7 µs;
	// memory-bound: the 7 casts and 3 backward casts (the GEMMs' own kernels are compute)
	want := AutocastCasts{WeightsUs: 22, ActivationsUs: 22, ForwardUs: 30, BackwardUs: 14, Kernels: 8, Pct: 78.57}
	if a := r.Coverage.Autocast; a == nil || *a != want {
		t.Errorf("autocast casts %+v, want %+v", a, want)
	}
}
