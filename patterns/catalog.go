package patterns

import (
	"slices"
	"strings"

	"github.com/fuseadvise/fuseadvise/trace"
)

// Params are a kernel generator's parameters for one instance. Every field is a
// validated number or an enum value, never free text from the trace; nil or ""
// means the trace does not record it.
type Params struct {
	Approximate string   `json:"approximate,omitempty"` // gelu: "none" | "tanh"
	MaskKind    string   `json:"mask_kind,omitempty"`   // mask_softmax: "bool" | "additive" | "causal"
	MaskDims    []int64  `json:"mask_dims,omitempty"`   // the mask's broadcast shape
	MaskDType   DType    `json:"mask_dtype,omitempty"`  // the mask's element type
	ScaleOp     string   `json:"scale_op,omitempty"`    // "mul" | "div" when a scale precedes the mask
	Scale       *float64 `json:"scale,omitempty"`       // the scale op's scalar operand as recorded: multiply by it ("mul") or divide by it ("div")
	SoftmaxDim  *int64   `json:"softmax_dim,omitempty"` // softmax dim (normalized, >= 0) of dims[0]
	Attention   bool     `json:"attention,omitempty"`   // a GEMM feeds the scores and one reads the probabilities
	Eps         *float64 `json:"eps,omitempty"`         // norm epsilon when recorded
	P           *float64 `json:"p,omitempty"`           // dropout probability
	Casting     string   `json:"casting,omitempty"`     // rmsnorm: "llama" | "gemma" | "none"
	Bias        *bool    `json:"bias,omitempty"`        // linear_gelu, layernorm_linear: the GEMM has a bias; dropout_add: a bias add precedes the dropout
	// GEMMBias, dropout_add: the bias is the GEMM's before the dropout (nn.Linear's, Hugging
	// Face Conv1D's addmm), which the kernel takes: the GEMM runs without it, and the fused
	// backward sums its gradient in the pass that writes the dropout's, where eager's GEMM
	// backward reads the output gradient again for it.
	GEMMBias bool `json:"gemm_bias,omitempty"`
	// ConvBias, layernorm_linear: the norm's input is a convolution's output, with its bias,
	// through a permute to channels-last (ConvNeXt's depthwise conv), which the kernel takes:
	// the convolution runs without it, the call adds it (one pass, where eager's add in the
	// convolution and its LayerNorm's copy of the permuted rows are two), and the fused
	// backward sums its gradient from the norm's d_input, where eager's convolution backward
	// sums it over the permuted output gradient (ATen's sum at a fraction of a copy's speed).
	ConvBias bool `json:"conv_bias,omitempty"`
	Linears  int  `json:"linears,omitempty"` // layernorm_linear: GEMMs reading the norm output
	// ConcatN, layernorm_linear with several GEMMs reading the norm output (Q, K and V
	// projections): their output features summed, when they share the input features, the
	// op and bias-ness, so they can run as one GEMM over their concatenated weights (its
	// output split after); 0 otherwise.
	ConcatN  int64 `json:"concat_n,omitempty"`
	OutDType DType `json:"out_dtype,omitempty"` // the chain's output type when it differs from dtype
	// OutCast: OutDType is the 16-bit type autocast casts the output to for the GEMMs that
	// read it, the casts the instance takes (takeOutputCasts), not the chain's own type.
	OutCast bool `json:"out_cast,omitempty"`
	// ResidualDType, dropout_add and add_layernorm: the residual's type when it differs from
	// dtype (under autocast an fp32 residual stream meets a bf16 branch; the sum is fp32).
	ResidualDType DType `json:"residual_dtype,omitempty"`
	// NormDim, add_layernorm: the dim of dims[0] the LayerNorm normalizes when it is not the
	// last, reached through a permute (timm's LayerNorm2d: permute -> layer_norm over C ->
	// permute back, NormDim 1).
	NormDim *int64 `json:"norm_dim,omitempty"`
	// Attention only (attention.go): the mask's fill as the case spells it ("-inf", "min" or
	// a number; "" when not recorded); whether a where's condition keeps the scores (True =
	// keep, the inverse of masked_fill's mask); the bias added to the scores ("additive" or
	// "alibi") and its shape; the head dim, query and key lengths, batch*heads, the heads
	// when a 4-D view shows them (0 for a bmm over B*H), and the KV heads when K and V were
	// expanded from fewer (grouped-query attention).
	MaskFill   string  `json:"mask_fill,omitempty"`
	MaskKeeps  bool    `json:"mask_keeps,omitempty"`
	MaskFrom   string  `json:"mask_from,omitempty"` // "buffer": a causal mask taken from a sliced square buffer (its values unrecorded)
	MaskNeg    bool    `json:"mask_neg,omitempty"`  // an additive mask the chain subtracts (scores - m): the case's mask is -m
	BiasMask   bool    `json:"bias_mask,omitempty"` // the bias is a second (padding) mask added after the first: no gradient
	BiasKind   string  `json:"bias_kind,omitempty"`
	BiasDims   []int64 `json:"bias_dims,omitempty"`
	HeadDim    int64   `json:"head_dim,omitempty"`
	SeqQ       int64   `json:"seq_q,omitempty"`
	SeqK       int64   `json:"seq_k,omitempty"`
	BatchHeads int64   `json:"batch_heads,omitempty"`
	Heads      int64   `json:"heads,omitempty"`
	KVHeads    int64   `json:"kv_heads,omitempty"`
	// Cross-entropy only: the loss's reduction ("mean", "sum" or "none"), its ignore_index,
	// and where the logits are upcast ("float": a cast of 16-bit logits to fp32 before the
	// loss, which the instance holds; "autocast": nll_loss's upcast under autocast; "none").
	Reduction   string `json:"reduction,omitempty"`
	IgnoreIndex *int64 `json:"ignore_index,omitempty"`
	Upcast      string `json:"upcast,omitempty"`
	// LabelSmoothing, cross_entropy: the loss's label smoothing when recorded and not 0.
	LabelSmoothing *float64 `json:"label_smoothing,omitempty"`
}

