package bench

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/fuseadvise/fuseadvise/patterns"
)

// The backward and full cases' predictions, each against the model written out by hand
// (docs/cost-model.md, "Backward"): shapes past L2, so that no L2 discount enters, on the
// H200's device-table bandwidth (4250 GB/s) and the default kernel overhead (1.1 µs).
func TestPredictBackwardKinds(t *testing.T) {
	dm := patterns.DefaultCostModel()
	const bw = 4250e3 // bytes per µs
	ov, row, gap := dm.DefaultKernelOverheadUs, dm.RowKernelUs, dm.GraphGapUs
	rowPass := func(bytes float64) float64 { return ov + row + bytes/(dm.RowBwdEfficiency*bw) }
	stream := func(bytes float64) float64 { return ov + bytes/(dm.FusedEfficiency*bw) }
	replay := map[string]string{"fused": "graph-replay"}
	graphed := map[string]string{"fused": "cudagraph"}

	const m, n = 16384, 4096 // add_layernorm bf16: 537 MB backward, 512 programs of 32 rows
	lnBwd := int64(m*n*(3*2+2) + 8*m + 3*n*2)
	lnPart := float64(512 * 2 * n * 4) // the weight's and the bias' partial sums, fp32
	lnWant := rowPass(float64(lnBwd)+lnPart) + rowPass(lnPart)

	const gm, gn = 8192, 16384 // gelu_pyops bf16 with a bias: tiles of 2048 columns, 64 row groups
	geluBwd := int64(gm*gn*3*2 + 2*2*gn)
	geluPart := float64(64 * gn * 4)

	const lm, lk, ln = 16384, 2048, 8192 // linear_gelu bf16: tiles of 2048 columns, 128 row groups
	pass, sum := float64(3*lm*ln*2), float64(lm*ln*2)
	lgPart := float64(128 * ln * 4) // the bias' partial sums, fp32, written in the derivative's pass

	qkv := [][]int64{{4, 32, 512, 96}, {4, 32, 512, 96}, {4, 32, 512, 96}}
	attFlops := 2.5 * 2 * 4 * 32 * (96 + 96) * float64(512*513/2) * 128 / 96 // the head dim padded to 128
	attBytes := float64(100925440)

	for _, tc := range []struct {
		name     string
		fwd, bwd Case
		want     float64 // the backward's prediction; 0: none
	}{
		{"row backward with partial sums: two launches",
			Case{Pattern: "add_layernorm", Dtype: "bf16", Shape: []int64{m, n}, Shapes: [][]int64{{m, n}}, Bytes: m * n * 8, Timing: replay},
			Case{Mode: "backward", Bytes: lnBwd, Timing: replay}, lnWant},
		{"back to back: a gap per launch",
			Case{Pattern: "add_layernorm", Dtype: "bf16", Shape: []int64{m, n}, Shapes: [][]int64{{m, n}}, Bytes: m * n * 8, Timing: replay},
			Case{Mode: "backward", Bytes: lnBwd, Timing: graphed}, lnWant + 2*gap},
		{"no bytes of its own: the forward's reads again, a gradient per input",
			Case{Pattern: "swiglu", Dtype: "bf16", Shape: []int64{m, n}, Shapes: [][]int64{{m, n}}, Bytes: 3 * m * n * 2, Timing: replay},
			Case{Mode: "backward", Timing: replay}, stream(5 * m * n * 2)},
		{"pointwise with a bias: the bias' partial sums",
			Case{Pattern: "gelu_pyops", Dtype: "bf16", Shape: []int64{gm, gn}, Shapes: [][]int64{{gm, gn}, {gn}}, Bytes: gm * gn * 4, Timing: replay},
			Case{Mode: "backward", Bytes: geluBwd, Timing: replay}, stream(float64(geluBwd)+geluPart) + rowPass(geluPart)},
		{"pointwise without a bias: one launch",
			Case{Pattern: "gelu_pyops", Dtype: "bf16", Shape: []int64{gm, gn}, Shapes: [][]int64{{gm, gn}}, Bytes: gm * gn * 4, Timing: replay},
			Case{Mode: "backward", Bytes: gm * gn * 6, Timing: replay}, stream(gm * gn * 6)},
		{"linear_gelu: two cuBLAS GEMMs, the derivative's pass with the bias' partial sums, their sum",
			Case{Pattern: "linear_gelu", Dtype: "bf16", Shape: []int64{lm, lk}, Shapes: [][]int64{{lm, lk}, {ln, lk}, {ln}}, Bytes: 1, GemmOnlyUs: 300, Timing: replay},
			Case{Mode: "backward", Timing: replay}, 2*300 + stream(pass+lgPart) + rowPass(lgPart)},
		{"attention: flops at the padded head dim and bytes, added, three launches",
			Case{Pattern: "attention", Name: "attention-causal-bf16-4x32x512x96-00000000", Dtype: "bf16", Shape: qkv[0], Shapes: qkv, Bytes: 50331648, Timing: replay},
			Case{Mode: "backward", Bytes: int64(attBytes), Timing: replay},
			3*ov + attFlops/(dm.AttentionBwdEfficiency*679e6) + attBytes/(dm.AttentionBwdByteEfficiency*bw)},
		{"layernorm_linear: two cuBLAS GEMMs, the LayerNorm's pass, its partial sums, the bias' sum, the refold",
			Case{Pattern: "layernorm_linear", Dtype: "bf16", Shape: []int64{lm, lk}, Shapes: [][]int64{{lm, lk}, {ln, lk}, {ln}}, Bytes: 1, GemmOnlyUs: 300, Timing: replay},
			// 16384 rows: 512 programs of 32 rows, an fp32 row of K each for dgamma and dbeta
			// and the refold of the weights, a row kernel (the forward's row efficiency)
			Case{Mode: "backward", Timing: replay}, 2*300 + rowPass(4*lm*lk*2) + rowPass(512*2*lk*4) + rowPass(sum) +
				ov + row + 2*ln*lk*2/(dm.RowEfficiency*bw)},
		{"a generic chain: one kernel over its own bytes, none served by L2",
			Case{Pattern: "generic", Dtype: "fp32", Shape: []int64{m, n}, Bytes: m * n * 12, Timing: replay},
			Case{Mode: "backward", Bytes: m * n * 12, Timing: replay}, ov + row + m*n*12/(dm.GenericBwdEfficiency*bw)},
		{"a generic chain with a GEMM head: cuBLAS's two gradient GEMMs after it",
			Case{Pattern: "generic", Dtype: "bf16", Shape: []int64{m, n}, Bytes: m * n * 6, GemmOnlyUs: 300, Timing: replay},
			Case{Mode: "backward", Bytes: m * n * 8, Timing: replay}, 2*300 + 3*ov + row + m*n*8/(dm.GenericBwdEfficiency*bw)},
		{"a generic chain measured without its backward's bytes: no prediction",
			Case{Pattern: "generic", Dtype: "fp32", Shape: []int64{m, n}, Bytes: m * n * 12, Timing: replay},
			Case{Mode: "backward", Timing: replay}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, b := tc.fwd, tc.bwd
			if f.Name == "" {
				f.Name = "case"
			}
			f.Mode, f.Correct, f.Launches = "forward", true, 1
			b.Pattern, b.Name, b.Dtype, b.Correct = f.Pattern, f.Name, f.Dtype, true
			full := b
			full.Mode = "full"
			if b.Bytes > 0 {
				full.Bytes = f.Bytes + b.Bytes
			}
			r := &Result{GPU: "NVIDIA H200", Cases: []Case{f, b, full}}
			Predict(r, dm)
			fw, bk, fl := r.Cases[0], r.Cases[1], r.Cases[2]
			if tc.want == 0 {
				if bk.PredictedUs != 0 || fl.PredictedUs != 0 {
					t.Errorf("predicted %v, %v; want none", bk.PredictedUs, fl.PredictedUs)
				}
				return
			}
			if math.Abs(bk.PredictedUs-tc.want) > 1e-6*tc.want || bk.PredictedFrom != FromCostModel {
				t.Errorf("backward %v (%q), want %v", bk.PredictedUs, bk.PredictedFrom, tc.want)
			}
			// full: the forward's prediction without its gaps, then the backward, with the gaps of
			// full's own timing: a gap per launch of both when back to back, else none
			gaps := 0.0
			if full.Timing["fused"] == "cudagraph" {
				gaps = gap * (1 + bk.PredictedGapUs/gap)
			}
			want := fw.PredictedUs - fw.PredictedGapUs + tc.want - bk.PredictedGapUs + gaps
			if math.Abs(fl.PredictedUs-want) > 1e-6*want || math.Abs(fl.PredictedGapUs-gaps) > 1e-9 {
				t.Errorf("full %v (gaps %v), want %v (gaps %v)", fl.PredictedUs, fl.PredictedGapUs, want, gaps)
			}
		})
	}
}

