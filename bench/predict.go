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

// forwardCase is forward case f as the derivations in patterns read it (the folder's name
// says whether an attention case is causal: the result holds no params).
func forwardCase(f *Case) patterns.ForwardCase {
	fc := patterns.ForwardCase{Pattern: f.Pattern, Case: patterns.Case{Dtype: f.Dtype, Shapes: f.Shapes},
		Shape: f.Shape, Bytes: f.Bytes, GemmUs: f.GemmOnlyUs}
	if strings.Contains(f.Name, "-causal-") {
		fc.Params.MaskKind = "causal"
	}
	return fc
}

// backwardShape is what the cost model reads of the fused backward of forward case f, for
// the backward or full case c (timed back to back when warm): patterns.BackwardShapeOf, with
// the backward's own bytes the harness measured (c.Bytes, less the forward's for a full
// case). ok is false for a forward that failed its check and as BackwardShapeOf says.
func backwardShape(f, c *Case, warm bool) (patterns.BackwardShape, bool) {
	if !f.Correct {
		return patterns.BackwardShape{Pattern: f.Pattern, Warm: warm}, false
	}
	own := c.Bytes
	if c.Mode == "full" {
		own -= f.Bytes
	}
	return patterns.BackwardShapeOf(forwardCase(f), own, warm)
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
func gemmDims(c *Case) (m, k, n, es int64, ok bool) { return forwardCase(c).GEMMDims() }

// writeBytes is what a memory-bound case's kernel writes: its outputs in the case's dtype
// (Pattern.Outputs: add_layernorm writes the sum and y); 0 when the shape or dtype is unknown.
func writeBytes(c *Case) int64 { return forwardCase(c).WriteBytes() }

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
