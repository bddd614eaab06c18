package patterns

import (
	"slices"
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// TestDropoutAddTakesGEMMBias: a dropout reading a GEMM's output, alone, with a bias of the
// last dim (nn.Linear's; Hugging Face Conv1D's addmm, through its view) takes that bias: the
// case has it, the GEMM stays out of the instance's ops, and its backward's memory-bound
// kernel (the bias gradient's row sum) is the instance's backward time and coverage, its
// GEMM kernels not.
func TestDropoutAddTakesGEMMBias(t *testing.T) {
	x, h := "bf16:8x128x768", "bf16:8x128x3072"
	drop := op{name: "dropout", in: []string{x, "=0.1", "=True"},
		kids: []op{{name: "native_dropout", in: []string{x, "=0.1", "=True"}}}}
	add := op{name: "add", in: []string{x, "f32:8x128x768", "=1"}} // autocast's fp32 residual stream
	tests := []struct {
		name string
		gemm []op // the ops producing the dropout's input
		// extra reads the GEMM's output besides the dropout
		extra bool
		takes bool
	}{
		{"nn.Linear", []op{{name: "linear", in: []string{h, "bf16:768x3072", "bf16:768"}}}, false, true},
		{"Conv1D's addmm and its view", []op{{name: "addmm", in: []string{"bf16:768", "bf16:1024x3072", "bf16:3072x768", "=1", "=1"}},
			{name: "view", in: []string{"bf16:1024x768", "[8, 128, 768]"}}}, false, true},
		{"an addmm scaled (beta 0.5)", []op{{name: "addmm", in: []string{"bf16:768", "bf16:1024x3072", "bf16:3072x768", "=0.5", "=1"}},
			{name: "view", in: []string{"bf16:1024x768", "[8, 128, 768]"}}}, false, false},
		{"a Linear without bias", []op{{name: "linear", in: []string{h, "bf16:768x3072"}}}, false, false},
		{"a Linear's output read twice", []op{{name: "linear", in: []string{h, "bf16:768x3072", "bf16:768"}}}, true, false},
		{"inference: no backward", []op{{name: "linear", in: []string{h, "bf16:768x3072", "bf16:768"}}}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ops := slices.Clone(tc.gemm)
			if tc.extra {
				ops = append(ops, op{name: "sum", in: []string{x}})
			}
			ops = append(ops, drop, add)
			tr := synth(ops...)
			gemm := tr.Threads[0].Roots[0]
			// the GEMM's backward node: a GEMM kernel (compute) and the bias' row sum
			b := newTail(tr)
			if tc.name != "inference: no backward" {
				n := b.op("AddmmBackward0", b.op(evaluateFunction+"AddmmBackward0", -1))
				tr.Ops[n].Fwd, tr.Ops[gemm].Bwd = gemm, n
				b.kernel(b.op("aten::mm", n), "nvjet_gemm", 40)
				b.kernel(b.op("aten::sum", n), "reduce_kernel", 12)
			}
			b.done()

			r, err := Analyze([]*trace.Trace{tr}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var o *Opportunity
			for i := range r.Opportunities {
				if r.Opportunities[i].Pattern == "dropout_add" {
					o = &r.Opportunities[i]
				}
			}
			if o == nil || len(o.Shapes) != 1 {
				t.Fatalf("no dropout_add instance: %+v", r.Opportunities)
			}
			g := o.Shapes[0]
			if g.Params.GEMMBias != tc.takes || (g.Params.Bias != nil && *g.Params.Bias) != tc.takes {
				t.Fatalf("gemm_bias %v, bias %v; want both %v", g.Params.GEMMBias, g.Params.Bias, tc.takes)
			}
			c, why := patternByID("dropout_add").Case(g)
			if why != "" || c.Params.HasBias != tc.takes || tc.takes && !slices.Equal(c.Shapes[1], []int64{768}) {
				t.Errorf("case %+v (%s): want has_bias %v, a [768] bias", c, why, tc.takes)
			}
			// the backward: the dropout's node has no kernel here; the GEMM's sum is the
			// instance's where it takes the bias, its GEMM kernel never
			want := 0.0
			if tc.takes {
				want = 12
			}
			if g.BackwardGPUTimeUs != want {
				t.Errorf("backward GPU time %v µs, want %v", g.BackwardGPUTimeUs, want)
			}
			if tc.takes && r.Coverage.ClaimedWithBackwardUs-r.Coverage.ClaimedUs != 12 {
				t.Errorf("coverage with backward %v, forward %v: want the sum's 12 µs more", r.Coverage.ClaimedWithBackwardUs, r.Coverage.ClaimedUs)
			}
			if tc.takes && len(o.Advice) < 2 {
				t.Errorf("advice %q says nothing of the GEMM's bias", o.Advice)
			}
		})
	}
}