// A full case timed back to back pays the graph's gap once per launch of the forward and of
// the backward; a full case whose forward has no prediction gets none.
func TestPredictFullGaps(t *testing.T) {
	dm := patterns.DefaultCostModel()
	graphed := map[string]string{"fused": "cudagraph"}
	shape := []int64{4096, 768}
	r := &Result{GPU: "NVIDIA H200", Cases: []Case{
		{Pattern: "rmsnorm_pyops", Name: "a", Mode: "forward", Correct: true, Dtype: "bf16", Shape: shape, Bytes: 4096 * 768 * 4,
			Launches: 1, PredictedUs: 10, PredictedGapUs: 0.7, PredictedFrom: FromAnalysis, Timing: graphed},
		{Pattern: "rmsnorm_pyops", Name: "a", Mode: "backward", Correct: true, Dtype: "bf16", Shape: shape, Bytes: 4096 * 768 * 6, Timing: graphed},
		{Pattern: "rmsnorm_pyops", Name: "a", Mode: "full", Correct: true, Dtype: "bf16", Shape: shape, Bytes: 4096 * 768 * 10, Timing: graphed},
		{Pattern: "rmsnorm_pyops", Name: "b", Mode: "forward", Correct: true, Dtype: "bf16", Shape: shape, Timing: graphed},
		{Pattern: "rmsnorm_pyops", Name: "b", Mode: "full", Correct: true, Dtype: "bf16", Shape: shape, Bytes: 4096 * 768 * 10, Timing: graphed},
	}}
	Predict(r, dm)
	c := r.Cases
	if c[1].PredictedGapUs != 2*dm.GraphGapUs { // the backward pass and the weight's partial sums
		t.Errorf("backward gaps %v, want two launches' %v", c[1].PredictedGapUs, 2*dm.GraphGapUs)
	}
	if want := 3 * dm.GraphGapUs; math.Abs(c[2].PredictedGapUs-want) > 1e-9 {
		t.Errorf("full gaps %v, want three launches' %v", c[2].PredictedGapUs, want)
	}
	if want := 10 - 0.7 + (c[1].PredictedUs - c[1].PredictedGapUs) + 3*dm.GraphGapUs; math.Abs(c[2].PredictedUs-want) > 1e-9 {
		t.Errorf("full %v, want %v", c[2].PredictedUs, want)
	}
	if c[4].PredictedUs != 0 {
		t.Errorf("a full case whose forward has no prediction got %v", c[4].PredictedUs)
	}
}

