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

// TestLayerNormLinearTakesConvBias: a LayerNorm reading a convolution's output through a
// permute that moves the channels last (ConvNeXt's depthwise conv), the output read by nothing
// else, takes the convolution's bias (conv_bias): the convolution's own bias add joins the
// instance's kernels, and its backward's memory-bound kernel (the bias gradient's sum) the
// instance's backward time, which the fused backward's column sum saves although the
// pattern's backward is counted as eager's otherwise. Not without a bias, with another
// reader of the output, or a permute that leaves the channels where they are.
func TestLayerNormLinearTakesConvBias(t *testing.T) {
	x := "bf16:2x16x9x9"
	conv := func(bias bool) op {
		in := []string{x, "bf16:16x1x7x7", "", "=[1, 1]", "=[3, 3]", "=[1, 1]", "=16"}
		o := op{name: "conv2d", in: in}
		if bias {
			in[2] = "bf16:16"
			o.kids = []op{{name: "add_", in: []string{x, "bf16:1x16x1x1", "=1"}}}
		}
		return o
	}
	permute := func(order string) op { return op{name: "permute", in: []string{x, "=" + order}} }
	ln := op{name: "layer_norm", in: []string{"bf16:2x9x9x16", "=[16]", "f32:16", "f32:16", "=1e-06", "=True"}}
	linear := op{name: "linear", in: []string{"f32:2x9x9x16", "f32:64x16", "f32:64"}}
	tests := []struct {
		name  string
		ops   []op
		takes bool
	}{
		{"ConvNeXt's depthwise conv", []op{conv(true), permute("[0, 2, 3, 1]"), ln, linear}, true},
		{"a convolution without bias", []op{conv(false), permute("[0, 2, 3, 1]"), ln, linear}, false},
		{"the output read twice", []op{conv(true), {name: "sum", in: []string{x}}, permute("[0, 2, 3, 1]"), ln, linear}, false},
		{"the channels left in place", []op{conv(true), permute("[0, 1, 3, 2]"),
			{name: "layer_norm", in: []string{"bf16:2x16x9x9", "=[9]", "f32:9", "f32:9", "=1e-06", "=True"}},
			{name: "linear", in: []string{"f32:2x16x9x9", "f32:64x9", "f32:64"}}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := synth(tc.ops...)
			c := tr.Threads[0].Roots[0]
			// the convolution's backward node: its convolution_backward kernel (compute) and
			// the bias gradient's sum
			b := newTail(tr)
			n := b.op("ConvolutionBackward0", b.op(evaluateFunction+"ConvolutionBackward0", -1))
			tr.Ops[n].Fwd, tr.Ops[c].Bwd = c, n
			b.kernel(b.op("aten::convolution_backward", n), "conv_dgrad", 40)
			b.kernel(b.op("aten::sum", n), "reduce_kernel", 12)
			b.done()
			r, err := Analyze([]*trace.Trace{tr}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var g *ShapeGroup
			for _, o := range r.Opportunities {
				if o.Pattern == "layernorm_linear" && len(o.Shapes) == 1 {
					g = &o.Shapes[0]
				}
			}
			if g == nil {
				t.Fatalf("no layernorm_linear instance: %+v", r.Opportunities)
			}
			if g.Params.ConvBias != tc.takes {
				t.Fatalf("conv_bias %v, want %v", g.Params.ConvBias, tc.takes)
			}
			c2, why := patternByID("layernorm_linear").Case(*g)
			if why != "" || c2.Params.ConvBias != tc.takes {
				t.Errorf("case %+v (%s): want conv_bias %v", c2, why, tc.takes)
			}
			// the norm's and the GEMM's kernels (5 µs each), and with the bias the
			// convolution's add; the backward: the sum where it takes the bias
			wantUs, wantBwd := 10.0, 0.0
			if tc.takes {
				wantUs, wantBwd = 15, 12
				if g.EstBackwardSavingUs <= 0 || g.EstBackwardSavingUs >= 12 {
					t.Errorf("backward saving %v µs, want some of the sum's 12", g.EstBackwardSavingUs)
				}
			}
			if g.GPUTimeUs != wantUs || g.BackwardGPUTimeUs != wantBwd {
				t.Errorf("GPU time %v µs, backward %v; want %v, %v", g.GPUTimeUs, g.BackwardGPUTimeUs, wantUs, wantBwd)
			}
		})
	}
}
