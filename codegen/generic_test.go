package codegen

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/program"
	"github.com/fuseadvise/fuseadvise/trace"
)

// genericTestSpecs returns GenericExamples by name.
func genericTestSpecs(t *testing.T) map[string]GenericSpec {
	t.Helper()
	out := map[string]GenericSpec{}
	for _, e := range GenericExamples() {
		out[e.Name] = e.Spec
	}
	return out
}

// TestGenericRender: each case's kernel.py, reference.py and case.py against
// testdata/golden/generic/<case>/ (go test -run TestGenericRender -update), and a
// deterministic, complete folder.
func TestGenericRender(t *testing.T) {
	specs := genericTestSpecs(t)
	for _, c := range GenericExamples() {
		files, err := RenderGeneric(specs[c.Name])
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		again, _ := RenderGeneric(specs[c.Name])
		for _, f := range []string{"kernel.py", "reference.py", "case.py", "adapter.py", "fa_testing.py", "test_generated.py", "bench.py", "pytest.ini", "manifest.json", "README.md"} {
			if len(files[f]) == 0 {
				t.Errorf("%s: %s missing", c.Name, f)
			}
			if string(files[f]) != string(again[f]) {
				t.Errorf("%s: %s differs between two renders", c.Name, f)
			}
		}
		for _, f := range []string{"kernel.py", "reference.py", "case.py"} {
			path := filepath.Join("testdata", "golden", "generic", c.Name, f)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, files[f], 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -run TestGenericRender -update creates it)", err)
			}
			if string(files[f]) != string(want) {
				t.Errorf("%s differs from the golden file (-update to accept)", path)
			}
		}
	}
}

