package program

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestTable: every entry's templates name only its own operands and constants, an
// elementwise op has a Triton expression and one derivative slot per operand (a comparison
// or a reduction none), the first filled but for where's condition,
// and codes are unique plain words (they become folder names).
func TestTable(t *testing.T) {
	ph := regexp.MustCompile(`\{([^}]*)\}`)
	word := regexp.MustCompile(`^[a-z_]+$`)
	seen := map[Code]bool{}
	for _, op := range Table {
		if seen[op.Code] || !word.MatchString(string(op.Code)) {
			t.Errorf("%q: duplicate or not a plain word", op.Code)
		}
		seen[op.Code] = true
		if (op.Triton == "") != (op.Reduce != "") || op.Torch == "" {
			t.Errorf("%s: want a Triton expression exactly when elementwise, and an eager one", op.Code)
		}
		differentiable := op.Reduce == "" && !op.Compare
		if differentiable && len(op.Deriv) != op.Arity || !differentiable && len(op.Deriv) != 0 {
			t.Errorf("%s: %d derivatives for %d operands (an elementwise op has one per operand, a comparison or a reduction none)",
				op.Code, len(op.Deriv), op.Arity)
		}
		if differentiable && op.Deriv[0] == "" && op.Code != Where {
			t.Errorf("%s: no derivative for its first operand", op.Code)
		}
		for _, tmpl := range append([]string{op.Triton, op.Torch}, op.Deriv...) {
			for _, m := range ph.FindAllStringSubmatch(tmpl, -1) {
				k := m[1]
				switch {
				case k == "dt" || k == "y":
				case strings.HasPrefix(k, "c"):
					if i, err := strconv.Atoi(k[1:]); err != nil || i >= len(op.Consts) {
						t.Errorf("%s: %s names constant %s of %d", op.Code, tmpl, k, len(op.Consts))
					}
				default:
					if i, err := strconv.Atoi(k); err != nil || i >= op.Arity {
						t.Errorf("%s: %s names operand %s of %d", op.Code, tmpl, k, op.Arity)
					}
				}
			}
		}
	}
}

func TestKinks(t *testing.T) {
	for _, tt := range []struct {
		code Code
		want []float64
	}{
		{Hardswish, []float64{-3, 3}},
		{Hardsigmoid, []float64{-3, 3}},
		{Relu, []float64{0}},
		{LeakyRelu, []float64{0}},
		{Elu, []float64{0}},
		{Abs, []float64{0}},
		{Add, nil},
		{Clamp, nil}, // its bounds are constants, planted as the program's numbers
		{Softplus, nil},
	} {
		op, ok := Lookup(tt.code)
		if !ok {
			t.Fatalf("%s: not in the table", tt.code)
		}
		if got := op.Kinks(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Kinks() = %v, want %v", tt.code, got, tt.want)
		}
	}
}

