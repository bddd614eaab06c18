package patterns

// ForwardCase is one fused forward call as the backward's derivation reads it: a benchmark's
// forward case, or an analysis's instance mapped to its kernel case (Pattern.Case).
type ForwardCase struct {
	Pattern string
	// Case holds the dtype, the shapes (x first; a GEMM's weight [N, K] second, its bias
	// third; attention's q, k, v) and, for attention, the mask kind (causal or not).
	Case
	// Shape is the main input's shape (a benchmark's "shape"; an analysis: Shapes[0]).
	Shape []int64
	// Bytes is the forward's fewest bytes; GemmUs, GEMM patterns: the forward's GEMM alone
	// as cuBLAS runs it (a benchmark's gemm_only, an analysis's traced GEMM kernels).
	Bytes  int64
	GemmUs float64
}

// caseElemSize is a kernel dtype's element size; 0 for any other.
func caseElemSize(dtype string) int64 {
	return map[string]int64{"fp32": 4, "fp16": 2, "bf16": 2}[dtype]
}

// TensorBytes is one tensor of f's main shape in its dtype; 0 when either is unknown.
func (f ForwardCase) TensorBytes() int64 {
	es := caseElemSize(f.Dtype)
	if len(f.Shape) == 0 || es == 0 {
		return 0
	}
	n := es
	for _, d := range f.Shape {
		n *= d
	}
	return n
}

// WriteBytes is what a memory-bound forward writes: its outputs in its dtype
// (Pattern.Outputs: add_layernorm writes the sum and y); 0 when the shape or dtype is unknown.
func (f ForwardCase) WriteBytes() int64 {
	n := f.TensorBytes()
	if p, ok := Lookup(f.Pattern); ok {
		n *= int64(p.OutputCount())
	}
	return n
}

// GEMMDims reads M, K, N and the element size of a GEMM case: Shapes[0] is x [..., K] and
// Shapes[1] the weight [N, K].
func (f ForwardCase) GEMMDims() (m, k, n, es int64, ok bool) {
	if len(f.Shapes) < 2 || len(f.Shapes[0]) == 0 || len(f.Shapes[1]) != 2 {
		return 0, 0, 0, 0, false
	}
	x := f.Shapes[0]
	m = 1
	for _, d := range x[:len(x)-1] {
		m *= d
	}
	k, n = x[len(x)-1], f.Shapes[1][0]
	es = caseElemSize(f.Dtype)
	return m, k, n, es, es > 0
}

// hasBias reports whether a pointwise case has a bias: a second input, one-dimensional, of
// the last dim's size.
func (f ForwardCase) hasBias() bool {
	return len(f.Shapes) > 1 && len(f.Shapes[1]) == 1 && len(f.Shape) > 0 && f.Shapes[1][0] == f.Shape[len(f.Shape)-1]
}

// bwdGradients is how many gradients of the case's shape a memory-bound backward writes, in
// the case's dtype (x's), which L2 may absorb: swiglu's two (gate's and up's), one for the
// others (the input's; the residual's is the same tensor where its dtype is x's).
var bwdGradients = map[string]int64{"swiglu": 2}

// bwdPerFwdByte is a memory-bound backward's fewest bytes per byte of its forward, where the
// derivation from the forward's reads is wrong, with every tensor in one dtype: the adapters'
// bwd_nbytes over their forward bytes (TestBackwardBytesRecorded checks them against the bytes
// the benchmark recorded for its backward cases).
var bwdPerFwdByte = map[string]float64{
	"add_layernorm": 1,       // forward: x, r read, s, y written; backward: dy, ds, s read, dx written
	"dropout_add":   2.0 / 3, // forward: x, r read, y written; backward: dy read, dx written (dr is dy)
	"gelu_pyops":    4.0 / 3, // forward: x read, y written (and the bias); backward: dy, x read, dx written, and the bias' sums
	"cross_entropy": 2,       // forward: the logits read (a few bytes a row written); backward: the logits read, their gradient written
}

