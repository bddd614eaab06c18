package patterns

import (
	"slices"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/trace"
)

// graph is the dataflow between the ops a program called directly (the "nodes":
// cpu_ops whose enclosing ops are only annotations such as ProfilerStep#N). An
// op's nested children (aten::t inside aten::linear, the autocast re-dispatch,
// the kernels' helper ops) are never nodes: patterns match at the level the user
// wrote. Edges go from a node to the real producer of each of its tensor
// inputs, looking through views and copies (passOps) and dropouts that do not run.
type graph struct {
	t     *trace.Trace
	nodes []int32 // OpIDs, thread by thread, in time order
	node  []int32 // OpID -> node index, -1 when the op is not a node

	name []string  // base name ("add", "layer_norm")
	out  [][]tval  // produced values
	pass []bool    // view/copy/no-op dropout: output is input 0's value
	in   [][]int32 // per input position: producer node (through pass-throughs), -1 when unknown
	cons [][]int32 // consumer nodes (not pass-throughs) of each node's value, in time order
	src  []int32   // for a pass-through node: the real producer of its value (-1 unknown); else itself
	// barrier marks nodes before which no earlier value is live: the first node
	// of a profiler step, of an optimizer step and after it, after an explicit
	// device synchronize between ops (a benchmark loop's iteration boundary), and of
	// each forward pass of an unmarked inference loop (passBarriers).
	barrier []bool
	// passes is the number of forward passes found by their host gaps (passBarriers) on
	// a thread without iteration marks; 0 when none were.
	passes int
	// realUse and viewUse record, during inference, whether a node's own output
	// (not through its views) has been read by a computing op, or only by views.
	realUse, viewUse []bool
	// dir, per node and input position: the node read directly (a view or copy
	// included), -1 or absent when unknown; in is the same through pass-throughs.
	dir [][]int32
	// etIn, per node, the execution trace's input values (nil without one): what Kineto
	// does not record, such as a String argument.
	etIn [][]trace.Tensor
	// inferred: the dataflow comes from infer (op order and shapes), not an execution trace.
	inferred bool
	// passedOver marks the norms whose output rule 2 or 3 turned a residual join away from
	// (to the norm's input, the pre-norm reading): a post-norm model (BERT) reads the norm's
	// output there, which the Kineto trace cannot tell from a pre-norm one, so such a value
	// may have a reader more than its links say (takeOutputCasts does not take its casts).
	passedOver map[int32]bool
	// rotary maps the nodes of each rotary embedding rule 9 linked (from its q * cos to its
	// add) to that q * cos (rule 10 of infer).
	rotary map[int32]int32
}

// nodeOps lists the nodes of t in thread and time order, and which of them
// start a new iteration (see graph.barrier).
func nodeOps(t *trace.Trace) (nodes []int32, barrier []bool) {
	pending := false // an iteration boundary was crossed since the last node
	var walk func(id int32)
	walk = func(id int32) {
		op := &t.Ops[id]
		b := strings.HasPrefix(op.Name, "ProfilerStep#") || strings.HasPrefix(op.Name, "Optimizer.")
		if op.Kind == trace.KindUserAnnotation || b { // PyTorch 1.x records these as cpu_ops
			pending = pending || b
			for _, c := range op.Children {
				walk(c)
			}
			pending = pending || b
			return
		}
		b = pending
		if !b && len(nodes) > 0 {
			prev := &t.Ops[nodes[len(nodes)-1]]
			if prev.Thread == op.Thread {
				b = syncBetween(t.Threads[op.Thread].Syncs, prev.Start+prev.Dur, op.Start)
			}
		}
		pending = false
		nodes = append(nodes, id)
		barrier = append(barrier, b)
	}
	for i := range t.Threads {
		pending = false
		for _, r := range t.Threads[i].Roots {
			walk(r)
		}
	}
	return nodes, barrier
}

// syncBetween reports a sync time s with lo <= s <= hi.
func syncBetween(syncs []int64, lo, hi int64) bool {
	i, _ := slices.BinarySearch(syncs, lo)
	return i < len(syncs) && syncs[i] <= hi
}

