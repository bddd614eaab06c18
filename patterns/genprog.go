package patterns

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/program"
	"github.com/fuseadvise/fuseadvise/trace"
)

// This file turns a generic chain's region into its op program (package program): the
// dataflow between the region's ops, its external inputs with their broadcast shapes, the
// scalar arguments from Concrete Inputs and the dtypes. Whatever cannot be recovered from
// the trace (a scalar not recorded, a string argument, a random dropout, an integer
// tensor) gives a reason instead of a program: nothing is guessed.

// progDType maps a value's dtype to a program dtype; ok is false for dtypes the kernels do
// not handle (int8 to int32, fp64, unknown).
func progDType(d DType) (program.DType, bool) {
	switch d {
	case FP32, FP16, BF16:
		return program.DType(d), true
	case Bool:
		return program.Bool, true
	case Int64:
		return program.I64, true
	}
	return "", false
}

// progBuilder builds the program of one region.
type progBuilder struct {
	g      *graph
	member []bool          // the region's nodes
	step   map[int32]int   // node -> its step
	ext    map[string]int  // external value key -> input index
	reads  map[int]inRead  // input index -> where it is first read (tensor inputs)
	p      program.Program // the program so far
}

// inRead is where a program input is first read: node b's argument pos.
type inRead struct {
	b   int32
	pos int
}

// genericProgram returns the op program of the region nodes (in time order), or why there
// is none.
func (g *graph) genericProgram(nodes []int32) (*program.Program, string) {
	p, _, why := g.buildProgram(nodes, nil)
	return p, why
}

// buildProgram is genericProgram with seed, when set, adding inputs before any step is
// built (a GEMM head's output as input 0); it also returns where each tensor input it added
// is first read.
func (g *graph) buildProgram(nodes []int32, seed func(*progBuilder)) (*program.Program, map[int]inRead, string) {
	pb := &progBuilder{g: g, member: make([]bool, len(g.nodes)), step: map[int32]int{}, ext: map[string]int{}, reads: map[int]inRead{}}
	for _, b := range nodes {
		pb.member[b] = true
	}
	var main []int64
	for _, b := range nodes {
		if v, ok := g.val0(b); ok && (main == nil || wider(v.dims, main)) {
			main = v.dims
		}
	}
	if main == nil {
		return nil, nil, "no op's output shape is known"
	}
	pb.p.Dims = dims(main)
	if seed != nil {
		seed(pb)
	}
	for _, b := range nodes {
		name := stripInplace(g.name[b])
		v, ok := g.val0(b)
		if !ok {
			return nil, nil, name + ": output shape not known"
		}
		dt, ok := progDType(v.dtype)
		if !ok {
			return nil, nil, fmt.Sprintf("%s: %s values are not generated (fp32, fp16, bf16, bool and int64 are)", name, dtypeName(v.dtype))
		}
		s, why := pb.stepOf(b, name)
		if why != "" {
			return nil, nil, name + ": " + why
		}
		s.DType = dt
		op, _ := program.Lookup(s.Op)
		switch {
		case op.Reduce != "":
			if ins := g.ins(b); s.Args[0].Step == nil || !eqDims(ins[0].Dims, main) {
				return nil, nil, name + ": reduces a value smaller than the chain's shape"
			}
		default:
			if bc, ok := broadcast(v.dims, main); !ok || !eqDims(bc, main) {
				return nil, nil, name + ": its output does not broadcast to the chain's shape"
			}
		}
		pb.step[b] = len(pb.p.Steps)
		pb.p.Steps = append(pb.p.Steps, s)
	}
	// outputs: values read outside the region, values no step reads, the last step
	read := make([]bool, len(nodes))
	for _, s := range pb.p.Steps {
		for _, a := range s.Args {
			if a.Step != nil {
				read[*a.Step] = true
			}
		}
	}
	last := len(nodes) - 1
	for i, b := range nodes {
		out := i == last || !read[i]
		for _, c := range g.cons[b] {
			out = out || !pb.member[c]
		}
		if !out {
			continue
		}
		drop := 0
		if op, _ := program.Lookup(pb.p.Steps[i].Op); op.Reduce != "" {
			// the reduction's result: its own shape (codegen's row outputs)
		} else if v, _ := g.val0(b); !eqDims(v.dims, main) {
			// the main shape's leading 1s that the value leaves without ([S] beside [1, 1, S])
			if !eqDims(trimOnes(v.dims), trimOnes(main)) || len(v.dims) > len(main) {
				what := "a value read outside the chain"
				if i == last {
					what = "the chain's last value"
				}
				return nil, nil, stripInplace(g.name[b]) + ": " + what + " is smaller than the chain's shape"
			}
			drop = len(main) - len(v.dims)
		}
		pb.p.Outputs = append(pb.p.Outputs, i)
		pb.p.OutDrop = append(pb.p.OutDrop, drop)
	}
	if !pb.p.Drops() {
		pb.p.OutDrop = nil
	}
	if err := pb.p.Validate(); err != nil {
		return nil, nil, err.Error()
	}
	return &pb.p, pb.reads, ""
}

