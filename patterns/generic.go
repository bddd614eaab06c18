package patterns

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fuseadvise/fuseadvise/program"
)

// GenericChain is one group of chains outside the catalog: dataflow-connected ops of
// genericOps (memory-bound elementwise ops, optionally ending in one reduction over the
// last dim) that no catalog instance contains, with equal op sequences, main shape, dtype
// and op program. Its Program is what codegen renders as one fused kernel.
type GenericChain struct {
	Ops       []string `json:"ops"`   // op names from genericOps, in time order
	Dims      []int64  `json:"dims"`  // the main tensor: the largest value an op of the chain produced
	DType     DType    `json:"dtype"` // its element type
	Instances int      `json:"instances"`
	GPUTimeUs float64  `json:"gpu_time_us"` // the kernels of the instances' ops
	Kernels   int      `json:"kernels"`     // the kernels they launched
	// EstSavingUs is the instances' GPU time less one fused kernel each, as the cost model
	// estimates it from the program's bytes (its inputs read once, its outputs written
	// once) at the trace's calibrated rates; 0 without a program or a calibration.
	EstSavingUs float64 `json:"est_saving_us"`
	// EstFusedUs is the estimated time of one fused call (0: not estimated).
	EstFusedUs float64 `json:"est_fused_us,omitempty"`
	// BackwardGPUTimeUs, in training, is the kernels' time of the backward ops the
	// instances' ops recorded; EstBackwardSavingUs is it less the cost model's fused backward
	// (one kernel over program.BackwardBytes, and with a GEMM head cuBLAS's two gradient
	// GEMMs), 0 where the program has no fused backward (it ends in a reduction). Both 0 in
	// inference.
	BackwardGPUTimeUs   float64 `json:"backward_gpu_time_us,omitempty"`
	EstBackwardSavingUs float64 `json:"est_backward_saving_us,omitempty"`
	// Program is the chain as an op program (package program); nil when Unrecoverable.
	Program *program.Program `json:"program,omitempty"`
	// Unrecoverable says why a chain cannot be generated as recorded: a scalar argument
	// the trace does not record in Concrete Inputs, a string argument (gelu's
	// approximate), a dropout that draws a mask, an op or dtype outside the table; ""
	// when its Program is complete.
	Unrecoverable string `json:"unrecoverable,omitempty"`
	// GEMM is the traced op of the GEMM whose output the chain starts at, when its program
	// has that GEMM as its head (program.GEMM: generated as one GEMM with the chain as its
	// epilogue, and as cuBLAS plus the chain's pointwise kernel); GPUTimeUs, Kernels and the
	// estimates then include the GEMM, GEMMUs its part.
	GEMM   string  `json:"gemm,omitempty"`
	GEMMUs float64 `json:"gemm_us,omitempty"`
	// NoGEMMHead says why a chain that reads a GEMM's output stays pointwise (the GEMM's
	// output has another reader, the chain ends in a reduction, ...); "" otherwise.
	NoGEMMHead string `json:"no_gemm_head,omitempty"`
	// GEMMBias is the traced op of the GEMM whose bias the chain takes (program.Input.Bias: a
	// Linear's whose output reaches the chain through a permute, in training): the chain adds
	// it, so its gradient comes from the fused backward and the GEMM backward's row sum goes.
	GEMMBias string `json:"gemm_bias,omitempty"`
}

// genericOps are the memory-bound elementwise ops a generic chain is made of (base
// names, in-place variants stripped).
var genericOps = map[string]bool{
	"add": true, "sub": true, "rsub": true, "mul": true, "div": true,
	"eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true,
	"where": true, "masked_fill": true,
	"to": true, "_to_copy": true, "type_as": true,
	"clamp": true, "clamp_min": true, "clamp_max": true, "hardtanh": true,
	"relu": true, "leaky_relu": true, "elu": true, "gelu": true, "silu": true, "mish": true,
	"sigmoid": true, "tanh": true, "softplus": true, "hardswish": true, "hardsigmoid": true,
	"exp": true, "log": true, "sqrt": true, "rsqrt": true, "pow": true, "cos": true, "sin": true,
	"abs": true, "neg": true, "reciprocal": true,
	"dropout": true, "native_dropout": true,
}

