package codegen

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/patterns"
)

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }
func yes() *bool             { b := true; return &b }

func TestSpecFromGroup(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		g       patterns.ShapeGroup
		shapes  string // dimsString of the spec's shapes
		dtype   string
		check   func(t *testing.T, got string)
		skip    string // substring of the skip reason; "" = generated
	}{
		{name: "linear weight [N,K]", pattern: "layernorm_linear",
			g:      patterns.ShapeGroup{Dims: [][]int64{{8, 512, 768}, {3072, 768}}, DType: patterns.FP32, Valid: true, Cols: 768, Params: patterns.Params{Bias: yes(), Eps: f64(1e-5)}},
			shapes: "[8,512,768] [3072,768] [3072]", dtype: "fp32"},
		{name: "Conv1D weight [K,N] is transposed", pattern: "layernorm_linear",
			g:      patterns.ShapeGroup{Dims: [][]int64{{8, 512, 768}, {768, 2304}}, DType: patterns.BF16, Valid: true, Cols: 768},
			shapes: "[8,512,768] [2304,768] [2304]", dtype: "bf16"},
		{name: "Q, K, V GEMMs as one over concatenated weights", pattern: "layernorm_linear",
			g:      patterns.ShapeGroup{Dims: [][]int64{{16, 256, 768}, {768, 768}}, DType: patterns.BF16, Valid: true, Cols: 768, Params: patterns.Params{Bias: yes(), Linears: 3, ConcatN: 2304}},
			shapes: "[16,256,768] [2304,768] [2304]", dtype: "bf16"},
		{name: "Q and smaller K, V (grouped-query attention) concatenated", pattern: "layernorm_linear",
			g:      patterns.ShapeGroup{Dims: [][]int64{{2, 256, 1024}, {1024, 1024}}, DType: patterns.FP16, Valid: true, Cols: 1024, Params: patterns.Params{Linears: 3, ConcatN: 1536}},
			shapes: "[2,256,1024] [1536,1024] [1536]", dtype: "fp16"},
		{name: "GEMMs that cannot be concatenated", pattern: "layernorm_linear",
			g:    patterns.ShapeGroup{Dims: [][]int64{{16, 256, 768}, {768, 768}}, DType: patterns.BF16, Valid: true, Cols: 768, Params: patterns.Params{Linears: 2}},
			skip: "different inputs or ops"},
		{name: "gelu_pyops under autocast returns fp32", pattern: "gelu_pyops",
			g:      patterns.ShapeGroup{Dims: [][]int64{{8, 512, 3072}}, DType: patterns.BF16, Valid: true, Params: patterns.Params{Approximate: "tanh", OutDType: patterns.FP32}},
			shapes: "[8,512,3072]", dtype: "bf16", check: func(t *testing.T, got string) {
				if got != "fp32" {
					t.Errorf("out_dtype %q, want fp32", got)
				}
			}},
		{name: "fp32 softmax of bf16 scores with an fp32 mask", pattern: "mask_softmax",
			g:      patterns.ShapeGroup{Dims: [][]int64{{16, 12, 256, 256}, {16, 1, 256, 256}}, DType: patterns.BF16, Valid: true, Params: patterns.Params{MaskKind: "additive", MaskDType: patterns.FP32, OutDType: patterns.FP32, SoftmaxDim: i64(3)}},
			shapes: "[16,12,256,256] [16,1,256,256]", dtype: "bf16", check: func(t *testing.T, got string) {
				if got != "fp32" {
					t.Errorf("out_dtype %q, want fp32", got)
				}
			}},
		{name: "position embeddings: a residual broadcast along the batch", pattern: "add_layernorm",
			g:      patterns.ShapeGroup{Dims: [][]int64{{16, 256, 768}, {1, 256, 768}}, DType: patterns.FP32, Valid: true, Cols: 768},
			shapes: "[16,256,768] [1,256,768]", dtype: "fp32"},
		{name: "a residual broadcast in the middle", pattern: "add_layernorm",
			g:    patterns.ShapeGroup{Dims: [][]int64{{16, 256, 768}, {16, 1, 768}}, DType: patterns.FP32, Valid: true, Cols: 768},
			skip: "other than along leading dims"},
		{name: "weight that does not fit", pattern: "linear_gelu",
			g:    patterns.ShapeGroup{Dims: [][]int64{{8, 512, 768}, {100, 200}}, DType: patterns.BF16, Valid: true},
			skip: "does not match the input's last dim"},
		{name: "permuted LayerNorm2d", pattern: "add_layernorm",
			g:    patterns.ShapeGroup{Dims: [][]int64{{32, 96, 56, 56}, {32, 96, 56, 56}}, DType: patterns.FP32, Valid: true, Cols: 96},
			skip: "a permuted norm"},
		{name: "int64 input", pattern: "swiglu",
			g:    patterns.ShapeGroup{Dims: [][]int64{{4, 8}}, DType: patterns.Int64, Valid: true},
			skip: "has no kernel"},
		{name: "invalid group", pattern: "swiglu",
			g:    patterns.ShapeGroup{Dims: [][]int64{{4, 8}}, DType: patterns.FP16, Valid: false},
			skip: "out of range"},
		{name: "llama rmsnorm runs in the model dtype", pattern: "rmsnorm_pyops",
			g:      patterns.ShapeGroup{Dims: [][]int64{{2, 256, 1024}, {1024}}, DType: patterns.FP32, Valid: true, Cols: 1024, Params: patterns.Params{Casting: "llama", OutDType: patterns.FP16}},
			shapes: "[2,256,1024]", dtype: "fp16"},
		{name: "gemma rmsnorm has no variant", pattern: "rmsnorm_pyops",
			g:    patterns.ShapeGroup{Dims: [][]int64{{2, 256, 1024}}, DType: patterns.FP32, Valid: true, Params: patterns.Params{Casting: "gemma"}},
			skip: "no template variant"},
		{name: "additive mask keeps its broadcast shape", pattern: "mask_softmax",
			g:      patterns.ShapeGroup{Dims: [][]int64{{16, 12, 256, 256}, {16, 1, 256, 256}}, DType: patterns.FP32, Valid: true, Params: patterns.Params{MaskKind: "additive", MaskDims: []int64{16, 1, 1, 256}, SoftmaxDim: i64(3), ScaleOp: "div", Scale: f64(8)}},
			shapes: "[16,12,256,256] [16,1,1,256]", dtype: "fp32"},
		{name: "softmax over another dim", pattern: "mask_softmax",
			g:    patterns.ShapeGroup{Dims: [][]int64{{16, 12, 256, 256}}, DType: patterns.FP32, Valid: true, Params: patterns.Params{MaskKind: "causal", SoftmaxDim: i64(2)}},
			skip: "other than the last"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, why := SpecFromGroup(tt.pattern, tt.g)
			if tt.skip != "" {
				if !strings.Contains(why, tt.skip) {
					t.Fatalf("skip reason %q, want %q", why, tt.skip)
				}
				return
			}
			if why != "" {
				t.Fatalf("skipped: %s", why)
			}
			if got := patterns.FormatDims(s.Shapes); got != tt.shapes {
				t.Errorf("shapes %s, want %s", got, tt.shapes)
			}
			if s.Dtype != tt.dtype {
				t.Errorf("dtype %s, want %s", s.Dtype, tt.dtype)
			}
			if tt.check != nil {
				tt.check(t, s.Params.OutDtype)
			}
		})
	}
	// a div-scale becomes its reciprocal
	s, _ := SpecFromGroup("mask_softmax", tests[15].g)
	if s.Params.Scale != 0.125 {
		t.Errorf("scale %v, want 1/8", s.Params.Scale)
	}
}

