package program

import (
	"errors"
	"fmt"
	"strconv"
)

// GEMMOp is the traced form of a program's GEMM head: which ATen op computed it, and so how
// its operands are laid out and how the eager reference replays it.
type GEMMOp string

// The GEMM forms a head may take.
const (
	// Linear: x [..., K], weight [N, K] (used transposed, as nn.Linear), an optional bias [N].
	Linear GEMMOp = "linear"
	// Addmm: bias [N] + x [M, K] @ w [K, N] (beta and alpha 1).
	Addmm GEMMOp = "addmm"
	// MM: x [M, K] @ w [K, N].
	MM GEMMOp = "mm"
	// Matmul: x [..., K] @ w [K, N] (a 2-D weight broadcast over x's leading dims).
	Matmul GEMMOp = "matmul"
	// BMM: x [B, M, K] @ w [B, K, N].
	BMM GEMMOp = "bmm"
)

// GEMM is a program's head: the GEMM whose output is the program's input 0 (its main shape,
// its dtype) and that nothing outside the chain reads. The fused kernel computes it in fp32
// tiles and runs the steps on the accumulator as its epilogue; the eager reference replays
// it with Op.
type GEMM struct {
	Op GEMMOp `json:"op"`
	// X is the left operand's traced shape: [..., K] (linear, matmul), [M, K] (mm, addmm) or
	// [B, M, K] (bmm).
	X []int64 `json:"x"`
	// W is the right operand's traced shape: [N, K] for linear (the transposed use), [K, N]
	// for mm, addmm and matmul, [B, K, N] for bmm.
	W []int64 `json:"w"`
	// Bias is [N] or nil (linear: optional; addmm: required; the others: none).
	Bias  []int64 `json:"bias,omitempty"`
	DType DType   `json:"dtype"` // x, w, bias and the output's dtype (a float)
}

// WeightNK reports whether the weight is stored [N, K] and multiplied transposed (linear).
func (g *GEMM) WeightNK() bool { return g.Op == Linear }

// MNK returns the GEMM's sizes: batch (1 but for bmm), rows M (x's leading dims together for
// linear and matmul), columns N and the reduced dim K.
func (g *GEMM) MNK() (batch, m, n, k int64) {
	batch, m = 1, 1
	k = g.X[len(g.X)-1]
	lead := g.X[:len(g.X)-1]
	if g.Op == BMM {
		batch, lead = g.X[0], g.X[1:len(g.X)-1]
	}
	for _, d := range lead {
		m *= d
	}
	if g.WeightNK() {
		n = g.W[0]
	} else {
		n = g.W[len(g.W)-1]
	}
	return batch, m, n, k
}

// OutDims is the GEMM output's shape: x's leading dims and N.
func (g *GEMM) OutDims() []int64 {
	_, _, n, _ := g.MNK()
	return append(append([]int64{}, g.X[:len(g.X)-1]...), n)
}

// FLOPs is 2 * batch * M * N * K.
func (g *GEMM) FLOPs() int64 {
	b, m, n, k := g.MNK()
	return 2 * b * m * n * k
}

// OperandBytes is what the GEMM reads: x, the weight and the bias, once.
func (g *GEMM) OperandBytes() int64 {
	n := numelOf(g.X) + numelOf(g.W)
	if g.Bias != nil {
		n += numelOf(g.Bias)
	}
	return n * g.DType.Size()
}

func numelOf(d []int64) int64 {
	n := int64(1)
	for _, x := range d {
		n *= x
	}
	return n
}

// validate checks the head against the program: a known op, a float dtype, operand shapes
// that fit the op (ranks, K agreeing, N agreeing with the bias), and input 0 is the GEMM's
// output (its dtype, the main shape), which a pointwise program alone may read (a
// reduction's row does not fit an output tile).
func (g *GEMM) validate(p *Program) error {
	if !g.DType.IsFloat() {
		return fmt.Errorf("dtype %s: want fp32, fp16 or bf16", strconv.Quote(string(g.DType)))
	}
	if err := checkDims(g.X); err != nil {
		return fmt.Errorf("x: %v", err)
	}
	if err := checkDims(g.W); err != nil {
		return fmt.Errorf("w: %v", err)
	}
	rx, rw := len(g.X), len(g.W)
	switch g.Op {
	case Linear, Matmul:
		if rx < 2 || rw != 2 {
			return fmt.Errorf("%s: x rank %d, w rank %d (want x [..., K], w rank 2)", g.Op, rx, rw)
		}
	case MM, Addmm:
		if rx != 2 || rw != 2 {
			return fmt.Errorf("%s: x rank %d, w rank %d (want 2 and 2)", g.Op, rx, rw)
		}
	case BMM:
		if rx != 3 || rw != 3 || g.X[0] != g.W[0] {
			return fmt.Errorf("bmm: x %v, w %v (want [B, M, K] and [B, K, N])", g.X, g.W)
		}
	default:
		return fmt.Errorf("op %s: not a GEMM form (linear, addmm, mm, matmul, bmm)", strconv.Quote(string(g.Op)))
	}
	k := g.X[rx-1]
	wk := g.W[rw-2]
	if g.WeightNK() {
		wk = g.W[1]
	}
	if wk != k {
		return fmt.Errorf("x %v and w %v disagree on K", g.X, g.W)
	}
	_, _, n, _ := g.MNK()
	switch {
	case g.Op == Addmm && g.Bias == nil:
		return errors.New("addmm without its bias")
	case g.Bias != nil && g.Op != Linear && g.Op != Addmm:
		return fmt.Errorf("%s takes no bias", g.Op)
	case g.Bias != nil && (len(g.Bias) != 1 || g.Bias[0] != n):
		return fmt.Errorf("bias %v: want [%d]", g.Bias, n)
	}
	if p.Reduction() != nil {
		return errors.New("a program ending in a reduction has no GEMM head (a row does not fit one output tile)")
	}
	out := g.OutDims()
	if !equalDims(out, p.Dims) {
		return fmt.Errorf("output %v is not the main shape %v", out, p.Dims)
	}
	in := p.Inputs[0]
	if in.DType != g.DType || !equalDims(in.Dims, p.Dims) {
		return fmt.Errorf("input 0 (%s %v) is not the GEMM's output (%s %v)", in.DType, in.Dims, g.DType, p.Dims)
	}
	return nil
}

func equalDims(a, b []int64) bool {
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