func newGraph(t *trace.Trace) *graph {
	g := &graph{t: t}
	g.nodes, g.barrier = nodeOps(t)
	g.passes = passBarriers(t, g.nodes, g.barrier)
	n := len(g.nodes)
	g.node = make([]int32, len(t.Ops))
	for i := range g.node {
		g.node[i] = -1
	}
	g.name = make([]string, n)
	g.out = make([][]tval, n)
	g.pass = make([]bool, n)
	g.in = make([][]int32, n)
	g.cons = make([][]int32, n)
	g.src = make([]int32, n)
	g.realUse = make([]bool, n)
	g.viewUse = make([]bool, n)
	for i, id := range g.nodes {
		g.node[id] = int32(i)
		op := &t.Ops[id]
		g.name[i] = baseName(op.Name)
		g.out[i] = outputs(t, id)
		g.pass[i] = isPass(t, id)
		g.in[i] = make([]int32, len(op.Inputs))
		for j := range g.in[i] {
			g.in[i][j] = -1
		}
		g.src[i] = int32(i)
	}
	return g
}

// isPass reports whether op hands its input 0 through unchanged in content.
func isPass(t *trace.Trace, id int32) bool {
	op := &t.Ops[id]
	b := baseName(op.Name)
	if passOps[b] {
		return true
	}
	switch b {
	case "dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout":
		return !dropoutRuns(t, id)
	}
	return false
}

// dropoutRuns reports whether a dropout op draws a mask: train=True and p > 0 in
// Concrete Inputs, or (without them) a native_dropout / bernoulli child.
func dropoutRuns(t *trace.Trace, id int32) bool {
	op := &t.Ops[id]
	p, okp := concreteFloat(op.Inputs, 1)
	train, okt := concreteBool(op.Inputs, 2)
	if baseName(op.Name) == "native_dropout" {
		if okt && !train {
			return false
		}
		return !okp || p > 0
	}
	if okp && okt {
		return p > 0 && train
	}
	for _, c := range op.Children {
		switch baseName(t.Ops[c].Name) {
		case "native_dropout", "bernoulli_", "bernoulli", "empty_like", "rand_like":
			return true
		}
	}
	return false
}

// activation returns the input positions of op that carry activations (values
// another op produced). Weights and biases of known ops are parameters and never
// matched: a stray match on a parameter's shape would invent an edge.
func activation(base string, ins []trace.Input) []int {
	one := func(i int) []int {
		if i < len(ins) && isTensor(ins[i]) {
			return []int{i}
		}
		return nil
	}
	switch base {
	case "linear", "layer_norm", "native_layer_norm", "group_norm", "batch_norm", "instance_norm",
		"rms_norm", "_fused_rms_norm", "conv1d", "conv2d", "conv3d", "convolution", "_convolution":
		return one(0)
	case "addmm", "_addmm_activation":
		return one(1)
	case "embedding":
		return one(1)
	}
	var out []int
	for i, in := range ins {
		if isTensor(in) {
			out = append(out, i)
		}
	}
	return out
}

// producer returns the real producer of input pos of node b (-1 if unknown).
func (g *graph) producer(b int32, pos int) int32 {
	if pos >= len(g.in[b]) {
		return -1
	}
	return g.in[b][pos]
}

// link records that input pos of node b reads the value of node direct.
func (g *graph) link(b int32, pos int, direct int32) {
	p := direct
	if p >= 0 {
		p = g.src[direct]
	}
	g.in[b][pos] = p
	if g.dir == nil {
		g.dir = make([][]int32, len(g.nodes))
	}
	for len(g.dir[b]) <= pos {
		g.dir[b] = append(g.dir[b], -1)
	}
	g.dir[b][pos] = direct
	if g.pass[b] && pos == 0 {
		g.src[b] = p
	}
	if p >= 0 && !g.pass[b] {
		if c := g.cons[p]; len(c) == 0 || c[len(c)-1] != b {
			g.cons[p] = append(c, b)
		}
	}
	if direct >= 0 {
		if g.pass[b] {
			g.viewUse[direct] = true
		} else {
			g.realUse[direct] = true
		}
	}
}

// finishPass gives a pass-through node with no known input producer no source.
func (g *graph) finishPass(b int32) {
	if g.pass[b] && (len(g.in[b]) == 0 || g.in[b][0] < 0) {
		g.src[b] = -1
	}
}

// ---- inference from shapes (no execution trace) ----

type entry struct {
	node  int32
	dims  []int64
	dtype DType
}

// shapeKey hashes dims (FNV-1a over the values).
func shapeKey(d []int64) uint64 {
	h := uint64(14695981039346656037)
	for _, x := range d {
		h ^= uint64(x)
		h *= 1099511628211
	}
	h ^= uint64(len(d))
	return h * 1099511628211
}

