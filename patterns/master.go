package patterns

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fuseadvise/fuseadvise/trace"
)

// MasterWeights is a training step under autocast whose GEMMs cast their fp32 weights (and
// biases) to 16 bits in every forward (aten::to nested in aten::linear: a kernel a weight) and
// their gradients back to fp32 in every backward (ToCopyBackward0): 4 + 2 and 2 + 4 bytes a
// parameter, two launches a weight and a step, kept by torch.compile too (a cast feeding
// cuBLAS is a kernel of its own). The model can hold those weights in bf16 and the optimizer
// their fp32 masters (MasterAdamW, the master_adamw folder gen writes): the forward casts
// nothing, the gradient stays bf16, and one kernel reads it and writes the master's bf16 copy
// as it updates the master, the bytes of a fused=True step. What the model computes does not
// change: the forward reads the master's round-to-nearest copy, autocast's cast of the same
// weight; the gradient is the same bf16 GEMM output.
//
// Offered (EstSavingUs, the casts' GPU time, forward and backward) where the casts are bf16,
// their gradients are cast back in the trace (a training step), and the optimizer steps are
// Adam or AdamW; Why says why not otherwise.
type MasterWeights struct {
	DType     DType  `json:"dtype"`               // the GEMMs' compute type, bf16 where offered
	Optimizer string `json:"optimizer,omitempty"` // the optimizer class stepped in the trace
	Steps     int    `json:"steps"`               // optimizer steps (else the trace's steps, at least 1)
	// Tensors and Params: the weights and biases cast in one forward (the first step's casts,
	// over the steps) and their elements.
	Tensors    int          `json:"tensors"`
	Params     int64        `json:"params"`
	Shapes     []ShapeCount `json:"shapes,omitempty"`
	ForwardUs  float64      `json:"forward_us"`  // GPU time of the forward casts, all steps
	BackwardUs float64      `json:"backward_us"` // of the gradients' casts back (ToCopyBackward0)
	Kernels    int          `json:"kernels"`     // the casts' kernels, all steps
	// Ops are the ops the casts are on the host (each forward cast's outermost aten::to, each
	// backward cast's engine node), all steps: what a host-bound step no longer runs, with
	// the Kernels' launches. Their time is not estimated: under a profiler recording shapes
	// and an execution trace an op's host time grows several-fold.
	Ops         int     `json:"ops"`
	EstSavingUs float64 `json:"est_saving_us,omitempty"`
	Advice      string  `json:"advice"`
	Why         string  `json:"not_offered,omitempty"`
	Rank        int     `json:"rank,omitempty"`
}

// masterOptimizers are the optimizer classes MasterAdamW replaces (decoupled=False: Adam).
var masterOptimizers = map[string]bool{"Adam": true, "AdamW": true}

// tiedWeights tells the GEMM weights that may be tied to an embedding's weight (GPT-2's output
// projection), which an embedding reads in fp32 under autocast, so that their casts stay
// (gemm_parameters leaves such a weight fp32). With an execution trace, a weight is tied when
// an embedding reads its storage. From Kineto alone, when an embedding reads a weight of its
// dims, unless the backward accumulates more parameters of those dims than the embeddings
// were called (torch::autograd::AccumulateGrad, one a parameter a backward, records the
// parameter's dims): Llama's untied lm_head is a second [vocab, hidden] parameter beside its
// one embedding call, GPT-2's tied one is not. An embedding called twice a step on one weight
// (an encoder-decoder's shared embedding) reads as tied: its casts stay, never wrongly go.
type tiedWeights struct {
	dims     map[string]bool         // the dims of the embeddings' weights that may be tied
	storages map[int64]bool          // their storages, from the execution trace
	join     map[int32]*trace.ETNode // t's ops to execution-trace nodes; nil without one
}

// accumulateGrad is the autograd node that adds a parameter's gradient into its .grad.
const accumulateGrad = "torch::autograd::AccumulateGrad"

func newTiedWeights(t *trace.Trace, join map[int32]*trace.ETNode) *tiedWeights {
	w := &tiedWeights{dims: map[string]bool{}, storages: map[int64]bool{}, join: join}
	calls, params := map[string]int{}, map[string]int{}
	for i := range t.Ops {
		o := &t.Ops[i]
		switch {
		case o.Name == accumulateGrad && len(o.Inputs) == 1 && o.Inputs[0].Dims != nil:
			params[fmt.Sprint(o.Inputs[0].Dims)]++
		case baseName(o.Name) != "embedding":
		default:
			if len(o.Inputs) > 0 && o.Inputs[0].Dims != nil {
				calls[fmt.Sprint(o.Inputs[0].Dims)]++
			}
			if n := join[int32(i)]; n != nil && len(n.Inputs) > 0 && n.Inputs[0].ID >= 0 {
				w.storages[n.Inputs[0].Storage] = true
			}
		}
	}
	for d, n := range calls {
		w.dims[d] = params[d] <= n
	}
	return w
}

