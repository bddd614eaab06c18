package patterns

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The attention pattern: Q·Kᵀ -> (scale) -> (mask) -> (bias) -> softmax over the keys ->
// (dropout) -> ·V, matched from the softmax (the contract of the case it maps to is in
// docs/templates.md and templates/attention/).

// attnScoreGEMMs produce the scores; attnValueGEMMs read the probabilities.
var (
	attnScoreGEMMs = []string{"matmul", "bmm", "baddbmm"}
	attnValueGEMMs = []string{"matmul", "bmm"}
)

// finfoMin is torch.finfo(dtype).min, the fill Hugging Face's masks use.
var finfoMin = map[DType]float64{FP32: -math.MaxFloat32, FP16: -65504, BF16: -3.3895313892515355e38}

// attnTerm is a tensor added to (or filling) the scores between the two GEMMs.
type attnTerm struct {
	node  int32   // the op (add, masked_fill, where, or the baddbmm's input)
	dims  []int64 // the term's shape as recorded
	op    []int64 // the shape of the op's output (the scores as that op sees them)
	dtype DType
	pos   int   // the term's input position in node
	src   int32 // the term's producer (-1 unknown)
	kind  string
	fill  string // masked_fill / where: the fill as recorded ("" when not)
	keeps bool   // where: the condition keeps the scores
	fdt   DType  // the scores' type at a masked_fill / where (for "min")
	neg   bool   // a sub: the term is subtracted from the scores
}