// TestGenericInjection: text from a trace reaches only manifest.json and README.md, escaped;
// a program carrying text where codes, dtypes or numbers belong is refused before anything is
// rendered.
func TestGenericInjection(t *testing.T) {
	evil := `"); import os; os.system("x") #` + "\n" + `{0} __import__('os')`
	s := genericTestSpecs(t)["silu_scale"]
	s.Ops = []string{evil, "mul"}
	s.Source = Source{Trace: evil, Site: evil}
	files, err := RenderGeneric(s)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if strings.HasSuffix(name, ".py") && (strings.Contains(string(b), "os.system") || strings.Contains(string(b), "__import__")) {
			t.Errorf("%s carries text from the trace", name)
		}
	}
	var m Manifest
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil || m.Source.Site != evil || m.Ops[0] != evil {
		t.Errorf("manifest.json does not keep the source as data: %v", err)
	}
	bad := []string{
		`{"dims":[4],"inputs":[{"dtype":"fp32","dims":[4]}],"steps":[{"op":"__import__('os')","args":[{"in":0}],"dtype":"fp32"}],"outputs":[0]}`,
		`{"dims":[4],"inputs":[{"dtype":"fp32); x","dims":[4]}],"steps":[{"op":"exp","args":[{"in":0}],"dtype":"fp32"}],"outputs":[0]}`,
		`{"dims":[4],"inputs":[{"dtype":"fp32","dims":[4]}],"steps":[{"op":"exp","args":[{"in":0}],"dtype":"torch.float32; x"}],"outputs":[0]}`,
		`{"dims":[4],"inputs":[{"dtype":"fp32","dims":[4]}],"steps":[{"op":"mul","args":[{"in":0},{"num":"os.system"}],"dtype":"fp32"}],"outputs":[0]}`,
		`{"dims":[4],"inputs":[{"dtype":"fp32","dims":[4]}],"steps":[{"op":"mul","args":[{"in":0},{"step":0}],"dtype":"fp32"}],"outputs":[0]}`,
		`{"dims":[4],"inputs":[{"dtype":"fp32","dims":[4]}],"steps":[{"op":"clamp","args":[{"in":0}],"consts":[1],"dtype":"fp32"}],"outputs":[0]}`,
		`{"dims":[4],"inputs":[{"dtype":"fp32","dims":[4]}],"steps":[{"op":"dropout","args":[{"in":0}],"consts":[0.1,1],"dtype":"fp32"}],"outputs":[0]}`,
		`{"dims":[4],"inputs":[{"dtype":"fp32","dims":[5]}],"steps":[{"op":"exp","args":[{"in":0}],"dtype":"fp32"}],"outputs":[0]}`,
		`{"dims":[4],"inputs":[{"dtype":"fp32","dims":[4]}],"steps":[{"op":"sum","args":[{"in":0}],"consts":[0],"dtype":"fp32"},{"op":"exp","args":[{"step":0}],"dtype":"fp32"}],"outputs":[1]}`,
		`{"dims":[4],"inputs":[{"dtype":"fp32","dims":[4]}],"steps":[{"op":"exp","args":[{"in":0}],"dtype":"fp32"}],"outputs":[]}`,
		// a GEMM head carrying text where its op or dtype belongs, or shapes that do not multiply
		`{"dims":[2,4],"inputs":[{"dtype":"fp32","dims":[2,4]}],"gemm":{"op":"linear(a); import os","x":[2,3],"w":[4,3],"dtype":"fp32"},"steps":[{"op":"exp","args":[{"in":0}],"dtype":"fp32"}],"outputs":[0]}`,
		`{"dims":[2,4],"inputs":[{"dtype":"fp32","dims":[2,4]}],"gemm":{"op":"linear","x":[2,3],"w":[4,3],"dtype":"torch.float32; x"},"steps":[{"op":"exp","args":[{"in":0}],"dtype":"fp32"}],"outputs":[0]}`,
		`{"dims":[2,4],"inputs":[{"dtype":"fp32","dims":[2,4]}],"gemm":{"op":"mm","x":[2,3],"w":[4,3],"dtype":"fp32"},"steps":[{"op":"exp","args":[{"in":0}],"dtype":"fp32"}],"outputs":[0]}`,
	}
	for _, js := range bad {
		var p program.Program
		if err := json.Unmarshal([]byte(js), &p); err != nil {
			continue // refused while reading: fine too
		}
		if _, err := RenderGeneric(GenericSpec{Program: &p, Dtype: "fp32"}); err == nil {
			t.Errorf("rendered %s", js)
		}
	}
	// estimates from an analysis JSON edited by hand
	for _, set := range []func(*GenericSpec){
		func(s *GenericSpec) { s.EstSavingUs = math.NaN() },
		func(s *GenericSpec) { s.EstFusedUs = math.Inf(1) },
		func(s *GenericSpec) { s.EstBackwardSavingUs = -1 },
		func(s *GenericSpec) { s.GPUTimeUs = -2 },
	} {
		s := genericTestSpecs(t)["silu_scale"]
		set(&s)
		if _, err := RenderGeneric(s); err == nil {
			t.Errorf("rendered a spec with estimates %v, %v, %v, %v", s.EstSavingUs, s.EstFusedUs, s.EstBackwardSavingUs, s.GPUTimeUs)
		}
	}
}

