package program

import (
	"errors"
	"math"
	"regexp"
	"strconv"
)

// Code is an op of the table.
type Code string

// The table's codes.
const (
	Add, Sub, Rsub, Mul, Div             Code = "add", "sub", "rsub", "mul", "div"
	Eq, Ne, Lt, Le, Gt, Ge               Code = "eq", "ne", "lt", "le", "gt", "ge"
	Where, MaskedFill, Cast, Dropout     Code = "where", "masked_fill", "cast", "dropout"
	DropoutKeep                          Code = "dropout_keep"
	Clamp, ClampMin, ClampMax, Hardtanh  Code = "clamp", "clamp_min", "clamp_max", "hardtanh"
	Relu, LeakyRelu, Elu, Gelu, GeluTanh Code = "relu", "leaky_relu", "elu", "gelu", "gelu_tanh"
	Silu, Mish, Sigmoid, Tanh, Softplus  Code = "silu", "mish", "sigmoid", "tanh", "softplus"
	Hardswish, Hardsigmoid               Code = "hardswish", "hardsigmoid"
	Exp, Log, Sqrt, Rsqrt, Pow           Code = "exp", "log", "sqrt", "rsqrt", "pow"
	Cos, Sin                             Code = "cos", "sin"
	Abs, Neg, Reciprocal                 Code = "abs", "neg", "reciprocal"
	Sum, Mean, Amax, Amin, Logsumexp     Code = "sum", "mean", "amax", "amin", "logsumexp"
	Softmax, LogSoftmax                  Code = "softmax", "log_softmax"
)

// eagerExact are the ops eager computes as one fp32 operation rounded once to the step's
// dtype (arithmetic, comparisons, selection, casts, clamps, a maximum), as the kernel's
// expression and its rounding do: a 16-bit result is eager's bit for bit but where the GPU's
// division or square root differs from eager's in fp32's last place. Not the functions
// (exp, erf, tanh, pow, their compositions) whose fp32 results eager computes otherwise, nor
// sums, whose order differs.
var eagerExact = map[Code]bool{
	Add: true, Sub: true, Rsub: true, Mul: true, Div: true,
	Eq: true, Ne: true, Lt: true, Le: true, Gt: true, Ge: true,
	Where: true, MaskedFill: true, Cast: true, Dropout: true, DropoutKeep: true,
	Clamp: true, ClampMin: true, ClampMax: true, Hardtanh: true, Relu: true, LeakyRelu: true,
	Sqrt: true, Abs: true, Neg: true, Reciprocal: true, Amax: true, Amin: true,
}

// EagerExact reports whether eager computes op c as the kernel does, rounded once (eagerExact).
func (c Code) EagerExact() bool { return eagerExact[c] }

// BitExact reports whether the kernel computes op c to eager's bits on every device: an
// EagerExact op but the division, square root and reciprocal, which the GPU's kernels may
// compute to another last place of fp32 (the eager-rounding check's 1%).
func (c Code) BitExact() bool { return eagerExact[c] && c != Div && c != Sqrt && c != Reciprocal }

// ConstKind is how a constant parameter is written in Python.
type ConstKind int

const (
	ConstFloat ConstKind = iota // a float literal (+-inf allowed)
	ConstBool                   // 0 or 1, written False / True
)

