package patterns

import (
	"fmt"
	"math"
	"strconv"
)

// The cross_entropy pattern: aten::cross_entropy_loss (log_softmax, then nll_loss) over class
// indices, with the fp32 copy of 16-bit logits the model makes before it (HF's causal-LM
// loss: logits.float()) when only the loss reads that copy.

// crossEntropyReductions maps ATen's reduction enum (Concrete Inputs) to the parameter.
var crossEntropyReductions = map[int64]string{0: "none", 1: "mean", 2: "sum"}

func matchCrossEntropy(g *graph, n int32) (*Instance, bool) {
	ins := g.ins(n)
	if len(ins) < 2 || !isTensor(ins[0]) || !isTensor(ins[1]) {
		return nil, false
	}
	x, t := ins[0], ins[1]
	xd := parseDType(x.Type)
	if len(x.Dims) != 2 || len(t.Dims) != 1 || t.Dims[0] != x.Dims[0] || !xd.Kernel() ||
		parseDType(t.Type) != Int64 {
		return nil, false // [N, C, d...] logits, probability targets
	}
	if len(ins) > 2 && isTensor(ins[2]) {
		return nil, false // class weights
	}
	// cross_entropy_loss(input, target, weight, reduction, ignore_index, label_smoothing):
	// what is recorded must be known; what is not, the defaults (assumeCrossEntropy says so)
	var p Params
	if len(ins) > 3 && ins[3].Concrete != "" {
		r, ok := concreteInt(ins, 3)
		if p.Reduction = crossEntropyReductions[r]; !ok || p.Reduction == "" {
			return nil, false
		}
	}
	if len(ins) > 4 && ins[4].Concrete != "" {
		ii, ok := concreteInt(ins, 4)
		if !ok {
			return nil, false
		}
		p.IgnoreIndex = &ii
	}
	if len(ins) > 5 && ins[5].Concrete != "" {
		ls, ok := concreteFloat(ins, 5)
		if !ok || ls < 0 || ls > 1 {
			return nil, false
		}
		if ls != 0 {
			p.LabelSmoothing = &ls
		}
	}
	dtype := xd
	p.Upcast = "none"
	var cast int32 = -1
	switch {
	case xd == FP32:
		if cast = g.upcastBefore(n); cast >= 0 { // the model's logits.float(), read by the loss alone
			dtype, p.Upcast = parseDType(g.ins(cast)[0].Type), "float"
		}
	case g.upcastInside(g.nodes[n]):
		p.Upcast = "autocast" // nll_loss's input upcast, on autocast's fp32 list
	}
	in := newInstance(g, "cross_entropy", n, cast, n)
	in.DType, in.Params = dtype, p
	in.Dims = [][]int64{dims(x.Dims), dims(t.Dims)}
	m, v := x.Dims[0], x.Dims[1]
	in.Elems, in.Rows, in.Cols = m*v, m, v
	// the logits read once, the target read, each row's log-sum-exp (fp32) and loss written
	in.Bytes = m*v*dtype.Size() + 8*m + 4*m + 4*m
	in.WriteBytes = 8 * m
	return in, true
}

// upcastBefore returns the node of a cast of 16-bit logits to fp32 that input 0 of node n
// reads (through views), when nothing else reads that cast's value; -1 when there is none.
func (g *graph) upcastBefore(n int32) int32 {
	if len(g.dir) <= int(n) || len(g.dir[n]) == 0 {
		return -1
	}
	d := g.dir[n][0]
	for steps := 0; d >= 0 && g.pass[d] && steps < 8; steps++ {
		if isName(g.name[d], "to", "_to_copy") {
			ci := g.ins(d)
			if len(ci) == 0 || outDType(g.t, g.nodes[d]) != FP32 ||
				(parseDType(ci[0].Type) != BF16 && parseDType(ci[0].Type) != FP16) {
				return -1
			}
			if g.readBeyond(d, n) {
				return -1
			}
			return d
		}
		if len(g.dir[d]) == 0 {
			return -1
		}
		d = g.dir[d][0]
	}
	return -1
}

// readBeyond reports whether a node other than n (and the views between them) reads the value
// of node d directly or through views.
func (g *graph) readBeyond(d, n int32) bool {
	for b := d + 1; int(b) < len(g.nodes); b++ {
		if g.barrier[b] {
			break
		}
		if b == n || int(b) >= len(g.dir) {
			continue
		}
		for _, r := range g.dir[b] {
			if r != d {
				continue
			}
			if !g.pass[b] || g.readBeyond(b, n) {
				return true
			}
		}
	}
	return false
}

