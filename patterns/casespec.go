package patterns

import (
	"fmt"
	"slices"
)

// Case maps one shape group of the pattern's opportunity to the kernel case codegen
// generates (nothing from the trace but validated numbers and enum values), or says why it
// cannot: a group the template cannot express.
func (p *Pattern) Case(g ShapeGroup) (Case, string) {
	var c Case
	if !g.Valid {
		return c, "shapes or dtype out of range for a kernel"
	}
	if !g.DType.Kernel() {
		return c, fmt.Sprintf("dtype %q has no kernel (fp32, fp16, bf16 only)", g.DType)
	}
	c.Dtype = string(g.DType)
	if len(g.Dims) == 0 || len(g.Dims[0]) == 0 {
		return c, "no input shape recorded"
	}
	if p.toCase == nil {
		return c, "no template"
	}
	return c, p.toCase(g, &c)
}

// Assumed names the parameters the trace did not record, for which the case uses the
// kernel's default, so a folder says what it assumed rather than guessing silently.
func (p *Pattern) Assumed(g ShapeGroup) []string {
	if p.assume == nil {
		return nil
	}
	return p.assume(g)
}

// Notes are what a group's folder says beside the usage snippet (how to hand the kernel
// what the traced code computed elsewhere); nil for nothing.
func (p *Pattern) Notes(g ShapeGroup) []string {
	if p.note == nil {
		return nil
	}
	return p.note(g)
}

// Check validates the structure of a case's shapes beyond what every pattern needs (a
// GEMM's weight, a residual's broadcast).
func (p *Pattern) Check(c Case) error {
	if p.check == nil {
		return nil
	}
	return p.check(c)
}

// kernelDtype is d as a case spells it, when a kernel takes it.
func kernelDtype(d DType) (string, bool) {
	if d.Kernel() {
		return string(d), true
	}
	return "", false
}

