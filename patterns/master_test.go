package patterns

import (
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// masterTrace is a training step under autocast: a linear casting its fp32 weight and bias
// to dtype (a c10::ScalarType code) with the weight's gradient cast back, an input cast, and
// an optimizer step of class optimizer ("" for none); tied adds an embedding reading a
// weight of the linear weight's dims.
func masterTrace(dtype, optimizer string, backward, tied bool) *trace.Trace {
	ops := []op{
		{name: "linear", in: []string{"f32:8x128x768", "f32:3072x768", "f32:3072"}, kids: []op{
			{name: "to", in: []string{"f32:8x128x768", "=" + dtype}}, // the input: an activation
			{name: "to", in: []string{"f32:3072x768", "=" + dtype}},  // the weight
			{name: "to", in: []string{"f32:3072", "=" + dtype}},      // the bias
		}},
	}
	if tied {
		ops = append(ops, op{name: "embedding", in: []string{"f32:3072x768", "i64:8x128"}})
	}
	tr := synth(ops...)
	b := newTail(tr)
	if backward {
		weight := tr.Ops[tr.Threads[0].Roots[0]].Children[1]
		n := b.op("ToCopyBackward0", b.op(evaluateFunction+"ToCopyBackward0", -1))
		tr.Ops[n].Fwd, tr.Ops[weight].Bwd = weight, n
		b.kernel(b.op("aten::to", n), "copy_kernel", 7)
	}
	if optimizer != "" {
		b.kernel(b.op("aten::_foreach_add_", b.op("Optimizer.step#"+optimizer+".step", -1)), "copy_kernel", 3)
	}
	b.done()
	return tr
}

func TestMasterWeights(t *testing.T) {
	tests := []struct {
		name                   string
		dtype, optimizer       string
		backward, tied         bool
		fwdUs, bwdUs, savingUs float64
		tensors                int
		params                 int64
		why                    string
	}{
		{"AdamW in training: offered", "15", "AdamW", true, false, 10, 7, 17, 2, 3072*768 + 3072, ""},
		{"Adam too", "15", "Adam", true, false, 10, 7, 17, 2, 3072*768 + 3072, ""},
		{"SGD: another optimizer", "15", "SGD", true, false, 10, 7, 0, 2, 3072*768 + 3072, "replaces Adam and AdamW"},
		{"no optimizer step recorded", "15", "", true, false, 10, 7, 0, 2, 3072*768 + 3072, "records no optimizer step"},
		{"fp16 casts", "5", "AdamW", true, false, 10, 7, 0, 2, 3072*768 + 3072, "not bf16"},
		{"inference: no gradient cast back", "15", "AdamW", false, false, 10, 0, 0, 2, 3072*768 + 3072, "not a training step"},
		// the weight of an embedding's dims may be tied to it: its casts stay, the bias' go
		{"a weight of an embedding's dims stays", "15", "AdamW", true, true, 5, 0, 0, 1, 3072, "not a training step"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Analyze([]*trace.Trace{masterTrace(tc.dtype, tc.optimizer, tc.backward, tc.tied)}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.MasterWeights) != 1 {
				t.Fatalf("found %d findings, want 1", len(r.MasterWeights))
			}
			m := r.MasterWeights[0]
			if m.ForwardUs != tc.fwdUs || m.BackwardUs != tc.bwdUs || m.EstSavingUs != tc.savingUs {
				t.Errorf("forward %v, backward %v, saving %v µs; want %v, %v, %v", m.ForwardUs, m.BackwardUs, m.EstSavingUs, tc.fwdUs, tc.bwdUs, tc.savingUs)
			}
			if m.Tensors != tc.tensors || m.Params != tc.params {
				t.Errorf("%d tensors of %d parameters, want %d of %d", m.Tensors, m.Params, tc.tensors, tc.params)
			}
			if tc.why == "" && m.Why != "" || !strings.Contains(m.Why, tc.why) {
				t.Errorf("why %q, want %q", m.Why, tc.why)
			}
			if got := r.MasterWeightsOffered(); got != (tc.why == "") {
				t.Errorf("offered %v", got)
			}
			c := r.Coverage
			if tc.why == "" {
				if c.MasterWeightsUs != tc.savingUs || r.Totals == nil || r.Totals.MasterWeightsSavingUs != tc.savingUs {
					t.Errorf("coverage claims %v µs, totals %+v; want %v", c.MasterWeightsUs, r.Totals, tc.savingUs)
				}
				if !strings.Contains(m.Advice, "MasterAdamW") {
					t.Errorf("advice %q names no MasterAdamW", m.Advice)
				}
				// on the host: the weight's and the bias' casts and the weight's backward node
				if m.Ops != 3 || !strings.Contains(m.HostSaving(), "3 ops and 3 launches a step") {
					t.Errorf("%d ops, host %q; want 3 ops and 3 launches", m.Ops, m.HostSaving())
				}
			} else if c.MasterWeightsUs != 0 {
				t.Errorf("coverage claims %v µs of casts not offered", c.MasterWeightsUs)
			}
		})
	}
}

// TestMasterWeightsTiedFromTheExecutionTrace: with an execution trace, a weight of an
// embedding's dims is tied only when the embedding reads its storage (GPT-2's output
// projection), else its casts go too (Llama's lm_head); from Kineto alone the dims decide,
// unless the backward accumulates more parameters of those dims than the embedding calls.
func TestMasterWeightsTiedFromTheExecutionTrace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		storage int64 // the storage the weight's cast reads; the embedding reads storage 7
		et      bool
		params  int // AccumulateGrad nodes of the weight's dims (0: none recorded)
		tensors int
	}{
		{"Kineto alone: same dims, left out", 8, false, 0, 1},
		{"Kineto alone: one parameter of its dims accumulated, tied, left out", 8, false, 1, 1},
		{"Kineto alone: two parameters of its dims for one embedding call, not tied", 8, false, 2, 2},
		{"the embedding's storage: tied, left out", 7, true, 2, 1},
		{"another storage: not tied, its casts go", 8, true, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := masterTrace("15", "AdamW", true, true)
			b := newTail(tr)
			for range tc.params {
				n := b.op(accumulateGrad, b.op(evaluateFunction+"torch::autograd::AccumulateGrad", -1))
				tr.Ops[n].Inputs = []trace.Input{{Type: "float", Dims: []int64{3072, 768}}}
			}
			b.done()
			var join map[int32]*trace.ETNode
			if tc.et {
				join = map[int32]*trace.ETNode{}
				for i := range tr.Ops {
					o := &tr.Ops[i]
					switch {
					case o.Name == "aten::embedding":
						join[int32(i)] = &trace.ETNode{Inputs: []trace.Tensor{{ID: 1, Storage: 7}}}
					case o.Name == "aten::to" && o.Parent >= 0 && len(o.Inputs) > 0 && len(o.Inputs[0].Dims) == 2 && o.Inputs[0].Dims[1] == 768:
						join[int32(i)] = &trace.ETNode{Inputs: []trace.Tensor{{ID: 2, Storage: tc.storage}}}
					}
				}
			}
			m := masterWeights(tr, 1, newTiedWeights(tr, join))
			if m == nil || m.Tensors != tc.tensors {
				t.Fatalf("finding %+v, want %d tensors", m, tc.tensors)
			}
		})
	}
}