func TestNumJSON(t *testing.T) {
	for _, v := range []float64{math.Inf(-1), math.Inf(1), 0.125, -3} {
		b, err := json.Marshal(Num(v))
		if err != nil {
			t.Fatal(err)
		}
		var n Num
		if err := json.Unmarshal(b, &n); err != nil || float64(n) != v {
			t.Errorf("%v: %s read back as %v (%v)", v, b, n, err)
		}
	}
	if _, err := json.Marshal(Num(math.NaN())); err == nil {
		t.Error("NaN marshalled")
	}
	var n Num
	for _, s := range []string{`"nan"`, `"1e3"`, `"os.system"`, `true`} {
		if err := json.Unmarshal([]byte(s), &n); err == nil {
			t.Errorf("%s read as a number", s)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := `{"dims":[4,8],"inputs":[{"dtype":"bf16","dims":[4,8]},{"dtype":"bool","dims":[8]}],
		"steps":[{"op":"masked_fill","args":[{"in":0},{"in":1},{"num":"-inf"}],"dtype":"bf16"},
		{"op":"softmax","args":[{"step":0}],"dtype":"fp32"}],"outputs":[1]}`
	tests := []struct{ name, from, to, err string }{
		{"valid", "", "", ""},
		{"unknown op", `"op":"softmax"`, `"op":"softmax2"`, "not an op of the table"},
		{"later step", `{"step":0}`, `{"step":1}`, "not an earlier step"},
		{"input out of range", `{"in":1}`, `{"in":2}`, "out of range"},
		{"two kinds in one operand", `{"in":1}`, `{"in":1,"num":2}`, "exactly one"},
		{"bad dtype", `"dtype":"bool","dims":[8]`, `"dtype":"int32","dims":[8]`, "unknown dtype"},
		{"no broadcast", `"dims":[8]}`, `"dims":[3]}`, "does not broadcast"},
		{"rank above main", `"dims":[8]}`, `"dims":[1,1,8]}`, "rank"},
		{"outputs miss the last", `"outputs":[1]`, `"outputs":[0]`, "end with the last step"},
		{"a number first", `[{"in":0},{"in":1},{"num":"-inf"}]`, `[{"num":1},{"in":1},{"in":0}]`, "operand 0 must be a tensor"},
		{"bool from arithmetic", `"op":"softmax","args":[{"step":0}],"dtype":"fp32"`, `"op":"softmax","args":[{"step":0}],"dtype":"bool"`, "want a float"},
		{"zero dim", `"dims":[4,8],"inputs"`, `"dims":[0,8],"inputs"`, "out of range"},
	}
	for _, tc := range tests {
		js := ok
		if tc.from != "" {
			if !strings.Contains(js, tc.from) {
				t.Fatalf("%s: %q not in the program", tc.name, tc.from)
			}
			js = strings.Replace(js, tc.from, tc.to, 1)
		}
		var p Program
		if err := json.Unmarshal([]byte(js), &p); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err := p.Validate()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.err)
		}
	}
}

func TestNameAndBytes(t *testing.T) {
	var p Program
	js := `{"dims":[4,8],"inputs":[{"dtype":"bf16","dims":[4,8]},{"dtype":"bf16","dims":[8]}],
		"steps":[{"op":"add","args":[{"in":0},{"in":1}],"consts":[1],"dtype":"bf16"},
		{"op":"sum","args":[{"step":0}],"consts":[1],"dtype":"fp32"}],"outputs":[0,1]}`
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if n := p.Name(BF16); !regexp.MustCompile(`^generic-add_sum-bf16-4x8-[0-9a-f]{8}$`).MatchString(n) {
		t.Errorf("name %q", n)
	}
	// reads 32 + 8 bf16, writes 32 bf16 and 4 fp32 sums
	if b, w := p.Bytes(); b != 2*(32+8)+2*32+4*4 || w != 2*32+4*4 {
		t.Errorf("bytes %d, writes %d", b, w)
	}
}

// TestBackward: what a program's fused backward computes, or why it has none.
func TestBackward(t *testing.T) {
	x, m := InArg(0), InArg(1)
	inputs := []Input{{DType: FP32, Dims: []int64{4, 8}}, {DType: Bool, Dims: []int64{8}}}
	cases := []struct {
		name    string
		steps   []Step
		outputs []int
		err     string
		ins     []bool
		outs    []bool
	}{
		{"pointwise", []Step{{Op: Sigmoid, Args: []Arg{x}, DType: FP32}, {Op: MaskedFill, Args: []Arg{StepArg(0), m, NumArg(0)}, DType: FP32}},
			[]int{0, 1}, "", []bool{true, false}, []bool{true, true}},
		{"a bool output carries none", []Step{{Op: Gt, Args: []Arg{x, NumArg(0)}, DType: Bool}, {Op: Relu, Args: []Arg{x}, DType: FP32},
			{Op: Where, Args: []Arg{m, StepArg(1), NumArg(0)}, DType: FP32}}, []int{0, 2}, "", []bool{true, false}, []bool{false, true}},
		{"a row program", []Step{{Op: MaskedFill, Args: []Arg{x, m, NumArg(math.Inf(-1))}, DType: FP32}, {Op: Softmax, Args: []Arg{StepArg(0)}, DType: FP32}},
			[]int{1}, "ending in softmax", nil, nil},
		{"nothing to differentiate", []Step{{Op: Where, Args: []Arg{m, NumArg(1), NumArg(0)}, DType: FP32},
			{Op: Gt, Args: []Arg{x, NumArg(0)}, DType: Bool}}, []int{0, 1}, "no output depends", nil, nil},
	}
	for _, c := range cases {
		p := &Program{Dims: []int64{4, 8}, Inputs: inputs, Steps: c.steps, Outputs: c.outputs}
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		g, err := p.Backward()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one with %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if fmt.Sprint(g.Inputs) != fmt.Sprint(c.ins) || fmt.Sprint(g.Outputs) != fmt.Sprint(c.outs) {
			t.Errorf("%s: inputs %v outputs %v, want %v %v", c.name, g.Inputs, g.Outputs, c.ins, c.outs)
		}
	}
}