// genericReductions may end a generic chain when they reduce over the last dim.
var genericReductions = map[string]bool{
	"sum": true, "mean": true, "amax": true, "amin": true, "softmax": true, "_softmax": true,
	"log_softmax": true, "_log_softmax": true, "logsumexp": true, "var": true, "std": true, "norm": true,
}

// GenericFanOutMax is the most chain ops that may read one op's output inside a region (two:
// a value and its residual use, as in x * sigmoid(x)).
const GenericFanOutMax = 2

// genericRegions finds, in g, the maximal dataflow-connected regions of at least `least`
// genericOps nodes (the last may be a last-dim reduction) that launched GPU work and that no
// instance in claimed (OpIDs) contains: their nodes, in time order. A chain is two ops or
// more, or one whose value a GEMM casts or that takes a GEMM's bias (genericFound asks for
// regions of one and keeps a single op only with such a cast or bias).
func genericRegions(g *graph, claimed map[int32]bool, least int) [][]int32 {
	n := len(g.nodes)
	member := make([]bool, n)
	red := make([]bool, n)
	for b := range n {
		id := g.nodes[b]
		if claimed[id] || len(g.ins(int32(b))) == 0 {
			continue
		}
		if _, k := subtreeActs(g.t, id); k == 0 {
			continue // a view, a no-op cast, a dropout that does not run
		}
		name := stripInplace(g.name[b])
		switch {
		case genericOps[name]:
			if name == "pow" && len(g.tensorInputs(int32(b))) != 1 {
				continue // pow by a tensor exponent is not in the table
			}
			member[b] = true
		case genericReductions[name] && g.lastDim(int32(b)):
			member[b], red[b] = true, true
		}
	}
	parent := make([]int32, n)
	hasRed := make([]bool, n)
	for i := range parent {
		parent[i] = int32(i)
		hasRed[i] = red[i]
	}
	var find func(x int32) int32
	find = func(x int32) int32 {
		for parent[x] != x {
			parent[x] = parent[parent[x]]
			x = parent[x]
		}
		return x
	}
	// readers of each member's output among the members: a value read by more than
	// GenericFanOutMax of them (RoPE's cos/sin, an attention mask: computed once, read by
	// every layer) is not part of one chain, and joining through it would merge the layers
	readers := make([]int, n)
	for b := range n {
		if member[b] {
			for pos := range g.in[b] {
				if p := g.directMember(int32(b), pos, member); p >= 0 {
					readers[p]++
				}
			}
		}
	}
	for b := range n {
		if !member[b] {
			continue
		}
		for pos := range g.in[b] {
			p := g.directMember(int32(b), pos, member)
			if p < 0 || red[p] || readers[p] > GenericFanOutMax { // a reduction ends its chain
				continue
			}
			if v, ok := g.val0(p); ok && pos < len(g.ins(int32(b))) && !broadcastsTo(v.dims, g.ins(int32(b))[pos].Dims) {
				// b reads p's value through a view that moves its elements (a position vector
				// [S] read as [S, 1], a slice): one elementwise kernel cannot hold both, so the
				// chain ends at the view and the parts on either side are chains of their own
				continue
			}
			if g.readsAround(int32(b), pos, p) {
				// b's other operand is computed from p by ops outside the chain (a residual
				// add x + f(norm(x)) on x's add): one kernel cannot hold both, f runs between
				continue
			}
			rb, rp := find(int32(b)), find(p)
			if rb == rp || hasRed[rb] && hasRed[rp] {
				continue
			}
			parent[rb] = rp
			hasRed[rp] = hasRed[rp] || hasRed[rb]
		}
	}
	regions := map[int32][]int32{}
	for b := range n {
		if member[b] {
			r := find(int32(b))
			regions[r] = append(regions[r], int32(b))
		}
	}
	var out [][]int32
	for _, r := range slices.Sorted(maps.Keys(regions)) {
		if len(regions[r]) >= least {
			out = append(out, regions[r])
		}
	}
	return out
}

