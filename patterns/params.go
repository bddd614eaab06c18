package patterns

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// KernelParams are a generated kernel's parameters (case.py's PARAMS). A zero value means
// the default of the pattern's schema (Pattern.Params); fields a pattern's schema does not
// name must be left zero. codegen validates them against the schema.
type KernelParams struct {
	Approximate string // GELU: "none" (erf, default) or "tanh"
	HasBias     bool   // the chain adds a bias
	// GEMMBias, dropout_add: the bias is a GEMM's (its epilogue added it in the traced
	// model): the reference's forward reads the GEMM's output with it, its backward sums the
	// bias gradient, as eager's GEMM backward does.
	GEMMBias bool
	// ConvBias, layernorm_linear: the norm's input is a convolution's output with its bias
	// (ConvNeXt's depthwise conv, permuted to channels-last): the kernel takes the bias
	// (pre_bias), the reference adds it first as the convolution's own add did.
	ConvBias bool
	MaskKind string  // "none" (default), "bool", "additive", "causal"
	MaskFill string  // bool/causal mask fill: "-inf" (default), "min" (dtype min) or a finite number
	Scale    float64 // multiplier applied before the mask (default 1)
	Eps      float64 // norm epsilon (default per pattern)
	P        float64 // dropout probability in [0, 1) (default 0)
	BiasKind string  // attention: a bias added to the scores, "none" (default), "additive" or "alibi"
	Casting  string  // RMSNorm: "llama" (default) or "fp32"
	// ResidualDtype is the residual's dtype when it differs from the case's (an fp32
	// residual stream plus a bf16 branch under autocast); "" = the case's dtype.
	ResidualDtype string
	// OutDtype is the output's dtype when it differs from the pattern's default (the case's
	// dtype, or for an additive mask of another dtype the promoted type): autocast runs pow
	// and softmax in fp32, so a bf16 input gives an fp32 output. "" = default.
	OutDtype string
	// MaskDtype is an additive mask's dtype when it differs from the case's (an fp32 mask
	// added to bf16 scores under autocast). "" = the case's dtype.
	MaskDtype string
	// NormDim is the dim a norm normalizes: "-1" (the last, default) or "1" (channels-first
	// [B, C, ...], timm's LayerNorm2d). codegen writes it only when it is "1".
	NormDim string
	// Reduction, cross_entropy: "mean" (default), "sum" or "none".
	Reduction string
	// IgnoreIndex, cross_entropy: the target value whose rows the loss skips, an integer
	// written as a number ("" = -100, the default).
	IgnoreIndex string
	// Upcast, cross_entropy: "float" (default: the model's logits.float() before the loss),
	// "autocast" (the loss of 16-bit logits under CUDA autocast) or "none".
	Upcast string
	// LabelSmoothing, cross_entropy: e in [0, 1] (default 0).
	LabelSmoothing float64
}

// KernelParamNames are the names of KernelParams' fields as case.py and manifest.json spell
// them, in the order codegen writes them.
var KernelParamNames = []string{"approximate", "has_bias", "gemm_bias", "conv_bias", "mask_kind", "mask_fill", "scale", "eps", "p", "bias_kind", "casting",
	"residual_dtype", "mask_dtype", "out_dtype", "norm_dim", "reduction", "ignore_index", "upcast", "label_smoothing"}

// Case is the kernel case one shape group maps to: what codegen generates, less the
// source and the estimates.
type Case struct {
	Dtype  string // "fp32", "fp16" or "bf16"
	Shapes [][]int64
	Params KernelParams
}

// ParamKind is what values a kernel parameter takes.
type ParamKind string

const (
	ParamEnum   ParamKind = "enum"   // one word of Values (or, with OrNumber, a finite number)
	ParamBool   ParamKind = "bool"   // true or false (default false)
	ParamNumber ParamKind = "number" // a finite number in the range
	ParamDtype  ParamKind = "dtype"  // fp32, fp16 or bf16; written only when it differs from its default
)

// Param is one entry of a pattern's parameter schema.
type Param struct {
	Name string // the key in case.py's PARAMS and manifest.json's params: one of KernelParamNames
	Kind ParamKind
	// Values are the words a ParamEnum allows.
	Values []string
	// OrNumber lets a ParamEnum take a finite number with |v| <= Max as well.
	OrNumber bool
	// Min and Max bound a ParamNumber (|v| with Abs); MinOpen and MaxOpen exclude an end.
	Min, Max         float64
	MinOpen, MaxOpen bool
	Abs              bool
	// Default is the value a zero field takes (a word, or a number as strconv.ParseFloat
	// reads it); "" for ParamBool (false) and ParamDtype (derived from the case).
	Default string
}

