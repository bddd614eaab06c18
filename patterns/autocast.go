package patterns

import (
	"slices"

	"github.com/fuseadvise/fuseadvise/program"
	"github.com/fuseadvise/fuseadvise/trace"
)

// Autocast's casts into GEMMs, taken by the kernels that produce the cast values.
//
// Under autocast, a GEMM (linear, matmul, a convolution) casts its fp32 activation to 16 bits
// inside its op (aten::to in aten::linear): one more kernel reading the fp32 value and
// writing its copy, and in training the copy's gradient cast back (ToCopyBackward0). Where
// that value is an output of a pointwise generic chain, the chain's kernel writes the 16-bit
// copy too (program.Program.Into): the cast's kernels and its backward's are the chain's, the
// GEMM gets the copy and autocast casts nothing. A catalog template that writes its output in
// a type of its choosing does the same for one GEMM reader (takeOutputCasts). The casts
// themselves, and which are a weight's, are found as coverage.go counts them (castOps,
// castOperand).

// gemmCast is an autocast cast, nested in a GEMM node, of a value a chain's step computes.
type gemmCast struct {
	step  int           // the program step whose value it casts
	op    int32         // the cast's OpID (aten::to, or aten::_to_copy, directly in the GEMM)
	dtype program.DType // fp16 or bf16
	into  string        // the GEMM's base name (program.IntoOps)
}

// withGEMMCasts returns p with, for every autocast cast that an unclaimed GEMM outside the
// region (nodes, marked in member) makes of a step's fp32 value, one more step casting that
// value and one more output, whose Into names the GEMM; an output whose every reader outside
// the region is such a GEMM is written no more in fp32. It also returns the casts' OpIDs in
// the order of the new outputs. p unchanged and nil when no cast qualifies, p has a
// reduction, or the program with the casts does not validate.
func (g *graph) withGEMMCasts(nodes []int32, member []bool, p *program.Program, claimed map[int32]bool) (*program.Program, []int32) {
	if p.Reduction() != nil {
		return p, nil
	}
	var casts []gemmCast
	absorbed := map[int]int{} // step -> the readers outside the region whose casts were taken
	outside := map[int]int{}  // step -> its readers outside the region
	for _, i := range p.Outputs {
		b := nodes[i]
		v, ok := g.val0(b)
		if !ok || v.dtype != FP32 {
			continue
		}
		for _, c := range g.cons[b] {
			if member[c] {
				continue
			}
			outside[i]++
			if cast, ok := g.gemmCastOf(c, b, v.dims, claimed); ok {
				cast.step = i
				casts = append(casts, cast)
				absorbed[i]++
			}
		}
	}
	if len(casts) == 0 {
		return p, nil
	}
	q := *p
	q.Steps = slices.Clone(p.Steps)
	q.Outputs, q.OutDrop, q.Into = nil, nil, nil
	drop := func(k int) int {
		if k < len(p.OutDrop) {
			return p.OutDrop[k]
		}
		return 0
	}
	dropOf := map[int]int{}
	for k, o := range p.Outputs {
		dropOf[o] = drop(k)
		if outside[o] > 0 && absorbed[o] == outside[o] && !g.passedOver[nodes[o]] {
			continue // read outside by the GEMMs alone: they take the copies
		}
		q.Outputs = append(q.Outputs, o)
		q.OutDrop = append(q.OutDrop, drop(k))
		q.Into = append(q.Into, "")
	}
	var ops []int32
	for _, c := range casts {
		q.Steps = append(q.Steps, program.Step{Op: program.Cast, Args: []program.Arg{program.StepArg(c.step)}, DType: c.dtype})
		q.Outputs = append(q.Outputs, len(q.Steps)-1)
		q.OutDrop = append(q.OutDrop, dropOf[c.step])
		q.Into = append(q.Into, c.into)
		ops = append(ops, c.op)
	}
	if !q.Drops() {
		q.OutDrop = nil
	}
	if err := q.Validate(); err != nil {
		return p, nil
	}
	return &q, ops
}

// gemmCastOf returns the autocast cast GEMM node c makes of node b's value (dims, fp32),
// which c reads at one position only, as its activation: the cast nested directly in c whose
// input has that operand's dims and dtype, counted in argument order (autocast casts the
// arguments in order, and a parameter's cast, which autocast caches, may be absent: it never
// has an activation's place before the activation's own). Refused: a claimed GEMM, a cast
// that launched no kernel, one of another element count (a slice of the value), a copy to a
// type other than fp16 or bf16.
func (g *graph) gemmCastOf(c, b int32, vdims []int64, claimed map[int32]bool) (gemmCast, bool) {
	t := g.t
	id := g.nodes[c]
	into := g.name[c]
	if claimed[id] || !program.IntoOps[into] {
		return gemmCast{}, false
	}
	ins := g.ins(c)
	pos := -1
	for k, p := range g.in[c] {
		if p != b {
			continue
		}
		if pos >= 0 {
			return gemmCast{}, false // the value twice (x @ x.T)
		}
		pos = k
	}
	if pos < 0 || pos >= len(ins) || !isTensor(ins[pos]) || parseDType(ins[pos].Type) != FP32 {
		return gemmCast{}, false
	}
	if act, known := activationOperand[into]; known && act >= 0 && act != pos {
		return gemmCast{}, false // the value is the GEMM's weight or bias
	}
	want := ins[pos]
	if numel(want.Dims) != numel(vdims) {
		return gemmCast{}, false
	}
	same := func(d []int64, typ string) bool { return slices.Equal(d, want.Dims) && typ == want.Type }
	nth := 0 // the operands before pos that autocast casts as it casts this one
	for k := range pos {
		if isTensor(ins[k]) && same(ins[k].Dims, ins[k].Type) {
			nth++
		}
	}
	for _, ch := range t.Ops[id].Children {
		op := &t.Ops[ch]
		if !castOps[op.Name] || len(op.Inputs) == 0 || !same(op.Inputs[0].Dims, op.Inputs[0].Type) {
			continue
		}
		if nth > 0 {
			nth--
			continue
		}
		if ok, weight := castOperand(t, ch); !ok || weight {
			return gemmCast{}, false
		}
		if _, k := subtreeActs(t, ch); k == 0 || claimed[ch] {
			return gemmCast{}, false
		}
		out := outputs(t, ch)
		if len(out) == 0 || out[0].dtype != FP16 && out[0].dtype != BF16 {
			return gemmCast{}, false
		}
		dt, _ := progDType(out[0].dtype)
		return gemmCast{op: ch, dtype: dt, into: into}, true
	}
	return gemmCast{}, false
}

