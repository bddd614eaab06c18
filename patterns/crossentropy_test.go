package patterns

import (
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// crossEntropyTraces are the cross_entropy instances of the shared H200 traces, counted from
// their execution traces (the pattern was added after EXPECTED.json was computed): the loss
// of each training step; none in the inference traces and in the models without one.
var crossEntropyTraces = map[string]int{
	"bert_train_bf16.json.gz":       2, // autocast: bf16 logits, nll_loss's upcast inside
	"gpt2_train_bf16.json.gz":       2, // HF's logits.float() before the loss
	"gpt2_train_sdpa_stack.json.gz": 1,
	"llama_train_bf16.json.gz":      2,
}

// TestCrossEntropyChains checks what the matcher takes of the loss: the model's fp32 copy of
// 16-bit logits when only the loss reads it (upcast "float", the case in the logits' type),
// autocast's upcast inside the loss, the recorded reduction and ignore_index, and what it
// refuses.
func TestCrossEntropyChains(t *testing.T) {
	lmHead := op{name: "linear", in: []string{"bf16:8x128x768", "bf16:50257x768", ""}}
	upcast := op{name: "to", in: []string{"bf16:8x128x50257", "=6", "=False", "=False", ""}}
	view := op{name: "view", in: []string{"f32:8x128x50257", "=[-1, 50257]"}}
	ce := func(x, target, weight, reduction, ii, ls string, kids ...op) op {
		return op{name: "cross_entropy_loss", in: []string{x, target, weight, reduction, ii, ls}, kids: kids}
	}
	nllUpcast := op{name: "nll_loss", in: []string{"bf16:1024x50257", "i64:1024", "", "=1", "=-100"},
		kids: []op{{name: "to", in: []string{"bf16:1024x50257", "=6", "=False", "=False", ""}}}}
	tests := []struct {
		name      string
		ops       []op
		n         int
		dtype     DType
		upcast    string
		reduction string
		ii        int64
		withCast  bool
	}{
		{"HF causal-LM loss: logits.float() taken", []op{lmHead, upcast, view,
			ce("f32:1024x50257", "i64:1024", "", "=1", "=-100", "=0.")}, 1, BF16, "float", "mean", -100, true},
		{"the fp32 copy read again is left to eager", []op{lmHead, upcast, view,
			ce("f32:1024x50257", "i64:1024", "", "=1", "=-100", "=0."),
			{name: "argmax", in: []string{"f32:8x128x50257", "=-1", "=False"}}}, 1, FP32, "none", "mean", -100, false},
		{"autocast: bf16 logits, nll_loss upcast inside", []op{
			{name: "linear", in: []string{"bf16:1024x768", "bf16:50257x768", ""}},
			ce("bf16:1024x50257", "i64:1024", "", "=2", "=0", "=0.", nllUpcast)}, 1, BF16, "autocast", "sum", 0, false},
		{"fp32 logits, reduction none", []op{
			{name: "linear", in: []string{"f32:1024x768", "f32:50257x768", ""}},
			ce("f32:1024x50257", "i64:1024", "", "=0", "=-1", "=0.")}, 1, FP32, "none", "none", -1, false},
		{"class weights refused", []op{
			ce("f32:1024x50257", "i64:1024", "f32:50257", "=1", "=-100", "=0.")}, 0, "", "", "", 0, false},
		{"label smoothing 0.1 (the case's label_smoothing)", []op{
			ce("f32:1024x50257", "i64:1024", "", "=1", "=-100", "=0.1")}, 1, FP32, "none", "mean", -100, false},
		{"label smoothing outside [0, 1] refused", []op{
			ce("f32:1024x50257", "i64:1024", "", "=1", "=-100", "=1.5")}, 0, "", "", "", 0, false},
		{"probability targets refused", []op{
			ce("f32:1024x50257", "f32:1024x50257", "", "=1", "=-100", "=0.")}, 0, "", "", "", 0, false},
		{"[N, C, S] logits refused (the class dim is 1)", []op{
			ce("f32:8x50257x128", "i64:8x128", "", "=1", "=-100", "=0.")}, 0, "", "", "", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := synth(tc.ops...)
			r, err := Analyze([]*trace.Trace{tr}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var o *Opportunity
			for i := range r.Opportunities {
				if r.Opportunities[i].Pattern == "cross_entropy" {
					o = &r.Opportunities[i]
				}
			}
			if tc.n == 0 {
				if o != nil {
					t.Fatalf("matched: %+v", o.Shapes)
				}
				return
			}
			if o == nil || o.Instances != tc.n {
				t.Fatalf("got %+v, want %d instance(s)", o, tc.n)
			}
			g := o.Shapes[0]
			if g.DType != tc.dtype || g.Params.Upcast != tc.upcast || g.Params.Reduction != tc.reduction ||
				g.Params.IgnoreIndex == nil || *g.Params.IgnoreIndex != tc.ii || g.Rows != 1024 || g.Cols != 50257 {
				t.Errorf("dtype %s upcast %q reduction %q ignore_index %v rows %d cols %d; want %s %q %q %d 1024 50257",
					g.DType, g.Params.Upcast, g.Params.Reduction, g.Params.IgnoreIndex, g.Rows, g.Cols, tc.dtype, tc.upcast,
					tc.reduction, tc.ii)
			}
			c, why := patternByID("cross_entropy").Case(g)
			if why != "" {
				t.Fatalf("no case: %s", why)
			}
			ls := 0.0
			if strings.HasPrefix(tc.name, "label smoothing") {
				ls = 0.1
			}
			if c.Dtype != string(tc.dtype) || len(c.Shapes) != 2 || c.Params.Upcast != tc.upcast ||
				c.Params.LabelSmoothing != ls {
				t.Errorf("case %+v", c)
			}
			// the cast's kernel is the instance's when it takes the cast: 2 or 1 of the
			// ops' kernels (a synthetic op launches one)
			kernels := 1
			if tc.withCast {
				kernels = 2
			}
			if o.Kernels < kernels {
				t.Errorf("%d kernels, want at least %d", o.Kernels, kernels)
			}
		})
	}
}

func TestCrossEntropyCaseCheck(t *testing.T) {
	p := patternByID("cross_entropy")
	for _, tc := range []struct {
		c    Case
		want string
	}{
		{Case{Dtype: "bf16", Shapes: [][]int64{{8, 10}, {8}}}, ""},
		{Case{Dtype: "bf16", Shapes: [][]int64{{8, 10}, {8}}, Params: KernelParams{IgnoreIndex: "3"}}, ""},
		{Case{Dtype: "bf16", Shapes: [][]int64{{8, 10}, {8}}, Params: KernelParams{IgnoreIndex: "2.5"}}, "ignore_index"},
		{Case{Dtype: "bf16", Shapes: [][]int64{{2, 8, 10}}}, "logits [M, V]"},
		{Case{Dtype: "bf16", Shapes: [][]int64{{8, 10}, {7}}}, "target [M]"},
	} {
		err := p.check(tc.c)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}

func TestCrossEntropyMemoryAdvice(t *testing.T) {
	o := &Opportunity{Pattern: "cross_entropy", BackwardInstances: 2, Shapes: []ShapeGroup{
		{Dims: [][]int64{{4096, 8192}, {4096}}, DType: BF16, Params: Params{Upcast: "float"}},
		{Dims: [][]int64{{4096, 30522}, {4096}}, DType: BF16, Params: Params{Upcast: "autocast"}},
		{Dims: [][]int64{{32, 1000}, {32}}, DType: FP32, Params: Params{Upcast: "none"}},
	}}
	got := adviseCrossEntropy(o)
	want := []string{
		"[4096,8192] bf16: eager keeps 128 MiB of log-probabilities from the forward to the backward, the fused loss 16.0 KiB; nor is the model's fp32 copy of the logits (128 MiB, alive while the forward runs) made",
		"[4096,30522] bf16: eager keeps 238 MiB of log-probabilities from the forward to the backward, the fused loss 16.0 KiB",
		"[32,1000] fp32: eager keeps 125.0 KiB of log-probabilities from the forward to the backward, the fused loss 0.1 KiB",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	o.BackwardInstances = 0 // inference: nothing is saved for a backward
	if got := adviseCrossEntropy(o); got != nil {
		t.Errorf("inference: %q", got)
	}
}