// maxScan bounds how far back among same-shaped values a match looks.
const maxScan = 48

// infer links every node's activation inputs to the most plausible earlier value
// on the same thread with exactly the recorded sizes and a compatible type.
//
// Rules, in order, per node:
//  1. Each activation input takes the newest same-shaped, same-typed value. When
//     several inputs compete (a binary op on equal shapes), the input whose best
//     candidate is newest takes it first.
//  2. Later inputs skip values already taken by this node and the values on the
//     unary chain that produced them (in x + f(x), x is not an intermediate of f); the
//     walk back ends one value past a reduction (x * rsqrt(mean(x**2)): at x**2).
//  3. When the chosen value is a normalization's output (a norm op's, or for an add an
//     RMSNorm's written out in ops: writtenNormInput) and that normalization's input is
//     also a candidate, the input wins: pre-norm residual blocks (x + f(norm(x))) read the
//     norm's input, never its output, a second time.
//     Not for a GEMM: `x @ W.T` (Falcon's Linear) reads the norm's output.
//  4. For later inputs, values that so far were only reshaped by views (heads
//     split off a projection) rank after values a computing op already read.
//  5. A normalization does not read another normalization's output that an op has
//     already read when that normalization's input is also a candidate (rule 3 for
//     a norm's one input): parallel-residual blocks (GPT-NeoX: x + attn(ln1(x)) +
//     mlp(ln2(x))) normalize x again after the attention read ln1(x). A norm's fresh
//     output stays the choice: CLIP's pre_layrnorm feeds layer_norm1 directly.
//  6. A sin reads what the cos just before it read (and a cos a sin's), where that value
//     is a candidate: the rotary and sinusoidal tables compute both of one angle
//     (emb.cos() * s; emb.sin() * s), and the newest value of the angle's shape is the
//     cos's own result by then.
//  7. A run of r identical casts (the same op, input sizes and type, target) in a row
//     reads the r newest candidates that nothing has read yet, oldest first, where the
//     newest candidate is one of them: `return cos.to(dt), sin.to(dt)`, where the newest
//     value is sin's and cos's was never read.
//  8. rotate_half's slices (x[..., :h] and x[..., h:] in a row, then a neg and a cat; GPT-J's
//     rotate_every_two: x[..., ::2], x[..., 1::2], a neg, a stack and a flatten) read one
//     value, and where the newest candidate is a product of another candidate by a smaller
//     operand (q * cos, made just before of q), the rotation reads that factor: the rotary
//     embedding `q * cos + rotate_half(q) * sin`, where q * cos has q's shape and type.
//  9. The add of such a rotary embedding, whose first operand is the product of the
//     rotation's output (its cat or flatten), reads as its other operand the product of the rotation's source (q *
//     cos), not the cat.
//  10. A mul by the table of such a rotary embedding (k * cos after q's), and the slices of a
//     later rotate_half, do not read a value of that embedding (q's rotary output or its cat,
//     where q and k have one shape): k's rotary is a chain of its own.
func (g *graph) infer() {
	g.inferred = true
	table := map[uint64][]entry{}
	thread := int32(-1)
	for bi := range g.nodes {
		b := int32(bi)
		op := &g.t.Ops[g.nodes[b]]
		if op.Thread != thread || g.barrier[b] { // values never cross threads or iterations
			thread = op.Thread
			clear(table)
		}
		pos := activation(g.name[b], op.Inputs)
		if len(pos) > 0 {
			g.assign(b, pos, table)
		}
		g.finishPass(b)
		if listOps[g.name[b]] && len(g.out[b]) == 1 && g.out[b][0].dtype == DTypeUnknown && len(op.Inputs) > 0 {
			g.out[b][0].dtype = listDType(table, op.Inputs[0].List)
		}
		for _, v := range g.out[b] {
			k := shapeKey(v.dims)
			table[k] = append(table[k], entry{node: b, dims: v.dims, dtype: v.dtype})
		}
		if g.out[b] == nil && reshapes[g.name[b]] && len(op.Inputs) > 0 && isTensor(op.Inputs[0]) {
			n := numel(op.Inputs[0].Dims)
			k := wildKey(n)
			table[k] = append(table[k], entry{node: b, dims: []int64{n}, dtype: parseDType(op.Inputs[0].Type)})
		}
	}
}