// A LayerNorm2d that detection followed through its permute (NormDim 1) is the
// channels-first kernel: norm_dim "1" written into case.py; a last-dim norm writes no
// norm_dim, so its folder keeps its name.
func TestChannelsFirstNormSpec(t *testing.T) {
	g := patterns.ShapeGroup{Dims: [][]int64{{32, 96, 56, 56}, {32, 96, 56, 56}}, DType: patterns.FP32, Valid: true, Cols: 96,
		Params: patterns.Params{NormDim: i64(1), Eps: f64(1e-6)}}
	s, why := SpecFromGroup("add_layernorm", g)
	if why != "" || s.Params.NormDim != "1" || patterns.FormatDims(s.Shapes) != "[32,96,56,56]" {
		t.Fatalf("spec %+v (%q)", s, why)
	}
	if err := Validate(s); err != nil {
		t.Fatal(err)
	}
	if got := string(casePy(s)); !strings.Contains(got, `"norm_dim": "1",`) {
		t.Errorf("case.py lacks norm_dim:\n%s", got)
	}
	g = patterns.ShapeGroup{Dims: [][]int64{{8, 512, 768}}, DType: patterns.BF16, Valid: true, Cols: 768}
	s, _ = SpecFromGroup("add_layernorm", g)
	r, err := resolve(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(casePy(r)); r.Params.NormDim != "" || strings.Contains(got, "norm_dim") {
		t.Errorf("a last-dim norm wrote norm_dim %q:\n%s", r.Params.NormDim, got)
	}
}

func TestAssumedParametersAreSaid(t *testing.T) {
	g := patterns.ShapeGroup{Dims: [][]int64{{2, 8, 64}}, DType: patterns.FP16, Valid: true, Instances: 1}
	if got := assumed("rmsnorm_pyops", g); !strings.Contains(got, "eps not recorded (1e-6 used)") {
		t.Errorf("rmsnorm without eps: %q", got)
	}
	g.Params.Eps = f64(1e-5)
	if got := assumed("rmsnorm_pyops", g); got != "" {
		t.Errorf("rmsnorm with eps: %q", got)
	}
	if got := assumed("mask_softmax", g); !strings.Contains(got, "scale not recorded") {
		t.Errorf("softmax without scale: %q", got)
	}
}

// An fp32 LayerNorm feeding a bf16 GEMM (autocast) is generated in the GEMM's type, and the
// folder says so; a chain that ran in fp32 throughout stays fp32.
func TestLayerNormLinearUnderAutocast(t *testing.T) {
	bias := true
	g := patterns.ShapeGroup{Dims: [][]int64{{8, 512, 768}, {768, 2304}}, DType: patterns.FP32, Valid: true, Instances: 8,
		Cols: 768, Params: patterns.Params{Eps: f64(1e-5), Bias: &bias, OutDType: patterns.BF16}}
	s, why := SpecFromGroup("layernorm_linear", g)
	if why != "" || s.Dtype != "bf16" {
		t.Fatalf("autocast chain: dtype %q (%s), want bf16", s.Dtype, why)
	}
	if got := assumed("layernorm_linear", g); !strings.Contains(got, "GEMM in bf16 (autocast)") {
		t.Errorf("autocast chain: the note says %q", got)
	}
	g.Params.OutDType = patterns.FP32
	if s, _ := SpecFromGroup("layernorm_linear", g); s.Dtype != "fp32" {
		t.Errorf("fp32 chain: dtype %q, want fp32", s.Dtype)
	}
	if got := assumed("layernorm_linear", g); strings.Contains(got, "autocast") {
		t.Errorf("fp32 chain: the note says %q", got)
	}
}

// A residual add of an fp32 stream and a bf16 branch (autocast) keeps both types in the case.
func TestResidualDtypeFromTrace(t *testing.T) {
	g := patterns.ShapeGroup{Dims: [][]int64{{8, 512, 1024}, {8, 512, 1024}}, DType: patterns.BF16, Valid: true,
		Instances: 16, Cols: 1024, Params: patterns.Params{P: f64(0.1), ResidualDType: patterns.FP32}}
	for _, pattern := range []string{"dropout_add", "add_layernorm"} {
		s, why := SpecFromGroup(pattern, g)
		if why != "" || s.Dtype != "bf16" || s.Params.ResidualDtype != "fp32" {
			t.Errorf("%s: dtype %q residual %q (%s), want bf16 and fp32", pattern, s.Dtype, s.Params.ResidualDtype, why)
		}
	}
	g.Params.ResidualDType = patterns.BF16
	if s, _ := SpecFromGroup("dropout_add", g); s.Params.ResidualDtype != "" {
		t.Errorf("same dtypes: residual %q, want none", s.Params.ResidualDtype)
	}
}

// One chain, one folder: a mask_softmax group whose instances all lie inside attention
// chains is left to the attention folder (with a note); one with some outside is generated
// for those only, its counts in proportion.
func TestSpecsFromReportMaskSoftmaxInAttention(t *testing.T) {
	ms := func(n, in int) patterns.ShapeGroup {
		return patterns.ShapeGroup{Dims: [][]int64{{2, 12, 128, 128}, {2, 1, 1, 128}}, DType: patterns.BF16, Valid: true,
			Instances: n, InAttention: in, GPUTimeUs: 40, EstFusedUs: 20, EstSavingUs: 20,
			Params: patterns.Params{MaskKind: "additive", MaskDims: []int64{2, 1, 1, 128}, MaskDType: patterns.BF16, SoftmaxDim: i64(3), Attention: true}}
	}
	attn := patterns.ShapeGroup{Dims: [][]int64{{2, 12, 128, 64}, {2, 12, 128, 64}, {2, 12, 128, 64}, {2, 1, 1, 128}}, DType: patterns.BF16, Valid: true,
		Instances: 4, GPUTimeUs: 100, EstFusedUs: 10, EstSavingUs: 90,
		Params: patterns.Params{MaskKind: "additive", MaskDims: []int64{2, 1, 1, 128}, MaskDType: patterns.BF16, HeadDim: 64, SeqQ: 128, SeqK: 128, SoftmaxDim: i64(3)}}
	for _, tt := range []struct {
		name      string
		group     patterns.ShapeGroup
		instances int // of the mask_softmax folder; 0: none
		note      string
	}{
		{"all inside", ms(4, 4), 0, "its 4 instance(s) lie inside attention chains: the attention folder covers them"},
		{"some outside", ms(4, 3), 1, "3 of its 4 instances lie inside attention chains"},
		{"none inside", ms(4, 0), 4, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep := &patterns.Report{Opportunities: []patterns.Opportunity{
				{Pattern: "attention", Shapes: []patterns.ShapeGroup{attn}},
				{Pattern: "mask_softmax", Shapes: []patterns.ShapeGroup{tt.group}},
			}}
			items, skipped, err := SpecsFromReport(rep)
			if err != nil {
				t.Fatal(err)
			}
			var got *Spec
			n := 0
			for i, it := range items {
				switch it.Spec.Pattern {
				case "mask_softmax":
					got = &items[i].Spec
				case "attention":
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d attention folders, want 1", n)
			}
			all := strings.Join(skipped, "\n")
			switch {
			case tt.instances == 0:
				if got != nil || !strings.Contains(all, tt.note) {
					t.Errorf("mask_softmax generated (%v) or not noted; skipped %q", got != nil, all)
				}
			case got == nil:
				t.Fatalf("no mask_softmax folder; skipped %q", all)
			default:
				f := float64(tt.instances) / 4
				if got.Instances != tt.instances || got.GPUTimeUs != 40*f || got.EstSavingUs != 20*f || got.EstFusedUs != 5 {
					t.Errorf("spec counts: instances %d, gpu %g, saving %g, fused %g", got.Instances, got.GPUTimeUs, got.EstSavingUs, got.EstFusedUs)
				}
				if !strings.Contains(got.Source.Site, tt.note) {
					t.Errorf("site %q lacks %q", got.Source.Site, tt.note)
				}
			}
		})
	}
}

// A training group's backward saving reaches the folder's manifest (the PR weighs it against
// a forward predicted slower) and its README; an inference group's manifest has none, and the
// folder's name does not depend on it.
func TestBackwardSavingInManifest(t *testing.T) {
	g := patterns.ShapeGroup{Dims: [][]int64{{8, 512, 768}, {8, 512, 768}}, DType: patterns.BF16, Valid: true, Cols: 768,
		Instances: 16, GPUTimeUs: 409.6, EstFusedUs: 166.7, EstSavingUs: 242.9, EstBackwardSavingUs: 150.2}
	s, why := SpecFromGroup("add_layernorm", g)
	if why != "" || s.EstBackwardSavingUs != 150.2 {
		t.Fatalf("spec %+v (%q)", s, why)
	}
	dir := filepath.Join(t.TempDir(), "k")
	if err := Write(dir, s, false); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil || m.EstBackwardSavingUs != 150.2 {
		t.Errorf("manifest: %v, est_backward_saving_us %v", err, m.EstBackwardSavingUs)
	}
	if r, _ := os.ReadFile(filepath.Join(dir, "README.md")); !strings.Contains(string(r), "150.2 us in the backward") {
		t.Errorf("README lacks the backward's saving")
	}
	inf := s
	inf.EstBackwardSavingUs = 0
	n1, _ := DirName(s)
	n2, _ := DirName(inf)
	if n1 != n2 {
		t.Errorf("names %s and %s differ by the backward's saving", n1, n2)
	}
	if b, err := manifest(inf, nil, ""); err != nil || strings.Contains(string(b), "est_backward_saving_us") {
		t.Errorf("an inference manifest carries est_backward_saving_us (%v)", err)
	}
	s.EstBackwardSavingUs = -1
	if err := Validate(s); err == nil {
		t.Error("a negative backward saving validated")
	}
}
