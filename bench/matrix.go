package bench

import "github.com/fuseadvise/fuseadvise/codegen"

// Anchors is the H200 benchmark matrix: the shapes of the reference timings in the project's
// H200 anchors (eager ATen, torch.compile, a simple Triton kernel and the floor), plus
// large and decode-size cases of the patterns the anchors lack (add_layernorm, swiglu,
// linear_gelu). Together with the shapes of the traces, these are the cases the committed
// H200 results cover. Patterns without a template are skipped.
func Anchors() []codegen.Spec {
	have := map[string]bool{}
	for _, p := range codegen.Patterns() {
		have[p] = true
	}
	var kept []codegen.Spec
	for _, s := range matrix() {
		if have[s.Pattern] {
			kept = append(kept, s)
		}
	}
	return kept
}

// matrix is the benchmark matrix as declared, every pattern in it (TestRegistryBenchMatrix
// checks it against the registry).
func matrix() []codegen.Spec {
	var out []codegen.Spec
	add := func(pattern, dtype string, p codegen.Params, shapes ...[]int64) {
		out = append(out, codegen.Spec{Pattern: pattern, Dtype: dtype, Shapes: shapes, Params: p,
			Source: codegen.Source{Trace: "h200-anchors", Site: "benchmark matrix"}})
	}
	gelu := []struct {
		m, n  int64
		dtype string
	}{{8192, 16384, "bf16"}, {16384, 3072, "fp16"}, {32, 4096, "bf16"}, {8192, 16384, "fp32"}}
	for _, g := range gelu {
		for _, approx := range []string{"none", "tanh"} {
			add("bias_gelu", g.dtype, codegen.Params{Approximate: approx, HasBias: true}, []int64{g.m, g.n}, []int64{g.n})
		}
		add("gelu_pyops", g.dtype, codegen.Params{HasBias: true}, []int64{g.m, g.n}, []int64{g.n})
	}
	softmax := []struct {
		b, h, s int64
		dtype   string
	}{{8, 16, 1024, "bf16"}, {4, 32, 2048, "fp16"}, {8, 12, 129, "fp16"}, {1, 32, 512, "bf16"}}
	for _, s := range softmax {
		scores, mask := []int64{s.b, s.h, s.s, s.s}, []int64{s.b, 1, s.s, s.s}
		add("mask_softmax", s.dtype, codegen.Params{MaskKind: "bool", Scale: 0.125}, scores, mask)
		add("mask_softmax", s.dtype, codegen.Params{MaskKind: "additive", Scale: 0.125}, scores, mask)
	}
	lnl := []struct {
		m, k, n int64
		dtype   string
	}{{8192, 4096, 4096, "bf16"}, {8192, 1024, 4096, "bf16"}, {16, 4096, 4096, "bf16"}, {4096, 768, 3072, "fp16"}}
	for _, l := range lnl {
		add("layernorm_linear", l.dtype, codegen.Params{HasBias: true}, []int64{l.m, l.k}, []int64{l.n, l.k}, []int64{l.n})
	}
	for _, l := range []struct {
		m, k, n int64
		dtype   string
	}{{4096, 768, 3072, "fp16"}, {8192, 1024, 4096, "bf16"}, {16, 4096, 4096, "bf16"}} {
		add("linear_gelu", l.dtype, codegen.Params{HasBias: true}, []int64{l.m, l.k}, []int64{l.n, l.k}, []int64{l.n})
	}
	add("rmsnorm_pyops", "bf16", codegen.Params{Casting: "llama"}, []int64{8192, 4096})
	add("rmsnorm_pyops", "fp16", codegen.Params{Casting: "llama"}, []int64{32, 4096})
	add("dropout_add", "bf16", codegen.Params{HasBias: true, P: 0.1}, []int64{8192, 4096})
	add("add_layernorm", "bf16", codegen.Params{}, []int64{8192, 4096})
	add("add_layernorm", "fp16", codegen.Params{}, []int64{32, 1024})
	add("swiglu", "bf16", codegen.Params{}, []int64{8192, 11008})
	add("swiglu", "fp16", codegen.Params{}, []int64{32, 11008})
	return out
}