// listDType is the type of a cat or stack of values of the sizes in list: the newest value
// of each element's sizes, when they all have one known type (Kineto records a TensorList
// without its elements' types). Unknown otherwise, which matches any type: known, a rotary
// embedding's cat(-x2, x1) of bf16 halves is not taken for the fp32 product beside it.
func listDType(table map[uint64][]entry, list [][]int64) DType {
	dt := DTypeUnknown
	for _, d := range list {
		var e *entry
		for es, i := table[shapeKey(d)], len(table[shapeKey(d)])-1; i >= 0; i-- {
			if eqDims(es[i].dims, d) {
				e = &es[i]
				break
			}
		}
		if e == nil || e.dtype == DTypeUnknown || dt != DTypeUnknown && e.dtype != dt {
			return DTypeUnknown
		}
		dt = e.dtype
	}
	return dt
}

// wildKey keys a value of unknown sizes by its element count (see infer).
func wildKey(n int64) uint64 { return shapeKey([]int64{n, -7}) }

func (g *graph) candidates(table map[uint64][]entry, in trace.Input, skip func(int32) bool, buf []int32) []int32 {
	buf = buf[:0]
	es := table[shapeKey(in.Dims)]
	ws := table[wildKey(numel(in.Dims))]
	want := parseDType(in.Type)
	i, j := len(es)-1, len(ws)-1
	for n := 0; n < maxScan && (i >= 0 || j >= 0); {
		var e *entry
		if j < 0 || i >= 0 && es[i].node > ws[j].node {
			e = &es[i]
			i--
			if !eqDims(e.dims, in.Dims) {
				continue
			}
		} else {
			e = &ws[j]
			j--
			if e.dims[0] != numel(in.Dims) {
				continue
			}
		}
		n++
		if want != DTypeUnknown && e.dtype != DTypeUnknown && want != e.dtype {
			continue
		}
		if skip != nil && skip(e.node) {
			continue
		}
		buf = append(buf, e.node)
	}
	return buf
}

// reshapes keep the element count: when their size argument is not recorded
// (traces before PyTorch 2.x have no Concrete Inputs) their value is still
// known up to its sizes.
var reshapes = map[string]bool{
	"view": true, "reshape": true, "_unsafe_view": true, "transpose": true, "permute": true,
	"flatten": true, "t": true, "unflatten": true, "_reshape_alias": true, "squeeze": true, "unsqueeze": true,
}

func (g *graph) assign(b int32, pos []int, table map[uint64][]entry) {
	ins := g.t.Ops[g.nodes[b]].Inputs
	if len(pos) == 1 {
		c := g.candidates(table, ins[pos[0]], nil, nil)
		if len(c) > 0 {
			choice := c[0]
			if p := g.src[choice]; normOps[g.name[b]] && p >= 0 && len(g.cons[p]) > 0 { // rule 5
				choice = g.preferNormInput(b, c)
			} else if a := g.sameAngle(b, c); a >= 0 { // rule 6
				choice = a
			} else if u := g.unreadRun(c, g.castRun(b)); u >= 0 { // rule 7
				choice = u
			} else if h := g.halfRotation(b, c); h >= 0 { // rule 8
				choice = h
			}
			g.link(b, pos[0], choice)
		}
		return
	}
	taken := map[int32]bool{} // real producers taken by this node, and their unary chains
	inRotary := g.tableOfRotary(b, pos, table)
	skip := func(n int32) bool {
		s := g.src[n]
		return taken[n] || s >= 0 && taken[s] || inRotary >= 0 && g.rotary[n] == inRotary
	}
	done := make([]bool, len(pos))
	var buf []int32
	first := int32(-1) // the value the first operand took
	for range pos {
		best, bestK := int32(-1), -1
		var bestC []int32
		for k, p := range pos {
			if done[k] {
				continue
			}
			c := g.candidates(table, ins[p], skip, buf)
			if len(c) > 0 && c[0] > best {
				best, bestK = c[0], k
				bestC = append(bestC[:0], c...)
			}
			buf = c
		}
		if bestK < 0 {
			return
		}
		done[bestK] = true
		if len(taken) > 0 {
			bestC = g.preferComputed(bestC)
			// rule 2 passed over a norm's output (on the chain of an operand taken first):
			// right for a pre-norm block, while a post-norm one reads it here
			for _, n := range g.candidates(table, ins[pos[bestK]], nil, nil) {
				if n == bestC[0] {
					break
				}
				if p := g.src[n]; p >= 0 && skip(n) && (normOps[g.name[p]] || g.writtenNormInput(p) >= 0) {
					g.passOver(p)
				}
			}
		}
		choice := bestC[0]
		if !gemmOps[g.name[b]] { // rule 3
			choice = g.preferNormInput(b, bestC)
		}
		if first >= 0 && g.name[b] == "add" { // rule 9
			if q := g.rotaryProduct(first, bestC); q >= 0 {
				choice = q
				g.markRotary(q, b)
			}
		}
		if first < 0 {
			first = choice
		}
		g.link(b, pos[bestK], choice)
		g.markChain(choice, taken)
	}
}