// GenericPatternID is the pattern id a generic chain's instances take beside the catalog's
// in the totals and the coverage (codegen's folder pattern "generic").
const GenericPatternID = "generic"

// genericChains describes each region of genericRegions as one instance, with its op
// program and, when m is calibrated, the saving of one fused kernel.
func genericChains(g *graph, claimed map[int32]bool, m *CostModel) []GenericChain {
	cs, _, _ := genericFound(g, claimed, m)
	return cs
}

// genericRanked is genericChains with, for each chain that has a program, an instance of
// GenericPatternID (its ops, the OpIDs of its nodes, and the estimate of its fused kernel)
// that Analyze ranks beside the catalog's for the non-overlapping totals and the coverage.
// Chains without a program get no kernel and claim nothing. A region is made only of ops no
// catalog instance contains (claimed), so it never shares an op with one; a generic
// instance that runs in training (its ops have backward ops in the trace) while its program
// has no fused backward (a row program) saves nothing there, as a forward-only catalog
// pattern's; one with a fused backward saves its traced backward ops' time less the cost
// model's fused backward (genericBackwardUs), as a catalog pattern's. noBwd counts the
// instances in training whose program has no fused backward.
func genericRanked(g *graph, claimed map[int32]bool, m *CostModel, device string, ti, rank int) (cs []GenericChain, rks []ranked, noBwd int) {
	cs, ops, biases := genericFound(g, claimed, m)
	for i, c := range cs {
		if c.Program == nil {
			continue
		}
		anchor := ops[i][len(ops[i])-1]
		for _, id := range slices.Backward(ops[i]) {
			if g.node[id] >= 0 { // the last node of the chain, not a cast nested in a GEMM
				anchor = id
				break
			}
		}
		in := &Instance{Pattern: GenericPatternID, Anchor: anchor, Ops: ops[i],
			Dims: [][]int64{c.Program.Dims}, DType: c.DType, Elems: c.Program.Numel()}
		if biases[i] >= 0 {
			in.TakesBias = []int32{biases[i]}
		}
		if c.Program.GEMM != nil {
			in.GEMMs = ops[i][:1] // the head: genericFound puts its OpID first
			in.Flops = c.Program.GEMM.FLOPs()
		}
		in.Bytes, in.WriteBytes = c.Program.Bytes()
		e := estimate{gpuUs: c.GPUTimeUs, kernels: c.Kernels, fusedKernels: 1, timed: c.GPUTimeUs > 0}
		if c.EstFusedUs > 0 {
			// the step runs the faster form: its time is the chain's less the saving
			e.fusedUs, e.savingUs, e.modeled = c.GPUTimeUs-c.EstSavingUs, c.EstSavingUs, true
		}
		rk := ranked{in: in, est: e, rank: rank, ti: ti}
		rk.bwd, rk.bwUs = backward(g.t, in)
		rk.bwdFusedUs = rk.bwUs
		gr, err := c.Program.Backward()
		switch {
		case !rk.bwd:
		case err != nil:
			rk.est.fusedUs, rk.est.savingUs, rk.est.fusedKernels = rk.est.gpuUs, 0, rk.est.kernels
			cs[i].EstSavingUs = 0
			noBwd++
		case rk.est.modeled && rk.bwUs > 0:
			if us, ok := genericBackwardUs(m, device, c, gr); ok {
				rk.bwdFusedUs = min(us, rk.bwUs)
				rk.bwdSavingUs = rk.bwUs - rk.bwdFusedUs
			}
		}
		cs[i].BackwardGPUTimeUs, cs[i].EstBackwardSavingUs = rk.bwUs, rk.bwdSavingUs
		rks = append(rks, rk)
	}
	return cs, rks, noBwd
}

