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
		bwd, ok := predictBackward(f, r.GPU, cm)
		if !ok {
			continue
		}
		if c.Timing["fused"] == "cudagraph" {
			c.PredictedGapUs = gap
			bwd += gap
		}
		c.PredictedUs, c.PredictedFrom = bwd, FromCostModel
		if c.Mode == "full" { // the forward as predicted for the forward case, then the backward
			c.PredictedUs += f.PredictedUs
			c.PredictedGapUs += f.PredictedGapUs
		}
	}
}

// predictBackward is the cost model's fused backward for the forward case f (measured and
// predicted): what a fused backward cannot avoid moving or computing, by the pattern's kind.
//
//   - memory-bound: it reads the gradient of the outputs and what the forward read (the
//     saved inputs, recomputing what it needs), and writes a gradient per input: the
//     forward's bytes plus its reads again, written as much as the forward read;
//   - attention: FlashAttention-2's backward recomputes the scores and computes five
//     products of the forward's two sizes (S, dV, dP, dQ, dK): 2.5x the forward's flops,
//     reading q, k, v, o, dO and writing dq, dk, dv (twice the forward's bytes);
//   - GEMM with an epilogue (linear_gelu): two GEMMs of the forward's size (dX, dW), each
//     as long as the measured GEMM alone, and one pass reading the pre-activation and the
//     gradient and writing the gradient of the GEMM output.
//
// Patterns without a backward have no backward cases; a forward without bytes or a GEMM
// time gives no prediction.
func predictBackward(f *Case, gpu string, cm patterns.CostModel) (float64, bool) {
	p, ok := patterns.Lookup(f.Pattern)
	if !ok || !f.Correct || f.Bytes <= 0 {
		return 0, false
	}
	warm := f.Timing["fused"] == "cudagraph"
	switch p.Kind {
	case patterns.KindGEMM:
		if p.GEMM != patterns.GEMMEpilogue || f.GemmOnlyUs <= 0 {
			return 0, false
		}
		m, _, n, es, ok := gemmDims(f)
		if !ok {
			return 0, false
		}
		return cm.FusedUs(gpu, patterns.Shape{Pattern: f.Pattern, GemmUs: 2 * f.GemmOnlyUs, GemmElemSize: es,
			ExtraBytes: 3 * m * n * es, Warm: warm})
	case patterns.KindAttention:
		ac := patterns.Case{Dtype: f.Dtype, Shapes: f.Shapes}
		if strings.Contains(f.Name, "-causal-") {
			ac.Params.MaskKind = "causal"
		}
		return cm.FusedUs(gpu, patterns.Shape{Pattern: f.Pattern, Bytes: 2 * f.Bytes, WriteBytes: f.Bytes,
			Flops: patterns.AttentionFlops(ac) * 5 / 2, Warm: warm})
	}
	w := writeBytes(f)
	read := f.Bytes - w
	if w <= 0 || read <= 0 {
		return 0, false
	}
	return cm.FusedUs(gpu, patterns.Shape{Pattern: f.Pattern, Bytes: f.Bytes + read, WriteBytes: read, Warm: warm})
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
	es := map[string]int64{"fp32": 4, "fp16": 2, "bf16": 2}[c.Dtype]
	if len(c.Shape) == 0 || es == 0 {
		return 0
	}
	n := es
	for _, d := range c.Shape {
		n *= d
	}
	if p, ok := patterns.Lookup(c.Pattern); ok {
		n *= int64(p.OutputCount())
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
