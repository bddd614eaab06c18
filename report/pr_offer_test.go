package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/bench"
	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/patterns"
)

// genFolder writes a generated folder with manifest m and a kernel.py of the given text.
func genFolder(t *testing.T, root, name string, m codegen.Manifest, kernel string) GenFolder {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kernel.py"), []byte(kernel), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := LoadGenFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func writePR(t *testing.T, in Inputs) (pr string, files []string) {
	t.Helper()
	var dirs []string
	for _, g := range in.Generated {
		dirs = append(dirs, g.Dir)
	}
	out := filepath.Join(t.TempDir(), "pr")
	if err := WritePR(out, in, dirs, false); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, PRFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b), listFiles(t, out)
}

// prSection is the text of PR.md's "## title" section.
func prSection(pr, title string) string {
	i := strings.Index(pr, "\n## "+title+"\n")
	if i < 0 {
		return ""
	}
	rest := pr[i+len(title)+5:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// The issue's "kernels the cost model predicts slower than the chain (estimated fused 68893
// µs vs 33040 µs now) are still in the PR folder under 'How to swap it in'": without a GPU,
// only kernels predicted faster are offered; the other is listed with its numbers.
func TestPRPredictedSlowerNotOffered(t *testing.T) {
	root := t.TempDir()
	slow := genFolder(t, root, "linear_gelu-fp32-16x256x2048x8192-aaaa0001", codegen.Manifest{
		Pattern: "linear_gelu", Dtype: "fp32", Shapes: [][]int64{{16, 256, 2048}, {8192, 2048}},
		EstFusedUs: 5741.1, Instances: 12, GPUTimeUs: 33040, Module: "fuseadvise_linear_gelu_aaaa0001",
	}, "# linear_gelu\n")
	fast := genFolder(t, root, "bias_gelu-bf16-8x512x3072-bbbb0002", codegen.Manifest{
		Pattern: "bias_gelu", Dtype: "bf16", Shapes: [][]int64{{8, 512, 3072}, {3072}},
		EstFusedUs: 19, EstSavingUs: 2000, Instances: 8, GPUTimeUs: 2226, Module: "fuseadvise_bias_gelu_bbbb0002",
	}, "# bias_gelu\n")
	pr, files := writePR(t, Inputs{Generated: []GenFolder{slow, fast}})
	offered, rest := prSection(pr, "Kernels to swap in"), prSection(pr, "Not worth it")
	if strings.Contains(offered, "linear_gelu") || !strings.Contains(offered, "bias_gelu-bf16") {
		t.Errorf("offered:\n%s", offered)
	}
	for _, want := range []string{"linear_gelu-fp32-16x256x2048x8192-aaaa0001", "predicted slower than the chain", "5741 µs per fused call", "2753 µs per call now", "12 instances, 33040 µs"} {
		if !strings.Contains(rest, want) {
			t.Errorf("'Not worth it' lacks %q:\n%s", want, rest)
		}
	}
	for _, f := range files {
		if strings.Contains(f, "linear_gelu") {
			t.Errorf("the slower kernel is in the PR folder: %s", f)
		}
	}
	if !strings.Contains(strings.Join(files, " "), "swap_in/fuseadvise_bias_gelu_bbbb0002.py") {
		t.Errorf("no swap-in module for the offered kernel: %v", files)
	}
}

// Measured: a kernel slower than eager (on the verdict's basis), or within its noise, is not
// offered; nor is one faster than eager but measurably slower than torch.compile or a library
// call: the PR names the faster option with the numbers. A kernel within noise of a faster
// library call is offered.
func TestPRMeasured(t *testing.T) {
	root := t.TempDir()
	mk := func(name, pattern string) GenFolder {
		return genFolder(t, root, name, codegen.Manifest{Pattern: pattern, Dtype: "bf16", Shapes: [][]int64{{4096, 768}, {768}},
			EstFusedUs: 1, EstSavingUs: 100, Instances: 4, GPUTimeUs: 400}, "# "+name+"\n")
	}
	gens := []GenFolder{mk("slower", "bias_gelu"), mk("compile_faster", "gelu_pyops"), mk("noise", "swiglu"),
		mk("library_faster", "rmsnorm_pyops"), mk("library_tie", "add_layernorm")}
	c := func(name string, fused, eager, compile float64) bench.Case {
		return bench.Case{Name: name, Pattern: "x", Dtype: "bf16", Shape: []int64{4096, 768}, Correct: true,
			FusedUs: fused, FusedP20: fused * 0.99, FusedP80: fused * 1.01, EagerUs: eager, EagerP20: eager * 0.99, EagerP80: eager * 1.01,
			CompileUs: compile, CompileP20: compile * 0.99, CompileP80: compile * 1.01}
	}
	noise := c("noise", 10, 10.3, 20)
	noise.FusedP20, noise.FusedP80 = 9, 11
	lib := func(name string, us float64) bench.Case {
		x := c(name, 10, 40, 12)
		x.Library = map[string]bench.LibraryCall{"rms_norm": {Us: us, P20: us * 0.99, P80: us * 1.01}}
		x.LibraryUs, x.LibraryOp = us, "rms_norm"
		return x
	}
	in := Inputs{Generated: gens, Bench: &bench.Result{GPU: "H200", Cases: []bench.Case{
		c("slower", 68893, 33040, 40000), c("compile_faster", 10, 20, 8.1), noise, lib("library_faster", 8.5), lib("library_tie", 9.95),
	}}}
	pr, _ := writePR(t, in)
	offered, rest := prSection(pr, "Kernels to swap in"), strings.ReplaceAll(prSection(pr, "Not worth it"), `\`, "")
	if !strings.Contains(offered, "library_tie") || strings.Contains(offered, "compile_faster") || strings.Contains(offered, "`slower`") ||
		strings.Contains(offered, "`noise`") || strings.Contains(offered, "library_faster") {
		t.Errorf("offered:\n%s", offered)
	}
	if !strings.Contains(strings.ReplaceAll(offered, `\`, ""), "use the fused kernel — 10.0 µs vs compile 12.0 µs, F.rms_norm 9.95 µs (noise)") {
		t.Errorf("the offered kernel's evidence does not name the library call it was measured against:\n%s", offered)
	}
	for _, want := range []string{"slower than the eager chain at bf16 [4096, 768]: fused 68893 µs, eager 33040 µs GPU time (0.48× vs eager)",
		"not measurably faster than the eager chain",
		"torch.compile is faster at bf16 [4096, 768]: use torch.compile — 8.10 µs vs fused 10.0 µs",
		"F.rms_norm is faster at bf16 [4096, 768]: use F.rms_norm — 8.50 µs vs fused 10.0 µs, compile 12.0 µs"} {
		if !strings.Contains(rest, want) {
			t.Errorf("'Not worth it' lacks %q:\n%s", want, rest)
		}
	}
	// the summary line counts them
	if !strings.Contains(pr, "1 kernel offered") || !strings.Contains(pr, "4 not worth it") ||
		!strings.Contains(pr, "not measurably slower than torch.compile or a library call") {
		t.Errorf("summary line:\n%s", pr)
	}
}

// The GPT-2 PR item showed another shape's instances and time: each item shows its
// own shape group (from its manifest, or the analysis group of exactly its shapes), never
// another group of the pattern, nor the pattern's totals, nor a benchmark at another shape.
func TestPREvidencePerShape(t *testing.T) {
	root := t.TempDir()
	rep := &patterns.Report{Opportunities: []patterns.Opportunity{{
		Pattern: "layernorm_linear", Instances: 18, GPUTimeUs: 1032.66,
		Shapes: []patterns.ShapeGroup{
			{Dims: [][]int64{{8, 512, 768}, {3072, 768}}, DType: "fp32", Instances: 8, GPUTimeUs: 438.65, Sources: []string{"mlp.py(10): forward"}},
			{Dims: [][]int64{{8, 512, 768}, {2304, 768}}, DType: "fp32", Instances: 6, GPUTimeUs: 381.54, Sources: []string{"attn.py(20): forward"}},
		},
	}}}
	// an old manifest (no instances): the analysis group of exactly its shapes
	g := genFolder(t, root, "ln_2304", codegen.Manifest{Pattern: "layernorm_linear", Dtype: "fp32",
		Shapes: [][]int64{{8, 512, 768}, {2304, 768}}, EstFusedUs: 40, EstSavingUs: 100}, "# k\n")
	// no group has its shapes: no evidence from another one
	lone := genFolder(t, root, "ln_1024", codegen.Manifest{Pattern: "layernorm_linear", Dtype: "fp32",
		Shapes: [][]int64{{8, 512, 768}, {1024, 768}}, EstFusedUs: 40, EstSavingUs: 50}, "# k\n")
	at := func(name string, shape []int64, fused float64) bench.Case {
		return bench.Case{Name: name, Pattern: "layernorm_linear", Dtype: "fp32", Shape: shape, Correct: true, FusedUs: fused, EagerUs: 2 * fused, CompileUs: 3 * fused}
	}
	in := Inputs{Analysis: rep, Generated: []GenFolder{g, lone}, Bench: &bench.Result{Cases: []bench.Case{
		at("ln_2304", []int64{8, 512, 768}, 40), at("ln_2304", []int64{8192, 4096}, 777), at("ln_1024", []int64{8, 512, 768}, 41),
	}}}
	pr, _ := writePR(t, in)
	item := pr[strings.Index(pr, "### 1."):strings.Index(pr, "### 2.")]
	for _, want := range []string{"6 forward instances, 382 µs GPU time now", "attn.py(20): forward"} {
		if !strings.Contains(item, want) {
			t.Errorf("item 1 lacks its shape's %q:\n%s", want, item)
		}
	}
	for _, other := range []string{"8 forward instances", "439", "mlp.py", "18", "1033", "777", "8192, 4096"} {
		if strings.Contains(item, other) {
			t.Errorf("item 1 shows %q, another shape's or the pattern's:\n%s", other, item)
		}
	}
	item2 := pr[strings.Index(pr, "### 2."):]
	item2 = item2[:strings.Index(item2, "\n## ")]
	if strings.Contains(item2, "instances") || strings.Contains(item2, "mlp.py") || strings.Contains(item2, "attn.py") {
		t.Errorf("item 2 shows another shape group's evidence:\n%s", item2)
	}
}

// Two kernels of one pattern copied beside one model do not collide: each has its own module
// file and its snippet imports that one; nothing imports "kernel". The GEMM snippets take a
// Conv1D (codegen's TestSwapInSnippet runs them).
func TestPRModulesDoNotCollide(t *testing.T) {
	root := t.TempDir()
	var gens []GenFolder
	for i, n := range []int64{3072, 2304} {
		name := []string{"a", "b"}[i]
		gens = append(gens, genFolder(t, root, "linear_gelu_"+name, codegen.Manifest{Pattern: "linear_gelu", Dtype: "bf16",
			Shapes: [][]int64{{8, 512, 768}, {n, 768}}, EstFusedUs: 1, Instances: 2, GPUTimeUs: 100,
			Module: "fuseadvise_linear_gelu_" + name}, "# kernel "+name+"\n"))
	}
	// a manifest's module name is data: one that is not an identifier is not used
	gens = append(gens, genFolder(t, root, "bias-gelu-c", codegen.Manifest{Pattern: "bias_gelu", Dtype: "bf16",
		Shapes: [][]int64{{8, 512, 768}, {768}}, EstFusedUs: 1, Instances: 2, GPUTimeUs: 100, Module: "../../evil"}, "# c\n"))
	pr, files := writePR(t, Inputs{Generated: gens})
	all := strings.Join(files, " ")
	for _, m := range []string{"fuseadvise_linear_gelu_a", "fuseadvise_linear_gelu_b", "fuseadvise_bias_gelu_c"} {
		if !strings.Contains(all, "swap_in/"+m+".py") || !strings.Contains(pr, "from "+m+" import ") {
			t.Errorf("module %s: not written or not imported (files %v)", m, files)
		}
	}
	if strings.Contains(pr, "from kernel import") || strings.Contains(pr, "evil") {
		t.Error("PR.md imports from \"kernel\" or uses a manifest's bad module name")
	}
	want := codegen.Usage("linear_gelu", "fuseadvise_linear_gelu_a")
	indented := regexp.MustCompile(`(?m)^(.)`).ReplaceAllString(want, "    $1")
	if !strings.Contains(pr, indented) || !strings.Contains(want, "as_linear(linear)") {
		t.Errorf("the linear_gelu snippet is not the registry's, taking a Conv1D:\n%s", pr)
	}
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(gens[0].Dir), "linear_gelu_b", "kernel.py"))
	if string(b) != "# kernel b\n" {
		t.Fatal("setup")
	}
}

// absoluteRE finds an absolute local path: /x/... or C:\ after a space, bracket, quote or
// backtick, or at a line's start.
var absoluteRE = regexp.MustCompile("(?m)(^|[\\s(\\[{\"'`=,;|])(/[A-Za-z0-9_.~-]|[A-Za-z]:\\\\)")

// PR.md names no absolute local path: the trace's, its Python frames', an error message's.
func TestPRNoAbsolutePaths(t *testing.T) {
	root := t.TempDir()
	frame := "/home/alice/.venv/lib/python3.11/site-packages/transformers/models/gpt2/modeling_gpt2.py(120): forward"
	g := genFolder(t, root, "bias_gelu-x", codegen.Manifest{Pattern: "bias_gelu", Dtype: "bf16", Shapes: [][]int64{{8, 512, 768}, {768}},
		Source:     codegen.ManifestSource{Trace: "/home/alice/runs/gpt2 train.json.gz", Site: "2 instance(s) of bias_gelu at " + frame + "; /srv/proj/model.py(7): f"},
		EstFusedUs: 1, Instances: 2, GPUTimeUs: 100}, "# k\n")
	bad := genFolder(t, root, "swiglu-y", codegen.Manifest{Pattern: "swiglu", Dtype: "bf16", Shapes: [][]int64{{8, 512, 768}, {8, 512, 768}},
		Source: codegen.ManifestSource{Trace: `C:\Users\alice\runs\llama.json`}, EstFusedUs: 1, Instances: 2, GPUTimeUs: 100}, "# k\n")
	rep := &patterns.Report{Trace: patterns.TraceSummary{Path: "/home/alice/runs/gpt2.json.gz", Device: "H200", GPUBusyUs: 1000},
		Opportunities: []patterns.Opportunity{{Pattern: "bias_gelu", Shapes: []patterns.ShapeGroup{
			{Dims: [][]int64{{8, 512, 768}, {768}}, DType: "bf16", Instances: 2, GPUTimeUs: 100, Sources: []string{frame}},
		}}}}
	in := Inputs{Analysis: rep, Generated: []GenFolder{g, bad}, Bench: &bench.Result{GPU: "H200", Cases: []bench.Case{
		{Name: "swiglu-y", Pattern: "swiglu", Dtype: "bf16", Shape: []int64{8, 512, 768}, Error: `/tmp/fa-123/swiglu-y/kernel.py:12: out of memory, see C:\Users\alice\fa\log.txt`},
	}}}
	if err := os.WriteFile(filepath.Join(g.Dir, "README.md"), []byte("## Source\n\n    {\"trace\":\"/home/alice/runs/gpt2 train.json.gz\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "pr")
	if err := WritePR(out, in, []string{g.Dir, bad.Dir}, false); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(out, PRFile))
	pr := string(b)
	if m := absoluteRE.FindAllString(pr, -1); len(m) > 0 {
		t.Errorf("PR.md names absolute paths %q:\n%s", m, pr)
	}
	// nor do the kernel folders' README and manifest, which hold the trace's path as given
	checked := 0
	for _, f := range []string{"bias_gelu-x/README.md", "bias_gelu-x/manifest.json", "swiglu-y/manifest.json"} {
		b, err := os.ReadFile(filepath.Join(out, KernelsDir, f))
		if err != nil {
			continue // a kernel not offered is not copied
		}
		checked++
		if m := absoluteRE.FindAllString(string(b), -1); len(m) > 0 {
			t.Errorf("%s names absolute paths %q:\n%s", f, m, b)
		}
		if !strings.Contains(string(b), "json") {
			t.Errorf("%s lost the trace's name:\n%s", f, b)
		}
	}
	if checked < 2 {
		t.Errorf("%d of the kernel folders' files copied: want bias_gelu-x's README and manifest at least", checked)
	}
	for _, want := range []string{"transformers/models/gpt2/modeling_gpt2.py(120): forward", "model.py(7)", "gpt2.json.gz", "kernel.py:12: out of memory", "log.txt"} {
		if !strings.Contains(pr, want) {
			t.Errorf("PR.md lost %q:\n%s", want, pr)
		}
	}
	for in, want := range map[string]string{
		"see /a/b/c.py(3): f":                    "see c.py(3): f",
		"`/x/site-packages/torch/a.py`":          "`torch/a.py`",
		`at C:\Users\u\m.py, line 2`:             "at m.py, line 2",
		"relative/path.py and https://x.org/a/b": "relative/path.py and https://x.org/a/b",
		"fused 10 µs / call":                     "fused 10 µs / call",
	} {
		if got := scrubPaths(in); got != want {
			t.Errorf("scrubPaths(%q) = %q, want %q", in, got, want)
		}
	}
}

// Training modes: the full (forward + backward) case must be faster too; a backward case
// alone is shown, not judged.
func TestPRTrainingModes(t *testing.T) {
	root := t.TempDir()
	mk := func(name string) GenFolder {
		return genFolder(t, root, name, codegen.Manifest{Pattern: "swiglu", Dtype: "bf16", Shapes: [][]int64{{4096, 768}, {4096, 768}},
			EstFusedUs: 1, Instances: 4, GPUTimeUs: 400}, "# "+name+"\n")
	}
	c := func(name, mode string, fused, eager float64) bench.Case {
		return bench.Case{Name: name, Mode: mode, Pattern: "swiglu", Dtype: "bf16", Shape: []int64{4096, 768}, Correct: true, FusedUs: fused, EagerUs: eager}
	}
	in := Inputs{Generated: []GenFolder{mk("good"), mk("full_slower")}, Bench: &bench.Result{Cases: []bench.Case{
		c("good", "forward", 10, 20), c("good", "backward", 30, 25), c("good", "full", 40, 45),
		c("full_slower", "forward", 10, 20), c("full_slower", "full", 50, 45),
	}}}
	pr, _ := writePR(t, in)
	offered, rest := prSection(pr, "Kernels to swap in"), strings.ReplaceAll(prSection(pr, "Not worth it"), `\`, "")
	if !strings.Contains(offered, "`good`") || strings.Contains(offered, "full_slower") {
		t.Errorf("offered:\n%s", offered)
	}
	if !strings.Contains(rest, "slower than the eager chain at bf16 [4096, 768] full: fused 50.0 µs, eager 45.0 µs") {
		t.Errorf("'Not worth it':\n%s", rest)
	}
}

// Without a GPU, on a training trace: a kernel whose forward is predicted a little slower than
// the chain's is offered when its fused backward's estimated saving (the manifest's
// est_backward_saving_us) more than makes up for it, and not when it does not (the reason
// names both); a shape whose only saving is the backward's is offered.
func TestPRBackwardSavingCounts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		m       codegen.Manifest
		offered bool
		why     string
	}{
		{"forward 1 µs slower a call, backward saves 40", codegen.Manifest{EstFusedUs: 11, Instances: 16, GPUTimeUs: 160, EstBackwardSavingUs: 40}, true, ""},
		{"forward 1 µs slower a call, backward saves 10", codegen.Manifest{EstFusedUs: 11, Instances: 16, GPUTimeUs: 160, EstBackwardSavingUs: 10},
			false, "the backward's estimated saving, 10.0 µs, does not make it up"},
		{"no forward evidence, only the backward's saving", codegen.Manifest{EstBackwardSavingUs: 25}, true, ""},
		{"no saving either way", codegen.Manifest{}, false, "no saving predicted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			m.Pattern, m.Dtype, m.Shapes, m.Module = "add_layernorm", "bf16", [][]int64{{16, 256, 768}}, "fuseadvise_add_layernorm_cccc0003"
			g := genFolder(t, t.TempDir(), "add_layernorm-bf16-16x256x768-cccc0003", m, "# add_layernorm\n")
			ok, why := decide(&prItem{g: g}, nil)
			if ok != tc.offered || !strings.Contains(why, tc.why) {
				t.Errorf("offered %v (%q), want %v (%q)", ok, why, tc.offered, tc.why)
			}
		})
	}
}

// A generic chain's PR item points to its folder's README, which says what each input and
// output is (a 16-bit copy for a GEMM, a number, a keep mask); a catalog item does not.
func TestPRGenericNamesItsReadme(t *testing.T) {
	root := t.TempDir()
	gens := []GenFolder{
		genFolder(t, root, "generic-mul_add_cast-fp32-4x16x32-aaaa0000", codegen.Manifest{Pattern: "generic", Dtype: "fp32",
			Shapes: [][]int64{{4, 16, 32}}, EstFusedUs: 1, Instances: 2, GPUTimeUs: 100, Module: "fuseadvise_generic_aaaa0000"}, "# g\n"),
		genFolder(t, root, "bias_gelu-b", codegen.Manifest{Pattern: "bias_gelu", Dtype: "bf16",
			Shapes: [][]int64{{8, 512, 768}, {768}}, EstFusedUs: 1, Instances: 2, GPUTimeUs: 100, Module: "fuseadvise_bias_gelu_b"}, "# b\n"),
	}
	pr, _ := writePR(t, Inputs{Generated: gens})
	if n := strings.Count(pr, "/README.md`."); n != 1 || !strings.Contains(pr, "kernels/generic-mul_add_cast-fp32-4x16x32-aaaa0000/README.md") {
		t.Errorf("PR.md names %d folders' README, want the generic one's:\n%s", n, pr)
	}
}