// BackwardShapeOf is what the cost model reads of the fused backward of forward f (own: the
// backward's own fewest bytes when measured, a benchmark's bwd_nbytes; 0: unknown), timed
// back to back when warm. One derivation for the benchmark's predictions (bench.Predict) and
// the analysis's backward estimate (Analyze):
//
//   - memory-bound: the backward's own bytes, else an estimate from the forward's: its bytes
//     times the pattern's recorded ratio (bwdPerFwdByte), or, for the other patterns, the
//     forward's reads again and the output gradient read, a gradient per input read written; a weight's or bias' gradient from per-program partial sums (partialBytes),
//     bias_gelu's from ATen's row sum over the gradient it wrote;
//   - attention: the five products of FlashAttention-2's backward (S, dV, dP, dQ, dK: 2.5x the
//     forward's flops over the kept pairs, the head dim padded to the tiles' power of two),
//     its own bytes, else twice the forward's;
//   - GEMM with an epilogue (linear_gelu): the forward's GEMM alone (GemmUs), the GELU
//     derivative's pass over the GEMM output (dy and the pre-activation read, the gradient
//     written) and, with a bias, its per-program partial sums of the gradient (tilePartials);
//   - GEMM after a LayerNorm (layernorm_linear): the forward's GEMM alone (GemmUs), the
//     LayerNorm's backward pass over the GEMM's input (x and dxn read, dx and the normalized
//     input written), its weight's and bias' partial sums, the bias' row sum as above, and
//     the training step's refold of the weights (FoldBytes).
//
// ok is false for a pattern without a backward model (an unknown id), a
// forward without bytes (or GEMM time), or shapes the model cannot read.
func BackwardShapeOf(f ForwardCase, own int64, warm bool) (BackwardShape, bool) {
	s := BackwardShape{Pattern: f.Pattern, Warm: warm}
	if f.Pattern == GenericPatternID {
		// no pattern to derive it from: the backward's own bytes as measured (the folder's
		// program.BackwardBytes), the GEMM head's time as measured
		s.Bytes, s.GemmUs = own, f.GemmUs
		return s, own > 0
	}
	p, ok := Lookup(f.Pattern)
	if !ok || f.Bytes <= 0 {
		return s, false
	}
	switch p.Kind {
	case KindGEMM:
		m, k, n, es, ok := f.GEMMDims()
		if f.GemmUs <= 0 || !ok {
			return s, false
		}
		s.GemmUs = f.GemmUs
		bias := len(f.Shapes) > 2 // x, the weight and a bias
		switch p.GEMM {
		case GEMMEpilogue:
			s.PassBytes = 3 * m * n * es
			if bias { // summed in the derivative's pass
				s.PartialBytes = tilePartials(m, n, es, 512)
			}
		case GEMMStats:
			// the LayerNorm's backward over the GEMM's input: x and dxn read, dx and the
			// normalized input written; dgamma's and dbeta's partial sums; and the step's
			// refold of the weights (W read, W' written: the training forward's, counted
			// here so that a training step's total holds it)
			s.PassBytes = 4 * m * k * es
			s.PartialBytes = normGroups(m) * 2 * k * 4
			s.FoldBytes = 2 * n * k * es
			if bias { // db: ATen's row sum of the output gradient
				s.SumBytes = m * n * es
			}
		default:
			return s, false
		}
		return s, true
	case KindAttention:
		flops := AttentionFlops(f.Case) // 0 unless q, k and v are [B, H, S, D]
		if flops <= 0 {
			return s, false
		}
		d := f.Shapes[0][3] // the head dim
		s.Flops = flops * 5 / 2 * max(16, nextPow2(d)) / max(d, 1)
		s.Bytes = own
		if own <= 0 {
			s.Bytes = 2 * f.Bytes
		}
		return s, true
	}
	if own > 0 {
		k, ok := bwdGradients[f.Pattern]
		if !ok {
			k = 1
		}
		s.Bytes, s.WriteBytes = own, min(k*f.TensorBytes(), own)
	} else if r, ok := bwdPerFwdByte[f.Pattern]; ok && f.TensorBytes() > 0 {
		s.Bytes = int64(r * float64(f.Bytes))
		s.WriteBytes = min(f.TensorBytes(), s.Bytes) // the input's gradient
	} else {
		w := f.WriteBytes()
		read := f.Bytes - w
		if w <= 0 || read <= 0 {
			return s, false
		}
		s.Bytes, s.WriteBytes = f.Bytes+read, read
	}
	if f.Pattern == "bias_gelu" && f.hasBias() {
		s.SumBytes = s.WriteBytes // db = dz.sum over the rows: the gradient read again
	} else {
		s.PartialBytes = partialBytes(f)
	}
	return s, true
}