// tied says whether the weight cast op c reads may be tied to an embedding's.
func (w *tiedWeights) tied(t *trace.Trace, c int32) bool {
	if n := w.join[c]; n != nil && len(n.Inputs) > 0 && n.Inputs[0].ID >= 0 && len(w.storages) > 0 {
		return w.storages[n.Inputs[0].Storage]
	}
	return len(t.Ops[c].Inputs) > 0 && w.dims[fmt.Sprint(t.Ops[c].Inputs[0].Dims)]
}

// weightCast says whether the kernels op launched are autocast's cast of a GEMM weight
// (forward) or of its gradient back (bwd), one that MasterAdamW removes: not of a weight
// tied to an embedding's.
func weightCast(t *trace.Trace, op int32, tied *tiedWeights) (ok, bwd bool) {
	ok, bwd, weight, fwd := autocastCastOf(t, op)
	if !ok || !weight {
		return false, false
	}
	if c := outermostCast(t, fwd); c >= 0 && tied.tied(t, c) {
		return false, false
	}
	return true, bwd
}

// masterWeights finds t's weight casts (weightCast, memory-bound kernels) and returns the
// finding, or nil when the trace has none; steps is the trace's step count.
func masterWeights(t *trace.Trace, steps int, tied *tiedWeights) *MasterWeights {
	type role struct{ ok, bwd bool }
	roles := map[int32]role{}
	var fwd, bwd int64
	kernels := 0
	for i := range t.Acts {
		if classify(t, &t.Acts[i]) != memoryBound {
			continue
		}
		op := t.Acts[i].Op
		r, seen := roles[op]
		if !seen {
			r.ok, r.bwd = weightCast(t, op, tied)
			roles[op] = r
		}
		if !r.ok {
			continue
		}
		kernels++
		if r.bwd {
			bwd += t.Acts[i].Dur
		} else {
			fwd += t.Acts[i].Dur
		}
	}
	if kernels == 0 {
		return nil
	}
	m := &MasterWeights{ForwardUs: round2(us(fwd)), BackwardUs: round2(us(bwd)), Kernels: kernels, DType: DTypeUnknown}
	// the casts on the host: each forward cast's outermost cast op (casts) and each backward
	// cast's engine node (nodes)
	casts, nodes := map[int32]bool{}, map[int32]bool{}
	for op, r := range roles {
		switch {
		case !r.ok:
		case r.bwd:
			if n := engineNode(t, op); n >= 0 {
				nodes[n] = true
			}
		default:
			if c := outermostCast(t, op); c >= 0 {
				casts[c] = true
			}
		}
	}
	m.Ops = len(casts) + len(nodes)
	// the forward casts' operands' shapes and the type they cast to
	var shapes [][]int64
	types := map[DType]bool{}
	for _, c := range slices.Sorted(maps.Keys(casts)) {
		o := &t.Ops[c]
		if len(o.Inputs) > 0 && o.Inputs[0].Dims != nil {
			shapes = append(shapes, o.Inputs[0].Dims)
		}
		if o.Name == "aten::to" && len(o.Inputs) > 1 {
			types[scalarTypeCode(o.Inputs[1].Concrete)] = true
		}
	}
	if len(types) == 1 {
		for d := range types {
			m.DType = d
		}
	}
	optSteps := map[string]int{}
	for i := range t.Ops {
		if class, ok := optimizerClass(t.Ops[i].Name); ok {
			optSteps[class]++
		}
	}
	classes := slices.Sorted(maps.Keys(optSteps))
	m.Steps = max(steps, 1)
	if len(classes) == 1 {
		m.Optimizer = classes[0]
		m.Steps = optSteps[m.Optimizer]
	}
	// the weights of one forward: the casts over the steps (autocast casts a weight once a
	// forward), their shapes counted as the first step's
	per := len(shapes) / m.Steps
	if per > 0 && len(shapes)%m.Steps == 0 {
		m.Tensors = per
		m.Params, m.Shapes = countShapes(shapes[:per])
	}
	m.advise(classes)
	return m
}

