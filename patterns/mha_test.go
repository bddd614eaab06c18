package patterns

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// mhaTrace is one nn.MultiheadAttention self-attention call as torch records it (every op
// launching one 5 µs kernel, synth): the packed projection (batchFirst: of the transposed
// input, the GEMM's copy and bias add nested in it), its split for the heads, the three
// selects, and the attention (sdpa: scaled_dot_product_attention, else the weights' path)
// and the output projection; backward adds the selects' and the unflatten view's backward
// nodes, each select's with a 7 µs fill and a 3 µs copy, the view's with a 4 µs copy.
func mhaTrace(batchFirst, sdpa, backward bool) *trace.Trace {
	var ops []op
	if batchFirst {
		ops = append(ops, op{name: "transpose", in: []string{"bf16:2x16x64", "=1", "=0"}})
	}
	lin := op{name: "linear", in: []string{"bf16:16x2x64", "bf16:192x64", "bf16:192"}}
	if batchFirst {
		lin.kids = []op{{name: "clone", in: []string{"bf16:16x2x64", "=0"}}, {name: "add_", in: []string{"bf16:16x2x192", "bf16:192", "=1"}}}
	}
	attention := op{name: "scaled_dot_product_attention", in: []string{"bf16:2x4x16x16", "bf16:2x4x16x16", "bf16:2x4x16x16"}}
	if !sdpa {
		attention = op{name: "baddbmm", in: []string{"bf16:8x16x16", "bf16:8x16x16", "bf16:8x16x16"}}
	}
	ops = append(ops, lin,
		op{name: "unflatten", in: []string{"bf16:16x2x192", "=-1", "=[3, 64]"}, kids: []op{{name: "view", in: []string{"bf16:16x2x192", "=[16, 2, 3, 64]"}}}},
		op{name: "unsqueeze", in: []string{"bf16:16x2x3x64", "=0"}},
		op{name: "transpose", in: []string{"bf16:1x16x2x3x64", "=0", "=-2"}},
		op{name: "squeeze", in: []string{"bf16:3x16x2x1x64", "=-2"}},
		op{name: "contiguous", in: []string{"bf16:3x16x2x64", "=0"}},
		op{name: "select", in: []string{"bf16:3x16x2x64", "=0", "=0"}},
		op{name: "select", in: []string{"bf16:3x16x2x64", "=0", "=1"}},
		op{name: "select", in: []string{"bf16:3x16x2x64", "=0", "=2"}},
		attention,
		op{name: "linear", in: []string{"bf16:32x64", "bf16:64x64", "bf16:64"}},
	)
	tr := synth(ops...)
	if backward {
		b := newTail(tr)
		node := func(fwd int32, name string, kernels ...int64) {
			n := b.op(name, b.op(evaluateFunction+name, -1))
			tr.Ops[n].Fwd, tr.Ops[fwd].Bwd = fwd, n
			for _, us := range kernels {
				b.kernel(b.op("aten::copy_", n), "copy_kernel", us)
			}
		}
		for i := range tr.Ops {
			switch o := &tr.Ops[i]; {
			case o.Name == "aten::select":
				node(int32(i), "SelectBackward0", 7, 3)
			case o.Name == "aten::view" && tr.Ops[o.Parent].Name == "aten::unflatten":
				node(int32(i), "ViewBackward0", 4)
			}
		}
		b.done()
	}
	return tr
}

