// Package program is the op program of a generic chain: a chain of memory-bound PyTorch ops
// that no catalog pattern claims, written as op codes from a fixed table (Table) and
// validated numbers, nothing else.
//
// It sits between patterns and codegen in the one-way data flow trace -> patterns -> codegen
// -> verify -> bench -> report: patterns builds a Program from a dataflow region of the
// trace (which op reads which op's output or an external input, the inputs' broadcast shapes,
// the scalar arguments from Concrete Inputs, the dtypes), the analysis JSON carries it, and
// codegen renders it as one Triton kernel and its eager PyTorch reference. It imports nothing
// of the project. A Program read back from JSON is untrusted: Validate checks every code,
// reference, number and dtype before anything is rendered from it.
package program

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// DType is an element type a program value may have.
type DType string

const (
	FP32 DType = "fp32"
	FP16 DType = "fp16"
	BF16 DType = "bf16"
	Bool DType = "bool"
	I64  DType = "int64"
)

// IsFloat reports whether d is a floating type (fp32, fp16, bf16).
func (d DType) IsFloat() bool { return d == FP32 || d == FP16 || d == BF16 }

// Size is the element size in bytes (0 for an unknown dtype).
func (d DType) Size() int64 {
	switch d {
	case FP32:
		return 4
	case FP16, BF16:
		return 2
	case Bool:
		return 1
	case I64:
		return 8
	}
	return 0
}

func (d DType) valid() bool { return d.IsFloat() || d == Bool || d == I64 }

// MaxExactInt bounds the integers a program writes for its int64 steps (numbers, constants):
// every integer up to it in magnitude is exact in the float64 the program holds it in.
const MaxExactInt = 1 << 53

// integral reports whether v is an integer within MaxExactInt.
func integral(v float64) bool { return v == math.Trunc(v) && math.Abs(v) <= MaxExactInt }

// Round is v as eager PyTorch converts a Python scalar to a tensor of type d (c10's
// Scalar::to: the double to float, then to half or bfloat16, rounding to nearest even each
// time; beyond the type's range +-inf). A comparison, or clamp's backward mask, between a
// 16-bit tensor and a scalar compares with the scalar so rounded: x > 0.1 on bfloat16 x is
// false at x = 0.10009765625, bfloat16's 0.1. Other types: float32(v).
func (d DType) Round(v float64) float64 {
	f := float64(float32(v))
	var mant, emin int // stored mantissa bits, least normal exponent
	switch d {
	case FP16:
		mant, emin = 10, -14
	case BF16:
		mant, emin = 7, -126
	default:
		return f
	}
	if f == 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return f
	}
	_, e := math.Frexp(f) // f = m * 2^e, 0.5 <= |m| < 1
	e--
	if e < emin {
		e = emin // subnormal: the least normal exponent's spacing
	}
	ulp := math.Ldexp(1, e-mant)
	r := math.RoundToEven(f/ulp) * ulp
	maxFinite := math.Ldexp(2-math.Ldexp(1, -mant), maxExp[d])
	if math.Abs(r) > maxFinite {
		return math.Copysign(math.Inf(1), r)
	}
	return r
}

var maxExp = map[DType]int{FP16: 15, BF16: 127}

