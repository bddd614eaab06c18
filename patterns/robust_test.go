package patterns

import (
	"math/rand/v2"
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// TestRandomOpsNeverPanic feeds Analyze random sequences of the ops the rules
// know, with random (often inconsistent) inputs: odd ranks, zero and negative
// sizes, wrong types, garbage Concrete Inputs. It must return, never panic.
func TestRandomOpsNeverPanic(t *testing.T) {
	names := []string{"add", "add_", "mul", "sub", "div", "pow", "tanh", "gelu", "silu", "rsqrt", "mean",
		"layer_norm", "native_layer_norm", "linear", "addmm", "mm", "matmul", "bmm", "softmax", "_softmax",
		"masked_fill", "where", "dropout", "native_dropout", "view", "reshape", "transpose", "permute",
		"expand", "unsqueeze", "squeeze", "flatten", "unflatten", "select", "slice", "narrow", "split",
		"chunk", "unbind", "cat", "embedding", "conv2d", "to", "scaled_dot_product_attention", "t", "sum"}
	types := []string{"f32", "bf16", "f16", "i64", "bool"}
	concretes := []string{"=-1", "=0", "=1", "=2", "=3.", "=[-1]", "=[2, -1]", "=[0, 2, 1]", "=True", "=False",
		"=0.1", "=tanh", "=x", "=[", "=9223372036854775807", "=-9223372036854775808", "=[1, 1, 1, 1, 1]", ""}
	rng := rand.New(rand.NewPCG(1, 2))
	dim := func() string {
		n := rng.IntN(5)
		s := ""
		for i := 0; i < n; i++ {
			if i > 0 {
				s += "x"
			}
			s += []string{"0", "1", "2", "3", "4", "8", "64"}[rng.IntN(7)]
		}
		return types[rng.IntN(len(types))] + ":" + s
	}
	for iter := 0; iter < 300; iter++ {
		var ops []op
		for i := 0; i < 40; i++ {
			o := op{name: names[rng.IntN(len(names))]}
			for j := rng.IntN(6); j > 0; j-- {
				if rng.IntN(2) == 0 {
					o.in = append(o.in, dim())
				} else {
					o.in = append(o.in, concretes[rng.IntN(len(concretes))])
				}
			}
			if rng.IntN(4) == 0 {
				o.kids = []op{{name: names[rng.IntN(len(names))], in: o.in}}
			}
			ops = append(ops, o)
		}
		tr := synth(ops...)
		if _, err := Analyze([]*trace.Trace{tr}, Options{}); err != nil {
			t.Fatal(err)
		}
		// Negative sizes (as a corrupt file could hold).
		for i := range tr.Ops {
			for j := range tr.Ops[i].Inputs {
				if d := tr.Ops[i].Inputs[j].Dims; len(d) > 0 && rng.IntN(3) == 0 {
					d[rng.IntN(len(d))] = -int64(rng.IntN(3))
				}
			}
		}
		if _, err := Analyze([]*trace.Trace{tr}, Options{}); err != nil {
			t.Fatal(err)
		}
	}
}
