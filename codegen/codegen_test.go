package codegen

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/pyenv"
	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/templates"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// goldenSpecs are rendered and compared byte for byte with testdata/golden/<name>/.
var goldenSpecs = map[string]Spec{
	"bias_gelu_bf16": {
		Pattern: "bias_gelu", Dtype: "bf16", Shapes: [][]int64{{8, 512, 3072}, {3072}},
		Params:      Params{Approximate: "tanh", HasBias: true},
		Source:      Source{Trace: "traces/h200/gpt2_train_bf16.json", Site: "aten::add -> aten::gelu @ model.py:42"},
		EstSavingUs: 123.4, Instances: 12, GPUTimeUs: 345.6,
	},
	"mask_softmax_causal_fp16": {
		Pattern: "mask_softmax", Dtype: "fp16", Shapes: [][]int64{{8, 12, 129, 129}},
		Params:      Params{MaskKind: "causal", Scale: 0.125, MaskFill: "-10000"},
		Source:      Source{Trace: "bert.json", Site: "aten::mul -> aten::masked_fill -> aten::softmax"},
		EstSavingUs: 15,
	},
	"rmsnorm_pyops_bf16": {
		Pattern: "rmsnorm_pyops", Dtype: "bf16", Shapes: [][]int64{{2, 2048, 4096}, {4096}},
		Source: Source{Trace: "llama.json", Site: "LlamaRMSNorm"},
	},
	"layernorm_linear_fp32": {
		Pattern: "layernorm_linear", Dtype: "fp32", Shapes: [][]int64{{8, 512, 768}, {2304, 768}, {2304}},
		Params: Params{HasBias: true, Eps: 1e-12},
	},
}