// Instance is one occurrence of a pattern's forward chain.
type Instance struct {
	Pattern string
	Anchor  int32 // OpID of the anchoring node
	// Ops are the OpIDs of the chain's ops, sorted: its graph nodes and the ops nested in
	// another op that it takes (an autocast cast in a GEMM, a convolution's own bias add)
	Ops   []int32
	GEMMs []int32 // OpIDs among Ops whose kernels a fusion keeps (the GEMMs)
	// TakesBias are the OpIDs, not among Ops, of GEMMs or convolutions whose bias the fused
	// kernel takes (Params.GEMMBias, Params.ConvBias): their kernels stay, but their
	// backward's bias-gradient sum is the instance's (its traced backward time, its coverage).
	TakesBias []int32
	Dims      [][]int64
	DType     DType
	Params    Params
	// Elems is the element count of the chain's main tensor; Rows and Cols
	// its row count and row length for row-wise kernels.
	Elems, Rows, Cols int64
	// Bytes is the fewest bytes one fused kernel must move (inputs read once,
	// outputs written once), WriteBytes the part of them it writes; Flops the arithmetic
	// it cannot avoid (GEMMs).
	Bytes, WriteBytes, Flops int64
	// CastReaders counts the GEMMs whose autocast casts of the instance's output it takes
	// (takeOutputCasts; CastsOutput patterns): past one, the engine sums the output's
	// gradients in its 16-bit type, a cost of the fused backward.
	CastReaders int
}

// ---- helpers on the graph ----

func (g *graph) op(n int32) *trace.Op { return &g.t.Ops[g.nodes[n]] }

func (g *graph) ins(n int32) []trace.Input { return g.op(n).Inputs }

// tensorInputs returns the positions of n's dimensioned tensor inputs.
func (g *graph) tensorInputs(n int32) []int {
	var out []int
	for i, in := range g.ins(n) {
		if isTensor(in) {
			out = append(out, i)
		}
	}
	return out
}

// val0 returns n's first produced value.
func (g *graph) val0(n int32) (tval, bool) {
	if len(g.out[n]) == 0 {
		return tval{}, false
	}
	return g.out[n][0], true
}

func isName(s string, names ...string) bool {
	for _, n := range names {
		if s == n {
			return true
		}
	}
	return false
}

// stripInplace maps "add_" to "add".
func stripInplace(s string) string {
	if inPlace(s) {
		return strings.TrimSuffix(s, "_")
	}
	return s
}

// readsFrom returns the input positions of n whose producer is p.
func (g *graph) readsFrom(n, p int32) []int {
	var out []int
	for i, q := range g.in[n] {
		if q == p {
			out = append(out, i)
		}
	}
	return out
}

// dims copies d (for reports).
func dims(d []int64) []int64 { return append([]int64(nil), d...) }

func newInstance(g *graph, id string, anchor int32, ops ...int32) *Instance {
	in := &Instance{Pattern: id, Anchor: g.nodes[anchor]}
	seen := map[int32]bool{}
	for _, n := range ops {
		if n < 0 || seen[n] {
			continue
		}
		seen[n] = true
		in.Ops = append(in.Ops, g.nodes[n])
	}
	sortInt32(in.Ops)
	return in
}

func sortInt32(s []int32) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func gelApprox(ins []trace.Input) string {
	if len(ins) > 1 && strings.Trim(strings.TrimSpace(ins[1].Concrete), `"'`) == "tanh" {
		return "tanh"
	}
	return "none"
}

// ---- matchers ----

func matchBiasGelu(g *graph, n int32) (*Instance, bool) {
	a := g.producer(n, 0)
	if a < 0 || !isName(stripInplace(g.name[a]), "add") {
		return nil, false
	}
	ti := g.tensorInputs(a)
	if len(ti) != 2 {
		return nil, false
	}
	ins := g.ins(a)
	x, b := ins[ti[0]], ins[ti[1]]
	if len(x.Dims) == 1 && len(b.Dims) > 1 {
		x, b = b, x
	}
	// A bias is one row: numel == last dim of x, broadcast over every other dim.
	if len(b.Dims) == 0 || len(x.Dims) < 2 || numel(b.Dims) != x.Dims[len(x.Dims)-1] || b.Dims[len(b.Dims)-1] != x.Dims[len(x.Dims)-1] {
		return nil, false
	}
	v, ok := g.val0(n)
	if !ok {
		return nil, false
	}
	in := newInstance(g, "bias_gelu", n, a, n)
	in.Dims = [][]int64{dims(x.Dims), dims(b.Dims)}
	in.DType = v.dtype
	in.Params.Approximate = gelApprox(g.ins(n))
	in.Elems = numel(x.Dims)
	xs, bs, ys := parseDType(x.Type).Size(), parseDType(b.Type).Size(), v.dtype.Size()
	in.Bytes = in.Elems*xs + numel(b.Dims)*bs + in.Elems*ys
	in.WriteBytes = in.Elems * ys
	return in, true
}

func matchLinearGelu(g *graph, n int32) (*Instance, bool) {
	a := g.producer(n, 0)
	if a < 0 || !isName(g.name[a], "linear", "addmm", "_addmm_activation") {
		return nil, false
	}
	ins := g.ins(a)
	var x, w []int64
	bias := false
	switch g.name[a] {
	case "linear":
		if len(ins) < 2 {
			return nil, false
		}
		x, w = ins[0].Dims, ins[1].Dims
		bias = len(ins) > 2 && isTensor(ins[2])
	default:
		if len(ins) < 3 {
			return nil, false
		}
		x, w = ins[1].Dims, ins[2].Dims
		bias = isTensor(ins[0])
	}
	v, ok := g.val0(n)
	if !ok || len(x) == 0 || len(w) != 2 {
		return nil, false
	}
	in := newInstance(g, "linear_gelu", n, a, n)
	in.GEMMs = []int32{g.nodes[a]}
	in.Dims = [][]int64{dims(x), dims(w)}
	in.DType = v.dtype
	in.Params.Approximate = gelApprox(g.ins(n))
	in.Params.Bias = &bias
	in.Elems = numel(v.dims)
	k := x[len(x)-1]
	m := numel(x) / max(k, 1)
	nOut := v.dims[len(v.dims)-1]
	in.Rows, in.Cols = m, nOut
	// What the fusion removes: the GEMM output's write + the gelu's read and write
	// become one epilogue write. Bytes here are the epilogue's own traffic (the
	// output write), on top of the GEMM's measured time.
	in.Bytes = in.Elems * v.dtype.Size()
	in.Flops = 2 * m * k * nOut
	return in, true
}