// matchAttention matches the whole attention chain from its softmax: walking back through
// the mask, bias and scale ops to the GEMM that produced the scores, and forward through a
// dropout to the GEMM that reads the probabilities. Every op between must be one of those
// (views and casts aside) and read only by the next.
func matchAttention(g *graph, n int32) (*Instance, bool) {
	ins := g.ins(n)
	if len(ins) < 2 || len(ins[0].Dims) < 2 {
		return nil, false
	}
	x := ins[0].Dims
	if dim, ok := concreteInt(ins, 1); !ok {
		return nil, false
	} else if d, ok := normDim(dim, len(x)); !ok || d != len(x)-1 {
		return nil, false // not a softmax over the keys
	}
	sk := x[len(x)-1]
	var p Params
	biasDT := DTypeUnknown // an additive bias's type
	ops := []int32{n}
	var terms []attnTerm
	var sd []int64 // a 4-D shape of the scores seen on the way ([B, H, Sq, Sk])
	if len(x) == 4 {
		sd = x
	}
	scaled := false
	next, pos := n, 0
	cur := g.producer(n, 0)
	for steps := 0; ; steps++ {
		if cur < 0 || steps > 8 {
			return nil, false
		}
		ops = append(ops, g.castsBetween(next, pos)...)
		if isName(g.name[cur], attnScoreGEMMs...) {
			break
		}
		cv, ok := g.val0(cur)
		if !ok || len(g.cons[cur]) != 1 || numel(cv.dims) != numel(x) || len(cv.dims) == 0 || cv.dims[len(cv.dims)-1] != sk {
			return nil, false
		}
		if sd == nil && len(cv.dims) == 4 {
			sd = cv.dims
		}
		ci := g.ins(cur)
		base := stripInplace(g.name[cur])
		cont := -1 // the input carrying the scores
		switch {
		case isName(base, "mul", "div") && g.scalarOperand(cur):
			if scaled {
				return nil, false // two scales
			}
			scaled = true
			cont = g.tensorInputs(cur)[0]
			p.ScaleOp = base
			for i := range ci {
				if f, ok := concreteFloat(ci, i); i != cont && ok && f != 0 && !math.IsInf(f, 0) && !math.IsNaN(f) {
					p.Scale = &f
				}
			}
		case scaled:
			return nil, false // a mask or bias before the scale, which would scale it too
		case base == "masked_fill":
			if len(ci) < 2 || !isTensor(ci[0]) || !eqDims(ci[0].Dims, cv.dims) || parseDType(ci[1].Type) != Bool {
				return nil, false
			}
			cont = 0
			t := attnTerm{node: cur, dims: ci[1].Dims, op: cv.dims, dtype: Bool, pos: 1, src: g.producer(cur, 1), kind: "bool", fdt: cv.dtype}
			if len(ci) > 2 && !isTensor(ci[2]) {
				t.fill = strings.TrimSpace(ci[2].Concrete)
			}
			terms = append(terms, t)
		case base == "where":
			if len(ci) < 3 || parseDType(ci[0].Type) != Bool {
				return nil, false
			}
			for _, i := range []int{1, 2} {
				if isTensor(ci[i]) && eqDims(ci[i].Dims, cv.dims) && !isTensor(ci[3-i]) {
					cont = i
				}
			}
			if cont < 0 {
				return nil, false // no scalar fill: a where between two tensors
			}
			t := attnTerm{node: cur, dims: ci[0].Dims, op: cv.dims, dtype: Bool, pos: 0, src: g.producer(cur, 0), kind: "bool",
				keeps: cont == 1, fdt: cv.dtype}
			t.fill = strings.TrimSpace(ci[3-cont].Concrete)
			terms = append(terms, t)
		case base == "add":
			ti := g.tensorInputs(cur)
			if len(ti) != 2 {
				return nil, false
			}
			cont = g.scoresOperand(cur, ti, cv.dims)
			if cont < 0 {
				return nil, false
			}
			// a + alpha * b with alpha != 1 (or not readable) is not the kernel's s + m
			if alpha, ok := concreteFloat(ci, 2); ok && alpha != 1 || !ok && len(ci) > 2 && strings.TrimSpace(ci[2].Concrete) != "" {
				return nil, false
			}
			o := ti[0]
			if o == cont {
				o = ti[1]
			}
			terms = append(terms, attnTerm{node: cur, dims: ci[o].Dims, op: cv.dims, dtype: parseDType(ci[o].Type), pos: o, src: g.producer(cur, o), kind: "add"})
		case base == "sub":
			// scores - m (alpha 1): the additive mask -m; m - scores negates the scores
			if ti := g.tensorInputs(cur); len(ti) != 2 || ti[0] != 0 || !eqDims(ci[0].Dims, cv.dims) {
				return nil, false
			}
			if alpha, ok := concreteFloat(ci, 2); ok && alpha != 1 || !ok && len(ci) > 2 && strings.TrimSpace(ci[2].Concrete) != "" {
				return nil, false
			}
			cont = 0
			terms = append(terms, attnTerm{node: cur, dims: ci[1].Dims, op: cv.dims, dtype: parseDType(ci[1].Type), pos: 1, src: g.producer(cur, 1), kind: "add", neg: true})
		default:
			return nil, false // an op that is not part of the chain (tanh soft-capping, a head mask, rsub)
		}
		ops = append(ops, cur)
		next, pos = cur, cont
		cur = g.producer(cur, cont)
	}
	// the scores GEMM: q [..., Sq, D] @ kᵀ [..., D, Sk]
	gemm := cur
	gi := g.ins(gemm)
	a, b := 0, 1
	if g.name[gemm] == "baddbmm" {
		a, b = 1, 2
	}
	gv, ok := g.val0(gemm)
	if !ok || len(gi) <= b || len(g.cons[gemm]) != 1 {
		return nil, false
	}
	q, kt := gi[a].Dims, gi[b].Dims
	if len(q) < 2 || len(kt) < 2 || len(gv.dims) < 2 || q[len(q)-1] != kt[len(kt)-2] || kt[len(kt)-1] != sk {
		return nil, false
	}
	sq, hd := q[len(q)-2], q[len(q)-1]
	if x[len(x)-2] != sq || numel(gv.dims) != numel(x) {
		return nil, false
	}
	if g.name[gemm] == "baddbmm" {
		if alpha, ok := concreteFloat(gi, 4); ok && alpha != 1 && alpha != 0 && !math.IsInf(alpha, 0) && !math.IsNaN(alpha) {
			if scaled {
				return nil, false
			}
			p.ScaleOp, p.Scale = "mul", &alpha
		}
		if beta, ok := concreteFloat(gi, 3); (!ok || beta != 0) && isTensor(gi[0]) && numel(gi[0].Dims) > 1 {
			if ok && beta != 1 {
				return nil, false // a scaled bias
			}
			terms = append(terms, attnTerm{node: gemm, dims: gi[0].Dims, op: gv.dims, dtype: parseDType(gi[0].Type), pos: 0, src: g.producer(gemm, 0), kind: "add"})
		}
	}
	if sd == nil && len(gv.dims) == 4 {
		sd = gv.dims
	}
	bh := numel(x) / max(sq*sk, 1)
	var s4 []int64
	switch {
	case sd != nil && sd[0]*sd[1] == bh && sd[2] == sq && sd[3] == sk:
		s4 = []int64{sd[0], sd[1], sq, sk}
		p.Heads = sd[1]
	case len(gv.dims) <= 3:
		s4 = []int64{1, bh, sq, sk} // a bmm over B*H: the heads are not told apart
	default:
		return nil, false // scores of rank > 4
	}
	// the probabilities: softmax -> (dropout) -> ·V
	if len(g.cons[n]) != 1 {
		return nil, false // read by more than the ·V GEMM (output_attentions)
	}
	c := g.cons[n][0]
	probs := n
	if isName(g.name[c], "dropout", "native_dropout") {
		ops = append(ops, g.castsBetween(c, 0)...)
		ops = append(ops, c)
		if f, ok := concreteFloat(g.ins(c), 1); ok && f >= 0 && f < 1 {
			p.P = &f
		}
		if len(g.cons[c]) != 1 {
			return nil, false
		}
		probs, c = c, g.cons[c][0]
	}
	if !isName(g.name[c], attnValueGEMMs...) || !slices.Equal(g.readsFrom(c, probs), []int{0}) {
		return nil, false
	}
	ops = append(ops, g.castsBetween(c, 0)...)
	vi := g.ins(c)
	if len(vi) < 2 || len(vi[1].Dims) < 2 || vi[1].Dims[len(vi[1].Dims)-2] != sk {
		return nil, false
	}
	vd := vi[1].Dims[len(vi[1].Dims)-1]
	ops = append(ops, gemm, c)
	// the mask and the bias, in chain order (terms holds them nearest the softmax first)
	var masks, biases []attnRole
	for i := len(terms) - 1; i >= 0; i-- {
		t := terms[i]
		t4, ok := terms4(t.dims, t.op, s4)
		if !ok {
			return nil, false
		}
		r := attnRole{attnTerm: t, t4: t4, at: len(terms) - 1 - i, kind: t.kind, fillWord: fillWord(t.fill, t.fdt)}
		if r.kind == "add" {
			switch {
			case g.causal(t.src):
				r.kind = "causal"
			case t4[1] > 1 && t4[2] == 1 && sq > 1:
				r.kind = "alibi" // per head, the same for every query: slopes[h] * key position
			case t4[1] > 1:
				r.kind = "additive_bias"
			default:
				r.kind = "additive"
			}
		} else if g.causal(t.src) {
			r.kind = "causal"
		} else if g.squareBuffer(t.node, t.pos, sq, sk) {
			r.kind = "causal"
			r.buffer = true
		}
		if t.neg && r.kind != "additive" {
			return nil, false // a subtracted causal mask or bias
		}
		if r.kind == "alibi" || r.kind == "additive_bias" {
			biases = append(biases, r)
		} else {
			masks = append(masks, r)
		}
	}
	if mask, bias, ok := attnMaskBias(masks, biases); !ok {
		return nil, false
	} else {
		if mask != nil {
			p.MaskKind = mask.kind
			p.MaskDims = mask.t4
			p.MaskDType = mask.dtype
			p.MaskKeeps = mask.keeps && mask.kind == "bool"
			p.MaskFill = mask.fillWord
			p.MaskNeg = mask.neg
			if mask.buffer {
				p.MaskFrom = "buffer"
			}
		}
		if bias != nil {
			p.BiasKind = strings.TrimSuffix(bias.kind, "_bias") // "alibi" or "additive"
			p.BiasDims = bias.t4
			p.BiasMask = bias.padding
			biasDT = bias.dtype
		}
	}
	if p.MaskKind == "" {
		p.MaskKind = "none"
	}
	if p.MaskKind == "causal" {
		p.MaskDims, p.MaskDType = nil, DTypeUnknown
	}
	p.HeadDim, p.SeqQ, p.SeqK, p.BatchHeads = hd, sq, sk, bh
	p.KVHeads = g.kvHeads(gemm, b, c, s4[1])
	sm := int64(3)
	p.SoftmaxDim = &sm
	in := newInstance(g, "attention", n, ops...)
	// the type the GEMMs ran in: under autocast an fp32 q (after an fp32 RoPE) is cast to bf16
	in.DType = gv.dtype
	if !in.DType.Kernel() {
		in.DType = parseDType(gi[a].Type)
	}
	if ov, ok := g.val0(c); ok && ov.dtype != in.DType && ov.dtype.Kernel() {
		p.OutDType = ov.dtype
	}
	in.Params = p
	in.Dims = [][]int64{{s4[0], s4[1], sq, hd}, {s4[0], s4[1], sk, hd}, {s4[0], s4[1], sk, vd}}
	if p.MaskKind == "bool" || p.MaskKind == "additive" {
		in.Dims = append(in.Dims, p.MaskDims)
	}
	if p.BiasKind != "" {
		in.Dims = append(in.Dims, p.BiasDims)
	}
	in.Elems = bh * sq * sk
	in.Rows, in.Cols = bh*sq, sk
	es := max(in.DType.Size(), 1)
	in.WriteBytes = bh * sq * vd * es
	in.Bytes = (bh*sq*hd+bh*sk*hd+bh*sk*vd)*es + in.WriteBytes
	if p.MaskKind == "bool" || p.MaskKind == "additive" {
		in.Bytes += numel(p.MaskDims) * max(p.MaskDType.Size(), 1)
	}
	switch p.BiasKind {
	case "additive":
		in.Bytes += numel(p.BiasDims) * max(biasDT.Size(), es)
	case "alibi":
		in.Bytes += s4[1] * 4 // the slopes
	}
	in.Flops = 2 * bh * (hd + vd) * keptPairs(sq, sk, p.MaskKind == "causal")
	return in, true
}