// angleOps pairs the functions computed of one angle (rule 6 of infer).
var angleOps = map[string]string{"sin": "cos", "cos": "sin"}

// sameAngle is, for a sin (cos) node b, the value the newest cos (sin) before it on its
// thread read when that cos's input has b's sizes and type and the value is among b's
// candidates c, else -1. Rule 6 of infer.
func (g *graph) sameAngle(b int32, c []int32) int32 {
	partner, ok := angleOps[g.name[b]]
	if !ok {
		return -1
	}
	ins := g.t.Ops[g.nodes[b]].Inputs
	thread := g.t.Ops[g.nodes[b]].Thread
	for a := b - 1; a >= 0 && a >= b-maxScan; a-- {
		op := &g.t.Ops[g.nodes[a]]
		if op.Thread != thread || g.barrier[a+1] {
			return -1
		}
		if g.name[a] != partner {
			continue
		}
		if len(op.Inputs) == 0 || len(ins) == 0 || !eqDims(op.Inputs[0].Dims, ins[0].Dims) || op.Inputs[0].Type != ins[0].Type ||
			len(g.dir[a]) == 0 || !slices.Contains(c, g.dir[a][0]) {
			return -1
		}
		return g.dir[a][0]
	}
	return -1
}

// castRun is the length of the run of casts starting at node b: b and the nodes right after
// it on its thread that are the same cast (op name, input sizes and type, concrete
// arguments), 0 when b is no cast. Rule 7 of infer.
func (g *graph) castRun(b int32) int {
	op := &g.t.Ops[g.nodes[b]]
	if !castOps[op.Name] || len(op.Inputs) == 0 {
		return 0
	}
	r := 1
	for n := b + 1; int(n) < len(g.nodes) && !g.barrier[n]; n++ {
		o := &g.t.Ops[g.nodes[n]]
		if o.Name != op.Name || o.Thread != op.Thread || len(o.Inputs) != len(op.Inputs) || !sameInputs(o.Inputs, op.Inputs) {
			break
		}
		r++
	}
	return r
}

// sameInputs says whether two ops' inputs have the same sizes, types and concrete values.
func sameInputs(a, b []trace.Input) bool {
	for i := range a {
		if !eqDims(a[i].Dims, b[i].Dims) || a[i].Type != b[i].Type || a[i].Concrete != b[i].Concrete {
			return false
		}
	}
	return true
}

// unreadRun is, for the first of a run of r > 1 casts (castRun), the r-th newest of the
// candidates c that no op has read yet, where the newest candidate is one of them, else -1:
// the run reads those r values oldest first (rule 7 of infer).
func (g *graph) unreadRun(c []int32, r int) int32 {
	if r < 2 {
		return -1
	}
	var u []int32
	for _, n := range c {
		if s := g.src[n]; !g.realUse[n] && !g.viewUse[n] && (s < 0 || len(g.cons[s]) == 0) {
			if u = append(u, n); len(u) == r {
				break
			}
		}
	}
	if len(u) < r || u[0] != c[0] {
		return -1
	}
	return u[r-1]
}

// lastDimSlice says whether node n slices the last dim of its input (aten::slice with a dim
// argument of -1 or the last index).
func (g *graph) lastDimSlice(n int32) bool {
	if g.name[n] != "slice" {
		return false
	}
	ins := g.t.Ops[g.nodes[n]].Inputs
	if len(ins) < 2 || len(ins[0].Dims) == 0 {
		return false
	}
	d := ins[1].Concrete
	return d == "-1" || d == strconv.Itoa(len(ins[0].Dims)-1)
}

