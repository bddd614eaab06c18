package patterns

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/fuseadvise/fuseadvise/trace"
)

// OptimizerFinding is an optimizer step whose updates run unfused: a Python loop of
// per-parameter ops (one small kernel per tensor and op), or torch.optim's foreach
// implementation, the default on CUDA (a multi-tensor kernel per update op: AdamW's step
// reads and writes each parameter's state about ten times). torch.optim's fused=True
// (Adam, AdamW) reads each parameter, its gradient and its two moments once and writes the
// parameter and the moments once, in one kernel per group of tensors.
//
// For Adam and AdamW the finding carries the fused step's estimated time (estimate) and,
// where the trace records them, the parameters one step updates (the shapes recorded on the
// step's addcdiv update, the one op that takes the parameters in both implementations; with
// an execution trace, where Kineto left a long list out, their element counts) and their
// element type (the update kernels' template type, or the op's input type).
type OptimizerFinding struct {
	Optimizer    string  `json:"optimizer"`                // the class, from the Optimizer.step#<Class>.step annotation
	Impl         string  `json:"impl"`                     // "foreach" or "per-tensor loop"
	Steps        int     `json:"steps"`                    // optimizer steps in the trace
	PerTensorOps int     `json:"per_tensor_ops,omitempty"` // per-tensor arithmetic ops per step (a loop)
	Kernels      int     `json:"kernels"`                  // kernels the steps launched, all steps
	GPUTimeUs    float64 `json:"gpu_time_us"`              // their GPU time, all steps
	// The parameters one step updates (Adam, AdamW): tensors, elements, element type and
	// their shapes with how many tensors have each.
	Tensors     int          `json:"tensors,omitempty"`
	Params      int64        `json:"params,omitempty"`
	DType       DType        `json:"dtype,omitempty"`
	ParamShapes []ShapeCount `json:"param_shapes,omitempty"`
	// EstFusedUs is the fused step's estimated GPU time over all steps (estimate), EstSavingUs
	// the traced time less it (0 when the fused step is not estimated faster); both 0
	// without an estimate, and Why says why.
	EstFusedUs  float64 `json:"est_fused_us,omitempty"`
	EstSavingUs float64 `json:"est_saving_us,omitempty"`
	Advice      string  `json:"advice"`                  // what to change
	Why         string  `json:"not_estimated,omitempty"` // why the fused step has no estimate
	Rank        int     `json:"rank,omitempty"`          // the rank, when several traces were merged
}

// ShapeCount is a parameter shape and how many tensors of one optimizer step have it.
type ShapeCount struct {
	Dims  []int64 `json:"dims"`
	Count int     `json:"count"`
}

// minPerTensorOps is how many per-tensor ops per step make a loop worth
// reporting (a model has at least tens of parameter tensors).
const minPerTensorOps = 32

// perTensorOps are the in-place arithmetic ops optimizers apply per parameter.
var perTensorOps = map[string]bool{
	"add_": true, "mul_": true, "addcdiv_": true, "addcmul_": true, "lerp_": true, "div_": true,
	"sqrt": true, "div": true, "maximum": true, "sub_": true, "copy_": true, "clamp_": true,
}

// fusedAdam are the optimizer classes whose fused=True step the cost model estimates.
var fusedAdam = map[string]bool{"Adam": true, "AdamW": true}

// hasFused are the torch.optim classes with a fused=True form on CUDA (torch 2.4 and later):
// a foreach step of another class is not reported.
var hasFused = map[string]bool{"Adam": true, "AdamW": true, "SGD": true}

// functorType is the element type in a multi-tensor kernel's name
// ("...PointwiseOpScalarListFunctor<float, 4, 3, 0>..." -> "float").
var functorType = regexp.MustCompile(`Functor<(float|double|c10::BFloat16|c10::Half)\b`)

