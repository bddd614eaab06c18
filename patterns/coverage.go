package patterns

import (
	"cmp"
	"slices"
	"strings"

	"github.com/fuseadvise/fuseadvise/trace"
)

// Coverage is the share of the traces' memory-bound kernel time that the chains found
// claim: what fusing them could touch at all, against what fusion could touch anywhere.
//
// Every GPU kernel (memcpys and memsets are left out) falls in one class, decided by the
// CPU op that launched it (Activity.Op, the innermost op enclosing the launch):
//   - compute: the op is a matrix product, a convolution or an attention library call
//     (computeOp: mm, addmm, bmm, baddbmm, matmul, linear, conv*, convolution_backward,
//     scaled_dot_product_attention, _flash*, _efficient_attention*, ...), whatever kernels
//     it runs (cuBLAS split-K reductions, cuDNN layout transforms included);
//   - other: kernels no op launched (outside the window, CUDA graph replays) and
//     communication (NCCL kernels): their kind is not known from an op, and fusion does
//     not touch them;
//   - memory-bound: every other kernel: elementwise ops, casts and copies (those a
//     matmul or an autocast linear launches through a nested aten::copy_ too), reductions,
//     norms, softmax, dropout, optimizer updates, forward and backward alike.
//
// The chains are the catalog's instances and the generic chains with an op program (a
// generic region holds no op of a catalog instance, so the two never share a kernel).
// A chain claims the memory-bound kernels launched by its ops and the ops nested in them,
// its GEMMs (Instance.GEMMs, which the fused form keeps) and what is nested in them left
// out. ClaimedUs counts every chain found (a kernel shared by overlapping chains once),
// CountedUs the chains of the non-overlapping set that Totals sums. The WithBackward
// figures add the memory-bound kernels of the backward ops the chains' forward ops caused
// (Op.Bwd with the engine's work on its gradients, bwdOps, as backward_gpu_time_us), the
// GEMMs' backward left out again unless the pattern's backward sums the GEMM's bias itself
// (Pattern.SumsGEMMBias).
type Coverage struct {
	MemoryBoundUs      float64 `json:"memory_bound_us"`
	MemoryBoundKernels int     `json:"memory_bound_kernels"`
	ComputeUs          float64 `json:"compute_us"`
	OtherUs            float64 `json:"other_us"`

	ClaimedUs      float64 `json:"claimed_us"`
	ClaimedKernels int     `json:"claimed_kernels"`
	ClaimedPct     float64 `json:"claimed_pct_of_memory_bound"`
	CountedUs      float64 `json:"counted_us"`
	CountedKernels int     `json:"counted_kernels"`
	CountedPct     float64 `json:"counted_pct_of_memory_bound"`

	ClaimedWithBackwardUs  float64 `json:"claimed_with_backward_us"`
	ClaimedWithBackwardPct float64 `json:"claimed_with_backward_pct_of_memory_bound"`
	CountedWithBackwardUs  float64 `json:"counted_with_backward_us"`
	CountedWithBackwardPct float64 `json:"counted_with_backward_pct_of_memory_bound"`

	// OptimizerUs is the memory-bound kernel time of the optimizer steps whose fused=True
	// the analysis estimates to save time (OptimizerFinding), and WithOptimizerPct the share
	// the chains (with their backward kernels) and those steps claim together.
	// MasterWeightsUs is the memory-bound kernel time of autocast's weight casts that keeping
	// the weights in bf16 with fp32 masters in the optimizer removes (MasterWeights, where
	// offered); WithOptimizerPct counts it too.
	// MultiheadAttentionUs is the memory-bound kernel time of nn.MultiheadAttention's packed
	// projection copies that the drop-in MultiheadAttention removes (where offered);
	// WithOptimizerPct counts it too: the share the chains and the advice of the optimizer
	// and of the modules claim together.
	OptimizerUs          float64 `json:"optimizer_us,omitempty"`
	MasterWeightsUs      float64 `json:"master_weights_us,omitempty"`
	MultiheadAttentionUs float64 `json:"multihead_attention_us,omitempty"`
	WithOptimizerPct     float64 `json:"with_optimizer_pct_of_memory_bound,omitempty"`

	// Unclaimed is where the memory-bound time no chain claims (forward or backward) goes,
	// the unclaimedTop largest first: what a user looks at next once the chains are fused.
	Unclaimed []UnclaimedOp `json:"unclaimed,omitempty"`
	// Autocast is the part of it that autocast's casts into GEMMs take (nil for none).
	Autocast *AutocastCasts `json:"autocast,omitempty"`
}