// halfRotation is rule 8 of infer for node b: in rotate_half (two slices of the last dim in a
// row, a neg, a cat), the second slice reads what the first read, and the first reads the
// factor a of the newest candidate c[0] when c[0] is a mul of a (another candidate) by a
// smaller operand. -1 when b is no such slice or nothing changes.
func (g *graph) halfRotation(b int32, c []int32) int32 {
	if !g.lastDimSlice(b) {
		return -1
	}
	ins := g.t.Ops[g.nodes[b]].Inputs
	same := func(n int32) bool {
		o := g.t.Ops[g.nodes[n]].Inputs
		return g.lastDimSlice(n) && eqDims(o[0].Dims, ins[0].Dims) && o[0].Type == ins[0].Type
	}
	if b > 0 && same(b-1) && g.rotationEnd(b-1) >= 0 && len(g.dir[b-1]) > 0 { // the second slice
		if d := g.dir[b-1][0]; d >= 0 && slices.Contains(c, d) {
			return d
		}
		return -1
	}
	if int(b)+1 >= len(g.nodes) || g.barrier[b+1] || !same(b+1) || g.rotationEnd(b) < 0 {
		return -1
	}
	// not a value of a rotary embedding already linked (rule 10: k's rotation after q's)
	c = slices.DeleteFunc(slices.Clone(c), func(n int32) bool { _, in := g.rotary[n]; return in })
	if len(c) == 0 {
		return -1
	}
	m := c[0]
	mi := g.t.Ops[g.nodes[m]].Inputs
	if g.name[m] != "mul" || len(mi) < 2 {
		return m
	}
	for k, a := range g.dir[m][:min(2, len(g.dir[m]))] {
		other := mi[1-k]
		if a >= 0 && a != m && slices.Contains(c, a) && isTensor(other) && numel(other.Dims) < numel(ins[0].Dims) {
			return a
		}
	}
	return m
}

// rotationEnd is, for node b, the first of two slices of the last dim in a row, the node
// that ends the rotation they start, else -1: a neg then a cat (rotate_half: cat(-x2, x1)),
// or a neg, a stack and a flatten (GPT-J's rotate_every_two: stack((-x2, x1), -1).flatten(-2)).
func (g *graph) rotationEnd(b int32) int32 {
	n := int32(len(g.nodes))
	if b+3 >= n || !g.lastDimSlice(b) || !g.lastDimSlice(b+1) || g.name[b+2] != "neg" {
		return -1
	}
	for k := b + 1; k <= b+3; k++ {
		if g.barrier[k] {
			return -1
		}
	}
	switch {
	case g.name[b+3] == "cat":
		return b + 3
	case b+4 < n && g.name[b+3] == "stack" && g.name[b+4] == "flatten" && !g.barrier[b+4]:
		return b + 4
	}
	return -1
}

// rotationStart is, for a node d that ends a rotation (rotationEnd), its first slice, else -1.
func (g *graph) rotationStart(d int32) int32 {
	for _, b := range []int32{d - 3, d - 4} {
		if b >= 0 && g.rotationEnd(b) == d {
			return b
		}
	}
	return -1
}

// rotaryProduct is rule 9 of infer: when first, an add's operand taken first, is a mul of a
// rotation's output (rotationEnd: rotate_half's cat, rotate_every_two's flatten), the
// candidate among c that is a mul of the slices' source (q * cos), else -1.
func (g *graph) rotaryProduct(first int32, c []int32) int32 {
	if first < 0 || g.name[first] != "mul" {
		return -1
	}
	var cat, start int32 = -1, -1
	for _, d := range g.dir[first][:min(2, len(g.dir[first]))] {
		if d >= 0 {
			if s := g.rotationStart(d); s >= 0 {
				cat, start = d, s
			}
		}
	}
	if cat < 0 || len(g.dir[start]) == 0 {
		return -1
	}
	q := g.dir[start][0]
	if q < 0 {
		return -1
	}
	for _, n := range c {
		if n != cat && g.name[n] == "mul" && slices.Contains(g.dir[n][:min(2, len(g.dir[n]))], q) {
			return n
		}
	}
	return -1
}

// markRotary records the nodes of a rotary embedding from its q * cos to its add (rule 10).
func (g *graph) markRotary(qcos, add int32) {
	if g.rotary == nil {
		g.rotary = map[int32]int32{}
	}
	for n := qcos; n <= add; n++ {
		g.rotary[n] = qcos
	}
}