// TestBackwardAliasAndBytes: which inputs a gradient reaches, which gradient is an output's
// gradient exactly (no derivative reads the input, no bytes written where its dtype is the
// output gradient's), and the backward's bytes that follow, on [2, 4] (8 elements).
func TestBackwardAliasAndBytes(t *testing.T) {
	x0, x1, x2 := InArg(0), InArg(1), InArg(2)
	full, row := []int64{2, 4}, []int64{4}
	f32 := func(dims []int64) Input { return Input{DType: FP32, Dims: dims} }
	cases := []struct {
		name          string
		inputs        []Input
		steps         []Step
		reached       []bool
		alias         []int
		bytes, writes int64
	}{
		// dy, x0 and x1 read (x0 for x1's gradient, x1 for x0's), gx0 and gx1 written; x2's
		// gradient is dy itself
		{"a residual add", []Input{f32(full), f32(row), f32(full)},
			[]Step{{Op: Mul, Args: []Arg{x0, x1}, DType: FP32}, {Op: Add, Args: []Arg{StepArg(0), x2}, Consts: []Num{1}, DType: FP32}},
			[]bool{true, true, true}, []int{-1, -1, 0}, 32 + 32 + 16 + 32 + 16, 32 + 16},
		// alpha 2: x2's gradient is 2 dy, written (and x2 counted as read)
		{"add with alpha 2", []Input{f32(full), f32(row), f32(full)},
			[]Step{{Op: Mul, Args: []Arg{x0, x1}, DType: FP32}, {Op: Add, Args: []Arg{StepArg(0), x2}, Consts: []Num{2}, DType: FP32}},
			[]bool{true, true, true}, []int{-1, -1, -1}, 32 + 32 + 16 + 32 + 32 + 16 + 32, 32 + 16 + 32},
		// a bf16 residual under an fp32 output: its gradient is dy rounded, a tensor of its own
		{"a residual of another dtype", []Input{f32(full), f32(row), {DType: BF16, Dims: full}},
			[]Step{{Op: Mul, Args: []Arg{x0, x1}, DType: FP32}, {Op: Add, Args: []Arg{StepArg(0), x2}, Consts: []Num{1}, DType: FP32}},
			[]bool{true, true, true}, []int{-1, -1, 0}, 32 + 32 + 16 + 32 + 16 + 16, 32 + 16 + 16},
		// x0 - x1: x1's derivative is -1; x0 * 1.0 on the way is exactly 1
		{"sub, and a product with 1", []Input{f32(full), f32(full)},
			[]Step{{Op: Mul, Args: []Arg{x0, NumArg(1)}, DType: FP32}, {Op: Sub, Args: []Arg{StepArg(0), x1}, Consts: []Num{1}, DType: FP32}},
			[]bool{true, true}, []int{0, -1}, 32 + 32 + 32, 32},
		// x0 + x0: two terms, so not one output gradient exactly
		{"an input read twice", []Input{f32(full)},
			[]Step{{Op: Add, Args: []Arg{x0, x0}, Consts: []Num{1}, DType: FP32}},
			[]bool{true}, []int{-1}, 32 + 32 + 32, 32},
	}
	for _, c := range cases {
		p := &Program{Dims: full, Inputs: c.inputs, Steps: c.steps, Outputs: []int{len(c.steps) - 1}}
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		g, err := p.Backward()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if fmt.Sprint(g.Reached) != fmt.Sprint(c.reached) || fmt.Sprint(g.Alias) != fmt.Sprint(c.alias) {
			t.Errorf("%s: reached %v alias %v, want %v %v", c.name, g.Reached, g.Alias, c.reached, c.alias)
		}
		if b, w := p.BackwardBytes(g); b != c.bytes || w != c.writes {
			t.Errorf("%s: backward bytes %d (writes %d), want %d (%d)", c.name, b, w, c.bytes, c.writes)
		}
	}
}

