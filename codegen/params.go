package codegen

import (
	"fmt"
	"math"
	"strconv"

	"github.com/fuseadvise/fuseadvise/patterns"
)

// field is one field of Params under its case.py name; ptr returns a *string, *bool or
// *float64 into p.
type field struct {
	name string
	ptr  func(p *Params) any
}

// fields are Params' fields in the order case.py and manifest.json list them
// (patterns.KernelParamNames).
var fields = []field{
	{"approximate", func(p *Params) any { return &p.Approximate }},
	{"has_bias", func(p *Params) any { return &p.HasBias }},
	{"gemm_bias", func(p *Params) any { return &p.GEMMBias }},
	{"conv_bias", func(p *Params) any { return &p.ConvBias }},
	{"mask_kind", func(p *Params) any { return &p.MaskKind }},
	{"mask_fill", func(p *Params) any { return &p.MaskFill }},
	{"scale", func(p *Params) any { return &p.Scale }},
	{"eps", func(p *Params) any { return &p.Eps }},
	{"p", func(p *Params) any { return &p.P }},
	{"bias_kind", func(p *Params) any { return &p.BiasKind }},
	{"casting", func(p *Params) any { return &p.Casting }},
	{"residual_dtype", func(p *Params) any { return &p.ResidualDtype }},
	{"mask_dtype", func(p *Params) any { return &p.MaskDtype }},
	{"out_dtype", func(p *Params) any { return &p.OutDtype }},
	{"norm_dim", func(p *Params) any { return &p.NormDim }},
	{"reduction", func(p *Params) any { return &p.Reduction }},
	{"ignore_index", func(p *Params) any { return &p.IgnoreIndex }},
	{"upcast", func(p *Params) any { return &p.Upcast }},
	{"label_smoothing", func(p *Params) any { return &p.LabelSmoothing }},
}

// get is the field's value in p.
func (f field) get(p *Params) any {
	switch v := f.ptr(p).(type) {
	case *string:
		return *v
	case *bool:
		return *v
	case *float64:
		return *v
	}
	return nil
}

func isZero(v any) bool { return v == "" || v == false || v == 0.0 }

// resolve applies the schema entry sp to the field: its default when zero, then its check.
func (f field) resolve(sp patterns.Param, p *Params) error {
	switch v := f.ptr(p).(type) {
	case *string:
		switch sp.Kind {
		case patterns.ParamEnum:
			w, err := sp.CheckWord(*v)
			if err != nil {
				return err
			}
			*v = w
			return nil
		case patterns.ParamDtype:
			return sp.CheckDtype(*v)
		}
	case *bool:
		if sp.Kind == patterns.ParamBool {
			return nil
		}
	case *float64:
		if sp.Kind == patterns.ParamNumber {
			x, err := sp.CheckNumber(*v)
			if err != nil {
				return err
			}
			*v = x
			return nil
		}
	}
	return fmt.Errorf("parameter %s: a %s in the schema, which this field cannot hold", f.name, sp.Kind)
}

// literal is the field's Python literal and JSON value under the schema entry sp (after
// resolve); write is false for a dtype left at its default, which is not written.
func (f field) literal(sp patterns.Param, p *Params) (py string, js any, write bool) {
	switch v := f.get(p).(type) {
	case bool:
		return pyBool(v), v, true
	case float64:
		return pyFloat(v), v, true
	case string:
		if v == "" { // a dtype that is the default, a norm_dim that is the last dim (Validate)
			return "", nil, false
		}
		if sp.OrNumber {
			if x, err := strconv.ParseFloat(v, 64); err == nil {
				if math.IsInf(x, 0) {
					return `float("` + v + `")`, v, true
				}
				return pyFloat(x), v, true // checked by resolve
			}
		}
		return pyStr(v), v, true
	}
	return "", nil, false
}