// TestGenericInjectionFromTrace: a trace whose op names, file path and scalar arguments carry
// Python text goes through analysis and codegen; the chains it yields are written with none
// of that text in a .py file (op names are table codes in code, data in manifest.json).
func TestGenericInjectionFromTrace(t *testing.T) {
	evil := `x"); __import__("os").system("id"); ("`
	tr := &trace.Trace{Path: "/tmp/" + evil + ".json", Rank: -1, Devices: []trace.Device{{Name: "NVIDIA H200"}}}
	tr.Threads = []trace.Thread{{Pid: "1", Tid: "1"}}
	f32 := func(d ...int64) trace.Input { return trace.Input{Type: "float", Dims: d} }
	scalar := func(s string) trace.Input { return trace.Input{Type: "Scalar", Concrete: s} }
	ops := []struct {
		name string
		in   []trace.Input
	}{
		{"aten::mm", []trace.Input{f32(64, 32), f32(32, 96)}},
		{evil + "::mul", []trace.Input{f32(64, 96), scalar("0.5")}},
		{"aten::sigmoid", []trace.Input{f32(64, 96)}},
		{"aten::add", []trace.Input{f32(64, 96), scalar(evil), scalar("1")}}, // a scalar that is code: refused
		{"aten::mm", []trace.Input{f32(64, 32), f32(32, 96)}},
		{"aten::exp", []trace.Input{f32(64, 96)}},
		{"aten::mul", []trace.Input{f32(64, 96), scalar("2e0")}},
	}
	var now int64
	for _, o := range ops {
		id := int32(len(tr.Ops))
		tr.Ops = append(tr.Ops, trace.Op{Name: o.name, Kind: trace.KindCPUOp, Start: now, Dur: 10_000, Parent: -1, Inputs: o.in,
			Bwd: -1, Fwd: -1, Py: -1, ExternalID: -1, RecordFunctionID: -1, Seq: -1, Acts: []int32{int32(len(tr.Acts))}})
		tr.Acts = append(tr.Acts, trace.Activity{Name: evil, Start: now + 1000, Dur: 5_000, Op: id})
		tr.Threads[0].Roots = append(tr.Threads[0].Roots, id)
		now += 11_000
	}
	tr.Steps = []trace.Step{{Name: "whole trace", Num: -1, Dur: now}}
	rep, err := patterns.Analyze([]*trace.Trace{tr}, patterns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	items, skipped, err := GenericItems(rep)
	if err != nil {
		t.Fatal(err)
	}
	// mul (its namespace is the text) -> sigmoid -> add (its scalar is): refused for the
	// scalar; exp -> mul: generated
	if len(items) != 1 || len(skipped) != 1 || !strings.Contains(skipped[0], "Concrete Inputs give no number") {
		t.Fatalf("%d folders, skipped %q: want one of each", len(items), skipped)
	}
	for _, it := range items {
		files, err := RenderGeneric(*it.Generic)
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range files {
			if strings.HasSuffix(name, ".py") && (strings.Contains(string(b), "system") || strings.Contains(string(b), "__import__")) {
				t.Errorf("%s: %s carries text from the trace", it.Name, name)
			}
		}
	}
}

// TestGenericBackwardAlias: an input whose gradient is an output's gradient exactly (an
// add's operand, through derivatives of 1.0 only) is named in GRAD_ALIAS, one reached by
// another derivative or by two paths is not; no backward kernel uses atomics.
func TestGenericBackwardAlias(t *testing.T) {
	specs := genericTestSpecs(t)
	for _, c := range []struct{ example, want string }{
		{"gelu_dropout_residual", "[None, 1]"},                           // y2 = dropout(gelu(x0)) + x1: x1's is y2's (the second output)
		{"broadcast_mixed_sigmoid", "[None, None, None, None, 0, None]"}, // the residual x4
		{"linear_gelu_scale_residual", "[None, 0, None]"},                // x1 the residual; x0, the GEMM's output, through a GELU; the bias' slot
		{"silu_scale", "[None]"},                                         // x0 read twice
		{"table_fp32", "[None, None, None]"},                             // add(x, y, alpha=0.5): y's derivative 0.5
	} {
		files, err := RenderGeneric(specs[c.example])
		if err != nil {
			t.Fatal(err)
		}
		src := string(files["kernel.py"])
		want := "GRAD_ALIAS = " + c.want + "  #"
		if !strings.Contains(src, want) {
			t.Errorf("%s: kernel.py lacks %q", c.example, want)
		}
		if strings.Contains(src, "tl.atomic") {
			t.Errorf("%s: the backward uses atomics", c.example)
		}
	}
}

// TestGenericHelpers: every generic example's kernel.py defines, under @triton.jit, exactly
// the helpers its code calls (comments aside): none rides along unused, none called is
// missing. Kernels (_..._kernel) are launched, not called.
func TestGenericHelpers(t *testing.T) {
	jitDef := regexp.MustCompile(`@triton\.jit\ndef (\w+)\(`)
	defLine := regexp.MustCompile(`(?m)^def \w+\(`)
	comment := regexp.MustCompile(`(?m)(^|\s)#.*$`)
	call := regexp.MustCompile(`\b(_\w+)\(`)
	known := []string{"_cast", "_tile"} // the shared blocks' @triton.jit functions
	for _, h := range helperBlocks {
		known = append(known, h.name)
	}
	specs := genericTestSpecs(t)
	for _, c := range GenericExamples() {
		files, err := RenderGeneric(specs[c.Name])
		if err != nil {
			t.Fatal(err)
		}
		src := string(files["kernel.py"])
		defined := map[string]bool{}
		for _, m := range jitDef.FindAllStringSubmatch(src, -1) {
			defined[m[1]] = true
		}
		called := map[string]bool{}
		for _, m := range call.FindAllStringSubmatch(defLine.ReplaceAllString(comment.ReplaceAllString(src, ""), ""), -1) {
			called[m[1]] = true
		}
		for name := range defined {
			if !strings.HasSuffix(name, "_kernel") && !called[name] {
				t.Errorf("%s: kernel.py defines %s and never calls it", c.Name, name)
			}
		}
		for _, name := range known {
			if called[name] && !defined[name] {
				t.Errorf("%s: kernel.py calls %s and does not define it", c.Name, name)
			}
		}
	}
}

// TestHelpersFor: a call pulls in its helper and the helpers that one calls (and the module
// constants they read), in the helpers' order; a name that only begins like a helper's pulls
// in nothing. A kernel rounding to one 16-bit type carries that type's rounding alone.
func TestHelpersFor(t *testing.T) {
	for _, c := range []struct {
		code string
		want []string
	}{
		{"", nil},
		{"n = _pow2(x)", nil},
		{"y = _sigmoid(x)", []string{"_sigmoid"}},
		{"y = _gelu_tanh(x)", []string{"_TANH_LIBDEVICE", "_tanh", "_tanh_formula", "_gelu_tanh"}},
		{"d = _dpow(x, 2.0)", []string{"_pow", "_dpow"}},
		{"d = _dmish(x) * _round_bf16(y)", []string{"_ROUND_PTX", "_round_bf16", "_round_bits_bf16", "_sigmoid", "_TANH_LIBDEVICE", "_tanh", "_tanh_formula", "_softplus", "_dmish"}},
		{"y = _round_fp16(x)", []string{"_ROUND_PTX", "_round_fp16", "_round_bits_fp16"}},
	} {
		var got []string
		for _, m := range helperDef.FindAllStringSubmatch(helpersFor(c.code), -1) {
			got = append(got, helperName(m))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("helpersFor(%q) = %v, want %v", c.code, got, c.want)
		}
	}
}

// TestGenericScalarRounding: a number eager rounds to a 16-bit tensor's type (a comparison's,
// clamp's bounds, pow's exponent in its forward) is written rounded into the Triton code and
// as traced into the eager reference, but a comparison's, rounded in both (the reference
// upcast for the quack check then decides as eager); fp32 programs and the derivatives eager
// computes with the number as given (hardtanh's mask, pow's factor) keep it.
func TestGenericScalarRounding(t *testing.T) {
	for _, c := range []struct {
		name, dtype, step   string
		inTriton, notTriton []string
		inRef               string
	}{
		{"gt bf16", "bf16", `{"op":"gt","args":[{"in":0},{"num":0.1}],"dtype":"bool"}`,
			[]string{"x0 > 0.10009765625"}, []string{"x0 > 0.1,"}, "torch.gt(x0, 0.10009765625)"},
		{"le fp16", "fp16", `{"op":"le","args":[{"in":0},{"num":0.3}],"dtype":"bool"}`,
			[]string{"x0 <= 0.300048828125"}, nil, "torch.le(x0, 0.300048828125)"},
		{"ge fp32", "fp32", `{"op":"ge","args":[{"in":0},{"num":0.1}],"dtype":"bool"}`,
			[]string{"x0 >= 0.10000000149011612"}, nil, "torch.ge(x0, 0.10000000149011612)"},
		{"clamp_min fp16", "fp16", `{"op":"clamp_min","args":[{"in":0}],"consts":[0.1],"dtype":"fp16"}`,
			[]string{"_clamp_min(x0, 0.0999755859375)", "x0 >= 0.0999755859375"}, nil, "torch.clamp_min(x0, 0.1)"},
		{"hardtanh bf16: its backward's bounds as given", "bf16", `{"op":"hardtanh","args":[{"in":0}],"consts":[0.1,0.3],"dtype":"bf16"}`,
			[]string{"(x0 > 0.1) & (x0 < 0.3)"}, nil, "hardtanh(x0, 0.1, 0.3)"},
		{"pow bf16: the forward's exponent rounded, the derivative's not", "bf16", `{"op":"pow","args":[{"in":0}],"consts":[1.3],"dtype":"bf16"}`,
			[]string{"_pow(x0, 1.296875)", "_dpow(x0, 1.3)"}, []string{"_pow(x0, 1.3)"}, "torch.pow(x0, 1.3)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			prog := `{"dims":[4,8],"inputs":[{"dtype":"` + c.dtype + `","dims":[4,8]}],"steps":[` + c.step + `],"outputs":[0]}`
			var p program.Program
			if err := json.Unmarshal([]byte(prog), &p); err != nil {
				t.Fatal(err)
			}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			files, err := RenderGeneric(GenericSpec{Program: &p, Dtype: c.dtype, Ops: p.Codes(), Source: Source{Trace: "t", Site: "s"}})
			if err != nil {
				t.Fatal(err)
			}
			k, ref := string(files["kernel.py"]), string(files["reference.py"])
			for _, s := range c.inTriton {
				if !strings.Contains(k, s) {
					t.Errorf("kernel.py lacks %q", s)
				}
			}
			for _, s := range c.notTriton {
				if strings.Contains(k, s) {
					t.Errorf("kernel.py has %q", s)
				}
			}
			if !strings.Contains(ref, c.inRef) {
				t.Errorf("reference.py lacks %q", c.inRef)
			}
		})
	}
}