// TestGEMMHead: a GEMM head is validated against its op's layout and the program it heads;
// each broken head names what is wrong.
func TestGEMMHead(t *testing.T) {
	base := func() *Program {
		return &Program{Dims: []int64{2, 5, 6}, Inputs: []Input{{DType: BF16, Dims: []int64{2, 5, 6}}},
			Steps: []Step{{Op: Tanh, Args: []Arg{InArg(0)}, DType: BF16}}, Outputs: []int{0},
			GEMM: &GEMM{Op: Linear, X: []int64{2, 5, 7}, W: []int64{6, 7}, Bias: []int64{6}, DType: BF16}}
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("a valid head: %v", err)
	}
	if b, m, n, k := base().GEMM.MNK(); b != 1 || m != 10 || n != 6 || k != 7 || base().GEMM.FLOPs() != 2*10*6*7 {
		t.Errorf("MNK = %d %d %d %d", b, m, n, k)
	}
	for _, c := range []struct {
		name, want string
		edit       func(p *Program)
	}{
		{"unknown op", "not a GEMM form", func(p *Program) { p.GEMM.Op = "conv" }},
		{"K disagrees", "disagree on K", func(p *Program) { p.GEMM.W = []int64{6, 8} }},
		{"weight as [K, N] for linear", "disagree on K", func(p *Program) { p.GEMM.W = []int64{7, 6} }},
		{"bias of the wrong size", "bias", func(p *Program) { p.GEMM.Bias = []int64{7} }},
		{"mm with a bias", "takes no bias", func(p *Program) {
			p.GEMM.Op, p.GEMM.X, p.GEMM.W = MM, []int64{10, 7}, []int64{7, 6}
			p.Dims, p.Inputs[0].Dims = []int64{10, 6}, []int64{10, 6}
		}},
		{"addmm without a bias", "without its bias", func(p *Program) {
			p.GEMM.Op, p.GEMM.X, p.GEMM.W, p.GEMM.Bias = Addmm, []int64{10, 7}, []int64{7, 6}, nil
			p.Dims, p.Inputs[0].Dims = []int64{10, 6}, []int64{10, 6}
		}},
		{"bmm batch mismatch", "bmm", func(p *Program) {
			p.GEMM.Op, p.GEMM.W, p.GEMM.Bias = BMM, []int64{3, 7, 6}, nil
		}},
		{"output not the main shape", "not the main shape", func(p *Program) { p.GEMM.X = []int64{2, 4, 7} }},
		{"input 0 another dtype", "not the GEMM's output", func(p *Program) { p.Inputs[0].DType = FP32 }},
		{"integer dtype", "want fp32", func(p *Program) { p.GEMM.DType = "int8" }},
		{"a reduction after it", "reduction", func(p *Program) {
			p.Steps = append(p.Steps, Step{Op: Sum, Args: []Arg{StepArg(0)}, Consts: []Num{0}, DType: BF16})
			p.Outputs = []int{1}
		}},
	} {
		p := base()
		c.edit(p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %q", c.name, err, c.want)
		}
	}
	// the head changes the program's key and comes first in its name
	p, q := base(), base()
	q.GEMM = nil
	if p.Key() == q.Key() || !strings.HasPrefix(p.Name(BF16), "generic-linear_tanh-bf16-") {
		t.Errorf("key %s vs %s, name %s", p.Key(), q.Key(), p.Name(BF16))
	}
}

