package patterns

import (
	"math"
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// TestBackwardShapeOf: the backward shape derived of a forward case, per kind, and the
// model's estimate of it (launches by kind); the patterns without a backward model get none.
func TestBackwardShapeOf(t *testing.T) {
	x := []int64{1024, 3072}
	tensor := int64(1024 * 3072 * 2)          // one bf16 tensor of x's shape
	biasGelu := 2*tensor + 3072*2             // x and the bias read, y written
	norm := int64(4096 * 768 * 4)             // one fp32 tensor of [4096, 768]
	attn := ForwardCase{Pattern: "attention", // causal [1, 2, 128, 64]
		Case:  Case{Dtype: "bf16", Shapes: [][]int64{{1, 2, 128, 64}, {1, 2, 128, 64}, {1, 2, 128, 64}}, Params: KernelParams{MaskKind: "causal"}},
		Shape: []int64{1, 2, 128, 64}, Bytes: 4 * 2 * 128 * 64 * 2}
	for _, tc := range []struct {
		name     string
		f        ForwardCase
		own      int64
		want     BackwardShape
		launches int // 0: no backward
	}{
		{"pointwise, bias gradient by a row sum", ForwardCase{Pattern: "bias_gelu", Case: Case{Dtype: "bf16", Shapes: [][]int64{x, {3072}}}, Shape: x, Bytes: biasGelu},
			0, BackwardShape{Pattern: "bias_gelu", Bytes: biasGelu + (biasGelu - tensor), WriteBytes: biasGelu - tensor, SumBytes: biasGelu - tensor}, 2},
		{"pointwise, two gradients, own bytes", ForwardCase{Pattern: "swiglu", Case: Case{Dtype: "bf16", Shapes: [][]int64{x}}, Shape: x, Bytes: 3 * tensor},
			5 * tensor, BackwardShape{Pattern: "swiglu", Bytes: 5 * tensor, WriteBytes: 2 * tensor}, 1},
		{"pointwise without a bias", ForwardCase{Pattern: "gelu_pyops", Case: Case{Dtype: "bf16", Shapes: [][]int64{x}}, Shape: x, Bytes: 2 * tensor},
			// dy and x read, dx written: 4/3 of the forward's bytes (bwdPerFwdByte)
			0, BackwardShape{Pattern: "gelu_pyops", Bytes: int64(4.0 / 3 * float64(2*tensor)), WriteBytes: tensor}, 1},
		{"row, weight and bias partial sums", ForwardCase{Pattern: "add_layernorm", Case: Case{Dtype: "fp32", Shapes: [][]int64{{4096, 768}}}, Shape: []int64{4096, 768}, Bytes: 4 * norm},
			// 4096 rows: 512 programs of 8 rows, an fp32 row each for the weight's and the bias' gradient
			// dy, ds and s read, dx written: the forward's bytes (bwdPerFwdByte)
			0, BackwardShape{Pattern: "add_layernorm", Bytes: 4 * norm, WriteBytes: norm, PartialBytes: 512 * 2 * 768 * 4}, 2},
		{"attention: five products at the padded head dim, twice the forward's bytes", attn,
			0, BackwardShape{Pattern: "attention", Flops: AttentionFlops(attn.Case) * 5 / 2, Bytes: 2 * attn.Bytes}, 3},
		{"GEMM epilogue: the GEMM twice, the derivative's pass with the bias' partial sums, their sum",
			ForwardCase{Pattern: "linear_gelu", Case: Case{Dtype: "bf16", Shapes: [][]int64{{8, 128, 768}, {3072, 768}, {3072}}}, Shape: []int64{8, 128, 768}, Bytes: 1, GemmUs: 10},
			// 1024 rows of 3072: tiles of 2 x 1024 (2048 columns would pad a third), three
			// column blocks of 170 programs: 7 rows each, rounded to whole tiles, 8: 128 row
			// groups, fp32
			0, BackwardShape{Pattern: "linear_gelu", GemmUs: 10, PassBytes: 3 * tensor, PartialBytes: 128 * 3072 * 4}, 4},
		{"GEMM epilogue without the GEMM's time", ForwardCase{Pattern: "linear_gelu", Case: Case{Dtype: "bf16", Shapes: [][]int64{{1024, 768}, {3072, 768}}}, Shape: []int64{1024, 768}, Bytes: 1},
			0, BackwardShape{}, 0},
		{"GEMM after a LayerNorm: the GEMM twice, the LayerNorm's pass over x, its partial sums, the bias' row sum, the refold",
			ForwardCase{Pattern: "layernorm_linear", Case: Case{Dtype: "bf16", Shapes: [][]int64{{1024, 768}, {3072, 768}, {3072}}}, Shape: []int64{1024, 768}, Bytes: 1, GemmUs: 10},
			// 1024 rows: 256 programs of 4 rows, an fp32 row of 768 each for dgamma and dbeta
			0, BackwardShape{Pattern: "layernorm_linear", GemmUs: 10, PassBytes: 4 * 1024 * 768 * 2, PartialBytes: 256 * 2 * 768 * 4, SumBytes: tensor,
				FoldBytes: 2 * 3072 * 768 * 2}, 6},
		{"GEMM after a LayerNorm without the GEMM's time", ForwardCase{Pattern: "layernorm_linear", Case: Case{Dtype: "bf16", Shapes: [][]int64{{1024, 768}, {3072, 768}}}, Shape: []int64{1024, 768}, Bytes: 1},
			0, BackwardShape{}, 0},
		{"no forward bytes", ForwardCase{Pattern: "swiglu", Case: Case{Dtype: "bf16", Shapes: [][]int64{x}}, Shape: x}, 0, BackwardShape{}, 0},
		{"unknown pattern", ForwardCase{Pattern: "nope", Case: Case{Dtype: "bf16", Shapes: [][]int64{x}}, Shape: x, Bytes: 1}, 0, BackwardShape{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := BackwardShapeOf(tc.f, tc.own, false)
			if ok != (tc.launches > 0) {
				t.Fatalf("ok %v, want %v (%+v)", ok, tc.launches > 0, s)
			}
			if !ok {
				return
			}
			if s != tc.want {
				t.Errorf("got %+v\nwant %+v", s, tc.want)
			}
			us, launches, ok := DefaultCostModel().BackwardUs("NVIDIA H200", s)
			if !ok || us <= 0 || launches != tc.launches {
				t.Errorf("BackwardUs: %v us, %d launches, ok %v; want %d launches", us, launches, ok, tc.launches)
			}
		})
	}
}

// biasGeluTrainTrace is biasGeluTrace in a training step: the gelu's backward op
// (GeluBackward0, one 100 us kernel) linked to the forward gelu.
func biasGeluTrainTrace() *trace.Trace {
	tr := biasGeluTrace()
	fwd := int32(-1)
	for i := range tr.Ops {
		if tr.Ops[i].Name == "aten::gelu" {
			fwd = int32(i)
		}
	}
	last := &tr.Ops[len(tr.Ops)-1]
	start := last.Start + last.Dur + 1_000
	id := int32(len(tr.Ops))
	tr.Ops = append(tr.Ops, trace.Op{Name: "GeluBackward0", Kind: trace.KindCPUOp, Start: start, Dur: 110_000, Parent: -1,
		Bwd: -1, Fwd: fwd, Py: -1, ExternalID: -1, RecordFunctionID: -1, Seq: -1, Acts: []int32{int32(len(tr.Acts))}})
	tr.Acts = append(tr.Acts, trace.Activity{Name: "gelu_backward_kernel", Start: start, Dur: 100_000, Op: id})
	tr.Ops[fwd].Bwd = id
	tr.Threads[0].Roots = append(tr.Threads[0].Roots, id)
	tr.Steps[0].Dur = start + 110_000
	return tr
}

// TestBackwardSaving: on a training trace an instance's fused backward is the model's
// estimate of the backward shape derived of its case, its saving the traced backward less
// it, and the totals count it beside the forward's; an inference trace has none.
func TestBackwardSaving(t *testing.T) {
	cm := DefaultCostModel()
	cm.BandwidthGBs, cm.KernelOverheadUs = 10000, 2
	r, err := Analyze([]*trace.Trace{biasGeluTrainTrace()}, Options{Cost: cm})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Opportunities) != 1 || r.Totals == nil {
		t.Fatalf("opportunities %+v, totals %+v", r.Opportunities, r.Totals)
	}
	o := r.Opportunities[0]
	x := []int64{1024, 3072}
	bytes := int64(1024*3072*2*2 + 3072*2)
	s, ok := BackwardShapeOf(ForwardCase{Pattern: "bias_gelu", Case: Case{Dtype: "bf16", Shapes: [][]int64{x, {3072}}}, Shape: x, Bytes: bytes}, 0, false)
	want, _, ok2 := cm.BackwardUs("NVIDIA H200", s)
	if !ok || !ok2 || want <= 0 || want >= 100 {
		t.Fatalf("the expected backward: %+v %v %v", s, want, ok2)
	}
	if o.BackwardInstances != 1 || o.BackwardGPUTimeUs != 100 || o.EstFusedBackwardUs != round2(want) || o.EstBackwardSavingUs != round2(100-want) {
		t.Errorf("backward: %d instances, GPU %v, fused %v, saving %v; want 1, 100, %v, %v",
			o.BackwardInstances, o.BackwardGPUTimeUs, o.EstFusedBackwardUs, o.EstBackwardSavingUs, round2(want), round2(100-want))
	}
	if g := o.Shapes[0]; g.BackwardGPUTimeUs != 100 || g.EstFusedBackwardUs != o.EstFusedBackwardUs || g.EstBackwardSavingUs != o.EstBackwardSavingUs {
		t.Errorf("shape group's backward %+v", g)
	}
	// the totals and the counted saving: the forward's saving and the backward's
	total := round2(o.EstSavingUs + o.EstBackwardSavingUs)
	if tt := r.Totals; math.Abs(tt.EstSavingUs-total) > 0.02 || tt.EstBackwardSavingUs != o.EstBackwardSavingUs ||
		math.Abs(tt.SumOfPatternsUs-total) > 0.02 || math.Abs(o.CountedSavingUs-total) > 0.02 {
		t.Errorf("totals %v (backward %v), sum of patterns %v, counted %v; want %v with the backward's %v",
			tt.EstSavingUs, tt.EstBackwardSavingUs, tt.SumOfPatternsUs, o.CountedSavingUs, total, o.EstBackwardSavingUs)
	}
	// the same chain in inference: no backward fields, the forward's saving unchanged
	inf, err := Analyze([]*trace.Trace{biasGeluTrace()}, Options{Cost: cm})
	if err != nil {
		t.Fatal(err)
	}
	io := inf.Opportunities[0]
	if io.EstFusedBackwardUs != 0 || io.EstBackwardSavingUs != 0 || io.EstSavingUs != o.EstSavingUs || inf.Totals.EstBackwardSavingUs != 0 ||
		inf.Totals.EstSavingUs != io.EstSavingUs {
		t.Errorf("inference: backward %v/%v, saving %v (training's forward %v), totals %+v", io.EstFusedBackwardUs, io.EstBackwardSavingUs,
			io.EstSavingUs, o.EstSavingUs, inf.Totals)
	}
}

// TestTilePartials: the partial sums' bytes as the kernels' wrappers size them (the shared
// _tiles and the bias gradient's row groups in linear_gelu's _GELUNodeFunction.backward,
// DB_PROGRAMS 512; the want column computed there, with the GPU's tiles, on 2026-12-03).
func TestTilePartials(t *testing.T) {
	for _, tc := range []struct{ m, n, es, want int64 }{
		{100352, 384, 2, 261120}, // ConvNeXt 32x56x56: tiles 16 x 128
		{25088, 768, 2, 509952},
		{6272, 1536, 2, 964608},
		{1568, 3072, 2, 1929216},
		{4096, 3072, 2, 1941504}, // BERT: tiles 2 x 1024 (2048 columns would pad a third)
		{4096, 8192, 2, 4194304},
		{1024, 3072, 2, 1572864},
		{7, 1000, 4, 28000}, // fewer rows than programs: one row group a row
		{33, 96, 4, 1920},
	} {
		if got := tilePartials(tc.m, tc.n, tc.es, 512); got != tc.want {
			t.Errorf("tilePartials(%d, %d, %d, 512) = %d, want %d", tc.m, tc.n, tc.es, got, tc.want)
		}
	}
}
