package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/program"
)

// Where a case's predicted time came from.
const (
	FromAnalysis  = "analysis"   // the analyzer's estimate for the traced chain (manifest.json)
	FromCostModel = "cost model" // the same cost model applied to the case's shapes after the run
)

// Predict fills the predicted fused time of every timed case that has none (folders not
// generated from a trace, such as the benchmark anchors) with the analyzer's cost model for
// r's GPU: the case's fewest bytes over the model's bandwidth plus its kernel overhead, or,
// for GEMM patterns, the measured GEMM alone plus what the model says fusion adds, as an
// analysis does with the GEMM time it reads from a trace.
//
// The model estimates kernel durations, as a trace records them; a case timed back to back
// in one CUDA graph (do_bench_cudagraph, the microsecond-scale cases) also pays the graph's
// gap between kernels, so its prediction gets cm.GraphGapUs per fused launch
// (PredictedGapUs says how much), once.
//
// A backward case gets the cost model's fused backward (CostModel.BackwardUs, what
// backwardShape reads of it and of its forward case), a full case the forward case's
// prediction (without its gaps) and then that backward, with the gaps of the case's own
// timing: GraphGapUs per launch of both when timed back to back.
func Predict(r *Result, cm patterns.CostModel) {
	gap := cm.GraphGapUs
	if gap == 0 {
		gap = patterns.DefaultCostModel().GraphGapUs
	}
	forward := map[string]*Case{} // by name: the forward case the training modes start from
	for i := range r.Cases {
		c := &r.Cases[i]
		if c.Mode != "" && c.Mode != "forward" {
			continue
		}
		forward[c.Name] = c
		predict(c, r.GPU, cm)
		if c.PredictedUs > 0 && c.PredictedGapUs == 0 && c.Timing["fused"] == "cudagraph" {
			c.PredictedGapUs = gap * float64(max(c.Launches, 1))
			c.PredictedUs += c.PredictedGapUs
		}
	}
	for i := range r.Cases {
		c := &r.Cases[i]
		f := forward[c.Name]
		if c.Mode != "backward" && c.Mode != "full" || f == nil || c.PredictedUs > 0 || !c.Correct {
			continue
		}
		warm := c.Timing["fused"] == "cudagraph"
		s, ok := backwardShape(f, c, warm)
		if !ok {
			continue
		}
		us, launches, ok := cm.BackwardUs(r.GPU, s)
		if !ok {
			continue
		}
		if c.Mode == "full" { // the forward as predicted for the forward case, then the backward
			if f.PredictedUs <= 0 {
				continue
			}
			us += f.PredictedUs - f.PredictedGapUs
			launches += max(f.Launches, 1)
		}
		c.PredictedGapUs = 0
		if warm {
			c.PredictedGapUs = gap * float64(launches)
			us += c.PredictedGapUs
		}
		c.PredictedUs, c.PredictedFrom = us, FromCostModel
	}
}

// bwdGradients is how many gradients of the case's shape a memory-bound backward writes, in
// the case's dtype (x's), which L2 may absorb: swiglu's two (gate's and up's), one for the
// others (the input's; the residual's is the same tensor where its dtype is x's).
var bwdGradients = map[string]int64{"swiglu": 2}

