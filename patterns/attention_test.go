package patterns

import (
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/fuseadvise/fuseadvise/trace"
)

// attnOps builds an eager attention chain op by op: q [2, 12, sq, 64] @ kᵀ, then mid (the
// scale, mask and bias ops on the scores), the softmax (fp32 under autocast, cast back),
// post (a dropout), and ·V.
func attnOps(sq, sk string, mid, post []op) []op {
	s := "bf16:2x12x" + sq + "x" + sk
	out := []op{
		{name: "transpose", in: []string{"bf16:2x12x" + sk + "x64", "=-1", "=-2"}},
		{name: "matmul", in: []string{"bf16:2x12x" + sq + "x64", "bf16:2x12x64x" + sk}},
	}
	out = append(out, mid...)
	out = append(out,
		op{name: "softmax", in: []string{"f32:2x12x" + sq + "x" + sk, "=-1", "=6"}},
		op{name: "to", in: []string{"f32:2x12x" + sq + "x" + sk, "=15", "=False", "=False", ""}},
	)
	out = append(out, post...)
	return append(out, op{name: "matmul", in: []string{s, "bf16:2x12x" + sk + "x64"}})
}

// attnInstance analyzes ops and returns the attention shape groups' params (nil when none).
func attnGroups(t *testing.T, ops []op) []ShapeGroup {
	t.Helper()
	r, err := Analyze([]*trace.Trace{synth(ops...)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range r.Opportunities {
		if o.Pattern == "attention" {
			return o.Shapes
		}
	}
	return nil
}

func TestAttentionSynthetic(t *testing.T) {
	scale := op{name: "mul", in: []string{"bf16:2x12x128x128", "#"}}
	toF32 := func(d string) op { return op{name: "to", in: []string{"bf16:" + d, "=6", "=False", "=False", ""}} }
	drop := op{name: "dropout", in: []string{"bf16:2x12x128x128", "=0.1", "=True"},
		kids: []op{{name: "native_dropout", in: []string{"bf16:2x12x128x128", "=0.1", "=True"}}}}
	evalDrop := op{name: "dropout", in: []string{"bf16:2x12x128x128", "=0.", "=False"}}
	tril := []op{ // a causal additive mask built in the forward: tril -> expand
		{name: "tril", in: []string{"f32:128x128", "=0"}},
		{name: "expand", in: []string{"f32:128x128", "=[2, 1, 128, 128]", "=False"}},
	}
	tests := []struct {
		name  string
		ops   []op
		want  map[string]int
		check func(t *testing.T, g ShapeGroup)
	}{
		{"HF causal additive mask, fp32 softmax, dropout (GPT-2, Llama)",
			append(tril, attnOps("128", "128", []op{scale, {name: "add", in: []string{"bf16:2x12x128x128", "f32:2x1x128x128", "=1"}}}, []op{drop})...),
			map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				p := g.Params
				if p.MaskKind != "causal" || p.HeadDim != 64 || p.SeqQ != 128 || p.SeqK != 128 || p.BatchHeads != 24 || p.Heads != 12 ||
					p.P == nil || *p.P != 0.1 || p.ScaleOp != "mul" || p.Scale != nil || g.DType != BF16 {
					t.Errorf("params %+v dtype %s", p, g.DType)
				}
			}},
		{"BERT: additive padding mask",
			attnOps("128", "128", []op{scale, {name: "add", in: []string{"bf16:2x12x128x128", "f32:2x1x1x128", "=1"}}}, []op{drop}),
			map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				if p := g.Params; p.MaskKind != "additive" || !slices.Equal(p.MaskDims, []int64{2, 1, 1, 128}) || p.MaskDType != FP32 {
					t.Errorf("params %+v", p)
				}
			}},
		{"bool padding mask by masked_fill, scale by div, eval dropout skipped",
			attnOps("128", "128", []op{{name: "div", in: []string{"bf16:2x12x128x128", "=8."}},
				{name: "masked_fill", in: []string{"bf16:2x12x128x128", "bool:2x1x1x128", "=-inf"}}, toF32("2x12x128x128")}, []op{evalDrop}),
			map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				p := g.Params
				if p.MaskKind != "bool" || p.MaskFill != "-inf" || p.ScaleOp != "div" || p.Scale == nil || *p.Scale != 8 || p.P != nil {
					t.Errorf("params %+v", p)
				}
			}},
		{"GPT-2's tril buffer: where(bias[:, :, :S, :S], s, min)",
			attnOps("128", "128", []op{scale,
				{name: "slice", in: []string{"bool:1x1x1024x1024", "=2", "=0", "=128", "=1"}},
				{name: "slice", in: []string{"bool:1x1x128x1024", "=3", "=0", "=128", "=1"}},
				{name: "where", in: []string{"bool:1x1x128x128", "bf16:2x12x128x128", "bf16:"}}, toF32("2x12x128x128")}, []op{drop}),
			map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				p := g.Params
				if p.MaskKind != "causal" || p.MaskFrom != "buffer" || p.MaskFill != "" || len(p.MaskDims) != 0 {
					t.Errorf("params %+v", p)
				}
			}},
		{"nanoGPT: masked_fill(bias[:, :, :T, :T] == 0, -inf)",
			attnOps("128", "128", []op{scale,
				{name: "slice", in: []string{"f32:1x1x1024x1024", "=2", "=0", "=128", "=1"}},
				{name: "slice", in: []string{"f32:1x1x128x1024", "=3", "=0", "=128", "=1"}},
				{name: "eq", in: []string{"f32:1x1x128x128", "=0"}},
				{name: "masked_fill", in: []string{"bf16:2x12x128x128", "bool:1x1x128x128", "=-inf"}}, toF32("2x12x128x128")}, nil),
			map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				if p := g.Params; p.MaskKind != "causal" || p.MaskFrom != "buffer" || p.MaskFill != "-inf" {
					t.Errorf("params %+v", p)
				}
			}},
		{"relative position bias [1, H, S, S] and a padding mask",
			attnOps("128", "128", []op{
				{name: "add", in: []string{"bf16:2x12x128x128", "bf16:1x12x128x128", "=1"}},
				{name: "add", in: []string{"bf16:2x12x128x128", "bf16:2x1x1x128", "=1"}}, toF32("2x12x128x128")}, []op{drop}),
			map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				p := g.Params
				if p.BiasKind != "additive" || !slices.Equal(p.BiasDims, []int64{1, 12, 128, 128}) || p.MaskKind != "additive" || p.ScaleOp != "" {
					t.Errorf("params %+v", p)
				}
			}},
		{"ALiBi: a per-head bias broadcast over queries",
			attnOps("128", "128", []op{scale, {name: "add", in: []string{"bf16:2x12x128x128", "bf16:2x12x1x128", "=1"}}, toF32("2x12x128x128")}, nil),
			map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				if p := g.Params; p.BiasKind != "alibi" || p.MaskKind != "none" {
					t.Errorf("params %+v", p)
				}
			}},
		{"BLOOM: baddbmm(alibi, q, kᵀ, alpha) over B*H, then a padding masked_fill",
			[]op{
				{name: "baddbmm", in: []string{"bf16:24x1x128", "bf16:24x128x64", "bf16:24x64x128", "=1", "=0.125"}},
				{name: "view", in: []string{"bf16:24x128x128", "=[2, 12, 128, 128]"}},
				{name: "masked_fill", in: []string{"bf16:2x12x128x128", "bool:2x1x128x128", "=-3.3895313892515355e+38"}},
				{name: "softmax", in: []string{"bf16:2x12x128x128", "=-1", "=6"}},
				{name: "to", in: []string{"f32:2x12x128x128", "=15", "=False", "=False", ""}},
				{name: "view", in: []string{"bf16:2x12x128x128", "=[24, 128, 128]"}},
				{name: "bmm", in: []string{"bf16:24x128x128", "bf16:24x128x64"}},
			},
			map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				p := g.Params
				if p.BiasKind != "alibi" || !slices.Equal(p.BiasDims, []int64{2, 12, 1, 128}) || p.Scale == nil || *p.Scale != 0.125 ||
					p.MaskKind != "bool" || p.MaskFill != "min" || p.Heads != 12 {
					t.Errorf("params %+v", p)
				}
			}},
		{"bmm over B*H without a 4-D view",
			[]op{
				{name: "bmm", in: []string{"bf16:24x128x64", "bf16:24x64x128"}},
				{name: "softmax", in: []string{"bf16:24x128x128", "=-1", ""}},
				{name: "bmm", in: []string{"bf16:24x128x128", "bf16:24x128x64"}},
			},
			map[string]int{"attention": 1},
			func(t *testing.T, g ShapeGroup) {
				if g.Params.Heads != 0 || !slices.Equal(g.Dims[0], []int64{1, 24, 128, 64}) {
					t.Errorf("dims %v params %+v", g.Dims, g.Params)
				}
			}},
		{"Llama: K and V expanded from 4 KV heads (repeat_kv)",
			append([]op{
				{name: "unsqueeze", in: []string{"bf16:2x4x128x64", "=2"}},
				{name: "expand", in: []string{"bf16:2x4x1x128x64", "=[2, 4, 3, 128, 64]", "=False"}},
				{name: "reshape", in: []string{"bf16:2x4x3x128x64", "=[2, 12, 128, 64]"}},
			}, attnOps("128", "128", []op{scale, {name: "add", in: []string{"bf16:2x12x128x128", "bf16:2x1x128x128", "=1"}}, toF32("2x12x128x128")}, nil)...),
			map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				if g.Params.KVHeads != 4 {
					t.Errorf("params %+v", g.Params)
				}
			}},
		{"older GPT-2: a causal buffer where, then an additive padding mask (the bias)", attnOps("128", "128", []op{scale,
			{name: "slice", in: []string{"bool:1x1x1024x1024", "=2", "=0", "=128", "=1"}},
			{name: "slice", in: []string{"bool:1x1x128x1024", "=3", "=0", "=128", "=1"}},
			{name: "where", in: []string{"bool:1x1x128x128", "bf16:2x12x128x128", "bf16:"}},
			{name: "add", in: []string{"bf16:2x12x128x128", "f32:2x1x1x128", "=1"}}}, []op{drop}),
			map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				p := g.Params
				if p.MaskKind != "causal" || p.MaskFrom != "buffer" || p.BiasKind != "additive" || !p.BiasMask ||
					!slices.Equal(p.BiasDims, []int64{2, 1, 1, 128}) || len(g.Dims) != 4 || !slices.Equal(g.Dims[3], []int64{2, 1, 1, 128}) {
					t.Errorf("params %+v dims %v", p, g.Dims)
				}
				if a := attentionCall(p); !strings.Contains(a, "attn_mask=causal_mask + padding_mask") {
					t.Errorf("advice %q", a)
				}
			}},
		{"a padding add before a causal masked_fill with -inf (the same scores either way)", attnOps("128", "128", []op{scale,
			{name: "add", in: []string{"bf16:2x12x128x128", "bf16:2x1x1x128", "=1"}},
			{name: "slice", in: []string{"f32:1x1x1024x1024", "=2", "=0", "=128", "=1"}},
			{name: "slice", in: []string{"f32:1x1x128x1024", "=3", "=0", "=128", "=1"}},
			{name: "eq", in: []string{"f32:1x1x128x128", "=0"}},
			{name: "masked_fill", in: []string{"bf16:2x12x128x128", "bool:1x1x128x128", "=-inf"}}, toF32("2x12x128x128")}, nil),
			map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				if p := g.Params; p.MaskKind != "causal" || p.MaskFill != "-inf" || p.BiasKind != "additive" || !p.BiasMask {
					t.Errorf("params %+v", p)
				}
			}},
		{"CLIP / OWLv2 text: two additive [B, 1, S, S] masks (the second is the bias)", attnOps("128", "128", []op{scale,
			{name: "add", in: []string{"bf16:2x12x128x128", "bf16:2x1x128x128", "=1"}},
			{name: "add", in: []string{"bf16:2x12x128x128", "bf16:1x1x128x128", "=1"}}, toF32("2x12x128x128")}, nil),
			map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				p := g.Params
				if p.MaskKind != "additive" || !slices.Equal(p.MaskDims, []int64{2, 1, 128, 128}) || p.BiasKind != "additive" ||
					!slices.Equal(p.BiasDims, []int64{1, 1, 128, 128}) || !p.BiasMask {
					t.Errorf("params %+v", p)
				}
			}},
		{"a subtracted padding mask: scores - m",
			attnOps("128", "128", []op{scale, {name: "sub", in: []string{"bf16:2x12x128x128", "f32:2x1x1x128", "=1"}}}, nil),
			map[string]int{"attention": 1}, // mask_softmax adds its mask: not matched on a sub
			func(t *testing.T, g ShapeGroup) {
				p := g.Params
				if p.MaskKind != "additive" || !p.MaskNeg || !slices.Equal(p.MaskDims, []int64{2, 1, 1, 128}) {
					t.Errorf("params %+v", p)
				}
				if a := attentionCall(p); !strings.Contains(a, "attn_mask=-mask") {
					t.Errorf("advice %q", a)
				}
			}},
		{"fp32 attention (no autocast)", []op{
			{name: "transpose", in: []string{"f32:2x12x128x64", "=-1", "=-2"}},
			{name: "matmul", in: []string{"f32:2x12x128x64", "f32:2x12x64x128"}},
			{name: "div", in: []string{"f32:2x12x128x128", "=8."}},
			{name: "add", in: []string{"f32:2x12x128x128", "f32:2x1x1x128", "=1"}},
			{name: "softmax", in: []string{"f32:2x12x128x128", "=-1", ""}},
			{name: "matmul", in: []string{"f32:2x12x128x128", "f32:2x12x128x64"}},
		}, map[string]int{"attention": 1, "mask_softmax": 1},
			func(t *testing.T, g ShapeGroup) {
				if p := g.Params; g.DType != FP32 || p.MaskKind != "additive" {
					t.Errorf("dtype %s params %+v", g.DType, p)
				}
			}},
		{"decode: one query over 129 keys",
			attnOps("1", "129", []op{{name: "mul", in: []string{"bf16:2x12x1x129", "#"}}, toF32("2x12x1x129")}, nil),
			map[string]int{"attention": 1},
			func(t *testing.T, g ShapeGroup) {
				if p := g.Params; p.SeqQ != 1 || p.SeqK != 129 || p.MaskKind != "none" {
					t.Errorf("params %+v", p)
				}
			}},
		// refusals
		{"no ·V GEMM (the probabilities are returned)", []op{
			{name: "matmul", in: []string{"bf16:2x12x128x64", "bf16:2x12x64x128"}},
			{name: "masked_fill", in: []string{"bf16:2x12x128x128", "bool:2x1x1x128", "=-inf"}},
			{name: "softmax", in: []string{"bf16:2x12x128x128", "=-1", ""}},
		}, map[string]int{"mask_softmax": 1}, nil},
		{"no Q·Kᵀ GEMM", []op{
			{name: "add", in: []string{"bf16:2x12x128x128", "bf16:2x12x128x128", "=1"}},
			{name: "masked_fill", in: []string{"bf16:2x12x128x128", "bool:2x1x1x128", "=-inf"}},
			{name: "softmax", in: []string{"bf16:2x12x128x128", "=-1", ""}},
			{name: "matmul", in: []string{"bf16:2x12x128x128", "bf16:2x12x128x64"}},
		}, map[string]int{"mask_softmax": 1}, nil},
		{"a softmax over the queries", []op{
			{name: "matmul", in: []string{"bf16:2x12x128x64", "bf16:2x12x64x128"}},
			{name: "softmax", in: []string{"bf16:2x12x128x128", "=-2", ""}},
			{name: "matmul", in: []string{"bf16:2x12x128x128", "bf16:2x12x128x64"}},
		}, map[string]int{}, nil},
		{"tanh soft-capping between the GEMM and the softmax", []op{
			{name: "matmul", in: []string{"bf16:2x12x128x64", "bf16:2x12x64x128"}},
			{name: "div", in: []string{"bf16:2x12x128x128", "=50."}},
			{name: "tanh", in: []string{"bf16:2x12x128x128"}},
			{name: "mul", in: []string{"bf16:2x12x128x128", "=50."}},
			{name: "softmax", in: []string{"bf16:2x12x128x128", "=-1", ""}},
			{name: "matmul", in: []string{"bf16:2x12x128x128", "bf16:2x12x128x64"}},
		}, map[string]int{}, nil},
		{"a mask before the scale", []op{
			{name: "matmul", in: []string{"bf16:2x12x128x64", "bf16:2x12x64x128"}},
			{name: "add", in: []string{"bf16:2x12x128x128", "bf16:2x1x1x128", "=1"}},
			{name: "mul", in: []string{"bf16:2x12x128x128", "=0.125"}},
			{name: "softmax", in: []string{"bf16:2x12x128x128", "=-1", ""}},
			{name: "matmul", in: []string{"bf16:2x12x128x128", "bf16:2x12x128x64"}},
		}, map[string]int{}, nil},
		{"a padding add before a causal where with an unrecorded (finite) fill", attnOps("128", "128", []op{scale,
			{name: "add", in: []string{"bf16:2x12x128x128", "bf16:2x1x1x128", "=1"}},
			{name: "slice", in: []string{"bool:1x1x1024x1024", "=2", "=0", "=128", "=1"}},
			{name: "slice", in: []string{"bool:1x1x128x1024", "=3", "=0", "=128", "=1"}},
			{name: "where", in: []string{"bool:1x1x128x128", "bf16:2x12x128x128", "bf16:"}}, toF32("2x12x128x128")}, nil),
			map[string]int{"mask_softmax": 1}, nil},
		{"an add with alpha 2 (scores + 2m)", attnOps("128", "128", []op{scale,
			{name: "add", in: []string{"bf16:2x12x128x128", "bf16:2x1x1x128", "=2"}}, toF32("2x12x128x128")}, nil),
			map[string]int{}, nil},
		{"m - scores", attnOps("128", "128", []op{scale,
			{name: "sub", in: []string{"bf16:2x1x1x128", "bf16:2x12x128x128", "=1"}}, toF32("2x12x128x128")}, nil),
			map[string]int{}, nil}, // mask_softmax adds its mask: a subtraction is refused too
		{"a bias before a mask filled with -10000", attnOps("128", "128", []op{
			{name: "add", in: []string{"bf16:2x12x128x128", "bf16:1x12x128x128", "=1"}},
			{name: "masked_fill", in: []string{"bf16:2x12x128x128", "bool:2x1x1x128", "=-10000."}}, toF32("2x12x128x128")}, nil),
			map[string]int{"mask_softmax": 1}, nil},
		{"three masks", attnOps("128", "128", []op{scale,
			{name: "masked_fill", in: []string{"bf16:2x12x128x128", "bool:2x1x1x128", "=-inf"}},
			{name: "add", in: []string{"bf16:2x12x128x128", "bf16:2x1x1x128", "=1"}},
			{name: "add", in: []string{"bf16:2x12x128x128", "bf16:2x1x128x128", "=1"}}, toF32("2x12x128x128")}, nil),
			map[string]int{"mask_softmax": 1}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := synth(tt.ops...)
			got := synthCounts(t, tr)
			for _, id := range []string{"attention", "mask_softmax"} {
				if got[id] != tt.want[id] {
					t.Errorf("%s: got %d, want %d", id, got[id], tt.want[id])
				}
			}
			if tt.check == nil {
				return
			}
			gs := attnGroups(t, tt.ops)
			if len(gs) != 1 {
				t.Fatalf("%d attention shape groups, want 1", len(gs))
			}
			tt.check(t, gs[0])
			// every group found maps to a case its check accepts
			p, _ := Lookup("attention")
			c, why := p.Case(gs[0])
			if why != "" {
				t.Fatalf("no case: %s", why)
			}
			if err := p.Check(c); err != nil {
				t.Errorf("case %+v: %v", c, err)
			}
		})
	}
}