// AutocastCasts is the memory-bound time no chain claims of autocast's casts into GEMMs: the
// cast of a GEMM's operand to its compute type nested in the GEMM op (forward: "aten::copy_
// in aten::linear") and that cast's ToCopyBackward0 (the gradient cast back to the operand's
// type), by what the operand is. On the shared training traces they are 7-16% of the
// memory-bound time; the backward's upcast runs at half the bandwidth of the forward's cast.
type AutocastCasts struct {
	// WeightsUs: a weight's or bias' casts (a parameter of a linear, addmm, mm or
	// convolution: once a forward under autocast's cache, and its gradient's once a backward).
	WeightsUs float64 `json:"weights_us"`
	// ActivationsUs: a GEMM input's (a linear's, addmm's, mm's or convolution's input,
	// either operand of a matmul, bmm or baddbmm): casts torch.compile fuses into the kernels
	// that produce the value and that consume its gradient.
	ActivationsUs float64 `json:"activations_us"`
	ForwardUs     float64 `json:"forward_us"`
	BackwardUs    float64 `json:"backward_us"`
	Kernels       int     `json:"kernels"`
	Pct           float64 `json:"pct_of_memory_bound"`
}

// castOps are the ops autocast casts an operand with (aten::to, and the _to_copy in it).
var castOps = map[string]bool{"aten::to": true, "aten::_to_copy": true}

// activationOperand is, per GEMM op, which input is the activation (the others are its
// parameters); -1: every operand is an activation (matmul's, bmm's: attention's q, k and v).
var activationOperand = map[string]int{
	"linear": 0, "addmm": 1, "mm": 0, "_addmm_activation": 1, "addmv": 1, "mv": 0,
	"conv1d": 0, "conv2d": 0, "conv3d": 0, "convolution": 0, "_convolution": 0,
	"conv_transpose1d": 0, "conv_transpose2d": 0, "conv_transpose3d": 0,
}

// autocastCast says whether the kernels op launched are an autocast cast into a GEMM (its
// forward cast, bwd false, or its ToCopyBackward0, bwd true), and whether of a weight (else
// an activation).
func autocastCast(t *trace.Trace, op int32) (ok, bwd, weight bool) {
	ok, bwd, weight, _ = autocastCastOf(t, op)
	return ok, bwd, weight
}

// autocastCastOf is autocastCast with the forward op of the cast: op itself for a forward
// cast, the forward op a ToCopyBackward0 node is linked to for its backward.
func autocastCastOf(t *trace.Trace, op int32) (ok, bwd, weight bool, fwd int32) {
	for id := op; id >= 0 && int(id) < len(t.Ops); id = t.Ops[id].Parent {
		n := t.Ops[id].Name
		if !strings.HasPrefix(n, evaluateFunction) {
			continue
		}
		if n != evaluateFunction+"ToCopyBackward0" {
			return false, false, false, -1
		}
		for _, c := range t.Ops[id].Children {
			if f := t.Ops[c].Fwd; t.Ops[c].Name == "ToCopyBackward0" && f >= 0 {
				ok, weight = castOperand(t, f)
				return ok, true, weight, f
			}
		}
		return false, false, false, -1
	}
	ok, weight = castOperand(t, op)
	return ok, false, weight, op
}