// pointwiseSame reports whether node n is a pointwise arithmetic op whose value
// has exactly the dims d.
func (g *graph) pointwiseSame(n int32, d []int64, names ...string) bool {
	if !isName(stripInplace(g.name[n]), names...) {
		return false
	}
	v, ok := g.val0(n)
	return ok && eqDims(v.dims, d)
}

// scalarOperand reports whether n has exactly one dimensioned tensor input (the
// rest scalars or 0-dim tensors).
func (g *graph) scalarOperand(n int32) bool { return len(g.tensorInputs(n)) == 1 }

var geluArith = []string{"mul", "add", "pow", "div", "sub", "tanh"}

// matchGeluPyops finds the tanh-GELU written as ops. Its ops fan one tensor x
// out to several consumers (0.5*x, pow(x, 3), x + ...) with equal shapes, which
// shape inference cannot always tell apart; so the chain is taken as the
// connected run of pointwise ops on tanh's shape that surrounds the tanh (no
// other op in between), and checked for what makes it a GELU: one tanh, a cubic
// term before it, 6 to 9 ops in all.
func matchGeluPyops(g *graph, n int32) (*Instance, bool) {
	v, ok := g.val0(n)
	if !ok || len(v.dims) == 0 {
		return nil, false
	}
	thread := g.op(n).Thread
	inRun := func(k int32) bool {
		return k >= 0 && int(k) < len(g.nodes) && g.op(k).Thread == thread && g.pointwiseSame(k, v.dims, geluArith...)
	}
	lo, hi := n, n
	for lo-1 >= 0 && inRun(lo-1) && n-lo < 12 {
		lo--
	}
	for inRun(hi+1) && hi-n < 12 {
		hi++
	}
	// The connected component of tanh inside [lo, hi].
	comp := map[int32]bool{n: true}
	stack := []int32{n}
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		next := append(append([]int32(nil), g.in[c]...), g.cons[c]...)
		for _, k := range next {
			if k >= lo && k <= hi && !comp[k] {
				comp[k] = true
				stack = append(stack, k)
			}
		}
	}
	if len(comp) < 6 || len(comp) > 9 {
		return nil, false
	}
	cube, tt, tanhs := false, 0, 0
	var sources []int32
	var srcIn trace.Input
	var chain []int32
	for k := lo; k <= hi; k++ {
		if !comp[k] {
			continue
		}
		chain = append(chain, k)
		name := stripInplace(g.name[k])
		if name == "tanh" {
			tanhs++
		}
		if k < n && name == "pow" {
			if e, ok := concreteFloat(g.ins(k), 1); ok && e == 3 {
				cube = true
			}
		}
		if k < n && name == "mul" && len(g.tensorInputs(k)) == 2 {
			tt++
		}
		for i, p := range g.in[k] {
			if p >= 0 && !comp[p] && !slices.Contains(sources, p) {
				sources = append(sources, p)
				srcIn = g.ins(k)[i]
			}
		}
	}
	if tanhs != 1 || !cube && tt < 2 || len(sources) == 0 {
		return nil, false
	}
	in := newInstance(g, "gelu_pyops", n, chain...)
	in.Dims = [][]int64{dims(v.dims)}
	last, _ := g.val0(chain[len(chain)-1])
	in.DType = parseDType(g.ins(chain[0])[0].Type)
	if in.DType == DTypeUnknown {
		in.DType = parseDType(srcIn.Type)
	}
	if in.DType == DTypeUnknown {
		in.DType = parseDType(g.ins(chain[0])[0].Type)
	}
	in.Params.Approximate = "tanh"
	if last.dtype != in.DType && last.dtype != DTypeUnknown {
		in.Params.OutDType = last.dtype // autocast: pow runs in fp32, and every later op with it
	}
	in.Elems = numel(v.dims)
	in.Cols = v.dims[len(v.dims)-1]
	in.Rows = in.Elems / max(in.Cols, 1)
	in.Bytes = in.Elems*in.DType.Size() + in.Elems*max(last.dtype.Size(), 1)
	in.WriteBytes = in.Elems * max(last.dtype.Size(), 1)
	return in, true
}

// onlyConsumer returns n's single consumer, -1 when none or several.
func (g *graph) onlyConsumer(n int32) int32 {
	if len(g.cons[n]) != 1 {
		return -1
	}
	return g.cons[n][0]
}

