package codegen

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedFolderPasses writes folders and runs their own tests in Triton's interpreter,
// when the pinned Python (internal/pyenv) is at hand (skipped otherwise, and with -short).
func TestGeneratedFolderPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	py := findPython(t)
	if out, err := exec.Command(py, "-c", "import torch, triton, pytest").CombinedOutput(); err != nil {
		t.Fatalf("%s lacks torch, triton or pytest: %v\n%s", py, err, out)
	}
	root := t.TempDir()
	specs := map[string]Spec{
		"bias_gelu": {Pattern: "bias_gelu", Dtype: "bf16", Shapes: [][]int64{{8, 512, 3072}, {3072}},
			Params: Params{Approximate: "tanh", HasBias: true}},
		"mask_softmax": {Pattern: "mask_softmax", Dtype: "fp16", Shapes: [][]int64{{4, 12, 128, 128}, {4, 1, 1, 128}},
			Params: Params{MaskKind: "bool", Scale: 0.125}},
	}
	var dirs []string
	for name, s := range specs {
		d := filepath.Join(root, name)
		if err := Write(d, s, false); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	cmd := exec.Command(py, append([]string{"-m", "pytest", "-q", "--import-mode=importlib", "-p", "no:cacheprovider"}, dirs...)...)
	cmd.Env = append(os.Environ(), "TRITON_INTERPRET=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), " passed") || strings.Contains(string(out), "failed") {
		t.Fatalf("pytest on generated folders: %v\n%s", err, out)
	}
}

// TestSwapInSnippet runs the README's swap-in code of the GEMM patterns, whose snippets take
// the module the traced model ran: an nn.Linear or Hugging Face's Conv1D (GPT-2; weight
// [in, out], no in_features), with each kernel copied beside the others under its own module
// name (testdata/swap_in_check.py). Skipped with -short or without the pinned Python.
func TestSwapInSnippet(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	py := findPython(t)
	root := t.TempDir()
	var dirs []string
	for name, s := range map[string]Spec{
		"linear_gelu":      {Pattern: "linear_gelu", Dtype: "fp32", Shapes: [][]int64{{2, 5, 16}, {24, 16}, {24}}, Params: Params{HasBias: true}},
		"layernorm_linear": {Pattern: "layernorm_linear", Dtype: "fp32", Shapes: [][]int64{{2, 5, 16}, {24, 16}, {24}}, Params: Params{HasBias: true}},
		"linear_gelu_tanh": {Pattern: "linear_gelu", Dtype: "fp32", Shapes: [][]int64{{2, 5, 16}, {24, 16}, {24}}, Params: Params{HasBias: true, Approximate: "tanh"}},
	} {
		d := filepath.Join(root, name)
		if err := Write(d, s, false); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	check, err := filepath.Abs(filepath.Join("testdata", "swap_in_check.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, append([]string{check}, dirs...)...)
	cmd.Env = append(os.Environ(), "TRITON_INTERPRET=1")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Count("\n"+string(out), "\nok ") != 6 {
		t.Fatalf("swap-in snippets: %v\n%s", err, out)
	}
}