// attnRole is a mask or bias term with its role: its kind ("causal", "bool", "additive",
// "alibi" or "additive_bias"), its shape on the scores' [B, H, Sq, Sk] and its place in the
// chain (0 nearest the scores GEMM).
type attnRole struct {
	attnTerm
	kind     string
	t4       []int64
	at       int
	fillWord string // a masked_fill / where's fill as the case spells it
	buffer   bool   // a causal mask sliced from a square buffer
	padding  bool   // a second mask taken as the kernel's additive bias
}

// attnMaskBias picks the case's mask and bias from the chain's terms (in chain order), or
// refuses: at most one bias, and one mask, or two where the kernel's order (mask, then
// bias) gives what the chain computes:
//   - a padding mask added after a causal (or bool, or additive) mask, as older GPT-2 and
//     CLIP-style text encoders (OWLv2's) do: the padding mask becomes the additive bias (it
//     gets no gradient: a mask does not train);
//   - a padding mask added before a causal mask that is added too (two adds commute), or
//     before a where / masked_fill with a -inf fill (filled positions stay -inf either way;
//     with a finite fill a row the padding masks everywhere would differ).
//
// A bias added before a mask filled with a finite number other than finfo.min (a fully
// masked row would be softmax(fill + bias), not uniform) is refused; with "min" the bias
// vanishes in the fill's rounding.
func attnMaskBias(masks, biases []attnRole) (mask, bias *attnRole, ok bool) {
	if len(biases) > 1 || len(masks) > 2 {
		return nil, nil, false // two biases, three masks
	}
	if len(masks) == 2 {
		if len(biases) > 0 {
			return nil, nil, false // two masks and a bias
		}
		a, b := masks[0], masks[1]
		switch {
		case b.kind == "additive" && !b.neg:
		case a.kind == "additive" && !a.neg && (b.attnTerm.kind == "add" || b.fillWord == "-inf"):
			a, b = b, a
		default:
			return nil, nil, false // two fill masks, or a padding mask added before a finitely filled one
		}
		b.kind, b.padding = "additive_bias", true
		masks, biases = []attnRole{a}, []attnRole{b}
	}
	if len(masks) == 1 {
		mask = &masks[0]
	}
	if len(biases) == 1 {
		bias = &biases[0]
		if bias.neg {
			return nil, nil, false // a subtracted bias
		}
		if mask != nil && bias.at < mask.at && mask.attnTerm.kind != "add" && mask.fillWord != "-inf" && mask.fillWord != "min" && mask.fillWord != "" {
			return nil, nil, false // a bias before a mask with a finite fill
		}
	}
	return mask, bias, true
}

