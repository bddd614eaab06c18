package verify

import (
	"path/filepath"
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
	// GPT-2's causal attention, at a size the interpreter runs in seconds
	"attention": {Pattern: "attention", Dtype: "fp16", Shapes: [][]int64{{1, 2, 64, 64}, {1, 2, 64, 64}, {1, 2, 64, 64}},
		Params: codegen.Params{MaskKind: "causal", MaskFill: "min", Scale: 0.125}},
}

// genFolders writes one generated folder per pattern that codegen can generate into a temp
// dir and returns pattern -> folder.
func genFolders(t testing.TB) map[string]string {
	t.Helper()
	root := t.TempDir()
	out := make(map[string]string)
	for _, p := range codegen.Patterns() {
		s, ok := specs[p]
		if !ok {
			t.Errorf("pattern %s has a template but no spec in verify's tests: add one to specs", p)
			continue
		}
		dir := filepath.Join(root, p)
		if err := codegen.Write(dir, s, false); err != nil {
			t.Fatalf("codegen.Write(%s): %v", p, err)
		}
		out[p] = dir
	}
	for p := range specs {
		if _, ok := out[p]; !ok {
			t.Errorf("spec %s has no template: codegen.Patterns() lacks it", p)
		}
	}
	return out
}