// TestGenericGEMMBiasSlot: the backward kernel's GEMM-bias slot takes the GEMM output's
// gradient where a derivative reaches that output, and is left unreached (no reference to
// an undefined gx0) where the chain only compares it.
func TestGenericGEMMBiasSlot(t *testing.T) {
	for _, c := range []struct {
		name, steps string
		slot        bool
	}{
		{"multiplied", `{"op":"relu","args":[{"in":0}],"dtype":"bf16"},
			{"op":"mul","args":[{"step":0},{"in":1}],"dtype":"bf16"}`, true},
		{"only compared", `{"op":"gt","args":[{"in":0},{"num":0}],"dtype":"bool"},
			{"op":"cast","args":[{"step":0}],"dtype":"bf16"},
			{"op":"mul","args":[{"step":1},{"in":1}],"dtype":"bf16"}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			prog := `{"dims":[24,40],"inputs":[{"dtype":"bf16","dims":[24,40]},{"dtype":"bf16","dims":[24,40]}],
				"gemm":{"op":"linear","x":[24,32],"w":[40,32],"bias":[40],"dtype":"bf16"},
				"steps":[` + c.steps + `],"outputs":[` + strconv.Itoa(strings.Count(c.steps, `"op"`)-1) + `]}`
			var p program.Program
			if err := json.Unmarshal([]byte(prog), &p); err != nil {
				t.Fatal(err)
			}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			files, err := RenderGeneric(GenericSpec{Program: &p, Dtype: "bf16", Ops: p.Codes(), Source: Source{Trace: "t", Site: "s"}})
			if err != nil {
				t.Fatal(err)
			}
			k := string(files["kernel.py"])
			if !strings.Contains(k, "BWD_INPUTS = 3") {
				t.Fatalf("kernel.py has no backward with the bias' slot")
			}
			if got := strings.Contains(k, "gx2 = gx0"); got != c.slot {
				t.Errorf("the slot's gradient written: %v, want %v", got, c.slot)
			}
			if !c.slot && strings.Contains(k, "gx0") {
				t.Errorf("kernel.py reads gx0, which no derivative defines")
			}
			reach := "GRAD_REACHED = [True, True, True]"
			if !c.slot {
				reach = "GRAD_REACHED = [False, True, False]"
			}
			if !strings.Contains(k, reach) {
				t.Errorf("kernel.py lacks %q", reach)
			}
		})
	}
}

// TestGenericGEMMPreInOut0 says when the library path may write the GEMM's output into the
// first output (the pointwise kernel then runs in place): where that output has the GEMM
// output's dtype (a GEMM head's program is elementwise: Validate refuses a reduction).
func TestGenericGEMMPreInOut0(t *testing.T) {
	for _, c := range []struct {
		name, steps, outputs string
		inPlace              bool
	}{
		{"elementwise", `{"op":"relu","args":[{"in":0}],"dtype":"bf16"},
			{"op":"mul","args":[{"step":0},{"in":1}],"dtype":"bf16"}`, "1", true},
		{"first output another dtype", `{"op":"relu","args":[{"in":0}],"dtype":"bf16"},
			{"op":"cast","args":[{"step":0}],"dtype":"fp32"},
			{"op":"mul","args":[{"step":0},{"in":1}],"dtype":"bf16"}`, "1,2", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			prog := `{"dims":[24,40],"inputs":[{"dtype":"bf16","dims":[24,40]},{"dtype":"bf16","dims":[24,40]}],
				"gemm":{"op":"linear","x":[24,32],"w":[40,32],"bias":[40],"dtype":"bf16"},
				"steps":[` + c.steps + `],"outputs":[` + c.outputs + `]}`
			var p program.Program
			if err := json.Unmarshal([]byte(prog), &p); err != nil {
				t.Fatal(err)
			}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			files, err := RenderGeneric(GenericSpec{Program: &p, Dtype: "bf16", Ops: p.Codes(), Source: Source{Trace: "t", Site: "s"}})
			if err != nil {
				t.Fatal(err)
			}
			want := "GEMM_PRE_IN_OUT0 = " + pyBool(c.inPlace)
			if !strings.Contains(string(files["kernel.py"]), want) {
				t.Errorf("kernel.py lacks %q", want)
			}
		})
	}
}

// TestGenericExactSteps says which 16-bit steps are written without a rounding to their
// dtype: those whose value is one of their operands, each already of the step's dtype (or a
// number that dtype holds); any other keeps its _round, as eager stores every step.
func TestGenericExactSteps(t *testing.T) {
	for _, c := range []struct {
		name, inputs, step string
		rounded            bool
	}{
		{"relu", `{"dtype":"bf16","dims":[8,32]}`, `{"op":"relu","args":[{"in":0}],"dtype":"bf16"}`, false},
		{"clamp (bounds rounded)", `{"dtype":"bf16","dims":[8,32]}`, `{"op":"clamp","args":[{"in":0}],"consts":[-0.1,0.3],"dtype":"bf16"}`, false},
		{"hardtanh held bounds", `{"dtype":"fp16","dims":[8,32]}`, `{"op":"hardtanh","args":[{"in":0}],"consts":[-1,0.5],"dtype":"fp16"}`, false},
		{"hardtanh bound as traced", `{"dtype":"fp16","dims":[8,32]}`, `{"op":"hardtanh","args":[{"in":0}],"consts":[-1,0.1],"dtype":"fp16"}`, true},
		{"masked_fill held number", `{"dtype":"bf16","dims":[8,32]},{"dtype":"bool","dims":[8,32]}`, `{"op":"masked_fill","args":[{"in":0},{"in":1},{"num":-0.5}],"dtype":"bf16"}`, false},
		{"masked_fill unheld number", `{"dtype":"bf16","dims":[8,32]},{"dtype":"bool","dims":[8,32]}`, `{"op":"masked_fill","args":[{"in":0},{"in":1},{"num":0.1}],"dtype":"bf16"}`, true},
		{"cast from fp32", `{"dtype":"fp32","dims":[8,32]}`, `{"op":"cast","args":[{"in":0}],"dtype":"bf16"}`, true},
		{"neg", `{"dtype":"fp16","dims":[8,32]}`, `{"op":"neg","args":[{"in":0}],"dtype":"fp16"}`, false},
		{"mul", `{"dtype":"bf16","dims":[8,32]}`, `{"op":"mul","args":[{"in":0},{"num":3}],"dtype":"bf16"}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// a second step reads the first: its value is not only stored (onlyStored)
			next := `{"op":"mul","args":[{"step":0},{"num":2}],"dtype":"fp32"}`
			fwd := forwardKernel(t, `{"dims":[8,32],"inputs":[`+c.inputs+`],"steps":[`+c.step+`,`+next+`],"outputs":[1]}`)
			if got := strings.Contains(fwd, "v0 = _round_"); got != c.rounded {
				t.Errorf("step rounded: %v, want %v", got, c.rounded)
			}
		})
	}
}