func dtypeName(d DType) string {
	if d == DTypeUnknown {
		return "unknown-dtype"
	}
	return string(d)
}

// stepOf maps node b (base name, in-place stripped) to a program step (without its dtype).
func (pb *progBuilder) stepOf(b int32, name string) (program.Step, string) {
	g := pb.g
	ins := g.ins(b)
	var s program.Step
	args := func(pos ...int) string {
		for _, p := range pos {
			a, why := pb.operand(b, p)
			if why != "" {
				return why
			}
			s.Args = append(s.Args, a)
		}
		return ""
	}
	num := func(pos int, def float64) (float64, string) {
		if pos >= len(ins) || ins[pos].Type == "" {
			if math.IsNaN(def) {
				return 0, fmt.Sprintf("argument %d not recorded", pos)
			}
			return def, ""
		}
		v, ok := concreteFloat(ins, pos)
		if !ok || math.IsNaN(v) {
			return 0, fmt.Sprintf("argument %d (%s) is not a number the trace records", pos, ins[pos].Type)
		}
		return v, ""
	}
	withConsts := func(code program.Code, spec ...[2]float64) (program.Step, string) {
		s.Op = code
		for _, c := range spec {
			v, why := num(int(c[0]), c[1])
			if why != "" {
				return s, why
			}
			s.Consts = append(s.Consts, program.Num(v))
		}
		return s, ""
	}
	keep := func() float64 { // keepdim, argument 2
		if k, ok := concreteBool(ins, 2); ok && k {
			return 1
		}
		return 0
	}
	nan := math.NaN()
	switch name {
	case "add", "sub", "rsub":
		if why := args(0, 1); why != "" {
			return s, why
		}
		return withConsts(program.Code(name), [2]float64{2, 1})
	case "mul", "div", "eq", "ne", "lt", "le", "gt", "ge":
		if name == "div" && len(ins) > 2 && ins[2].Type != "" {
			return s, "a rounding mode is not generated"
		}
		if why := args(0, 1); why != "" {
			return s, why
		}
		s.Op = program.Code(name)
		if op, _ := program.Lookup(s.Op); op.Compare {
			return s, pb.markInts(s, ins)
		}
		return s, ""
	case "where":
		if why := args(0, 1, 2); why != "" {
			return s, why
		}
		s.Op = program.Where
		return s, ""
	case "masked_fill":
		if why := args(0, 1, 2); why != "" {
			return s, why
		}
		s.Op = program.MaskedFill
		return s, ""
	case "to", "_to_copy", "type_as":
		if why := args(0); why != "" {
			return s, why
		}
		s.Op = program.Cast
		return s, ""
	case "dropout", "native_dropout":
		if why := args(0); why != "" {
			return s, why
		}
		p, why := num(1, nan)
		if why != "" {
			return s, why
		}
		train, ok := concreteBool(ins, 2)
		if !ok {
			return s, "argument 2 (train) not recorded"
		}
		t := 0.0
		if train {
			t = 1
		}
		if train && p > 0 {
			// eager draws the mask inside; the kernel takes it from the caller (a keep mask of
			// the dropout's shape, program.Input.Keep), so both apply the same one
			if p >= 1 {
				return s, "a dropout of p = 1 (every element dropped) is not generated"
			}
			v, ok := pb.g.val0(b)
			if !ok {
				return s, "output shape not known"
			}
			pb.p.Inputs = append(pb.p.Inputs, program.Input{DType: program.Bool, Dims: dims(v.dims), Keep: true})
			s.Args = append(s.Args, program.InArg(len(pb.p.Inputs)-1))
			s.Op, s.Consts = program.DropoutKeep, []program.Num{program.Num(p), program.Num(program.DropoutScale(p))}
			return s, ""
		}
		s.Op, s.Consts = program.Dropout, []program.Num{program.Num(p), program.Num(t)}
		return s, ""
	case "clamp":
		if why := args(0); why != "" {
			return s, why
		}
		has := func(i int) bool { return i < len(ins) && ins[i].Type != "" }
		for i := 1; i <= 2; i++ {
			if has(i) && isTensor(ins[i]) {
				return s, "tensor bounds are not generated"
			}
		}
		switch {
		case has(1) && has(2):
			return withConsts(program.Clamp, [2]float64{1, nan}, [2]float64{2, nan})
		case has(1):
			return withConsts(program.ClampMin, [2]float64{1, nan})
		case has(2):
			return withConsts(program.ClampMax, [2]float64{2, nan})
		}
		return s, "no bound recorded"
	case "clamp_min", "clamp_max":
		if why := args(0); why != "" {
			return s, why
		}
		if len(ins) > 1 && isTensor(ins[1]) {
			return s, "a tensor bound is not generated"
		}
		return withConsts(program.Code(name), [2]float64{1, nan})
	case "hardtanh":
		if why := args(0); why != "" {
			return s, why
		}
		return withConsts(program.Hardtanh, [2]float64{1, -1}, [2]float64{2, 1})
	case "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "cos", "sin",
		"silu", "mish", "hardswish", "hardsigmoid":
		if why := args(0); why != "" {
			return s, why
		}
		s.Op = program.Code(name)
		return s, ""
	case "leaky_relu":
		if why := args(0); why != "" {
			return s, why
		}
		return withConsts(program.LeakyRelu, [2]float64{1, 0.01})
	case "elu":
		if why := args(0); why != "" {
			return s, why
		}
		return withConsts(program.Elu, [2]float64{1, 1}, [2]float64{2, 1}, [2]float64{3, 1})
	case "softplus":
		if why := args(0); why != "" {
			return s, why
		}
		return withConsts(program.Softplus, [2]float64{1, 1}, [2]float64{2, 20})
	case "gelu":
		if why := args(0); why != "" {
			return s, why
		}
		a := ""
		if len(ins) > 1 {
			a = strings.Trim(strings.TrimSpace(ins[1].Concrete), `"'`)
		}
		if a == "" {
			a = g.etText(b, 1) // the execution trace records the String Kineto leaves out
		}
		switch a {
		case "none":
			s.Op = program.Gelu
		case "tanh":
			s.Op = program.GeluTanh
		default:
			return s, "approximate (erf or tanh) is recorded neither in Concrete Inputs nor in an execution trace"
		}
		return s, ""
	case "pow":
		if len(ins) == 0 || !isTensor(ins[0]) {
			return s, "a scalar base is not generated"
		}
		if why := args(0); why != "" {
			return s, why
		}
		return withConsts(program.Pow, [2]float64{1, nan})
	case "sum", "mean":
		if len(ins) > 3 && ins[3].Type != "" && scalarTypeCode(ins[3].Concrete) == DTypeUnknown {
			return s, "its dtype argument is not recorded"
		}
		fallthrough
	case "amax", "amin", "logsumexp":
		if why := args(0); why != "" {
			return s, why
		}
		s.Op, s.Consts = program.Code(name), []program.Num{program.Num(keep())}
		return s, ""
	case "softmax", "_softmax", "log_softmax", "_log_softmax":
		if why := args(0); why != "" {
			return s, why
		}
		s.Op = program.Softmax
		if strings.Contains(name, "log") {
			s.Op = program.LogSoftmax
		}
		return s, ""
	}
	return s, "not in the op table of generated kernels yet"
}