// Op is one entry of the table.
//
// Triton is the op as a Triton expression of fp32 values: {0}, {1}, {2} are the operands
// (fp32 tensors, or float literals), {c0}, {c1}, {c2} the constants; the helpers it calls
// (_sigmoid, _clamp, ...) are in codegen's kernel preamble. A comparison gives 1.0 or 0.0
// (bool values are fp32 0/1 inside the kernel). The step's rounding to its dtype is applied
// after the expression, not by it. A reduction's Triton is "": codegen writes its row loop.
//
// Torch is the op as eager PyTorch replays it: {0}.. are tensors or Python floats, {c0}.. the
// constants (floats, or True/False for ConstBool), {dt} the step's torch dtype.
//
// Deriv is the derivative of the result with respect to each operand, as a Triton
// expression of the operands, the constants and {y} (the result, rounded to the step's dtype
// as the forward stored it), evaluated where eager's derivative formula is (ATen's
// derivatives.yaml and its backward kernels: relu's from its result, clamp's mask inclusive,
// hardtanh's exclusive, pow by 0 is 0 everywhere; div's by the denominator from the fp32
// quotient, not the rounded result: one term of a bias's gradient can dominate its sum, and
// a 16-bit rounding there is what the gradient checks hold against eager's own error), for
// the fused backward codegen renders;
// "" where the operand gets no gradient (a comparison's, a where's condition, a
// masked_fill's mask). Every float operand of an elementwise op has one; a reduction has
// none (a program ending in one has no fused backward yet: Program.Backward).
type Op struct {
	Code    Code
	Arity   int
	Consts  []ConstKind
	Triton  string
	Torch   string
	Deriv   []string
	Compare bool // the result is bool
	// Reduce names a reduction over the last dim ("sum", "max", ...); "" for elementwise ops.
	Reduce string
	// FullShape: the reduction's result has the main shape (softmax), not one value a row.
	FullShape bool
	// Int: the op also computes an int64 result from int64 (or bool) operands, exactly as
	// eager does (the same Triton and Torch expressions, its numbers and constants written
	// as integers): arithmetic, selection and casts, not the float functions.
	Int   bool
	check func(Step) error
}

var (
	f1 = []ConstKind{ConstFloat}
	f2 = []ConstKind{ConstFloat, ConstFloat}
	b1 = []ConstKind{ConstBool}
)