// castOperand says whether op is, or is nested in, a cast (castOps) made directly in a GEMM
// op, and whether its operand is one of the GEMM's parameters: its dims are a parameter
// input's and not the activation's; where they are both, the GEMM's first cast is the
// activation's (autocast casts the arguments in order).
func castOperand(t *trace.Trace, op int32) (ok, weight bool) {
	for id := op; id >= 0 && int(id) < len(t.Ops); id = t.Ops[id].Parent {
		p := t.Ops[id].Parent
		if !castOps[t.Ops[id].Name] || p < 0 || !computeOp(t.Ops[p].Name) {
			continue
		}
		g := &t.Ops[p]
		act, known := activationOperand[baseName(g.Name)]
		if !known || act < 0 || len(t.Ops[id].Inputs) == 0 || act >= len(g.Inputs) {
			return true, false
		}
		d := t.Ops[id].Inputs[0].Dims
		isAct, isParam := slices.Equal(d, g.Inputs[act].Dims), false
		for i, in := range g.Inputs {
			if i != act && in.Dims != nil && slices.Equal(d, in.Dims) {
				isParam = true
			}
		}
		if isAct && isParam { // the first cast in the GEMM is its input's
			first := slices.IndexFunc(g.Children, func(c int32) bool { return castOps[t.Ops[c].Name] })
			return true, first >= 0 && g.Children[first] != id
		}
		return true, isParam && !isAct
	}
	return false, false
}

// UnclaimedOp is memory-bound kernel time that no chain claims, by the op it belongs to
// (unclaimedLabel): an optimizer step, a backward node, or a forward's outermost ATen op.
type UnclaimedOp struct {
	Op      string  `json:"op"`
	Us      float64 `json:"us"`
	Kernels int     `json:"kernels"`
	Pct     float64 `json:"pct_of_memory_bound"`
}

// unclaimedTop is how many ops Coverage.Unclaimed lists.
const unclaimedTop = 8

// unclaimedLabel names what the kernels op launched belong to, for Coverage.Unclaimed: the
// optimizer step around it ("Optimizer.step#AdamW.step" -> "optimizer step (AdamW)", or
// "optimizer step (AdamW, fused)" where a _fused_* op launched the kernels), else
// the backward node it runs in ("autograd::engine::evaluate_function: NativeLayerNormBackward0"
// -> "NativeLayerNormBackward0"), else its outermost ATen op ("aten::layer_norm" for the
// kernels of an aten::native_layer_norm inside it), and where that is a GEMM, convolution or
// attention op, the innermost ATen op too ("aten::copy_ in aten::linear": autocast's casts);
// else the op's own name.
func unclaimedLabel(t *trace.Trace, op int32) string {
	inner, outer := "", ""
	for id := op; id >= 0 && int(id) < len(t.Ops); id = t.Ops[id].Parent {
		name := t.Ops[id].Name
		switch {
		case strings.HasPrefix(name, "Optimizer.step#"):
			class, _ := optimizerClass(name)
			if strings.HasPrefix(baseName(inner), "_fused_") {
				class += ", fused"
			}
			return "optimizer step (" + class + ")"
		case strings.HasPrefix(name, evaluateFunction):
			return strings.TrimPrefix(name, evaluateFunction)
		case strings.HasPrefix(name, "aten::"):
			if inner == "" {
				inner = name
			}
			outer = name
		}
	}
	switch {
	case outer == "":
		return t.Ops[op].Name
	case computeOp(outer) && inner != outer:
		return inner + " in " + outer
	}
	return outer
}

// kernelClass is a kernel's class for Coverage.
type kernelClass uint8

const (
	notKernel kernelClass = iota // a memcpy or memset
	memoryBound
	computeBound
	otherKernel
)