// genericBackwardUs is the cost model's fused backward of chain c (m calibrated on its
// trace, on device): one kernel over its program's backward bytes (program.BackwardBytes of
// gr), and with a GEMM head cuBLAS's two gradient GEMMs at the head's traced time.
func genericBackwardUs(m *CostModel, device string, c GenericChain, gr program.Grad) (float64, bool) {
	if m == nil {
		return 0, false
	}
	nb, _ := c.Program.BackwardBytes(gr)
	s := BackwardShape{Pattern: GenericPatternID, Bytes: nb}
	if c.Program.GEMM != nil {
		if c.GEMMUs <= 0 {
			return 0, false
		}
		s.GemmUs = c.GEMMUs
	}
	us, _, ok := m.BackwardUs(device, s)
	return us, ok
}

// genericFound is genericChains with each chain's OpIDs and the OpID of the GEMM whose bias
// it takes (-1 for none).
func genericFound(g *graph, claimed map[int32]bool, m *CostModel) ([]GenericChain, [][]int32, []int32) {
	var out []GenericChain
	var ids [][]int32
	var biases []int32
	for _, nodes := range genericRegions(g, claimed, 1) {
		single := len(nodes) == 1 // a chain only with a GEMM's cast of its value (withGEMMCasts) or bias (takeGEMMBias)
		member := memberOf(len(g.nodes), nodes)
		c := GenericChain{Instances: 1}
		var opIDs []int32
		for _, b := range nodes {
			opIDs = append(opIDs, g.nodes[b])
		}
		var best tval
		var ns int64
		for _, b := range nodes {
			c.Ops = append(c.Ops, stripInplace(g.name[b]))
			if v, ok := g.val0(b); ok && (best.dims == nil || numel(v.dims) > numel(best.dims)) {
				best = v
			}
			x, k := subtreeActs(g.t, g.nodes[b])
			ns += x
			c.Kernels += k
			if c.Unrecoverable == "" {
				c.Unrecoverable = g.missingScalar(b)
			}
		}
		c.Dims, c.DType = dims(best.dims), best.dtype
		chainNs := ns
		var reads map[int]inRead
		if c.Unrecoverable == "" {
			c.Program, reads, c.Unrecoverable = g.buildProgram(nodes, nil)
		}
		bias := int32(-1)
		if c.Program != nil {
			gemm, h, why := g.gemmHead(nodes, member, claimed)
			switch {
			case gemm >= 0 && c.Program.Reduction() != nil:
				c.NoGEMMHead = g.name[gemm] + ": the chain ends in a reduction (a row does not fit one output tile): cuBLAS, then the row kernel"
			case gemm >= 0:
				if p, why := g.withGEMMHead(nodes, gemm, h); p != nil {
					c.Program, c.GEMM = p, g.name[gemm]
					gns, k := gemmActs(g.t, g.nodes[gemm])
					c.GEMMUs = float64(gns) / 1e3
					ns += gns
					c.Kernels += k
					opIDs = append([]int32{g.nodes[gemm]}, opIDs...)
				} else {
					c.NoGEMMHead = g.name[gemm] + ": " + why
				}
			default:
				c.NoGEMMHead = why
			}
		}
		if single && (c.Program == nil || c.Program.GEMM != nil) {
			continue
		}
		if c.Program != nil {
			// autocast's casts of the chain's outputs into the GEMMs that read them
			q, casts := g.withGEMMCasts(nodes, member, c.Program, claimed)
			c.Program = q
			for _, id := range casts {
				x, k := subtreeActs(g.t, id)
				ns += x
				chainNs += x
				c.Kernels += k
				c.Ops = append(c.Ops, "to")
				opIDs = append(opIDs, id)
			}
			// after the casts (withGEMMCasts reads step i as node i): the bias takes step 0
			if c.Program.GEMM == nil && c.Program.Reduction() == nil {
				if q, gemm := g.takeGEMMBias(c.Program, reads, member, claimed); q != nil {
					c.Program, c.GEMMBias, bias = q, g.name[gemm], g.nodes[gemm]
				}
			}
			if single && len(casts) == 0 && bias < 0 {
				continue
			}
		}
		ids = append(ids, opIDs)
		biases = append(biases, bias)
		c.GPUTimeUs = float64(ns) / 1e3
		switch {
		case c.Program == nil || chainNs == 0 || m == nil || m.BandwidthGBs <= 0:
		case c.Program.GEMM != nil:
			// the folder's fused kernel: the faster of the epilogue-fused GEMM and cuBLAS with
			// the pointwise kernel, which it times against each other
			if f, ok := m.genericGEMMUs(c.Program, float64(ns-chainNs)/1e3, false); ok {
				c.EstFusedUs = f
				c.EstSavingUs = max(c.GPUTimeUs-f, 0)
			}
		default:
			if f, ok := genericFusedUs(m, c.Program); ok {
				c.EstFusedUs = f
				c.EstSavingUs = max(c.GPUTimeUs-f, 0)
			}
		}
		out = append(out, c)
	}
	return out, ids, biases
}

