package patterns

import (
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// blocks is n pre-norm residual blocks x + linear(ln(x)): each block's sum feeds the next
// block's LayerNorm (an add_layernorm chain between consecutive blocks).
func blocks(n int) []op {
	var ops []op
	for range n {
		ops = append(ops,
			op{name: "layer_norm", in: []string{"f32:8x128x768", "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}},
			op{name: "linear", in: []string{"f32:8x128x768", "f32:768x768", "f32:768"}},
			op{name: "add", in: []string{"f32:8x128x768", "f32:8x128x768", "=1"}})
	}
	return ops
}

// delayRoots adds extra ns of host time before each listed root op (and after it, for the
// ops that follow), as a loop calling the model again would.
func delayRoots(tr *trace.Trace, extra int64, roots ...int) {
	for _, r := range roots {
		start := tr.Ops[tr.Threads[0].Roots[r]].Start
		for i := range tr.Ops {
			if tr.Ops[i].Start >= start {
				tr.Ops[i].Start += extra
			}
		}
		for i := range tr.Acts {
			if tr.Acts[i].Start >= start {
				tr.Acts[i].Start += extra
			}
		}
	}
}

func TestForwardPassesByHostGaps(t *testing.T) {
	tests := []struct {
		name  string
		delay []int // root ops (3 per block) that follow a longer host gap
		want  int   // add_layernorm instances
	}{
		// 12 blocks in one pass: 11 sums feed the next LayerNorm
		{"one pass, even gaps", nil, 11},
		// 3 passes of 4 blocks on the same input: 3 edges per pass
		{"three passes", []int{12, 24}, 9},
		// 4 passes of 3 blocks
		{"four passes", []int{9, 18, 27}, 8},
		// one long gap (two passes, or a pause): not enough to tell a pass from a hiccup
		{"one long gap", []int{18}, 11},
		// long gaps that do not split the blocks evenly: not passes
		{"uneven long gaps", []int{9, 24}, 11},
		// a long gap inside a block is not between blocks
		{"gap inside a block", []int{13, 25}, 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := synth(blocks(12)...)
			delayRoots(tr, 30_000, tt.delay...)
			if got := synthCounts(t, tr)["add_layernorm"]; got != tt.want {
				t.Errorf("add_layernorm %d, want %d", got, tt.want)
			}
		})
	}
}

// A marked iteration (a profiler step) is left to its marks.
func TestForwardPassesNotOverMarks(t *testing.T) {
	tr := synth(blocks(12)...)
	delayRoots(tr, 30_000, 12, 24)
	g := newGraph(tr)
	if g.passes != 3 {
		t.Fatalf("passes %d, want 3", g.passes)
	}
	barrier := make([]bool, len(g.nodes))
	barrier[5] = true // as if a step began there
	if passBarriers(tr, g.nodes, barrier) != 0 {
		t.Error("passes searched on a thread that has iteration marks")
	}
}

// The GEMMs reading one LayerNorm are concatenable when they share K, op and bias-ness:
// BERT's Q, K and V projections (3 x 768) on the shared H200 trace; the others read their
// LayerNorm alone.
func TestLayerNormLinearConcat(t *testing.T) {
	dir, _ := loadExpected(t)
	tr, err := trace.Open(dir + "/bert_train_bf16.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze([]*trace.Trace{tr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, o := range r.Opportunities {
		if o.Pattern != "layernorm_linear" {
			continue
		}
		for _, g := range o.Shapes {
			seen++
			want := int64(0)
			if g.Params.Linears == 3 {
				want = 2304
			}
			if g.Params.ConcatN != want {
				t.Errorf("%v linears %d: concat_n %d, want %d", g.Dims, g.Params.Linears, g.Params.ConcatN, want)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no layernorm_linear group")
	}
}

// A GEMM's N and K come from its weight as each op records it: [N, K] for linear, [K, N]
// for addmm (mat2 = W^T).
func TestGemmNK(t *testing.T) {
	g := newGraph(synth(
		op{name: "linear", in: []string{"f32:8x1024", "f32:1024x1024", "f32:1024"}},
		op{name: "addmm", in: []string{"f32:256", "f32:8x1024", "f32:1024x256", "=1", "=1"}}))
	n0, k0, ok0 := g.gemmNK(0)
	n1, k1, ok1 := g.gemmNK(1)
	if !ok0 || !ok1 || n0 != 1024 || k0 != 1024 || n1 != 256 || k1 != 1024 {
		t.Errorf("gemmNK: linear %d x %d (%v), addmm %d x %d (%v)", n0, k0, ok0, n1, k1, ok1)
	}
}
