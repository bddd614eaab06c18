package patterns

import (
	"fmt"
	"slices"

	"github.com/fuseadvise/fuseadvise/program"
)

// A generic chain whose first value is a GEMM's output (linear, addmm, mm, matmul, bmm)
// that nothing outside the chain reads gets that GEMM as its program's head (program.GEMM):
// codegen renders the chain as the GEMM's epilogue, and beside it cuBLAS plus the chain's
// pointwise kernel, for bench to keep the faster. Only the GEMM's operand shapes, its bias's
// presence, its form and its dtype enter the program: validated numbers and table words.

// gemmHeadOps are the GEMM forms a head may take, by traced base name.
var gemmHeadOps = map[string]program.GEMMOp{
	"linear": program.Linear, "addmm": program.Addmm, "mm": program.MM, "matmul": program.Matmul, "bmm": program.BMM,
}

// gemmHead returns the GEMM node whose output the region (nodes, its members marked in
// member) reads and the head it makes, or -1 and why the chain stays pointwise ("" when no
// GEMM feeds it). The GEMM must be unclaimed, read by the region's nodes alone and directly
// (no view between). Where the region reads several GEMMs' outputs (a gated unit,
// sigmoid(x W1) * tanh(x W2)), the first that qualifies, in time order, is the head and the
// others' outputs are inputs of the epilogue.
func (g *graph) gemmHead(nodes []int32, member []bool, claimed map[int32]bool) (int32, *program.GEMM, string) {
	var cands []int32
	seen := map[int32]bool{}
	for _, b := range nodes {
		for _, p := range g.in[b] {
			if p >= 0 && !member[p] && gemmHeadOps[g.name[p]] != "" && !seen[p] {
				seen[p] = true
				cands = append(cands, p)
			}
		}
	}
	slices.Sort(cands) // node indices are in time order
	first := ""
	for _, gemm := range cands {
		h, why := g.gemmQualifies(gemm, member, claimed)
		if why == "" {
			return gemm, h, ""
		}
		if first == "" {
			first = g.name[gemm] + ": " + why
		}
	}
	return -1, nil, first
}

// gemmQualifies returns the head GEMM node gemm makes for the region (member), or why it
// cannot head it.
func (g *graph) gemmQualifies(gemm int32, member []bool, claimed map[int32]bool) (*program.GEMM, string) {
	if claimed[g.nodes[gemm]] {
		return nil, "the GEMM belongs to a catalog instance"
	}
	v, ok := g.val0(gemm)
	if !ok {
		return nil, "its output is not recorded"
	}
	for _, c := range g.cons[gemm] {
		if !member[c] {
			return nil, "the GEMM's output is read outside the chain"
		}
		for pos, p := range g.in[c] {
			if p == gemm && (pos >= len(g.ins(c)) || !eqDims(v.dims, g.ins(c)[pos].Dims)) {
				return nil, "a view between the GEMM and the chain"
			}
		}
	}
	return g.gemmOf(gemm)
}

// gemmOf reads GEMM node c's operands as traced: x, the weight, the bias, their dtype; why
// the GEMM cannot head a program otherwise.
func (g *graph) gemmOf(c int32) (*program.GEMM, string) {
	ins := g.ins(c)
	op := gemmHeadOps[g.name[c]]
	h := &program.GEMM{Op: op}
	xi, wi, bi := 0, 1, -1
	switch op {
	case program.Linear:
		if len(ins) > 2 && isTensor(ins[2]) {
			bi = 2
		}
	case program.Addmm:
		xi, wi, bi = 1, 2, 0
		for pos := 3; pos <= 4; pos++ { // beta, alpha
			if pos < len(ins) && ins[pos].Type != "" {
				if v, ok := concreteFloat(ins, pos); !ok || v != 1 {
					return nil, "beta or alpha is not 1 (or not recorded)"
				}
			}
		}
	}
	if wi >= len(ins) || !isTensor(ins[xi]) || !isTensor(ins[wi]) {
		return nil, "its operands are not recorded"
	}
	v, ok := g.val0(c)
	if !ok {
		return nil, "its output is not recorded"
	}
	dt, ok := progDType(v.dtype)
	if !ok || !dt.IsFloat() {
		return nil, fmt.Sprintf("%s GEMMs are not generated", dtypeName(v.dtype))
	}
	operands := []int{xi, wi}
	if bi >= 0 {
		operands = append(operands, bi)
	}
	for _, i := range operands {
		if parseDType(ins[i].Type) != v.dtype {
			return nil, "its operands' dtypes differ from its output's"
		}
	}
	h.X, h.W, h.DType = dims(ins[xi].Dims), dims(ins[wi].Dims), dt
	if bi >= 0 {
		h.Bias = dims(ins[bi].Dims)
	}
	return h, ""
}