// takeGEMMBias returns program p taking the bias of the GEMM whose output one of its inputs
// is (program.Input.Bias) and that GEMM's node, or nil: where the GEMM (a Linear's linear or
// addmm, beta and alpha 1, unclaimed, not in the region) has a bias of its output's last dim
// and a backward in the trace, its output reaches the chain through one permute (and
// dropouts that do not run) and nothing else reads it (ConvNeXt's fc2 before its layer scale,
// fc2(x).permute(0, 3, 1, 2) * gamma, or before the residual add: the GEMM head refuses the
// view). The bias enters the chain where the permute puts that dim, in the GEMM output's
// dtype (the GEMM adds its bias in its own type). In inference taking it saves nothing and
// changes the GEMM: not taken.
func (g *graph) takeGEMMBias(p *program.Program, reads map[int]inRead, member []bool, claimed map[int32]bool) (*program.Program, int32) {
	for i := range p.Inputs {
		r, ok := reads[i]
		if !ok || p.Inputs[i].Number || p.Inputs[i].Keep {
			continue
		}
		if bias, gemm, ok := g.biasThroughPermute(r, p.Inputs[i], member, claimed); ok {
			if q, err := p.WithBias(bias, i); err == nil {
				return q, gemm
			}
		}
	}
	return nil, -1
}

// biasThroughPermute returns the bias, as a program input of in's rank, of the GEMM whose
// output in (read at r) is through one permute (takeGEMMBias's conditions), and that GEMM.
func (g *graph) biasThroughPermute(r inRead, in program.Input, member []bool, claimed map[int32]bool) (program.Input, int32, bool) {
	if int(r.b) >= len(g.dir) || r.pos >= len(g.in[r.b]) || r.pos >= len(g.dir[r.b]) {
		return program.Input{}, -1, false
	}
	gemm := g.in[r.b][r.pos]
	if gemm < 0 || member[gemm] || claimed[g.nodes[gemm]] || (g.name[gemm] != "linear" && g.name[gemm] != "addmm") {
		return program.Input{}, -1, false
	}
	// between them (read back from the chain): one permute, and dropouts that do not run
	// (timm's Mlp's drop of p 0 after fc2)
	view := int32(-1)
	for x := g.dir[r.b][r.pos]; x != gemm; x = g.dir[x][0] {
		switch {
		case x < 0 || int(x) >= len(g.dir) || !g.pass[x] || len(g.dir[x]) == 0:
			return program.Input{}, -1, false
		case g.name[x] == "permute" && view < 0:
			view = x
		case g.name[x] != "dropout":
			return program.Input{}, -1, false
		}
	}
	out, ok := g.val0(gemm)
	if view < 0 || !ok {
		return program.Input{}, -1, false
	}
	if _, ok := g.gemmBiasOf(gemm, r.b, out.dims); !ok {
		return program.Input{}, -1, false
	}
	ins := g.ins(view)
	if len(ins) < 2 {
		return program.Input{}, -1, false
	}
	perm, ok := concreteInts(ins[1].Concrete)
	rank := len(out.dims)
	if !ok || len(perm) != rank || len(in.Dims) != rank {
		return program.Input{}, -1, false
	}
	at := -1
	for j, d := range perm {
		if d < 0 {
			d += int64(rank)
		}
		if d == int64(rank-1) {
			at = j
		}
	}
	if at < 0 || in.Dims[at] != out.dims[rank-1] {
		return program.Input{}, -1, false
	}
	bdims := make([]int64, rank)
	for j := range bdims {
		bdims[j] = 1
	}
	bdims[at] = out.dims[rank-1]
	return program.Input{DType: in.DType, Dims: bdims}, gemm, true
}

