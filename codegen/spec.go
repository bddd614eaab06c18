package codegen

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/fuseadvise/fuseadvise/templates"
)

// Spec describes one fused kernel to generate.
type Spec struct {
	Pattern string // a pattern id with a template, e.g. "bias_gelu"
	Dtype   string // "fp32", "fp16" or "bf16"
	// Shapes are the traced input shapes; their meaning per pattern is in docs/templates.md
	// (Shapes[0] is always the main input; GEMM patterns need the weight [N, K] as Shapes[1];
	// mask_softmax with a bool or additive mask needs the mask's shape as Shapes[1]).
	Shapes      [][]int64
	Params      Params
	Source      Source  // where it was found: data only, never code
	EstSavingUs float64 // the cost model's estimated saving, microseconds (finite)
	// EstFusedUs is the cost model's estimate of one fused call at these shapes, microseconds
	// (finite, >= 0; 0 when not estimated); the benchmark compares it with the measured time.
	EstFusedUs float64
}

// Params are the pattern parameters. A zero value means the default given per field; fields
// a pattern does not use must be left zero.
type Params struct {
	Approximate string  // GELU: "none" (erf, default) or "tanh"; bias_gelu, linear_gelu
	HasBias     bool    // bias_gelu, gelu_pyops, linear_gelu, layernorm_linear, dropout_add
	MaskKind    string  // mask_softmax: "none" (default), "bool", "additive", "causal"
	MaskFill    string  // mask_softmax bool/causal fill: "-inf" (default), "min" (dtype min) or a finite number
	Scale       float64 // mask_softmax: multiplier applied before the mask (default 1)
	Eps         float64 // add_layernorm, layernorm_linear (default 1e-5), rmsnorm_pyops (default 1e-6)
	P           float64 // dropout probability in [0, 1): dropout_add, mask_softmax (default 0)
	Casting     string  // rmsnorm_pyops: "llama" (default) or "fp32"
	// ResidualDtype is the residual's dtype when it differs from Dtype (add_layernorm,
	// dropout_add: an fp32 residual stream plus a bf16 branch under autocast); "" = Dtype.
	ResidualDtype string
	// OutDtype is the output's dtype when it differs from the pattern's default (gelu_pyops:
	// Dtype; mask_softmax: Dtype, or Dtype promoted with MaskDtype for an additive mask):
	// autocast runs pow and softmax in fp32, so a bf16 input gives an fp32 output. "" = default.
	OutDtype string
	// MaskDtype is an additive mask's dtype when it differs from Dtype (mask_softmax: an fp32
	// mask added to bf16 scores under autocast). "" = Dtype.
	MaskDtype string
}

// Source locates the opportunity in the trace. It is copied into manifest.json and README.md
// as JSON-escaped strings and nowhere else.
type Source struct {
	Trace string // the trace file
	Site  string // op chain / call site / source line
}

// Limits on what Validate accepts.
const (
	MaxRank   = 8
	MaxShapes = 4
	MaxDim    = 1<<31 - 1
	MaxNumel  = 1 << 40
	maxText   = 4096 // bytes of Source.Trace / Source.Site
)

var dtypes = map[string]string{"fp32": "torch.float32", "fp16": "torch.float16", "bf16": "torch.bfloat16"}

// patternInfo says which parameters a pattern uses.
type patternInfo struct {
	approximate, bias, mask, eps, p, casting, residual, outDtype bool
	defaultEps                                                   float64
}

var patternTable = map[string]patternInfo{
	"bias_gelu":        {approximate: true, bias: true},
	"gelu_pyops":       {bias: true, outDtype: true},
	"linear_gelu":      {approximate: true, bias: true},
	"mask_softmax":     {mask: true, p: true, outDtype: true},
	"layernorm_linear": {bias: true, eps: true, defaultEps: 1e-5},
	"add_layernorm":    {eps: true, residual: true, defaultEps: 1e-5},
	"dropout_add":      {bias: true, p: true, residual: true},
	"rmsnorm_pyops":    {eps: true, casting: true, defaultEps: 1e-6},
	"swiglu":           {},
}

// Patterns returns the pattern ids codegen can generate: those with both a parameter table
// entry and an embedded template.
func Patterns() []string {
	var out []string
	for _, p := range templates.Patterns() {
		if _, ok := patternTable[p]; ok {
			out = append(out, p)
		}
	}
	return out
}

// Validate reports whether spec can be generated: a known pattern with a template, a known
// dtype, parameters from the enums and in range (after defaults), and shapes with positive
// dims, bounded rank and size, and the structure the pattern needs.
func Validate(spec Spec) error {
	_, err := resolve(spec)
	return err
}

