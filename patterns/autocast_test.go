package patterns

import (
	"slices"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/program"
	"github.com/fuseadvise/fuseadvise/trace"
)

// TestGEMMCasts: autocast's cast of a chain's fp32 value inside a GEMM becomes a cast step
// and an output of the chain's program (Into naming the GEMM), one per GEMM; the fp32 value
// stays an output only where something else reads it; a weight's cast, a value used twice in
// one GEMM and a cast to fp32 are not taken; and the chain's instance claims the casts'
// kernels, so the coverage's unclaimed autocast activations drop by them.
func TestGEMMCasts(t *testing.T) {
	const x = "f32:8x128x768"
	castInto := func(gemm string, ins ...string) op { // a GEMM whose first input autocast casts
		return op{name: gemm, in: ins, kids: []op{{name: "to", in: []string{ins[0], "=15"}}}}
	}
	affine := []op{
		{name: "mul", in: []string{x, "f32:768"}},
		{name: "add", in: []string{x, "f32:768", "=1"}},
	}
	tests := []struct {
		name    string
		ops     []op
		wantOps string   // the chain's ops, "" for no chain
		into    []string // the program's Into
		outputs []int
		leftUs  float64 // activation casts left unclaimed (another operand's)
	}{
		{"one GEMM reads the value", append(slices.Clone(affine),
			castInto("linear", x, "f32:3072x768", "f32:3072")),
			"mul,add,to", []string{"linear"}, []int{2}, 0},
		{"two GEMMs: a copy each", append(slices.Clone(affine),
			castInto("linear", x, "f32:3072x768", "f32:3072"),
			castInto("linear", x, "f32:768x768")),
			"mul,add,to,to", []string{"linear", "linear"}, []int{2, 3}, 0},
		{"another reader keeps the fp32 value", append(slices.Clone(affine),
			castInto("linear", x, "f32:3072x768", "f32:3072"),
			op{name: "linear", in: []string{x, "f32:768x768"}}), // fp32: no cast
			"mul,add,to", []string{"", "linear"}, []int{1, 2}, 0},
		{"one op and its GEMM's cast", []op{
			{name: "add", in: []string{x, "f32:768", "=1"}},
			castInto("linear", x, "f32:3072x768", "f32:3072")},
			"add,to", []string{"linear"}, []int{1}, 0},
		{"one op without a cast is no chain", []op{
			{name: "add", in: []string{x, "f32:768", "=1"}},
			{name: "linear", in: []string{x, "f32:3072x768", "f32:3072"}}},
			"", nil, nil, 0},
		{"the value as a weight", append(slices.Clone(affine),
			op{name: "linear", in: []string{"f32:4x768", x}, kids: []op{
				{name: "to", in: []string{"f32:4x768", "=15"}}, {name: "to", in: []string{x, "=15"}}}}),
			"mul,add", nil, []int{1}, 0},
		{"a matmul's second operand", append(slices.Clone(affine),
			op{name: "matmul", in: []string{"f32:8x64x128", x}, kids: []op{
				{name: "to", in: []string{"f32:8x64x128", "=15"}}, {name: "to", in: []string{x, "=15"}}}}),
			"mul,add,to", []string{"matmul"}, []int{2}, 5},
		{"a cast to fp32 is not autocast's 16 bits", append(slices.Clone(affine),
			op{name: "linear", in: []string{x, "f32:3072x768"}, kids: []op{{name: "to", in: []string{x, "=6"}}}}),
			"mul,add", nil, []int{1}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := synth(tc.ops...)
			r, err := Analyze([]*trace.Trace{tr}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var found *GenericChain
			for i := range r.GenericChains {
				if r.GenericChains[i].Program != nil {
					found = &r.GenericChains[i]
				}
			}
			if tc.wantOps == "" {
				if found != nil {
					t.Fatalf("got chain %v, want none", found.Ops)
				}
				return
			}
			if found == nil {
				t.Fatalf("no chain, want %s", tc.wantOps)
			}
			p := found.Program
			if got := strings.Join(found.Ops, ","); got != tc.wantOps {
				t.Errorf("ops %s, want %s", got, tc.wantOps)
			}
			if !slices.Equal(p.Into, tc.into) || !slices.Equal(p.Outputs, tc.outputs) {
				t.Errorf("into %q outputs %v, want %q %v", p.Into, p.Outputs, tc.into, tc.outputs)
			}
			for k, into := range p.Into {
				if into != "" && p.Steps[p.Outputs[k]].DType != program.BF16 {
					t.Errorf("output %d: %s, want bf16", k, p.Steps[p.Outputs[k]].DType)
				}
			}
			if err := p.Validate(); err != nil {
				t.Error(err)
			}
			casts := strings.Count(tc.wantOps, "to")
			// the chain's kernels: its ops' and its casts' (5 us each)
			if want := 5 * float64(len(found.Ops)); found.GPUTimeUs != want {
				t.Errorf("GPU time %v us, want %v", found.GPUTimeUs, want)
			}
			left := 0.0
			if a := r.Coverage.Autocast; a != nil {
				left = a.ActivationsUs
			}
			if casts > 0 && left != tc.leftUs {
				t.Errorf("autocast activations unclaimed: %v us, want %v", left, tc.leftUs)
			}
		})
	}
}

