package patterns

import (
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/trace"
)

// This file holds the per-op shape rules: what an ATen op outputs, given the
// inputs the profiler recorded. They are the whole basis of dataflow inference
// without an execution trace, so they only claim what the op's semantics
// guarantee; an op they do not know produces no value at all (a consumer then
// finds no producer, which breaks a chain rather than inventing one).

// tval is one tensor value: its sizes and element type.
type tval struct {
	dims  []int64
	dtype DType
}

// baseName strips the namespace of an op name ("aten::add_" -> "add_").
func baseName(name string) string {
	if i := strings.LastIndex(name, "::"); i >= 0 {
		return name[i+2:]
	}
	return name
}

// isTensor reports whether in is a tensor argument with sizes (0-dim tensors and
// scalars have none and never carry activations worth matching).
func isTensor(in trace.Input) bool {
	if len(in.Dims) == 0 {
		return false
	}
	switch in.Type {
	case "", "Scalar", "ScalarList", "TensorList", "GenericList", "Device", "Layout", "MemoryFormat", "ScalarType":
		return false
	}
	return true
}

func numel(d []int64) int64 {
	n := int64(1)
	for _, x := range d {
		n *= x
	}
	return n
}

func eqDims(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// broadcast returns the broadcast shape of a and b, ok=false when they do not broadcast.
func broadcast(a, b []int64) ([]int64, bool) {
	n := max(len(a), len(b))
	out := make([]int64, n)
	for i := 0; i < n; i++ {
		x, y := int64(1), int64(1)
		if j := len(a) - n + i; j >= 0 {
			x = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			y = b[j]
		}
		switch {
		case x == y:
			out[i] = x
		case x == 1:
			out[i] = y
		case y == 1:
			out[i] = x
		default:
			return nil, false
		}
	}
	return out, true
}

// concreteInts parses Concrete Inputs text such as "[8, 512, -1]", "-1" or "3".
func concreteInts(s string) ([]int64, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, false
	}
	s = strings.TrimPrefix(s, "[")
	s = strings.TrimSuffix(s, "]")
	if strings.TrimSpace(s) == "" {
		return []int64{}, true
	}
	parts := strings.Split(s, ",")
	out := make([]int64, 0, len(parts))
	for _, p := range parts {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil {
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}

// concreteInt parses one integer argument.
func concreteInt(ins []trace.Input, i int) (int64, bool) {
	if i >= len(ins) {
		return 0, false
	}
	v, ok := concreteInts(ins[i].Concrete)
	if !ok || len(v) != 1 || strings.Contains(ins[i].Concrete, "[") && len(v) != 1 {
		return 0, false
	}
	return v[0], true
}

// concreteFloat parses one scalar argument ("0.10000000000000001", "1e-05", "3.").
func concreteFloat(ins []trace.Input, i int) (float64, bool) {
	if i >= len(ins) {
		return 0, false
	}
	s := strings.TrimSpace(ins[i].Concrete)
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

func concreteBool(ins []trace.Input, i int) (bool, bool) {
	if i >= len(ins) {
		return false, false
	}
	switch strings.TrimSpace(ins[i].Concrete) {
	case "True", "true", "1":
		return true, true
	case "False", "false", "0":
		return false, true
	}
	return false, false
}

// intList reads an int[] argument from Concrete Inputs, or from the parser's List.
func intList(ins []trace.Input, i int) ([]int64, bool) {
	if i >= len(ins) {
		return nil, false
	}
	if v, ok := concreteInts(ins[i].Concrete); ok {
		return v, true
	}
	if l := ins[i].List; len(l) > 0 {
		out := make([]int64, 0, len(l))
		for _, e := range l {
			if len(e) != 1 {
				return nil, false
			}
			out = append(out, e[0])
		}
		return out, true
	}
	return nil, false
}

// normDim resolves a possibly negative dim against rank r.
func normDim(d int64, r int) (int, bool) {
	if d < 0 {
		d += int64(r)
	}
	if d < 0 || d >= int64(r) {
		return 0, false
	}
	return int(d), true
}

// reshapeTo resolves a view size (one -1 allowed) against the input's numel.
func reshapeTo(in []int64, size []int64) ([]int64, bool) {
	out := append([]int64(nil), size...)
	n, neg := numel(in), -1
	known := int64(1)
	for i, s := range out {
		if s == -1 {
			if neg >= 0 {
				return nil, false
			}
			neg = i
			continue
		}
		if s < 0 {
			return nil, false
		}
		known *= s
	}
	if neg >= 0 {
		if known == 0 || n%known != 0 {
			return nil, false
		}
		out[neg] = n / known
	} else if known != n {
		return nil, false
	}
	return out, true
}

// passOps pass a tensor through unchanged in content (views and copies): A ->
// view -> B counts as A feeding B.
var passOps = map[string]bool{
	"view": true, "reshape": true, "_unsafe_view": true, "_reshape_alias": true, "transpose": true,
	"t": true, "permute": true, "expand": true, "expand_as": true, "unsqueeze": true, "squeeze": true,
	"contiguous": true, "slice": true, "select": true, "split": true, "split_with_sizes": true,
	"chunk": true, "narrow": true, "flatten": true, "unflatten": true, "to": true, "_to_copy": true,
	"clone": true, "detach": true, "detach_": true, "copy_": true, "alias": true, "as_strided": true,
	"view_as": true, "reshape_as": true, "type_as": true, "unbind": true, "lift_fresh": true,
}

// pointwise ops: the output has the broadcast shape of the tensor inputs.
var pointwiseOps = map[string]bool{
	"add": true, "sub": true, "mul": true, "div": true, "rsub": true, "pow": true, "gelu": true,
	"silu": true, "relu": true, "tanh": true, "sigmoid": true, "rsqrt": true, "sqrt": true, "exp": true,
	"log": true, "neg": true, "abs": true, "erf": true, "reciprocal": true, "clamp": true, "clamp_min": true,
	"clamp_max": true, "masked_fill": true, "where": true, "hardswish": true, "hardsigmoid": true,
	"leaky_relu": true, "elu": true, "softplus": true, "mish": true, "sin": true, "cos": true,
	"maximum": true, "minimum": true, "square": true, "relu6": true, "hardtanh": true, "floor": true,
	"ceil": true, "round": true, "sign": true, "log1p": true, "expm1": true, "fmod": true,
	"remainder": true, "lerp": true, "addcmul": true, "addcdiv": true, "__and__": true, "__or__": true,
	"bitwise_and": true, "bitwise_or": true, "bitwise_not": true, "logical_and": true, "logical_or": true,
	"logical_not": true, "eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true,
	"isnan": true, "isinf": true, "dropout": true, "native_dropout": true, "feature_dropout": true,
	"alpha_dropout": true, "fill": true, "zeros_like": true, "ones_like": true, "empty_like": true,
	"full_like": true, "rand_like": true, "randn_like": true,
}

var compareOps = map[string]bool{
	"eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true, "isnan": true, "isinf": true,
	"logical_and": true, "logical_or": true, "logical_not": true,
}

// sameShapeOps keep the shape of input 0.
var sameShapeOps = map[string]bool{
	"layer_norm": true, "native_layer_norm": true, "rms_norm": true, "_fused_rms_norm": true,
	"group_norm": true, "native_group_norm": true, "batch_norm": true, "native_batch_norm": true,
	"_batch_norm_impl_index": true, "instance_norm": true, "softmax": true, "_softmax": true,
	"log_softmax": true, "_log_softmax": true, "cumsum": true, "triu": true, "tril": true,
	"_safe_softmax": true,
}

// gemmOps are the matrix products.
var gemmOps = map[string]bool{
	"linear": true, "addmm": true, "mm": true, "matmul": true, "bmm": true, "baddbmm": true,
	"_addmm_activation": true,
}

// inPlace reports an in-place variant ("add_"), whose output is its input 0.
func inPlace(base string) bool {
	return strings.HasSuffix(base, "_") && !strings.HasSuffix(base, "__")
}

// outputs returns the tensor values op produces, from its recorded inputs. nil
// when the rule is unknown or the inputs are not recorded.
func outputs(t *trace.Trace, id int32) []tval {
	op := &t.Ops[id]
	ins := op.Inputs
	if len(ins) == 0 {
		return nil
	}
	for _, in := range ins {
		for _, d := range in.Dims {
			if d < 0 { // a corrupt record: claim nothing
				return nil
			}
		}
	}
	base := baseName(op.Name)
	dt := outDType(t, id)
	one := func(d []int64) []tval {
		if d == nil {
			return nil
		}
		return []tval{{dims: d, dtype: dt}}
	}
	in0 := func() []int64 {
		if isTensor(ins[0]) {
			return ins[0].Dims
		}
		return nil
	}
	if inPlace(base) && base != "detach_" {
		return one(in0())
	}
	switch {
	case sameShapeOps[base]:
		return one(in0())
	case pointwiseOps[base]:
		var out []int64
		for _, in := range ins {
			if !isTensor(in) {
				continue
			}
			if out == nil {
				out = in.Dims
				continue
			}
			b, ok := broadcast(out, in.Dims)
			if !ok {
				return nil
			}
			out = b
		}
		return one(out)
	}
	switch base {
	case "to", "_to_copy", "contiguous", "clone", "detach", "alias", "lift_fresh", "type_as":
		return one(in0())
	case "linear":
		if len(ins) < 2 || !isTensor(ins[0]) || len(ins[1].Dims) != 2 {
			return nil
		}
		d := append(append([]int64(nil), ins[0].Dims[:len(ins[0].Dims)-1]...), ins[1].Dims[0])
		return one(d)
	case "addmm", "_addmm_activation":
		if len(ins) < 3 || len(ins[1].Dims) != 2 || len(ins[2].Dims) != 2 {
			return nil
		}
		return one([]int64{ins[1].Dims[0], ins[2].Dims[1]})
	case "mm":
		if len(ins) < 2 || len(ins[0].Dims) != 2 || len(ins[1].Dims) != 2 {
			return nil
		}
		return one([]int64{ins[0].Dims[0], ins[1].Dims[1]})
	case "bmm", "baddbmm":
		a, b := 0, 1
		if base == "baddbmm" {
			a, b = 1, 2
		}
		if len(ins) <= b || len(ins[a].Dims) != 3 || len(ins[b].Dims) != 3 {
			return nil
		}
		return one([]int64{ins[a].Dims[0], ins[a].Dims[1], ins[b].Dims[2]})
	case "matmul":
		if len(ins) < 2 {
			return nil
		}
		return one(matmulShape(ins[0].Dims, ins[1].Dims))
	case "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
		"_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention":
		if len(ins) < 3 || len(ins[0].Dims) < 2 || len(ins[2].Dims) < 1 {
			return nil
		}
		q, v := ins[0].Dims, ins[2].Dims
		return one(append(append([]int64(nil), q[:len(q)-1]...), v[len(v)-1]))
	case "view", "reshape", "_unsafe_view", "_reshape_alias":
		size, ok := intList(ins, 1)
		if !ok || in0() == nil {
			return nil
		}
		d, ok := reshapeTo(in0(), size)
		if !ok {
			return nil
		}
		return one(d)
	case "expand":
		size, ok := intList(ins, 1)
		x := in0()
		if !ok || x == nil || len(size) < len(x) {
			return nil
		}
		d := append([]int64(nil), size...)
		off := len(size) - len(x)
		for i := range d {
			if d[i] == -1 {
				if i < off {
					return nil
				}
				d[i] = x[i-off]
			}
		}
		return one(d)
	case "view_as", "reshape_as", "expand_as":
		if len(ins) < 2 || !isTensor(ins[1]) {
			return nil
		}
		return one(ins[1].Dims)
	case "t":
		x := in0()
		switch len(x) {
		case 2:
			return one([]int64{x[1], x[0]})
		case 1, 0:
			return one(x)
		}
		return nil
	case "transpose":
		x := in0()
		a, ok1 := concreteInt(ins, 1)
		b, ok2 := concreteInt(ins, 2)
		if x == nil || !ok1 || !ok2 {
			return nil
		}
		i, ok1 := normDim(a, len(x))
		j, ok2 := normDim(b, len(x))
		if !ok1 || !ok2 {
			return nil
		}
		d := append([]int64(nil), x...)
		d[i], d[j] = d[j], d[i]
		return one(d)
	case "permute":
		x := in0()
		p, ok := intList(ins, 1)
		if x == nil || !ok || len(p) != len(x) {
			return nil
		}
		d := make([]int64, len(x))
		for i, s := range p {
			j, ok := normDim(s, len(x))
			if !ok {
				return nil
			}
			d[i] = x[j]
		}
		return one(d)
	case "unsqueeze":
		x := in0()
		a, ok := concreteInt(ins, 1)
		if x == nil || !ok {
			return nil
		}
		i, ok := normDim(a, len(x)+1)
		if !ok {
			return nil
		}
		d := append(append(append([]int64(nil), x[:i]...), 1), x[i:]...)
		return one(d)
	case "squeeze":
		x := in0()
		if x == nil {
			return nil
		}
		var drop map[int]bool
		if len(ins) > 1 && strings.TrimSpace(ins[1].Concrete) != "" {
			ds, ok := concreteInts(ins[1].Concrete)
			if !ok {
				return nil
			}
			drop = map[int]bool{}
			for _, a := range ds {
				i, ok := normDim(a, len(x))
				if !ok {
					return nil
				}
				drop[i] = true
			}
		}
		var d []int64
		for i, s := range x {
			if s == 1 && (drop == nil || drop[i]) {
				continue
			}
			d = append(d, s)
		}
		if d == nil {
			d = []int64{}
		}
		return one(d)
	case "flatten":
		x := in0()
		s, ok1 := concreteInt(ins, 1)
		e, ok2 := concreteInt(ins, 2)
		if x == nil || !ok1 || !ok2 {
			return nil
		}
		i, ok1 := normDim(s, len(x))
		j, ok2 := normDim(e, len(x))
		if !ok1 || !ok2 || j < i {
			return nil
		}
		d := append([]int64(nil), x[:i]...)
		d = append(d, numel(x[i:j+1]))
		return one(append(d, x[j+1:]...))
	case "unflatten":
		x := in0()
		a, ok1 := concreteInt(ins, 1)
		sizes, ok2 := intList(ins, 2)
		if x == nil || !ok1 || !ok2 {
			return nil
		}
		i, ok := normDim(a, len(x))
		if !ok {
			return nil
		}
		sz, ok := reshapeTo([]int64{x[i]}, sizes)
		if !ok {
			return nil
		}
		d := append(append(append([]int64(nil), x[:i]...), sz...), x[i+1:]...)
		return one(d)
	case "select":
		x := in0()
		a, ok := concreteInt(ins, 1)
		if x == nil || !ok {
			return nil
		}
		i, ok := normDim(a, len(x))
		if !ok {
			return nil
		}
		return one(append(append([]int64{}, x[:i]...), x[i+1:]...))
	case "slice":
		x := in0()
		a, ok := concreteInt(ins, 1)
		if x == nil || !ok {
			return nil
		}
		i, ok := normDim(a, len(x))
		if !ok {
			return nil
		}
		start, ok1 := concreteInt(ins, 2)
		end, ok2 := concreteInt(ins, 3)
		step, ok3 := concreteInt(ins, 4)
		if !ok1 {
			start = 0
		}
		if !ok2 {
			end = x[i]
		}
		if !ok3 || step <= 0 {
			step = 1
		}
		if start < 0 {
			start += x[i]
		}
		if end < 0 {
			end += x[i]
		}
		start = min(max(start, 0), x[i])
		end = min(max(end, start), x[i])
		d := append([]int64(nil), x...)
		d[i] = (end - start + step - 1) / step
		return one(d)
	case "narrow":
		x := in0()
		a, ok1 := concreteInt(ins, 1)
		l, ok2 := concreteInt(ins, 3)
		if x == nil || !ok1 || !ok2 {
			return nil
		}
		i, ok := normDim(a, len(x))
		if !ok {
			return nil
		}
		d := append([]int64(nil), x...)
		d[i] = l
		return one(d)
	case "split", "split_with_sizes", "chunk", "unbind":
		return splitShapes(base, ins, dt)
	case "mean", "sum", "amax", "amin", "logsumexp", "var", "std", "norm", "linalg_vector_norm":
		return one(reduceShape(base, ins))
	case "embedding":
		if len(ins) < 2 || len(ins[0].Dims) != 2 || !isTensor(ins[1]) {
			return nil
		}
		return one(append(append([]int64(nil), ins[1].Dims...), ins[0].Dims[1]))
	case "cat":
		return one(catShape(ins))
	case "conv1d", "conv2d", "conv3d", "convolution", "_convolution":
		return one(convShape(ins))
	}
	return nil
}

func matmulShape(a, b []int64) []int64 {
	switch {
	case len(a) == 0 || len(b) == 0:
		return nil
	case len(a) == 1 && len(b) == 1:
		return []int64{}
	case len(b) == 1:
		return append([]int64(nil), a[:len(a)-1]...)
	case len(a) == 1:
		return append(append([]int64(nil), b[:len(b)-2]...), b[len(b)-1])
	}
	batch, ok := broadcast(a[:len(a)-2], b[:len(b)-2])
	if !ok {
		return nil
	}
	return append(append(append([]int64(nil), batch...), a[len(a)-2]), b[len(b)-1])
}

func reduceShape(base string, ins []trace.Input) []int64 {
	if !isTensor(ins[0]) {
		return nil
	}
	x := ins[0].Dims
	if len(ins) < 2 || strings.TrimSpace(ins[1].Concrete) == "" {
		if len(ins) == 1 || ins[1].Type == "" {
			return []int64{} // full reduction
		}
		return nil
	}
	ds, ok := concreteInts(ins[1].Concrete)
	if !ok {
		return nil
	}
	keep := false
	ki := 2
	if base == "norm" || base == "linalg_vector_norm" {
		ki = 3
	}
	if v, ok := concreteBool(ins, ki); ok {
		keep = v
	}
	red := map[int]bool{}
	for _, a := range ds {
		i, ok := normDim(a, len(x))
		if !ok {
			return nil
		}
		red[i] = true
	}
	if len(ds) == 0 {
		for i := range x {
			red[i] = true
		}
	}
	var d []int64
	for i, s := range x {
		switch {
		case !red[i]:
			d = append(d, s)
		case keep:
			d = append(d, 1)
		}
	}
	if d == nil {
		d = []int64{}
	}
	return d
}

func catShape(ins []trace.Input) []int64 {
	var parts [][]int64
	for _, e := range ins[0].List {
		if len(e) > 0 { // empty tensors ([0]) are skipped by cat
			if len(e) == 1 && e[0] == 0 {
				continue
			}
			parts = append(parts, e)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	a := int64(0)
	if v, ok := concreteInt(ins, 1); ok {
		a = v
	}
	i, ok := normDim(a, len(parts[0]))
	if !ok {
		return nil
	}
	d := append([]int64(nil), parts[0]...)
	d[i] = 0
	for _, p := range parts {
		if len(p) != len(d) {
			return nil
		}
		d[i] += p[i]
	}
	return d
}

func convShape(ins []trace.Input) []int64 {
	if len(ins) < 2 || !isTensor(ins[0]) || !isTensor(ins[1]) {
		return nil
	}
	x, w := ins[0].Dims, ins[1].Dims
	nsp := len(w) - 2
	if nsp < 1 || len(x) != len(w) {
		return nil
	}
	get := func(i int, def int64) []int64 {
		v, ok := intList(ins, i)
		if !ok || len(v) == 0 {
			v = []int64{def}
		}
		if len(v) == 1 && nsp > 1 {
			r := make([]int64, nsp)
			for j := range r {
				r[j] = v[0]
			}
			return r
		}
		if len(v) != nsp {
			return nil
		}
		return v
	}
	stride, pad, dil := get(3, 1), get(4, 0), get(5, 1)
	if stride == nil || pad == nil || dil == nil {
		return nil
	}
	d := []int64{x[0], w[0]}
	for i := 0; i < nsp; i++ {
		if stride[i] <= 0 {
			return nil
		}
		o := (x[2+i]+2*pad[i]-dil[i]*(w[2+i]-1)-1)/stride[i] + 1
		if o <= 0 {
			return nil
		}
		d = append(d, o)
	}
	return d
}

func splitShapes(base string, ins []trace.Input, dt DType) []tval {
	if !isTensor(ins[0]) {
		return nil
	}
	x := ins[0].Dims
	dimArg := 2
	if base == "unbind" {
		dimArg = 1
	}
	a := int64(0)
	if v, ok := concreteInt(ins, dimArg); ok {
		a = v
	}
	i, ok := normDim(a, len(x))
	if !ok {
		return nil
	}
	var sizes []int64
	switch base {
	case "unbind":
		if x[i] > 1<<16 {
			return nil
		}
		out := make([]tval, x[i])
		d := append(append([]int64{}, x[:i]...), x[i+1:]...)
		for j := range out {
			out[j] = tval{dims: d, dtype: dt}
		}
		return out
	case "split_with_sizes":
		s, ok := intList(ins, 1)
		if !ok {
			return nil
		}
		sizes = s
	case "split":
		s, ok := intList(ins, 1)
		if !ok {
			return nil
		}
		if len(s) == 1 && !strings.Contains(ins[1].Concrete, "[") {
			for rest := x[i]; rest > 0; rest -= s[0] {
				if s[0] <= 0 {
					return nil
				}
				sizes = append(sizes, min(s[0], rest))
				if len(sizes) > 1<<16 {
					return nil
				}
			}
		} else {
			sizes = s
		}
	case "chunk":
		n, ok := concreteInt(ins, 1)
		if !ok || n <= 0 {
			return nil
		}
		c := x[i] / n
		if x[i]%n != 0 {
			c++
		}
		if c <= 0 {
			return nil
		}
		if n > 1<<16 {
			return nil
		}
		for rest := x[i]; rest > 0; rest -= c {
			sizes = append(sizes, min(c, rest))
		}
	}
	out := make([]tval, 0, len(sizes))
	for _, s := range sizes {
		d := append([]int64(nil), x...)
		d[i] = s
		out = append(out, tval{dims: d, dtype: dt})
	}
	return out
}

// outDType is the element type of op's result. Under autocast an op re-dispatches
// to itself (aten::linear > aten::to... > aten::linear) with cast inputs: the
// innermost same-named op tells the compute type.
func outDType(t *trace.Trace, id int32) DType {
	op := &t.Ops[id]
	base := baseName(op.Name)
	for _, c := range op.Children {
		if t.Ops[c].Name == op.Name {
			return outDType(t, c)
		}
	}
	ins := op.Inputs
	switch base {
	case "to", "_to_copy":
		for i := 1; i < len(ins) && i < 3; i++ { // to(x, dtype, ...) or to(x, device, dtype, ...)
			if ins[i].Type == "Scalar" {
				if d := scalarTypeCode(ins[i].Concrete); d != DTypeUnknown {
					return d
				}
			}
		}
	case "softmax", "log_softmax", "mean", "sum":
		for i := len(ins) - 1; i >= 1; i-- {
			if ins[i].Type == "Scalar" && strings.TrimSpace(ins[i].Concrete) != "" {
				if base == "softmax" || base == "log_softmax" {
					if i == 2 {
						if d := scalarTypeCode(ins[i].Concrete); d != DTypeUnknown {
							return d
						}
					}
				}
				break
			}
		}
	case "_softmax", "_log_softmax":
		// _softmax(x, dim, half_to_float)
		if b, ok := concreteBool(ins, 2); ok && b {
			return FP32
		}
	case "embedding":
		if len(ins) > 0 {
			return parseDType(ins[0].Type)
		}
	case "type_as", "view_as", "expand_as", "reshape_as":
		if base == "type_as" && len(ins) > 1 {
			return parseDType(ins[1].Type)
		}
	}
	if compareOps[base] || base == "__and__" || base == "__or__" {
		return Bool
	}
	if base == "masked_fill" || base == "masked_fill_" {
		if len(ins) > 0 {
			return parseDType(ins[0].Type)
		}
	}
	// Promotion among dimensioned tensor inputs; 0-dim tensors and scalars only
	// when no dimensioned tensor is a float (a float scalar on an int tensor gives fp32).
	var d DType
	scalarFloat := false
	for i, in := range ins {
		if base == "where" && i == 0 {
			continue // the condition
		}
		if isTensor(in) {
			d = promote(d, parseDType(in.Type))
		} else if in.Type == "double" || in.Type == "float" || in.Type == "Scalar" && strings.ContainsAny(in.Concrete, ".e") {
			scalarFloat = true
		}
	}
	if scalarFloat && d != DTypeUnknown && !d.IsFloat() && d != Bool && pointwiseOps[base] && base != "pow" {
		return FP32
	}
	if d == DTypeUnknown { // no dimensioned tensor: 0-dim tensors decide
		for i, in := range ins {
			if base == "where" && i == 0 || in.Type == "double" || len(in.Dims) > 0 {
				continue
			}
			d = promote(d, parseDType(in.Type))
		}
	}
	if d == DTypeUnknown && len(ins) > 0 {
		d = parseDType(ins[0].Type)
	}
	return d
}