// upcastInside reports whether op id (cross_entropy_loss) casts its 16-bit input to fp32 inside
// (autocast runs nll_loss in fp32: an aten::to or _to_copy to fp32 among its descendants).
func (g *graph) upcastInside(id int32) bool {
	op := &g.t.Ops[id]
	for _, c := range op.Children {
		co := &g.t.Ops[c]
		if isName(baseName(co.Name), "to", "_to_copy") && len(co.Inputs) > 0 {
			d := parseDType(co.Inputs[0].Type)
			if (d == BF16 || d == FP16) && outDType(g.t, c) == FP32 {
				return true
			}
		}
		if g.upcastInside(c) {
			return true
		}
	}
	return false
}

func caseCrossEntropy(g ShapeGroup, c *Case) string {
	if len(g.Dims) < 2 || len(g.Dims[0]) != 2 {
		return "logits of another rank than 2"
	}
	c.Shapes = [][]int64{g.Dims[0], g.Dims[1]}
	p := g.Params
	c.Params.Reduction = p.Reduction
	if p.IgnoreIndex != nil {
		c.Params.IgnoreIndex = strconv.FormatInt(*p.IgnoreIndex, 10)
	}
	c.Params.Upcast = p.Upcast
	if p.LabelSmoothing != nil {
		c.Params.LabelSmoothing = *p.LabelSmoothing
	}
	return ""
}

func assumeCrossEntropy(g ShapeGroup) []string {
	var out []string
	if g.Params.Reduction == "" {
		out = append(out, "reduction not recorded (mean used)")
	}
	if g.Params.IgnoreIndex == nil {
		out = append(out, "ignore_index not recorded (-100 used)")
		// a trace without Concrete Inputs records no label smoothing either
		out = append(out, "label_smoothing not recorded (0 used)")
	}
	return out
}

// checkCrossEntropy holds a case to logits [M, V] and target [M], and ignore_index to an
// integer (the schema's numbers are floats).
func checkCrossEntropy(c Case) error {
	if len(c.Shapes) < 1 || len(c.Shapes[0]) != 2 {
		return fmt.Errorf("needs the logits [M, V] as the first shape")
	}
	if len(c.Shapes) > 1 && (len(c.Shapes[1]) != 1 || c.Shapes[1][0] != c.Shapes[0][0]) {
		return fmt.Errorf("needs the target [M] of the logits' rows as the second shape")
	}
	if c.Params.IgnoreIndex != "" {
		f, err := strconv.ParseFloat(c.Params.IgnoreIndex, 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return fmt.Errorf("ignore_index=%s (want an integer)", strconv.Quote(c.Params.IgnoreIndex))
		}
	}
	return nil
}

// adviseCrossEntropy states, for a loss that trains, the memory eager's chain holds that the
// fused loss does not: the log-probabilities, saved from the forward to the backward (fp32
// where the logits are upcast first, else the logits' type), and the fp32 copy of the logits
// the model's upcast makes while the forward runs; the fused loss saves 4 bytes a row.
// Computed from the shapes, per shape group.
func adviseCrossEntropy(o *Opportunity) []string {
	if o.BackwardInstances == 0 {
		return nil
	}
	var out []string
	for _, s := range o.Shapes {
		if len(s.Dims) == 0 || len(s.Dims[0]) != 2 || s.DType.Size() == 0 {
			continue
		}
		m, v := s.Dims[0][0], s.Dims[0][1]
		logp := s.DType.Size() // log_softmax in the logits' type
		if s.Params.Upcast == "float" {
			logp = 4
		}
		line := fmt.Sprintf("%s %s: eager keeps %s of log-probabilities from the forward to the backward, the fused loss %s",
			FormatDims(s.Dims[:1]), s.DType, mib(m*v*logp), mib(4*m))
		if s.Params.Upcast == "float" {
			line += fmt.Sprintf("; nor is the model's fp32 copy of the logits (%s, alive while the forward runs) made", mib(4*m*v))
		}
		out = append(out, line)
	}
	return out
}

// mib formats n bytes in MiB (KiB below one MiB).
func mib(n int64) string {
	if n < 1<<20 {
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 0, 64) + " MiB"
}