// partialBytes is the fp32 partial sums a memory-bound backward writes for its weight's or
// bias' gradients and adds up in a second launch (_sum_parts): the norms' backwards run about
// 512 programs of at least 4 rows, each adding its rows into one fp32 row per gradient
// (add_layernorm: the weight's and the bias'; rmsnorm: the weight's); gelu_pyops' and
// dropout_add's, with a bias, about 512 programs over the [M, N] tiles (tilePartials). 0: no such gradient.
func partialBytes(f ForwardCase) int64 {
	if len(f.Shape) == 0 {
		return 0
	}
	n := f.Shape[len(f.Shape)-1]
	if n <= 0 {
		return 0
	}
	m := int64(1)
	for _, d := range f.Shape[:len(f.Shape)-1] {
		m *= d
	}
	var k, groups int64
	switch f.Pattern {
	case "add_layernorm", "rmsnorm_pyops":
		k = map[string]int64{"add_layernorm": 2, "rmsnorm_pyops": 1}[f.Pattern]
		groups = normGroups(m)
	case "gelu_pyops", "dropout_add":
		es := caseElemSize(f.Dtype)
		if !f.hasBias() || es == 0 {
			return 0
		}
		return tilePartials(m, n, es, 512)
	default:
		return 0
	}
	return groups * k * n * 4
}

// tilePartials is the fp32 partial sums of a bias gradient summed in a pointwise backward's
// [M, N] tiles: the kernels' tiles (the shared _tiles: 4 KiB of the widest operand, es bytes
// an element, a tile; the widest power-of-two column block whose padding wastes at most 1/16
// of a row, at least 128 columns), about programs programs over them (the kernel's
// DB_PROGRAMS: 512 for gelu_pyops, linear_gelu and dropout_add), each over whole
// row tiles, one row of N per program's row group.
func tilePartials(m, n, es, programs int64) int64 {
	tile := 4096 / es
	bn := min(tile, nextPow2(n))
	narrowest := min(bn, 128)
	bestPad, bestBn := int64(-1), bn
	for ; bn >= narrowest; bn /= 2 {
		pad := (n + bn - 1) / bn * bn
		if bestPad < 0 || pad < bestPad {
			bestPad, bestBn = pad, bn
		}
		if pad*16 <= n*17 {
			break
		}
	}
	bm := max(1, tile/bestBn)
	per := max(1, programs/((n+bestBn-1)/bestBn)) // row groups a column block
	rows := (m + per - 1) / per
	rows = (rows + bm - 1) / bm * bm
	return (m + rows - 1) / rows * n * 4
}

// normGroups is how many programs a norm's one-pass backward runs over m rows: about 512, of
// at least 4 rows each (add_layernorm's, rmsnorm's and layernorm_linear's BWD_GROUPS and
// BWD_MIN_ROWS).
func normGroups(m int64) int64 {
	rows := max(4, (m+511)/512)
	return (m + rows - 1) / rows
}

func nextPow2(n int64) int64 {
	p := int64(1)
	for p < n {
		p *= 2
	}
	return p
}