// withGEMMHead rebuilds the program of a pointwise region as headed by GEMM node gemm (h):
// the GEMM's output becomes input 0. The program without the head stands when the headed one
// does not validate (the reason is returned).
func (g *graph) withGEMMHead(nodes []int32, gemm int32, h *program.GEMM) (*program.Program, string) {
	v, _ := g.val0(gemm)
	dt, _ := progDType(v.dtype)
	seed := func(pb *progBuilder) {
		pb.ext[fmt.Sprint(gemm, v.dims, dt)] = 0
		pb.p.Inputs = append(pb.p.Inputs, program.Input{DType: dt, Dims: dims(v.dims)})
	}
	p, _, why := g.buildProgram(nodes, seed)
	if p == nil {
		return nil, why
	}
	p.GEMM = h
	if err := p.Validate(); err != nil {
		return nil, err.Error()
	}
	return p, ""
}

// epilogueShape is a GEMM-headed program's epilogue-fused GEMM as epilogueGemmUs reads it:
// the traced GEMM (gemmUs) and the epilogue's own traffic, the program's bytes less the GEMM
// output's read (its other inputs read, its outputs written).
func epilogueShape(p *program.Program, gemmUs float64, warm bool) Shape {
	bytes, _ := p.Bytes()
	in0 := p.Inputs[0]
	extra := bytes - numel(in0.Dims)*in0.DType.Size()
	return Shape{GemmUs: gemmUs, GemmElemSize: p.GEMM.DType.Size(), ExtraBytes: extra, Warm: warm}
}

// genericGEMMUs is a GEMM-headed program's fused kernel, GEMM included, for a calibrated m:
// the faster of the GEMM with the chain as its epilogue and the traced GEMM (gemmUs, cuBLAS)
// followed by the chain's pointwise kernel, as gemm_fused times both in each bucket of M and
// keeps the faster (GEMM_LIBRARY). No GEMM time (gemmUs 0): no estimate.
func (m *CostModel) genericGEMMUs(p *program.Program, gemmUs float64, warm bool) (float64, bool) {
	if gemmUs <= 0 {
		return 0, false
	}
	epi := m.epilogueGemmUs(epilogueShape(p, gemmUs, warm))
	bytes, writes := p.Bytes()
	cublas := gemmUs + m.fused(&Pattern{Kind: KindPointwise}, Shape{Bytes: bytes, WriteBytes: writes, Warm: warm})
	return min(epi, cublas), true
}

// GenericGEMMFusedUs is one call of a GEMM-headed generic folder's fused kernel (gemm_fused,
// what bench's "fused" provider times: the faster of its two paths) on device; gemmUs is the
// GEMM alone as measured (bench's gemm_only).
func (m CostModel) GenericGEMMFusedUs(device string, p *program.Program, gemmUs float64, warm bool) (float64, bool) {
	if p.GEMM == nil || gemmUs <= 0 {
		return 0, false
	}
	m, ok := m.onDevice(device)
	if !ok {
		return 0, false
	}
	return m.genericGEMMUs(p, gemmUs, warm)
}

// memberOf marks nodes among n.
func memberOf(n int, nodes []int32) []bool {
	m := make([]bool, n)
	for _, b := range nodes {
		m[b] = true
	}
	return m
}