func TestRound(t *testing.T) {
	for _, c := range []struct {
		d    DType
		v    float64
		want float64
	}{
		{BF16, 0.1, 0.10009765625},
		{FP16, 0.1, 0.0999755859375},
		{FP32, 0.1, float64(float32(0.1))},
		{BF16, 1, 1},
		{BF16, -3.0, -3.0},
		{BF16, 1 + 1.0/256, 1},             // a tie: to even
		{BF16, 1 + 3.0/256, 1 + 1.0/64},    // a tie: to even (up)
		{FP16, 65504, 65504},               // fp16's largest
		{FP16, 65519, 65504},               // below the midpoint to 65536
		{FP16, 65520, math.Inf(1)},         // at it: overflow
		{FP16, -1e6, math.Inf(-1)},         //
		{FP16, 1e-8, 0},                    // below half the least subnormal (2^-24)
		{FP16, 6e-8, math.Ldexp(1, -24)},   // the least subnormal
		{BF16, 1e39, math.Inf(1)},          // beyond float32 itself
		{BF16, math.Inf(-1), math.Inf(-1)}, //
	} {
		if got := c.d.Round(c.v); got != c.want {
			t.Errorf("%s.Round(%g) = %.17g, want %.17g", c.d, c.v, got, c.want)
		}
	}
}

// TestNumberInput: a number the trace does not record (Input.Number) is a rank-0 fp32 input,
// operand 1 of an arithmetic op only, and carries no gradient.
func TestNumberInput(t *testing.T) {
	x, n := InArg(0), InArg(1)
	num := Input{DType: FP32, Dims: []int64{}, Number: true}
	full := Input{DType: BF16, Dims: []int64{4, 8}}
	cases := []struct {
		name   string
		inputs []Input
		steps  []Step
		err    string
	}{
		{"x * n", []Input{full, num}, []Step{{Op: Mul, Args: []Arg{x, n}, DType: BF16}}, ""},
		{"sqrt(x + n) / n", []Input{full, num}, []Step{{Op: Add, Args: []Arg{x, n}, Consts: []Num{1}, DType: BF16},
			{Op: Sqrt, Args: []Arg{StepArg(0)}, DType: BF16}, {Op: Div, Args: []Arg{StepArg(1), n}, DType: BF16}}, ""},
		{"a comparison", []Input{full, num}, []Step{{Op: Gt, Args: []Arg{x, n}, DType: Bool}}, "operand 1 of add, sub, rsub, mul or div only"},
		{"operand 0", []Input{full, num}, []Step{{Op: Mul, Args: []Arg{n, x}, DType: BF16}}, "operand 1 of add"},
		{"where's branch", []Input{{DType: Bool, Dims: []int64{4, 8}}, num, full},
			[]Step{{Op: Where, Args: []Arg{x, n, InArg(2)}, DType: BF16}}, "operand 1 of add"},
		{"rank 1", []Input{full, {DType: FP32, Dims: []int64{8}, Number: true}}, []Step{{Op: Mul, Args: []Arg{x, n}, DType: BF16}}, "rank 0 and dtype fp32"},
		{"bf16", []Input{full, {DType: BF16, Dims: []int64{}, Number: true}}, []Step{{Op: Mul, Args: []Arg{x, n}, DType: BF16}}, "rank 0 and dtype fp32"},
		{"input 0", []Input{num, full}, []Step{{Op: Mul, Args: []Arg{x, n}, DType: BF16}}, "not input 0"},
	}
	for _, c := range cases {
		p := &Program{Dims: []int64{4, 8}, Inputs: c.inputs, Steps: c.steps, Outputs: []int{len(c.steps) - 1}}
		err := p.Validate()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error with %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := fmt.Sprint(p.Numbers()); got != "[1]" {
			t.Errorf("%s: Numbers %s, want [1]", c.name, got)
		}
		g, err := p.Backward()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if g.Inputs[1] || g.Reached[1] || !g.Inputs[0] || !g.Reached[0] {
			t.Errorf("%s: gradients of (x, n): inputs %v reached %v, want x's only", c.name, g.Inputs, g.Reached)
		}
		b, _ := json.Marshal(p)
		if !strings.Contains(string(b), `"number":true`) {
			t.Errorf("%s: JSON %s does not mark the number input", c.name, b)
		}
	}
}