// Program is one generic chain: its external inputs, its steps in the traced order, and the
// steps whose values leave the chain.
type Program struct {
	// Dims is the main shape: every input broadcasts to it and every elementwise step's
	// value is computed at it. A final reduction (Op.Reduce) reduces its last dim.
	Dims   []int64 `json:"dims"`
	Inputs []Input `json:"inputs"`
	Steps  []Step  `json:"steps"`
	// Outputs are the steps whose values the fused kernel writes: the last step and those
	// read outside the chain, in increasing order.
	Outputs []int `json:"outputs"`
	// OutDrop gives, per entry of Outputs, how many leading dims of the main shape (all 1)
	// that output does not have: a value the chain goes on to read with more dims than it
	// leaves with (a cache position [S] cast on as [1, 1, S]: 2). Empty: none drops any.
	OutDrop []int `json:"out_drop,omitempty"`
	// GEMM, when set, is the chain's head: input 0 is its output, computed in the fused
	// kernel's tiles with the steps as its epilogue (gemm.go).
	GEMM *GEMM `json:"gemm,omitempty"`
	// Into gives, per entry of Outputs, the GEMM op (a word of IntoOps) whose autocast cast of
	// an input that output replaces, "" for none: the output is that cast, a 16-bit copy of an
	// fp32 step, and the caller passes it to the GEMM in place of the fp32 value, which autocast
	// then leaves as it is. Its gradient comes back in 16 bits and is summed in fp32 with the
	// value's others, as eager's ToCopyBackward0 and accumulation do. One output per GEMM: two
	// GEMMs reading one value get a copy each, so their gradients are not summed in 16 bits.
	// Empty: no output is such a cast.
	Into []string `json:"into,omitempty"`
}

// IntoOps are the GEMM ops whose autocast casts a program's output may replace (Into).
var IntoOps = map[string]bool{
	"linear": true, "addmm": true, "mm": true, "matmul": true, "bmm": true, "baddbmm": true,
	"_addmm_activation": true, "addmv": true, "mv": true,
	"conv1d": true, "conv2d": true, "conv3d": true, "convolution": true, "_convolution": true,
	"conv_transpose1d": true, "conv_transpose2d": true, "conv_transpose3d": true,
}

// Input is a tensor the chain reads from outside: its dtype and traced shape, which
// broadcasts to the main shape (right-aligned; each dim equal to the main one or 1; rank 0
// is a 0-dim tensor).
//
// Number marks a number the model passes that the trace does not record: a Python float
// operand (`x * 0.5`), which ATen receives as a wrapped 0-dim double tensor whose value
// neither Concrete Inputs nor the execution trace holds. The generated kernel takes it at
// run time (the caller passes the number; the kernel reads it as a 0-dim fp32 tensor, the
// value eager computes with: float32 of the double), so nothing is guessed. A number input
// has rank 0 and dtype fp32, carries no gradient, and is operand 1 of an arithmetic op
// only (NumberOps), never a comparison's, where eager compares with the number rounded to
// the other operand's type. A Python int operand (`positions - 1`), which ATen receives as a
// wrapped 0-dim int64 tensor, is a number input of dtype int64: the caller passes the int.
//
// Keep marks a training dropout's keep mask (a bool tensor of the dropout's shape, True with
// probability 1 - p): eager's dropout draws it inside, the generated kernel takes it from the
// caller, who draws it (torch.rand_like(x) >= p, or bernoulli_(1 - p) into a bool tensor),
// so the kernel's result is the reference's for the same mask; its only reader is the
// dropout's step (DropoutKeep, operand 1).
//
// Bias marks the bias of the GEMM whose output another input is (a Linear's, through a
// permute that moves its dim): the traced model added it in the GEMM's epilogue; the
// generated kernel adds it (step 0 is add(that input, this one), its only reader), the caller
// running the GEMM without it, so that its gradient (the chain's, summed over the dims it
// broadcasts along) comes from the fused backward, not from the GEMM backward's row sum. A
// float tensor of one dim not 1, in that input's dtype (the GEMM adds its bias in its own
// type), at most one a program, never beside a GEMM head.
type Input struct {
	DType  DType   `json:"dtype"`
	Dims   []int64 `json:"dims"`
	Number bool    `json:"number,omitempty"`
	Keep   bool    `json:"keep,omitempty"`
	Bias   bool    `json:"bias,omitempty"`
}