// Shapes the model cannot read give no prediction, never a panic: an attention case without
// its q, k and v, a linear_gelu without its weight.
func TestPredictBackwardBadShapes(t *testing.T) {
	for _, f := range []Case{
		{Pattern: "attention", Name: "attention-causal-bf16-x", Dtype: "bf16", Bytes: 1 << 20},
		{Pattern: "attention", Name: "attention-bf16-x", Dtype: "bf16", Shapes: [][]int64{{2, 4}}, Bytes: 1 << 20},
		{Pattern: "linear_gelu", Name: "linear_gelu-x", Dtype: "bf16", Shapes: [][]int64{{64, 32}}, Bytes: 1 << 20, GemmOnlyUs: 5},
	} {
		f.Mode, f.Correct = "forward", true
		b := Case{Pattern: f.Pattern, Name: f.Name, Dtype: f.Dtype, Mode: "backward", Correct: true, Bytes: 1 << 21}
		r := &Result{GPU: "NVIDIA H200", Cases: []Case{f, b}}
		Predict(r, patterns.DefaultCostModel())
		if r.Cases[1].PredictedUs != 0 {
			t.Errorf("%s %v: backward predicted %v", f.Pattern, f.Shapes, r.Cases[1].PredictedUs)
		}
	}
}

// TestBackwardBytesRecorded: where a benchmark recorded a memory-bound backward's own bytes
// (the adapter's bwd_nbytes), the derivation from the forward alone (what the analysis of a
// trace has: BackwardShapeOf without them) comes within 5% of them, on the recorded cases whose
// tensors share one dtype (a mixed case's, such as BERT's bf16 x with an fp32 residual, are
// not the dtype's multiples that the derivation counts).
func TestBackwardBytesRecorded(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "benchmarks", "h200-train-2026-12-02c.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	uniform := map[string]bool{ // one dtype throughout (their forward bytes a whole number of x's)
		"add_layernorm-bf16-8192x4096-46eb2f6d":   true,
		"add_layernorm-fp32-32x96x56x56-6b681f5c": true,
		"rmsnorm_pyops-bf16-8192x4096-f79bb692":   true,
		"rmsnorm_pyops-fp32-4x512x1024-a7fe1ba8":  true,
		"gelu_pyops-bf16-8x512x3072-a5782f4b":     true,
	}
	fwd := map[string]*Case{}
	for i := range r.Cases {
		if c := &r.Cases[i]; c.Mode == "" || c.Mode == "forward" {
			fwd[c.Name] = c
		}
	}
	checked := 0
	for _, c := range r.Cases {
		f := fwd[c.Name]
		if c.Mode != "backward" || f == nil || !uniform[c.Name] {
			continue
		}
		s, ok := patterns.BackwardShapeOf(forwardCase(f), 0, false)
		if !ok {
			t.Errorf("%s: no backward shape from the forward", c.Name)
			continue
		}
		if d := math.Abs(float64(s.Bytes)/float64(c.Bytes) - 1); d > 0.05 {
			t.Errorf("%s: %d backward bytes derived from the forward's %d, %d recorded (%.0f%% off)", c.Name, s.Bytes, f.Bytes, c.Bytes, 100*d)
		}
		checked++
	}
	if checked != len(uniform) {
		t.Errorf("%d of the %d uniform-dtype cases found with a backward", checked, len(uniform))
	}
}