// The attention instance, not the mask_softmax inside it, is what the totals count.
func TestAttentionCountedOverMaskSoftmax(t *testing.T) {
	ops := attnOps("512", "512", []op{{name: "mul", in: []string{"bf16:2x12x512x512", "#"}},
		{name: "add", in: []string{"bf16:2x12x512x512", "f32:2x1x1x512", "=1"}}}, nil)
	r, err := Analyze([]*trace.Trace{synth(ops...)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	counted := map[string]int{}
	for _, o := range r.Opportunities {
		counted[o.Pattern] = o.CountedInstances
	}
	if counted["attention"] != 1 || counted["mask_softmax"] != 0 {
		t.Errorf("counted %v, want attention 1 and mask_softmax 0", counted)
	}
	if r.Totals == nil || r.Totals.Instances != 1 || r.Totals.LeftOut != 1 {
		t.Errorf("totals %+v, want 1 instance counted and 1 left out", r.Totals)
	}
}

func TestAttentionCase(t *testing.T) {
	p, _ := Lookup("attention")
	f := func(v float64) *float64 { return &v }
	base := func() ShapeGroup {
		return ShapeGroup{Valid: true, DType: BF16, Dims: [][]int64{{2, 12, 128, 64}, {2, 12, 128, 64}, {2, 12, 128, 64}},
			Params: Params{MaskKind: "causal", HeadDim: 64, SeqQ: 128, SeqK: 128, ScaleOp: "mul"}}
	}
	tests := []struct {
		name    string
		edit    func(g *ShapeGroup)
		why     string // a refusal, or "" for a case
		want    Case
		assumed []string
	}{
		{"causal, scale not recorded", func(g *ShapeGroup) {}, "",
			Case{Dtype: "bf16", Shapes: [][]int64{{2, 12, 128, 64}, {2, 12, 128, 64}, {2, 12, 128, 64}},
				Params: KernelParams{MaskKind: "causal", MaskFill: "min", Scale: 0.125, BiasKind: "none"}},
			[]string{"scale not recorded", "mask fill not recorded"}},
		{"div by 8, bool mask, dropout", func(g *ShapeGroup) {
			g.Params.MaskKind, g.Params.MaskDims, g.Params.MaskFill, g.Params.MaskDType = "bool", []int64{2, 1, 1, 128}, "-inf", Bool
			g.Params.ScaleOp, g.Params.Scale, g.Params.P = "div", f(8), f(0.1)
			g.Dims = append(g.Dims, []int64{2, 1, 1, 128})
		}, "", Case{Dtype: "bf16", Shapes: [][]int64{{2, 12, 128, 64}, {2, 12, 128, 64}, {2, 12, 128, 64}, {2, 1, 1, 128}},
			Params: KernelParams{MaskKind: "bool", MaskFill: "-inf", Scale: 0.125, P: 0.1, BiasKind: "none"}}, nil},
		{"additive fp32 mask and a relative bias", func(g *ShapeGroup) {
			g.Params.MaskKind, g.Params.MaskDims, g.Params.MaskDType = "additive", []int64{2, 1, 1, 128}, FP32
			g.Params.BiasKind, g.Params.BiasDims = "additive", []int64{1, 12, 128, 128}
			g.Params.ScaleOp = ""
		}, "", Case{Dtype: "bf16", Shapes: [][]int64{{2, 12, 128, 64}, {2, 12, 128, 64}, {2, 12, 128, 64}, {2, 1, 1, 128}, {1, 12, 128, 128}},
			Params: KernelParams{MaskKind: "additive", Scale: 1, BiasKind: "additive", MaskDtype: "fp32"}}, nil},
		{"alibi", func(g *ShapeGroup) {
			g.Params.MaskKind, g.Params.BiasKind, g.Params.BiasDims = "none", "alibi", []int64{2, 12, 1, 128}
			g.Params.Scale = f(0.125)
		}, "", Case{Dtype: "bf16", Shapes: [][]int64{{2, 12, 128, 64}, {2, 12, 128, 64}, {2, 12, 128, 64}, {12}},
			Params: KernelParams{MaskKind: "none", Scale: 0.125, BiasKind: "alibi"}}, []string{"ALiBi"}},
		{"head dim 160", func(g *ShapeGroup) {
			for _, d := range g.Dims {
				d[3] = 160
			}
		}, "head dim 160: the kernel takes 32..128, a multiple of 8", Case{}, nil},
		{"head dim 36", func(g *ShapeGroup) {
			for _, d := range g.Dims {
				d[3] = 36
			}
		}, "head dim 36: the kernel takes 32..128, a multiple of 8", Case{}, nil},
		{"fp32: tf32x3 dots", func(g *ShapeGroup) { g.DType = FP32 }, "",
			Case{Dtype: "fp32", Shapes: [][]int64{{2, 12, 128, 64}, {2, 12, 128, 64}, {2, 12, 128, 64}},
				Params: KernelParams{MaskKind: "causal", MaskFill: "min", Scale: 0.125, BiasKind: "none"}}, nil},
		{"causal and a padding mask as the bias, broadcast over queries", func(g *ShapeGroup) {
			g.Params.BiasKind, g.Params.BiasDims, g.Params.BiasMask = "additive", []int64{2, 1, 1, 128}, true
		}, "", Case{Dtype: "bf16", Shapes: [][]int64{{2, 12, 128, 64}, {2, 12, 128, 64}, {2, 12, 128, 64}, {2, 1, 1, 128}},
			Params: KernelParams{MaskKind: "causal", MaskFill: "min", Scale: 0.125, BiasKind: "additive"}}, []string{"second (padding) mask"}},
		{"a subtracted mask", func(g *ShapeGroup) {
			g.Params.MaskKind, g.Params.MaskDims, g.Params.MaskDType, g.Params.MaskNeg = "additive", []int64{2, 1, 1, 128}, BF16, true
		}, "", Case{Dtype: "bf16", Shapes: [][]int64{{2, 12, 128, 64}, {2, 12, 128, 64}, {2, 12, 128, 64}, {2, 1, 1, 128}},
			Params: KernelParams{MaskKind: "additive", Scale: 0.125, BiasKind: "none", MaskDtype: "bf16"}}, []string{"pass -m"}},
		{"a bias broadcast over keys", func(g *ShapeGroup) {
			g.Params.BiasKind, g.Params.BiasDims = "additive", []int64{1, 12, 128, 1}
		}, "the bias [1 12 128 1] is broadcast over keys", Case{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := base()
			tt.edit(&g)
			c, why := p.Case(g)
			if tt.why != "" || why != "" {
				if tt.why == "" || !strings.HasPrefix(why, tt.why) {
					t.Fatalf("refusal %q, want %q", why, tt.why)
				}
				return
			}
			gj, _ := json.Marshal(c)
			wj, _ := json.Marshal(tt.want)
			if string(gj) != string(wj) {
				t.Errorf("case\n got %s\nwant %s", gj, wj)
			}
			if err := p.Check(c); err != nil {
				t.Errorf("check: %v", err)
			}
			a := strings.Join(p.Assumed(g), "; ")
			for _, w := range tt.assumed {
				if !strings.Contains(a, w) {
					t.Errorf("assumed %q lacks %q", a, w)
				}
			}
		})
	}
}

func TestAttentionCheck(t *testing.T) {
	qkv := [][]int64{{2, 12, 128, 64}, {2, 12, 256, 64}, {2, 12, 256, 64}}
	with := func(s ...[]int64) [][]int64 { return append(slices.Clone(qkv), s...) }
	tests := []struct {
		name string
		c    Case
		err  string
	}{
		{"plain", Case{Dtype: "fp16", Shapes: qkv}, ""},
		{"Sq != Sk with a bool mask", Case{Dtype: "fp16", Shapes: with([]int64{2, 1, 128, 256}), Params: KernelParams{MaskKind: "bool"}}, ""},
		{"mask missing", Case{Dtype: "fp16", Shapes: qkv, Params: KernelParams{MaskKind: "additive"}}, "3 shapes, want 4"},
		{"mask not broadcasting", Case{Dtype: "fp16", Shapes: with([]int64{2, 1, 128, 128}), Params: KernelParams{MaskKind: "additive"}}, "mask [2 1 128 128] does not broadcast"},
		{"k of other heads", Case{Dtype: "fp16", Shapes: [][]int64{{2, 12, 128, 64}, {2, 4, 256, 64}, {2, 4, 256, 64}}}, "want q [B, H, Sq, D]"},
		{"alibi slopes", Case{Dtype: "bf16", Shapes: with([]int64{8}), Params: KernelParams{BiasKind: "alibi"}}, "alibi slopes [8]: want [H] = [12]"},
		{"bias broadcast over keys", Case{Dtype: "bf16", Shapes: with([]int64{1, 12, 128, 1}), Params: KernelParams{BiasKind: "additive"}}, "bias [1 12 128 1]"},
		{"fp32", Case{Dtype: "fp32", Shapes: qkv}, ""},
		{"bias broadcast over queries", Case{Dtype: "bf16", Shapes: with([]int64{2, 1, 1, 256}), Params: KernelParams{BiasKind: "additive"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkAttention(tt.c)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("err %v, want %q", err, tt.err)
			}
		})
	}
}

func TestAttentionAdvice(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		p    Params
		want string
	}{
		{Params{MaskKind: "causal", SeqQ: 512, SeqK: 512, HeadDim: 64, ScaleOp: "mul", P: f(0.1)}, "is_causal=True, dropout_p=0.1)"},
		{Params{MaskKind: "causal", SeqQ: 1, SeqK: 129, HeadDim: 64, ScaleOp: "mul"}, "causal_lower_right(Sq, Sk)"},
		{Params{MaskKind: "additive", HeadDim: 64, ScaleOp: "div", Scale: f(8)}, "attn_mask=mask)"},
		{Params{MaskKind: "bool", HeadDim: 64, ScaleOp: "mul", Scale: f(0.1)}, "attn_mask=~mask, scale=0.1)"},
		{Params{MaskKind: "none", BiasKind: "alibi", HeadDim: 64, ScaleOp: "mul"}, "score_mod=lambda s, b, h, i, j: s + slopes[h] * (j - i)"},
		{Params{MaskKind: "none", BiasKind: "additive", HeadDim: 64, P: f(0.1)}, "use the generated kernel"},
		{Params{MaskKind: "causal", SeqQ: 64, SeqK: 64, HeadDim: 64, ScaleOp: "mul", KVHeads: 4}, "is_causal=True, enable_gqa=True) (flash backend, which takes enable_gqa: k and v as the trace's 4 KV heads"},
		{Params{MaskKind: "bool", HeadDim: 64, ScaleOp: "mul", KVHeads: 8}, "attn_mask=~mask) (SDPA's bool mask is True = keep; memory-efficient and cuDNN backends, flash refuses an explicit mask; k and v are expanded from 8 KV heads (repeat_kv): keep the expand"},
		{Params{MaskKind: "causal", SeqQ: 64, SeqK: 64, HeadDim: 64, ScaleOp: "mul", BiasKind: "additive", BiasMask: true}, "attn_mask=causal_mask + padding_mask)"},
		{Params{MaskKind: "additive", MaskNeg: true, HeadDim: 64, ScaleOp: "mul"}, "attn_mask=-mask)"},
		{Params{MaskKind: "none", HeadDim: 64}, "scale=1.0)"},
	}
	for _, tt := range tests {
		if got := attentionCall(tt.p); !strings.Contains(got, tt.want) {
			t.Errorf("%+v: %q lacks %q", tt.p, got, tt.want)
		}
	}
}

func TestKeptPairs(t *testing.T) {
	for _, tt := range []struct {
		sq, sk int64
		causal bool
		want   int64
	}{{4, 4, false, 16}, {4, 4, true, 10}, {1, 129, true, 129}, {3, 5, true, 3 + 4 + 5}, {5, 3, true, 0 + 0 + 1 + 2 + 3}} {
		if got := keptPairs(tt.sq, tt.sk, tt.causal); got != tt.want {
			t.Errorf("keptPairs(%d, %d, %v) = %d, want %d", tt.sq, tt.sk, tt.causal, got, tt.want)
		}
	}
	if fillWord("-3.4028234663852886e+38", FP32) != "min" || fillWord("-inf", BF16) != "-inf" || fillWord("-10000.0", FP16) != "-10000" ||
		fillWord("", FP16) != "" || fillWord("-65504", FP16) != "min" || !math.IsInf(-math.Inf(1), -1) {
		t.Error("fillWord")
	}
}

// attentionTraces are the attention instances of the shared H200 traces with eager attention,
// and each one's mask kind; EXPECTED.json predates the pattern (expectedSince adds them).
var attentionTraces = map[string]struct {
	n    int
	mask string
}{
	"gpt2_train_bf16.json.gz":    {8, "causal"},   // HF's additive mask built from position comparisons
	"gpt2_infer_fp16_b1.json.gz": {20, "causal"},  //
	"bert_train_bf16.json.gz":    {8, "additive"}, // the padding mask, [B, 1, S, S] fp32
	"llama_infer_fp16.json.gz":   {12, "causal"},  // the additive causal mask
	"llama_train_bf16.json.gz":   {8, "causal"},
}

// TestAttentionTraces checks the attention instances of every shared H200 trace, from the
// Kineto trace alone and from the execution trace's exact dataflow: the same counts and mask
// kinds, none where the model ran SDPA (gpt2_train_sdpa_stack) or has no attention.
func TestAttentionTraces(t *testing.T) {
	dir, exp := loadExpected(t)
	for _, name := range names(exp) {
		t.Run(strings.TrimSuffix(name, ".json.gz"), func(t *testing.T) {
			tr, err := trace.Open(dir + "/" + name)
			if err != nil {
				t.Fatal(err)
			}
			et, err := trace.ReadET(dir + "/" + strings.TrimSuffix(name, ".json.gz") + ".et.json.gz")
			if err != nil {
				t.Fatal(err)
			}
			want := attentionTraces[name]
			for _, mode := range []string{"kineto", "et"} {
				opts := Options{Pattern: "attention"}
				if mode == "et" {
					opts.ET = map[*trace.Trace]*trace.ExecTrace{tr: et}
				}
				r, err := Analyze([]*trace.Trace{tr}, opts)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, o := range r.Opportunities {
					for _, s := range o.Shapes {
						n += s.Instances
						if s.Params.MaskKind != want.mask {
							t.Errorf("%s: mask %q, want %q", mode, s.Params.MaskKind, want.mask)
						}
						p, _ := Lookup("attention")
						if c, why := p.Case(s); why != "" {
							t.Errorf("%s: %v: no case: %s", mode, s.Dims, why)
						} else if err := p.Check(c); err != nil {
							t.Errorf("%s: case %+v: %v", mode, c, err)
						}
					}
				}
				if n != want.n {
					t.Errorf("%s: %d attention instances, want %d", mode, n, want.n)
				}
			}
		})
	}
}

// TestAttentionOWLv2 checks OWLv2's public H100 trace: the vision encoder's unmasked
// attention (the scale folded into q) and the text encoder's, whose scores get a causal
// [1, 1, S, S] mask and then the padding mask added, both bf16: the second is the case's
// bias. From the Kineto trace alone both masks read as additive (the inferred dataflow
// links both adds to the latest [1, 1, 5, 5] value, the padding mask), which is exact, only
// without causal block skipping (S = 5).
func TestAttentionOWLv2(t *testing.T) {
	tr, err := trace.Open(filepath.Join(shared.Require(t, "traces", "public"), "tl_h100_owlv2-large_pt2.6.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze([]*trace.Trace{tr}, Options{Pattern: "attention"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Opportunities) != 1 || len(r.Opportunities[0].Shapes) != 2 {
		t.Fatalf("opportunities %+v", r.Opportunities)
	}
	p, _ := Lookup("attention")
	for _, g := range r.Opportunities[0].Shapes {
		c, why := p.Case(g)
		if why != "" {
			t.Fatalf("%v: no case: %s", g.Dims, why)
		}
		if err := p.Check(c); err != nil {
			t.Errorf("case %+v: %v", c, err)
		}
		switch g.Params.SeqQ {
		case 5185:
			if g.Instances != 120 || g.Params.MaskKind != "none" || g.Params.BiasKind != "" || c.Params.Scale != 1 {
				t.Errorf("vision: %d instances, params %+v", g.Instances, g.Params)
			}
		case 5:
			pm := g.Params
			if g.Instances != 60 || pm.MaskKind != "additive" || !slices.Equal(pm.MaskDims, []int64{1, 1, 5, 5}) ||
				pm.BiasKind != "additive" || !pm.BiasMask || !slices.Equal(pm.BiasDims, []int64{1, 1, 5, 5}) || pm.HeadDim != 64 {
				t.Errorf("text: %d instances, params %+v", g.Instances, pm)
			}
			if c.Params.BiasKind != "additive" || len(c.Shapes) != 5 {
				t.Errorf("text case %+v", c)
			}
		default:
			t.Errorf("unexpected group %v", g.Dims)
		}
	}
}

func TestAttentionFlops(t *testing.T) {
	qkv := [][]int64{{2, 12, 128, 64}, {2, 12, 128, 64}, {2, 12, 128, 64}}
	if got, want := AttentionFlops(Case{Shapes: qkv}), int64(4*24*64*128*128); got != want {
		t.Errorf("full: %d, want %d", got, want)
	}
	if got, want := AttentionFlops(Case{Shapes: qkv, Params: KernelParams{MaskKind: "causal"}}), int64(4*24*64*128*129/2); got != want {
		t.Errorf("causal: %d, want %d", got, want)
	}
	if AttentionFlops(Case{Shapes: [][]int64{{4, 33, 96}}}) != 0 {
		t.Error("not q, k, v: want 0")
	}
}