// TestValidateInt: int64 values where eager computes them exactly (arithmetic, selection,
// casts, comparisons with a tensor or a number), and the refusals: a float op or a float
// operand in an int64 step, a number or constant that is not an integer there or marked an
// int, a reduction of int64 values; no fused backward.
func TestValidateInt(t *testing.T) {
	// OPT's decode positions: (cumsum * mask - 1).long() + 2; a causal mask from two
	// position tensors: where(q >= k, 0, -inf)
	ok := `{"dims":[4,8],"inputs":[{"dtype":"fp32","dims":[4,8]},{"dtype":"fp32","dims":[4,8]},{"dtype":"int64","dims":[],"number":true},{"dtype":"int64","dims":[4,1]},{"dtype":"int64","dims":[8]}],
		"steps":[{"op":"mul","args":[{"in":0},{"in":1}],"dtype":"fp32"},
		{"op":"sub","args":[{"step":0},{"in":2}],"consts":[1],"dtype":"fp32"},
		{"op":"cast","args":[{"step":1}],"dtype":"int64"},
		{"op":"add","args":[{"step":2},{"num":2}],"consts":[1],"dtype":"int64"},
		{"op":"ge","args":[{"in":3},{"in":4}],"dtype":"bool"},
		{"op":"where","args":[{"step":4},{"num":0},{"num":"-inf"}],"dtype":"fp32"},
		{"op":"add","args":[{"step":3},{"in":3}],"consts":[1],"dtype":"int64"}],"outputs":[5,6]}`
	tests := []struct{ name, from, to, err string }{
		{"valid", "", "", ""},
		{"a float op on int64", `{"op":"add","args":[{"step":2},{"num":2}],"consts":[1],"dtype":"int64"}`, `{"op":"exp","args":[{"step":2}],"dtype":"int64"}`, "computes floats only"},
		{"a float operand", `{"op":"add","args":[{"step":3},{"in":3}]`, `{"op":"add","args":[{"step":3},{"in":0}]`, "a fp32 value in an int64 step"},
		{"a fractional number", `{"num":2}`, `{"num":2.5}`, "not an integer"},
		{"a huge number", `{"num":2}`, `{"num":1e17}`, "not an integer"},
		{"a fractional alpha", `{"op":"add","args":[{"step":2},{"num":2}],"consts":[1]`, `{"op":"add","args":[{"step":2},{"num":2}],"consts":[0.5]`, "constant 0"},
		{"compared with an int", `{"op":"ge","args":[{"in":3},{"in":4}]`, `{"op":"ge","args":[{"in":4},{"num":3,"int":true}]`, ""},
		{"compared with a float", `{"op":"ge","args":[{"in":3},{"in":4}]`, `{"op":"ge","args":[{"in":4},{"num":3.5}]`, ""},
		{"a fraction marked int", `{"op":"ge","args":[{"in":3},{"in":4}]`, `{"op":"ge","args":[{"in":3},{"num":3.5,"int":true}]`, "marked a Python int"},
		{"a reduction of int64", `"outputs":[5,6]`, `"outputs":[5,6,7]`, ""},
	}
	for _, tc := range tests {
		js := ok
		if tc.from != "" {
			if !strings.Contains(js, tc.from) {
				t.Fatalf("%s: %q not in the program", tc.name, tc.from)
			}
			js = strings.Replace(js, tc.from, tc.to, 1)
		}
		var p Program
		if err := json.Unmarshal([]byte(js), &p); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.name == "a reduction of int64" {
			p.Steps = append(p.Steps, Step{Op: Sum, Args: []Arg{StepArg(6)}, Consts: []Num{0}, DType: FP32})
			p.Outputs = []int{5, 7}
			tc.err = "reduces int64 values"
		}
		err := p.Validate()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.err)
		}
		if tc.name == "valid" {
			if !p.HasInt() {
				t.Error("HasInt: false")
			}
			if _, err := p.Backward(); err == nil || !strings.Contains(err.Error(), "int64") {
				t.Errorf("Backward: %v, want a refusal naming int64", err)
			}
			if b, _ := p.Bytes(); b != (2*32*4)+4*8+8*8+32*4+32*8 {
				t.Errorf("Bytes: %d", b)
			}
		}
	}
}

