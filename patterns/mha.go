package patterns

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/trace"
)

// MultiheadAttention is nn.MultiheadAttention's packed projection split for the heads, found
// in a trace: torch.nn.functional._in_projection_packed's
//
//	proj.unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
//	q, k, v = proj[0], proj[1], proj[2]
//
// (for a key that is the value, a decoder's cross-attention, k and v's projection split in
// two, [2, E]) copies the whole projection in the forward; in the backward each select's
// gradient is a zero-filled tensor of the whole projection's size with its part copied in,
// the engine adds them, and the unflatten's view copies the sum back to the GEMM's layout.
// With batch_first the inputs are transposed to (L, N, E) first, so each projection's GEMM
// copies its input and adds the bias in a kernel of its own. The drop-in MultiheadAttention
// (templates/_mha) views q, k and v in the projections and stacks their gradients once. One
// finding a trace.
type MultiheadAttention struct {
	// Calls is the number of splits in the trace (attention calls of the layers x steps).
	Calls int `json:"calls"`
	Steps int `json:"steps"`
	// Shapes are the split projections' sizes, [3, L, N, E] as contiguous copies them
	// ([2, S, N, E] for a key that is the value).
	Shapes     [][]int64 `json:"shapes"`
	BatchFirst bool      `json:"batch_first"` // the input transposed before the projection
	DType      DType     `json:"dtype"`
	// ForwardUs and BackwardUs are the GPU time of the copies (all steps): the split's copy,
	// and for a transposed input the GEMM's copy of it and its bias added apart; the selects'
	// zero fills, copies and sums and the view's copy back.
	ForwardUs  float64 `json:"forward_us"`
	BackwardUs float64 `json:"backward_us"`
	Kernels    int     `json:"kernels"`
	// EstStackUs is what the drop-in adds (all steps): one stack of the split's gradients a
	// call in training, at the cost model's bandwidth.
	EstStackUs  float64 `json:"est_stack_us,omitempty"`
	EstSavingUs float64 `json:"est_saving_us,omitempty"`
	Advice      string  `json:"advice"`
	Why         string  `json:"not_offered,omitempty"`
	Rank        int     `json:"rank,omitempty"`
}

// MultiheadAttentionDir is the folder gen writes the drop-in module into.
const MultiheadAttentionDir = "multihead_attention"

// mhaSplit is one split found: the ops of the chain and what nn.MultiheadAttention does next.
// Self-attention splits q, k and v ([3, L, N, E]); attention whose key is its value (a
// decoder's cross-attention on the encoder's memory) projects q apart and splits k and v
// ([2, S, N, E]).
type mhaSplit struct {
	contiguous, unflatten int32
	linears               []int32 // the split projection's linear, and q's for a [2, ...] split
	views, selects        []int32 // unflatten's view, unsqueeze, transpose, squeeze; the selects
	batchFirst            bool    // the inputs transposed (1, 0) before the projections
	sdpa                  bool    // scaled_dot_product_attention follows before the next linear (need_weights=False)
}

// siblings returns the ops nested directly in op id's parent (the thread's roots for a root),
// in time order, and id's index among them.
func siblings(t *trace.Trace, id int32) ([]int32, int) {
	op := &t.Ops[id]
	var sib []int32
	switch {
	case op.Parent >= 0:
		sib = t.Ops[op.Parent].Children
	case op.Thread >= 0 && int(op.Thread) < len(t.Threads):
		sib = t.Threads[op.Thread].Roots
	}
	return sib, slices.Index(sib, id)
}

// concreteIs says whether input i of op is recorded as the concrete value s.
func concreteIs(op *trace.Op, i int, s string) bool {
	return i < len(op.Inputs) && strings.TrimSpace(op.Inputs[i].Concrete) == s
}

// linearOf says whether op is an aten::linear of a weight [rows, e].
func linearOf(op *trace.Op, rows, e int64) bool {
	return op.Name == "aten::linear" && len(op.Inputs) >= 2 && len(op.Inputs[1].Dims) == 2 &&
		op.Inputs[1].Dims[0] == rows && op.Inputs[1].Dims[1] == e
}