func matchMaskSoftmax(g *graph, n int32) (*Instance, bool) {
	v, ok := g.val0(n)
	if !ok || len(v.dims) < 2 {
		return nil, false
	}
	ins := g.ins(n)
	dim, ok := concreteInt(ins, 1)
	if !ok {
		return nil, false
	}
	d, ok := normDim(dim, len(v.dims))
	if !ok {
		return nil, false
	}
	m := g.producer(n, 0)
	if m < 0 {
		return nil, false
	}
	mname := stripInplace(g.name[m])
	mins := g.ins(m)
	x := ins[0].Dims
	// The mask op may run on a view of the scores (CLIP, BART: [B, H, S, S] + mask,
	// then viewed as [B*H, S, S]): compare with its own output, which must be the
	// softmax input up to a view that keeps the softmax rows.
	mv, ok := g.val0(m)
	if !ok || numel(mv.dims) != numel(x) || len(mv.dims) == 0 {
		return nil, false
	}
	if !eqDims(mv.dims, x) && (d != len(x)-1 || mv.dims[len(mv.dims)-1] != x[d]) {
		return nil, false
	}
	out := mv.dims
	var p Params
	dd := int64(d)
	if !eqDims(out, x) {
		dd = int64(len(out) - 1) // the last dim, on the mask op's shape (dims[0])
	}
	p.SoftmaxDim = &dd
	scoresPos := -1
	maskPos := -1
	switch mname {
	case "masked_fill":
		if len(mins) < 2 || !isTensor(mins[0]) || parseDType(mins[1].Type) != Bool {
			return nil, false
		}
		scoresPos, maskPos = 0, 1
		p.MaskKind = "bool"
	case "where":
		if len(mins) < 3 || parseDType(mins[0].Type) != Bool {
			return nil, false
		}
		maskPos = 0
		for _, i := range []int{1, 2} {
			if isTensor(mins[i]) && eqDims(mins[i].Dims, out) {
				scoresPos = i
				break
			}
		}
		if scoresPos < 0 {
			return nil, false
		}
		p.MaskKind = "bool"
	case "add":
		// s - m (sub) or an add with alpha != 1 is not the kernel's s + m: refused, not
		// generated wrong
		ti := g.tensorInputs(m)
		if len(ti) != 2 {
			return nil, false
		}
		if a, ok := concreteFloat(mins, 2); ok && a != 1 || !ok && len(mins) > 2 && strings.TrimSpace(mins[2].Concrete) != "" {
			return nil, false
		}
		// The scores have the mask op's output shape; the mask broadcasts to it
		// with the full row on the last dim.
		for _, i := range ti {
			if eqDims(mins[i].Dims, out) && scoresPos < 0 {
				scoresPos = i
			} else {
				maskPos = i
			}
		}
		if scoresPos < 0 || maskPos < 0 {
			return nil, false
		}
		md := mins[maskPos].Dims
		if b, ok := broadcast(md, out); !ok || !eqDims(b, out) || len(md) < 2 || md[len(md)-1] != out[len(out)-1] {
			return nil, false
		}
		p.MaskKind = "additive"
	default:
		return nil, false
	}
	if maskPos >= 0 && maskPos < len(mins) {
		p.MaskDims = dims(mins[maskPos].Dims)
		p.MaskDType = parseDType(mins[maskPos].Type)
		if mp := g.producer(m, maskPos); mp >= 0 && g.causal(mp) {
			p.MaskKind = "causal"
		}
	}
	ops := []int32{m, n}
	scores := g.producer(m, scoresPos)
	if scores >= 0 && isName(stripInplace(g.name[scores]), "mul", "div") && g.scalarOperand(scores) && len(g.cons[scores]) == 1 {
		ops = append(ops, scores)
		p.ScaleOp = stripInplace(g.name[scores])
		for i, in := range g.ins(scores) {
			if i > 0 && !isTensor(in) {
				if f, ok := concreteFloat(g.ins(scores), i); ok && f != 0 {
					p.Scale = &f
				}
			}
		}
		scores = g.producer(scores, 0)
	}
	// bmm -> mask -> softmax -> (dropout) -> bmm: attention.
	if scores >= 0 && isName(g.name[scores], "matmul", "bmm", "baddbmm") {
		for _, c := range g.cons[n] {
			cc := c
			if isName(g.name[c], "dropout", "native_dropout") && len(g.cons[c]) > 0 {
				cc = g.cons[c][0]
			}
			if isName(g.name[cc], "matmul", "bmm") {
				p.Attention = true
			}
		}
	}
	in := newInstance(g, "mask_softmax", n, ops...)
	in.Dims = [][]int64{dims(out), p.MaskDims}
	in.Params = p
	in.DType = parseDType(mins[scoresPos].Type)
	if in.DType == DTypeUnknown {
		in.DType = v.dtype
	}
	in.Params.OutDType = v.dtype
	in.Elems = numel(x)
	in.Cols = x[d]
	in.Rows = in.Elems / max(in.Cols, 1)
	first := parseDType(g.ins(g.node[in.Ops[0]])[0].Type)
	if first == DTypeUnknown {
		first = v.dtype
	}
	in.Bytes = in.Elems*first.Size() + numel(p.MaskDims)*max(p.MaskDType.Size(), 1) + in.Elems*v.dtype.Size()
	in.WriteBytes = in.Elems * v.dtype.Size()
	return in, true
}

// causal reports whether a mask value is built from a causal comparison (query
// index vs key index, or triu/tril) and nothing else that could mask more
// (padding and-ed in).
func (g *graph) causal(n int32) bool {
	seen := map[int32]bool{}
	found := false
	var walk func(n int32, depth int) bool
	walk = func(n int32, depth int) bool {
		if n < 0 || seen[n] || depth > 10 {
			return true
		}
		seen[n] = true
		switch stripInplace(g.name[n]) {
		case "triu", "tril":
			found = true
			return true
		case "le", "ge", "lt", "gt":
			ti := g.tensorInputs(n)
			if len(ti) == 2 {
				a, b := g.ins(n)[ti[0]].Dims, g.ins(n)[ti[1]].Dims
				if len(a) >= 2 && len(b) >= 2 && a[len(a)-2] == 1 && b[len(b)-1] == 1 && b[len(b)-2] == a[len(a)-1] ||
					len(a) >= 2 && len(b) >= 2 && b[len(b)-2] == 1 && a[len(a)-1] == 1 && a[len(a)-2] == b[len(b)-1] {
					found = true
					return true
				}
			}
			return false
		case "__and__", "__or__", "logical_and", "logical_or", "bitwise_and", "bitwise_or", "index", "mul", "masked_fill":
			return false
		}
		for _, p := range g.in[n] {
			if !walk(p, depth+1) {
				return false
			}
		}
		return true
	}
	return walk(n, 0) && found
}

func (g *graph) gemmReading(c, n int32) bool {
	switch g.name[c] {
	case "linear", "mm", "matmul", "bmm":
		for _, i := range g.readsFrom(c, n) {
			if i == 0 || g.name[c] != "linear" {
				return true
			}
		}
	case "addmm", "_addmm_activation":
		for _, i := range g.readsFrom(c, n) {
			if i == 1 {
				return true
			}
		}
	}
	return false
}