// TestValidateOutDrop: an output may leave without leading dims of the main shape that are 1
// (program.OutDrop), one entry per output; not dims other than 1, not the reduction's result;
// such a program has no fused backward.
func TestValidateOutDrop(t *testing.T) {
	ok := `{"dims":[1,1,40],"inputs":[{"dtype":"fp32","dims":[40]}],
		"steps":[{"op":"mul","args":[{"in":0},{"num":2}],"dtype":"fp32"},
		{"op":"cast","args":[{"step":0}],"dtype":"bf16"}],"outputs":[0,1],"out_drop":[2,0]}`
	for _, tc := range []struct{ name, from, to, err string }{
		{"valid", "", "", ""},
		{"one entry for two outputs", `"out_drop":[2,0]`, `"out_drop":[2]`, "1 entries for 2 outputs"},
		{"every dim", `"out_drop":[2,0]`, `"out_drop":[3,0]`, "want 0..2"},
		{"a dim that is not 1", `"dims":[1,1,40],`, `"dims":[2,1,40],`, "not all 1"},
	} {
		js := strings.Replace(ok, tc.from, tc.to, 1)
		var p Program
		if err := json.Unmarshal([]byte(js), &p); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err := p.Validate()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.err)
		}
		if tc.name == "valid" {
			if _, err := p.Backward(); err == nil || !strings.Contains(err.Error(), "fewer dims") {
				t.Errorf("Backward: %v, want a refusal naming the output's fewer dims", err)
			}
		}
	}
}

// TestValidateInto: an output that replaces a GEMM's autocast cast (Program.Into) names a GEMM
// of IntoOps and is a cast of an fp32 step to fp16 or bf16, one entry per output, never beside
// a reduction; the program keeps its fused backward (the copy's gradient summed in fp32).
func TestValidateInto(t *testing.T) {
	ok := `{"dims":[4,40],"inputs":[{"dtype":"fp32","dims":[4,40]},{"dtype":"fp32","dims":[40]}],
		"steps":[{"op":"add","args":[{"in":0},{"in":1}],"consts":[1],"dtype":"fp32"},
		{"op":"cast","args":[{"step":0}],"dtype":"bf16"}],"outputs":[0,1],"into":["","linear"]}`
	for _, tc := range []struct{ name, from, to, err string }{
		{"valid", "", "", ""},
		{"one entry for two outputs", `"into":["","linear"]`, `"into":["linear"]`, "1 entries for 2 outputs"},
		{"not a GEMM", `"into":["","linear"]`, `"into":["","relu"]`, "not a GEMM op"},
		{"code in the name", `"into":["","linear"]`, `"into":["","linear\nimport os"]`, "not a GEMM op"},
		{"not a cast", `"into":["","linear"]`, `"into":["linear",""]`, "want a cast to fp16 or bf16"},
		{"a cast to fp32", `"dtype":"bf16"}]`, `"dtype":"fp32"}]`, "want a cast to fp16 or bf16"},
		{"a cast of an input", `"args":[{"step":0}],"dtype":"bf16"`, `"args":[{"in":0}],"dtype":"bf16"`, "want a cast of an fp32 step"},
	} {
		js := strings.Replace(ok, tc.from, tc.to, 1)
		var p Program
		if err := json.Unmarshal([]byte(js), &p); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err := p.Validate()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.err)
		}
		if tc.name == "valid" {
			if _, err := p.Backward(); err != nil {
				t.Errorf("Backward: %v", err)
			}
		}
	}
	var p Program // beside a reduction
	js := `{"dims":[4,40],"inputs":[{"dtype":"fp32","dims":[4,40]}],
		"steps":[{"op":"cast","args":[{"in":0}],"dtype":"fp32"},{"op":"cast","args":[{"step":0}],"dtype":"bf16"},
		{"op":"sum","args":[{"step":0}],"consts":[0],"dtype":"fp32"}],"outputs":[1,2],"into":["linear",""]}`
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "beside a reduction") {
		t.Errorf("beside a reduction: got %v", err)
	}
}

