package patterns

import (
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// optUpdate is one op of a synthetic optimizer step: its name, its first input (a TensorList of
// shapes, or a tensor's dims and type for a per-tensor op), its kernel's name and duration.
type optUpdate struct {
	name   string
	list   [][]int64 // a TensorList's element sizes (nil: not recorded)
	dims   []int64   // a tensor's sizes (per-tensor ops)
	typ    string    // the tensor's type (per-tensor ops)
	kernel string
	ns     int64
}

// optimizerTrace builds a trace of steps optimizer steps of class, each running updates.
func optimizerTrace(class string, steps int, updates []optUpdate) *trace.Trace {
	t := &trace.Trace{Path: "synthetic", Rank: -1, Devices: []trace.Device{{Name: "NVIDIA H200"}}}
	t.Threads = []trace.Thread{{Pid: "1", Tid: "1"}}
	var now int64
	for range steps {
		step := int32(len(t.Ops))
		t.Ops = append(t.Ops, trace.Op{Name: "Optimizer.step#" + class + ".step", Kind: trace.KindUserAnnotation, Start: now,
			Parent: -1, Bwd: -1, Fwd: -1, Py: -1, ExternalID: -1, RecordFunctionID: -1, Seq: -1})
		t.Threads[0].Roots = append(t.Threads[0].Roots, step)
		for _, u := range updates {
			id := int32(len(t.Ops))
			in := trace.Input{Type: u.typ, Dims: u.dims}
			if u.dims == nil {
				in = trace.Input{Type: "TensorList", List: u.list}
			}
			t.Ops = append(t.Ops, trace.Op{Name: "aten::" + u.name, Kind: trace.KindCPUOp, Start: now, Dur: 10_000, Parent: step,
				Inputs: []trace.Input{in}, Bwd: -1, Fwd: -1, Py: -1, ExternalID: -1, RecordFunctionID: -1, Seq: -1})
			t.Ops[step].Children = append(t.Ops[step].Children, id)
			t.Acts = append(t.Acts, trace.Activity{Name: u.kernel, Start: now, Dur: u.ns, Op: id})
			t.Ops[id].Acts = []int32{int32(len(t.Acts) - 1)}
			now += 10_000
		}
		t.Ops[step].Dur = now - t.Ops[step].Start
	}
	t.Steps = []trace.Step{{Name: "whole trace", Num: -1, Dur: now}}
	return t
}

// adamwForeach is torch.optim.AdamW's foreach step (weight decay, lerp, the second moment,
// its square root and the addcdiv update), kernels of type functor with the update's time ns.
func adamwForeach(list [][]int64, functor string, addcdivNs int64) []optUpdate {
	k := "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::PointwiseOpScalarListFunctor<" + functor + ", 3, 3, 0>, std::multiplies<float>, float>"
	return []optUpdate{
		{name: "_foreach_mul_", list: list, kernel: k, ns: 100_000},
		{name: "_foreach_lerp_", list: list, kernel: k, ns: 150_000},
		{name: "_foreach_mul_", list: list, kernel: k, ns: 100_000},
		{name: "_foreach_addcmul_", list: list, kernel: k, ns: 150_000},
		{name: "_foreach_sqrt", list: list, kernel: k, ns: 100_000},
		{name: "_foreach_div_", list: list, kernel: k, ns: 100_000},
		{name: "_foreach_add_", list: list, kernel: k, ns: 100_000},
		{name: "_foreach_addcdiv_", list: list, kernel: k, ns: addcdivNs},
	}
}

func TestOptimizerSteps(t *testing.T) {
	shapes := [][]int64{{768, 768}, {768}, {3072, 768}, {768}}
	var loop []optUpdate // a per-tensor loop: 40 tensors of 5 ops each
	for range 40 {
		for _, n := range []string{"mul_", "lerp_", "addcmul_", "sqrt", "addcdiv_"} {
			loop = append(loop, optUpdate{name: n, dims: []int64{64, 64}, typ: "c10::BFloat16", kernel: "vectorized_elementwise_kernel", ns: 2_000})
		}
	}
	tests := []struct {
		name    string
		class   string
		updates []optUpdate
		want    string // "" for no finding, else the impl
		fused   float64
		params  int64
		dtype   DType
		why     string
	}{
		{name: "foreach AdamW with shapes", class: "AdamW", updates: adamwForeach(shapes, "float", 200_000),
			want: "foreach", fused: round1(2 * 200 * 7 / 4.0 * fusedAdamPace), params: 768*768 + 768 + 3072*768 + 768, dtype: FP32},
		{name: "foreach Adam without shapes (a long list)", class: "Adam", updates: adamwForeach(nil, "c10::BFloat16", 100_000),
			want: "foreach", fused: round1(2 * 100 * 7 / 4.0 * fusedAdamPace)},
		{name: "amsgrad moves two more lists", class: "AdamW",
			updates: append(adamwForeach(shapes, "c10::Half", 400_000), optUpdate{name: "_foreach_maximum_", list: shapes, kernel: "k", ns: 1_000}),
			want:    "foreach", fused: round1(2 * 400 * 9 / 4.0 * fusedAdamPace), params: 768*768 + 768 + 3072*768 + 768, dtype: FP16},
		{name: "already fused", class: "AdamW", updates: []optUpdate{{name: "_fused_adamw_", list: shapes, kernel: "k", ns: 300_000}}},
		{name: "a custom optimizer's foreach step", class: "Shampoo", updates: adamwForeach(shapes, "float", 200_000)},
		{name: "SGD foreach: advice, no estimate", class: "SGD", updates: adamwForeach(shapes, "float", 200_000),
			want: "foreach", why: "the fused step is estimated for Adam and AdamW only"},
		{name: "AdamW per-tensor loop", class: "AdamW", updates: loop, want: "per-tensor loop",
			fused: round1(2 * 40 * 2 * 7 / 4.0 * fusedAdamPace), params: 40 * 64 * 64, dtype: BF16},
		{name: "a short loop is not reported", class: "AdamW", updates: loop[:20]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := optimizerSteps(optimizerTrace(tc.class, 2, tc.updates), nil)
			if tc.want == "" {
				if len(got) != 0 {
					t.Fatalf("got %+v, want no finding", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("got %d findings, want 1", len(got))
			}
			f := got[0]
			if f.Impl != tc.want || f.Steps != 2 || f.Why != tc.why {
				t.Errorf("impl %q steps %d why %q, want %q 2 %q", f.Impl, f.Steps, f.Why, tc.want, tc.why)
			}
			if f.EstFusedUs != tc.fused {
				t.Errorf("est_fused_us %v, want %v", f.EstFusedUs, tc.fused)
			}
			if tc.fused > 0 && f.EstSavingUs != round1(f.GPUTimeUs-tc.fused) {
				t.Errorf("est_saving_us %v, want %v - %v", f.EstSavingUs, f.GPUTimeUs, tc.fused)
			}
			if f.Params != tc.params || f.DType != tc.dtype {
				t.Errorf("params %d %q, want %d %q", f.Params, f.DType, tc.params, tc.dtype)
			}
			if tc.fused > 0 && !strings.Contains(f.Advice, "fused=True") {
				t.Errorf("advice %q does not say fused=True", f.Advice)
			}
		})
	}
}

// TestOptimizerParamShapes: the shapes a step updates, grouped, most elements first.
func TestOptimizerParamShapes(t *testing.T) {
	shapes := [][]int64{{768}, {768, 768}, {768}, {3072, 768}, {768, 768}}
	f := optimizerSteps(optimizerTrace("AdamW", 1, adamwForeach(shapes, "float", 100_000)), nil)[0]
	want := []ShapeCount{{Dims: []int64{3072, 768}, Count: 1}, {Dims: []int64{768, 768}, Count: 2}, {Dims: []int64{768}, Count: 2}}
	if len(f.ParamShapes) != len(want) {
		t.Fatalf("param_shapes %v, want %v", f.ParamShapes, want)
	}
	for i := range want {
		if f.ParamShapes[i].Count != want[i].Count || FormatDims([][]int64{f.ParamShapes[i].Dims}) != FormatDims([][]int64{want[i].Dims}) {
			t.Errorf("param_shapes[%d] = %v, want %v", i, f.ParamShapes[i], want[i])
		}
	}
	if f.Tensors != 5 {
		t.Errorf("tensors %d, want 5", f.Tensors)
	}
}

// TestOptimizerTypeNotGuessed: kernels of two types (mixed-precision parameters) or none
// named give no element type and no parameters, the estimate stands (it needs neither).
func TestOptimizerTypeNotGuessed(t *testing.T) {
	shapes := [][]int64{{768}}
	ups := adamwForeach(shapes, "float", 100_000)
	ups = append(ups, adamwForeach(shapes, "c10::BFloat16", 100_000)[7]) // a second group in bf16
	f := optimizerSteps(optimizerTrace("AdamW", 1, ups), nil)[0]
	if f.DType != "" || f.Params != 0 {
		t.Errorf("mixed types: dtype %q params %d, want none", f.DType, f.Params)
	}
	if want := round1(200 * 7 / 4.0 * fusedAdamPace); f.EstFusedUs != want {
		t.Errorf("est_fused_us %v, want %v (both groups' updates)", f.EstFusedUs, want)
	}
}

// TestOptimizerInAnalysis: the finding's saving is in the totals, apart from the chains',
// and its kernels count in the coverage with the optimizer, not as unclaimed.
func TestOptimizerInAnalysis(t *testing.T) {
	tr := optimizerTrace("AdamW", 2, adamwForeach([][]int64{{1024, 1024}}, "float", 200_000))
	r, err := Analyze([]*trace.Trace{tr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Optimizers) != 1 || r.Totals == nil || r.Coverage == nil {
		t.Fatalf("optimizers %d, totals %v, coverage %v", len(r.Optimizers), r.Totals, r.Coverage)
	}
	f := r.Optimizers[0]
	if r.Totals.OptimizerSavingUs != f.EstSavingUs || r.Totals.EstSavingUs != 0 {
		t.Errorf("totals: optimizer %v est %v, want %v and 0", r.Totals.OptimizerSavingUs, r.Totals.EstSavingUs, f.EstSavingUs)
	}
	if r.Coverage.OptimizerUs != f.GPUTimeUs || r.Coverage.WithOptimizerPct != 100 || len(r.Coverage.Unclaimed) != 0 {
		t.Errorf("coverage: optimizer %v µs, %v%%, unclaimed %v; want %v, 100, none", r.Coverage.OptimizerUs, r.Coverage.WithOptimizerPct, r.Coverage.Unclaimed, f.GPUTimeUs)
	}
}

// TestOptimizerParamsFromET: a list too long for Kineto to record (no shapes) takes the
// execution trace's element counts and types; the estimate does not depend on them.
func TestOptimizerParamsFromET(t *testing.T) {
	tr := optimizerTrace("AdamW", 1, adamwForeach(nil, "float", 100_000))
	upd := int32(-1)
	for i, op := range tr.Ops {
		if op.Name == "aten::_foreach_addcdiv_" {
			upd = int32(i)
		}
	}
	list := []trace.Tensor{{ID: 1, Numel: 768 * 768, ItemSize: 4, Elem: "float"}, {ID: 2, Numel: 768, ItemSize: 4, Elem: "float"}}
	et := map[int32]*trace.ETNode{upd: {Name: "aten::_foreach_addcdiv_", Inputs: []trace.Tensor{{ID: -1, List: list}}}}
	f := optimizerSteps(tr, et)[0]
	if f.Tensors != 2 || f.Params != 768*768+768 || f.DType != FP32 {
		t.Errorf("tensors %d params %d dtype %q, want 2 %d fp32", f.Tensors, f.Params, f.DType, 768*768+768)
	}
	if g := optimizerSteps(tr, nil)[0]; g.Params != 0 || g.EstFusedUs != f.EstFusedUs {
		t.Errorf("without the execution trace: params %d, est %v (with: %v)", g.Params, g.EstFusedUs, f.EstFusedUs)
	}
}
