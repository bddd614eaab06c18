package codegen

import (
	"encoding/json"
	"fmt"

	"github.com/fuseadvise/fuseadvise/program"
)

// GenericExample is one generic chain the tests render and verify (codegen's golden files,
// verify's interpreter runs and mutants): a name and its spec.
type GenericExample struct {
	Name string
	Spec GenericSpec
}

// genericExamples are the examples' programs as the analysis JSON carries them: a SiLU
// written out and scaled, clamp -> mul -> add bias, GELU -> dropout(p=0) -> residual add,
// a softmax's numerator summed (x - max -> exp -> sum), a bf16 round trip around a mul,
// a masked log-softmax that also writes its scaled scores, and a 0-dim scale, per-channel
// bias and leaky ReLU ending in a row max.
var genericExamples = []struct{ name, dtype, prog string }{
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

// GenericExamples returns the examples, their programs validated.
func GenericExamples() []GenericExample {
	var out []GenericExample
	for _, e := range genericExamples {
		var p program.Program
		if err := json.Unmarshal([]byte(e.prog), &p); err != nil {
			panic(fmt.Sprintf("codegen: generic example %s: %v", e.name, err))
		}
		if err := p.Validate(); err != nil {
			panic(fmt.Sprintf("codegen: generic example %s: %v", e.name, err))
		}
		out = append(out, GenericExample{e.name, GenericSpec{Program: &p, Dtype: e.dtype, Ops: p.Codes(),
			Source: Source{Trace: "example", Site: e.name}}})
	}
	return out
}
