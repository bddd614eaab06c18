package codegen

import (
	"regexp"
	"testing"
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