// operand resolves input position pos of node b: an earlier step of the region, an external
// input (one per producer, shape and dtype), or a number from Concrete Inputs.
// markInts marks the numbers of comparison s (its operands are its arguments 0 and 1) that
// are Python ints (program.Arg.Int) where a tensor operand is int64: eager compares such a
// tensor with an int in int64 and with a float in float32. Kineto prints an int Scalar
// without a point and a float one with it ("0", "0.", "-0.5", "3.4e+38"); a number printed
// otherwise is refused.
func (pb *progBuilder) markInts(s program.Step, ins []trace.Input) string {
	hasInt := false
	for _, a := range s.Args {
		hasInt = hasInt || pb.p.ArgDType(a) == program.I64
	}
	if !hasInt {
		return ""
	}
	for k, a := range s.Args {
		if a.Num == nil {
			continue
		}
		switch t := strings.TrimSpace(ins[k].Concrete); {
		case intLiteral.MatchString(t):
			s.Args[k].Int = true
		case !strings.ContainsAny(t, ".eE"):
			return fmt.Sprintf("argument %d (%q): an int64 tensor compared with a number that is neither an int nor a float as Kineto prints them", k, t)
		}
	}
	return ""
}

var intLiteral = regexp.MustCompile(`^-?[0-9]+$`)

// broadcastsTo reports whether a value of dims v read as dims in is v broadcast (right-aligned)
// to in, leading 1s of either aside.
func broadcastsTo(v, in []int64) bool {
	bc, ok := broadcast(v, in)
	return ok && eqDims(trimOnes(bc), trimOnes(in))
}