// checkBias checks input i, a GEMM's bias (Input.Bias): a float tensor of one dim not 1, the
// only bias, no GEMM head, read by step 0 alone, which adds it to another tensor input of its
// dtype (the GEMM's output).
func (p *Program) checkBias(i int) error {
	in := p.Inputs[i]
	wide := 0
	for _, d := range in.Dims {
		if d != 1 {
			wide++
		}
	}
	switch {
	case !in.DType.IsFloat() || in.Number || in.Keep || wide != 1:
		return errors.New("a GEMM's bias is a float tensor of one dim not 1")
	case p.GEMM != nil:
		return errors.New("a GEMM's bias beside a GEMM head (the head takes its own)")
	case slices.IndexFunc(p.Inputs, func(x Input) bool { return x.Bias }) != i:
		return errors.New("a second GEMM bias")
	}
	for k, s := range p.Steps {
		for _, a := range s.Args {
			if a.In != nil && *a.In == i && k != 0 {
				return fmt.Errorf("a GEMM's bias is read by step %d; step 0 alone adds it", k)
			}
		}
	}
	s := p.Steps[0]
	if s.Op != Add || len(s.Args) != 2 || s.Args[0].In == nil || *s.Args[0].In == i || s.Args[1].In == nil || *s.Args[1].In != i ||
		len(s.Consts) != 1 || s.Consts[0] != 1 || s.DType != in.DType {
		return errors.New("a GEMM's bias: step 0 must be add(the GEMM's output, the bias) with alpha 1, in their dtype")
	}
	if out := p.Inputs[*s.Args[0].In]; out.DType != in.DType || out.Number || out.Keep || out.Bias {
		return errors.New("a GEMM's bias: the input it is added to is a tensor of its dtype")
	}
	return nil
}