// backwardShape is what the cost model reads of the fused backward of forward case f, for
// the backward or full case c (timed back to back when warm):
//
//   - memory-bound: the backward's own bytes (the harness's bwd_nbytes: c.Bytes, less the
//     forward's for a full case), else an estimate from the forward's (it reads the
//     forward's reads again and the output gradient, and writes a gradient per input read);
//     a weight's or bias' gradient from per-program partial sums (partialBytes), bias_gelu's
//     from ATen's row sum over the gradient it wrote;
//   - attention: the five products of FlashAttention-2's backward (S, dV, dP, dQ, dK: 2.5x the
//     forward's flops over the kept pairs, the head dim padded to the tiles' power of two),
//     its own bytes, else twice the forward's;
//   - GEMM with an epilogue (linear_gelu): the forward's GEMM alone as measured (gemm_only),
//     the GELU derivative's pass over the GEMM output (dy and the pre-activation read, the
//     gradient written) and, with a bias, the gradient read again for its row sum.
//
// ok is false for a forward-only pattern, a forward without bytes (or GEMM time), or shapes
// the model cannot read.
func backwardShape(f, c *Case, warm bool) (patterns.BackwardShape, bool) {
	s := patterns.BackwardShape{Pattern: f.Pattern, Warm: warm}
	p, ok := patterns.Lookup(f.Pattern)
	if !ok || !f.Correct || f.Bytes <= 0 {
		return s, false
	}
	own := c.Bytes
	if c.Mode == "full" {
		own -= f.Bytes
	}
	switch p.Kind {
	case patterns.KindGEMM:
		m, _, n, es, ok := gemmDims(f)
		if p.GEMM != patterns.GEMMEpilogue || f.GemmOnlyUs <= 0 || !ok {
			return s, false
		}
		s.GemmUs, s.PassBytes = f.GemmOnlyUs, 3*m*n*es
		if len(f.Shapes) > 2 { // x, the weight and a bias
			s.SumBytes = m * n * es
		}
		return s, true
	case patterns.KindAttention:
		ac := patterns.Case{Dtype: f.Dtype, Shapes: f.Shapes}
		if strings.Contains(f.Name, "-causal-") {
			ac.Params.MaskKind = "causal"
		}
		flops := patterns.AttentionFlops(ac) // 0 unless q, k and v are [B, H, S, D]
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
		s.Bytes, s.WriteBytes = own, min(k*tensorBytes(f), own)
	} else {
		w := writeBytes(f)
		read := f.Bytes - w
		if w <= 0 || read <= 0 {
			return s, false
		}
		s.Bytes, s.WriteBytes = f.Bytes+read, read
	}
	if f.Pattern == "bias_gelu" && hasBias(f) {
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
// dropout_add's, with a bias, about 2048 programs over the [M, N] tiles (4 KiB of the widest
// operand a tile), one row per program's row group. 0: no such gradient.
func partialBytes(f *Case) int64 {
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
		rows := max(4, (m+511)/512)
		groups = (m + rows - 1) / rows
	case "gelu_pyops", "dropout_add":
		es := map[string]int64{"fp32": 4, "fp16": 2, "bf16": 2}[f.Dtype]
		if !hasBias(f) || es == 0 {
			return 0
		}
		k = 1
		tiles := (n + min(4096/es, nextPow2(n)) - 1) / min(4096/es, nextPow2(n))
		groups = min(m, max(1, 2048/tiles))
	default:
		return 0
	}
	return groups * k * n * 4
}

// hasBias reports whether a pointwise case has a bias: a second input, one-dimensional, of
// the last dim's size.
func hasBias(f *Case) bool {
	return len(f.Shapes) > 1 && len(f.Shapes[1]) == 1 && len(f.Shape) > 0 && f.Shapes[1][0] == f.Shape[len(f.Shape)-1]
}

func nextPow2(n int64) int64 {
	p := int64(1)
	for p < n {
		p *= 2
	}
	return p
}

// predict fills c's prediction before any launch gap: the analysis's, else the cost model's.
func predict(c *Case, gpu string, cm patterns.CostModel) {
	if c.PredictedUs > 0 {
		if c.PredictedFrom == "" {
			c.PredictedFrom = FromAnalysis
		}
		return
	}
	if !c.Correct || c.Bytes <= 0 {
		return
	}
	s := patterns.Shape{Pattern: c.Pattern, Bytes: c.Bytes, WriteBytes: writeBytes(c),
		Warm: c.Timing["fused"] == "cudagraph"}
	if p, ok := patterns.Lookup(c.Pattern); ok && p.Kind == patterns.KindGEMM {
		m, k, n, es, ok := gemmDims(c)
		if !ok {
			return
		}
		s.GemmUs, s.GemmElemSize = c.GemmOnlyUs, es
		switch p.GEMM {
		case patterns.GEMMStats:
			s.ExtraBytes = m*k*es + 8*m // the stats pass: read x, write mean and rstd
		case patterns.GEMMEpilogue:
			s.ExtraBytes = m * n * es // the epilogue's pass over the GEMM output
		}
	}
	if p, ok := patterns.Lookup(c.Pattern); ok && p.Kind == patterns.KindAttention {
		// the GEMMs' arithmetic; the result holds no params, the folder's name the mask kind
		// (codegen.DirName): a causal kernel computes only the pairs it keeps
		ac := patterns.Case{Dtype: c.Dtype, Shapes: c.Shapes}
		if strings.Contains(c.Name, "-causal-") {
			ac.Params.MaskKind = "causal"
		}
		s.Flops = patterns.AttentionFlops(ac)
	}
	if us, ok := cm.FusedUs(gpu, s); ok {
		c.PredictedUs, c.PredictedFrom = us, FromCostModel
	}
}

// gemmDims reads M, K, N and the element size of a GEMM case: Shapes[0] is x [..., K] and
// Shapes[1] the weight [N, K].
func gemmDims(c *Case) (m, k, n, es int64, ok bool) {
	if len(c.Shapes) < 2 || len(c.Shapes[0]) == 0 || len(c.Shapes[1]) != 2 {
		return 0, 0, 0, 0, false
	}
	x := c.Shapes[0]
	m = 1
	for _, d := range x[:len(x)-1] {
		m *= d
	}
	k, n = x[len(x)-1], c.Shapes[1][0]
	es = map[string]int64{"fp32": 4, "fp16": 2, "bf16": 2}[c.Dtype]
	return m, k, n, es, es > 0
}

// writeBytes is what a memory-bound case's kernel writes: its outputs in the case's dtype
// (Pattern.Outputs: add_layernorm writes the sum and y); 0 when the shape or dtype is unknown.
func writeBytes(c *Case) int64 {
	n := tensorBytes(c)
	if p, ok := patterns.Lookup(c.Pattern); ok {
		n *= int64(p.OutputCount())
	}
	return n
}

// tensorBytes is one tensor of the case's shape in its dtype; 0 when either is unknown.
func tensorBytes(c *Case) int64 {
	es := map[string]int64{"fp32": 4, "fp16": 2, "bf16": 2}[c.Dtype]
	if len(c.Shape) == 0 || es == 0 {
		return 0
	}
	n := es
	for _, d := range c.Shape {
		n *= d
	}
	return n
}

// Repredict replaces the predictions of r's cases with those of the current code: each
// case's folder among dirs (matched by folder name) gives its manifest's est_fused_us, as
// the harness reads it during a run, a generic folder without one its program's fused
// kernel (CostModel.GenericFusedUs), and Predict fills the rest. For results measured before
// a cost-model change; no GPU needed. A case with no folder among dirs is an error.
func Repredict(r *Result, dirs []string, cm patterns.CostModel) error {
	est := map[string]float64{}
	progs := map[string]*program.Program{}
	for _, d := range dirs {
		var m struct {
			EstFusedUs float64          `json:"est_fused_us"`
			Program    *program.Program `json:"program"` // a generic folder's op program
		}
		b, err := os.ReadFile(filepath.Join(d, "manifest.json"))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("%s: %v", filepath.Join(d, "manifest.json"), err)
		}
		est[filepath.Base(d)] = m.EstFusedUs
		if m.Program != nil {
			if err := m.Program.Validate(); err != nil {
				return fmt.Errorf("%s: %v", filepath.Join(d, "manifest.json"), err)
			}
			progs[filepath.Base(d)] = m.Program
		}
	}
	for i := range r.Cases {
		c := &r.Cases[i]
		e, ok := est[c.Name]
		if !ok {
			return fmt.Errorf("bench: case %s has no folder among those given", c.Name)
		}
		c.PredictedUs, c.PredictedFrom, c.PredictedGapUs = e, "", 0
		if c.Mode != "" && c.Mode != "forward" { // the manifest's estimate is the forward's
			c.PredictedUs = 0
			continue
		}
		// a generic folder not generated from a trace: its program's fused kernel, a row
		// kernel where it ends in a reduction
		if p := progs[c.Name]; p != nil && e == 0 && c.Correct {
			us, ok := cm.GenericFusedUs(r.GPU, p, c.Timing["fused"] == "cudagraph")
			if p.GEMM != nil { // the epilogue-fused GEMM, from the GEMM alone as measured
				us, ok = cm.GenericGEMMFusedUs(r.GPU, p, c.GemmOnlyUs, c.Timing["fused"] == "cudagraph")
			}
			if ok {
				c.PredictedUs, c.PredictedFrom = us, FromCostModel
			}
		}
	}
	Predict(r, cm)
	return nil
}