// residualDtype is the case's residual dtype: the traced one when it is a kernel dtype other
// than dtype, else "" (the same as dtype).
func residualDtype(dtype string, r DType) string {
	if d, ok := kernelDtype(r); ok && d != dtype {
		return d
	}
	return ""
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// lastDimNorm refuses a norm over other elements than the last dim (timm's LayerNorm2d:
// permute -> layer_norm over channels -> permute back), and one detection found to normalize
// another dim through a permute.
func lastDimNorm(g ShapeGroup) string {
	x := g.Dims[0]
	if d := g.Params.NormDim; d != nil && *d != int64(len(x)-1) {
		return fmt.Sprintf("normalizes dim %d of %v, not the last (a permuted norm)", *d, x)
	}
	if g.Cols > 0 && g.Cols != x[len(x)-1] {
		return fmt.Sprintf("normalizes over %d elements, not the last dim %d (a permuted norm)", g.Cols, x[len(x)-1])
	}
	return ""
}

// channelsFirstNorm reports a norm over dim 1 of x [B, C, ...] that the add_layernorm template
// runs with norm_dim 1: detection followed the permute to dim 1 (NormDim), the normalized
// size is C, and any residual has x's dims (it may broadcast along the batch).
func channelsFirstNorm(g ShapeGroup) bool {
	x := g.Dims[0]
	return g.Params.NormDim != nil && *g.Params.NormDim == 1 && len(x) >= 3 && g.Cols == x[1] &&
		(len(g.Dims) < 2 || len(g.Dims[1]) == len(x))
}

// autocastGEMM reports a layernorm_linear chain whose GEMM ran in a 16-bit type under
// autocast while its LayerNorm ran in fp32: the case is generated in the GEMM's type, which
// decides the chain's time (the template takes one dtype for x, the weights and y).
func autocastGEMM(g ShapeGroup) bool {
	return g.DType == FP32 && (g.Params.OutDType == BF16 || g.Params.OutDType == FP16)
}

func caseBiasGelu(g ShapeGroup, c *Case) string {
	x := g.Dims[0]
	c.Params.Approximate = orDefault(g.Params.Approximate, "none")
	c.Params.HasBias = true
	c.Shapes = [][]int64{x, {x[len(x)-1]}}
	return ""
}

func caseGeluPyops(g ShapeGroup, c *Case) string {
	c.Shapes = [][]int64{g.Dims[0]}
	if d, ok := kernelDtype(g.Params.OutDType); ok {
		c.Params.OutDtype = d // autocast: bf16 in, fp32 out (codegen drops it when equal)
	}
	return ""
}

// gemmCase fills a GEMM pattern's shapes [x, weight [N, K], (bias [N])] and bias.
func gemmCase(g ShapeGroup, c *Case, concat bool) string {
	x, p := g.Dims[0], g.Params
	if len(g.Dims) < 2 || len(g.Dims[1]) != 2 {
		return "no weight shape recorded"
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
		return fmt.Sprintf("weight %v does not match the input's last dim %d", w, k)
	}
	if concat && p.Linears > 1 {
		if p.ConcatN <= 0 {
			return fmt.Sprintf("%d GEMMs of different inputs or ops read the norm output (one case per GEMM is not the chain)", p.Linears)
		}
		n = p.ConcatN // Q, K, V: one GEMM over the concatenated weights
	}
	c.Shapes = [][]int64{x, {n, k}}
	if p.Bias == nil || *p.Bias {
		c.Params.HasBias = true
		c.Shapes = append(c.Shapes, []int64{n})
	}
	return ""
}

func caseLinearGelu(g ShapeGroup, c *Case) string {
	if why := gemmCase(g, c, false); why != "" {
		return why
	}
	c.Params.Approximate = orDefault(g.Params.Approximate, "none")
	return ""
}

func caseLayerNormLinear(g ShapeGroup, c *Case) string {
	if why := lastDimNorm(g); why != "" {
		return why
	}
	if why := gemmCase(g, c, true); why != "" {
		return why
	}
	if g.Params.Eps != nil {
		c.Params.Eps = *g.Params.Eps
	}
	c.Params.ConvBias = g.Params.ConvBias
	if autocastGEMM(g) {
		c.Dtype = string(g.Params.OutDType)
	}
	return ""
}

func caseMaskSoftmax(g ShapeGroup, c *Case) string {
	x, p := g.Dims[0], g.Params
	if p.SoftmaxDim != nil && *p.SoftmaxDim != int64(len(x)-1) {
		return "softmax over a dim other than the last"
	}
	c.Params.MaskKind = orDefault(p.MaskKind, "none")
	c.Params.Scale = 1
	if p.Scale != nil && *p.Scale != 0 {
		c.Params.Scale = *p.Scale
		if p.ScaleOp == "div" {
			c.Params.Scale = 1 / *p.Scale
		}
	}
	c.Shapes = [][]int64{x}
	if c.Params.MaskKind == "bool" || c.Params.MaskKind == "additive" {
		mask := p.MaskDims
		if len(mask) == 0 && len(g.Dims) > 1 {
			mask = g.Dims[1]
		}
		if len(mask) == 0 {
			return "mask shape not recorded"
		}
		c.Shapes = append(c.Shapes, mask)
	}
	if d, ok := kernelDtype(p.MaskDType); ok && c.Params.MaskKind == "additive" {
		c.Params.MaskDtype = d
	}
	if d, ok := kernelDtype(p.OutDType); ok {
		c.Params.OutDtype = d // autocast's fp32 softmax, or softmax(dtype=torch.float32)
	}
	return ""
}

func caseAddLayerNorm(g ShapeGroup, c *Case) string {
	if channelsFirstNorm(g) {
		c.Params.NormDim = "1" // timm's LayerNorm2d: the kernel normalizes dim 1
	} else if why := lastDimNorm(g); why != "" {
		return why
	}
	x := g.Dims[0]
	c.Shapes = [][]int64{x}
	if len(g.Dims) > 1 && !slices.Equal(g.Dims[1], x) {
		r := g.Dims[1]
		if !residualBroadcast(r, x, c.Params.NormDim) {
			return fmt.Sprintf("the residual %v broadcasts to x %v other than along leading dims", r, x)
		}
		// e.g. position embeddings [1, S, H] on [B, S, H]; a convolution's bias [1, C, 1, 1]
		// on a channels-first [B, C, H, W] (conv_bias)
		c.Shapes = append(c.Shapes, r)
	}
	if g.Params.Eps != nil {
		c.Params.Eps = *g.Params.Eps
	}
	c.Params.ConvBias = g.Params.ConvBias
	c.Params.ResidualDtype = residualDtype(c.Dtype, g.Params.ResidualDType)
	if d, ok := kernelDtype(g.Params.OutDType); ok {
		// y's type where it is not the sum's: a GEMM's cast taken (takeOutputCasts), or
		// autocast's fp32 layer_norm of a 16-bit sum (codegen drops it when the sum's)
		c.Params.OutDtype = d
	}
	return ""
}

func caseDropoutAdd(g ShapeGroup, c *Case) string {
	x := g.Dims[0]
	c.Shapes = [][]int64{x}
	if g.Params.Bias != nil && *g.Params.Bias { // a bias add, or the GEMM's bias (GEMMBias), before the dropout
		if len(g.Dims) < 3 || len(g.Dims[2]) != 1 || g.Dims[2][0] != x[len(x)-1] {
			return "the bias is not a vector of the last dim"
		}
		c.Params.HasBias = true
		c.Params.GEMMBias = g.Params.GEMMBias
		c.Shapes = append(c.Shapes, []int64{x[len(x)-1]})
	}
	if g.Params.P != nil {
		c.Params.P = *g.Params.P
	}
	c.Params.ResidualDtype = residualDtype(c.Dtype, g.Params.ResidualDType)
	return ""
}

func caseRMSNormPyops(g ShapeGroup, c *Case) string {
	if why := lastDimNorm(g); why != "" {
		return why
	}
	p := g.Params
	cast := p.OutCast // y written in the GEMMs' 16-bit type (takeOutputCasts); x and the weight as traced
	switch p.Casting {
	case "llama", "":
		c.Params.Casting = "llama"
		if d, ok := kernelDtype(p.OutDType); ok && !cast {
			c.Dtype = d // llama casting: the model's dtype, upcast inside
		}
	case "none":
		c.Params.Casting = "fp32"
	default:
		return fmt.Sprintf("casting %q has no template variant", p.Casting)
	}
	if cast {
		c.Params.OutDtype = string(p.OutDType) // x and the weight fp32, y written in the GEMMs' type
	}
	c.Shapes = [][]int64{g.Dims[0]}
	if p.Eps != nil {
		c.Params.Eps = *p.Eps
	}
	return ""
}

func caseSwiGLU(g ShapeGroup, c *Case) string {
	c.Shapes = [][]int64{g.Dims[0]}
	return ""
}

// assumeEps says when a norm's eps was not recorded; def is the schema's default as the
// note spells it.
func assumeEps(def string) func(g ShapeGroup) []string {
	return func(g ShapeGroup) []string {
		if g.Params.Eps == nil {
			return []string{"eps not recorded (" + def + " used)"}
		}
		return nil
	}
}

func assumeLayerNormLinear(g ShapeGroup) []string {
	a := assumeEps("1e-5")(g)
	p := g.Params
	if p.Linears > 1 && p.ConcatN > 0 {
		a = append(a, fmt.Sprintf("the %d GEMMs reading the norm output run as one GEMM over their concatenated weights (N = %d, split after)",
			p.Linears, p.ConcatN))
	}
	if autocastGEMM(g) {
		a = append(a, fmt.Sprintf("the trace ran the LayerNorm in %s and the GEMM in %s (autocast); this case runs both in %s",
			g.DType, p.OutDType, p.OutDType))
	}
	return a
}

func assumeMaskSoftmax(g ShapeGroup) []string {
	if g.Params.Scale == nil {
		return []string{"scale not recorded (1.0 used)"}
	}
	return nil
}

func assumeDropoutAdd(g ShapeGroup) []string {
	if g.Params.P == nil {
		return []string{"dropout p not recorded (0 used)"}
	}
	return nil
}

// checkGEMMShapes: a GEMM case needs the input [..., K] and the weight [N, K].
func checkGEMMShapes(c Case) error {
	if len(c.Shapes) < 2 || len(c.Shapes[1]) != 2 {
		return fmt.Errorf("needs the input [..., K] and the weight [N, K] as shapes")
	}
	x, w := c.Shapes[0], c.Shapes[1]
	if x[len(x)-1] != w[1] {
		return fmt.Errorf("input K=%d does not match weight %v", x[len(x)-1], w)
	}
	return nil
}

// checkResidualBroadcast: add_layernorm reads a residual of x's shape or one broadcast along
// its leading dims in place.
func checkResidualBroadcast(c Case) error {
	if len(c.Shapes) > 1 && !residualBroadcast(c.Shapes[1], c.Shapes[0], c.Params.NormDim) {
		return fmt.Errorf("residual %v must be x's shape %v or broadcast along its leading dims (the normalized dim last)", c.Shapes[1], c.Shapes[0])
	}
	return nil
}

// residualBroadcast is LeadingBroadcast with the normalized dim last, as the add_layernorm
// kernel reads them: for a channels-first norm (normDim "1") dim 1 of both moved last, so a
// convolution's bias [1, C, 1, 1] on [B, C, H, W] broadcasts along the leading dims of
// [B, H, W, C].
func residualBroadcast(r, x []int64, normDim string) bool {
	if normDim != "1" || len(r) != len(x) || len(x) < 3 {
		return LeadingBroadcast(r, x)
	}
	last := func(d []int64) []int64 { return append(append([]int64{d[0]}, d[2:]...), d[1]) }
	return LeadingBroadcast(last(r), last(x))
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