// TestOutputCasts: a catalog instance whose template writes its output in another type
// (CastsOutput: add_layernorm, gelu_pyops, rmsnorm_pyops) takes the casts of that output
// where its readers are all GEMMs that cast it to bf16 (out_dtype becomes bf16, the casts'
// kernels the instance's), and not where the output has another reader too or a GEMM casts
// it to fp32.
func TestOutputCasts(t *testing.T) {
	const x = "f32:8x128x768"
	ln := op{name: "layer_norm", in: []string{x, "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}}
	add := op{name: "add", in: []string{x, x, "=1"}}
	linear := func(cast string) op {
		return op{name: "linear", in: []string{x, "f32:3072x768", "f32:3072"}, kids: []op{{name: "to", in: []string{x, cast}}}}
	}
	tests := []struct {
		name string
		ops  []op
		out  DType
		us   float64 // the instance's GPU time: its ops' kernels, 5 us each
	}{
		{"one GEMM reads y", []op{add, ln, linear("=15")}, BF16, 15},
		// q, k and v: each GEMM's cast is the instance's, y written once in bf16
		{"three GEMMs read y", []op{add, ln, linear("=15"), linear("=15"), linear("=15")}, BF16, 25},
		{"a GEMM that keeps y in fp32 beside one that casts it", []op{add, ln, linear("=15"), linear("=6")}, FP32, 10},
		{"another reader keeps y in fp32", []op{add, ln, linear("=15"), {name: "relu", in: []string{x}}}, FP32, 10},
		{"a cast to fp32 is not autocast's", []op{add, ln, linear("=6")}, FP32, 10},
		// the residual add after the branch is linked to the norm's input (the pre-norm
		// reading), which a post-norm block (BERT) would read as y: undecided, kept
		{"a residual join turned away from y", []op{add, ln, linear("=15"),
			{name: "linear", in: []string{"f32:8x128x3072", "f32:768x3072"}},
			{name: "add", in: []string{x, x, "=1"}}}, FP32, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Analyze([]*trace.Trace{synth(tc.ops...)}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var got *ShapeGroup
			for _, o := range r.Opportunities {
				if o.Pattern == "add_layernorm" && len(o.Shapes) == 1 {
					got = &o.Shapes[0]
				}
			}
			if got == nil {
				t.Fatalf("no add_layernorm shape group: %+v", r.Opportunities)
			}
			if got.Params.OutDType != tc.out || got.GPUTimeUs != tc.us {
				t.Errorf("out_dtype %q, GPU time %v us; want %q, %v us", got.Params.OutDType, got.GPUTimeUs, tc.out, tc.us)
			}
			undecided := slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "cannot be told from a post-norm one") })
			if want := strings.HasPrefix(tc.name, "a residual join"); undecided != want {
				t.Errorf("a note on the undecided cast: %v, want %v (%q)", undecided, want, r.Notes)
			}
		})
	}
}