// computeOps are the ops whose kernels are library GEMMs, convolutions or attention.
var computeOps = map[string]bool{
	"mm": true, "addmm": true, "bmm": true, "baddbmm": true, "addbmm": true, "matmul": true,
	"linear": true, "_addmm_activation": true, "mv": true, "addmv": true, "dot": true, "vdot": true,
	"_scaled_mm": true, "_int_mm": true, "einsum": true, "convolution_backward": true,
	"scaled_dot_product_attention": true,
}

// computePrefixes are name prefixes of compute ops (the convolution and attention families).
var computePrefixes = []string{
	"conv", "_conv", "cudnn_conv", "miopen_conv", "mkldnn_conv", "slow_conv", "thnn_conv",
	"_flash", "_efficient_attention", "_scaled_dot_product", "_cudnn_attention",
}

// computeOp reports whether op name (as recorded, "aten::addmm") is a compute op.
func computeOp(name string) bool {
	b := baseName(name)
	if computeOps[b] {
		return true
	}
	for _, p := range computePrefixes {
		if strings.HasPrefix(b, p) {
			return true
		}
	}
	return false
}

// classify returns the class of activity a of t.
func classify(t *trace.Trace, a *trace.Activity) kernelClass {
	switch {
	case a.Kind != trace.ActKernel:
		return notKernel
	case a.Op < 0 || int(a.Op) >= len(t.Ops) || a.Graph || strings.HasPrefix(a.Name, "nccl"):
		return otherKernel
	case computeOp(t.Ops[a.Op].Name):
		return computeBound
	}
	return memoryBound
}

