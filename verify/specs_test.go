package verify

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/codegen"
)

// specs holds one representative traced case per pattern (shapes from real models: GPT-2,
// BERT, Llama); genFolders writes those whose template exists.
var specs = map[string]codegen.Spec{
	"bias_gelu":        {Pattern: "bias_gelu", Dtype: "bf16", Shapes: [][]int64{{8, 512, 3072}, {3072}}, Params: codegen.Params{Approximate: "none", HasBias: true}},
	"gelu_pyops":       {Pattern: "gelu_pyops", Dtype: "fp16", Shapes: [][]int64{{4, 128, 3072}, {3072}}, Params: codegen.Params{HasBias: true}},
	"linear_gelu":      {Pattern: "linear_gelu", Dtype: "bf16", Shapes: [][]int64{{8, 128, 768}, {3072, 768}, {3072}}, Params: codegen.Params{HasBias: true}},
	"mask_softmax":     {Pattern: "mask_softmax", Dtype: "fp16", Shapes: [][]int64{{2, 12, 128, 128}, {2, 1, 1, 128}}, Params: codegen.Params{MaskKind: "bool", Scale: 0.125, OutDtype: "fp32"}},
	"layernorm_linear": {Pattern: "layernorm_linear", Dtype: "bf16", Shapes: [][]int64{{8, 128, 768}, {768, 768}, {768}}, Params: codegen.Params{HasBias: true}},
	"add_layernorm":    {Pattern: "add_layernorm", Dtype: "fp32", Shapes: [][]int64{{8, 128, 768}}},
	"dropout_add":      {Pattern: "dropout_add", Dtype: "bf16", Shapes: [][]int64{{8, 128, 768}}, Params: codegen.Params{HasBias: true, P: 0.1}},
	"rmsnorm_pyops":    {Pattern: "rmsnorm_pyops", Dtype: "bf16", Shapes: [][]int64{{2, 64, 4096}}},
	"swiglu":           {Pattern: "swiglu", Dtype: "bf16", Shapes: [][]int64{{4, 128, 11008}}},
	// GPT-2's loss: bf16 logits the model upcasts (logits.float()), the mean over the labels
	"cross_entropy": {Pattern: "cross_entropy", Dtype: "bf16", Shapes: [][]int64{{4096, 50257}, {4096}}, Params: codegen.Params{Upcast: "float"}},
	// GPT-2's causal attention, at a size the interpreter runs in seconds
	"attention": {Pattern: "attention", Dtype: "fp16", Shapes: [][]int64{{1, 2, 64, 64}, {1, 2, 64, 64}, {1, 2, 64, 64}},
		Params: codegen.Params{MaskKind: "causal", MaskFill: "min", Scale: 0.125}},
}

// variants are further specs of a pattern, keyed "pattern+variant": the paths its
// representative spec does not take, each a folder of its own (the adapter's cases follow
// the folder's parameters). genFolders writes them beside the pattern's folder; TestMutations
// counts a mutant of the pattern killed when a case of any of its folders kills it.
var variants = map[string]codegen.Spec{
	// BERT: an fp32 additive padding mask [B, 1, 1, Sk] on bf16 scores, dropout in training
	"attention+additive": {Pattern: "attention", Dtype: "bf16", Shapes: [][]int64{{2, 2, 48, 64}, {2, 2, 48, 64}, {2, 2, 48, 64}, {2, 1, 1, 48}},
		Params: codegen.Params{MaskKind: "additive", MaskDtype: "fp32", Scale: 0.125, P: 0.1}},
	// T5 in fp32: a learned relative-position bias [1, H, Sq, Sk] that trains (its gradient
	// checked), no scaling, and a bool padding mask filled with finfo.min
	"attention+bias": {Pattern: "attention", Dtype: "fp32", Shapes: [][]int64{{2, 2, 40, 64}, {2, 2, 40, 64}, {2, 2, 40, 64}, {2, 1, 1, 40}, {1, 2, 40, 40}},
		Params: codegen.Params{MaskKind: "bool", MaskFill: "min", Scale: 1, BiasKind: "additive"}},
	// ConvNeXt's LayerNorm2d (timm) under autocast: channels-first [B, C, H, W], C normalized,
	// fp32; its backward reads dy in batches of positions (the kernels' *_BATCHED paths)
	"add_layernorm+cf": {Pattern: "add_layernorm", Dtype: "fp32", Shapes: [][]int64{{2, 96, 7, 7}}, Params: codegen.Params{NormDim: "1"}},
	// ConvNeXt's stem: the convolution's bias [1, 96, 1, 1] as the residual of its LayerNorm2d
	// (a vector read with zero strides; its gradient summed in the one-pass backward)
	"add_layernorm+stem": {Pattern: "add_layernorm", Dtype: "fp32", Shapes: [][]int64{{2, 96, 7, 7}, {1, 96, 1, 1}},
		Params: codegen.Params{NormDim: "1", ConvBias: true}},
	// the loss a row (a per-token loss weighted by the caller), fp32 logits, ignore_index 0
	// (a padding token id): the backward reads a gradient a row
	"cross_entropy+none": {Pattern: "cross_entropy", Dtype: "fp32", Shapes: [][]int64{{512, 1000}, {512}},
		Params: codegen.Params{Reduction: "none", IgnoreIndex: "0", Upcast: "none"}},
	// BERT's masked-LM loss under autocast, summed, with label smoothing
	"cross_entropy+sum": {Pattern: "cross_entropy", Dtype: "bf16", Shapes: [][]int64{{4096, 30522}, {4096}},
		Params: codegen.Params{Reduction: "sum", Upcast: "autocast", LabelSmoothing: 0.1}},
	// BLOOM / MPT: ALiBi slopes [H] under a causal mask with a -inf fill
	"attention+alibi": {Pattern: "attention", Dtype: "fp16", Shapes: [][]int64{{1, 2, 40, 64}, {1, 2, 40, 64}, {1, 2, 40, 64}, {2}},
		Params: codegen.Params{MaskKind: "causal", MaskFill: "-inf", Scale: 0.125, BiasKind: "alibi"}},
}

// folderPattern is the pattern of a genFolders key ("attention+bias" -> "attention").
func folderPattern(key string) string {
	p, _, _ := strings.Cut(key, "+")
	return p
}

// genFolders writes one generated folder per pattern that codegen can generate, and one per
// variant, into a temp dir and returns key -> folder (the key: the pattern, or the variant's).
func genFolders(t testing.TB) map[string]string {
	t.Helper()
	root := t.TempDir()
	out := make(map[string]string)
	write := func(key string, s codegen.Spec) {
		dir := filepath.Join(root, key)
		if err := codegen.Write(dir, s, false); err != nil {
			t.Fatalf("codegen.Write(%s): %v", key, err)
		}
		out[key] = dir
	}
	for _, p := range codegen.Patterns() {
		s, ok := specs[p]
		if !ok {
			t.Errorf("pattern %s has a template but no spec in verify's tests: add one to specs", p)
			continue
		}
		write(p, s)
	}
	for p := range specs {
		if _, ok := out[p]; !ok {
			t.Errorf("spec %s has no template: codegen.Patterns() lacks it", p)
		}
	}
	for key, s := range variants {
		if _, ok := out[folderPattern(key)]; !ok || s.Pattern != folderPattern(key) {
			t.Errorf("variant %s: its pattern %s has no folder", key, s.Pattern)
			continue
		}
		write(key, s)
	}
	return out
}
