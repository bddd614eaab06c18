package patterns

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/fuseadvise/fuseadvise/trace"
)

// A residual add feeding a LayerNorm through a permute (timm's LayerNorm2d) normalizes the
// dim the permute moved last: detection records it (NormDim) even where the shapes cannot
// tell (C = H = W = 8), and the case is the channels-first kernel (norm_dim "1"); a permute
// that moves another dim last is refused, and a plain add -> layer_norm records nothing.
func TestChannelsFirstNorm(t *testing.T) {
	ln := op{name: "layer_norm", in: []string{"f32:2x8x8x8", "=[8]", "f32:8", "f32:8", "=1e-06", "=True"}}
	add := op{name: "add", in: []string{"f32:2x8x8x8", "f32:2x8x8x8", "=1"}}
	for _, tc := range []struct {
		name    string
		ops     []op
		normDim int64 // -1: none recorded
		param   string
		refused string
	}{
		{"LayerNorm2d", []op{add, {name: "permute", in: []string{"f32:2x8x8x8", "=[0, 2, 3, 1]"}}, ln}, 1, "1", ""},
		{"negative permute dims", []op{add, {name: "permute", in: []string{"f32:2x8x8x8", "=[0, -2, -1, -3]"}}, ln}, 1, "1", ""},
		{"a permute moving H last", []op{add, {name: "permute", in: []string{"f32:2x8x8x8", "=[0, 1, 3, 2]"}}, ln}, 2, "", "normalizes dim 2"},
		{"no permute", []op{add, ln}, -1, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Analyze([]*trace.Trace{synth(tc.ops...)}, Options{Pattern: "add_layernorm"})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Opportunities) != 1 || len(r.Opportunities[0].Shapes) != 1 {
				t.Fatalf("opportunities %+v", r.Opportunities)
			}
			g := r.Opportunities[0].Shapes[0]
			if got := g.Params.NormDim; (tc.normDim < 0) != (got == nil) || got != nil && *got != tc.normDim {
				t.Errorf("NormDim %v, want %d", got, tc.normDim)
			}
			p, _ := Lookup("add_layernorm")
			c, why := p.Case(g)
			if tc.refused != "" {
				if !strings.Contains(why, tc.refused) {
					t.Errorf("refusal %q, want %q", why, tc.refused)
				}
				return
			}
			if why != "" || c.Params.NormDim != tc.param {
				t.Errorf("case %+v (%q), want norm_dim %q", c, why, tc.param)
			}
		})
	}
}

// ConvNeXt's downsample norms on the H200 trace: add -> permute -> layer_norm over C, from the
// Kineto trace alone and from the execution trace; and its stem's, whose sum is the stem
// convolution's own bias add (conv_bias: the bias [1, 96, 1, 1] the residual, taken).
func TestChannelsFirstNormConvNeXt(t *testing.T) {
	dir := shared.Require(t, "traces", "h200")
	tr, err := trace.Open(filepath.Join(dir, "convnext_tiny_train_bf16.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	et, err := trace.ReadET(filepath.Join(dir, "convnext_tiny_train_bf16.et.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []Options{{Pattern: "add_layernorm"}, {Pattern: "add_layernorm", ET: map[*trace.Trace]*trace.ExecTrace{tr: et}}} {
		r, err := Analyze([]*trace.Trace{tr}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Opportunities) != 1 || len(r.Opportunities[0].Shapes) != 4 {
			t.Fatalf("ET %v: opportunities %+v", opts.ET != nil, r.Opportunities)
		}
		p, _ := Lookup("add_layernorm")
		stems := 0
		for _, g := range r.Opportunities[0].Shapes {
			c, why := p.Case(g)
			if g.Params.NormDim == nil || *g.Params.NormDim != 1 || why != "" || c.Params.NormDim != "1" || g.Cols != g.Dims[0][1] {
				t.Errorf("ET %v: %v: NormDim %v, case %+v (%q)", opts.ET != nil, g.Dims, g.Params.NormDim, c, why)
			}
			if g.Params.ConvBias {
				stems++
				// the bias is one vector of the normalized dim: the one-pass backward sums its
				// gradient (eagerBackward is for other broadcasts), so the backward saves
				if !slices.Equal(g.Dims[1], []int64{1, 96, 1, 1}) || !c.Params.ConvBias || len(c.Shapes) != 2 ||
					g.EstBackwardSavingUs <= 0 || g.EstFusedBackwardUs <= 0 {
					t.Errorf("ET %v: the stem's norm %+v, case %+v: want the bias as the residual, the fused backward estimated", opts.ET != nil, g, c)
				}
			}
		}
		if stems != 1 {
			t.Errorf("ET %v: %d shape groups take a convolution's bias, want the stem's", opts.ET != nil, stems)
		}
	}
}