// tableOfRotary is rule 10 of infer for a mul b of two inputs: the q * cos of the rotary
// embedding whose nodes b's full-shaped operand must skip, where that operand's newest
// candidate is one of them and the other operand's newest candidate is the table that
// q * cos multiplied by; else -1.
func (g *graph) tableOfRotary(b int32, pos []int, table map[uint64][]entry) int32 {
	if g.name[b] != "mul" || len(pos) != 2 || g.rotary == nil {
		return -1
	}
	ins := g.t.Ops[g.nodes[b]].Inputs
	for k := range 2 {
		c := g.candidates(table, ins[pos[k]], nil, nil)
		if len(c) == 0 || numel(ins[pos[1-k]].Dims) >= numel(ins[pos[k]].Dims) {
			continue
		}
		qcos, ok := g.rotary[c[0]]
		if !ok {
			continue
		}
		if g.sameTable(qcos, ins[pos[1-k]], g.candidates(table, ins[pos[1-k]], nil, nil)) {
			return qcos
		}
	}
	return -1
}

// sameTable says whether a mul's table operand t (its candidates o) is the table rotary
// product qcos multiplied by: its linked value where t has one, else where neither is linked
// and they have the same sizes and type (a table made by an op whose output the trace does
// not record, GPT-J's repeat_interleave).
func (g *graph) sameTable(qcos int32, t trace.Input, o []int32) bool {
	if len(o) > 0 {
		return slices.Contains(g.dir[qcos], o[0])
	}
	for k, in := range g.t.Ops[g.nodes[qcos]].Inputs[:min(2, len(g.t.Ops[g.nodes[qcos]].Inputs))] {
		linked := k < len(g.dir[qcos]) && g.dir[qcos][k] >= 0
		if !linked && isTensor(in) && eqDims(in.Dims, t.Dims) && in.Type == t.Type {
			return true
		}
	}
	return false
}

// preferComputed reorders a later operand's candidates: values that so far were
// only reshaped by views (attention heads split off a projection, a context
// merged back) go after values some computing op already read (the residual
// stream, read by a norm or a GEMM). Rule 4 of infer.
func (g *graph) preferComputed(c []int32) []int32 {
	viewOnly := func(n int32) bool { return g.viewUse[n] && !g.realUse[n] }
	k := 0
	for _, n := range c {
		if !viewOnly(n) {
			k++
		}
	}
	if k == 0 || k == len(c) {
		return c
	}
	out := make([]int32, 0, len(c))
	for _, n := range c {
		if !viewOnly(n) {
			out = append(out, n)
		}
	}
	for _, n := range c {
		if viewOnly(n) {
			out = append(out, n)
		}
	}
	return out
}

var normOps = map[string]bool{
	"layer_norm": true, "native_layer_norm": true, "rms_norm": true, "_fused_rms_norm": true,
	"group_norm": true, "batch_norm": true, "instance_norm": true,
}

// preferNormInput applies rule 3 to a candidate list (newest first) for node b: a
// normalization op's output, or, where b is an add (a residual join), an RMSNorm's written
// out in ops (writtenNormInput: Llama's, T5's, Gemma's; not for the ops that finish the norm,
// such as Gemma's type_as, which read its output).
func (g *graph) preferNormInput(b int32, c []int32) int32 {
	first := c[0]
	p := g.src[first]
	if p < 0 {
		return first
	}
	x := int32(-1)
	switch {
	case normOps[g.name[p]]:
		x = g.in[p][0]
	case stripInplace(g.name[b]) == "add":
		x = g.writtenNormInput(p)
	}
	if x < 0 {
		return first
	}
	for _, n := range c[1:] {
		if n == x || g.src[n] == x {
			g.passOver(p)
			return n
		}
	}
	return first
}

// passOver marks node p's value as one a reader was turned away from (graph.passedOver).
func (g *graph) passOver(p int32) {
	if g.passedOver == nil {
		g.passedOver = map[int32]bool{}
	}
	g.passedOver[p] = true
}

// writtenNormInput returns the input x of an RMSNorm written out in ops whose output node p
// is, x * rsqrt(mean(x**2) + eps) times its weight (HF Llama's: the weight's mul reads the
// product through a cast), found from p through the product's mul and the rsqrt's chain back
// to x's square; -1 when p is no such output (the product itself is not one: the weight's mul
// reads it). Rule 3 treats it as a norm's output: Llama's
// residual add reads the norm's fp32 input, the newest fp32 value of that shape being the
// norm's output.
func (g *graph) writtenNormInput(p int32) int32 {
	if g.name[p] != "mul" {
		return -1
	}
	// p is the weight's mul; the product x * rsqrt(...) itself is no output (the weight's mul
	// reads it, and must)
	for _, m := range g.in[p] {
		if m < 0 || m == p {
			continue
		}
		if g.name[m] != "mul" || len(g.in[m]) < 2 {
			continue
		}
		for k := range 2 {
			r, x := g.in[m][k], g.in[m][1-k]
			if r >= 0 && x >= 0 && g.name[r] == "rsqrt" && g.squaresOf(r, x) {
				return x
			}
		}
	}
	return -1
}

