package patterns

import (
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/program"
	"github.com/fuseadvise/fuseadvise/trace"
)

// TestGenericGEMMHead: a chain that starts at a GEMM read by nothing else gets it as its
// program's head (each traced form: linear with and without a bias, addmm, mm, a 3-D matmul,
// bmm), with the GEMM's kernel in the chain's time; a GEMM whose output has another reader, an
// addmm scaled by beta, and a chain ending in a reduction stay pointwise, the reason said.
func TestGenericGEMMHead(t *testing.T) {
	cases := []struct {
		name string
		ops  []op
		head *program.GEMM
		why  string // NoGEMMHead contains it
	}{
		{"linear with bias", []op{
			{name: "linear", in: []string{"bf16:8x32", "bf16:64x32", "bf16:64"}},
			{name: "silu", in: []string{"bf16:8x64"}},
			{name: "mul", in: []string{"bf16:8x64", "=0.5"}},
		}, &program.GEMM{Op: program.Linear, X: []int64{8, 32}, W: []int64{64, 32}, Bias: []int64{64}, DType: program.BF16}, ""},
		{"linear without bias, 3-D x", []op{
			{name: "linear", in: []string{"f32:2x8x32", "f32:64x32", ""}},
			{name: "tanh", in: []string{"f32:2x8x64"}},
			{name: "mul", in: []string{"f32:2x8x64", "=2"}},
		}, &program.GEMM{Op: program.Linear, X: []int64{2, 8, 32}, W: []int64{64, 32}, DType: program.FP32}, ""},
		{"addmm", []op{
			{name: "addmm", in: []string{"f32:64", "f32:8x32", "f32:32x64", "=1", "=1"}},
			{name: "relu", in: []string{"f32:8x64"}},
			{name: "mul", in: []string{"f32:8x64", "=3"}},
		}, &program.GEMM{Op: program.Addmm, X: []int64{8, 32}, W: []int64{32, 64}, Bias: []int64{64}, DType: program.FP32}, ""},
		{"mm", []op{
			{name: "mm", in: []string{"f16:8x32", "f16:32x64"}},
			{name: "sigmoid", in: []string{"f16:8x64"}},
			{name: "mul", in: []string{"f16:8x64", "=3"}},
		}, &program.GEMM{Op: program.MM, X: []int64{8, 32}, W: []int64{32, 64}, DType: program.FP16}, ""},
		{"matmul 3-D", []op{
			{name: "matmul", in: []string{"f32:4x8x32", "f32:32x64"}},
			{name: "exp", in: []string{"f32:4x8x64"}},
			{name: "mul", in: []string{"f32:4x8x64", "=3"}},
		}, &program.GEMM{Op: program.Matmul, X: []int64{4, 8, 32}, W: []int64{32, 64}, DType: program.FP32}, ""},
		{"bmm", []op{
			{name: "bmm", in: []string{"f32:4x8x32", "f32:4x32x64"}},
			{name: "tanh", in: []string{"f32:4x8x64"}},
			{name: "mul", in: []string{"f32:4x8x64", "=3"}},
		}, &program.GEMM{Op: program.BMM, X: []int64{4, 8, 32}, W: []int64{4, 32, 64}, DType: program.FP32}, ""},
		{"output read outside the chain", []op{
			{name: "linear", in: []string{"f32:8x32", "f32:64x32", "f32:64"}},
			{name: "mm", in: []string{"f32:8x64", "f32:64x16"}},
			{name: "tanh", in: []string{"f32:8x64"}},
			{name: "mul", in: []string{"f32:8x64", "=2"}},
		}, nil, "read outside the chain"},
		{"addmm scaled by beta", []op{
			{name: "addmm", in: []string{"f32:64", "f32:8x32", "f32:32x64", "=0.5", "=1"}},
			{name: "relu", in: []string{"f32:8x64"}},
			{name: "mul", in: []string{"f32:8x64", "=3"}},
		}, nil, "beta or alpha"},
		{"ending in a reduction", []op{
			{name: "linear", in: []string{"f32:8x32", "f32:64x32", "f32:64"}},
			{name: "exp", in: []string{"f32:8x64"}},
			{name: "sum", in: []string{"f32:8x64", "=[-1]", "=False", ""}},
		}, nil, "ends in a reduction"},
	}
	for _, c := range cases {
		r, err := Analyze([]*trace.Trace{synth(c.ops...)}, Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(r.GenericChains) != 1 || r.GenericChains[0].Program == nil {
			t.Errorf("%s: want one chain with a program, got %+v", c.name, r.GenericChains)
			continue
		}
		ch := r.GenericChains[0]
		got := ch.Program.GEMM
		switch {
		case c.head == nil && got != nil:
			t.Errorf("%s: headed by %+v, want no head", c.name, got)
		case c.head != nil && (got == nil || got.Op != c.head.Op || !eqDims(got.X, c.head.X) || !eqDims(got.W, c.head.W) ||
			!eqDims(got.Bias, c.head.Bias) || (got.Bias == nil) != (c.head.Bias == nil) || got.DType != c.head.DType):
			t.Errorf("%s: head %+v, want %+v (%s)", c.name, got, c.head, ch.NoGEMMHead)
		case c.head != nil && (ch.GEMM != string(c.head.Op) || ch.GEMMUs != 5 || ch.Kernels != len(c.ops)):
			t.Errorf("%s: gemm %q %v us, %d kernels: want the head's op, its 5 us and its kernel", c.name, ch.GEMM, ch.GEMMUs, ch.Kernels)
		case c.head == nil && !strings.Contains(ch.NoGEMMHead, c.why):
			t.Errorf("%s: no_gemm_head %q, want it to say %q", c.name, ch.NoGEMMHead, c.why)
		}
		if got != nil && ch.Program.Inputs[0].DType != got.DType {
			t.Errorf("%s: input 0 is not the GEMM's output: %+v", c.name, ch.Program.Inputs[0])
		}
	}
}

// TestGenericGEMMCost: the epilogue-fused GEMM is estimated as linear_gelu's (the measured
// GEMM as a Triton GEMM runs it, plus the epilogue's traffic, which grows with the chain's
// other inputs), never without a GEMM time; an analysis keeps the faster of that and cuBLAS +
// the pointwise kernel.
func TestGenericGEMMCost(t *testing.T) {
	p := &program.Program{Dims: []int64{1024, 1024}, Inputs: []program.Input{{DType: program.BF16, Dims: []int64{1024, 1024}}},
		Steps: []program.Step{{Op: program.Tanh, Args: []program.Arg{program.InArg(0)}, DType: program.BF16}}, Outputs: []int{0},
		GEMM: &program.GEMM{Op: program.Linear, X: []int64{1024, 512}, W: []int64{1024, 512}, DType: program.BF16}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	cm := DefaultCostModel()
	if _, ok := cm.GenericGEMMFusedUs("NVIDIA H200", p, 0, false); ok {
		t.Error("an estimate without a GEMM time")
	}
	us, ok := cm.GenericGEMMFusedUs("NVIDIA H200", p, 20, false)
	if !ok || us <= 20*cm.GemmRatio16*0.99 {
		t.Errorf("fused %v us (ok %v): want more than the GEMM as a Triton GEMM runs it", us, ok)
	}
	q := *p
	q.Inputs = append(append([]program.Input{}, p.Inputs...), program.Input{DType: program.BF16, Dims: []int64{1024, 1024}})
	q.Steps = append(append([]program.Step{}, p.Steps...), program.Step{Op: program.Add,
		Args: []program.Arg{program.StepArg(0), program.InArg(1)}, Consts: []program.Num{1}, DType: program.BF16})
	q.Outputs = []int{1}
	if more, _ := cm.GenericGEMMFusedUs("NVIDIA H200", &q, 20, false); more <= us {
		t.Errorf("a residual read: %v us, want more than %v", more, us)
	}
	// the faster of the two paths: a large GEMM over a small chain takes cuBLAS and the
	// pointwise kernel (the GEMM's own time, under GemmRatio16 of it), a small GEMM the tiles
	m := cm
	m.BandwidthGBs, m.KernelOverheadUs = 4000, 2
	m = m.withDefaults()
	for _, gemmUs := range []float64{0.5, 20, 2000} {
		f, ok := m.genericGEMMUs(p, gemmUs, false)
		epi := m.epilogueGemmUs(epilogueShape(p, gemmUs, false))
		if !ok || f > epi || f <= 0 {
			t.Errorf("GEMM %v us: %v, the epilogue-fused GEMM %v", gemmUs, f, epi)
		}
		if gemmUs == 2000 && f >= epi {
			t.Errorf("GEMM %v us: %v, want cuBLAS and the pointwise kernel under the tiles' %v", gemmUs, f, epi)
		}
	}
}

// TestGenericGEMMGrouped: instances of one GEMM-headed chain are grouped with their GEMM times
// summed beside their GPU times.
func TestGenericGEMMGrouped(t *testing.T) {
	one := []op{
		{name: "linear", in: []string{"f32:8x32", "f32:64x32", "f32:64"}},
		{name: "sigmoid", in: []string{"f32:8x64"}},
		{name: "mul", in: []string{"f32:8x64", "f32:8x64"}},
	}
	r, err := Analyze([]*trace.Trace{synth(append(append([]op{}, one...), one...)...)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GenericChains) != 1 {
		t.Fatalf("%d chains, want 1: %+v", len(r.GenericChains), r.GenericChains)
	}
	c := r.GenericChains[0]
	if c.Instances != 2 || c.GEMM != "linear" || c.GEMMUs != 10 || c.GPUTimeUs != 30 || c.Kernels != 6 {
		t.Errorf("got %d instances, gemm %q %v us, %v us, %d kernels: want 2, linear, 10, 30 and 6",
			c.Instances, c.GEMM, c.GEMMUs, c.GPUTimeUs, c.Kernels)
	}
}