func lnParams(ins []trace.Input) (eps *float64) {
	if e, ok := concreteFloat(ins, 4); ok && e > 0 && e < 1 {
		return &e
	}
	return nil
}

// gemmWeight is a GEMM op's weight shape as recorded ([N, K] for linear, [K, N] for addmm's
// Conv1D form and matmul) and whether it adds a bias.
func (g *graph) gemmWeight(c int32) (w []int64, bias bool) {
	in := g.ins(c)
	switch g.name[c] {
	case "linear":
		if len(in) > 1 {
			w = in[1].Dims
		}
		bias = len(in) > 2 && isTensor(in[2])
	case "addmm", "_addmm_activation":
		if len(in) > 2 {
			w = in[2].Dims
		}
		bias = isTensor(in[0])
	default:
		if len(in) > 1 {
			w = in[1].Dims
		}
	}
	return w, bias
}

// gemmNK is a GEMM op's output and input features from its weight (ok false when the
// weight is not 2-D).
func (g *graph) gemmNK(c int32) (n, k int64, ok bool) {
	w, _ := g.gemmWeight(c)
	if len(w) != 2 {
		return 0, 0, false
	}
	if g.name[c] == "linear" {
		return w[0], w[1], true
	}
	return w[1], w[0], true
}

func matchLayerNormLinear(g *graph, n int32) (*Instance, bool) {
	v, ok := g.val0(n)
	if !ok || len(v.dims) == 0 {
		return nil, false
	}
	var gemms []int32
	for _, c := range g.cons[n] {
		if g.gemmReading(c, n) {
			gemms = append(gemms, c)
		}
	}
	if len(gemms) == 0 {
		return nil, false
	}
	w, bias := g.gemmWeight(gemms[0])
	// GEMMs of one weight shape and bias-ness (Q, K and V projections) can run as one GEMM
	// over their concatenated weights: the fused kernel then reads the norm output once
	var concatN int64
	if n0, k0, ok := g.gemmNK(gemms[0]); ok && len(gemms) > 1 {
		concatN = n0
		for _, c := range gemms[1:] {
			n1, k1, ok := g.gemmNK(c)
			_, cb := g.gemmWeight(c)
			if !ok || k1 != k0 || cb != bias || g.name[c] != g.name[gemms[0]] {
				concatN = 0
				break
			}
			concatN += n1
		}
	}
	ops := append([]int32{n}, gemms...)
	in := newInstance(g, "layernorm_linear", n, ops...)
	for _, c := range gemms {
		in.GEMMs = append(in.GEMMs, g.nodes[c])
	}
	ins := g.ins(n)
	in.Dims = [][]int64{dims(ins[0].Dims), dims(w)}
	in.DType = parseDType(ins[0].Type)
	if conv, add, ok := g.convBiasOf(n, v.dims); ok {
		in.Params.ConvBias = true
		in.TakesBias = []int32{g.nodes[conv]}
		if add >= 0 { // the convolution's own bias add: the instance's kernel now
			in.Ops = append(in.Ops, add)
			sortInt32(in.Ops)
		}
	}
	in.Params.Eps = lnParams(ins)
	in.Params.Bias = &bias
	in.Params.Linears = len(gemms)
	in.Params.ConcatN = concatN
	// the chain's output is the GEMM's: under autocast an fp32 LayerNorm feeds a bf16 GEMM
	in.Params.OutDType = v.dtype
	if gv, ok := g.val0(gemms[0]); ok && gv.dtype != DTypeUnknown {
		in.Params.OutDType = gv.dtype
	}
	in.Elems = numel(v.dims)
	in.Cols = v.dims[len(v.dims)-1]
	in.Rows = in.Elems / max(in.Cols, 1)
	// The fused form keeps the GEMMs and adds a stats pass: read x once, write
	// mean and rstd (fp32) per row.
	in.Bytes = in.Elems*in.DType.Size() + 8*in.Rows
	in.WriteBytes = 8 * in.Rows
	if in.Params.ConvBias { // and the pass adding the convolution's bias: x read, the sum written
		in.Bytes += 2 * in.Elems * in.DType.Size()
		in.WriteBytes += in.Elems * in.DType.Size()
	}
	for _, c := range gemms {
		if cv, ok := g.val0(c); ok && len(cv.dims) > 0 {
			in.Flops += 2 * in.Elems * cv.dims[len(cv.dims)-1]
		}
	}
	return in, true
}

func matchAddLayerNorm(g *graph, n int32) (*Instance, bool) {
	a := g.producer(n, 0)
	if a < 0 {
		return nil, false
	}
	if stripInplace(g.name[a]) != "add" || len(g.tensorInputs(a)) != 2 {
		return matchConvBiasNorm(g, n)
	}
	v, ok := g.val0(n)
	if !ok || len(v.dims) == 0 {
		return nil, false
	}
	ins := g.ins(n)
	av, _ := g.val0(a)
	in := newInstance(g, "add_layernorm", n, a, n)
	ai := g.ins(a)
	ti := g.tensorInputs(a)
	in.Dims = [][]int64{dims(ai[ti[0]].Dims), dims(ai[ti[1]].Dims)}
	if !slices.Equal(in.Dims[0], av.dims) && slices.Equal(in.Dims[1], av.dims) {
		// x is the operand of the sum's shape: pos_emb + x reads as x + pos_emb
		in.Dims[0], in.Dims[1] = in.Dims[1], in.Dims[0]
		ti[0], ti[1] = ti[1], ti[0]
	}
	in.DType = av.dtype
	// operands of two types (a bf16 branch added to an fp32 residual stream): dtype is the
	// branch's, the residual is the wider one, whose type the sum has
	if d0, d1 := parseDType(ai[ti[0]].Type), parseDType(ai[ti[1]].Type); d0 != d1 && d0 != DTypeUnknown && d1 != DTypeUnknown {
		if d0 == av.dtype {
			in.Dims[0], in.Dims[1] = in.Dims[1], in.Dims[0]
			d0, d1 = d1, d0
		}
		in.DType, in.Params.ResidualDType = d0, d1
	}
	in.Params.Eps = lnParams(ins)
	in.Params.OutDType = v.dtype
	in.Elems = numel(v.dims)
	in.Cols = v.dims[len(v.dims)-1]
	in.Rows = in.Elems / max(in.Cols, 1)
	in.Bytes = numel(ai[ti[0]].Dims)*parseDType(ai[ti[0]].Type).Size() +
		numel(ai[ti[1]].Dims)*parseDType(ai[ti[1]].Type).Size() +
		in.Elems*av.dtype.Size() + in.Elems*v.dtype.Size() + 2*in.Cols*4
	in.WriteBytes = in.Elems*av.dtype.Size() + in.Elems*v.dtype.Size() // the sum and y
	if d, ok := g.normDimOf(a, n); ok && d != len(av.dims)-1 {
		nd := int64(d)
		in.Params.NormDim = &nd
	}
	return in, true
}