// Table is the op table, in the order docs/patterns.md lists it.
var Table = []*Op{
	{Code: Add, Int: true, Arity: 2, Consts: f1, Triton: "{0} + {1} * {c0}", Torch: "torch.add({0}, {1}, alpha={c0})", Deriv: []string{"1.0", "{c0}"}},
	{Code: Sub, Int: true, Arity: 2, Consts: f1, Triton: "{0} - {1} * {c0}", Torch: "torch.sub({0}, {1}, alpha={c0})", Deriv: []string{"1.0", "-{c0}"}},
	{Code: Rsub, Int: true, Arity: 2, Consts: f1, Triton: "{1} - {0} * {c0}", Torch: "torch.rsub({0}, {1}, alpha={c0})", Deriv: []string{"-{c0}", "1.0"}},
	{Code: Mul, Int: true, Arity: 2, Triton: "{0} * {1}", Torch: "torch.mul({0}, {1})", Deriv: []string{"{1}", "{0}"}},
	{Code: Div, Arity: 2, Triton: "{0} / {1}", Torch: "torch.div({0}, {1})", Deriv: []string{"1.0 / {1}", "-({0} / {1}) / {1}"}},
	{Code: Eq, Arity: 2, Compare: true, Triton: "tl.where({0} == {1}, 1.0, 0.0)", Torch: "torch.eq({0}, {1})"},
	{Code: Ne, Arity: 2, Compare: true, Triton: "tl.where({0} != {1}, 1.0, 0.0)", Torch: "torch.ne({0}, {1})"},
	{Code: Lt, Arity: 2, Compare: true, Triton: "tl.where({0} < {1}, 1.0, 0.0)", Torch: "torch.lt({0}, {1})"},
	{Code: Le, Arity: 2, Compare: true, Triton: "tl.where({0} <= {1}, 1.0, 0.0)", Torch: "torch.le({0}, {1})"},
	{Code: Gt, Arity: 2, Compare: true, Triton: "tl.where({0} > {1}, 1.0, 0.0)", Torch: "torch.gt({0}, {1})"},
	{Code: Ge, Arity: 2, Compare: true, Triton: "tl.where({0} >= {1}, 1.0, 0.0)", Torch: "torch.ge({0}, {1})"},
	{Code: Where, Int: true, Arity: 3, Triton: "tl.where({0} != 0.0, {1}, {2})", Torch: "torch.where({0}, {1}, {2})",
		Deriv: []string{"", "tl.where({0} != 0.0, 1.0, 0.0)", "tl.where({0} != 0.0, 0.0, 1.0)"}},
	{Code: MaskedFill, Int: true, Arity: 3, Triton: "tl.where({1} != 0.0, {2}, {0})", Torch: "torch.masked_fill({0}, {1}, {2})",
		Deriv: []string{"tl.where({1} != 0.0, 0.0, 1.0)", "", "tl.where({1} != 0.0, 1.0, 0.0)"}},
	{Code: Cast, Int: true, Arity: 1, Triton: "{0}", Torch: "{0}.to({dt})", Deriv: []string{"1.0"}},
	// dropout that draws no mask: p == 0, or not training (check); the identity
	{Code: Dropout, Arity: 1, Consts: []ConstKind{ConstFloat, ConstBool}, Triton: "{0}", Torch: "torch.dropout({0}, {c0}, {c1})",
		Deriv: []string{"1.0"}, check: checkDropout},
	// dropout in training, with the mask the caller draws: {1} a bool keep mask (an input,
	// Input.Keep: True with probability 1 - p), {c0} p, {c1} the scale 1 / (1 - p) as ATen's
	// dropout computes with it (kept elements times the scale, in fp32, rounded once)
	{Code: DropoutKeep, Arity: 2, Consts: f2, Triton: "tl.where({1} != 0.0, {0} * {c1}, 0.0)",
		Torch: "torch.where({1}, {0} * {c1}, 0.0)", Deriv: []string{"tl.where({1} != 0.0, {c1}, 0.0)", ""}, check: checkDropoutKeep},
	{Code: Clamp, Arity: 1, Consts: f2, Triton: "_clamp({0}, {c0}, {c1})", Torch: "torch.clamp({0}, {c0}, {c1})",
		Deriv: []string{"tl.where(({0} >= {c0}) & ({0} <= {c1}), 1.0, 0.0)"}},
	{Code: ClampMin, Arity: 1, Consts: f1, Triton: "_clamp_min({0}, {c0})", Torch: "torch.clamp_min({0}, {c0})",
		Deriv: []string{"tl.where({0} >= {c0}, 1.0, 0.0)"}},
	{Code: ClampMax, Arity: 1, Consts: f1, Triton: "_clamp_max({0}, {c0})", Torch: "torch.clamp_max({0}, {c0})",
		Deriv: []string{"tl.where({0} <= {c0}, 1.0, 0.0)"}},
	{Code: Hardtanh, Arity: 1, Consts: f2, Triton: "_clamp({0}, {c0}, {c1})", Torch: "torch.nn.functional.hardtanh({0}, {c0}, {c1})",
		Deriv: []string{"tl.where(({0} > {c0}) & ({0} < {c1}), 1.0, 0.0)"}},
	{Code: Relu, Arity: 1, Triton: "tl.where({0} < 0.0, 0.0, {0})", Torch: "torch.relu({0})", Deriv: []string{"tl.where({y} > 0.0, 1.0, 0.0)"}},
	{Code: LeakyRelu, Arity: 1, Consts: f1, Triton: "tl.where({0} > 0.0, {0}, {0} * {c0})", Torch: "torch.nn.functional.leaky_relu({0}, {c0})",
		Deriv: []string{"tl.where({0} > 0.0, 1.0, {c0})"}},
	// elu(x, alpha, scale, input_scale)
	{Code: Elu, Arity: 1, Consts: []ConstKind{ConstFloat, ConstFloat, ConstFloat},
		Triton: "tl.where({0} > 0.0, {0} * {c1}, (tl.exp({0} * {c2}) - 1.0) * ({c0} * {c1}))", Torch: "torch.ops.aten.elu({0}, {c0}, {c1}, {c2})",
		Deriv: []string{"tl.where({0} > 0.0, {c1}, tl.exp({0} * {c2}) * ({c0} * {c1} * {c2}))"}},
	{Code: Gelu, Arity: 1, Triton: "_gelu_erf({0})", Torch: "torch.nn.functional.gelu({0})",
		Deriv: []string{"0.5 * (1.0 + tl.math.erf({0} * 0.7071067811865476)) + {0} * 0.3989422804014327 * tl.exp(-0.5 * {0} * {0})"}},
	{Code: GeluTanh, Arity: 1, Triton: "_gelu_tanh({0})", Torch: "torch.nn.functional.gelu({0}, approximate=\"tanh\")",
		Deriv: []string{"_dgelu_tanh({0})"}},
	{Code: Silu, Arity: 1, Triton: "{0} * _sigmoid({0})", Torch: "torch.nn.functional.silu({0})",
		Deriv: []string{"_sigmoid({0}) * (1.0 + {0} * (1.0 - _sigmoid({0})))"}},
	{Code: Mish, Arity: 1, Triton: "{0} * _tanh(_softplus({0}, 1.0, 20.0))", Torch: "torch.nn.functional.mish({0})",
		Deriv: []string{"_dmish({0})"}},
	{Code: Sigmoid, Arity: 1, Triton: "_sigmoid({0})", Torch: "torch.sigmoid({0})", Deriv: []string{"{y} * (1.0 - {y})"}},
	{Code: Tanh, Arity: 1, Triton: "_tanh({0})", Torch: "torch.tanh({0})", Deriv: []string{"1.0 - {y} * {y}"}},
	// softplus(x, beta, threshold)
	{Code: Softplus, Arity: 1, Consts: f2, Triton: "_softplus({0}, {c0}, {c1})", Torch: "torch.nn.functional.softplus({0}, {c0}, {c1})",
		Deriv: []string{"tl.where({0} * {c0} > {c1}, 1.0, _sigmoid({0} * {c0}))"}},
	{Code: Hardswish, Arity: 1, Triton: "{0} * _clamp({0} + 3.0, 0.0, 6.0) / 6.0", Torch: "torch.nn.functional.hardswish({0})",
		Deriv: []string{"tl.where({0} <= -3.0, 0.0, tl.where({0} < 3.0, {0} / 3.0 + 0.5, 1.0))"}},
	{Code: Hardsigmoid, Arity: 1, Triton: "_clamp({0} + 3.0, 0.0, 6.0) / 6.0", Torch: "torch.nn.functional.hardsigmoid({0})",
		Deriv: []string{"tl.where(({0} > -3.0) & ({0} < 3.0), 1.0 / 6.0, 0.0)"}},
	{Code: Exp, Arity: 1, Triton: "tl.exp({0})", Torch: "torch.exp({0})", Deriv: []string{"{y}"}},
	{Code: Log, Arity: 1, Triton: "tl.log({0})", Torch: "torch.log({0})", Deriv: []string{"1.0 / {0}"}},
	{Code: Sqrt, Arity: 1, Triton: "tl.sqrt({0})", Torch: "torch.sqrt({0})", Deriv: []string{"0.5 / {y}"}},
	{Code: Rsqrt, Arity: 1, Triton: "1.0 / tl.sqrt({0})", Torch: "torch.rsqrt({0})", Deriv: []string{"-0.5 * {y} * {y} * {y}"}},
	// rotary tables (emb.cos(), emb.sin()); tl.cos / tl.sin as builtins
	{Code: Cos, Arity: 1, Triton: "tl.cos({0})", Torch: "torch.cos({0})", Deriv: []string{"-tl.sin({0})"}},
	{Code: Sin, Arity: 1, Triton: "tl.sin({0})", Torch: "torch.sin({0})", Deriv: []string{"tl.cos({0})"}},
	{Code: Pow, Arity: 1, Consts: f1, Triton: "_pow({0}, {c0})", Torch: "torch.pow({0}, {c0})", Deriv: []string{"_dpow({0}, {c0})"},
		check: checkPow},
	{Code: Abs, Int: true, Arity: 1, Triton: "tl.abs({0})", Torch: "torch.abs({0})", Deriv: []string{"tl.where({0} > 0.0, 1.0, tl.where({0} < 0.0, -1.0, 0.0))"}},
	{Code: Neg, Int: true, Arity: 1, Triton: "-{0}", Torch: "torch.neg({0})", Deriv: []string{"-1.0"}},
	{Code: Reciprocal, Arity: 1, Triton: "1.0 / {0}", Torch: "torch.reciprocal({0})", Deriv: []string{"-{y} * {y}"}},
	// reductions over the last dim (a program's last step); the constant is keepdim
	{Code: Sum, Arity: 1, Consts: b1, Reduce: "sum", Torch: "torch.sum({0}, -1, keepdim={c0}, dtype={dt})"},
	{Code: Mean, Arity: 1, Consts: b1, Reduce: "mean", Torch: "torch.mean({0}, -1, keepdim={c0}, dtype={dt})"},
	{Code: Amax, Arity: 1, Consts: b1, Reduce: "max", Torch: "torch.amax({0}, -1, keepdim={c0})"},
	{Code: Amin, Arity: 1, Consts: b1, Reduce: "min", Torch: "torch.amin({0}, -1, keepdim={c0})"},
	{Code: Logsumexp, Arity: 1, Consts: b1, Reduce: "logsumexp", Torch: "torch.logsumexp({0}, -1, keepdim={c0})"},
	{Code: Softmax, Arity: 1, Reduce: "softmax", FullShape: true, Torch: "torch.softmax({0}, -1, dtype={dt})"},
	{Code: LogSoftmax, Arity: 1, Reduce: "log_softmax", FullShape: true, Torch: "torch.log_softmax({0}, -1, dtype={dt})"},
}

