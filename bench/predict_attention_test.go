package bench

import (
	"math"
	"testing"

	"github.com/fuseadvise/fuseadvise/patterns"
)

// An attention case is predicted from its GEMMs' arithmetic when that takes longer than its
// bytes: the kept pairs only under a causal mask (the folder's name says which), at the
// attention kernel's share of the GEMM rate.
func TestPredictAttention(t *testing.T) {
	qkv := [][]int64{{2, 16, 2048, 64}, {2, 16, 2048, 64}, {2, 16, 2048, 64}}
	bytes := int64(4 * 2 * 16 * 2048 * 64 * 2) // q, k, v, o
	r := &Result{GPU: "NVIDIA H200", Cases: []Case{
		{Name: "attention-causal-bf16-2x16x2048x64-00000000", Pattern: "attention", Correct: true, Dtype: "bf16",
			Shape: qkv[0], Shapes: qkv, Bytes: bytes},
		{Name: "attention-bf16-2x16x2048x64-00000000", Pattern: "attention", Correct: true, Dtype: "bf16",
			Shape: qkv[0], Shapes: qkv, Bytes: bytes},
	}}
	dm := patterns.DefaultCostModel()
	Predict(r, dm)
	rate := 679e6 * dm.AttentionEfficiency // the H200's flops per us, as a fused attention kernel reaches them
	causal := 2 * 32 * 128 * float64(2048*2049/2)
	if want := causal/rate + 1.1; math.Abs(r.Cases[0].PredictedUs-want) > 1e-6 {
		t.Errorf("causal: %v, want %v", r.Cases[0].PredictedUs, want)
	}
	if want := 2*32*128*float64(2048*2048)/rate + 1.1; math.Abs(r.Cases[1].PredictedUs-want) > 1e-6 {
		t.Errorf("no mask: %v, want %v", r.Cases[1].PredictedUs, want)
	}
}