// matchConvBiasNorm is add_layernorm with a convolution's own bias add as its sum:
// ConvNeXt's stem, a convolution, a permute to channels-last and a LayerNorm over the
// channels (timm's and torchvision's LayerNorm2d) whose output no GEMM reads (where one does,
// layernorm_linear takes the bias: conv_bias). The sum s = x + bias ([1, C, 1, 1], the add's
// own operands) and y = the norm over dim 1 (norm_dim 1); the instance takes the bias
// (conv_bias: the convolution runs without it, TakesBias its backward's bias sum).
func matchConvBiasNorm(g *graph, n int32) (*Instance, bool) {
	v, ok := g.val0(n)
	if !ok || len(v.dims) < 3 {
		return nil, false
	}
	for _, c := range g.cons[n] {
		if g.gemmReading(c, n) {
			return nil, false
		}
	}
	conv, add, ok := g.convBiasOf(n, v.dims)
	if !ok || add < 0 {
		return nil, false
	}
	d, ok := g.normDimOf(conv, n)
	o := &g.t.Ops[add]
	if !ok || d != 1 || len(o.Inputs) < 2 || len(o.Inputs[0].Dims) != len(v.dims) {
		return nil, false
	}
	in := newInstance(g, "add_layernorm", n, n)
	in.Ops = append(in.Ops, add)
	sortInt32(in.Ops)
	in.TakesBias = []int32{g.nodes[conv]}
	in.Params.ConvBias = true
	nd := int64(1)
	in.Params.NormDim = &nd
	in.Dims = [][]int64{dims(o.Inputs[0].Dims), dims(o.Inputs[1].Dims)}
	in.DType = parseDType(o.Inputs[0].Type)
	in.Params.Eps = lnParams(g.ins(n))
	in.Params.OutDType = v.dtype
	in.Elems = numel(v.dims)
	in.Cols = v.dims[len(v.dims)-1]
	in.Rows = in.Elems / max(in.Cols, 1)
	// x and the bias read, the sum and y written, the norm's weight and bias
	in.Bytes = in.Elems*in.DType.Size() + in.Cols*in.DType.Size() + in.Elems*in.DType.Size() +
		in.Elems*v.dtype.Size() + 2*in.Cols*4
	in.WriteBytes = in.Elems*in.DType.Size() + in.Elems*v.dtype.Size()
	return in, true
}

// normDimOf is the dim of a's output that LayerNorm n normalizes (its input's last dim), found
// by following n's input back to a through the view ops between them: a permute moves the
// dim (its recorded order), an op that keeps the shape keeps it; any other view, or a path
// that does not reach a, and ok is false.
func (g *graph) normDimOf(a, n int32) (int, bool) {
	ins := g.ins(n)
	if len(ins) == 0 || len(ins[0].Dims) == 0 || len(g.dir) <= int(n) || len(g.dir[n]) == 0 {
		return 0, false
	}
	out := dims(ins[0].Dims)
	d := len(out) - 1
	for p, hops := g.dir[n][0], 0; p >= 0 && hops < 16; p, hops = g.dir[p][0], hops+1 {
		if p == a {
			return d, true
		}
		pi := g.ins(p)
		if !g.pass[p] || len(pi) == 0 || len(g.dir[p]) == 0 {
			return 0, false
		}
		in := dims(pi[0].Dims)
		switch {
		case stripInplace(g.name[p]) == "permute":
			perm, ok := intList(pi, 1)
			if !ok || len(perm) != len(in) || len(in) != len(out) {
				return 0, false
			}
			j, ok := normDim(perm[d], len(in))
			if !ok || in[j] != out[d] {
				return 0, false
			}
			d = j
		case !slices.Equal(in, out):
			return 0, false
		}
		out = in
	}
	return 0, false
}

// convBiasOf returns the convolution whose output, with its bias, LayerNorm node n reads
// through one permute that moves the channels (dim 1) last (ConvNeXt's depthwise conv, then
// a channels-last norm), and the OpID of the convolution's own bias add (an aten::add_ of a
// [1, C, 1...] view nested in it; -1 where its kernel added the bias). Taken where the
// convolution's output has no other reader, its bias is a [C] tensor of the norm's dim
// (vdims: the norm input's), and it adds the bias in a kernel of its own or has a backward
// in the trace (else taking it saves nothing).
func (g *graph) convBiasOf(n int32, vdims []int64) (conv int32, add int32, ok bool) {
	if n >= int32(len(g.dir)) || len(g.dir[n]) == 0 || len(vdims) < 2 {
		return -1, -1, false
	}
	view, conv := g.dir[n][0], g.producer(n, 0)
	if view < 0 || conv < 0 || view == conv || !g.pass[view] || g.name[view] != "permute" || len(g.dir[view]) == 0 || g.dir[view][0] != conv ||
		!strings.HasPrefix(g.name[conv], "conv") || strings.HasPrefix(g.name[conv], "conv_transpose") ||
		len(g.cons[conv]) != 1 || g.cons[conv][0] != n {
		return -1, -1, false
	}
	ins, out := g.ins(conv), g.ins(view)
	c := vdims[len(vdims)-1]
	if len(ins) < 3 || !isTensor(ins[2]) || !slices.Equal(ins[2].Dims, []int64{c}) || len(out) < 2 {
		return -1, -1, false
	}
	perm, ok := concreteInts(out[1].Concrete)
	if !ok || len(perm) != len(vdims) || (perm[len(perm)-1] != 1 && perm[len(perm)-1] != 1-int64(len(perm))) {
		return -1, -1, false
	}
	add = -1
	var walk func(id int32)
	walk = func(id int32) {
		o := &g.t.Ops[id]
		if o.Name == "aten::add_" && len(o.Inputs) > 1 && numel(o.Inputs[1].Dims) == c && len(o.Acts) > 0 {
			add = id
		}
		for _, k := range o.Children {
			walk(k)
		}
	}
	walk(g.nodes[conv])
	if add < 0 && len(gemmBackwardNodes(g.t, g.nodes[conv])) == 0 {
		return -1, -1, false
	}
	return conv, add, true
}