// WithBias returns a copy of p that takes bias, a GEMM's bias (Input.Bias) of input of's
// dtype (of: the GEMM's output), as a new last input, added to input of by a new step 0; the
// steps that read input of read that sum instead, and every step index moves up by one.
func (p *Program) WithBias(bias Input, of int) (*Program, error) {
	if of < 0 || of >= len(p.Inputs) {
		return nil, fmt.Errorf("program: a GEMM's bias of input %d: out of range", of)
	}
	q := *p
	bias.Bias = true
	b := len(p.Inputs)
	q.Inputs = append(slices.Clone(p.Inputs), bias)
	add := Step{Op: Add, Args: []Arg{InArg(of), InArg(b)}, Consts: []Num{1}, DType: bias.DType}
	q.Steps = []Step{add}
	for _, s := range p.Steps {
		t := s
		t.Args = make([]Arg, len(s.Args))
		for k, a := range s.Args {
			switch {
			case a.In != nil && *a.In == of:
				t.Args[k] = StepArg(0)
			case a.Step != nil:
				t.Args[k] = StepArg(*a.Step + 1)
			default:
				t.Args[k] = a
			}
		}
		q.Steps = append(q.Steps, t)
	}
	q.Outputs = make([]int, len(p.Outputs))
	for k, o := range p.Outputs {
		q.Outputs[k] = o + 1
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	return &q, nil
}

// BiasInput is the index of the program's GEMM bias input (Input.Bias), -1 for none.
func (p *Program) BiasInput() int {
	return slices.IndexFunc(p.Inputs, func(in Input) bool { return in.Bias })
}

// NumberOps are the ops a number input (Input.Number) may be operand 1 of.
var NumberOps = map[Code]bool{Add: true, Sub: true, Rsub: true, Mul: true, Div: true}

// Numbers lists the indices of the program's number inputs (Input.Number), in order.
func (p *Program) Numbers() []int {
	var out []int
	for i, in := range p.Inputs {
		if in.Number {
			out = append(out, i)
		}
	}
	return out
}

// Step is one op of the chain: a table code, its operands, its constant parameters (in the
// order the table's Op.Consts gives) and its result's dtype.
type Step struct {
	Op     Code  `json:"op"`
	Args   []Arg `json:"args"`
	Consts []Num `json:"consts,omitempty"`
	DType  DType `json:"dtype"`
}

// Arg is one operand: exactly one of an input, an earlier step, or a number.
//
// Int marks a number that is a Python int (Kineto prints an int Scalar without a point, a
// float one with it: "0" against "0."), where that decides what eager computes: a comparison
// of an int64 tensor with an int compares in int64, with a float in float32. Only an integer
// number within 2**53 may be marked.
type Arg struct {
	In   *int `json:"in,omitempty"`
	Step *int `json:"step,omitempty"`
	Num  *Num `json:"num,omitempty"`
	Int  bool `json:"int,omitempty"`
}

// InArg, StepArg and NumArg build operands.
func InArg(i int) Arg      { return Arg{In: &i} }
func StepArg(i int) Arg    { return Arg{Step: &i} }
func NumArg(v float64) Arg { n := Num(v); return Arg{Num: &n} }

// Num is a validated number: finite, or +-inf (an attention mask's fill value, a clamp
// without a bound); never NaN. JSON has no infinities: they are written as the strings
// "inf" and "-inf".
type Num float64

// MarshalJSON writes a finite number as a JSON number, +-inf as "inf" / "-inf".
func (n Num) MarshalJSON() ([]byte, error) {
	v := float64(n)
	switch {
	case math.IsNaN(v):
		return nil, errors.New("program: NaN is not a valid number")
	case math.IsInf(v, 1):
		return []byte(`"inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-inf"`), nil
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (n *Num) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"inf"`:
		*n = Num(math.Inf(1))
		return nil
	case `"-inf"`:
		*n = Num(math.Inf(-1))
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("program: a number must be a JSON number, \"inf\" or \"-inf\"")
	}
	*n = Num(v)
	return nil
}

// Limits on what Validate accepts.
const (
	MaxRank   = 8
	MaxInputs = 32
	MaxSteps  = 64
	MaxDim    = 1<<31 - 1
	MaxNumel  = 1 << 40
)

// Reduction returns the table entry of the program's final reduction, nil when it has none.
func (p *Program) Reduction() *Op {
	if len(p.Steps) == 0 {
		return nil
	}
	if op, ok := Lookup(p.Steps[len(p.Steps)-1].Op); ok && op.Reduce != "" {
		return op
	}
	return nil
}

// Validate checks everything a program brings: the main shape, every input's dtype and
// broadcast shape, every step's code (from Table), operand count and references (inputs in
// range, earlier steps only, numbers not NaN, a tensor first but for where's branches),
// constants (count, kind, range), dtype (bool for comparisons, a float otherwise), a
// reduction only as the last step over the full main shape, and the outputs.
func (p *Program) Validate() error {
	if err := checkDims(p.Dims); err != nil {
		return fmt.Errorf("program: main shape: %v", err)
	}
	if len(p.Inputs) == 0 || len(p.Inputs) > MaxInputs {
		return fmt.Errorf("program: %d inputs (want 1..%d)", len(p.Inputs), MaxInputs)
	}
	for i, in := range p.Inputs {
		if !in.DType.valid() {
			return fmt.Errorf("program: input %d: unknown dtype %s", i, strconv.Quote(string(in.DType)))
		}
		if len(in.Dims) > len(p.Dims) {
			return fmt.Errorf("program: input %d: rank %d above the main shape's %d", i, len(in.Dims), len(p.Dims))
		}
		if in.Number && (len(in.Dims) != 0 || in.DType != FP32 && in.DType != I64 || i == 0) {
			return fmt.Errorf("program: input %d: a number input has rank 0 and dtype fp32 or int64, and is not input 0", i)
		}
		if in.Keep && (in.DType != Bool || in.Number || i == 0) {
			return fmt.Errorf("program: input %d: a dropout's keep mask is a bool tensor, not input 0", i)
		}
		if in.Bias {
			if err := p.checkBias(i); err != nil {
				return fmt.Errorf("program: input %d: %v", i, err)
			}
		}
		off := len(p.Dims) - len(in.Dims)
		for j, d := range in.Dims {
			if d != 1 && d != p.Dims[off+j] {
				return fmt.Errorf("program: input %d: shape %v does not broadcast to %v", i, in.Dims, p.Dims)
			}
		}
	}
	if len(p.Steps) == 0 || len(p.Steps) > MaxSteps {
		return fmt.Errorf("program: %d steps (want 1..%d)", len(p.Steps), MaxSteps)
	}
	used := make([]bool, len(p.Inputs))
	for i, s := range p.Steps {
		if err := p.checkStep(i, s, used); err != nil {
			return fmt.Errorf("program: step %d (%s): %v", i, strconv.Quote(string(s.Op)), err)
		}
	}
	for i, u := range used {
		if !u {
			return fmt.Errorf("program: input %d is never read", i)
		}
	}
	if p.GEMM != nil {
		if err := p.GEMM.validate(p); err != nil {
			return fmt.Errorf("program: GEMM head: %v", err)
		}
		if p.HasInt() {
			return errors.New("program: int64 values beside a GEMM head are not generated")
		}
	}
	last := len(p.Steps) - 1
	if len(p.Outputs) == 0 || p.Outputs[len(p.Outputs)-1] != last {
		return fmt.Errorf("program: the outputs must end with the last step (%d)", last)
	}
	if len(p.OutDrop) != 0 && len(p.OutDrop) != len(p.Outputs) {
		return fmt.Errorf("program: out_drop: %d entries for %d outputs", len(p.OutDrop), len(p.Outputs))
	}
	for k, d := range p.OutDrop {
		switch {
		case d < 0 || d >= len(p.Dims):
			return fmt.Errorf("program: out_drop %d of output %d: want 0..%d", d, k, len(p.Dims)-1)
		case d > 0 && (p.GEMM != nil || p.Reduction() != nil && p.Outputs[k] == last):
			return fmt.Errorf("program: output %d drops leading dims beside a GEMM head or as the reduction's result", k)
		}
		for _, x := range p.Dims[:d] {
			if x != 1 {
				return fmt.Errorf("program: output %d drops %d leading dims of %v, not all 1", k, d, p.Dims)
			}
		}
	}
	if len(p.Into) != 0 && len(p.Into) != len(p.Outputs) {
		return fmt.Errorf("program: into: %d entries for %d outputs", len(p.Into), len(p.Outputs))
	}
	for k, o := range p.Outputs {
		if o < 0 || o > last || k > 0 && o <= p.Outputs[k-1] {
			return fmt.Errorf("program: outputs %v: want increasing step indices", p.Outputs)
		}
		if k < len(p.Into) && p.Into[k] != "" {
			if err := p.checkInto(o, p.Into[k]); err != nil {
				return fmt.Errorf("program: output %d into %s: %v", k, strconv.Quote(p.Into[k]), err)
			}
		}
		if p.Steps[o].DType == Bool && o != last && p.Reduction() != nil {
			return fmt.Errorf("program: output %d is bool beside a reduction", o)
		}
	}
	return nil
}

// checkInto checks that step o, an output that replaces GEMM op into's autocast cast, is a
// cast of an fp32 step to fp16 or bf16.
func (p *Program) checkInto(o int, into string) error {
	if !IntoOps[into] {
		return errors.New("not a GEMM op whose input casts an output may replace")
	}
	s := p.Steps[o]
	if s.Op != Cast || s.DType != FP16 && s.DType != BF16 {
		return errors.New("want a cast to fp16 or bf16")
	}
	if a := s.Args[0]; a.Step == nil || p.Steps[*a.Step].DType != FP32 {
		return errors.New("want a cast of an fp32 step")
	}
	if p.Reduction() != nil {
		return errors.New("beside a reduction")
	}
	return nil
}

func (p *Program) checkStep(i int, s Step, used []bool) error {
	op, ok := Lookup(s.Op)
	if !ok {
		return errors.New("not an op of the table")
	}
	if len(s.Args) != op.Arity {
		return fmt.Errorf("%d operands (want %d)", len(s.Args), op.Arity)
	}
	tensors := 0
	for k, a := range s.Args {
		n := 0
		if a.In != nil {
			n++
			if *a.In < 0 || *a.In >= len(p.Inputs) {
				return fmt.Errorf("operand %d: input %d out of range", k, *a.In)
			}
			used[*a.In] = true
			if p.Inputs[*a.In].Number && (k != 1 || !NumberOps[s.Op]) {
				return fmt.Errorf("operand %d: input %d is a number the trace does not record: operand 1 of add, sub, rsub, mul or div only", k, *a.In)
			}
			if p.Inputs[*a.In].Keep != (s.Op == DropoutKeep && k == 1) {
				return fmt.Errorf("operand %d: a dropout's keep mask is operand 1 of dropout_keep, and that operand is one", k)
			}
			tensors++
		}
		if a.Step != nil {
			n++
			if *a.Step < 0 || *a.Step >= i {
				return fmt.Errorf("operand %d: step %d is not an earlier step", k, *a.Step)
			}
			if _, r := Lookup(p.Steps[*a.Step].Op); r && table[p.Steps[*a.Step].Op].Reduce != "" {
				return fmt.Errorf("operand %d: reads a reduction", k)
			}
			tensors++
		}
		if a.Num != nil {
			n++
			if math.IsNaN(float64(*a.Num)) {
				return fmt.Errorf("operand %d: NaN", k)
			}
			if k == 0 && s.Op != Where {
				return errors.New("operand 0 must be a tensor")
			}
		}
		if a.Int && (a.Num == nil || !integral(float64(*a.Num))) {
			return fmt.Errorf("operand %d: marked a Python int but not an integer within 2**53", k)
		}
		if n != 1 {
			return fmt.Errorf("operand %d: want exactly one of in, step, num", k)
		}
	}
	if tensors == 0 {
		return errors.New("no tensor operand")
	}
	if len(s.Consts) != len(op.Consts) {
		return fmt.Errorf("%d constants (want %d)", len(s.Consts), len(op.Consts))
	}
	for k, c := range s.Consts {
		v := float64(c)
		switch {
		case math.IsNaN(v):
			return fmt.Errorf("constant %d: NaN", k)
		case op.Consts[k] == ConstBool && v != 0 && v != 1:
			return fmt.Errorf("constant %d: %v is not a bool (0 or 1)", k, v)
		case op.Consts[k] != ConstFloat && math.IsInf(v, 0):
			return fmt.Errorf("constant %d: infinite", k)
		}
	}
	if op.check != nil {
		if err := op.check(s); err != nil {
			return err
		}
	}
	switch {
	case !s.DType.valid():
		return fmt.Errorf("unknown dtype %s", strconv.Quote(string(s.DType)))
	case op.Compare && s.DType != Bool:
		return errors.New("a comparison gives bool")
	case s.DType == I64 && !op.Int:
		return errors.New("dtype int64: the op computes floats only")
	case !op.Compare && !s.DType.IsFloat() && s.DType != I64:
		return fmt.Errorf("dtype %s: want a float or int64", s.DType)
	}
	if err := p.checkInt(s, op); err != nil {
		return err
	}
	if op.Reduce != "" && i != len(p.Steps)-1 {
		return errors.New("a reduction must be the last step")
	}
	return nil
}

// checkInt checks a step's int64 values: an int64 step reads int64 and bool values and
// integers only (eager promotes a float operand to a float result), a cast's operand aside;
// a reduction reads floats only. (A comparison of an int64 tensor with a number compares
// in int64 where the number is marked a Python int, Arg.Int, else in float32.)
func (p *Program) checkInt(s Step, op *Op) error {
	for k, a := range s.Args {
		switch d := p.ArgDType(a); {
		case a.Num != nil:
			if s.DType == I64 && !integral(float64(*a.Num)) {
				return fmt.Errorf("operand %d: %v is not an integer within 2**53 (an int64 step's number)", k, float64(*a.Num))
			}
		case d == I64:
			if op.Reduce != "" {
				return errors.New("reduces int64 values")
			}
		case d.IsFloat() && s.DType == I64 && s.Op != Cast:
			return fmt.Errorf("operand %d: a %s value in an int64 step", k, d)
		}
	}
	if s.DType == I64 {
		for k, c := range s.Consts {
			if op.Consts[k] == ConstFloat && !integral(float64(c)) {
				return fmt.Errorf("constant %d: %v is not an integer within 2**53 (an int64 step's constant)", k, float64(c))
			}
		}
	}
	return nil
}

// ArgDType is an operand's dtype: its input's or step's; "" for a number.
func (p *Program) ArgDType(a Arg) DType {
	switch {
	case a.In != nil && *a.In >= 0 && *a.In < len(p.Inputs):
		return p.Inputs[*a.In].DType
	case a.Step != nil && *a.Step >= 0 && *a.Step < len(p.Steps):
		return p.Steps[*a.Step].DType
	}
	return ""
}

// Drops reports whether an output has fewer dims than the main shape (OutDrop).
func (p *Program) Drops() bool {
	for _, d := range p.OutDrop {
		if d > 0 {
			return true
		}
	}
	return false
}

// HasInt reports whether any input or step of the program is int64.
func (p *Program) HasInt() bool {
	for _, in := range p.Inputs {
		if in.DType == I64 {
			return true
		}
	}
	for _, s := range p.Steps {
		if s.DType == I64 {
			return true
		}
	}
	return false
}

func checkDims(d []int64) error {
	if len(d) == 0 || len(d) > MaxRank {
		return fmt.Errorf("rank %d (want 1..%d)", len(d), MaxRank)
	}
	n := int64(1)
	for _, x := range d {
		if x <= 0 || x > MaxDim {
			return fmt.Errorf("dim %d out of range (want 1..%d)", x, int64(MaxDim))
		}
		if n > MaxNumel/x {
			return fmt.Errorf("more than %d elements", int64(MaxNumel))
		}
		n *= x
	}
	return nil
}

// Key is 8 hex digits of the SHA-256 of the program's JSON: equal programs, equal keys.
func (p *Program) Key() string {
	b, err := json.Marshal(p)
	if err != nil {
		return "invalid"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:4])
}

// Codes lists the steps' op codes, in order.
func (p *Program) Codes() []string {
	out := make([]string, len(p.Steps))
	for i, s := range p.Steps {
		out[i] = string(s.Op)
	}
	return out
}

// Name is a folder name for the program: "generic", up to six op codes, the main dtype,
// the main shape and Key, e.g. "generic-mul_sigmoid_mul-fp32-8x64-1a2b3c4d". Only letters,
// digits, '_', '-' and 'x' appear in it (codes are table words). A GEMM head's op comes
// first: "generic-linear_gelu_mul-bf16-64x96-1a2b3c4d".
func (p *Program) Name(dtype DType) string {
	codes := p.Codes()
	if p.GEMM != nil {
		codes = append([]string{string(p.GEMM.Op)}, codes...)
	}
	if len(codes) > 6 {
		codes = append(codes[:6], "etc")
	}
	dims := make([]string, len(p.Dims))
	for i, d := range p.Dims {
		dims[i] = strconv.FormatInt(d, 10)
	}
	return strings.Join([]string{"generic", strings.Join(codes, "_"), string(dtype), strings.Join(dims, "x"), p.Key()}, "-")
}

// Numel is the main shape's element count.
func (p *Program) Numel() int64 {
	n := int64(1)
	for _, d := range p.Dims {
		n *= d
	}
	return n
}

// Bytes is the fewest bytes one fused kernel moves: each input read once (a number input
// not counted: the caller's number, as the adapter's count has it), each output written once;
// writes is the part written.
// KeepNumel is the elements of the program's keep mask inputs (Input.Keep): what the
// caller's draw of them writes (one byte each, in one launch of its own).
func (p *Program) KeepNumel() int64 {
	var n int64
	for _, in := range p.Inputs {
		if in.Keep {
			n += numelOf(in.Dims)
		}
	}
	return n
}

func (p *Program) Bytes() (bytes, writes int64) {
	for _, in := range p.Inputs {
		if in.Number {
			continue
		}
		n := int64(1)
		for _, d := range in.Dims {
			n *= d
		}
		bytes += n * in.DType.Size()
	}
	for _, o := range p.Outputs {
		n := p.Numel()
		if r := p.Reduction(); r != nil && o == len(p.Steps)-1 && !r.FullShape {
			n /= p.Dims[len(p.Dims)-1]
		}
		writes += n * p.Steps[o].DType.Size()
	}
	return bytes + writes, writes
}