// findMHASplit reports the packed projection's split whose aten::contiguous is op id.
func findMHASplit(t *trace.Trace, id int32) (mhaSplit, bool) {
	op := &t.Ops[id]
	if op.Name != "aten::contiguous" || len(op.Inputs) == 0 || len(op.Inputs[0].Dims) < 2 {
		return mhaSplit{}, false
	}
	dims := op.Inputs[0].Dims
	parts, e := dims[0], dims[len(dims)-1]
	if parts != 2 && parts != 3 {
		return mhaSplit{}, false
	}
	sib, k := siblings(t, id)
	if k < 5 || k+int(parts) >= len(sib) {
		return mhaSplit{}, false
	}
	s := mhaSplit{contiguous: id, unflatten: sib[k-4], linears: []int32{sib[k-5]}}
	for j, name := range []string{"aten::unflatten", "aten::unsqueeze", "aten::transpose", "aten::squeeze"} {
		if t.Ops[sib[k-4+j]].Name != name {
			return mhaSplit{}, false
		}
	}
	if !concreteIs(&t.Ops[s.unflatten], 2, fmt.Sprintf("[%d, %d]", parts, e)) || !concreteIs(&t.Ops[s.unflatten], 1, "-1") ||
		!linearOf(&t.Ops[s.linears[0]], parts*e, e) {
		return mhaSplit{}, false
	}
	for _, c := range t.Ops[s.unflatten].Children {
		if t.Ops[c].Name == "aten::view" {
			s.views = append(s.views, c)
		}
	}
	s.views = append(s.views, sib[k-3], sib[k-2], sib[k-1])
	for j := range int(parts) {
		sel := &t.Ops[sib[k+1+j]]
		if sel.Name != "aten::select" || !concreteIs(sel, 1, "0") || !concreteIs(sel, 2, strconv.Itoa(j)) {
			return mhaSplit{}, false
		}
		s.selects = append(s.selects, sib[k+1+j])
	}
	// before the projections: q's own (for a k/v split, the linear just before), the packed
	// weights' split (aten::split_with_sizes) and batch_first's transposes of the inputs: a
	// transpose(1, 0) whose output is the split projection's input
	in := t.Ops[s.linears[0]].Inputs[0].Dims
	for j := k - 6; j >= 0 && j >= k-12; j-- {
		o := &t.Ops[sib[j]]
		switch {
		case parts == 2 && j == k-6 && linearOf(o, e, e):
			s.linears = append(s.linears, sib[j])
		case o.Name == "aten::transpose" && concreteIs(o, 1, "1") && concreteIs(o, 2, "0") && len(in) == 3 &&
			len(o.Inputs[0].Dims) == 3 && o.Inputs[0].Dims[0] == in[1] && o.Inputs[0].Dims[1] == in[0] && o.Inputs[0].Dims[2] == in[2]:
			s.batchFirst = true
		}
	}
	for _, n := range sib[k+1+int(parts):] {
		name := t.Ops[n].Name
		if name == "aten::scaled_dot_product_attention" {
			s.sdpa = true
		}
		if name == "aten::linear" || s.sdpa {
			break
		}
	}
	return s, true
}

// nodeActs are the kernels of backward node b with what the engine runs for it (its
// "autograd::engine::evaluate_function: NAME" op, the sum of the gradients it hands on
// included); none for b < 0.
func nodeActs(t *trace.Trace, b int32) []int32 {
	if b < 0 {
		return nil
	}
	if p := t.Ops[b].Parent; p >= 0 && t.Ops[p].Name == evaluateFunction+t.Ops[b].Name {
		return subtreeActIDs(t, p)
	}
	return subtreeActIDs(t, b)
}

// copies returns the split's forward and backward kernels that the drop-in removes.
func (s mhaSplit) copies(t *trace.Trace) (fwd, bwd []int32) {
	fwd = subtreeActIDs(t, s.contiguous)
	if s.batchFirst {
		// aten::linear on a transposed input runs matmul, whose reshape copies it, and adds
		// the bias in a kernel of its own (add_); on a contiguous input it is one addmm with
		// the bias in cuBLAS's epilogue. Not autocast's cast of the input, which stays.
		var walk func(id int32)
		walk = func(id int32) {
			// (the add_ in the linear, or in autocast's re-dispatched linear nested in it)
			if n := t.Ops[id].Name; n == "aten::clone" || n == "aten::add_" && t.Ops[t.Ops[id].Parent].Name == "aten::linear" {
				fwd = append(fwd, subtreeActIDs(t, id)...)
				return
			}
			for _, c := range t.Ops[id].Children {
				walk(c)
			}
		}
		for _, l := range s.linears {
			walk(l)
		}
	}
	for _, c := range t.Ops[s.contiguous].Children {
		bwd = append(bwd, nodeActs(t, t.Ops[c].Bwd)...)
	}
	for _, id := range append(slices.Clone(s.views), s.selects...) {
		bwd = append(bwd, nodeActs(t, t.Ops[id].Bwd)...)
	}
	return fwd, bwd
}

// Text is the finding's advice as the analysis and the report print it (adviceText).
func (f *MultiheadAttention) Text() string { return adviceText(f.Advice, f.Why, f.HostSaving()) }

// HostSaving is the sentence on what an offered finding takes off the host ("" for nothing).
func (f *MultiheadAttention) HostSaving() string {
	if f.Kernels == 0 || f.Why != "" {
		return ""
	}
	return fmt.Sprintf("On the host the copies are %d kernel launches a step, which a host-bound step no longer makes "+
		"(measured on an H100 at the encoder's shapes: 9 launches a call fewer, the drop-in's own included; the encoder's and a decoder's "+
		"training steps 15%% and 18%% shorter in wall time, docs/benchmarks/h200.md)", f.Kernels/f.Steps)
}

