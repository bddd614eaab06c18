package codegen

import (
	"encoding/json"
	"fmt"
	"math"

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
// a masked log-softmax that also writes its scaled scores, a 0-dim scale, per-channel,
// per-position, per-row and bias operands around a tanh (every way the backward reduces a
// broadcast input's gradient), operands kept on different rows, a 0-dim scale and a
// residual around a sigmoid (the layout no row order serves: one gradient summed from its
// fp32 values; a 0-dim scale summed over several tiles a program; a gradient that is the
// output's own), ConvNeXt's layer scale and residual on bf16 activations (a per-channel
// gradient alone: the backward's flat walk), and a 0-dim scale, per-channel bias and leaky
// ReLU ending in a row max; then GEMM heads, numbers a 16-bit type cannot hold, numbers the
// trace does not record and int64 values (below).
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
	{"broadcast_affine_tanh", "fp32", `{"dims":[2,6,5,7],"inputs":[{"dtype":"fp32","dims":[2,6,5,7]},{"dtype":"fp32","dims":[]},
		{"dtype":"fp32","dims":[6,1,1]},{"dtype":"fp32","dims":[6,5,7]},{"dtype":"fp32","dims":[2,6,5,1]},{"dtype":"fp32","dims":[7]}],
		"steps":[{"op":"mul","args":[{"in":0},{"in":1}],"dtype":"fp32"},
		{"op":"add","args":[{"step":0},{"in":2}],"consts":[1],"dtype":"fp32"},
		{"op":"mul","args":[{"step":1},{"in":3}],"dtype":"fp32"},
		{"op":"sub","args":[{"step":2},{"in":4}],"consts":[0.5],"dtype":"fp32"},
		{"op":"tanh","args":[{"step":3}],"dtype":"fp32"},
		{"op":"add","args":[{"step":4},{"in":5}],"consts":[1],"dtype":"fp32"}],"outputs":[2,5]}`},
	{"broadcast_mixed_sigmoid", "fp32", `{"dims":[3,4,5,8],"inputs":[{"dtype":"fp32","dims":[3,4,5,8]},{"dtype":"fp32","dims":[3,1,1,8]},
		{"dtype":"fp32","dims":[4,1,8]},{"dtype":"bf16","dims":[3,4,5,1]},{"dtype":"fp32","dims":[3,4,5,8]},{"dtype":"fp32","dims":[]}],
		"steps":[{"op":"mul","args":[{"in":0},{"in":1}],"dtype":"fp32"},
		{"op":"mul","args":[{"step":0},{"in":5}],"dtype":"fp32"},
		{"op":"add","args":[{"step":1},{"in":2}],"consts":[1],"dtype":"fp32"},
		{"op":"sigmoid","args":[{"step":2}],"dtype":"fp32"},
		{"op":"mul","args":[{"step":3},{"in":3}],"dtype":"fp32"},
		{"op":"add","args":[{"step":4},{"in":4}],"consts":[1],"dtype":"fp32"}],"outputs":[5]}`},
	{"layer_scale_residual", "fp32", `{"dims":[2,6,5,7],"inputs":[{"dtype":"bf16","dims":[2,6,5,7]},{"dtype":"fp32","dims":[6,1,1]},
		{"dtype":"bf16","dims":[2,6,5,7]}],
		"steps":[{"op":"mul","args":[{"in":0},{"in":1}],"dtype":"fp32"},
		{"op":"add","args":[{"step":0},{"in":2}],"consts":[1],"dtype":"fp32"}],"outputs":[1]}`},
	{"scale_channel_leaky_amax", "fp16", `{"dims":[2,6,8,8],"inputs":[{"dtype":"fp16","dims":[2,6,8,8]},{"dtype":"fp16","dims":[]},{"dtype":"fp16","dims":[6,1,1]}],
		"steps":[{"op":"mul","args":[{"in":0},{"in":1}],"dtype":"fp16"},
		{"op":"add","args":[{"step":0},{"in":2}],"consts":[1],"dtype":"fp16"},
		{"op":"leaky_relu","args":[{"step":1}],"consts":[0.2],"dtype":"fp16"},
		{"op":"amax","args":[{"step":2}],"consts":[1],"dtype":"fp16"}],"outputs":[2,3]}`},
	// a layer scale and residual whose sum autocast casts for two GEMMs (program.Into): the
	// fp32 sum and a bf16 copy for each, their gradients summed in fp32
	{"residual_into_linears", "fp32", `{"dims":[4,16,32],"inputs":[{"dtype":"bf16","dims":[4,16,32]},{"dtype":"fp32","dims":[32]},
		{"dtype":"fp32","dims":[4,16,32]}],
		"steps":[{"op":"mul","args":[{"in":0},{"in":1}],"dtype":"fp32"},
		{"op":"add","args":[{"step":0},{"in":2}],"consts":[1],"dtype":"fp32"},
		{"op":"cast","args":[{"step":1}],"dtype":"bf16"},
		{"op":"cast","args":[{"step":1}],"dtype":"bf16"}],"outputs":[1,2,3],"into":["","linear","conv2d"]}`},
	// ConvNeXt's fc2 output through its permute, the chain taking fc2's bias (program's
	// Input.Bias, added by step 0 where the GEMM's epilogue added it), then the layer scale and
	// the residual
	{"permute_bias_scale_residual", "fp32", `{"dims":[2,6,5,7],"inputs":[{"dtype":"bf16","dims":[2,6,5,7]},{"dtype":"fp32","dims":[6,1,1]},
		{"dtype":"fp32","dims":[2,6,5,7]},{"dtype":"bf16","dims":[1,6,1,1],"bias":true}],
		"steps":[{"op":"add","args":[{"in":0},{"in":3}],"consts":[1],"dtype":"bf16"},
		{"op":"mul","args":[{"step":0},{"in":1}],"dtype":"fp32"},
		{"op":"add","args":[{"step":1},{"in":2}],"consts":[1],"dtype":"fp32"}],"outputs":[2]}`},
	// chains that start at a GEMM (the program's GEMM head, input 0 its output): a Linear of a
	// 3-D x with its bias -> GELU -> scale -> residual add; an addmm -> sigmoid -> per-column
	// scale, also writing the sigmoid; a bmm without a bias -> tanh -> clamp
	{"linear_gelu_scale_residual", "bf16", `{"dims":[2,20,48],"inputs":[{"dtype":"bf16","dims":[2,20,48]},{"dtype":"bf16","dims":[2,20,48]}],
		"gemm":{"op":"linear","x":[2,20,64],"w":[48,64],"bias":[48],"dtype":"bf16"},
		"steps":[{"op":"gelu","args":[{"in":0}],"dtype":"bf16"},
		{"op":"mul","args":[{"step":0},{"num":0.5}],"dtype":"bf16"},
		{"op":"add","args":[{"step":1},{"in":1}],"consts":[1],"dtype":"bf16"}],"outputs":[2]}`},
	{"addmm_sigmoid_channel", "fp32", `{"dims":[40,36],"inputs":[{"dtype":"fp32","dims":[40,36]},{"dtype":"fp32","dims":[36]}],
		"gemm":{"op":"addmm","x":[40,48],"w":[48,36],"bias":[36],"dtype":"fp32"},
		"steps":[{"op":"sigmoid","args":[{"in":0}],"dtype":"fp32"},
		{"op":"mul","args":[{"step":0},{"in":1}],"dtype":"fp32"}],"outputs":[0,1]}`},
	{"bmm_tanh_clamp", "fp16", `{"dims":[2,24,36],"inputs":[{"dtype":"fp16","dims":[2,24,36]}],
		"gemm":{"op":"bmm","x":[2,24,40],"w":[2,40,36],"dtype":"fp16"},
		"steps":[{"op":"tanh","args":[{"in":0}],"dtype":"fp16"},
		{"op":"clamp","args":[{"step":0}],"consts":[-0.5,0.75],"dtype":"fp16"}],"outputs":[1]}`},
	// numbers a 16-bit type cannot hold, where eager decides with them rounded: a linear's
	// output gated by x > 0.1 (bfloat16's 0.1 is 0.10009765625), and an fp16 clamp to
	// [0.1, 0.3] (0.0999755859375 and 0.300048828125), whose backward masks x >= min, x <= max
	{"linear_gt_gate", "bf16", `{"dims":[24,40],"inputs":[{"dtype":"bf16","dims":[24,40]}],
		"gemm":{"op":"linear","x":[24,32],"w":[40,32],"bias":[40],"dtype":"bf16"},
		"steps":[{"op":"gt","args":[{"in":0},{"num":0.1}],"dtype":"bool"},
		{"op":"cast","args":[{"step":0}],"dtype":"bf16"},
		{"op":"mul","args":[{"in":0},{"step":1}],"dtype":"bf16"}],"outputs":[2]}`},
	{"clamp_band_fp16", "fp16", `{"dims":[16,40],"inputs":[{"dtype":"fp16","dims":[16,40]},{"dtype":"fp16","dims":[40]}],
		"steps":[{"op":"clamp","args":[{"in":0}],"consts":[0.1,0.3],"dtype":"fp16"},
		{"op":"mul","args":[{"step":0},{"in":1}],"dtype":"fp16"}],"outputs":[1]}`},
	// a bias-free batched GEMM gated by x < 0.1 in fp16 (0.0999755859375: below 0.1, so eager is
	// false at x = that number, where a kernel comparing with 0.1 is true): the planted case
	// reaches the GEMM's output through one-hot rows of a and w's first row
	{"bmm_lt_gate", "fp16", `{"dims":[2,12,24],"inputs":[{"dtype":"fp16","dims":[2,12,24]}],
		"gemm":{"op":"bmm","x":[2,12,16],"w":[2,16,24],"dtype":"fp16"},
		"steps":[{"op":"lt","args":[{"in":0},{"num":0.1}],"dtype":"bool"},
		{"op":"cast","args":[{"step":0}],"dtype":"fp16"},
		{"op":"mul","args":[{"in":0},{"step":1}],"dtype":"fp16"}],"outputs":[2]}`},
	// the same through a bias-free linear's output (its weight [N, K]): x <= 0.1 on bfloat16,
	// whose 0.1 lies above 0.1, so eager is true at x = that number
	{"linear_le_gate", "bf16", `{"dims":[24,40],"inputs":[{"dtype":"bf16","dims":[24,40]}],
		"gemm":{"op":"linear","x":[24,32],"w":[40,32],"dtype":"bf16"},
		"steps":[{"op":"le","args":[{"in":0},{"num":0.1}],"dtype":"bool"},
		{"op":"cast","args":[{"step":0}],"dtype":"bf16"},
		{"op":"mul","args":[{"in":0},{"step":1}],"dtype":"bf16"}],"outputs":[2]}`},
	// a bias-free x @ W -> hardswish -> a scale, in bfloat16 (a corpus chain): hardswish's
	// derivative jumps at -3 and 3 (ATen: 0 at -3, 1 at 3), numbers the planted case puts at
	// the GEMM's output (program.Op.Kinks), and a GEMM output within its rounding of a
	// bfloat16 midpoint beside 3 may round to either side of it (adapter.band_grads)
	{"matmul_hardswish_div", "bf16", `{"dims":[24,40],"inputs":[{"dtype":"bf16","dims":[24,40]}],
		"gemm":{"op":"matmul","x":[24,32],"w":[32,40],"dtype":"bf16"},
		"steps":[{"op":"hardswish","args":[{"in":0}],"dtype":"bf16"},
		{"op":"div","args":[{"step":0},{"num":0.25}],"dtype":"bf16"}],"outputs":[1]}`},
	// a fractional power of a bfloat16 tensor: eager's exponent is bfloat16's 1.3, 1.296875
	{"abs_pow_bf16", "bf16", `{"dims":[16,40],"inputs":[{"dtype":"bf16","dims":[16,40]},{"dtype":"bf16","dims":[40]}],
		"steps":[{"op":"abs","args":[{"in":0}],"dtype":"bf16"},
		{"op":"pow","args":[{"step":0}],"consts":[1.3],"dtype":"bf16"},
		{"op":"mul","args":[{"step":1},{"in":1}],"dtype":"bf16"}],"outputs":[2]}`},
	// a bias-free x @ W of a 3-D x (matmul) -> SiLU -> scale by a 0-dim tensor
	{"matmul_silu_scale", "bf16", `{"dims":[3,12,40],"inputs":[{"dtype":"bf16","dims":[3,12,40]},{"dtype":"bf16","dims":[]}],
		"gemm":{"op":"matmul","x":[3,12,56],"w":[56,40],"dtype":"bf16"},
		"steps":[{"op":"silu","args":[{"in":0}],"dtype":"bf16"},
		{"op":"mul","args":[{"step":0},{"in":1}],"dtype":"bf16"}],"outputs":[1]}`},
	// dropout in training with the caller's keep mask (program.Input.Keep): T5's scaled
	// hidden states (x * per-channel scale, then dropout, p = 0.1, bf16), and a GEMM head's
	// relu then dropout (p = 0.25, fp32)
	{"mul_dropout_keep", "bf16", `{"dims":[4,8,48],"inputs":[{"dtype":"bf16","dims":[4,8,48]},{"dtype":"bf16","dims":[48]},
		{"dtype":"bool","dims":[4,8,48],"keep":true}],
		"steps":[{"op":"mul","args":[{"in":0},{"in":1}],"dtype":"bf16"},
		{"op":"dropout_keep","args":[{"step":0},{"in":2}],"consts":[0.1,1.1111111111111112],"dtype":"bf16"}],"outputs":[1]}`},
	{"linear_relu_dropout_keep", "fp32", `{"dims":[24,40],"inputs":[{"dtype":"fp32","dims":[24,40]},{"dtype":"bool","dims":[24,40],"keep":true}],
		"gemm":{"op":"linear","x":[24,32],"w":[40,32],"bias":[40],"dtype":"fp32"},
		"steps":[{"op":"relu","args":[{"in":0}],"dtype":"fp32"},
		{"op":"dropout_keep","args":[{"step":0},{"in":1}],"consts":[0.25,1.3333333333333333],"dtype":"fp32"}],"outputs":[1]}`},
	// numbers the model passes and the trace does not record (x + eps, x * scale with Python
	// floats: program.Input.Number), taken at run time: |x| + n -> sqrt -> / n on bf16, and a
	// bias-free linear's output - n -> * n -> residual add on fp16 (the GEMM head's forms)
	{"abs_add_sqrt_div_number", "bf16", `{"dims":[16,40],"inputs":[{"dtype":"bf16","dims":[16,40]},{"dtype":"fp32","dims":[],"number":true},
		{"dtype":"fp32","dims":[],"number":true}],
		"steps":[{"op":"abs","args":[{"in":0}],"dtype":"bf16"},
		{"op":"add","args":[{"step":0},{"in":1}],"consts":[1],"dtype":"bf16"},
		{"op":"sqrt","args":[{"step":1}],"dtype":"bf16"},
		{"op":"div","args":[{"step":2},{"in":2}],"dtype":"bf16"}],"outputs":[3]}`},
	{"linear_sub_mul_number_residual", "fp16", `{"dims":[24,40],"inputs":[{"dtype":"fp16","dims":[24,40]},{"dtype":"fp32","dims":[],"number":true},
		{"dtype":"fp32","dims":[],"number":true},{"dtype":"fp16","dims":[24,40]}],
		"gemm":{"op":"linear","x":[24,32],"w":[40,32],"dtype":"fp16"},
		"steps":[{"op":"sub","args":[{"in":0},{"in":1}],"consts":[1],"dtype":"fp16"},
		{"op":"mul","args":[{"step":0},{"in":2}],"dtype":"fp16"},
		{"op":"add","args":[{"step":1},{"in":3}],"consts":[1],"dtype":"fp16"}],"outputs":[2]}`},
	// int64 values (program.I64): OPT's decode positions, (cumsum * mask - n).long() + m with
	// Python ints n and m the trace does not record; and T5's relative-position buckets, an
	// int64 chain of arithmetic, comparisons with a Python int (in int64) and a Python float
	// (in float32), selections and a conversion to fp16 (through float32, as c10 converts:
	// its large ints round twice, past 65504 to inf)
	{"positions_int_number", "fp32", `{"dims":[4,40],"inputs":[{"dtype":"fp32","dims":[4,40]},{"dtype":"fp32","dims":[4,40]},
		{"dtype":"int64","dims":[],"number":true},{"dtype":"int64","dims":[],"number":true}],
		"steps":[{"op":"mul","args":[{"in":0},{"in":1}],"dtype":"fp32"},
		{"op":"sub","args":[{"step":0},{"in":2}],"consts":[1],"dtype":"fp32"},
		{"op":"cast","args":[{"step":1}],"dtype":"int64"},
		{"op":"add","args":[{"step":2},{"in":3}],"consts":[1],"dtype":"int64"}],"outputs":[3]}`},
	{"relative_buckets_int", "fp16", `{"dims":[24,40],"inputs":[{"dtype":"int64","dims":[24,1]},{"dtype":"int64","dims":[1,40]},{"dtype":"bool","dims":[24,40]}],
		"steps":[{"op":"sub","args":[{"in":1},{"in":0}],"consts":[1],"dtype":"int64"},
		{"op":"gt","args":[{"step":0},{"num":0,"int":true}],"dtype":"bool"},
		{"op":"cast","args":[{"step":1}],"dtype":"int64"},
		{"op":"mul","args":[{"step":2},{"num":16}],"dtype":"int64"},
		{"op":"abs","args":[{"step":0}],"dtype":"int64"},
		{"op":"lt","args":[{"step":4},{"num":7.5}],"dtype":"bool"},
		{"op":"where","args":[{"step":5},{"step":4},{"step":3}],"dtype":"int64"},
		{"op":"masked_fill","args":[{"step":6},{"in":2},{"num":-1}],"dtype":"int64"},
		{"op":"cast","args":[{"step":4}],"dtype":"fp16"},
		{"op":"mul","args":[{"step":8},{"num":0.5}],"dtype":"fp16"}],"outputs":[7,9]}`},
	// a value that leaves the chain with fewer dims than the chain goes on with (program.OutDrop):
	// Llama's cache position, positions + n out as [S], cast on as [1, 1, S]
	{"cache_position_drop", "fp32", `{"dims":[1,1,40],"inputs":[{"dtype":"int64","dims":[40]},{"dtype":"int64","dims":[],"number":true}],
		"steps":[{"op":"add","args":[{"in":0},{"in":1}],"consts":[1],"dtype":"int64"},
		{"op":"cast","args":[{"step":0}],"dtype":"fp32"}],"outputs":[0,1],"out_drop":[2,0]}`},
}

