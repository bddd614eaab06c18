package program

import (
	"fmt"
	"strconv"
	"strings"
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
	// Reached says, per input, whether any derivative reaches it (else its gradient is None,
	// as eager's). Alias gives, per input, the output gradient (its index among those that
	// carry one) that is its gradient exactly, -1 for none: the one term of that output's
	// gradient passed through derivatives of exactly 1 only (an add's operands, a cast's, a
	// product with the number 1), which fp32 leaves unchanged. The fused backward hands such
	// a gradient over as that tensor and never reads the input (codegen's GRAD_REACHED and
	// GRAD_ALIAS).
	Reached []bool
	Alias   []int
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
	if p.HasInt() {
		return g, fmt.Errorf("no fused backward for a program with int64 values yet")
	}
	if p.Drops() {
		return g, fmt.Errorf("no fused backward for a program with an output of fewer dims than the chain's yet")
	}
	g.Inputs = make([]bool, len(p.Inputs))
	for i, in := range p.Inputs {
		g.Inputs[i] = in.DType.IsFloat() && !in.Number // a number input carries no gradient
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
			float := a.In != nil && g.Inputs[*a.In] || a.Step != nil && needs[*a.Step]
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
	g.Reached, g.Alias = p.gradFlow(g)
	return g, nil
}

// gradFlow follows the reverse sweep's terms (as codegen writes them: an output's gradient
// into its step, each step's into its float operands) and returns Grad.Reached and
// Grad.Alias.
func (p *Program) gradFlow(g Grad) (reached []bool, alias []int) {
	steps := make([][]int, len(p.Steps)) // per step: its gradient's terms, each the output gradient it is or -1
	ins := make([][]int, len(p.Inputs))
	k := 0
	for i, o := range p.Outputs {
		if g.Outputs[i] {
			steps[o] = append(steps[o], k)
			k++
		}
	}
	for j := len(p.Steps) - 1; j >= 0; j-- {
		if !g.Steps[j] || len(steps[j]) == 0 {
			continue
		}
		s := p.Steps[j]
		op, _ := Lookup(s.Op)
		same := -1 // the output gradient step j's gradient is exactly
		if len(steps[j]) == 1 {
			same = steps[j][0]
		}
		for a, arg := range s.Args {
			float := arg.In != nil && g.Inputs[*arg.In] || arg.Step != nil && g.Steps[*arg.Step]
			if !float {
				continue
			}
			via := -1
			if derivIsOne(op, s, a) {
				via = same
			}
			if arg.In != nil {
				ins[*arg.In] = append(ins[*arg.In], via)
			} else {
				steps[*arg.Step] = append(steps[*arg.Step], via)
			}
		}
	}
	reached = make([]bool, len(p.Inputs))
	alias = make([]int, len(p.Inputs))
	for i, t := range ins {
		reached[i] = len(t) > 0
		alias[i] = -1
		if len(t) == 1 {
			alias[i] = t[0]
		}
	}
	return reached, alias
}

// derivIsOne reports whether step s's derivative with respect to operand a is exactly 1:
// the table's "1.0", or a constant or number operand that the table's expression is
// alone ("{c0}", "{1}") and that equals 1.
func derivIsOne(op *Op, s Step, a int) bool {
	d := op.Deriv[a]
	switch {
	case d == "1.0":
		return true
	case len(d) > 2 && d[0] == '{' && d[len(d)-1] == '}':
		name := d[1 : len(d)-1]
		if c, ok := strings.CutPrefix(name, "c"); ok {
			n, err := strconv.Atoi(c)
			return err == nil && n < len(s.Consts) && s.Consts[n] == 1
		}
		n, err := strconv.Atoi(name)
		return err == nil && n < len(s.Args) && s.Args[n].Num != nil && *s.Args[n].Num == 1
	}
	return false
}

// BackwardBytes is the fewest bytes the fused backward of g (p.Backward's) moves, and the
// part of them written: each output gradient read (the
// outputs that carry one), each input read but those aliased (Grad.Alias: no derivative
// reads them), each gradient reached written at its input's shape (a broadcast input's
// reduced to it) but an aliased one of the main shape and its output gradient's dtype,
// which is that tensor. With a GEMM head, its output (input 0, saved by the forward) is
// read and its gradient feeds the two gradient GEMMs without a round trip through memory,
// which read x and w and write their gradients and the bias'. The templates' adapter
// (bwd_nbytes) counts the same from the generated kernel's GRAD_REACHED and GRAD_ALIAS;
// codegen writes this count into the folder's case.py (BWD_BYTES), which its test holds
// equal.
func (p *Program) BackwardBytes(g Grad) (bytes, writes int64) {
	main := p.Numel()
	var carried []DType // the output gradients read, in Alias's numbering
	for i, o := range p.Outputs {
		if g.Outputs[i] {
			bytes += main * p.Steps[o].DType.Size()
			carried = append(carried, p.Steps[o].DType)
		}
	}
	for i, in := range p.Inputs {
		if in.Number { // the caller's number: no bytes of the chain's (Bytes)
			continue
		}
		n := numelOf(in.Dims)
		al := g.Alias[i]
		if al < 0 {
			bytes += n * in.DType.Size()
		}
		if !in.DType.IsFloat() || !g.Reached[i] || i == 0 && p.GEMM != nil {
			continue
		}
		if al < 0 || n != main || carried[al] != in.DType {
			writes += n * in.DType.Size()
		}
	}
	if h := p.GEMM; h != nil {
		ops := numelOf(h.X) + numelOf(h.W)
		if h.Bias != nil {
			writes += numelOf(h.Bias) * h.DType.Size()
		}
		bytes += ops * h.DType.Size()
		writes += ops * h.DType.Size()
	}
	return bytes + writes, writes
}