func TestGolden(t *testing.T) {
	for name, spec := range goldenSpecs {
		t.Run(name, func(t *testing.T) {
			files, err := Render(spec)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join("testdata", "golden", name)
			if *update {
				os.RemoveAll(dir)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for n, b := range files {
					// the copied templates are compared with the embedded ones below; keep only
					// the generated files as golden text
					if isCopied(n) {
						continue
					}
					if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatalf("%v (run go test ./codegen -update)", err)
			}
			seen := 0
			for _, e := range ents {
				want, err := os.ReadFile(filepath.Join(dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				got, ok := files[e.Name()]
				if !ok {
					t.Errorf("%s: not generated", e.Name())
					continue
				}
				seen++
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from %s (run go test ./codegen -update)\ngot:\n%s", e.Name(), dir, got)
				}
			}
			if seen != len(files)-len(copied) {
				t.Errorf("golden has %d generated files, rendered %d", seen, len(files)-len(copied))
			}
		})
	}
}

func isCopied(name string) bool {
	for _, c := range copied {
		if c.name == name {
			return true
		}
	}
	return false
}

func TestCopiedFilesAreTemplates(t *testing.T) {
	for _, p := range Patterns() {
		files, err := Render(minimalSpec(p))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, c := range copied {
			from := c.from
			if strings.Contains(from, "%s") {
				from = strings.ReplaceAll(from, "%s", p)
			}
			want, err := templates.Read(from)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(files[c.name], want) {
				t.Errorf("%s/%s is not a verbatim copy of %s", p, c.name, from)
			}
		}
	}
}

// minimalSpec is a valid spec for pattern p.
func minimalSpec(p string) Spec {
	s := Spec{Pattern: p, Dtype: "fp16", Shapes: [][]int64{{4, 33, 96}}}
	switch p {
	case "linear_gelu", "layernorm_linear":
		s.Shapes = [][]int64{{4, 33, 96}, {80, 96}, {80}}
		s.Params.HasBias = true
	case "mask_softmax":
		s.Shapes = [][]int64{{2, 4, 33, 33}, {2, 1, 1, 33}}
		s.Params = Params{MaskKind: "bool", Scale: 0.125, P: 0.1}
	case "rmsnorm_pyops":
		s.Params.Casting = "fp32"
	case "dropout_add":
		s.Params = Params{P: 0.1, HasBias: true}
	case "attention":
		s.Shapes = [][]int64{{2, 4, 33, 64}, {2, 4, 40, 64}, {2, 4, 40, 64}, {2, 1, 1, 40}}
		s.Params = Params{MaskKind: "bool", Scale: 0.125, P: 0.1}
	case "cross_entropy":
		s.Shapes = [][]int64{{132, 96}, {132}}
		s.Params = Params{Reduction: "sum", IgnoreIndex: "0", Upcast: "autocast"}
	}
	return s
}

func TestDeterministicAndAtomic(t *testing.T) {
	root := t.TempDir()
	for _, p := range Patterns() {
		spec := minimalSpec(p)
		a, b := filepath.Join(root, p+"_a"), filepath.Join(root, p+"_b")
		if err := Write(a, spec, false); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if err := Write(b, spec, false); err != nil {
			t.Fatal(err)
		}
		fa, fb := readDir(t, a), readDir(t, b)
		if len(fa) == 0 || len(fa) != len(fb) {
			t.Fatalf("%s: %d vs %d files", p, len(fa), len(fb))
		}
		for n := range fa {
			if !bytes.Equal(fa[n], fb[n]) {
				t.Errorf("%s: %s differs between two writes", p, n)
			}
		}
		// refuses to overwrite without force, replaces with force
		if err := Write(a, spec, false); err == nil || !strings.Contains(err.Error(), "exists") {
			t.Errorf("%s: second Write without force: err = %v", p, err)
		}
		spec.EstSavingUs = 9
		if err := Write(a, spec, true); err != nil {
			t.Fatalf("%s: force: %v", p, err)
		}
		if m := readDir(t, a)["manifest.json"]; !bytes.Contains(m, []byte(`"est_saving_us": 9`)) {
			t.Errorf("%s: force did not replace the folder:\n%s", p, m)
		}
	}
	// no temporary folders left behind
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func TestValidate(t *testing.T) {
	ok := minimalSpec("bias_gelu")
	tests := []struct {
		name string
		mod  func(*Spec)
		want string // substring of the error; "" = valid
	}{
		{"ok", func(s *Spec) {}, ""},
		{"unknown pattern", func(s *Spec) { s.Pattern = "conv_relu" }, "unknown pattern"},
		{"unknown dtype", func(s *Spec) { s.Dtype = "fp8" }, "unknown dtype"},
		{"no shapes", func(s *Spec) { s.Shapes = nil }, "no shapes"},
		{"zero dim", func(s *Spec) { s.Shapes = [][]int64{{4, 0}} }, "out of range"},
		{"negative dim", func(s *Spec) { s.Shapes = [][]int64{{-4, 8}} }, "out of range"},
		{"rank 0", func(s *Spec) { s.Shapes = [][]int64{{}} }, "rank"},
		{"rank 9", func(s *Spec) { s.Shapes = [][]int64{{1, 1, 1, 1, 1, 1, 1, 1, 1}} }, "rank"},
		{"too big", func(s *Spec) { s.Shapes = [][]int64{{1 << 30, 1 << 30, 4}} }, "elements"},
		{"bad approximate", func(s *Spec) { s.Params.Approximate = "fast" }, "approximate"},
		{"unused param", func(s *Spec) { s.Params.Eps = 1e-5 }, "not used"},
		{"nan saving", func(s *Spec) { s.EstSavingUs = nan() }, "finite"},
		{"nan gpu time", func(s *Spec) { s.GPUTimeUs = nan() }, "gpu_time_us"},
		{"negative instances", func(s *Spec) { s.Instances = -1 }, "instances"},
		{"softmax bad mask", func(s *Spec) {
			*s = minimalSpec("mask_softmax")
			s.Params.MaskKind = "sliding"
		}, "mask_kind"},
		{"softmax mask not broadcastable", func(s *Spec) {
			*s = minimalSpec("mask_softmax")
			s.Shapes[1] = []int64{2, 1, 1, 32}
		}, "broadcast"},
		{"softmax mask missing", func(s *Spec) {
			*s = minimalSpec("mask_softmax")
			s.Shapes = s.Shapes[:1]
		}, "needs the mask"},
		{"softmax fill text", func(s *Spec) {
			*s = minimalSpec("mask_softmax")
			s.Params.MaskFill = "1e5; x"
		}, "mask_fill"},
		{"softmax fill number", func(s *Spec) {
			*s = minimalSpec("mask_softmax")
			s.Params.MaskFill = "-10000"
		}, ""},
		{"softmax p=1", func(s *Spec) {
			*s = minimalSpec("mask_softmax")
			s.Params.P = 1
		}, "p="},
		{"softmax scale inf", func(s *Spec) {
			*s = minimalSpec("mask_softmax")
			s.Params.Scale = inf()
		}, "scale"},
		{"gemm K mismatch", func(s *Spec) {
			*s = minimalSpec("linear_gelu")
			s.Shapes[1] = []int64{80, 95}
		}, "does not match"},
		{"gemm no weight", func(s *Spec) {
			*s = minimalSpec("linear_gelu")
			s.Shapes = s.Shapes[:1]
		}, "weight"},
		{"residual dtype unused", func(s *Spec) { s.Params.ResidualDtype = "fp32" }, "not used"},
		{"residual dtype code", func(s *Spec) {
			*s = minimalSpec("dropout_add")
			s.Params.ResidualDtype = "fp32\"); import os; (\""
		}, "residual_dtype"},
		{"residual dtype fp32", func(s *Spec) {
			*s = minimalSpec("add_layernorm")
			s.Params.ResidualDtype = "fp32"
		}, ""},
		{"out dtype unused", func(s *Spec) {
			*s = minimalSpec("swiglu")
			s.Params.OutDtype = "fp32"
		}, "not used"},
		{"out dtype code", func(s *Spec) {
			*s = minimalSpec("gelu_pyops")
			s.Params.OutDtype = "torch.float32) or (1"
		}, "out_dtype"},
		{"mask dtype unused", func(s *Spec) {
			*s = minimalSpec("gelu_pyops")
			s.Params.MaskDtype = "fp32"
		}, "not used"},
		{"mask dtype without additive mask", func(s *Spec) {
			*s = minimalSpec("mask_softmax")
			s.Params.MaskDtype = "fp32"
		}, "additive"},
		{"add_layernorm residual broadcast along the batch", func(s *Spec) {
			*s = minimalSpec("add_layernorm")
			s.Shapes = [][]int64{{4, 8, 16}, {1, 8, 16}}
		}, ""},
		{"add_layernorm residual broadcast in the middle", func(s *Spec) {
			*s = minimalSpec("add_layernorm")
			s.Shapes = [][]int64{{4, 8, 16}, {4, 1, 16}}
		}, "leading dims"},
		{"rms eps negative", func(s *Spec) {
			*s = minimalSpec("rmsnorm_pyops")
			s.Params.Eps = -1
		}, "eps"},
		{"rms casting", func(s *Spec) {
			*s = minimalSpec("rmsnorm_pyops")
			s.Params.Casting = "gemma"
		}, "casting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			s.Shapes = append([][]int64(nil), ok.Shapes...)
			tt.mod(&s)
			err := Validate(s)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("no error, want one containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	files, err := Render(Spec{Pattern: "bias_gelu", Dtype: "fp32", Shapes: [][]int64{{7, 9}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "PARAMS = {\n    \"approximate\": \"none\",\n    \"has_bias\": False,\n}\n"
	if c := string(files["case.py"]); !strings.HasSuffix(c, want) {
		t.Errorf("case.py:\n%s\nwant suffix:\n%s", c, want)
	}
}

// crafted strings that would be code if pasted into Python
var evil = []string{
	`"); import os; os.system("x`,
	"'''\nimport os\nos.system('x')\n'''",
	"__import__('os').system('x')",
	"tanh\nimport os",
	"1e-5); os.system(1",
}

func TestInjection(t *testing.T) {
	root := t.TempDir()
	for i, e := range evil {
		// in enum / numeric-text fields: rejected
		for _, mod := range []func(*Spec){
			func(s *Spec) { s.Pattern = e },
			func(s *Spec) { s.Dtype = e },
			func(s *Spec) { s.Params.Approximate = e },
			func(s *Spec) { *s = minimalSpec("mask_softmax"); s.Params.MaskKind = e },
			func(s *Spec) { *s = minimalSpec("mask_softmax"); s.Params.MaskFill = e },
			func(s *Spec) { *s = minimalSpec("rmsnorm_pyops"); s.Params.Casting = e },
		} {
			s := minimalSpec("bias_gelu")
			mod(&s)
			if !templates.Has(s.Pattern) && s.Pattern != e {
				continue
			}
			if err := Validate(s); err == nil {
				t.Errorf("evil %d accepted in an enum field: %+v", i, s)
			}
		}
		// in Source: accepted, but only as data in manifest.json and README.md
		s := minimalSpec("bias_gelu")
		s.Source = Source{Trace: e, Site: "site " + e}
		dir := filepath.Join(root, "evil", string(rune('a'+i)))
		if err := Write(dir, s, false); err != nil {
			t.Fatal(err)
		}
		files := readDir(t, dir)
		for n, b := range files {
			if strings.HasSuffix(n, ".py") && (bytes.Contains(b, []byte(e)) || bytes.Contains(b, []byte("os.system"))) {
				t.Errorf("evil %d appears in %s", i, n)
			}
		}
		var m struct{ Source ManifestSource }
		if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
			t.Fatal(err)
		}
		if m.Source.Trace != e || m.Source.Site != "site "+e {
			t.Errorf("evil %d: manifest source = %+v", i, m.Source)
		}
		// README: JSON-escaped on one indented line
		for _, l := range strings.Split(string(files["README.md"]), "\n") {
			if strings.Contains(l, "import os") && !strings.HasPrefix(l, "    {\"trace\":") {
				t.Errorf("evil %d: README line outside the escaped block: %q", i, l)
			}
		}
	}
}

// TestPythonParses byte-compiles every generated .py with the project's Python.
func TestPythonParses(t *testing.T) {
	py := findPython(t)
	root := t.TempDir()
	var all []string
	for _, p := range Patterns() {
		dir := filepath.Join(root, p)
		if err := Write(dir, minimalSpec(p), false); err != nil {
			t.Fatal(err)
		}
		m, _ := filepath.Glob(filepath.Join(dir, "*.py"))
		all = append(all, m...)
	}
	sort.Strings(all)
	args := append([]string{"-m", "py_compile"}, all...)
	out, err := exec.Command(py, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("py_compile: %v\n%s", err, out)
	}
	// case.py evaluates to the spec's values
	for _, p := range Patterns() {
		cmd := exec.Command(py, "-c", "import runpy,json,sys; d=runpy.run_path(sys.argv[1]); print(json.dumps([d['PATTERN'],d['DTYPE'],d['SHAPES']],separators=(',',':')))",
			filepath.Join(root, p, "case.py"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", p, err, out)
		}
		want, _ := json.Marshal([]any{p, minimalSpec(p).Dtype, minimalSpec(p).Shapes})
		if strings.TrimSpace(string(out)) != string(want) {
			t.Errorf("%s: case.py gives %s, want %s", p, out, want)
		}
	}
}

// findPython returns the pinned interpreter (internal/pyenv), or skips the test when there
// is none.
func findPython(t *testing.T) string {
	t.Helper()
	py, err := pyenv.Find("", nil)
	if err != nil {
		t.Skipf("no Python environment (%v)", err)
	}
	return py
}

func nan() float64 { var z float64; return z / z }
func inf() float64 { var z float64; return 1 / z }

// A residual of another dtype is written into case.py; the same dtype is the default and
// leaves the text of same-dtype cases unchanged.
func TestResidualDtypeParam(t *testing.T) {
	s := minimalSpec("dropout_add")
	s.Dtype = "bf16"
	base := string(casePy(mustResolve(t, s)))
	s.Params.ResidualDtype = "bf16"
	if got := string(casePy(mustResolve(t, s))); got != base {
		t.Errorf("residual_dtype equal to dtype changed case.py:\n%s", got)
	}
	s.Params.ResidualDtype = "fp32"
	if got := string(casePy(mustResolve(t, s))); !strings.Contains(got, `"residual_dtype": "fp32",`) {
		t.Errorf("residual_dtype not written:\n%s", got)
	}
}

// out_dtype and mask_dtype are written only when they differ from what the pattern gives
// anyway, so cases of one dtype keep their text.
func TestOutAndMaskDtypeParams(t *testing.T) {
	s := minimalSpec("mask_softmax")
	s.Dtype = "bf16"
	s.Params.MaskKind = "additive"
	s.Shapes = [][]int64{{2, 3, 8, 16}, {2, 1, 1, 16}}
	base := string(casePy(mustResolve(t, s)))
	s.Params.MaskDtype, s.Params.OutDtype = "bf16", "bf16"
	if got := string(casePy(mustResolve(t, s))); got != base {
		t.Errorf("default mask_dtype/out_dtype changed case.py:\n%s", got)
	}
	s.Params.MaskDtype, s.Params.OutDtype = "fp32", "fp32" // fp32 is the promoted default
	got := string(casePy(mustResolve(t, s)))
	if !strings.Contains(got, `"mask_dtype": "fp32",`) || strings.Contains(got, "out_dtype") {
		t.Errorf("want mask_dtype written and the promoted out_dtype left out:\n%s", got)
	}
	g := minimalSpec("gelu_pyops")
	g.Dtype = "bf16"
	g.Params.OutDtype = "fp32"
	if got := string(casePy(mustResolve(t, g))); !strings.Contains(got, `"out_dtype": "fp32",`) {
		t.Errorf("out_dtype not written:\n%s", got)
	}
}

func mustResolve(t *testing.T, s Spec) Spec {
	t.Helper()
	r, err := resolve(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestNotesInReadme: a group's notes (patterns.Pattern.Notes: dropout_add taking a Linear's
// bias) reach its README's swap-in section, and a group without them gets none.
func TestNotesInReadme(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		pattern string
		group   func(on bool) patterns.ShapeGroup
		note    string // the README's note, present where the parameter is on
		check   func(s Spec, on bool) bool
	}{
		{"dropout_add", func(gemmBias bool) patterns.ShapeGroup {
			g := patterns.ShapeGroup{Dims: [][]int64{{16, 256, 768}, {16, 256, 768}}, DType: patterns.BF16, Instances: 1, Valid: true,
				Params: patterns.Params{Bias: &no}}
			if gemmBias {
				g.Dims = append(g.Dims, []int64{768})
				g.Params.Bias, g.Params.GEMMBias = &yes, true
			}
			return g
		}, "\nHere the bias is the Linear's", func(s Spec, on bool) bool { return s.Params.HasBias == on && s.Params.GEMMBias == on }},
		{"layernorm_linear", func(convBias bool) patterns.ShapeGroup {
			eps := 1e-6
			return patterns.ShapeGroup{Dims: [][]int64{{32, 14, 14, 384}, {1536, 384}}, DType: patterns.BF16, Instances: 1, Valid: true,
				Params: patterns.Params{Bias: &yes, Eps: &eps, ConvBias: convBias}}
		}, "\nHere the LayerNorm's input is a convolution's output", func(s Spec, on bool) bool { return s.Params.ConvBias == on }},
	}
	for _, tc := range tests {
		for _, on := range []bool{true, false} {
			s, why := SpecFromGroup(tc.pattern, tc.group(on))
			if why != "" {
				t.Fatal(why)
			}
			files, err := Render(s)
			if err != nil {
				t.Fatal(err)
			}
			readme := string(files["README.md"])
			if got := strings.Contains(readme, tc.note); got != on {
				t.Errorf("%s, parameter %v: README note present %v:\n%s", tc.pattern, on, got, readme)
			}
			if !tc.check(s, on) {
				t.Errorf("%s, parameter %v: params %+v", tc.pattern, on, s.Params)
			}
			if case_ := string(files["case.py"]); strings.Contains(case_, `"conv_bias": True`) != (on && tc.pattern == "layernorm_linear") {
				t.Errorf("%s, parameter %v: case.py %s", tc.pattern, on, case_)
			}
		}
	}
}