// scoresOperand picks which of an add's two tensor inputs carries the scores: the one of the
// op's output shape; of two such (a full [B, H, Sq, Sk] bias), the one a GEMM, scale or mask
// op produced for this add alone.
func (g *graph) scoresOperand(n int32, ti []int, out []int64) int {
	ins := g.ins(n)
	var full []int
	for _, i := range ti {
		if eqDims(ins[i].Dims, out) {
			full = append(full, i)
		}
	}
	switch len(full) {
	case 0:
		return -1
	case 1:
		return full[0]
	}
	for _, i := range full {
		pr := g.producer(n, i)
		if pr >= 0 && len(g.cons[pr]) == 1 && isName(stripInplace(g.name[pr]), "matmul", "bmm", "baddbmm", "mul", "div", "masked_fill", "where", "add") {
			return i
		}
	}
	return -1
}

// terms4 maps a mask or bias of shape d, added to scores of shape op, onto the scores'
// 4-D shape s4 [B, H, Sq, Sk]: right-aligned, the leading B*H of a 3-D op split as s4's.
func terms4(d, op, s4 []int64) ([]int64, bool) {
	if len(d) > len(op) {
		return nil, false
	}
	if b, ok := broadcast(d, op); !ok || !eqDims(b, op) {
		return nil, false
	}
	full := make([]int64, len(op))
	for i := range full {
		full[i] = 1
	}
	copy(full[len(op)-len(d):], d)
	switch len(op) {
	case 4:
		return full, true
	case 3:
		switch lead := full[0]; {
		case lead == 1:
			return []int64{1, 1, full[1], full[2]}, true
		case lead == s4[0]*s4[1]:
			return []int64{s4[0], s4[1], full[1], full[2]}, true
		}
	case 2:
		return []int64{1, 1, full[0], full[1]}, true
	}
	return nil, false
}