// coverage measures what the chains of all claim of the traces' memory-bound kernel time;
// keep marks the counted set; optimizers[ti] names the optimizer classes of trace ti whose
// steps' kernels the optimizer advice claims, master[ti] (non-nil) that the master weights'
// advice claims its weights' casts, but the tied ones, and mha[ti] the kernels the drop-in
// MultiheadAttention removes. Nil when the traces hold no memory-bound kernel.
func coverage(traces []*trace.Trace, all []ranked, keep []bool, optimizers []map[string]bool, master []*tiedWeights, mha [][]int32) *Coverage {
	c := &Coverage{}
	class := make([][]kernelClass, len(traces))
	for ti, t := range traces {
		class[ti] = make([]kernelClass, len(t.Acts))
		for i := range t.Acts {
			a := &t.Acts[i]
			k := classify(t, a)
			class[ti][i] = k
			switch k {
			case memoryBound:
				c.MemoryBoundUs += us(a.Dur)
				c.MemoryBoundKernels++
			case computeBound:
				c.ComputeUs += us(a.Dur)
			case otherKernel:
				c.OtherUs += us(a.Dur)
			}
		}
	}
	if c.MemoryBoundKernels == 0 {
		return nil
	}
	type key struct {
		ti  int
		act int32
	}
	fwdAll, fwdKept, bwdAll, bwdKept := map[key]bool{}, map[key]bool{}, map[key]bool{}, map[key]bool{}
	for i, rk := range all {
		t := traces[rk.ti]
		fwd, bwd := chainKernels(t, rk.in)
		for _, a := range fwd {
			if class[rk.ti][a] == memoryBound {
				fwdAll[key{rk.ti, a}] = true
				if keep[i] {
					fwdKept[key{rk.ti, a}] = true
				}
			}
		}
		for _, a := range bwd {
			if class[rk.ti][a] == memoryBound {
				bwdAll[key{rk.ti, a}] = true
				if keep[i] {
					bwdKept[key{rk.ti, a}] = true
				}
			}
		}
	}
	sum := func(sets ...map[key]bool) (float64, int) {
		seen := map[key]bool{}
		var ns int64 // whole nanoseconds: the sum does not depend on the maps' order
		for _, set := range sets {
			for k := range set {
				if !seen[k] {
					seen[k] = true
					ns += traces[k.ti].Acts[k.act].Dur
				}
			}
		}
		return us(ns), len(seen)
	}
	opt := map[key]bool{}
	for ti, t := range traces {
		if ti >= len(optimizers) || len(optimizers[ti]) == 0 {
			continue
		}
		for i := range t.Ops {
			name := t.Ops[i].Name
			if class, ok := optimizerClass(name); !ok || !optimizers[ti][class] {
				continue
			}
			for _, a := range subtreeActIDs(t, int32(i)) {
				if class[ti][a] == memoryBound {
					opt[key{ti, a}] = true
				}
			}
		}
	}
	mst := map[key]bool{}
	for ti, t := range traces {
		if ti >= len(master) || master[ti] == nil {
			continue
		}
		roles := map[int32]bool{}
		tied := master[ti]
		for i := range t.Acts {
			if class[ti][i] != memoryBound || fwdAll[key{ti, int32(i)}] || bwdAll[key{ti, int32(i)}] {
				continue
			}
			op := t.Acts[i].Op
			w, seen := roles[op]
			if !seen {
				w, _ = weightCast(t, op, tied)
				roles[op] = w
			}
			if w {
				mst[key{ti, int32(i)}] = true
			}
		}
	}
	heads := map[key]bool{}
	for ti := range mha {
		for _, a := range mha[ti] {
			if k := (key{ti, a}); class[ti][a] == memoryBound && !fwdAll[k] && !bwdAll[k] {
				heads[k] = true
			}
		}
	}
	claimed := func(ti int, act int32) bool {
		k := key{ti, act}
		return fwdAll[k] || bwdAll[k] || opt[k] || mst[k] || heads[k]
	}
	c.Unclaimed = unclaimed(traces, class, claimed, c.MemoryBoundUs)
	c.Autocast = autocastCasts(traces, class, claimed, c.MemoryBoundUs)
	if len(opt) > 0 || len(mst) > 0 || len(heads) > 0 {
		c.OptimizerUs, _ = sum(opt)
		c.MasterWeightsUs, _ = sum(mst)
		c.MultiheadAttentionUs, _ = sum(heads)
		withOpt, _ := sum(fwdAll, bwdAll, opt, mst, heads)
		c.WithOptimizerPct = round2(withOpt / c.MemoryBoundUs * 100)
	}
	c.ClaimedUs, c.ClaimedKernels = sum(fwdAll)
	c.CountedUs, c.CountedKernels = sum(fwdKept)
	c.ClaimedWithBackwardUs, _ = sum(fwdAll, bwdAll)
	c.CountedWithBackwardUs, _ = sum(fwdKept, bwdKept)
	pct := func(v float64) float64 { return round2(v / c.MemoryBoundUs * 100) }
	c.ClaimedPct, c.CountedPct = pct(c.ClaimedUs), pct(c.CountedUs)
	c.ClaimedWithBackwardPct, c.CountedWithBackwardPct = pct(c.ClaimedWithBackwardUs), pct(c.CountedWithBackwardUs)
	for _, p := range []*float64{&c.MemoryBoundUs, &c.ComputeUs, &c.OtherUs, &c.ClaimedUs, &c.CountedUs,
		&c.ClaimedWithBackwardUs, &c.CountedWithBackwardUs, &c.OptimizerUs, &c.MasterWeightsUs, &c.MultiheadAttentionUs} {
		*p = round2(*p)
	}
	return c
}

