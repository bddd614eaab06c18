package codegen

import (
	"regexp"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/patterns"
)

func TestParseDtype(t *testing.T) {
	for in, want := range map[string]string{
		"c10::BFloat16": "bf16", "float": "fp32", "c10::Half": "fp16", "torch.float16": "fp16",
		"bf16": "bf16", " Float32 ": "fp32",
	} {
		got, err := ParseDtype(in)
		if err != nil || got != want {
			t.Errorf("ParseDtype(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"double", "int64", "", "bf16\"); import os"} {
		if got, err := ParseDtype(in); err == nil {
			t.Errorf("ParseDtype(%q) = %q, want an error", in, got)
		}
	}
}

func TestDirName(t *testing.T) {
	a := minimalSpec("bias_gelu")
	n1, err := DirName(a)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^bias_gelu-fp16-4x33x96-[0-9a-f]{8}$`).MatchString(n1) {
		t.Errorf("DirName = %q", n1)
	}
	n2, _ := DirName(a)
	b := a
	b.Params.Approximate = "tanh"
	n3, _ := DirName(b)
	if n1 != n2 || n1 == n3 {
		t.Errorf("DirName not a function of the spec: %q %q %q", n1, n2, n3)
	}
	c := a
	c.EstFusedUs, c.EstSavingUs = 12.5, 300
	if n5, _ := DirName(c); n5 != n1 {
		t.Errorf("the cost model's estimates renamed the case: %q, was %q", n5, n1)
	}
	a.Source.Site = "../../etc"
	n4, _ := DirName(a)
	if !regexp.MustCompile(`^[a-z0-9_x-]+$`).MatchString(n4) {
		t.Errorf("unsafe DirName %q", n4)
	}
	if _, err := DirName(Spec{Pattern: "nope"}); err == nil {
		t.Error("DirName accepted an invalid spec")
	}
}

// TestModuleNames: every pattern's snippet imports its kernel by the kernel's own module
// name (never "kernel", which two kernels copied beside one model would share), and two
// kernels of one pattern get two names.
func TestModuleNames(t *testing.T) {
	ident := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	for _, p := range patterns.Catalog() {
		u := Usage(p.ID, "fuseadvise_m")
		if !strings.Contains(u, "from fuseadvise_m import ") || strings.Contains(u, "from kernel ") || strings.Contains(u, patterns.UsageModule) {
			t.Errorf("%s: the snippet does not import from its module:\n%s", p.ID, u)
		}
	}
	a := Spec{Pattern: "bias_gelu", Dtype: "bf16", Shapes: [][]int64{{8, 512, 3072}, {3072}}, Params: Params{HasBias: true}}
	b := a
	b.Shapes = [][]int64{{8, 512, 768}, {768}}
	ma, err := ModuleName(a)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := ModuleName(b)
	if ma == mb || !ident.MatchString(ma) || !strings.HasPrefix(ma, "fuseadvise_bias_gelu_") {
		t.Errorf("module names %q and %q: want two distinct Python identifiers", ma, mb)
	}
	dir, _ := DirName(a)
	if !strings.HasSuffix(dir, ma[len("fuseadvise_bias_gelu_"):]) {
		t.Errorf("module %q and folder %q do not share their hash", ma, dir)
	}
	// the trace's timings change neither name
	c := a
	c.Instances, c.GPUTimeUs, c.EstSavingUs, c.EstFusedUs = 7, 99, 50, 3
	if mc, _ := ModuleName(c); mc != ma {
		t.Errorf("timings changed the module name: %q, %q", mc, ma)
	}
}
