package patterns

import (
	"fmt"
	"strings"

	"github.com/fuseadvise/fuseadvise/trace"
)

// OptimizerFinding is an optimizer step that runs one small kernel per
// parameter tensor (a Python loop over tensors) where foreach or fused
// implementations run a few kernels for all of them.
type OptimizerFinding struct {
	Optimizer    string  `json:"optimizer"`      // the class, from the Optimizer.step#<Class>.step annotation
	Steps        int     `json:"steps"`          // optimizer steps in the trace
	PerTensorOps int     `json:"per_tensor_ops"` // per-tensor arithmetic ops per step
	Kernels      int     `json:"kernels"`        // kernels those ops launched, all steps
	GPUTimeUs    float64 `json:"gpu_time_us"`    // their GPU time, all steps
	Advice       string  `json:"advice"`         // what to change
	Rank         int     `json:"rank,omitempty"` // the rank, when several traces were merged
}

// minPerTensorOps is how many per-tensor ops per step make a loop worth
// reporting (a model has at least tens of parameter tensors).
const minPerTensorOps = 32

// perTensorOps are the in-place arithmetic ops optimizers apply per parameter.
var perTensorOps = map[string]bool{
	"add_": true, "mul_": true, "addcdiv_": true, "addcmul_": true, "lerp_": true, "div_": true,
	"sqrt": true, "div": true, "maximum": true, "sub_": true, "copy_": true, "clamp_": true,
}

// optimizerLoops finds optimizer steps made of per-tensor ops and no
// _foreach_/_fused_ ones.
func optimizerLoops(t *trace.Trace) []OptimizerFinding {
	type acc struct {
		steps, ops, kernels int
		ns                  int64
		vectorized          bool
	}
	by := map[string]*acc{}
	var order []string
	for i := range t.Ops {
		op := &t.Ops[i]
		if !strings.HasPrefix(op.Name, "Optimizer.step#") { // user_annotation, or cpu_op in PyTorch 1.x
			continue
		}
		class := strings.TrimSuffix(strings.TrimPrefix(op.Name, "Optimizer.step#"), ".step")
		a := by[class]
		if a == nil {
			a = &acc{}
			by[class] = a
			order = append(order, class)
		}
		a.steps++
		if strings.Contains(class, "Fused") {
			a.vectorized = true
		}
		var walk func(id int32)
		walk = func(id int32) {
			c := &t.Ops[id]
			b := baseName(c.Name)
			switch {
			case strings.HasPrefix(b, "_foreach_") || strings.HasPrefix(b, "_fused_") || strings.Contains(b, "multi_tensor"):
				a.vectorized = true
				return
			case c.Kind == trace.KindCPUOp && perTensorOps[b]:
				a.ops++
				ns, k := subtreeActs(t, id)
				a.ns += ns
				a.kernels += k
				return
			}
			for _, k := range c.Children {
				walk(k)
			}
		}
		for _, c := range op.Children {
			walk(c)
		}
	}
	var out []OptimizerFinding
	for _, class := range order {
		a := by[class]
		if a.vectorized || a.steps == 0 || a.ops/a.steps < minPerTensorOps {
			continue
		}
		out = append(out, OptimizerFinding{
			Optimizer: class, Steps: a.steps, PerTensorOps: a.ops / a.steps, Kernels: a.kernels,
			GPUTimeUs: round2(float64(a.ns) / 1e3),
			Advice: fmt.Sprintf("%s runs %d per-tensor ops per step: construct it with foreach=True (or fused=True where available) to update all parameters in a few kernels",
				class, a.ops/a.steps),
		})
	}
	return out
}