// optimizerSteps finds the optimizer steps whose updates are not fused: per-tensor loops
// (at least minPerTensorOps per step) and foreach steps. et (nil without an execution trace)
// joins t's ops to execution-trace nodes, which record the parameter lists Kineto leaves out.
func optimizerSteps(t *trace.Trace, et map[int32]*trace.ETNode) []OptimizerFinding {
	by := map[string]*optAcc{}
	var order []string
	for i := range t.Ops {
		op := &t.Ops[i]
		class, ok := optimizerClass(op.Name) // user_annotation, or cpu_op in PyTorch 1.x
		if !ok {
			continue
		}
		a := by[class]
		if a == nil {
			a = &optAcc{}
			by[class] = a
			order = append(order, class)
		}
		a.steps++
		if strings.Contains(class, "Fused") { // apex's FusedAdam and the like
			a.fused = true
		}
		ns, k := subtreeActs(t, int32(i))
		a.ns += ns
		a.kernels += k
		var step [][]int64
		var walk func(id int32)
		walk = func(id int32) {
			c := &t.Ops[id]
			b := baseName(c.Name)
			switch {
			case strings.HasPrefix(b, "_fused_") || strings.Contains(b, "multi_tensor"):
				a.fused = true
				return
			case strings.HasPrefix(b, "_foreach_"):
				a.foreach = true
				switch b {
				case "_foreach_addcdiv_":
					ns, _ := subtreeActs(t, id)
					a.updateNs += ns
					switch en := et[id]; {
					case len(c.Inputs) > 0 && c.Inputs[0].Type == "TensorList" && len(c.Inputs[0].List) > 0:
						step = append(step, c.Inputs[0].List...)
						a.noteType(kernelsType(t, id))
					case en != nil && len(en.Inputs) > 0 && len(en.Inputs[0].List) > 0:
						// a long list, whose shapes Kineto does not record: the execution
						// trace's element counts and types
						for _, v := range en.Inputs[0].List {
							step = append(step, []int64{v.Numel})
							a.noteType(parseDType(v.Elem))
						}
					}
				case "_foreach_maximum_":
					a.amsgrad = true
				}
				return
			case c.Kind == trace.KindCPUOp && perTensorOps[b]:
				a.ops++
				switch b {
				case "addcdiv_":
					ns, _ := subtreeActs(t, id)
					a.updateNs += ns
					if len(c.Inputs) > 0 && c.Inputs[0].Dims != nil {
						step = append(step, c.Inputs[0].Dims)
						a.noteType(parseDType(c.Inputs[0].Type))
					}
				case "maximum":
					a.amsgrad = true
				}
				return
			}
			for _, k := range c.Children {
				walk(k)
			}
		}
		for _, c := range op.Children {
			walk(c)
		}
		a.shapes = append(a.shapes, step)
	}
	var out []OptimizerFinding
	for _, class := range order {
		a := by[class]
		loop := !a.foreach && a.steps > 0 && a.ops/a.steps >= minPerTensorOps
		if a.fused || a.steps == 0 || !a.foreach && !loop || a.foreach && !hasFused[class] {
			continue // a foreach step of a class with no fused form (a custom optimizer) is as good as it gets here
		}
		f := OptimizerFinding{Optimizer: class, Steps: a.steps, Kernels: a.kernels, GPUTimeUs: round2(us(a.ns)), Impl: "foreach"}
		if loop {
			f.Impl, f.PerTensorOps = "per-tensor loop", a.ops/a.steps
		}
		f.estimate(a)
		out = append(out, f)
	}
	return out
}

// optimizerClass is the optimizer class an optimizer step's annotation names
// ("Optimizer.step#AdamW.step" -> "AdamW"); ok is false for any other op.
func optimizerClass(name string) (class string, ok bool) {
	rest, ok := strings.CutPrefix(name, "Optimizer.step#")
	return strings.TrimSuffix(rest, ".step"), ok
}

// kernelsType is the element type of the multi-tensor kernels op launched (their functor's
// template type); unknown when they disagree or none names one.
func kernelsType(t *trace.Trace, op int32) DType {
	d := DTypeUnknown
	var walk func(id int32) bool
	walk = func(id int32) bool {
		for _, a := range t.Ops[id].Acts {
			sm := functorType.FindStringSubmatch(t.Acts[a].Name)
			if sm == nil {
				continue
			}
			got := parseDType(sm[1])
			if d != DTypeUnknown && got != d {
				return false
			}
			d = got
		}
		for _, c := range t.Ops[id].Children {
			if !walk(c) {
				return false
			}
		}
		return true
	}
	if !walk(op) {
		return DTypeUnknown
	}
	return d
}

// optAcc is what optimizerSteps gathers of one optimizer class's steps.
type optAcc struct {
	steps, ops, kernels int
	ns                  int64
	fused, foreach      bool
	amsgrad             bool
	shapes              [][][]int64 // per step: the updated parameters' shapes
	dtype               DType
	mixed               bool  // updates of several element types
	updateNs            int64 // GPU time of the addcdiv updates, all steps
}

// noteType records one update's element type (unknown ones are left out: a step with no
// known type gets no estimate).
func (a *optAcc) noteType(d DType) {
	switch {
	case d == DTypeUnknown:
	case a.dtype == DTypeUnknown:
		a.dtype = d
	case a.dtype != d:
		a.mixed = true
	}
}