// genericFusedUs is one fused kernel of p as the cost model times the catalog's memory-bound
// kernels (CostModel.fused): a pointwise kernel over p's bytes (its inputs read once, its
// outputs written once), or a row kernel over them when p ends in a reduction; and the draw
// of its keep masks (a training dropout's), which the caller makes.
func genericFusedUs(m *CostModel, p *program.Program) (float64, bool) {
	if m.BandwidthGBs <= 0 {
		return 0, false
	}
	kind := &Pattern{Kind: KindPointwise}
	if p.Reduction() != nil {
		kind.Kind = KindRow
	}
	bytes, writes := p.Bytes()
	us := m.fused(kind, Shape{Bytes: bytes, WriteBytes: writes})
	if n := p.KeepNumel(); n > 0 {
		// a training dropout's keep mask, which the caller draws before the call (bernoulli_
		// into a bool tensor: one more pointwise kernel writing a byte an element)
		us += m.fused(&Pattern{Kind: KindPointwise}, Shape{Bytes: n, WriteBytes: n})
	}
	return us, true
}

// GenericFusedUs is one call of a generic chain's fused kernel (program p) on device as
// FusedUs estimates a catalog pattern's: a row kernel over p's bytes (its inputs read once,
// its outputs written once) when p ends in a reduction, a pointwise kernel otherwise; warm
// as Shape.Warm (a benchmark's back-to-back timing). For bench's predictions of generic
// folders; an analysis estimates them with its trace's calibration (genericFusedUs).
func (m CostModel) GenericFusedUs(device string, p *program.Program, warm bool) (float64, bool) {
	bytes, writes := p.Bytes()
	s := Shape{Pattern: GenericPatternID, Bytes: bytes, WriteBytes: writes, Warm: warm}
	if p.Reduction() != nil {
		// FusedUs's estimate depends on the pattern's kind alone: a catalog row pattern's id
		// stands in for the row kernel
		for _, c := range catalog {
			if c.Kind == KindRow && c.GEMM == "" {
				s.Pattern = c.ID
				break
			}
		}
	}
	return m.FusedUs(device, s)
}

// groupGenericChains merges chains of equal op sequence, main shape, dtype and program, and
// orders the groups by estimated saving, then GPU time, op sequence and shape.
func groupGenericChains(all []GenericChain) []GenericChain {
	type key struct{ ops, dims, dtype, prog string }
	byKey := map[key]int{}
	var out []GenericChain
	for _, c := range all {
		k := key{strings.Join(c.Ops, ","), fmt.Sprint(c.Dims), string(c.DType), ""}
		if c.Program != nil {
			k.prog = c.Program.Key()
		}
		i, ok := byKey[k]
		if !ok {
			byKey[k] = len(out)
			out = append(out, c)
			continue
		}
		e := &out[i]
		e.Instances += c.Instances
		e.GPUTimeUs += c.GPUTimeUs
		e.Kernels += c.Kernels
		e.GEMMUs += c.GEMMUs
		e.EstSavingUs += c.EstSavingUs
		e.EstFusedUs += c.EstFusedUs
		e.BackwardGPUTimeUs += c.BackwardGPUTimeUs
		e.EstBackwardSavingUs += c.EstBackwardSavingUs
		if e.Unrecoverable == "" {
			e.Unrecoverable = c.Unrecoverable
		}
	}
	for i := range out {
		if out[i].Instances > 0 {
			out[i].EstFusedUs /= float64(out[i].Instances) // one call
		}
	}
	slices.SortStableFunc(out, func(a, b GenericChain) int {
		if x, y := a.EstSavingUs+a.EstBackwardSavingUs, b.EstSavingUs+b.EstBackwardSavingUs; x != y {
			return cmpF(y, x)
		}
		if a.GPUTimeUs != b.GPUTimeUs {
			return cmpF(b.GPUTimeUs, a.GPUTimeUs)
		}
		if c := strings.Compare(strings.Join(a.Ops, ","), strings.Join(b.Ops, ",")); c != 0 {
			return c
		}
		return strings.Compare(fmt.Sprint(a.Dims, a.DType), fmt.Sprint(b.Dims, b.DType))
	})
	for i := range out {
		out[i].GPUTimeUs = round2(out[i].GPUTimeUs)
		out[i].GEMMUs = round2(out[i].GEMMUs)
		out[i].EstSavingUs = round2(out[i].EstSavingUs)
		out[i].EstFusedUs = round2(out[i].EstFusedUs)
		out[i].BackwardGPUTimeUs = round2(out[i].BackwardGPUTimeUs)
		out[i].EstBackwardSavingUs = round2(out[i].EstBackwardSavingUs)
	}
	return out
}