// autocastCasts adds up the memory-bound kernels no chain claims that are autocast's casts
// into GEMMs (autocastCast), across the traces; nil where there are none.
func autocastCasts(traces []*trace.Trace, class [][]kernelClass, claimed func(ti int, act int32) bool, total float64) *AutocastCasts {
	var w, a, f, b int64
	n := 0
	for ti, t := range traces {
		type role struct{ ok, bwd, weight bool }
		roles := map[int32]role{} // an op's kernels share its role
		for i := range t.Acts {
			if class[ti][i] != memoryBound || claimed(ti, int32(i)) {
				continue
			}
			op := t.Acts[i].Op
			r, seen := roles[op]
			if !seen {
				r.ok, r.bwd, r.weight = autocastCast(t, op)
				roles[op] = r
			}
			if !r.ok {
				continue
			}
			d := t.Acts[i].Dur
			n++
			if r.weight {
				w += d
			} else {
				a += d
			}
			if r.bwd {
				b += d
			} else {
				f += d
			}
		}
	}
	if n == 0 {
		return nil
	}
	return &AutocastCasts{WeightsUs: round2(us(w)), ActivationsUs: round2(us(a)), ForwardUs: round2(us(f)),
		BackwardUs: round2(us(b)), Kernels: n, Pct: round2(us(w+a) / total * 100)}
}

// unclaimed adds up the memory-bound kernels no chain claims by unclaimedLabel, across the
// traces, and returns the unclaimedTop largest (ties by name), each with its share of total,
// the memory-bound time.
func unclaimed(traces []*trace.Trace, class [][]kernelClass, claimed func(ti int, act int32) bool, total float64) []UnclaimedOp {
	type acc struct {
		ns      int64
		kernels int
	}
	by := map[string]*acc{}
	for ti, t := range traces {
		labels := map[int32]string{} // an op's kernels share its label (a foreach op launches dozens)
		for i := range t.Acts {
			if class[ti][i] != memoryBound || claimed(ti, int32(i)) {
				continue
			}
			a := &t.Acts[i]
			l, ok := labels[a.Op]
			if !ok {
				l = unclaimedLabel(t, a.Op)
				labels[a.Op] = l
			}
			if by[l] == nil {
				by[l] = &acc{}
			}
			by[l].ns += a.Dur
			by[l].kernels++
		}
	}
	out := make([]UnclaimedOp, 0, len(by))
	for l, a := range by {
		out = append(out, UnclaimedOp{Op: l, Us: round2(us(a.ns)), Kernels: a.kernels, Pct: round2(us(a.ns) / total * 100)})
	}
	slices.SortFunc(out, func(a, b UnclaimedOp) int {
		if c := cmp.Compare(b.Us, a.Us); c != 0 {
			return c
		}
		return strings.Compare(a.Op, b.Op)
	})
	if len(out) > unclaimedTop {
		out = out[:unclaimedTop]
	}
	return out
}

// chainKernels returns the activities (indices into t.Acts) the ops of in launched, they
// and the ops nested in them, and those of the backward ops they caused; the GEMMs of
// in and what is nested in them left out, but for a pattern whose fused backward sums the
// GEMM's bias gradient (SumsGEMMBias) the backward nodes of the GEMM ops themselves (not
// of the casts nested in them): eager's bias row sum, what that pass replaces (their GEMM
// kernels are compute, not memory-bound, and so never claimed); so too for the GEMMs whose
// bias the instance takes (Instance.TakesBias: dropout_add's).
func chainKernels(t *trace.Trace, in *Instance) (fwd, bwd []int32) {
	gemm := map[int32]bool{}
	for _, id := range in.GEMMs {
		gemm[id] = true
	}
	sumsBias := patternByID(in.Pattern).SumsGEMMBias
	takesCasts := patternByID(in.Pattern).TakesGEMMCasts
	seen := map[int32]bool{}
	var walk func(id int32, out *[]int32, bwdToo bool)
	gemmBwd := func(id int32) {
		for _, b := range gemmBackwardNodes(t, id) {
			for _, o := range bwdOps(t, b) {
				walk(o, &bwd, false)
			}
		}
	}
	walk = func(id int32, out *[]int32, bwdToo bool) {
		if seen[id] {
			return
		}
		if gemm[id] {
			if takesCasts { // the activation's autocast cast in the GEMM (TakesGEMMCasts)
				for _, c := range t.Ops[id].Children {
					if ok, weight := castOperand(t, c); ok && !weight {
						walk(c, out, bwdToo)
					}
				}
			}
			return
		}
		seen[id] = true
		op := &t.Ops[id]
		*out = append(*out, op.Acts...)
		if bwdToo && op.Bwd >= 0 {
			ops := bwdOps(t, op.Bwd)
			if tookCast(t, in, id) {
				// an autocast cast into a GEMM that the instance took (an output of its
				// own): its input is the instance's value, whose gradients from its other
				// readers the engine adds to the cast's after the cast's backward (aten::add
				// in its evaluate_function); the fused backward gets each output's gradient
				// and adds them itself. (A TakesGEMMCasts instance takes no such cast: its casts'
				// sums are its only where its GEMMs run as one, concatSums.)
				ops = append(ops, accumulations(t, op.Bwd)...)
			}
			for _, b := range ops {
				walk(b, &bwd, false)
			}
		}
		for _, c := range op.Children {
			walk(c, out, bwdToo)
		}
	}
	for _, id := range topOps(t, in.Ops) {
		walk(id, &fwd, true)
	}
	if sumsBias {
		for _, id := range in.GEMMs {
			gemmBwd(id)
		}
	}
	for _, id := range in.TakesBias {
		gemmBwd(id)
	}
	for _, id := range concatSums(t, in) {
		walk(id, &bwd, false)
	}
	return fwd, bwd
}