// estimate sets f's parameters (where the trace records them), the fused step's estimate
// and the advice from what the steps recorded (a).
//
// The fused step's time comes from the trace itself: the addcdiv update moves four element
// lists of every parameter (it reads the parameter, the first moment and the denominator
// and writes the parameter) in the same multi-tensor kernels the fused step runs, so the
// fused step, which moves seven lists (reads of the parameter, gradient and both moments,
// writes of the parameter and both moments; nine with amsgrad's running maximum), takes
// fusedAdamLists / 4 of its time, at the pace measured (fusedAdamPace). This needs neither the shapes nor the element type (a
// Kineto trace records the shapes of short tensor lists only) and keeps the device's real
// rate at these tensors' sizes; bench/experiments/probe_optimizer.py measures the rule
// against fused=True on the H200 (docs/cost-model.md, "The optimizer step").
func (f *OptimizerFinding) estimate(a *optAcc) {
	kernels := max(f.Kernels/max(f.Steps, 1), 1)
	perStep := f.GPUTimeUs / float64(f.Steps)
	now := fmt.Sprintf("%s (%s) runs %d kernels a step (%s µs)", f.Optimizer, f.Impl, kernels, fmtFloat(perStep))
	if f.Impl == "per-tensor loop" {
		now = fmt.Sprintf("%s runs %d per-tensor ops a step (%d kernels, %s µs)", f.Optimizer, f.PerTensorOps, kernels, fmtFloat(perStep))
	}
	if !fusedAdam[f.Optimizer] {
		f.Why = "the fused step is estimated for Adam and AdamW only"
		if f.Impl == "per-tensor loop" {
			f.Advice = now + ": construct it with foreach=True (or fused=True where available) to update all parameters in a few kernels"
		} else {
			f.Advice = now + ": construct it with fused=True (torch.optim." + f.Optimizer + "(..., fused=True), PyTorch 2.4 and later) to update each parameter in one pass"
		}
		return
	}
	f.Advice = now + ": construct it with fused=True (torch.optim." + f.Optimizer + "(..., fused=True)), one kernel that reads each parameter, its gradient and moments once and writes them once"
	f.params(a)
	if a.updateNs <= 0 {
		f.Why = "its addcdiv update launched no GPU work in the trace"
		return
	}
	lists := fusedAdamLists
	if a.amsgrad {
		lists = fusedAdamListsAMSGrad
	}
	f.EstFusedUs = round1(us(a.updateNs) * float64(lists) / addcdivLists * fusedAdamPace)
	f.EstSavingUs = round1(max(f.GPUTimeUs-f.EstFusedUs, 0))
	f.Advice += fmt.Sprintf(": estimated %s µs a step", fmtFloat(f.EstFusedUs/float64(f.Steps)))
	if f.Params > 0 {
		f.Advice += fmt.Sprintf(" for its %d tensors of %s %s parameters", f.Tensors, FormatCount(f.Params), f.DType)
	}
}

// The element lists an Adam step moves: its foreach addcdiv update, and the fused step
// without and with amsgrad (OptimizerFinding.estimate); fusedAdamPace is the fused kernel's
// time per list over the addcdiv kernels': measured on the H200 for the parameters of the
// sixteen training traces (bench/experiments/probe_optimizer.py; docs/cost-model.md, "The
// optimizer step"), the median over the eight whose step the GPU, not the host, paces
// (1.06-1.21).
const (
	addcdivLists          = 4
	fusedAdamLists        = 7
	fusedAdamListsAMSGrad = 9
	fusedAdamPace         = 1.1
)

// params sets the parameters one step updates from the shapes its updates recorded (the
// same in every step) and their element type; nothing when the trace does not record them.
func (f *OptimizerFinding) params(a *optAcc) {
	shapes := a.shapes[0]
	for _, s := range a.shapes[1:] {
		if !slices.EqualFunc(s, shapes, slices.Equal) {
			return
		}
	}
	if len(shapes) == 0 || a.mixed || !a.dtype.IsFloat() {
		return
	}
	f.DType = a.dtype
	f.Tensors = len(shapes)
	f.Params, f.ParamShapes = countShapes(shapes)
}

// countShapes is the elements of tensors of the given shapes and each shape with how many
// tensors have it, most elements first.
func countShapes(shapes [][]int64) (elems int64, out []ShapeCount) {
	at := map[string]int{} // index in out by shape
	for _, s := range shapes {
		elems += numel(s)
		k := fmt.Sprint(s)
		if i, ok := at[k]; ok {
			out[i].Count++
			continue
		}
		at[k] = len(out)
		out = append(out, ShapeCount{Dims: slices.Clone(s), Count: 1})
	}
	slices.SortFunc(out, func(x, y ShapeCount) int {
		return cmp.Or(cmp.Compare(numel(y.Dims)*int64(y.Count), numel(x.Dims)*int64(x.Count)), slices.Compare(x.Dims, y.Dims))
	})
	return elems, out
}

// fmtFloat is v with one decimal.
func fmtFloat(v float64) string { return fmt.Sprintf("%.1f", v) }

// FormatCount is n in millions (or thousands) of elements: "134.3M", "52.1K", "96".
func FormatCount(n int64) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