// readsAround reports whether an input of b other than pos depends on node p (b reads p at
// pos): a chain joining b to p would then need what runs between them in the middle of its
// kernel. Producers come before their readers, so the walk back from each other input
// visits nodes after p only; past readsAroundBudget nodes, or (inferred dataflow) at a cat
// whose inputs it does not know, it answers yes (no join).
func (g *graph) readsAround(b int32, pos int, p int32) bool {
	seen := map[int32]bool{}
	var stack []int32
	for k, q := range g.in[b] {
		if k != pos && q >= 0 && q != p {
			stack = append(stack, q)
		}
	}
	for len(stack) > 0 {
		q := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if q == p {
			return true
		}
		if q < p || seen[q] {
			continue
		}
		if seen[q] = true; len(seen) > readsAroundBudget {
			return true
		}
		if g.inferred && listOps[g.name[q]] && !slices.ContainsFunc(g.in[q], func(r int32) bool { return r >= 0 }) {
			// a cat of tensors the inferred dataflow does not link (Kineto records a
			// TensorList's shapes, not which values it holds): it may read any value of an
			// element's sizes made since p (one made before p cannot depend on it), so the
			// walk goes on from each of those (Llama's K and V through the cache's cat reach
			// p; a rotary embedding's cat(-x2, x1) reads only the slices of q made before
			// it). Where a value between them has sizes unknown, no join. The execution
			// trace's dataflow links the cat's inputs themselves.
			vals, ok := g.madeSince(q, p)
			if !ok {
				return true
			}
			stack = append(stack, vals...)
			continue
		}
		for _, r := range g.in[q] {
			if r >= 0 {
				stack = append(stack, r)
			}
		}
	}
	return false
}

// madeSince lists the nodes from p up to the list op q (a cat) whose value has the sizes of
// one of q's elements, the values q may read that may depend on p; ok is false when it
// cannot tell: q's element sizes not recorded, a node between them of unknown output, or
// more than readsAroundBudget nodes between them.
func (g *graph) madeSince(q, p int32) (vals []int32, ok bool) {
	if g.t == nil || p < 0 || q-p > readsAroundBudget {
		return nil, false
	}
	ins := g.t.Ops[g.nodes[q]].Inputs
	if len(ins) == 0 || len(ins[0].List) == 0 {
		return nil, false
	}
	for n := p; n < q; n++ {
		if g.out[n] == nil {
			return nil, false
		}
		for _, v := range g.out[n] {
			if slices.ContainsFunc(ins[0].List, func(d []int64) bool { return eqDims(v.dims, d) }) {
				vals = append(vals, n)
				break
			}
		}
	}
	return vals, true
}

// listOps read a list of tensors, which the Kineto dataflow does not link.
var listOps = map[string]bool{"cat": true, "concat": true, "concatenate": true, "stack": true, "hstack": true, "vstack": true}