// TestWithBias: a GEMM's bias taken by a chain (Input.Bias) is added to input 0 by a new step 0,
// the steps that read input 0 read the sum, the outputs move up, and the backward takes its
// gradient; a bias read elsewhere, of two wide dims, of another dtype than its GEMM output, a
// second one, or added otherwise does not validate.
func TestWithBias(t *testing.T) {
	p := &Program{
		Dims:   []int64{2, 4, 3, 3},
		Inputs: []Input{{DType: BF16, Dims: []int64{2, 4, 3, 3}}, {DType: FP32, Dims: []int64{1, 4, 1, 1}}, {DType: FP32, Dims: []int64{2, 4, 3, 3}}},
		Steps: []Step{
			{Op: Mul, Args: []Arg{InArg(0), InArg(1)}, DType: FP32},
			{Op: Add, Args: []Arg{StepArg(0), InArg(2)}, Consts: []Num{1}, DType: FP32},
		},
		Outputs: []int{1},
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	q, err := p.WithBias(Input{DType: BF16, Dims: []int64{1, 4, 1, 1}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if q.BiasInput() != 3 || len(q.Steps) != 3 || q.Steps[0].Op != Add || *q.Steps[1].Args[0].Step != 0 ||
		*q.Steps[2].Args[0].Step != 1 || q.Outputs[0] != 2 || p.BiasInput() != -1 || len(p.Steps) != 2 {
		t.Errorf("WithBias: %+v (p left as it was: %+v)", q, p)
	}
	if _, err := q.Backward(); err != nil { // the bias's gradient: a sum over the dims it broadcasts along
		t.Errorf("backward: %v", err)
	}
	if _, err := p.WithBias(Input{DType: FP32, Dims: []int64{1, 4, 1, 1}}, 0); err == nil {
		t.Error("a bias of another dtype than the GEMM output's validates")
	}
	// the GEMM's output may be any input (a residual add reads it second)
	r, err := p.WithBias(Input{DType: FP32, Dims: []int64{1, 4, 1, 1}}, 2)
	if err != nil || *r.Steps[0].Args[0].In != 2 || *r.Steps[2].Args[1].Step != 0 || *r.Steps[1].Args[0].In != 0 {
		t.Errorf("WithBias of input 2: %+v, %v", r, err)
	}
	for name, bad := range map[string]func(*Program){
		"read by a later step": func(q *Program) { q.Steps[2].Args[1] = InArg(3) },
		"two wide dims":        func(q *Program) { q.Inputs[3].Dims = []int64{2, 4, 1, 1} },
		"a second bias":        func(q *Program) { q.Inputs[2].Bias = true },
		"step 0 subtracts it":  func(q *Program) { q.Steps[0].Op = Sub },
	} {
		c := *q
		c.Inputs, c.Steps = slices.Clone(q.Inputs), slices.Clone(q.Steps)
		c.Steps[2].Args = slices.Clone(q.Steps[2].Args)
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: validates", name)
		}
	}
}