// gemmBiasOf returns the bias input of node c when c is a GEMM with a bias of the last dim
// (nn.Linear's; an addmm's 1-D input, beta and alpha 1 where recorded: Hugging Face's Conv1D)
// whose output only node n reads, as a value of dims vdims (through views that keep the last
// dim), and which has a backward in the trace (in inference taking the bias saves nothing).
func (g *graph) gemmBiasOf(c, n int32, vdims []int64) (trace.Input, bool) {
	if c < 0 || len(g.cons[c]) != 1 || g.cons[c][0] != n || len(vdims) == 0 || len(gemmBackwardNodes(g.t, g.nodes[c])) == 0 {
		return trace.Input{}, false
	}
	ins := g.ins(c)
	var b trace.Input
	switch g.name[c] {
	case "linear":
		if len(ins) < 3 || !isTensor(ins[2]) {
			return trace.Input{}, false
		}
		b = ins[2]
	case "addmm":
		if len(ins) < 3 || !isTensor(ins[0]) {
			return trace.Input{}, false
		}
		for _, i := range []int{3, 4} { // beta, alpha
			if v, ok := concreteFloat(ins, i); ok && v != 1 {
				return trace.Input{}, false
			}
		}
		b = ins[0]
	default:
		return trace.Input{}, false
	}
	out, ok := g.val0(c)
	last := vdims[len(vdims)-1]
	if !ok || len(b.Dims) != 1 || b.Dims[0] != last || len(out.dims) == 0 || out.dims[len(out.dims)-1] != last ||
		numel(out.dims) != numel(vdims) {
		return trace.Input{}, false
	}
	return b, true
}

func matchDropoutAdd(g *graph, n int32) (*Instance, bool) {
	if g.pass[n] || !dropoutRuns(g.t, g.nodes[n]) {
		return nil, false
	}
	v, ok := g.val0(n)
	if !ok {
		return nil, false
	}
	var add int32 = -1
	for _, c := range g.cons[n] {
		if stripInplace(g.name[c]) == "add" && len(g.tensorInputs(c)) == 2 {
			add = c
			break
		}
	}
	if add < 0 {
		return nil, false
	}
	av, ok := g.val0(add)
	if !ok {
		return nil, false
	}
	// A bias add feeding only the dropout joins the kernel: y = r + dropout(x + b).
	var bias int32 = -1
	var bdims []int64
	var bsize int64
	if b := g.producer(n, 0); b >= 0 && stripInplace(g.name[b]) == "add" && len(g.cons[b]) == 1 {
		if ti := g.tensorInputs(b); len(ti) == 2 {
			bi := g.ins(b)
			x, y := bi[ti[0]], bi[ti[1]]
			if len(x.Dims) == 1 {
				x, y = y, x
			}
			if len(y.Dims) == 1 && len(x.Dims) > 1 && y.Dims[0] == x.Dims[len(x.Dims)-1] {
				bias, bdims, bsize = b, y.Dims, y.Dims[0]*parseDType(y.Type).Size()
			}
		}
	}
	var gemm int32 = -1 // else a GEMM's bias: y = r + dropout(x W + b) takes b
	if bias < 0 {
		c := g.producer(n, 0)
		if d, ok := g.gemmBiasOf(c, n, v.dims); ok {
			gemm, bdims, bsize = c, d.Dims, d.Dims[0]*parseDType(d.Type).Size()
		}
	}
	in := newInstance(g, "dropout_add", n, bias, n, add)
	ai := g.ins(add)
	ti := g.tensorInputs(add)
	in.Dims = [][]int64{dims(ai[ti[0]].Dims), dims(ai[ti[1]].Dims)}
	hasBias := bias >= 0 || gemm >= 0
	if hasBias {
		in.Dims = append(in.Dims, dims(bdims))
	}
	if gemm >= 0 {
		in.Params.GEMMBias = true
		in.TakesBias = []int32{g.nodes[gemm]}
	}
	in.Params.Bias = &hasBias
	in.DType = v.dtype
	for _, i := range ti { // the add's other operand is the residual
		if !slices.Contains(g.readsFrom(add, n), i) {
			if d := parseDType(ai[i].Type); d != DTypeUnknown && d != v.dtype {
				in.Params.ResidualDType = d
			}
			break
		}
	}
	if p, ok := concreteFloat(g.ins(n), 1); ok && p >= 0 && p < 1 {
		in.Params.P = &p
	}
	in.Elems = numel(av.dims)
	in.Cols = av.dims[len(av.dims)-1]
	in.Rows = in.Elems / max(in.Cols, 1)
	// read x and r (and b), write y; no mask: the kernel regenerates it from its seed in
	// the backward.
	in.Bytes = numel(ai[ti[0]].Dims)*parseDType(ai[ti[0]].Type).Size() +
		numel(ai[ti[1]].Dims)*parseDType(ai[ti[1]].Type).Size() + in.Elems*av.dtype.Size() + bsize
	in.WriteBytes = in.Elems * av.dtype.Size()
	return in, true
}

