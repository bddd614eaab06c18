package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/patterns"
)

// genItem is one folder to write: a generator spec and its folder name.
type genItem struct {
	Spec codegen.Spec
	Name string
}

// specsFor turns a trace's (or a saved analysis's) opportunities into generator specs, one
// per pattern, shape group and dtype. Groups a template cannot express are skipped with a
// reason (returned for the user); nothing from the trace but validated numbers and enum
// values reaches a spec's code-bearing fields.
func specsFor(args []string, from string, o analyzeOptions) ([]genItem, []string, error) {
	var rep *patterns.Report
	switch {
	case from != "" && len(args) > 0:
		return nil, nil, usagef("give a trace or -from, not both")
	case from != "":
		b, err := os.ReadFile(from)
		if err != nil {
			return nil, nil, err
		}
		var a Analysis
		var shape struct {
			Trace         *json.RawMessage `json:"trace"`
			Opportunities *json.RawMessage `json:"opportunities"`
		}
		err = json.Unmarshal(b, &shape)
		if err == nil && (shape.Trace == nil || shape.Opportunities == nil) {
			err = fmt.Errorf("no \"trace\" object or \"opportunities\" list")
		}
		if err == nil {
			err = json.Unmarshal(b, &a)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: not the JSON of 'fuseadvise analyze -format json': %s", from, jsonProblem(err))
		}
		rep = a.Report
		rep.Opportunities = selectOpportunities(rep.Opportunities, o)
	case len(args) == 1:
		a, err := analyze(args[0], o)
		if err != nil {
			return nil, nil, err
		}
		rep = a.Result.Report
	default:
		return nil, nil, usagef("want one trace file or directory (or -from FILE), got %d arguments", len(args))
	}
	return specsFromReport(rep)
}

func selectOpportunities(ops []patterns.Opportunity, o analyzeOptions) []patterns.Opportunity {
	var out []patterns.Opportunity
	for _, op := range ops {
		if o.Pattern == "" || op.Pattern == o.Pattern {
			out = append(out, op)
		}
	}
	if o.Top > 0 && len(out) > o.Top {
		out = out[:o.Top]
	}
	return out
}

func specsFromReport(rep *patterns.Report) ([]genItem, []string, error) {
	var items []genItem
	var skipped []string
	have := map[string]bool{}
	for _, p := range codegen.Patterns() {
		have[p] = true
	}
	for _, op := range rep.Opportunities {
		if !have[op.Pattern] {
			skipped = append(skipped, op.Pattern+": no template")
			continue
		}
		for _, g := range op.Shapes {
			s, why := specFromGroup(op.Pattern, g)
			if why != "" {
				skipped = append(skipped, fmt.Sprintf("%s %s %s: %s", op.Pattern, dimsString(g.Dims), g.DType, why))
				continue
			}
			s.Source = codegen.Source{Trace: rep.Trace.Path, Site: site(op, g) + assumed(op.Pattern, g)}
			if err := codegen.Validate(s); err != nil {
				skipped = append(skipped, fmt.Sprintf("%s %s %s: %v", op.Pattern, dimsString(g.Dims), g.DType, err))
				continue
			}
			name, err := codegen.DirName(s)
			if err != nil {
				return nil, nil, err
			}
			items = append(items, genItem{Spec: s, Name: name})
		}
	}
	return items, skipped, nil
}

// site describes where the chain was found, for manifest.json and README.md (data only).
func site(op patterns.Opportunity, g patterns.ShapeGroup) string {
	s := fmt.Sprintf("%d instance(s) of %s", g.Instances, op.Pattern)
	if len(g.Sources) > 0 {
		s += " at " + strings.Join(g.Sources, "; ")
	}
	return s
}

// autocastGEMM reports a layernorm_linear chain whose GEMM ran in a 16-bit type under
// autocast while its LayerNorm ran in fp32: the case is generated in the GEMM's type, which
// decides the chain's time (the template takes one dtype for x, the weights and y).
func autocastGEMM(g patterns.ShapeGroup) bool {
	return g.DType == patterns.FP32 && (g.Params.OutDType == patterns.BF16 || g.Params.OutDType == patterns.FP16)
}