// TestCastBackwardClaims: the autocast casts an instance makes disappear are its in the
// coverage with their backward. A layernorm_linear (TakesGEMMCasts) claims the cast of the
// norm's output in its GEMM and that cast's ToCopyBackward0, but not the sum of the norm
// output's gradients after it (a residual reading the output keeps that sum). A generic
// chain that took the cast into a GEMM as an output of its own claims that sum too: its fused
// backward gets each output's gradient and adds them itself. The cast's kernel is launched
// under aten::_to_copy in aten::to, its backward linked to the _to_copy, as torch records them.
func TestCastBackwardClaims(t *testing.T) {
	const x = "f32:8x128x768"
	linear := op{name: "linear", in: []string{x, "bf16:3072x768", "bf16:3072"}, kids: []op{
		{name: "to", in: []string{x, "=15"}, kids: []op{{name: "_to_copy", in: []string{x, "=15"}}}}}}
	tests := []struct {
		name    string
		ops     []op
		pattern string
		claimed float64 // claimed with the backward, µs
		left    float64 // autocast's casts unclaimed, µs (the engine's sum after the cast's backward is counted as its)
	}{
		// memory-bound: the norm 5, the cast 5, its backward 7, the sum 3 (the GEMM is compute)
		{"layernorm_linear", []op{
			{name: "layer_norm", in: []string{x, "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}}, linear},
			"layernorm_linear", 5 + 5 + 7, 3},
		// and the affine 10 (another reader, an fp32 GEMM, keeps the fp32 value an output):
		// the chain's mul, add and cast, the cast's backward and the sum
		{"a generic chain's cast", []op{
			{name: "mul", in: []string{x, "f32:768"}},
			{name: "add", in: []string{x, "f32:768", "=1"}},
			linear,
			{name: "linear", in: []string{x, "f32:768x768"}}},
			"generic", 5 + 5 + 5 + 7 + 3, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := synth(tc.ops...)
			var cast, toCopy int32 = -1, -1
			for i := range tr.Ops {
				switch tr.Ops[i].Name {
				case "aten::to":
					cast = int32(i)
				case "aten::_to_copy":
					toCopy = int32(i)
				}
			}
			for _, a := range tr.Ops[cast].Acts { // aten::to launches nothing of its own
				tr.Acts[a].Op = -1
			}
			tr.Ops[cast].Acts = nil
			b := newTail(tr)
			eng := b.op(evaluateFunction+"ToCopyBackward0", -1)
			n := b.op("ToCopyBackward0", eng)
			tr.Ops[n].Fwd, tr.Ops[toCopy].Bwd = toCopy, n
			b.kernel(b.op("aten::to", n), "copy_kernel", 7)
			b.kernel(b.op("aten::add", eng), "add_kernel", 3) // the norm output's gradients added up
			b.done()
			r, err := Analyze([]*trace.Trace{tr}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			found := slices.ContainsFunc(r.Opportunities, func(o Opportunity) bool { return o.Pattern == tc.pattern }) ||
				tc.pattern == "generic" && slices.ContainsFunc(r.GenericChains, func(c GenericChain) bool {
					return c.Program != nil && slices.Contains(c.Ops, "to")
				})
			if !found {
				t.Fatalf("no %s chain: %+v %+v", tc.pattern, r.Opportunities, r.GenericChains)
			}
			if c := r.Coverage; c == nil || c.ClaimedWithBackwardUs != tc.claimed {
				t.Errorf("claimed with the backward %+v, want %v µs", c, tc.claimed)
			}
			left := 0.0
			if a := r.Coverage.Autocast; a != nil {
				left = a.ActivationsUs
			}
			if left != tc.left {
				t.Errorf("autocast casts left unclaimed: %v µs, want %v", left, tc.left)
			}
		})
	}
}

// TestOutputCastsBackwardSums: where several GEMMs read the output the kernel writes cast, the
// autograd engine sums their gradients in that type: the fused backward's estimate counts one
// pointwise add a reader past the first.
func TestOutputCastsBackwardSums(t *testing.T) {
	m := DefaultCostModel()
	const device = "NVIDIA H200"
	in := Instance{Pattern: "rmsnorm_pyops", Dims: [][]int64{{4, 512, 1024}, {1024}}, DType: FP32,
		Params: Params{Casting: "llama", OutDType: BF16, OutCast: true},
		Elems:  4 * 512 * 1024, Rows: 4 * 512, Cols: 1024}
	in.Bytes = in.Elems*4 + in.Cols*4 + in.Elems*2
	in.WriteBytes = in.Elems * 2
	tr := &trace.Trace{}
	var us []float64
	for _, readers := range []int{1, 3} {
		in.CastReaders = readers
		u, ok := estimateBackward(&m, tr, &in, device)
		if !ok {
			t.Fatalf("no backward estimate for %+v", in)
		}
		us = append(us, u)
	}
	add, ok := m.PointwisePassUs(device, 3*in.Elems*2, in.Elems*2)
	if !ok || add <= 0 {
		t.Fatalf("no pointwise pass estimate")
	}
	if d := us[1] - us[0]; d < 2*add-1e-6 || d > 2*add+1e-6 {
		t.Errorf("three readers' backward %v µs, one reader's %v: want two bf16 adds (%v µs each) between them", us[1], us[0], add)
	}
}

// TestConcatCastSums: a layernorm_linear whose GEMMs run as one over their concatenated
// weights (BERT's Q, K and V: ConcatN) gives the norm's output one gradient, so the engine's
// sums of its readers' gradients after the casts' backward are the instance's, all but one:
// two of a pre-norm block's two, two of a post-norm block's three (its residual keeps one).
// GEMMs that cannot be concatenated (other weights' shapes) claim none of them.
func TestConcatCastSums(t *testing.T) {
	const x = "f32:8x128x768"
	// (weights of other output sizes than 768: their outputs are no candidates for the next
	// GEMM's input in the synthetic trace's inferred dataflow)
	linear := func(w string) op {
		in := []string{x, w}
		if w != "bf16:1536x768" {
			in = append(in, "bf16:"+strings.TrimSuffix(strings.TrimPrefix(w, "bf16:"), "x768"))
		}
		return op{name: "linear", in: in, kids: []op{
			{name: "to", in: []string{x, "=15"}, kids: []op{{name: "_to_copy", in: []string{x, "=15"}}}}}}
	}
	ln := op{name: "layer_norm", in: []string{x, "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}}
	for _, tc := range []struct {
		name    string
		weights []string
		sums    int     // the sums in the casts' backward nodes
		claimed float64 // the sums claimed, µs (3 each)
	}{
		{"pre-norm Q, K, V", []string{"bf16:1024x768", "bf16:1280x768", "bf16:2048x768"}, 2, 6},
		{"post-norm Q, K, V", []string{"bf16:1024x768", "bf16:1280x768", "bf16:2048x768"}, 3, 6},
		// one GEMM with a bias, one without: not one GEMM over concatenated weights
		{"not concatenated", []string{"bf16:1024x768", "bf16:1536x768"}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := []op{ln}
			for _, w := range tc.weights {
				ops = append(ops, linear(w))
			}
			tr := synth(ops...)
			var casts, toCopies []int32
			for i := range tr.Ops {
				switch tr.Ops[i].Name {
				case "aten::to":
					casts = append(casts, int32(i))
				case "aten::_to_copy":
					toCopies = append(toCopies, int32(i))
				}
			}
			for _, c := range casts { // aten::to launches nothing of its own
				for _, a := range tr.Ops[c].Acts {
					tr.Acts[a].Op = -1
				}
				tr.Ops[c].Acts = nil
			}
			b := newTail(tr)
			for k, tc2 := range toCopies {
				eng := b.op(evaluateFunction+"ToCopyBackward0", -1)
				n := b.op("ToCopyBackward0", eng)
				tr.Ops[n].Fwd, tr.Ops[tc2].Bwd = tc2, n
				b.kernel(b.op("aten::to", n), "copy_kernel", 7)
				if k >= len(toCopies)-tc.sums {
					b.kernel(b.op("aten::add", eng), "add_kernel", 3) // the norm output's gradients added up
				}
			}
			b.done()
			r, err := Analyze([]*trace.Trace{tr}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var found bool
			for _, o := range r.Opportunities {
				found = found || o.Pattern == "layernorm_linear"
			}
			if !found {
				t.Fatalf("no layernorm_linear: %+v", r.Opportunities)
			}
			// the norm 5, the casts 5 each, their backward 7 each, and the sums claimed
			want := 5 + 12*float64(len(tc.weights)) + tc.claimed
			if c := r.Coverage; c == nil || c.ClaimedWithBackwardUs != want {
				t.Errorf("claimed with the backward %+v, want %v µs", c, want)
			}
		})
	}
}