func TestMultiheadAttention(t *testing.T) {
	tests := []struct {
		name                       string
		batchFirst, sdpa, backward bool
		fwdUs, bwdUs               float64
		why                        string
	}{
		// the split's contiguous copy; batch-first: the GEMM's copy and bias add too
		{"training, batch_first: offered", true, true, true, 15, 3*10 + 4, ""},
		{"training, sequence-first: the split's copies alone", false, true, true, 5, 34, ""},
		{"need_weights=True: not offered", true, false, true, 15, 34, "need_weights=True"},
		{"inference: not offered", true, true, false, 15, 0, "inference"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Analyze([]*trace.Trace{mhaTrace(tc.batchFirst, tc.sdpa, tc.backward)}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.MultiheadAttention) != 1 {
				t.Fatalf("%d findings, want 1", len(r.MultiheadAttention))
			}
			f := r.MultiheadAttention[0]
			if f.Calls != 1 || f.BatchFirst != tc.batchFirst || f.DType != BF16 || len(f.Shapes) != 1 || len(f.Shapes[0]) != 4 {
				t.Errorf("finding %+v: want one bf16 call of one [3, L, N, E] split, batch_first %v", f, tc.batchFirst)
			}
			if f.ForwardUs != tc.fwdUs || f.BackwardUs != tc.bwdUs {
				t.Errorf("forward %v, backward %v µs; want %v, %v", f.ForwardUs, f.BackwardUs, tc.fwdUs, tc.bwdUs)
			}
			if !strings.Contains(f.Why, tc.why) || tc.why == "" && f.Why != "" {
				t.Errorf("why %q, want %q", f.Why, tc.why)
			}
			c := r.Coverage
			if tc.why != "" {
				if f.EstSavingUs != 0 || r.MultiheadAttentionOffered() || c.MultiheadAttentionUs != 0 || f.HostSaving() != "" {
					t.Errorf("not offered, yet saving %v, offered %v, coverage %v", f.EstSavingUs, r.MultiheadAttentionOffered(), c.MultiheadAttentionUs)
				}
				return
			}
			// the drop-in's stack of the three gradients, at the cost model's bandwidth
			if f.EstStackUs <= 0 || f.EstSavingUs != round2(tc.fwdUs+tc.bwdUs-f.EstStackUs) {
				t.Errorf("saving %v with a stack of %v; want the copies' %v less the stack", f.EstSavingUs, f.EstStackUs, tc.fwdUs+tc.bwdUs)
			}
			if !r.MultiheadAttentionOffered() || !strings.Contains(f.Advice, "swap_multihead_attention") {
				t.Errorf("advice %q", f.Advice)
			}
			if want := fmt.Sprintf("%d kernel launches a step", f.Kernels); !strings.Contains(f.HostSaving(), want) {
				t.Errorf("host %q, want %q", f.HostSaving(), want)
			}
			if c.MultiheadAttentionUs != tc.fwdUs+tc.bwdUs || c.WithOptimizerPct <= c.ClaimedWithBackwardPct {
				t.Errorf("coverage claims %v µs (%v%% with the advice, %v%% without); want the copies' %v", c.MultiheadAttentionUs, c.WithOptimizerPct, c.ClaimedWithBackwardPct, tc.fwdUs+tc.bwdUs)
			}
			if r.Totals == nil || r.Totals.MultiheadAttentionSavingUs != f.EstSavingUs {
				t.Errorf("totals %+v: want the saving %v", r.Totals, f.EstSavingUs)
			}
		})
	}
}

// TestMultiheadAttentionNotASplit: the same ops with another split (E, 3 instead of 3, E;
// four selects' worth of a 4-way split) or no selects after the copy are not
// nn.MultiheadAttention's packed projection.
func TestMultiheadAttentionNotASplit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(tr *trace.Trace)
	}{
		{"unflatten to (E, 3)", func(tr *trace.Trace) {
			for i := range tr.Ops {
				if tr.Ops[i].Name == "aten::unflatten" {
					tr.Ops[i].Inputs[2].Concrete = "[64, 3]"
				}
			}
		}},
		{"a select of index 1 first", func(tr *trace.Trace) {
			for i := range tr.Ops {
				if tr.Ops[i].Name == "aten::select" {
					tr.Ops[i].Inputs[2].Concrete = "1"
					break
				}
			}
		}},
		{"a projection of another width", func(tr *trace.Trace) {
			tr.Ops[tr.Threads[0].Roots[1]].Inputs[1].Dims = []int64{128, 64}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := mhaTrace(true, true, true)
			tc.change(tr)
			r, err := Analyze([]*trace.Trace{tr}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.MultiheadAttention) != 0 {
				t.Errorf("found %+v", r.MultiheadAttention)
			}
		})
	}
}

// TestMultiheadAttentionRecorded: a training step of nn.Transformer recorded on the CPU
// (testdata/mha/record.py: batch_first, one encoder and one decoder layer) has three splits,
// the encoder's and the decoder's self-attention ([3, L, N, E], one projection each) and the
// decoder's attention to the memory ([2, S, N, E], its q projected apart), each after
// batch_first's transposes and with its backward nodes; no kernels (a CPU trace), so the
// finding says why it is not offered rather than offering nothing silently.
func TestMultiheadAttentionRecorded(t *testing.T) {
	tr, err := trace.Open("../testdata/mha/mha_transformer_train_cpu.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range tr.Ops {
		s, ok := findMHASplit(tr, int32(i))
		if !ok {
			continue
		}
		bwd := 0
		for _, id := range s.selects {
			if tr.Ops[id].Bwd >= 0 {
				bwd++
			}
		}
		got = append(got, fmt.Sprintf("%v linears=%d selects=%d batch_first=%v sdpa=%v backward=%d",
			tr.Ops[s.contiguous].Inputs[0].Dims, len(s.linears), len(s.selects), s.batchFirst, s.sdpa, bwd))
	}
	want := []string{
		"[3 7 2 32] linears=1 selects=3 batch_first=true sdpa=true backward=3",
		"[3 5 2 32] linears=1 selects=3 batch_first=true sdpa=true backward=3",
		"[2 7 2 32] linears=2 selects=2 batch_first=true sdpa=true backward=2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("splits:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	r, err := Analyze([]*trace.Trace{tr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.MultiheadAttention) != 1 || r.MultiheadAttention[0].Calls != 3 || !strings.Contains(r.MultiheadAttention[0].Why, "bandwidth") {
		t.Errorf("finding %+v: want 3 calls, not offered for the unknown bandwidth", r.MultiheadAttention)
	}
}