// resolve applies the defaults and validates; the result is what gets written.
func resolve(s Spec) (Spec, error) {
	info, ok := patternTable[s.Pattern]
	if !ok || !templates.Has(s.Pattern) {
		return s, fmt.Errorf("codegen: unknown pattern %s", strconv.Quote(s.Pattern))
	}
	if _, ok := dtypes[s.Dtype]; !ok {
		return s, fmt.Errorf("codegen: %s: unknown dtype %s (want fp32, fp16 or bf16)", s.Pattern, strconv.Quote(s.Dtype))
	}
	if err := checkShapes(s.Shapes); err != nil {
		return s, fmt.Errorf("codegen: %s: %v", s.Pattern, err)
	}
	if math.IsNaN(s.EstSavingUs) || math.IsInf(s.EstSavingUs, 0) {
		return s, fmt.Errorf("codegen: %s: est_saving_us is not finite", s.Pattern)
	}
	if math.IsNaN(s.EstFusedUs) || math.IsInf(s.EstFusedUs, 0) || s.EstFusedUs < 0 {
		return s, fmt.Errorf("codegen: %s: est_fused_us is not a finite non-negative number", s.Pattern)
	}
	if len(s.Source.Trace) > maxText || len(s.Source.Site) > maxText {
		return s, fmt.Errorf("codegen: %s: source text longer than %d bytes", s.Pattern, maxText)
	}
	p := &s.Params
	bad := func(field string, v any) error {
		return fmt.Errorf("codegen: %s: parameter %s=%s is not used by this pattern", s.Pattern, field, strconv.Quote(fmt.Sprint(v)))
	}
	// parameters the pattern does not use must be zero
	if !info.approximate && p.Approximate != "" {
		return s, bad("approximate", p.Approximate)
	}
	if !info.bias && p.HasBias {
		return s, bad("has_bias", p.HasBias)
	}
	if !info.mask && (p.MaskKind != "" || p.MaskFill != "" || p.Scale != 0) {
		return s, bad("mask_kind/mask_fill/scale", p.MaskKind+p.MaskFill)
	}
	if !info.eps && p.Eps != 0 {
		return s, bad("eps", p.Eps)
	}
	if !info.p && p.P != 0 {
		return s, bad("p", p.P)
	}
	if !info.casting && p.Casting != "" {
		return s, bad("casting", p.Casting)
	}
	if !info.residual && p.ResidualDtype != "" {
		return s, bad("residual_dtype", p.ResidualDtype)
	}
	if p.ResidualDtype != "" {
		if _, ok := dtypes[p.ResidualDtype]; !ok {
			return s, fmt.Errorf("codegen: %s: residual_dtype=%s (want fp32, fp16 or bf16)", s.Pattern, strconv.Quote(p.ResidualDtype))
		}
		if p.ResidualDtype == s.Dtype {
			p.ResidualDtype = "" // canonical: the same dtype is the default
		}
	}
	if !info.outDtype && p.OutDtype != "" {
		return s, bad("out_dtype", p.OutDtype)
	}
	if !info.mask && p.MaskDtype != "" {
		return s, bad("mask_dtype", p.MaskDtype)
	}
	for _, d := range []struct{ name, v string }{{"out_dtype", p.OutDtype}, {"mask_dtype", p.MaskDtype}} {
		if _, ok := dtypes[d.v]; d.v != "" && !ok {
			return s, fmt.Errorf("codegen: %s: %s=%s (want fp32, fp16 or bf16)", s.Pattern, d.name, strconv.Quote(d.v))
		}
	}
	if info.approximate {
		if p.Approximate == "" {
			p.Approximate = "none"
		}
		if p.Approximate != "none" && p.Approximate != "tanh" {
			return s, fmt.Errorf("codegen: %s: approximate=%s (want none or tanh)", s.Pattern, strconv.Quote(p.Approximate))
		}
	}
	if info.mask {
		if p.MaskKind == "" {
			p.MaskKind = "none"
		}
		switch p.MaskKind {
		case "none", "bool", "additive", "causal":
		default:
			return s, fmt.Errorf("codegen: %s: mask_kind=%s (want none, bool, additive or causal)", s.Pattern, strconv.Quote(p.MaskKind))
		}
		if p.MaskFill == "" {
			p.MaskFill = "-inf"
		}
		if p.MaskFill != "-inf" && p.MaskFill != "min" {
			v, err := strconv.ParseFloat(p.MaskFill, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > math.MaxFloat32 {
				return s, fmt.Errorf("codegen: %s: mask_fill=%s (want -inf, min or a finite number)", s.Pattern, strconv.Quote(p.MaskFill))
			}
			p.MaskFill = strconv.FormatFloat(v, 'g', -1, 64) // canonical
		}
		if p.Scale == 0 {
			p.Scale = 1
		}
		if math.IsNaN(p.Scale) || math.IsInf(p.Scale, 0) || math.Abs(p.Scale) < 1e-12 || math.Abs(p.Scale) > 1e12 {
			return s, fmt.Errorf("codegen: %s: scale=%v out of range", s.Pattern, p.Scale)
		}
		if err := checkMask(s); err != nil {
			return s, fmt.Errorf("codegen: %s: %v", s.Pattern, err)
		}
		if p.MaskDtype != "" && p.MaskKind != "additive" {
			return s, fmt.Errorf("codegen: %s: mask_dtype=%s needs an additive mask", s.Pattern, strconv.Quote(p.MaskDtype))
		}
		if p.MaskDtype == s.Dtype {
			p.MaskDtype = "" // canonical: the same dtype is the default
		}
	}
	if info.outDtype && p.OutDtype == defaultOutDtype(s) {
		p.OutDtype = "" // canonical: the default is not written
	}
	if info.eps {
		if p.Eps == 0 {
			p.Eps = info.defaultEps
		}
		if math.IsNaN(p.Eps) || !(p.Eps > 0 && p.Eps <= 1) {
			return s, fmt.Errorf("codegen: %s: eps=%v (want 0 < eps <= 1)", s.Pattern, p.Eps)
		}
	}
	if info.p && (math.IsNaN(p.P) || p.P < 0 || p.P >= 1) {
		return s, fmt.Errorf("codegen: %s: p=%v (want 0 <= p < 1)", s.Pattern, p.P)
	}
	if info.casting {
		if p.Casting == "" {
			p.Casting = "llama"
		}
		if p.Casting != "llama" && p.Casting != "fp32" {
			return s, fmt.Errorf("codegen: %s: casting=%s (want llama or fp32)", s.Pattern, strconv.Quote(p.Casting))
		}
	}
	if s.Pattern == "add_layernorm" && len(s.Shapes) > 1 && !LeadingBroadcast(s.Shapes[1], s.Shapes[0]) {
		return s, fmt.Errorf("codegen: add_layernorm: residual %v must be x's shape %v or broadcast along its leading dims", s.Shapes[1], s.Shapes[0])
	}
	if s.Pattern == "linear_gelu" || s.Pattern == "layernorm_linear" {
		if len(s.Shapes) < 2 || len(s.Shapes[1]) != 2 {
			return s, fmt.Errorf("codegen: %s: needs the input [..., K] and the weight [N, K] as shapes", s.Pattern)
		}
		x, w := s.Shapes[0], s.Shapes[1]
		if x[len(x)-1] != w[1] {
			return s, fmt.Errorf("codegen: %s: input K=%d does not match weight %v", s.Pattern, x[len(x)-1], w)
		}
	}
	return s, nil
}

// defaultOutDtype is the output dtype a pattern gives without out_dtype: the input's, or for an
// additive mask of another dtype, the promoted type (fp32 whenever the two differ).
func defaultOutDtype(s Spec) string {
	if s.Params.MaskDtype != "" && s.Params.MaskDtype != s.Dtype {
		return "fp32"
	}
	return s.Dtype
}

// LeadingBroadcast reports whether r is x's shape with some leading dims 1 (or dropped):
// the residual broadcast the add_layernorm kernel reads in place.
func LeadingBroadcast(r, x []int64) bool {
	if len(r) == 0 || len(r) > len(x) {
		return false
	}
	full := make([]int64, len(x))
	for i := range full {
		full[i] = 1
	}
	copy(full[len(x)-len(r):], r)
	k := 0
	for k < len(x)-1 && full[k] == 1 {
		k++
	}
	return slices.Equal(full[k:], x[k:])
}

func checkShapes(shapes [][]int64) error {
	if len(shapes) == 0 {
		return errors.New("no shapes")
	}
	if len(shapes) > MaxShapes {
		return fmt.Errorf("%d shapes (at most %d)", len(shapes), MaxShapes)
	}
	for i, sh := range shapes {
		if len(sh) == 0 || len(sh) > MaxRank {
			return fmt.Errorf("shape %d has rank %d (want 1..%d)", i, len(sh), MaxRank)
		}
		n := int64(1)
		for _, d := range sh {
			if d <= 0 || d > MaxDim {
				return fmt.Errorf("shape %d: dim %d out of range (want 1..%d)", i, d, int64(MaxDim))
			}
			if n > MaxNumel/d {
				return fmt.Errorf("shape %d: more than %d elements", i, int64(MaxNumel))
			}
			n *= d
		}
	}
	return nil
}

// checkMask: scores of rank 2..4; bool/additive masks broadcastable to the scores.
func checkMask(s Spec) error {
	x := s.Shapes[0]
	if len(x) < 2 || len(x) > 4 {
		return fmt.Errorf("scores shape %v: want rank 2..4", x)
	}
	switch s.Params.MaskKind {
	case "bool", "additive":
		if len(s.Shapes) < 2 {
			return fmt.Errorf("mask_kind %s needs the mask's shape as shapes[1]", s.Params.MaskKind)
		}
		m := s.Shapes[1]
		if len(m) > len(x) {
			return fmt.Errorf("mask shape %v has more dims than the scores %v", m, x)
		}
		for i := 1; i <= len(m); i++ {
			if md, xd := m[len(m)-i], x[len(x)-i]; md != 1 && md != xd {
				return fmt.Errorf("mask shape %v does not broadcast to the scores %v", m, x)
			}
		}
	}
	return nil
}