// concatSums are, for an instance whose kernel makes its GEMMs' activation itself
// (TakesGEMMCasts) and runs its GEMMs as one over their concatenated weights
// (Params.ConcatN: BERT's Q, K and V), the gradient sums the engine runs after the backward
// of the activation's casts in those GEMMs (accumulations): the one GEMM gives the norm's
// output one gradient, so all but one of the Linears' sums go (a post-norm residual reading
// the output too keeps one: at most Linears - 1 of them).
func concatSums(t *trace.Trace, in *Instance) []int32 {
	if !patternByID(in.Pattern).TakesGEMMCasts || in.Params.ConcatN <= 0 || in.Params.Linears < 2 {
		return nil
	}
	var sums []int32
	for _, g := range in.GEMMs {
		for _, c := range t.Ops[g].Children {
			if ok, weight := castOperand(t, c); ok && !weight {
				if b := backwardNode(t, c); b >= 0 {
					sums = append(sums, accumulations(t, b)...)
				}
			}
		}
	}
	return sums[:min(len(sums), in.Params.Linears-1)]
}

// tookCast says whether op id is, or is nested directly in, an autocast cast into a GEMM
// that is one of in's own ops (a cast it writes as an output of its own: withGEMMCasts,
// takeOutputCasts): the gradient sums after that cast's backward node (accumulations) are
// the fused backward's.
func tookCast(t *trace.Trace, in *Instance, id int32) bool {
	for _, x := range []int32{id, t.Ops[id].Parent} {
		if x >= 0 && slices.Contains(in.Ops, x) {
			ok, _ := castOperand(t, id)
			return ok
		}
	}
	return false
}

// accumulations are the gradient sums the autograd engine runs after backward node b, in
// its evaluate_function, where an input of the node's forward op had a gradient already
// (aten::add or aten::add_ directly in it).
func accumulations(t *trace.Trace, b int32) []int32 {
	p := t.Ops[b].Parent
	if p < 0 || t.Ops[p].Name != evaluateFunction+t.Ops[b].Name {
		return nil
	}
	var out []int32
	for _, c := range t.Ops[p].Children {
		if n := t.Ops[c].Name; n == "aten::add" || n == "aten::add_" {
			out = append(out, c)
		}
	}
	return out
}

// subtreeActIDs are the GPU activities op id and the ops nested in it launched.
func subtreeActIDs(t *trace.Trace, id int32) []int32 {
	acts := slices.Clone(t.Ops[id].Acts)
	for _, c := range t.Ops[id].Children {
		acts = append(acts, subtreeActIDs(t, c)...)
	}
	return acts
}