// TestGenericStoredStepNotRounded: a 16-bit step whose value only goes to its output's store
// is not rounded before the store's own conversion (which rounds it the same way) in the
// forward kernel; one that a later step reads is, and the backward kernel, whose derivatives
// read the forward's values, keeps every rounding of a value it recomputes. A value no
// derivative reads (mul by a number's: its derivative is the number) is not recomputed.
func TestGenericStoredStepNotRounded(t *testing.T) {
	const in = `{"dtype":"bf16","dims":[8,32]}`
	const mul = `{"op":"mul","args":[{"in":0},{"num":3}],"dtype":"bf16"}`
	const mul2 = `{"op":"mul","args":[{"step":0},{"in":0}],"dtype":"bf16"}` // its derivatives read v0 and x0
	for _, c := range []struct {
		name, steps, outputs string
		rounded              []string // the steps rounded in the forward kernel
	}{
		{"one step, stored", mul, "[0]", nil},
		{"read by the next step", mul + "," + mul2, "[1]", []string{"v0"}},
		{"read and stored", mul + "," + mul2, "[0,1]", []string{"v0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			prog := `{"dims":[8,32],"inputs":[` + in + `],"steps":[` + c.steps + `],"outputs":` + c.outputs + `}`
			fwd := forwardKernel(t, prog)
			for _, v := range []string{"v0", "v1"} {
				want := slices.Contains(c.rounded, v)
				if got := strings.Contains(fwd, v+" = _round_"); got != want {
					t.Errorf("%s rounded in the forward kernel: %v, want %v", v, got, want)
				}
			}
			files := renderProgram(t, prog)
			bwd := string(files["kernel.py"])
			bwd = bwd[strings.Index(bwd, "def _fused_bwd_kernel("):]
			bwd = bwd[:strings.Index(bwd, "\n\n\n")]
			if c.rounded == nil {
				if strings.Contains(bwd, "v0 = ") {
					t.Error("the backward kernel recomputes v0, which no derivative reads")
				}
			} else if !strings.Contains(bwd, "v0 = _round_") {
				t.Error("the backward kernel does not round v0")
			}
		})
	}
}