// The parameters the templates take; a pattern's schema lists those its kernel reads.
var (
	paramApproximate   = Param{Name: "approximate", Kind: ParamEnum, Values: []string{"none", "tanh"}, Default: "none"}
	paramHasBias       = Param{Name: "has_bias", Kind: ParamBool}
	paramGEMMBias      = Param{Name: "gemm_bias", Kind: ParamBool}
	paramConvBias      = Param{Name: "conv_bias", Kind: ParamBool}
	paramMaskKind      = Param{Name: "mask_kind", Kind: ParamEnum, Values: []string{"none", "bool", "additive", "causal"}, Default: "none"}
	paramMaskFill      = Param{Name: "mask_fill", Kind: ParamEnum, Values: []string{"-inf", "min"}, OrNumber: true, Max: math.MaxFloat32, Default: "-inf"}
	paramScale         = Param{Name: "scale", Kind: ParamNumber, Abs: true, Min: 1e-12, Max: 1e12, Default: "1"}
	paramP             = Param{Name: "p", Kind: ParamNumber, Min: 0, Max: 1, MaxOpen: true, Default: "0"}
	paramBiasKind      = Param{Name: "bias_kind", Kind: ParamEnum, Values: []string{"none", "additive", "alibi"}, Default: "none"}
	paramCasting       = Param{Name: "casting", Kind: ParamEnum, Values: []string{"llama", "fp32"}, Default: "llama"}
	paramResidualDtype = Param{Name: "residual_dtype", Kind: ParamDtype}
	paramMaskDtype     = Param{Name: "mask_dtype", Kind: ParamDtype}
	paramOutDtype      = Param{Name: "out_dtype", Kind: ParamDtype}
	paramNormDim       = Param{Name: "norm_dim", Kind: ParamEnum, Values: []string{"-1", "1"}, Default: "-1"}
	paramReduction     = Param{Name: "reduction", Kind: ParamEnum, Values: []string{"mean", "sum", "none"}, Default: "mean"}
	// an integer; Pattern.check holds it to one (the schema's numbers are floats)
	paramIgnoreIndex = Param{Name: "ignore_index", Kind: ParamEnum, Values: []string{"-100"}, OrNumber: true, Max: 1 << 53, Default: "-100"}
	paramUpcast      = Param{Name: "upcast", Kind: ParamEnum, Values: []string{"float", "autocast", "none"}, Default: "float"}
	paramLabelSmooth = Param{Name: "label_smoothing", Kind: ParamNumber, Min: 0, Max: 1, Default: "0"}
)

// paramEps is a norm's epsilon, 0 < eps <= 1, with its default.
func paramEps(def float64) Param {
	return Param{Name: "eps", Kind: ParamNumber, Min: 0, MinOpen: true, Max: 1, Default: strconv.FormatFloat(def, 'g', -1, 64)}
}

// KernelDtypes are the dtypes a ParamDtype (and a case) takes.
var KernelDtypes = []string{"fp32", "fp16", "bf16"}

// Param returns the schema entry named name, if the pattern takes it.
func (p *Pattern) Param(name string) (Param, bool) {
	for _, q := range p.Params {
		if q.Name == name {
			return q, true
		}
	}
	return Param{}, false
}

// Want describes the values p allows, for error messages: "none or tanh", "0 < eps <= 1".
func (p Param) Want() string {
	switch p.Kind {
	case ParamEnum:
		w := p.Values
		if p.OrNumber {
			w = append(w[:len(w):len(w)], "a finite number")
		}
		return orList(w)
	case ParamNumber:
		name := p.Name
		if p.Abs {
			name = "|" + name + "|"
		}
		lo, hi := " <= ", " <= "
		if p.MinOpen {
			lo = " < "
		}
		if p.MaxOpen {
			hi = " < "
		}
		return strconv.FormatFloat(p.Min, 'g', -1, 64) + lo + name + hi + strconv.FormatFloat(p.Max, 'g', -1, 64)
	case ParamDtype:
		return orList(KernelDtypes)
	}
	return "true or false"
}

func orList(w []string) string {
	if len(w) < 2 {
		return strings.Join(w, "")
	}
	return strings.Join(w[:len(w)-1], ", ") + " or " + w[len(w)-1]
}

// CheckWord validates a ParamEnum value ("" takes the default) and returns it canonical (a
// number as strconv.FormatFloat writes it).
func (p Param) CheckWord(v string) (string, error) {
	if v == "" {
		v = p.Default
	}
	for _, w := range p.Values {
		if v == w {
			return v, nil
		}
	}
	if p.OrNumber {
		f, err := strconv.ParseFloat(v, 64)
		if err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) && math.Abs(f) <= p.Max {
			return strconv.FormatFloat(f, 'g', -1, 64), nil
		}
	}
	return "", fmt.Errorf("%s=%s (want %s)", p.Name, strconv.Quote(v), p.Want())
}

// CheckNumber validates a ParamNumber value (0 takes the default) and returns it.
func (p Param) CheckNumber(v float64) (float64, error) {
	if v == 0 && p.Default != "" {
		d, err := strconv.ParseFloat(p.Default, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: default %s is not a number", p.Name, strconv.Quote(p.Default))
		}
		v = d
	}
	a := v
	if p.Abs {
		a = math.Abs(v)
	}
	ok := !math.IsNaN(v) && !math.IsInf(v, 0) &&
		(a > p.Min || !p.MinOpen && a == p.Min) && (a < p.Max || !p.MaxOpen && a == p.Max)
	if !ok {
		return 0, fmt.Errorf("%s=%v (want %s)", p.Name, v, p.Want())
	}
	return v, nil
}

// CheckDtype validates a ParamDtype value ("" is the default).
func (p Param) CheckDtype(v string) error {
	if v == "" {
		return nil
	}
	for _, d := range KernelDtypes {
		if v == d {
			return nil
		}
	}
	return fmt.Errorf("%s=%s (want %s)", p.Name, strconv.Quote(v), p.Want())
}
