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
	// HF's causal-LM loss: bf16 logits upcast by the model, Llama-3's and GPT-2's vocabularies;
	// autocast's loss of bf16 logits (BERT's masked-LM head)
	add("cross_entropy", "bf16", codegen.Params{Upcast: "float"}, []int64{8192, 128256}, []int64{8192})
	add("cross_entropy", "bf16", codegen.Params{Upcast: "float"}, []int64{8192, 50257}, []int64{8192})
	add("cross_entropy", "bf16", codegen.Params{Upcast: "autocast"}, []int64{4096, 30522}, []int64{4096})
	attention(add)
	return out
}

// attention adds the attention cases: the shapes of the traces' eager attention (BERT's
// padding mask, GPT-2's and Llama's causal masks, training with dropout and inference), then
// the chains the issue targets: causal at S = 512..2048 (the tril buffer's chain, which
// Inductor leaves unfused), dropout in training without a mask, a learned relative-position
// bias, ALiBi, ragged lengths (127 queries over 129 keys, bottom-right causal; 129 with a
// padding mask), decode (one query over a KV cache), head dims 96 and 128, a causal mask
// with a padding mask as the bias, and fp32.
func attention(add func(pattern, dtype string, p codegen.Params, shapes ...[]int64)) {
	qkv := func(b, h, sq, sk, d int64) [][]int64 {
		return [][]int64{{b, h, sq, d}, {b, h, sk, d}, {b, h, sk, d}}
	}
	causal := func(p float64) codegen.Params {
		return codegen.Params{MaskKind: "causal", MaskFill: "min", Scale: 0.125, P: p}
	}
	// the traces
	add("attention", "bf16", codegen.Params{MaskKind: "additive", Scale: 0.125, P: 0.1, MaskDtype: "fp32"},
		append(qkv(16, 12, 256, 256, 64), []int64{16, 1, 256, 256})...) // BERT
	add("attention", "bf16", causal(0.1), qkv(8, 12, 512, 512, 64)...) // GPT-2 training
	add("attention", "fp16", causal(0), qkv(1, 12, 128, 128, 64)...)   // GPT-2 inference
	add("attention", "bf16", causal(0), qkv(4, 16, 512, 512, 64)...)   // Llama training
	add("attention", "fp16", causal(0), qkv(2, 16, 256, 256, 64)...)   // Llama inference
	// the targets
	for _, s := range []struct{ b, h, s int64 }{{8, 12, 512}, {4, 16, 1024}, {2, 16, 2048}} {
		add("attention", "bf16", causal(0), qkv(s.b, s.h, s.s, s.s, 64)...)
	}
	add("attention", "bf16", codegen.Params{Scale: 0.125, P: 0.1}, qkv(4, 16, 1024, 1024, 64)...)
	add("attention", "bf16", codegen.Params{Scale: 0.125, BiasKind: "additive"},
		append(qkv(8, 12, 512, 512, 64), []int64{1, 12, 512, 512})...) // T5/Swin-style relative-position bias
	add("attention", "bf16", codegen.Params{MaskKind: "causal", MaskFill: "min", Scale: 0.125, BiasKind: "alibi"},
		append(qkv(4, 16, 1024, 1024, 64), []int64{16})...) // BLOOM/MPT-style ALiBi
	add("attention", "fp16", causal(0), qkv(4, 12, 127, 129, 64)...)
	add("attention", "fp16", codegen.Params{MaskKind: "bool", MaskFill: "min", Scale: 0.125},
		append(qkv(4, 12, 129, 129, 64), []int64{4, 1, 1, 129})...)
	add("attention", "fp16", causal(0), qkv(8, 32, 1, 1024, 128)...) // decode
	add("attention", "bf16", codegen.Params{MaskKind: "causal", MaskFill: "min", Scale: 0.10206207261596575},
		qkv(4, 32, 512, 512, 96)...)
	// two masks (older GPT-2, CLIP/OWLv2 text): the causal mask, then a padding mask
	// [B, 1, 1, Sk] added, which the case takes as a bias broadcast over the queries
	add("attention", "bf16", codegen.Params{MaskKind: "causal", MaskFill: "min", Scale: 0.125, BiasKind: "additive"},
		append(qkv(8, 12, 512, 512, 64), []int64{8, 1, 1, 512})...)
	// fp32 without autocast (tf32x3 dots): BERT's padding mask
	add("attention", "fp32", codegen.Params{MaskKind: "additive", Scale: 0.125},
		append(qkv(8, 12, 512, 512, 64), []int64{8, 1, 1, 512})...)
}