// residualDtype is the case's residual dtype: the traced one when it is a kernel dtype
// other than dtype, else "" (the same as dtype).
func residualDtype(dtype string, r patterns.DType) string {
	if d, ok := kernelDtype(r); ok && d != dtype {
		return d
	}
	return ""
}

func kernelDtype(d patterns.DType) (string, bool) {
	switch d {
	case patterns.FP32, patterns.FP16, patterns.BF16:
		return string(d), true
	}
	return "", false
}

// assumed names the parameters the trace did not record, for which the kernel uses its
// default, so the folder says what it assumed rather than guessing silently.
func assumed(pattern string, g patterns.ShapeGroup) string {
	var a []string
	p := g.Params
	switch pattern {
	case "add_layernorm", "layernorm_linear":
		if p.Eps == nil {
			a = append(a, "eps not recorded (1e-5 used)")
		}
		if pattern == "layernorm_linear" && p.Linears > 1 && p.ConcatN > 0 {
			a = append(a, fmt.Sprintf("the %d GEMMs reading the norm output run as one GEMM over their concatenated weights (N = %d, split after)",
				p.Linears, p.ConcatN))
		}
		if pattern == "layernorm_linear" && autocastGEMM(g) {
			a = append(a, fmt.Sprintf("the trace ran the LayerNorm in %s and the GEMM in %s (autocast); this case runs both in %s",
				g.DType, p.OutDType, p.OutDType))
		}
	case "rmsnorm_pyops":
		if p.Eps == nil {
			a = append(a, "eps not recorded (1e-6 used)")
		}
	case "mask_softmax":
		if p.Scale == nil {
			a = append(a, "scale not recorded (1.0 used)")
		}
	case "dropout_add":
		if p.P == nil {
			a = append(a, "dropout p not recorded (0 used)")
		}
	}
	if len(a) == 0 {
		return ""
	}
	return "; " + strings.Join(a, "; ")
}