// engineNode is the autograd engine's node ("autograd::engine::evaluate_function: ...") op
// runs in; -1 for none.
func engineNode(t *trace.Trace, op int32) int32 {
	for id := op; id >= 0 && int(id) < len(t.Ops); id = t.Ops[id].Parent {
		if strings.HasPrefix(t.Ops[id].Name, evaluateFunction) {
			return id
		}
	}
	return -1
}

// outermostCast is the outermost cast op (castOps) directly in a GEMM that op is or is nested
// in; -1 for none.
func outermostCast(t *trace.Trace, op int32) int32 {
	if op < 0 {
		return -1
	}
	for id := op; id >= 0 && int(id) < len(t.Ops); id = t.Ops[id].Parent {
		p := t.Ops[id].Parent
		if castOps[t.Ops[id].Name] && p >= 0 && computeOp(t.Ops[p].Name) {
			return id
		}
	}
	return -1
}

// advise sets Advice, and EstSavingUs where the finding is offered (else Why).
func (m *MasterWeights) advise(classes []string) {
	perStep := (m.ForwardUs + m.BackwardUs) / float64(m.Steps)
	what := fmt.Sprintf("autocast casts the fp32 weights of the GEMMs to %s in every forward and their gradients back in every backward", m.DType)
	if m.Tensors > 0 {
		what = fmt.Sprintf("autocast casts %d fp32 GEMM weights and biases (%s parameters) to %s in every forward and their gradients back in every backward",
			m.Tensors, FormatCount(m.Params), m.DType)
	}
	m.Advice = fmt.Sprintf("%s: %d kernels, %s µs a step (%s µs forward, %s µs backward, all steps), which torch.compile keeps",
		what, m.Kernels/m.Steps, fmtFloat(perStep), fmtFloat(m.ForwardUs), fmtFloat(m.BackwardUs))
	switch {
	case m.BackwardUs <= 0:
		m.Why = "no gradient is cast back in the trace (not a training step)"
	case m.DType != BF16:
		m.Why = fmt.Sprintf("the casts are to %s, not bf16 (fp16 training needs a GradScaler, which refuses fp16 gradients)", m.DType)
	case len(classes) == 0:
		m.Why = "the trace records no optimizer step (Optimizer.step#...), so the optimizer MasterAdamW would replace is unknown (it replaces Adam and AdamW)"
	case len(classes) > 1:
		m.Why = "the trace steps several optimizers (" + strings.Join(classes, ", ") + ")"
	case !masterOptimizers[m.Optimizer]:
		m.Why = "the optimizer is " + m.Optimizer + "; MasterAdamW replaces Adam and AdamW"
	}
	if m.Why != "" {
		return
	}
	m.EstSavingUs = round2(m.ForwardUs + m.BackwardUs)
	m.Advice += ". Keep those weights in bf16 and their fp32 masters in the optimizer: " +
		"opt = MasterAdamW(model.parameters(), lr=..., weight_decay=..., low_precision=gemm_parameters(model)) " +
		"(gen writes it: master_adamw/; decoupled=False for Adam). Neither cast runs, one kernel updates every parameter " +
		"with the bytes of fused=True, and the model computes what it computed: the forward reads the master's " +
		"round-to-nearest copy, the gradient is the same bf16 GEMM output. Tied weights and the weights of " +
		"non-GEMM modules stay fp32; with gradient accumulation over several backwards, grad_dtype=torch.float32 keeps their gradients fp32 (the backward's casts then stay)"
}

// MasterWeightsOffered says whether the master weights' advice applies to one of r's traces.
func (r *Report) MasterWeightsOffered() bool {
	for _, m := range r.MasterWeights {
		if m.Why == "" {
			return true
		}
	}
	return false
}

// Text is the finding's advice as the analysis and the report print it: with why it is not
// offered, or what it takes off the host.
func (m *MasterWeights) Text() string { return adviceText(m.Advice, m.Why, m.HostSaving()) }

// adviceText joins a finding's advice, why it is not offered ("" where it is) and its host
// sentence ("" for none).
func adviceText(advice, why, host string) string {
	if why != "" {
		advice += " (not offered: " + why + ")"
	}
	if host != "" {
		advice += ". " + host
	}
	return advice
}

// HostSaving is the sentence on what an offered finding takes off the host ("" for nothing).
func (m *MasterWeights) HostSaving() string {
	if m.Ops == 0 || m.Why != "" {
		return ""
	}
	return fmt.Sprintf("On the host the casts are %d ops and %d launches a step, which a host-bound step no longer runs (an H100's Llama-shaped training step ran 15%% shorter in wall time; docs/benchmarks/h200.md)",
		m.Ops/m.Steps, m.Kernels/m.Steps)
}