// wider orders a chain's values for its main shape: more elements, then (as many) a higher
// rank, to which the others broadcast ([S] and [1, 1, S]: the latter).
func wider(a, b []int64) bool {
	na, nb := numel(a), numel(b)
	return na > nb || na == nb && len(a) > len(b)
}

// trimOnes is d without its leading 1s.
func trimOnes(d []int64) []int64 {
	for len(d) > 0 && d[0] == 1 {
		d = d[1:]
	}
	return d
}

func (pb *progBuilder) operand(b int32, pos int) (program.Arg, string) {
	g := pb.g
	ins := g.ins(b)
	if pos >= len(ins) {
		return program.Arg{}, fmt.Sprintf("argument %d not recorded", pos)
	}
	in := ins[pos]
	if isTensor(in) {
		if p := g.directMember(b, pos, pb.member); p >= 0 {
			i, ok := pb.step[p]
			if !ok {
				return program.Arg{}, "reads a later op of the chain"
			}
			// a view that only adds or drops leading 1s ([S] read as [1, 1, 1, S]: the causal
			// mask's positions) or expands dims of 1 ([1, 1, S, S] read as [B, 1, S, S]) keeps
			// every element where right-aligned broadcasting puts it, as the step computes it
			if v, _ := g.val0(p); !broadcastsTo(v.dims, in.Dims) {
				return program.Arg{}, fmt.Sprintf("a view inside the chain changes a value's shape (%v read as %v)", v.dims, in.Dims)
			}
			return program.StepArg(i), ""
		}
		return pb.input(b, pos, in)
	}
	if dt, ok := g.runtimeNumber(b, pos); ok { // a number of its own, passed by the caller
		pb.p.Inputs = append(pb.p.Inputs, program.Input{DType: dt, Dims: []int64{}, Number: true})
		return program.InArg(len(pb.p.Inputs) - 1), ""
	}
	switch in.Type {
	case "Scalar", "int", "double":
		v, ok := concreteFloat(ins, pos)
		if !ok {
			if bv, okb := concreteBool(ins, pos); okb && in.Type == "Scalar" {
				v, ok = 0, true
				if bv {
					v = 1
				}
			}
		}
		if !ok || math.IsNaN(v) {
			return program.Arg{}, fmt.Sprintf("argument %d (%s): Concrete Inputs give no number", pos, in.Type)
		}
		return program.NumArg(v), ""
	case "":
		return program.Arg{}, fmt.Sprintf("argument %d is None or not recorded", pos)
	}
	if parseDType(in.Type) != DTypeUnknown && len(in.Dims) == 0 {
		return pb.input(b, pos, in) // a 0-dim tensor
	}
	return program.Arg{}, fmt.Sprintf("argument %d (%s) is not generated", pos, in.Type)
}

// input returns the external input position pos of b reads, adding it when new.
func (pb *progBuilder) input(b int32, pos int, in trace.Input) (program.Arg, string) {
	dt, ok := progDType(parseDType(in.Type))
	if !ok {
		return program.Arg{}, fmt.Sprintf("argument %d: %s tensors are not generated", pos, dtypeName(parseDType(in.Type)))
	}
	if bc, ok := broadcast(in.Dims, pb.p.Dims); !ok || !eqDims(bc, pb.p.Dims) {
		return program.Arg{}, fmt.Sprintf("argument %d: shape %v does not broadcast to the chain's %v", pos, in.Dims, pb.p.Dims)
	}
	src := int32(-1)
	if pos < len(pb.g.in[b]) {
		src = pb.g.in[b][pos]
	}
	key := fmt.Sprint(src, in.Dims, dt)
	if src < 0 { // an unknown producer: a value of its own
		key = "b" + strconv.Itoa(int(b)) + "/" + strconv.Itoa(pos)
	}
	if i, ok := pb.ext[key]; ok {
		return program.InArg(i), ""
	}
	pb.ext[key] = len(pb.p.Inputs)
	pb.reads[len(pb.p.Inputs)] = inRead{b, pos}
	pb.p.Inputs = append(pb.p.Inputs, program.Input{DType: dt, Dims: dims(in.Dims)})
	return program.InArg(len(pb.p.Inputs) - 1), ""
}

// etText is the String the execution trace recorded as node b's argument pos ("" without an
// execution trace, or for another kind of value there).
func (g *graph) etText(b int32, pos int) string {
	if int(b) < len(g.etIn) && pos < len(g.etIn[b]) {
		return g.etIn[b][pos].Text
	}
	return ""
}