// squaresOf reports whether node r (an rsqrt) is computed, through its first inputs (the eps
// add, the mean), from the square of node x (pow(x, 2), or x * x) within four steps.
func (g *graph) squaresOf(r, x int32) bool {
	cur := r
	for range 4 {
		if len(g.in[cur]) == 0 || g.in[cur][0] < 0 {
			return false
		}
		cur = g.in[cur][0]
		in := g.in[cur]
		switch g.name[cur] {
		case "pow":
			if len(in) > 0 && in[0] == x {
				return true
			}
		case "mul":
			if len(in) > 1 && in[0] == x && in[1] == x {
				return true
			}
		}
	}
	return false
}

// markChain marks n's value and the unary chain that produced it: walking back
// through nodes with exactly one known activation producer. The walk stops
// before a node with several activation inputs (a join: its value is what a
// residual reads) and after a normalization (its input is the residual stream).
func (g *graph) markChain(n int32, taken map[int32]bool) {
	taken[n] = true
	p := g.src[n]
	reduced := false // the walk passed a reduction: one more value (its input) is the chain's
	for steps := 0; p >= 0 && steps < 64; steps++ {
		if steps > 0 && taken[p] {
			return
		}
		taken[p] = true
		if normOps[g.name[p]] || reduced {
			return
		}
		// x * rsqrt(mean(x**2) + eps): past the mean, the chain ends at its input (x**2); x
		// itself is the norm's input, which the other operand reads, even where x has a single
		// producer (a first layer's embeddings, or their dropout)
		reduced = reduceOps[g.name[p]]
		q := g.onlyProducer(p)
		if q < 0 || g.onlyProducer(q) < 0 {
			return
		}
		p = q
	}
}

// reduceOps are the reductions markChain stops after (one value further).
var reduceOps = map[string]bool{
	"mean": true, "sum": true, "var": true, "std": true, "norm": true, "linalg_vector_norm": true,
	"amax": true, "amin": true, "logsumexp": true,
}

// onlyProducer returns the single producer of p's activation inputs, -1 when p
// has none or several.
func (g *graph) onlyProducer(p int32) int32 {
	var only int32 = -1
	for _, q := range g.in[p] {
		if q < 0 || q == only {
			continue
		}
		if only >= 0 {
			return -1
		}
		only = q
	}
	return only
}

// ---- exact dataflow from an execution trace ----

// fromET links nodes through the execution trace's tensor ids: an input reads
// the value of the last node that output the same tensor id (in-place ops
// output their input's id, so they become its latest writer). Nodes the
// execution trace does not cover keep unknown producers.
func (g *graph) fromET(et *trace.ExecTrace) error {
	join := et.Join(g.t)
	if len(join) == 0 {
		return errNoJoin(et.Path)
	}
	writer := map[int64]int32{}
	g.etIn = make([][]trace.Tensor, len(g.nodes))
	for bi, id := range g.nodes {
		b := int32(bi)
		en := join[id]
		if en == nil {
			g.finishPass(b)
			continue
		}
		g.etIn[b] = en.Inputs
		if len(en.Inputs) > len(g.in[b]) {
			in := make([]int32, len(en.Inputs))
			copy(in, g.in[b])
			for j := len(g.in[b]); j < len(in); j++ {
				in[j] = -1
			}
			g.in[b] = in
		}
		pos := activation(g.name[b], g.ins(b))
		if len(g.ins(b)) == 0 { // no shapes recorded: every tensor input
			pos = pos[:0]
			for i, v := range en.Inputs {
				if v.IsTensor() {
					pos = append(pos, i)
				}
			}
		}
		for _, i := range pos {
			if i >= len(en.Inputs) || !en.Inputs[i].IsTensor() {
				continue
			}
			if w, ok := writer[en.Inputs[i].ID]; ok {
				g.link(b, i, w)
			}
		}
		g.finishPass(b)
		for _, v := range en.Outputs {
			if v.IsTensor() {
				writer[v.ID] = b
			}
		}
	}
	return nil
}

type etError string

func (e etError) Error() string { return string(e) }

func errNoJoin(path string) error {
	return etError(path + ": no execution-trace node matches a trace op (rf_id vs Record function id): is it from the same run?")
}