// GenericExamples returns the examples, their programs validated: genericExamples, then
// the op-table programs (tableExamples) that put every op of the table against eager.
func GenericExamples() []GenericExample {
	var out []GenericExample
	add := func(name, dtype string, p *program.Program) {
		if err := p.Validate(); err != nil {
			panic(fmt.Sprintf("codegen: generic example %s: %v", name, err))
		}
		out = append(out, GenericExample{name, GenericSpec{Program: p, Dtype: dtype, Ops: p.Codes(),
			Source: Source{Trace: "example", Site: name}}})
	}
	for _, e := range genericExamples {
		var p program.Program
		if err := json.Unmarshal([]byte(e.prog), &p); err != nil {
			panic(fmt.Sprintf("codegen: generic example %s: %v", e.name, err))
		}
		add(e.name, e.dtype, &p)
	}
	for _, e := range tableExamples() {
		add(e.name, e.dtype, e.p)
	}
	return out
}

// tableExamples are programs whose steps each apply one op of the table to the inputs
// (never to each other's results, so a NaN of one cannot hide another's error; log, sqrt,
// rsqrt and fractional powers to |x|, whose NaN-free gradient then checks every derivative
// at once), every step an output: every elementwise op in fp32 and in bf16 (its rounding), pow at each of _pow's
// paths, and each reduction once.
func tableExamples() []struct {
	name, dtype string
	p           *program.Program
} {
	type ex = struct {
		name, dtype string
		p           *program.Program
	}
	f := func(v float64) program.Num { return program.Num(v) }
	x, y, m := program.InArg(0), program.InArg(1), program.InArg(2)
	num := program.NumArg
	elementwise := func(dt program.DType) *program.Program {
		p := &program.Program{Dims: []int64{6, 40}, Inputs: []program.Input{
			{DType: dt, Dims: []int64{6, 40}}, {DType: dt, Dims: []int64{40}}, {DType: program.Bool, Dims: []int64{6, 1}}}}
		step := func(code program.Code, args []program.Arg, consts ...program.Num) {
			d := dt
			if op, _ := program.Lookup(code); op.Compare {
				d = program.Bool
			}
			p.Steps = append(p.Steps, program.Step{Op: code, Args: args, Consts: consts, DType: d})
		}
		for _, code := range []program.Code{program.Add, program.Sub, program.Rsub} {
			step(code, []program.Arg{x, y}, f(0.5))
			step(code, []program.Arg{x, num(-1.25)}, f(2))
		}
		for _, code := range []program.Code{program.Mul, program.Div, program.Eq, program.Ne, program.Lt, program.Le, program.Gt, program.Ge} {
			step(code, []program.Arg{x, y})
			step(code, []program.Arg{x, num(0.5)})
		}
		step(program.Where, []program.Arg{m, x, y})
		step(program.Where, []program.Arg{m, num(1.5), x})
		step(program.MaskedFill, []program.Arg{x, m, num(-3)})
		step(program.MaskedFill, []program.Arg{x, m, num(math.Inf(-1))})
		step(program.Dropout, []program.Arg{x}, f(0.3), f(0))
		step(program.Clamp, []program.Arg{x}, f(-0.5), f(1.5))
		step(program.ClampMin, []program.Arg{x}, f(0.25))
		step(program.ClampMax, []program.Arg{x}, f(-0.25))
		step(program.Hardtanh, []program.Arg{x}, f(-2), f(2))
		step(program.LeakyRelu, []program.Arg{x}, f(0.1))
		step(program.Elu, []program.Arg{x}, f(1.3), f(1.05), f(0.9))
		step(program.Softplus, []program.Arg{x}, f(2), f(3))
		absStep := -1
		for _, code := range []program.Code{program.Relu, program.Gelu, program.GeluTanh, program.Silu, program.Mish,
			program.Sigmoid, program.Tanh, program.Hardswish, program.Hardsigmoid, program.Exp, program.Cos,
			program.Sin, program.Abs, program.Neg, program.Reciprocal} {
			if code == program.Abs {
				absStep = len(p.Steps)
			}
			step(code, []program.Arg{x})
		}
		// log, sqrt, rsqrt and fractional powers read |x|: a NaN of a negative base would
		// hide every other derivative's error in x's gradient, where they all add up
		abs := program.StepArg(absStep)
		for _, code := range []program.Code{program.Log, program.Sqrt, program.Rsqrt} {
			step(code, []program.Arg{abs})
		}
		for _, c := range []float64{0, 1, 2, 3, 0.5, -1, -2, 2.5, 4, 5, -3} {
			arg := x
			if c != math.Trunc(c) {
				arg = abs
			}
			step(program.Pow, []program.Arg{arg}, f(c))
		}
		step(program.Cast, []program.Arg{x}, nil...)
		p.Steps[len(p.Steps)-1].DType = program.FP32
		if dt == program.FP32 {
			p.Steps[len(p.Steps)-1].DType = program.BF16
		}
		for i := range p.Steps {
			p.Outputs = append(p.Outputs, i)
		}
		return p
	}
	out := []ex{{"table_fp32", "fp32", elementwise(program.FP32)}, {"table_bf16", "bf16", elementwise(program.BF16)}}
	for _, code := range []program.Code{program.Mean, program.Amin, program.Logsumexp, program.Softmax} {
		p := &program.Program{Dims: []int64{3, 5, 70}, Inputs: []program.Input{{DType: program.FP16, Dims: []int64{3, 5, 70}}},
			Steps: []program.Step{{Op: program.Mul, Args: []program.Arg{x, num(1.5)}, DType: program.FP16}}, Outputs: []int{0, 1}}
		red := program.Step{Op: code, Args: []program.Arg{program.StepArg(0)}, DType: program.FP32}
		if code == program.Amin || code == program.Logsumexp {
			red.DType = program.FP16 // no dtype argument: the input's
		}
		if op, _ := program.Lookup(code); len(op.Consts) == 1 {
			red.Consts = []program.Num{f(float64(len(out) % 2))} // keepdim both ways
		}
		p.Steps = append(p.Steps, red)
		out = append(out, ex{"table_" + string(code), "fp16", p})
	}
	return out
}
