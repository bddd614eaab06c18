package codegen

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/fuseadvise/fuseadvise/patterns"
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
	// EstBackwardSavingUs is the estimated saving of the fused backward on a training trace
	// (the traced backward less the cost model's fused one), microseconds (finite, >= 0; 0 in
	// inference or when not estimated).
	EstBackwardSavingUs float64
	// EstFusedUs is the cost model's estimate of one fused call at these shapes, microseconds
	// (finite, >= 0; 0 when not estimated); the benchmark compares it with the measured time.
	EstFusedUs float64
	// Instances and GPUTimeUs are this shape group's evidence in the trace: its forward
	// instances and their GPU time now (microseconds, all instances; finite, >= 0; 0 when
	// not known). The PR shows them, and compares EstFusedUs with GPUTimeUs / Instances.
	Instances int
	GPUTimeUs float64
	// Notes are what the README says beside the usage snippet: the pattern's own sentences
	// for this group (patterns.Pattern.Notes), fixed text of the registry, never the trace's.
	Notes []string
}

// Params are the pattern parameters: the fields a pattern's schema (patterns.Pattern.Params)
// names, the others left zero; a zero value means the schema's default.
type Params = patterns.KernelParams

// Source locates the opportunity in the trace. It is copied into manifest.json and README.md
// as JSON-escaped strings and nowhere else.
type Source struct {
	Trace string // the trace file
	Site  string // op chain / call site / source line
}

// Limits on what Validate accepts.
const (
	MaxRank   = 8
	MaxShapes = 5 // attention: q, k, v, the mask and the bias
	MaxDim    = 1<<31 - 1
	MaxNumel  = 1 << 40
	maxText   = 4096 // bytes of Source.Trace / Source.Site
)

var dtypes = map[string]string{"fp32": "torch.float32", "fp16": "torch.float16", "bf16": "torch.bfloat16"}

// Patterns returns the pattern ids codegen can generate, sorted: the registered patterns
// whose template folder is embedded.
func Patterns() []string {
	var out []string
	for _, p := range patterns.Catalog() {
		if templates.Has(p.Template) {
			out = append(out, p.ID)
		}
	}
	sort.Strings(out)
	return out
}

// pattern returns the registered pattern id when its template is embedded.
func pattern(id string) (*patterns.Pattern, bool) {
	p, ok := patterns.Lookup(id)
	if !ok || !templates.Has(p.Template) {
		return nil, false
	}
	return p, true
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
	pat, ok := pattern(s.Pattern)
	if !ok {
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
	if math.IsNaN(s.EstBackwardSavingUs) || math.IsInf(s.EstBackwardSavingUs, 0) || s.EstBackwardSavingUs < 0 {
		return s, fmt.Errorf("codegen: %s: est_backward_saving_us is not a finite non-negative number", s.Pattern)
	}
	if math.IsNaN(s.EstFusedUs) || math.IsInf(s.EstFusedUs, 0) || s.EstFusedUs < 0 {
		return s, fmt.Errorf("codegen: %s: est_fused_us is not a finite non-negative number", s.Pattern)
	}
	if math.IsNaN(s.GPUTimeUs) || math.IsInf(s.GPUTimeUs, 0) || s.GPUTimeUs < 0 || s.Instances < 0 {
		return s, fmt.Errorf("codegen: %s: instances and gpu_time_us must be finite non-negative numbers", s.Pattern)
	}
	if len(s.Source.Trace) > maxText || len(s.Source.Site) > maxText {
		return s, fmt.Errorf("codegen: %s: source text longer than %d bytes", s.Pattern, maxText)
	}
	// parameters the pattern does not use must be zero; the others take their default and
	// are checked against the schema
	for _, f := range fields {
		sp, used := pat.Param(f.name)
		if !used {
			if v := f.get(&s.Params); !isZero(v) {
				return s, fmt.Errorf("codegen: %s: parameter %s=%s is not used by this pattern", s.Pattern, f.name, strconv.Quote(fmt.Sprint(v)))
			}
			continue
		}
		if err := f.resolve(sp, &s.Params); err != nil {
			return s, fmt.Errorf("codegen: %s: %v", s.Pattern, err)
		}
	}
	p := &s.Params
	if p.ResidualDtype == s.Dtype {
		p.ResidualDtype = "" // canonical: the same dtype is the default
	}
	if p.NormDim == "-1" {
		p.NormDim = "" // canonical: the last dim is the default, not written (folders keep their names)
	}
	if _, ok := pat.Param("mask_kind"); ok {
		// an attention case's mask follows q, k and v: its entry's check reads it
		if err := checkMask(s); pat.Kind != patterns.KindAttention && err != nil {
			return s, fmt.Errorf("codegen: %s: %v", s.Pattern, err)
		}
		if p.MaskDtype != "" && p.MaskKind != "additive" {
			return s, fmt.Errorf("codegen: %s: mask_dtype=%s needs an additive mask", s.Pattern, strconv.Quote(p.MaskDtype))
		}
	}
	if p.MaskDtype == s.Dtype {
		p.MaskDtype = "" // canonical: the same dtype is the default
	}
	if p.OutDtype == defaultOutDtype(s) {
		p.OutDtype = "" // canonical: the default is not written
	}
	if err := pat.Check(patterns.Case{Dtype: s.Dtype, Shapes: s.Shapes, Params: s.Params}); err != nil {
		return s, fmt.Errorf("codegen: %s: %v", s.Pattern, err)
	}
	return s, nil
}

// defaultOutDtype is the output dtype a pattern gives without out_dtype: the input's, or for an
// additive mask or a residual of another dtype, the promoted type (fp32 whenever the two
// differ).
func defaultOutDtype(s Spec) string {
	if s.Params.MaskDtype != "" && s.Params.MaskDtype != s.Dtype {
		return "fp32"
	}
	if s.Params.ResidualDtype != "" && s.Params.ResidualDtype != s.Dtype {
		return "fp32" // add_layernorm: y in the sum's type, the promotion of the two
	}
	return s.Dtype
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