// renderProgram renders the generic folder of a program given as JSON.
func renderProgram(t *testing.T, prog string) map[string][]byte {
	t.Helper()
	var p program.Program
	if err := json.Unmarshal([]byte(prog), &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	files, err := RenderGeneric(GenericSpec{Program: &p, Dtype: string(p.Steps[0].DType), Ops: p.Codes(), Source: Source{Trace: "t", Site: "s"}})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// forwardKernel is the text of the forward kernel (_fused_kernel) of a program given as JSON.
func forwardKernel(t *testing.T, prog string) string {
	t.Helper()
	k := string(renderProgram(t, prog)["kernel.py"])
	i := strings.Index(k, "def _fused_kernel(")
	if i < 0 {
		t.Fatal("no _fused_kernel")
	}
	k = k[i:]
	if j := strings.Index(k, "\n\n\n"); j >= 0 {
		k = k[:j]
	}
	return k
}

// TestNumbersReadme: a folder's README says how to pass each number the trace does not record:
// a Python float for a "number", a Python int for a "number_int64"; none without them; and how
// to draw a training dropout's keep mask.
func TestNumbersReadme(t *testing.T) {
	for _, c := range []struct {
		example    string
		want, miss []string
	}{
		{"abs_add_sqrt_div_number", []string{"Inputs `x1`, `x2` (\"number\"", "a Python float"}, []string{"Python int"}},
		{"positions_int_number", []string{"Inputs `x2`, `x3` (\"number_int64\"", "a Python int, or a 0-dim int64 tensor"}, []string{"Python float"}},
		{"silu_scale", nil, []string{"Python float", "Python int", "keep mask"}},
		{"mul_dropout_keep", []string{"Input `keep2` is the keep mask of a dropout in training (p = 0.1)", "`keep2 = torch.empty(shape, dtype=torch.bool, device=x.device).bernoulli_(1 - 0.1)`"}, nil},
	} {
		var readme string
		for _, e := range GenericExamples() {
			if e.Name == c.example {
				files, err := RenderGeneric(e.Spec)
				if err != nil {
					t.Fatal(err)
				}
				readme = string(files["README.md"])
			}
		}
		if readme == "" {
			t.Fatalf("%s: no such example", c.example)
		}
		for _, w := range c.want {
			if !strings.Contains(readme, w) {
				t.Errorf("%s: README lacks %q", c.example, w)
			}
		}
		for _, m := range c.miss {
			if strings.Contains(readme, m) {
				t.Errorf("%s: README says %q", c.example, m)
			}
		}
	}
}

var examplesOut = flag.String("examples.out", "", "TestWriteGenericExamples: write every generic example's folder under this directory (for a run on a GPU)")

// TestWriteGenericExamples (with -examples.out DIR) writes every generic example's folder, as
// gen writes a trace's, under DIR: `go test ./codegen -run TestWriteGenericExamples
// -examples.out DIR`, then `fuseadvise verify -gpu DIR/*` where the GPU is.
func TestWriteGenericExamples(t *testing.T) {
	if *examplesOut == "" {
		t.Skip("needs -examples.out DIR")
	}
	for _, e := range GenericExamples() {
		if err := WriteGeneric(filepath.Join(*examplesOut, e.Name), e.Spec, true); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGenericAutocastReference: a step the trace recorded in fp32 from 16-bit operands of one
// type (autocast's fp32 ops: pow on ConvNet's fp16 LayerNorm2d) is replayed with its operands
// cast to fp32, as autocast runs it (eager's promotion alone would give fp16, and every case
// failed on the output's dtype); operands of two 16-bit types promote to fp32 themselves, and
// a cast or an op given its dtype casts itself.
func TestGenericAutocastReference(t *testing.T) {
	for _, c := range []struct {
		name, inputs, steps, want string
	}{
		{"pow upcast", `{"dtype":"fp16","dims":[8,32]},{"dtype":"fp16","dims":[8,32]}`,
			`{"op":"sub","args":[{"in":0},{"in":1}],"consts":[1],"dtype":"fp16"},{"op":"pow","args":[{"step":0}],"consts":[2],"dtype":"fp32"}`,
			"v1 = torch.pow(v0.to(torch.float32), 2.0)"},
		{"mixed types promote", `{"dtype":"fp16","dims":[8,32]},{"dtype":"bf16","dims":[8,32]}`,
			`{"op":"mul","args":[{"in":0},{"in":1}],"dtype":"fp32"}`,
			"v0 = torch.mul(x0, x1)"},
		{"a cast", `{"dtype":"bf16","dims":[8,32]}`,
			`{"op":"cast","args":[{"in":0}],"dtype":"fp32"}`,
			"v0 = x0.to(torch.float32)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := renderProgram(t, `{"dims":[8,32],"inputs":[`+c.inputs+`],"steps":[`+c.steps+`],"outputs":[`+
				strconv.Itoa(strings.Count(c.steps, `"op"`)-1)+`]}`)
			if ref := string(files["reference.py"]); !strings.Contains(ref, c.want) {
				t.Errorf("reference.py lacks %q:\n%s", c.want, ref)
			}
		})
	}
}