// takeOutputCasts gives each instance of a CastsOutput pattern the autocast casts of its
// output (the value of its last op) where every reader of that value is a GEMM that casts it
// to the same 16-bit type (gemmCastOf): the casts' OpIDs join the instance's ops, so their
// kernels and their ToCopyBackward0 count as the instance's, Params.OutDType becomes the
// casts' type (Params.OutCast), and the fused kernel's bytes shrink by the output written in
// it. Where several GEMMs read it (LlamaRMSNorm's output: q, k and v), CastReaders counts
// them: the kernel writes the 16-bit value once, and the autograd engine then sums its
// gradients in that type (their fp32 sums after the casts' backward are the instance's;
// estimateBackward prices the 16-bit ones). The GEMM may be another catalog instance's
// (layernorm_linear's, which overlaps this one at the norm and is its alternative;
// linear_gelu's, whose module takes a 16-bit x as autocast's linear does): a GEMM instance
// claims none of the casts nested in its GEMM.
//
// From the Kineto trace alone a norm's output that a residual join was turned away from
// (graph.passedOver: the pre-norm reading, x + f(norm(x))) may be read by that join too (a
// post-norm block, BERT's, reads y there). The backward tells (castsOnlyReaders); without
// one its casts are not taken, and undecided counts them.
func takeOutputCasts(g *graph, found []*Instance) (undecided int) {
	for _, in := range found {
		if !patternByID(in.Pattern).CastsOutput || len(in.Ops) == 0 {
			continue
		}
		b := g.node[in.Ops[len(in.Ops)-1]]
		if b < 0 {
			continue
		}
		v, ok := g.val0(b)
		if !ok || v.dtype != FP32 || len(g.cons[b]) == 0 {
			continue
		}
		var casts []gemmCast
		for _, c := range g.cons[b] {
			cast, ok := g.gemmCastOf(c, b, v.dims, nil)
			if !ok || len(casts) > 0 && cast.dtype != casts[0].dtype {
				casts = nil
				break
			}
			casts = append(casts, cast)
		}
		if len(casts) == 0 {
			continue
		}
		if g.passedOver[b] {
			if only, known := castsOnlyReaders(g.t, casts); !known {
				undecided++
				continue
			} else if !only {
				continue
			}
		}
		for _, c := range casts {
			in.Ops = append(in.Ops, c.op)
		}
		slices.Sort(in.Ops)
		in.CastReaders = len(casts)
		in.Params.OutDType = DType(casts[0].dtype)
		in.Params.OutCast = true
		saved := numel(v.dims) * (v.dtype.Size() - in.Params.OutDType.Size())
		in.Bytes -= saved
		in.WriteBytes -= saved
	}
	return undecided
}

// castsOnlyReaders tells, from the backward of a training trace, whether casts (of one value,
// into GEMMs) are that value's only readers: the autograd engine sums the value's gradients
// as they arrive, in the evaluate_function of the node that brings each one but the first
// (accumulations), so the casts' ToCopyBackward0 nodes hold one sum fewer than there are
// casts when nothing else reads the value (Llama's q/k/v, a pre-norm block), and one sum a
// cast where another reader's gradient came first (a post-norm block's residual add, whose
// backward runs before the GEMMs'). known is false where a cast has no backward node in the
// trace or the sums fit neither.
func castsOnlyReaders(t *trace.Trace, casts []gemmCast) (only, known bool) {
	sums := 0
	for _, c := range casts {
		b := backwardNode(t, c.op)
		if b < 0 {
			return false, false
		}
		sums += len(accumulations(t, b))
	}
	switch sums {
	case len(casts) - 1:
		return true, true
	case len(casts):
		return false, true
	}
	return false, false
}

// backwardNode is the backward node linked to op id or an op nested in it (a cast's
// ToCopyBackward0 is linked to the aten::_to_copy in its aten::to), or -1.
func backwardNode(t *trace.Trace, id int32) int32 {
	if b := t.Ops[id].Bwd; b >= 0 {
		return b
	}
	for _, c := range t.Ops[id].Children {
		if b := backwardNode(t, c); b >= 0 {
			return b
		}
	}
	return -1
}