var table = func() map[Code]*Op {
	m := make(map[Code]*Op, len(Table))
	for _, op := range Table {
		m[op.Code] = op
	}
	return m
}()

// Lookup returns code's table entry.
func Lookup(code Code) (*Op, bool) {
	op, ok := table[code]
	return op, ok
}

// kinkRE matches an operand or the result compared with a literal number in an op's Triton
// or derivative expression.
var kinkRE = regexp.MustCompile(`\{[0-9y]\}\s*(?:<=|>=|==|!=|<|>)\s*(-?[0-9]+(?:\.[0-9]+)?)`)

// Kinks are the values at which the op's result or its derivative switches branch, read from
// its expressions (hardswish's -3 and 3, relu's 0): where a kernel's comparison there is not
// eager's (hardswish's derivative at 3 is 1 in ATen, (3/3 + 0.5) = 1.5 with a <= 3), only an
// input at the point itself tells, and random inputs never are. The verifier's planted case
// writes them into the inputs beside the program's numbers (codegen's CONSTANTS).
func (op *Op) Kinks() []float64 {
	var out []float64
	seen := map[float64]bool{}
	for _, e := range append([]string{op.Triton}, op.Deriv...) {
		for _, m := range kinkRE.FindAllStringSubmatch(e, -1) {
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil || seen[v] {
				continue
			}
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// Codes lists the table's codes, in table order.
func Codes() []Code {
	out := make([]Code, len(Table))
	for i, op := range Table {
		out[i] = op.Code
	}
	return out
}

func checkDropout(s Step) error {
	p, train := float64(s.Consts[0]), s.Consts[1] == 1
	if p < 0 || p > 1 {
		return errors.New("dropout probability outside [0, 1]")
	}
	if train && p > 0 {
		return errors.New("a dropout that draws a random mask (p > 0 in training) is not replayable")
	}
	return nil
}

func checkDropoutKeep(s Step) error {
	p, scale := float64(s.Consts[0]), float64(s.Consts[1])
	if !(p > 0 && p < 1) {
		return errors.New("a dropout with a keep mask has p in (0, 1)")
	}
	if scale != DropoutScale(p) {
		return errors.New("a dropout's scale is not 1 / (1 - p)")
	}
	return nil
}

// DropoutScale is the scale ATen's dropout multiplies kept elements by: 1 / (1 - p), in
// float64 (the kernels write it as a float literal, fp32 there as ATen's accscalar).
func DropoutScale(p float64) float64 { return 1 / (1 - p) }

func checkPow(s Step) error {
	if c := float64(s.Consts[0]); math.IsInf(c, 0) || c > 1e6 || c < -1e6 {
		return errors.New("exponent out of range")
	}
	return nil
}