func matchRMSNormPyops(g *graph, n int32) (*Instance, bool) {
	a := g.producer(n, 0)
	if a < 0 || stripInplace(g.name[a]) != "add" || !g.scalarOperand(a) {
		return nil, false
	}
	mean := g.producer(a, 0)
	if mean < 0 || g.name[mean] != "mean" {
		return nil, false
	}
	mi := g.ins(mean)
	red, ok := intList(mi, 1)
	if !ok || len(red) != 1 || len(mi[0].Dims) == 0 {
		return nil, false
	}
	if d, ok := normDim(red[0], len(mi[0].Dims)); !ok || d != len(mi[0].Dims)-1 {
		return nil, false
	}
	sq := g.producer(mean, 0)
	if sq < 0 {
		return nil, false
	}
	var x int32 = -1
	switch stripInplace(g.name[sq]) {
	case "pow":
		if e, ok := concreteFloat(g.ins(sq), 1); !ok || e != 2 {
			return nil, false
		}
		x = g.producer(sq, 0)
	case "mul":
		ps := g.in[sq]
		if len(ps) < 2 || ps[0] != ps[1] || ps[0] < 0 {
			return nil, false
		}
		x = ps[0]
	default:
		return nil, false
	}
	xd := mi[0].Dims
	// rsqrt's consumer scales x.
	var norm int32 = -1
	for _, c := range g.cons[n] {
		if stripInplace(g.name[c]) == "mul" && len(g.tensorInputs(c)) == 2 {
			norm = c
			break
		}
	}
	if norm < 0 {
		return nil, false
	}
	nv, ok := g.val0(norm)
	if !ok || !eqDims(nv.dims, xd) {
		return nil, false
	}
	if x >= 0 {
		reads := false
		for _, p := range g.in[norm] {
			if p == x {
				reads = true
			}
		}
		if !reads {
			return nil, false
		}
	}
	chain := []int32{sq, mean, a, n, norm}
	// Optional cast between normalize and weight (llama style), then the weight mul.
	casting := "none"
	w := g.onlyConsumer(norm)
	if w >= 0 && stripInplace(g.name[w]) == "mul" {
		for i, p := range g.in[w] {
			if p == norm {
				continue
			}
			wi := g.ins(w)[i]
			if !isTensor(wi) || len(wi.Dims) != 1 || wi.Dims[0] != xd[len(xd)-1] {
				w = -1
				break
			}
			if p >= 0 && stripInplace(g.name[p]) == "add" && g.scalarOperand(p) {
				casting = "gemma" // (1 + weight) offset, computed in fp32
				chain = append(chain, p)
			}
		}
	} else {
		w = -1
	}
	if w < 0 {
		return nil, false
	}
	// A to() between the normalize and the weight mul marks the llama cast.
	for _, i := range g.readsFrom(w, norm) {
		if d := directPass(g, w, i); d {
			if casting == "none" {
				casting = "llama"
			}
		}
	}
	chain = append(chain, w)
	in := newInstance(g, "rmsnorm_pyops", n, chain...)
	in.Dims = [][]int64{dims(xd), {xd[len(xd)-1]}}
	xi := g.ins(sq)[0]
	in.DType = parseDType(xi.Type)
	if xv, ok := g.val0(x); x >= 0 && ok && xv.dtype.Kernel() {
		in.DType = xv.dtype // x as the model holds it, before a to(float32)
	}
	wv, _ := g.val0(w)
	in.Params.Casting = casting
	if e, ok := concreteFloat(g.ins(a), 1); ok && e > 0 && e < 1 {
		in.Params.Eps = &e
	}
	in.Params.OutDType = wv.dtype
	in.Elems = numel(xd)
	in.Cols = xd[len(xd)-1]
	in.Rows = in.Elems / max(in.Cols, 1)
	in.Bytes = in.Elems*in.DType.Size() + in.Cols*in.DType.Size() + in.Elems*wv.dtype.Size()
	in.WriteBytes = in.Elems * wv.dtype.Size()
	return in, true
}

// directPass reports whether input i of node w is read through a to()/copy
// node (a cast the user wrote) rather than straight from its producer.
func directPass(g *graph, w int32, i int) bool {
	// Find the direct predecessor: the newest pass node feeding w whose source is
	// w's producer at i, between the producer and w.
	p := g.in[w][i]
	for k := w - 1; k > p && k >= 0 && w-k < 8; k-- {
		if g.pass[k] && g.src[k] == p && isName(g.name[k], "to", "_to_copy", "type_as") {
			return true
		}
	}
	return false
}

func matchSwiGLU(g *graph, n int32) (*Instance, bool) {
	v, ok := g.val0(n)
	if !ok {
		return nil, false
	}
	for _, c := range g.cons[n] {
		if stripInplace(g.name[c]) != "mul" || len(g.tensorInputs(c)) != 2 {
			continue
		}
		cv, ok := g.val0(c)
		if !ok || !eqDims(cv.dims, v.dims) {
			continue
		}
		ci := g.ins(c)
		ti := g.tensorInputs(c)
		if !eqDims(ci[ti[0]].Dims, ci[ti[1]].Dims) {
			continue
		}
		in := newInstance(g, "swiglu", n, n, c)
		in.Dims = [][]int64{dims(v.dims)}
		in.DType = cv.dtype
		in.Elems = numel(v.dims)
		in.Cols = v.dims[len(v.dims)-1]
		in.Rows = in.Elems / max(in.Cols, 1)
		gi := g.ins(n)[0]
		in.Bytes = in.Elems*parseDType(gi.Type).Size() + in.Elems*cv.dtype.Size()*2
		in.WriteBytes = in.Elems * cv.dtype.Size()
		return in, true
	}
	return nil, false
}

// ---- detection ----

// detect runs every pattern over the graph: one pass over the nodes, each node
// tried only against the patterns it anchors.
func detect(g *graph, only string) []*Instance {
	byAnchor := map[string][]*Pattern{}
	for _, p := range catalog {
		if only != "" && p.ID != only {
			continue
		}
		for _, a := range p.Anchors {
			byAnchor[a] = append(byAnchor[a], p)
		}
	}
	var out []*Instance
	for n := range g.nodes {
		for _, p := range byAnchor[g.name[n]] {
			if in, ok := p.match(g, int32(n)); ok {
				out = append(out, in)
			}
		}
	}
	return out
}