// specFromGroup maps one shape group to a spec, or says why it cannot.
func specFromGroup(pattern string, g patterns.ShapeGroup) (codegen.Spec, string) {
	s := codegen.Spec{Pattern: pattern, EstSavingUs: g.EstSavingUs}
	if g.Instances > 0 && g.EstFusedUs > 0 {
		s.EstFusedUs = g.EstFusedUs / float64(g.Instances)
	}
	if !g.Valid {
		return s, "shapes or dtype out of range for a kernel"
	}
	dt, ok := kernelDtype(g.DType)
	if !ok {
		return s, fmt.Sprintf("dtype %q has no kernel (fp32, fp16, bf16 only)", g.DType)
	}
	s.Dtype = dt
	if len(g.Dims) == 0 || len(g.Dims[0]) == 0 {
		return s, "no input shape recorded"
	}
	x := g.Dims[0]
	p := g.Params
	switch pattern {
	case "add_layernorm", "layernorm_linear", "rmsnorm_pyops":
		if g.Cols > 0 && g.Cols != x[len(x)-1] {
			// e.g. timm's LayerNorm2d: permute -> layer_norm over channels -> permute back
			return s, fmt.Sprintf("normalizes over %d elements, not the last dim %d (a permuted norm)", g.Cols, x[len(x)-1])
		}
	}
	switch pattern {
	case "bias_gelu":
		s.Params.Approximate = orDefault(p.Approximate, "none")
		s.Params.HasBias = true
		s.Shapes = [][]int64{x, {x[len(x)-1]}}
	case "gelu_pyops":
		s.Shapes = [][]int64{x}
		if d, ok := kernelDtype(p.OutDType); ok {
			s.Params.OutDtype = d // autocast: bf16 in, fp32 out (codegen drops it when equal)
		}
	case "linear_gelu", "layernorm_linear":
		if len(g.Dims) < 2 || len(g.Dims[1]) != 2 {
			return s, "no weight shape recorded"
		}
		k := x[len(x)-1]
		w := g.Dims[1]
		var n int64
		switch {
		case w[1] == k: // nn.Linear weight [N, K]
			n = w[0]
		case w[0] == k: // Conv1D-style addmm(bias, x, W) with W [K, N]
			n = w[1]
		default:
			return s, fmt.Sprintf("weight %v does not match the input's last dim %d", w, k)
		}
		if pattern == "layernorm_linear" && p.Linears > 1 {
			if p.ConcatN <= 0 {
				return s, fmt.Sprintf("%d GEMMs of different inputs or ops read the norm output (one case per GEMM is not the chain)", p.Linears)
			}
			n = p.ConcatN // Q, K, V: one GEMM over the concatenated weights
		}
		s.Shapes = [][]int64{x, {n, k}}
		if p.Bias == nil || *p.Bias {
			s.Params.HasBias = true
			s.Shapes = append(s.Shapes, []int64{n})
		}
		if pattern == "linear_gelu" {
			s.Params.Approximate = orDefault(p.Approximate, "none")
		} else {
			if p.Eps != nil {
				s.Params.Eps = *p.Eps
			}
			if autocastGEMM(g) {
				s.Dtype = string(p.OutDType)
			}
		}
	case "mask_softmax":
		if p.SoftmaxDim != nil && *p.SoftmaxDim != int64(len(x)-1) {
			return s, "softmax over a dim other than the last"
		}
		s.Params.MaskKind = orDefault(p.MaskKind, "none")
		s.Params.Scale = 1
		if p.Scale != nil && *p.Scale != 0 {
			s.Params.Scale = *p.Scale
			if p.ScaleOp == "div" {
				s.Params.Scale = 1 / *p.Scale
			}
		}
		s.Shapes = [][]int64{x}
		if s.Params.MaskKind == "bool" || s.Params.MaskKind == "additive" {
			mask := p.MaskDims
			if len(mask) == 0 && len(g.Dims) > 1 {
				mask = g.Dims[1]
			}
			if len(mask) == 0 {
				return s, "mask shape not recorded"
			}
			s.Shapes = append(s.Shapes, mask)
		}
		if d, ok := kernelDtype(p.MaskDType); ok && s.Params.MaskKind == "additive" {
			s.Params.MaskDtype = d
		}
		if d, ok := kernelDtype(p.OutDType); ok {
			s.Params.OutDtype = d // autocast's fp32 softmax, or softmax(dtype=torch.float32)
		}
	case "add_layernorm":
		s.Shapes = [][]int64{x}
		if len(g.Dims) > 1 && !slices.Equal(g.Dims[1], x) {
			r := g.Dims[1]
			if !codegen.LeadingBroadcast(r, x) {
				return s, fmt.Sprintf("the residual %v broadcasts to x %v other than along leading dims", r, x)
			}
			s.Shapes = append(s.Shapes, r) // e.g. position embeddings [1, S, H] on [B, S, H]
		}
		if p.Eps != nil {
			s.Params.Eps = *p.Eps
		}
		s.Params.ResidualDtype = residualDtype(s.Dtype, p.ResidualDType)
	case "dropout_add":
		s.Shapes = [][]int64{x}
		if p.P != nil {
			s.Params.P = *p.P
		}
		s.Params.ResidualDtype = residualDtype(s.Dtype, p.ResidualDType)
	case "rmsnorm_pyops":
		switch p.Casting {
		case "llama", "":
			s.Params.Casting = "llama"
			if d, ok := kernelDtype(p.OutDType); ok {
				s.Dtype = d // llama casting: the model's dtype, upcast inside
			}
		case "none":
			s.Params.Casting = "fp32"
		default:
			return s, fmt.Sprintf("casting %q has no template variant", p.Casting)
		}
		s.Shapes = [][]int64{x}
		if p.Eps != nil {
			s.Params.Eps = *p.Eps
		}
	case "swiglu":
		s.Shapes = [][]int64{x}
	default:
		return s, "no template"
	}
	return s, ""
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// jsonProblem describes a decoding error without Go type names.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("offset %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field == "" {
			return fmt.Sprintf("offset %d: a JSON %s where an object was expected", te.Offset, te.Value)
		}
		return fmt.Sprintf("offset %d: field %q holds a JSON %s", te.Offset, te.Field, te.Value)
	}
	return err.Error()
}
