package program

import (
	"fmt"
	"strconv"
)

// Grad says what a program's fused backward computes: which inputs get a gradient (the float
// ones: eager gives each a gradient, or none where only comparisons read it) and which
// outputs carry one (GradOutputs: a float step that depends on a float input through float
// operands, as eager's requires_grad propagates; a bool output, or a float one computed from
// bool inputs and numbers only, carries none).
type Grad struct {
	Inputs  []bool // per input
	Outputs []bool // per entry of Program.Outputs
	Steps   []bool // per step: its value depends on a float input (a gradient may reach it)
}

// Backward returns what the program's fused backward computes, or why it has none: a program
// ending in a reduction (the row kernel's backward is not generated yet), an operand without
// a derivative in the table, or no output that carries a gradient. The derivatives are the
// table's Deriv entries, applied in reverse over the steps (reverse-mode), the forward values
// recomputed from the inputs.
func (p *Program) Backward() (Grad, error) {
	var g Grad
	if r := p.Reduction(); r != nil {
		return g, fmt.Errorf("no fused backward for a program ending in %s yet (the row kernel is forward only)", r.Code)
	}
	g.Inputs = make([]bool, len(p.Inputs))
	for i, in := range p.Inputs {
		g.Inputs[i] = in.DType.IsFloat()
	}
	// needs[i]: step i's value depends on a float input through float operands
	needs := make([]bool, len(p.Steps))
	for i, s := range p.Steps {
		op, ok := Lookup(s.Op)
		if !ok {
			return g, fmt.Errorf("step %d: unknown op %s", i, strconv.Quote(string(s.Op)))
		}
		if !s.DType.IsFloat() {
			continue
		}
		for k, a := range s.Args {
			float := a.In != nil && p.Inputs[*a.In].DType.IsFloat() || a.Step != nil && needs[*a.Step]
			if !float {
				continue
			}
			if k >= len(op.Deriv) || op.Deriv[k] == "" {
				return g, fmt.Errorf("step %d (%s): no derivative for operand %d in the op table", i, s.Op, k)
			}
			needs[i] = true
		}
	}
	g.Steps = needs
	g.Outputs = make([]bool, len(p.Outputs))
	any := false
	for k, o := range p.Outputs {
		g.Outputs[k] = needs[o]
		any = any || needs[o]
	}
	if !any {
		return g, fmt.Errorf("no output depends on a float input: nothing to differentiate")
	}
	return g, nil
}