// readsAroundBudget bounds readsAround's walk (a transformer layer is a few hundred nodes).
const readsAroundBudget = 4096

// directMember returns the member node input pos of b reads, looking through views,
// copies and the table's ops that launched no kernel; -1 when it is no member.
func (g *graph) directMember(b int32, pos int, member []bool) int32 {
	p := int32(-1)
	if int(b) < len(g.dir) && pos < len(g.dir[b]) {
		p = g.dir[b][pos]
	} else if pos < len(g.in[b]) {
		p = g.in[b][pos]
	}
	for steps := 0; p >= 0 && !member[p] && g.pass[p] && steps < 64; steps++ {
		if int(p) < len(g.dir) && len(g.dir[p]) > 0 {
			p = g.dir[p][0]
		} else {
			p = g.src[p]
			break
		}
	}
	if p < 0 || !member[p] {
		return -1
	}
	return p
}

// lastDim reports whether reduction node b reduces over its input's last dim only, as
// its Concrete Inputs record it (dim argument 1).
func (g *graph) lastDim(b int32) bool {
	ins := g.ins(b)
	if len(ins) < 2 || !isTensor(ins[0]) {
		return false
	}
	r := len(ins[0].Dims)
	d, ok := intList(ins, 1)
	if !ok {
		if x, ok1 := concreteInt(ins, 1); ok1 {
			d, ok = []int64{x}, true
		}
	}
	if !ok || len(d) != 1 {
		return false
	}
	k, ok := normDim(d[0], r)
	return ok && k == r-1
}

// missingScalar returns why node b's scalar arguments cannot be recovered: the first
// scalar argument without Concrete Inputs text; "" when none is missing.
func (g *graph) missingScalar(b int32) string {
	for i, in := range g.ins(b) {
		switch in.Type {
		case "Scalar", "double", "int", "ScalarList":
		default:
			continue // tensors (a 0-dim one included), None, dtypes, devices
		}
		if _, num := g.runtimeNumber(b, i); in.Concrete != "" || num {
			continue
		}
		return fmt.Sprintf("%s: argument %d (%s) is not recorded in Concrete Inputs", stripInplace(g.name[b]), i, in.Type)
	}
	return ""
}

// runtimeNumber reports whether argument pos of node b is a number the model passes that the
// trace does not record, which the generated kernel takes at run time (program's
// Input.Number), and its dtype: a Python float as operand 1 of add, sub, rsub, mul or div
// (x * 0.5), which ATen receives as a wrapped 0-dim double tensor: Kineto records its type
// ("double") and no value, the execution trace a CPU tensor and no value (fp32: the value
// eager computes with); a Python int there (positions - 1), a wrapped 0-dim int64 tensor
// ("long int") that no op of the trace made (int64; a 0-dim int64 tensor that is not a
// number reads the same way, and the caller may pass it as it is).
func (g *graph) runtimeNumber(b int32, pos int) (program.DType, bool) {
	ins := g.ins(b)
	if pos != 1 || pos >= len(ins) || !program.NumberOps[program.Code(stripInplace(g.name[b]))] {
		return "", false
	}
	in := ins[pos]
	if len(in.Dims) != 0 || in.Concrete != "" {
		return "", false
	}
	switch {
	case in.Type == "double":
		return program.FP32, true
	case parseDType(in.Type) == Int64 && (pos >= len(g.in[b]) || g.in[b][pos] < 0):
		return program.I64, true
	}
	return "", false
}

// claimedOps is the set of OpIDs the instances contain. Not the GEMMs and convolutions whose
// bias an instance takes (Instance.TakesBias): they stay, and autocast's casts of their
// inputs stay to take (withGEMMCasts: ConvNeXt's residual sum cast into the depthwise conv
// whose bias the layernorm_linear after it takes); their output's one reader is the
// instance's, so no chain reads it to take the bias again.
func claimedOps(ins []*Instance) map[int32]bool {
	m := map[int32]bool{}
	for _, in := range ins {
		for _, id := range in.Ops {
			m[id] = true
		}
	}
	return m
}