// multiheadAttention finds t's packed projection splits (findMHASplit): the finding, or nil
// where t has none, and the kernels it claims where offered. steps is t's step count, m the
// calibrated cost model (the stack's estimate).
func multiheadAttention(t *trace.Trace, steps int, m CostModel) (*MultiheadAttention, []int32) {
	f := &MultiheadAttention{Steps: max(steps, 1), DType: DTypeUnknown}
	var acts []int32
	var fwdNs, bwdNs, offeredNs int64 // all calls' copies; the calls the drop-in takes
	var stackUs float64
	seen := map[string]bool{}
	types := map[DType]bool{}
	trained, weights, batchFirst := 0, 0, 0
	for i := range t.Ops {
		s, ok := findMHASplit(t, int32(i))
		if !ok {
			continue
		}
		f.Calls++
		in := t.Ops[s.contiguous].Inputs[0]
		if key := fmt.Sprint(in.Dims); !seen[key] {
			seen[key] = true
			f.Shapes = append(f.Shapes, in.Dims)
		}
		dt := parseDType(in.Type)
		types[dt] = true
		if s.batchFirst {
			batchFirst++
		}
		fwd, bwd := s.copies(t)
		f.Kernels += len(fwd) + len(bwd)
		var ns int64
		for _, a := range fwd {
			fwdNs += t.Acts[a].Dur
			ns += t.Acts[a].Dur
		}
		for _, a := range bwd {
			bwdNs += t.Acts[a].Dur
			ns += t.Acts[a].Dur
		}
		if slices.ContainsFunc(s.selects, func(id int32) bool { return t.Ops[id].Bwd >= 0 }) {
			trained++ // a backward node of the split ran (its kernels may be absent: a CPU trace)
		}
		if !s.sdpa { // need_weights=True: the drop-in runs nn.MultiheadAttention, copies and all
			weights++
			continue
		}
		offeredNs += ns
		if len(bwd) > 0 && m.BandwidthGBs > 0 { // (on a GPU trace)
			stackUs += m.KernelOverheadUs + float64(2*numel(in.Dims)*dt.Size())/(m.BandwidthGBs*1e3)
		}
		acts = append(acts, fwd...)
		acts = append(acts, bwd...)
	}
	if f.Calls == 0 {
		return nil, nil
	}
	if len(types) == 1 {
		for d := range types {
			f.DType = d
		}
	}
	f.BatchFirst = batchFirst > 0
	f.ForwardUs, f.BackwardUs = round2(us(fwdNs)), round2(us(bwdNs))
	if m.BandwidthGBs > 0 {
		f.EstStackUs = round2(stackUs)
	}
	perStep := (f.ForwardUs + f.BackwardUs) / float64(f.Steps)
	f.Advice = fmt.Sprintf("nn.MultiheadAttention splits its packed q/k/v projection with copies: %d calls, %d kernels, %s µs a step (%s µs forward, %s µs backward, all steps): "+
		"a contiguous copy of the projection, %sa zero-filled select gradient for each of q, k and v, their sum and a copy back",
		f.Calls, f.Kernels/f.Steps, fmtFloat(perStep), fmtFloat(f.ForwardUs), fmtFloat(f.BackwardUs),
		map[bool]string{true: "the GEMM's copy of the batch-first input and its bias added apart, ", false: ""}[f.BatchFirst])
	switch {
	case weights == f.Calls:
		f.Why = "the attention weights are returned (need_weights=True, no scaled_dot_product_attention follows): the drop-in runs nn.MultiheadAttention there; pass need_weights=False where the weights are not used"
	case trained == 0:
		f.Why = "no backward of the split in the trace (inference): the drop-in leaves inference to nn.MultiheadAttention and its fused fast path"
	case m.BandwidthGBs <= 0:
		f.Why = "the device's bandwidth is unknown, so the drop-in's own stack of the gradients is not estimated"
	case us(offeredNs) <= f.EstStackUs:
		f.Why = fmt.Sprintf("the copies (%s µs, all steps) cost no more than the drop-in's stack of the gradients (estimated %s µs)",
			fmtFloat(us(offeredNs)), fmtFloat(f.EstStackUs))
	}
	if f.Why != "" {
		return f, nil
	}
	f.EstSavingUs = round2(us(offeredNs) - f.EstStackUs)
	f.Advice += fmt.Sprintf(". Swap in the drop-in MultiheadAttention (gen writes it: %s/; swap_multihead_attention(model) changes each nn.MultiheadAttention's class, its parameters and state_dict stay): "+
		"q, k and v become views of the projection and their gradients one stack (estimated %s µs, all steps); it computes what nn.MultiheadAttention computes "+
		"(the same masks, dropout and scaled_dot_product_attention call) and runs nn.MultiheadAttention itself for a key that is not the value, need_weights=True and inference",
		MultiheadAttentionDir, fmtFloat(f.EstStackUs))
	if weights > 0 {
		f.Advice += fmt.Sprintf("; %d of the calls return the attention weights and keep their copies", weights)
	}
	return f, acts
}

// MultiheadAttentionOffered says whether the drop-in MultiheadAttention's advice applies to
// one of r's traces.
func (r *Report) MultiheadAttentionOffered() bool {
	for _, f := range r.MultiheadAttention {
		if f.Why == "" {
			return true
		}
	}
	return false
}
