package codegen

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/program"
)

// genericCases are the programs the generic renderer is tested on (golden files in
// testdata/golden/generic/<name>/, and the interpreter runs in verify): JSON as the analysis
// carries it.
var genericCases = []struct {
	name, dtype, prog string
}{
	{"silu_scale", "fp32", `{"dims":[8,64],"inputs":[{"dtype":"fp32","dims":[8,64]}],
		"steps":[{"op":"sigmoid","args":[{"in":0}],"dtype":"fp32"},
		{"op":"mul","args":[{"step":0},{"in":0}],"dtype":"fp32"},
		{"op":"mul","args":[{"step":1},{"num":0.5}],"dtype":"fp32"}],"outputs":[2]}`},
	{"clamp_mul_bias", "bf16", `{"dims":[64,96],"inputs":[{"dtype":"bf16","dims":[64,96]},{"dtype":"bf16","dims":[96]}],
		"steps":[{"op":"clamp","args":[{"in":0}],"consts":[-1.5,2],"dtype":"bf16"},
		{"op":"mul","args":[{"step":0},{"num":3}],"dtype":"bf16"},
		{"op":"add","args":[{"step":1},{"in":1}],"consts":[1],"dtype":"bf16"}],"outputs":[2]}`},
	{"gelu_dropout_residual", "fp32", `{"dims":[4,16,32],"inputs":[{"dtype":"fp32","dims":[4,16,32]},{"dtype":"fp32","dims":[4,16,32]}],
		"steps":[{"op":"gelu","args":[{"in":0}],"dtype":"fp32"},
		{"op":"dropout","args":[{"step":0}],"consts":[0,1],"dtype":"fp32"},
		{"op":"add","args":[{"step":1},{"in":1}],"consts":[1],"dtype":"fp32"}],"outputs":[0,2]}`},
	{"sub_exp_sum", "fp32", `{"dims":[8,16,16],"inputs":[{"dtype":"fp32","dims":[8,16,16]},{"dtype":"fp32","dims":[8,16,1]}],
		"steps":[{"op":"sub","args":[{"in":0},{"in":1}],"consts":[1],"dtype":"fp32"},
		{"op":"exp","args":[{"step":0}],"dtype":"fp32"},
		{"op":"sum","args":[{"step":1}],"consts":[0],"dtype":"fp32"}],"outputs":[2]}`},
	{"cast_mul_cast", "fp32", `{"dims":[32,48],"inputs":[{"dtype":"fp32","dims":[32,48]},{"dtype":"bf16","dims":[48]}],
		"steps":[{"op":"cast","args":[{"in":0}],"dtype":"bf16"},
		{"op":"mul","args":[{"step":0},{"in":1}],"dtype":"bf16"},
		{"op":"cast","args":[{"step":1}],"dtype":"fp32"}],"outputs":[2]}`},
	{"where_log_softmax", "fp32", `{"dims":[8,16,16],"inputs":[{"dtype":"fp32","dims":[8,16,16]},{"dtype":"bool","dims":[1,16,16]}],
		"steps":[{"op":"mul","args":[{"in":0},{"num":0.125}],"dtype":"fp32"},
		{"op":"masked_fill","args":[{"step":0},{"in":1},{"num":"-inf"}],"dtype":"fp32"},
		{"op":"log_softmax","args":[{"step":1}],"dtype":"fp32"}],"outputs":[0,2]}`},
	{"scale_channel_leaky_amax", "fp16", `{"dims":[2,6,8,8],"inputs":[{"dtype":"fp16","dims":[2,6,8,8]},{"dtype":"fp16","dims":[]},{"dtype":"fp16","dims":[6,1,1]}],
		"steps":[{"op":"mul","args":[{"in":0},{"in":1}],"dtype":"fp16"},
		{"op":"add","args":[{"step":0},{"in":2}],"consts":[1],"dtype":"fp16"},
		{"op":"leaky_relu","args":[{"step":1}],"consts":[0.2],"dtype":"fp16"},
		{"op":"amax","args":[{"step":2}],"consts":[1],"dtype":"fp16"}],"outputs":[2,3]}`},
}

// GenericTestSpecs returns the specs of genericCases by name, for verify's interpreter
// tests.
func genericTestSpecs(t *testing.T) map[string]GenericSpec {
	t.Helper()
	out := map[string]GenericSpec{}
	for _, c := range genericCases {
		var p program.Program
		if err := json.Unmarshal([]byte(c.prog), &p); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		out[c.name] = GenericSpec{Program: &p, Dtype: c.dtype, Ops: p.Codes(), Source: Source{Trace: "synthetic", Site: c.name}}
	}
	return out
}

// TestGenericRender: each case's kernel.py, reference.py and case.py against
// testdata/golden/generic/<case>/ (go test -run TestGenericRender -update), and a
// deterministic, complete folder.
func TestGenericRender(t *testing.T) {
	specs := genericTestSpecs(t)
	for _, c := range genericCases {
		files, err := RenderGeneric(specs[c.name])
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		again, _ := RenderGeneric(specs[c.name])
		for _, f := range []string{"kernel.py", "reference.py", "case.py", "adapter.py", "fa_testing.py", "test_generated.py", "bench.py", "pytest.ini", "manifest.json", "README.md"} {
			if len(files[f]) == 0 {
				t.Errorf("%s: %s missing", c.name, f)
			}
			if string(files[f]) != string(again[f]) {
				t.Errorf("%s: %s differs between two renders", c.name, f)
			}
		}
		for _, f := range []string{"kernel.py", "reference.py", "case.py"} {
			path := filepath.Join("testdata", "golden", "generic", c.name, f)
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
}
