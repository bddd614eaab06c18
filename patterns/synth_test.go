package patterns

import (
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// op is a synthetic top-level op: name and inputs as "dtype:d0xd1x..." or a
// Concrete Inputs scalar "=text" (type Scalar), "" for None.
type op struct {
	name string
	in   []string
	kids []op // nested children (e.g. native_dropout)
}

func parseIn(s string) trace.Input {
	switch {
	case s == "":
		return trace.Input{}
	case strings.HasPrefix(s, "="):
		return trace.Input{Type: "Scalar", Concrete: s[1:]}
	case strings.HasPrefix(s, "#"): // a wrapped Python float (type double, no sizes)
		return trace.Input{Type: "double"}
	}
	dt, shape, _ := strings.Cut(s, ":")
	types := map[string]string{"f32": "float", "bf16": "c10::BFloat16", "f16": "c10::Half", "i64": "long int", "bool": "bool"}
	in := trace.Input{Type: types[dt]}
	if shape != "" {
		for _, d := range strings.Split(shape, "x") {
			var v int64
			for _, c := range d {
				v = v*10 + int64(c-'0')
			}
			in.Dims = append(in.Dims, v)
		}
	}
	return in
}

// synth builds a one-thread trace from ops, each op 10 us long with one 5 us kernel.
func synth(ops ...op) *trace.Trace {
	t := &trace.Trace{Path: "synthetic", Rank: -1, Devices: []trace.Device{{Name: "NVIDIA H200"}}}
	t.Threads = []trace.Thread{{Pid: "1", Tid: "1"}}
	var now int64
	var add func(o op, parent int32) int32
	add = func(o op, parent int32) int32 {
		id := int32(len(t.Ops))
		var ins []trace.Input
		for _, s := range o.in {
			ins = append(ins, parseIn(s))
		}
		t.Ops = append(t.Ops, trace.Op{Name: "aten::" + o.name, Kind: trace.KindCPUOp, Start: now, Dur: 10_000,
			Parent: parent, Inputs: ins, Bwd: -1, Fwd: -1, Py: -1, ExternalID: -1, RecordFunctionID: -1, Seq: -1})
		a := int32(len(t.Acts))
		t.Acts = append(t.Acts, trace.Activity{Name: o.name + "_kernel", Start: now, Dur: 5_000, Op: id})
		t.Ops[id].Acts = []int32{a}
		now += 1_000
		for _, k := range o.kids {
			c := add(k, id)
			t.Ops[id].Children = append(t.Ops[id].Children, c)
		}
		now += 10_000
		return id
	}
	for _, o := range ops {
		t.Threads[0].Roots = append(t.Threads[0].Roots, add(o, -1))
	}
	t.Steps = []trace.Step{{Name: "whole trace", Num: -1, Dur: now}}
	return t
}

func synthCounts(t *testing.T, tr *trace.Trace) map[string]int {
	t.Helper()
	r, err := Analyze([]*trace.Trace{tr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, o := range r.Opportunities {
		got[o.Pattern] = o.Instances
	}
	return got
}

func TestSyntheticChains(t *testing.T) {
	x := "bf16:8x128x768"
	h := "bf16:8x128x3072"
	drop := func(in string, p string, train string) op {
		o := op{name: "dropout", in: []string{in, "=" + p, "=" + train}}
		if train == "True" && p != "0." {
			o.kids = []op{{name: "native_dropout", in: []string{in, "=" + p, "=" + train}}}
		}
		return o
	}
	ln := op{name: "layer_norm", in: []string{"f32:8x128x768", "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}}
	tests := []struct {
		name string
		ops  []op
		want map[string]int
	}{
		{"bias add then gelu", []op{
			{name: "mm", in: []string{"bf16:1024x768", "bf16:768x3072"}},
			{name: "add", in: []string{"bf16:1024x3072", "bf16:3072", "=1"}},
			{name: "gelu", in: []string{"bf16:1024x3072", "=tanh"}},
		}, map[string]int{"bias_gelu": 1}},
		{"residual add then gelu is not a bias", []op{
			{name: "mm", in: []string{"bf16:1024x768", "bf16:768x3072"}},
			{name: "mm", in: []string{"bf16:1024x768", "bf16:768x3072"}},
			{name: "add", in: []string{"bf16:1024x3072", "bf16:1024x3072", "=1"}},
			{name: "gelu", in: []string{"bf16:1024x3072", ""}},
		}, map[string]int{}},
		{"linear then gelu", []op{
			{name: "linear", in: []string{x, "bf16:3072x768", "bf16:3072"}},
			{name: "gelu", in: []string{h, ""}},
		}, map[string]int{"linear_gelu": 1}},
		{"eval dropout passes layernorm to linear", []op{
			ln, drop("f32:8x128x768", "0.1", "False"),
			{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", "f32:768"}},
		}, map[string]int{"layernorm_linear": 1}},
		{"training dropout breaks layernorm_linear", []op{
			ln, drop("f32:8x128x768", "0.1", "True"),
			{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", "f32:768"}},
		}, map[string]int{}},
		{"view between layernorm and addmm", []op{
			ln, {name: "view", in: []string{"f32:8x128x768", "=[-1, 768]"}},
			{name: "addmm", in: []string{"f32:2304", "f32:1024x768", "f32:768x2304", "=1", "=1"}},
		}, map[string]int{"layernorm_linear": 1}},
		{"q k v linears read one layernorm once", []op{
			ln,
			{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", "f32:768"}},
			{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", "f32:768"}},
			{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", "f32:768"}},
		}, map[string]int{"layernorm_linear": 1}},
		{"pre-norm residual block", []op{
			{name: "add", in: []string{"f32:8x128x768", "f32:1x128x768", "=1"}}, // embeddings
			drop("f32:8x128x768", "0.1", "True"),
			ln,
			{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", "f32:768"}},
			drop("f32:8x128x768", "0.1", "True"),
			{name: "add", in: []string{"f32:8x128x768", "f32:8x128x768", "=1"}}, // x + drop(f(ln(x)))
			{name: "layer_norm", in: []string{"f32:8x128x768", "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}},
		}, map[string]int{"layernorm_linear": 1, "dropout_add": 2, "add_layernorm": 1}},
		{"bias + dropout + residual add", []op{
			{name: "mm", in: []string{"bf16:1024x768", "bf16:768x768"}},
			{name: "add", in: []string{"bf16:1024x768", "bf16:768", "=1"}},
			drop("bf16:1024x768", "0.1", "True"),
			{name: "add", in: []string{"bf16:1024x768", "bf16:1024x768", "=1"}},
		}, map[string]int{"dropout_add": 1}},
		{"fp32 GPT-2 block: heads split off the projection are not the residual", []op{
			{name: "add", in: []string{"f32:2x16x64", "f32:1x16x64", "=1"}}, // embeddings
			drop("f32:2x16x64", "0.1", "True"),                              // x
			{name: "layer_norm", in: []string{"f32:2x16x64", "=[64]", "f32:64", "f32:64", "=1e-05", "=True"}},
			{name: "view", in: []string{"f32:2x16x64", "=[-1, 64]"}},
			{name: "addmm", in: []string{"f32:192", "f32:32x64", "f32:64x192", "=1", "=1"}},
			{name: "view", in: []string{"f32:32x192", "=[2, 16, 192]"}},
			{name: "split", in: []string{"f32:2x16x192", "=64", "=2"}},
			{name: "view", in: []string{"f32:2x16x64", "=[2, 16, -1, 16]"}},
			{name: "transpose", in: []string{"f32:2x16x4x16", "=1", "=2"}},
			{name: "view", in: []string{"f32:2x16x64", "=[2, 16, -1, 16]"}},
			{name: "transpose", in: []string{"f32:2x16x4x16", "=1", "=2"}},
			{name: "view", in: []string{"f32:2x16x64", "=[2, 16, -1, 16]"}},
			{name: "transpose", in: []string{"f32:2x16x4x16", "=1", "=2"}},
			{name: "transpose", in: []string{"f32:2x4x16x16", "=-1", "=-2"}},
			{name: "matmul", in: []string{"f32:2x4x16x16", "f32:2x4x16x16"}},
			{name: "softmax", in: []string{"f32:2x4x16x16", "=-1", ""}},
			{name: "matmul", in: []string{"f32:2x4x16x16", "f32:2x4x16x16"}},
			{name: "transpose", in: []string{"f32:2x4x16x16", "=1", "=2"}},
			{name: "reshape", in: []string{"f32:2x16x4x16", "=[2, 16, -1]"}},
			{name: "view", in: []string{"f32:2x16x64", "=[-1, 64]"}},
			{name: "addmm", in: []string{"f32:64", "f32:32x64", "f32:64x64", "=1", "=1"}},
			{name: "view", in: []string{"f32:32x64", "=[2, 16, 64]"}},
			drop("f32:2x16x64", "0.1", "True"),
			{name: "add", in: []string{"f32:2x16x64", "f32:2x16x64", "=1"}}, // drop + x
		}, map[string]int{"dropout_add": 2, "layernorm_linear": 1, "attention": 1}},
		{"p=0 dropout is not dropout_add", []op{
			{name: "linear", in: []string{x, "bf16:768x768", "bf16:768"}},
			drop(x, "0.", "True"),
			{name: "add", in: []string{x, x, "=1"}},
		}, map[string]int{}},
		{"scalar add before layernorm is not residual", []op{
			{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", "f32:768"}},
			{name: "add", in: []string{"f32:8x128x768", "#", "=1"}},
			{name: "layer_norm", in: []string{"f32:8x128x768", "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}},
		}, map[string]int{}},
		{"scaled masked softmax", []op{
			{name: "matmul", in: []string{"bf16:8x12x128x64", "bf16:8x12x64x128"}},
			{name: "div", in: []string{"bf16:8x12x128x128", "#"}},
			{name: "masked_fill", in: []string{"bf16:8x12x128x128", "bool:1x1x128x128", "=-inf"}},
			{name: "softmax", in: []string{"bf16:8x12x128x128", "=-1", ""}},
			{name: "matmul", in: []string{"bf16:8x12x128x128", "bf16:8x12x128x64"}},
		}, map[string]int{"mask_softmax": 1, "attention": 1}},
		{"unmasked softmax", []op{
			{name: "matmul", in: []string{"bf16:8x12x128x64", "bf16:8x12x64x128"}},
			{name: "softmax", in: []string{"bf16:8x12x128x128", "=-1", ""}},
		}, map[string]int{}},
		{"mask not along rows", []op{
			{name: "matmul", in: []string{"bf16:8x12x128x64", "bf16:8x12x64x128"}},
			{name: "add", in: []string{"bf16:8x12x128x128", "bf16:8x12x128x1", "=1"}},
			{name: "softmax", in: []string{"bf16:8x12x128x128", "=-1", ""}},
		}, map[string]int{}},
		{"swiglu", []op{
			{name: "linear", in: []string{x, "bf16:2816x768", ""}},
			{name: "silu", in: []string{"bf16:8x128x2816"}},
			{name: "linear", in: []string{x, "bf16:2816x768", ""}},
			{name: "mul", in: []string{"bf16:8x128x2816", "bf16:8x128x2816"}},
		}, map[string]int{"swiglu": 1}},
		{"silu times a scalar", []op{
			{name: "linear", in: []string{x, "bf16:2816x768", ""}},
			{name: "silu", in: []string{"bf16:8x128x2816"}},
			{name: "mul", in: []string{"bf16:8x128x2816", "#"}},
		}, map[string]int{}},
		{"rmsnorm as ops", []op{
			{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", ""}},
			{name: "pow", in: []string{"f32:8x128x768", "=2"}},
			{name: "mean", in: []string{"f32:8x128x768", "=[-1]", "=True", ""}},
			{name: "add", in: []string{"f32:8x128x1", "#", "=1"}},
			{name: "rsqrt", in: []string{"f32:8x128x1"}},
			{name: "mul", in: []string{"f32:8x128x768", "f32:8x128x1"}},
			{name: "to", in: []string{"f32:8x128x768", "=6", "=False", "=False", ""}},
			{name: "mul", in: []string{"f32:768", "f32:8x128x768"}},
		}, map[string]int{"rmsnorm_pyops": 1}},
		// a first layer's RMSNorm: x has a single producer (Gemma's embeddings * sqrt(hidden),
		// T5's embedding dropout); rule 2's walk back from rsqrt ends past the mean, at x**2,
		// so the final mul still reads x (it walked on into x: 4 of 5 on Gemma, 10 of 12 on T5)
		{"rmsnorm of a single-producer x", []op{
			{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", ""}},
			{name: "mul", in: []string{"f32:8x128x768", "=27.7"}},
			{name: "pow", in: []string{"f32:8x128x768", "=2"}},
			{name: "mean", in: []string{"f32:8x128x768", "=[-1]", "=True", ""}},
			{name: "add", in: []string{"f32:8x128x1", "#", "=1"}},
			{name: "rsqrt", in: []string{"f32:8x128x1"}},
			{name: "mul", in: []string{"f32:8x128x768", "f32:8x128x1"}},
			{name: "to", in: []string{"f32:8x128x768", "=6", "=False", "=False", ""}},
			{name: "mul", in: []string{"f32:768", "f32:8x128x768"}},
		}, map[string]int{"rmsnorm_pyops": 1}},
		{"gemma rmsnorm (1 + weight)", []op{
			{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", ""}},
			{name: "pow", in: []string{"f32:8x128x768", "=2"}},
			{name: "mean", in: []string{"f32:8x128x768", "=[-1]", "=True", ""}},
			{name: "add", in: []string{"f32:8x128x1", "#", "=1"}},
			{name: "rsqrt", in: []string{"f32:8x128x1"}},
			{name: "mul", in: []string{"f32:8x128x768", "f32:8x128x1"}},
			{name: "add", in: []string{"f32:768", "#", "=1"}},
			{name: "mul", in: []string{"f32:8x128x768", "f32:768"}},
		}, map[string]int{"rmsnorm_pyops": 1}},
		{"mean over a non-last dim is not rmsnorm", []op{
			{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", ""}},
			{name: "pow", in: []string{"f32:8x128x768", "=2"}},
			{name: "mean", in: []string{"f32:8x128x768", "=[1]", "=True", ""}},
			{name: "add", in: []string{"f32:8x1x768", "#", "=1"}},
			{name: "rsqrt", in: []string{"f32:8x1x768"}},
			{name: "mul", in: []string{"f32:8x128x768", "f32:8x1x768"}},
			{name: "mul", in: []string{"f32:768", "f32:8x128x768"}},
		}, map[string]int{}},
		{"new gelu as ops", []op{
			{name: "linear", in: []string{x, "bf16:3072x768", "bf16:3072"}},
			{name: "mul", in: []string{h, "#"}},
			{name: "pow", in: []string{h, "=3."}},
			{name: "mul", in: []string{h, "#"}},
			{name: "add", in: []string{h, h, "=1"}},
			{name: "mul", in: []string{h, "#"}},
			{name: "tanh", in: []string{h}},
			{name: "add", in: []string{h, "#", "=1"}},
			{name: "mul", in: []string{h, h}},
		}, map[string]int{"gelu_pyops": 1}},
		{"tanh gate without a cube", []op{
			{name: "linear", in: []string{x, "bf16:3072x768", "bf16:3072"}},
			{name: "mul", in: []string{h, "#"}},
			{name: "add", in: []string{h, "#", "=1"}},
			{name: "mul", in: []string{h, "#"}},
			{name: "tanh", in: []string{h}},
			{name: "add", in: []string{h, "#", "=1"}},
			{name: "mul", in: []string{h, h}},
		}, map[string]int{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := synthCounts(t, synth(tc.ops...))
			if d := diff(got, tc.want); d != "" {
				t.Error(d)
			}
		})
	}
}

func TestOptimizerStepIsABarrier(t *testing.T) {
	// block output -> optimizer step -> next step's first LayerNorm: no add_layernorm.
	tr := synth(
		op{name: "linear", in: []string{"f32:8x768", "f32:768x768", ""}},
		op{name: "add", in: []string{"f32:8x768", "f32:8x768", "=1"}},
		op{name: "layer_norm", in: []string{"f32:8x768", "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}},
	)
	if got := synthCounts(t, tr)["add_layernorm"]; got != 1 {
		t.Fatalf("without a barrier: add_layernorm = %d, want 1", got)
	}
	// Put the layer_norm after an optimizer annotation.
	ln := tr.Threads[0].Roots[2]
	tr.Ops = append(tr.Ops, trace.Op{Name: "Optimizer.step#AdamW.step", Kind: trace.KindUserAnnotation, Parent: -1,
		Start: tr.Ops[ln].Start - 1, Dur: 1, Bwd: -1, Fwd: -1, Py: -1})
	opt := int32(len(tr.Ops) - 1)
	tr.Threads[0].Roots = []int32{tr.Threads[0].Roots[0], tr.Threads[0].Roots[1], opt, ln}
	if got := synthCounts(t, tr)["add_layernorm"]; got != 0 {
		t.Errorf("across an optimizer step: add_layernorm = %d, want 0", got)
	}
}

func TestParams(t *testing.T) {
	tr := synth(
		op{name: "matmul", in: []string{"f16:2x12x64x32", "f16:2x12x32x64"}},
		op{name: "mul", in: []string{"f16:2x12x64x64", "=0.125"}},
		op{name: "add", in: []string{"f16:2x12x64x64", "f16:2x1x64x64", "=1"}},
		op{name: "softmax", in: []string{"f16:2x12x64x64", "=-1", "=6"}},
	)
	r, err := Analyze([]*trace.Trace{tr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Opportunities) != 1 || len(r.Opportunities[0].Shapes) != 1 {
		t.Fatalf("got %+v", r.Opportunities)
	}
	g := r.Opportunities[0].Shapes[0]
	p := g.Params
	if p.MaskKind != "additive" || p.ScaleOp != "mul" || p.Scale == nil || *p.Scale != 0.125 ||
		g.DType != FP16 || p.OutDType != FP32 || !eqDims(p.MaskDims, []int64{2, 1, 64, 64}) || g.Rows != 2*12*64 || g.Cols != 64 {
		t.Errorf("params = %+v, dtype %s, rows %d cols %d", p, g.DType, g.Rows, g.Cols)
	}
	// 3 kernels of 5 us; the fused kernel moves 2x12x64x64x(2+4) + 2x64x64x2 bytes.
	o := r.Opportunities[0]
	if o.GPUTimeUs != 15 || o.Kernels != 3 || o.LaunchesSaved != 2 {
		t.Errorf("gpu %v us, kernels %d, launches saved %d; want 15, 3, 2", o.GPUTimeUs, o.Kernels, o.LaunchesSaved)
	}
}

func TestBiasDropoutAddParams(t *testing.T) {
	tr := synth(
		op{name: "mm", in: []string{"bf16:1024x768", "bf16:768x768"}},
		op{name: "add", in: []string{"bf16:1024x768", "bf16:768", "=1"}},
		op{name: "dropout", in: []string{"bf16:1024x768", "=0.1", "=True"}},
		op{name: "add", in: []string{"bf16:1024x768", "bf16:1024x768", "=1"}},
	)
	r, err := Analyze([]*trace.Trace{tr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Opportunities) != 1 {
		t.Fatalf("got %+v", r.Opportunities)
	}
	o := r.Opportunities[0]
	g := o.Shapes[0]
	if o.Pattern != "dropout_add" || g.Params.Bias == nil || !*g.Params.Bias || g.Params.P == nil || *g.Params.P != 0.1 ||
		len(g.Dims) != 3 || o.Kernels != 3 || g.Bytes != 1024*768*(2+2+2)+768*2 { // x, r, y (no mask: regenerated from the seed) + b
		t.Errorf("%s: params %+v dims %v kernels %d bytes %d", o.Pattern, g.Params, g.Dims, o.Kernels, g.Bytes)
	}
}

func TestRMSNormCasting(t *testing.T) {
	norm := []op{
		{name: "linear", in: []string{"bf16:8x128x768", "bf16:768x768", ""}},
		{name: "to", in: []string{"bf16:8x128x768", "=6", "=False", "=False", ""}},
		{name: "pow", in: []string{"f32:8x128x768", "=2"}},
		{name: "mean", in: []string{"f32:8x128x768", "=[-1]", "=True", ""}},
		{name: "add", in: []string{"f32:8x128x1", "#", "=1"}},
		{name: "rsqrt", in: []string{"f32:8x128x1"}},
		{name: "mul", in: []string{"f32:8x128x768", "f32:8x128x1"}},
	}
	tests := []struct {
		name, casting string
		dtype         DType
		tail          []op
	}{
		{"llama", "llama", BF16, []op{
			{name: "to", in: []string{"f32:8x128x768", "=15", "=False", "=False", ""}},
			{name: "mul", in: []string{"bf16:768", "bf16:8x128x768"}},
		}},
		{"gemma", "gemma", BF16, []op{
			{name: "add", in: []string{"f32:768", "#", "=1"}},
			{name: "mul", in: []string{"f32:8x128x768", "f32:768"}},
		}},
		{"none", "none", BF16, []op{
			{name: "mul", in: []string{"f32:768", "f32:8x128x768"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ops := append(append([]op(nil), norm...), tc.tail...)
			r, err := Analyze([]*trace.Trace{synth(ops...)}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Opportunities) != 1 || r.Opportunities[0].Pattern != "rmsnorm_pyops" {
				t.Fatalf("got %+v", r.Opportunities)
			}
			g := r.Opportunities[0].Shapes[0]
			if g.Params.Casting != tc.casting || g.DType != tc.dtype || g.Rows != 8*128 || g.Cols != 768 {
				t.Errorf("casting %q dtype %s rows %d cols %d; want %q %s 1024 768", g.Params.Casting, g.DType, g.Rows, g.Cols, tc.casting, tc.dtype)
			}
		})
	}
}

// pos_emb + x -> LayerNorm: the group's x is the operand of the sum's shape, whichever side
// of the add it was on, and the broadcast one is the residual.
func TestAddLayerNormBroadcastOperandOrder(t *testing.T) {
	for _, in := range [][]string{
		{"f32:1x128x768", "f32:8x128x768", "=1"},
		{"f32:8x128x768", "f32:1x128x768", "=1"},
	} {
		tr := synth(op{name: "add", in: in},
			op{name: "layer_norm", in: []string{"f32:8x128x768", "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}})
		r, err := Analyze([]*trace.Trace{tr}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var dims [][]int64
		for _, o := range r.Opportunities {
			if o.Pattern == "add_layernorm" {
				dims = o.Shapes[0].Dims
			}
		}
		if len(dims) != 2 || dimsKey(dims[0]) != "8x128x768" || dimsKey(dims[1]) != "1x128x768" {
			t.Errorf("add(%s, %s): dims %v, want x [8 128 768] then the residual [1 128 768]", in[0], in[1], dims)
		}
	}
}

func dimsKey(d []int64) string {
	s := ""
	for i, v := range d {
		if i > 0 {
			s += "x"
		}
		s += itoa(int(v))
	}
	return s
}

// tail appends ops and kernels after a synthetic trace's ops (backward nodes, optimizer
// steps), each later than the last; done stretches the trace's step over them.
type tail struct {
	tr  *trace.Trace
	end int64
}

func newTail(tr *trace.Trace) *tail { return &tail{tr, tr.Steps[0].Dur} }

// op appends an op (a root when parent is -1) and returns its id.
func (b *tail) op(name string, parent int32) int32 {
	tr := b.tr
	id := int32(len(tr.Ops))
	tr.Ops = append(tr.Ops, trace.Op{Name: name, Kind: trace.KindCPUOp, Start: b.end, Dur: 10_000, Parent: parent,
		Bwd: -1, Fwd: -1, Py: -1, ExternalID: -1, RecordFunctionID: -1, EvIdx: -1, Seq: -1, FwdThreadID: -1, Step: -1})
	if parent >= 0 {
		tr.Ops[parent].Children = append(tr.Ops[parent].Children, id)
	} else {
		tr.Threads[0].Roots = append(tr.Threads[0].Roots, id)
	}
	b.end += 1_000
	return id
}

// kernel appends a kernel of us microseconds that op launched.
func (b *tail) kernel(op int32, name string, us int64) {
	tr := b.tr
	tr.Acts = append(tr.Acts, trace.Activity{Name: name, Start: b.end, Dur: us * 1_000, Op: op})
	tr.Ops[op].Acts = append(tr.Ops[op].Acts, int32(len(tr.Acts)-1))
	b.end += 20_000
}

func (b *tail) done() { b.tr.Steps[0].Dur = b.end }