// fillWord is a masked_fill / where fill as the case spells it: "-inf", "min" (the scores'
// dtype's finfo.min) or the number; "" when not recorded (a 0-dim tensor).
func fillWord(s string, dt DType) string {
	f, err := strconv.ParseFloat(strings.Trim(s, `"' `), 64)
	switch {
	case err != nil || math.IsNaN(f):
		return ""
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsInf(f, 1) || math.Abs(f) > math.MaxFloat32:
		return ""
	case f == finfoMin[dt] || f == -math.MaxFloat32:
		return "min"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// keptPairs is the number of (query, key) pairs the kernel computes: all of them, or under a
// causal mask (bottom-right aligned) those with j <= i + Sk - Sq.
func keptPairs(sq, sk int64, causal bool) int64 {
	if !causal {
		return sq * sk
	}
	var n int64
	for i := int64(0); i < sq; i++ {
		n += min(sk, max(0, i+1+sk-sq))
	}
	return n
}

// castsBetween returns the views and casts through which input pos of node b reads its
// producer that launch GPU work (autocast's fp32 -> bf16 copy of the probabilities).
func (g *graph) castsBetween(b int32, pos int) []int32 {
	var out []int32
	if int(b) >= len(g.dir) || pos >= len(g.dir[b]) {
		return nil
	}
	d := g.dir[b][pos]
	for steps := 0; d >= 0 && g.pass[d] && steps < 16; steps++ {
		if _, k := subtreeActs(g.t, g.nodes[d]); k > 0 {
			out = append(out, d)
		}
		if len(g.dir[d]) == 0 {
			break
		}
		d = g.dir[d][0]
	}
	return out
}

// viewPath returns the view nodes through which input pos of node b reads its producer,
// nearest first.
func (g *graph) viewPath(b int32, pos int) []int32 {
	var out []int32
	if int(b) >= len(g.dir) || pos >= len(g.dir[b]) {
		return nil
	}
	d := g.dir[b][pos]
	for steps := 0; d >= 0 && g.pass[d] && steps < 16; steps++ {
		out = append(out, d)
		if len(g.dir[d]) == 0 {
			break
		}
		d = g.dir[d][0]
	}
	return out
}

// kvHeads is the number of K/V heads when K or V reach the GEMMs expanded from fewer heads
// than the queries have: Llama's repeat_kv (unsqueeze -> expand [B, Hkv, n_rep, S, D] ->
// reshape) or a broadcast matmul; 0 otherwise.
func (g *graph) kvHeads(gemm int32, kpos int, pv int32, heads int64) int64 {
	if kt := g.ins(gemm)[kpos].Dims; len(kt) == 4 && kt[1] > 0 && kt[1] < heads {
		return kt[1]
	}
	for _, at := range []struct {
		n   int32
		pos int
	}{{gemm, kpos}, {pv, 1}} {
		for _, d := range g.viewPath(at.n, at.pos) {
			if g.name[d] != "expand" {
				continue
			}
			if in := g.ins(d); len(in) > 0 && len(in[0].Dims) == 5 && in[0].Dims[2] == 1 && in[0].Dims[1] < heads {
				return in[0].Dims[1]
			}
		}
	}
	return 0
}

// squareBuffer reports whether the bool mask input pos of node at reads is sliced out of a square buffer
// no op of the trace produced ([1, 1, N, N] or [N, N], N >= Sq, Sk): the lower-triangular
// buffer GPT-2 and nanoGPT register once and slice per call (bias[:, :, k-q:k, :k]), read
// through a comparison (== 0) or a cast. The trace has no values: that it is lower-triangular
// is assumed (assumeAttention says so).
func (g *graph) squareBuffer(at int32, pos int, sq, sk int64) bool {
	n := at
	if src := g.producer(at, pos); src >= 0 {
		// a comparison or cast of the sliced buffer: eq/ne with a scalar, to(bool)
		if !isName(g.name[src], "eq", "ne", "logical_not", "bitwise_not") || !g.scalarOperand(src) {
			return false
		}
		n, pos = src, g.tensorInputs(src)[0]
		if g.producer(n, pos) >= 0 {
			return false
		}
	}
	if pos < 0 || pos >= len(g.ins(n)) {
		return false
	}
	path := g.viewPath(n, pos)
	sliced := false
	for _, d := range path {
		sliced = sliced || isName(g.name[d], "slice", "narrow", "as_strided")
	}
	buf := g.ins(n)[pos].Dims
	if len(path) > 0 {
		last := path[len(path)-1]
		if len(g.ins(last)) == 0 {
			return false
		}
		buf = g.ins(last)[0].Dims
	}
	var nn int64
	switch len(buf) {
	case 4:
		if buf[0] != 1 || buf[1] != 1 || buf[2] != buf[3] {
			return false
		}
		nn = buf[2]
	case 2:
		if buf[0] != buf[1] {
			return false
		}
		nn = buf[0]
	default:
		return false
	}
	return nn >= max(sq, sk) && (sliced || nn == sk && sq == sk)
}

// ---- the case ----

// attnMinHead, attnMaxHead: the head dims the kernel takes (a multiple of 8 between them).
const attnMinHead, attnMaxHead = 32, 128

func caseAttention(g ShapeGroup, c *Case) string {
	p := g.Params
	if len(g.Dims) < 3 {
		return "q, k and v shapes not recorded"
	}
	q, k, v := g.Dims[0], g.Dims[1], g.Dims[2]
	if len(q) != 4 || len(k) != 4 || len(v) != 4 {
		return "q, k and v are not [B, H, S, D]"
	}
	d := q[3]
	if why := headDimOK(d); why != "" {
		return why
	}
	if v[3] != d {
		return fmt.Sprintf("the value head dim %d differs from the query's %d", v[3], d)
	}
	c.Shapes = [][]int64{q, k, v}
	c.Params.MaskKind = orDefault(p.MaskKind, "none")
	c.Params.Scale = 1
	switch {
	case p.Scale != nil && p.ScaleOp == "div":
		c.Params.Scale = 1 / *p.Scale
	case p.Scale != nil:
		c.Params.Scale = *p.Scale
	case p.ScaleOp != "":
		c.Params.Scale = 1 / math.Sqrt(float64(d)) // assumeAttention says so
	}
	if p.P != nil {
		c.Params.P = *p.P
	}
	switch c.Params.MaskKind {
	case "bool", "additive":
		if len(p.MaskDims) == 0 {
			return "mask shape not recorded"
		}
		c.Shapes = append(c.Shapes, p.MaskDims)
	}
	switch c.Params.MaskKind {
	case "bool", "causal":
		c.Params.MaskFill = orDefault(p.MaskFill, "min") // assumeAttention says so when not recorded
	case "additive":
		if dt, ok := kernelDtype(p.MaskDType); ok {
			c.Params.MaskDtype = dt
		}
	}
	c.Params.BiasKind = orDefault(p.BiasKind, "none")
	switch c.Params.BiasKind {
	case "additive":
		bd := p.BiasDims
		if len(bd) != 4 || bd[2] != 1 && bd[2] != q[2] || bd[3] != k[2] {
			return fmt.Sprintf("the bias %v is broadcast over keys; the kernel reads a bias [B|1, H|1, Sq|1, Sk]", bd)
		}
		c.Shapes = append(c.Shapes, bd)
	case "alibi":
		c.Shapes = append(c.Shapes, []int64{q[1]})
	}
	return ""
}

func headDimOK(d int64) string {
	if d < attnMinHead || d > attnMaxHead || d%8 != 0 {
		return fmt.Sprintf("head dim %d: the kernel takes %d..%d, a multiple of 8", d, attnMinHead, attnMaxHead)
	}
	return ""
}

func assumeAttention(g ShapeGroup) []string {
	p := g.Params
	var out []string
	if p.ScaleOp != "" && p.Scale == nil && p.HeadDim > 0 {
		out = append(out, fmt.Sprintf("scale not recorded (a 0-dim tensor or a wrapped Python float): 1/sqrt(%d) = %s used, the scaling Hugging Face's attention applies",
			p.HeadDim, strconv.FormatFloat(1/math.Sqrt(float64(p.HeadDim)), 'g', 6, 64)))
	}
	if (p.MaskKind == "bool" || p.MaskKind == "causal") && p.MaskFill == "" {
		s := "mask fill not recorded: the dtype's finfo.min used, as Hugging Face's masks hold"
		if p.MaskKind == "causal" && p.SeqQ <= p.SeqK {
			s += " (with a causal mask and Sq <= Sk no row is fully masked, so it does not change the result)"
		}
		out = append(out, s)
	}
	if p.MaskKind == "causal" && p.MaskFrom == "buffer" {
		out = append(out, "the mask is sliced from a square buffer no op of the trace builds: taken as the lower-triangular causal buffer GPT-2 and nanoGPT register (the trace has no values to check it)")
	}
	if p.MaskKeeps {
		out = append(out, "the trace's where keeps the scores where its condition is true: pass the condition's negation as mask (True = masked out)")
	}
	if p.Heads == 0 && p.BatchHeads > 0 {
		out = append(out, fmt.Sprintf("batch and heads are one dim in the trace (a bmm over B*H = %d): the case takes B = 1, H = %d", p.BatchHeads, p.BatchHeads))
	}
	if p.KVHeads > 0 {
		out = append(out, fmt.Sprintf("K and V were expanded from %d KV heads (grouped-query attention): the case reads them expanded", p.KVHeads))
	}
	if p.BiasKind == "alibi" {
		out = append(out, "the per-head bias broadcast over queries is taken as ALiBi: slopes [H] times the key position")
	}
	if p.MaskNeg {
		out = append(out, "the trace subtracts the mask (scores - m): pass -m as the additive mask")
	}
	if p.BiasMask {
		out = append(out, "the chain adds a second (padding) mask after the first: pass it as the additive bias (it needs no gradient)")
	}
	return out
}

// checkAttention validates an attention case's shapes: q [B, H, Sq, D], k and v [B, H, Sk, D],
// then the mask (bool/additive: broadcastable to [B, H, Sq, Sk]) and the bias (additive:
// [B|1, H|1, Sq|1, Sk]; alibi: the slopes [H]), nothing else. Every dtype codegen knows:
// fp16 and bf16 on tensor cores, fp32 through tf32x3 dots (about fp32's accuracy).
func checkAttention(c Case) error {
	want := 3
	mask := c.Params.MaskKind == "bool" || c.Params.MaskKind == "additive"
	if mask {
		want++
	}
	bias := c.Params.BiasKind == "additive" || c.Params.BiasKind == "alibi"
	if bias {
		want++
	}
	if len(c.Shapes) != want {
		return fmt.Errorf("%d shapes, want %d: q, k, v%s%s", len(c.Shapes), want,
			map[bool]string{true: ", the mask"}[mask], map[bool]string{true: ", the bias"}[bias])
	}
	q, k, v := c.Shapes[0], c.Shapes[1], c.Shapes[2]
	if len(q) != 4 || len(k) != 4 || len(v) != 4 {
		return fmt.Errorf("q %v, k %v, v %v: want [B, H, S, D] each", q, k, v)
	}
	if k[0] != q[0] || v[0] != q[0] || k[1] != q[1] || v[1] != q[1] || v[2] != k[2] || k[3] != q[3] || v[3] != q[3] {
		return fmt.Errorf("q %v, k %v, v %v: want q [B, H, Sq, D] and k, v [B, H, Sk, D]", q, k, v)
	}
	if why := headDimOK(q[3]); why != "" {
		return fmt.Errorf("%s", why)
	}
	scores := []int64{q[0], q[1], q[2], k[2]}
	i := 3
	if mask {
		m := c.Shapes[i]
		if b, ok := broadcast(m, scores); len(m) > 4 || !ok || !eqDims(b, scores) {
			return fmt.Errorf("mask %v does not broadcast to the scores %v", m, scores)
		}
		i++
	}
	switch c.Params.BiasKind {
	case "additive":
		b := c.Shapes[i]
		if len(b) != 4 || b[0] != 1 && b[0] != q[0] || b[1] != 1 && b[1] != q[1] || b[2] != 1 && b[2] != q[2] || b[3] != k[2] {
			return fmt.Errorf("bias %v: want [B|1, H|1, Sq|1, Sk] of the scores %v", b, scores)
		}
	case "alibi":
		if b := c.Shapes[i]; len(b) != 1 || b[0] != q[1] {
			return fmt.Errorf("alibi slopes %v: want [H] = [%d]", b, q[1])
		}
	}
	return nil
}

// ---- advice ----

// adviseAttentionCall names the library call that expresses each shape group's chain, or the
// generated kernel where none does (static text and validated numbers only).
func adviseAttentionCall(o *Opportunity) []string {
	var out []string
	for _, s := range o.Shapes {
		a := attentionCall(s.Params)
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func attentionCall(p Params) string {
	args := ""
	if p.P != nil && *p.P > 0 {
		args += ", dropout_p=" + strconv.FormatFloat(*p.P, 'g', -1, 64)
	}
	if p.Scale != nil && p.HeadDim > 0 {
		s := *p.Scale
		if p.ScaleOp == "div" {
			s = 1 / s
		}
		if math.Abs(s*math.Sqrt(float64(p.HeadDim))-1) > 1e-6 {
			args += ", scale=" + strconv.FormatFloat(s, 'g', 6, 64)
		}
	} else if p.ScaleOp == "" {
		args += ", scale=1.0" // the scale is folded into q
	}
	dropout := p.P != nil && *p.P > 0
	mask := "mask"
	if p.MaskNeg {
		mask = "-mask" // the chain subtracts it
	}
	explicit := p.MaskKind == "bool" || p.MaskKind == "additive" || p.BiasMask || p.MaskKind == "causal" && p.SeqQ != p.SeqK
	// grouped-query attention: K and V were expanded from fewer heads (repeat_kv)
	gqa := ""
	if p.KVHeads > 0 && !explicit {
		args += ", enable_gqa=True"
	} else if p.KVHeads > 0 {
		gqa = fmt.Sprintf("; k and v are expanded from %d KV heads (repeat_kv): keep the expand, since enable_gqa=True with an explicit mask runs only on the math backend", p.KVHeads)
	}
	sdpa := func(extra, note string) string {
		if p.KVHeads > 0 && !explicit {
			note = fmt.Sprintf("flash backend, which takes enable_gqa: k and v as the trace's %d KV heads, before repeat_kv, whose expanded copies it avoids", p.KVHeads)
		}
		return "F.scaled_dot_product_attention(q, k, v" + extra + args + ") (" + note + gqa + `), e.g. attn_implementation="sdpa" in transformers`
	}
	switch {
	case p.BiasMask:
		first := map[string]string{"causal": "causal_mask", "bool": "bool_mask", "additive": mask}[p.MaskKind]
		return sdpa(", attn_mask="+first+" + padding_mask",
			"the chain's two masks summed into one float mask, the form transformers' sdpa path builds; memory-efficient and cuDNN backends, flash refuses an explicit mask")
	case p.BiasKind == "alibi" || p.BiasKind == "additive":
		mod := "s + bias[b, h, i, j]"
		if p.BiasKind == "alibi" {
			mod = "s + slopes[h] * (j - i)"
		}
		if dropout {
			return "the additive bias and dropout together: no library call expresses it (FlexAttention has no dropout, SDPA's attn_mask would need the bias and mask summed into an [B, H, Sq, Sk] tensor): use the generated kernel"
		}
		return "FlexAttention: flex_attention(q, k, v, score_mod=lambda s, b, h, i, j: " + mod + ")" +
			map[bool]string{true: " with a mask_mod for the mask"}[p.MaskKind != "none" && p.MaskKind != ""] + ", compiled; or the generated kernel"
	case p.MaskKind == "causal" && p.SeqQ == p.SeqK:
		return sdpa(", is_causal=True", "flash, memory-efficient or cuDNN backends")
	case p.MaskKind == "causal":
		return sdpa(", attn_mask=torch.nn.attention.bias.causal_lower_right(Sq, Sk)",
			"is_causal=True aligns the diagonal top-left, which differs when Sq != Sk")
	case p.MaskKind == "bool":
		m := "~mask"
		if p.MaskKeeps {
			m = "condition"
		}
		return sdpa(", attn_mask="+m, "SDPA's bool mask is True = keep; memory-efficient and cuDNN backends, flash refuses an explicit mask")
	case p.MaskKind == "additive":
		return sdpa(", attn_mask="+mask, "memory-efficient and cuDNN backends, flash refuses an explicit mask")
	}
	return sdpa("", "flash, memory-efficient or cuDNN backends")
}

// AttentionFlops is the arithmetic of an attention case's two GEMMs (q [B, H, Sq, D], k and v
// [B, H, Sk, D]): 2 * B*H * 2D per (query, key) pair the kernel computes, under a causal mask
// (bottom-right aligned) only the pairs it keeps; 0 for shapes that are not q, k, v.
func AttentionFlops(c Case) int64 {
	if len(c.Shapes) < 3 || len(c.Shapes[0]) != 4 || len(c.Shapes[1]) != 4 || len(c.Shapes[2]) != 4 {
		return 0
	}
	q, k, v := c.Shapes[0], c.Shapes[1], c.Shapes[2]
	return 2 * q[0] * q[1] * (q[3] + v[3]) * keptPairs(q[2], k[2], c.Params.MaskKind == "causal")
}

// inAttention marks the instances of other patterns (mask_softmax) whose ops all lie inside
// an attention instance of the same rank that the attention template expresses (its case
// maps and checks): generating the attention folder covers them, so codegen leaves them out
// (ShapeGroup.InAttention).
func inAttention(all []ranked) []bool {
	type key struct {
		rank int
		op   int32
	}
	pat, _ := Lookup("attention")
	held := map[key]bool{}
	for _, rk := range all {
		in := rk.in
		if in.Pattern != "attention" || pat == nil {
			continue
		}
		c, why := pat.Case(ShapeGroup{Dims: in.Dims, DType: in.DType, Params: in.Params, Valid: validGroup(in)})
		if why != "" || pat.Check(c) != nil {
			continue
		}
		for _, op := range in.Ops {
			held[key{rk.rank, op}] = true
		}
	}
	out := make([]bool, len(all))
	if len(held) == 0 {
		return out
	}
	for i, rk := range all {
		if rk.in.Pattern == "attention" || len(rk.in.Ops) == 0 {
			continue
		}
		out[i] = true
		for _, op := range rk.in.Ops {
			if !held[key{rk.rank, op}] {
				out[i] = false
				break
			}
		}
	}
	return out
}

// heldByAttention says how many of o's instances lie inside attention instances
// (ShapeGroup.InAttention), for o's advice; nil when none do.
func heldByAttention(o *Opportunity) []string {
	in, n := 0, 0
	for _, s := range o.Shapes {
		in += s.InAttention
		n += s.Instances
	}
	if in == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%d of the %d instances lie inside attention chains: the attention opportunity fuses those whole (no %s kernel is generated for them)", in, n, o.Pattern)}
}
