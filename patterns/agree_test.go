package patterns

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// edgeAgreement compares the inferred producer of every activation input with
// the execution trace's, over inputs the execution trace resolves.
func edgeAgreement(t *testing.T, tr *trace.Trace, et *trace.ExecTrace) (same, total int, bad map[string]int) {
	gi := newGraph(tr)
	gi.infer()
	ge := newGraph(tr)
	if err := ge.fromET(et); err != nil {
		t.Fatal(err)
	}
	bad = map[string]int{}
	for n := range ge.nodes {
		for _, i := range activation(ge.name[n], ge.ins(int32(n))) {
			if i >= len(ge.in[n]) || ge.in[n][i] < 0 || !parseDType(ge.ins(int32(n))[i].Type).IsFloat() {
				continue // only float activations: index arithmetic is not what patterns read
			}
			total++
			ok := i < len(gi.in[n]) && gi.in[n][i] == ge.in[n][i]
			if !ok && commutative[stripInplace(ge.name[n])] { // operands of x + y in either order
				for _, q := range gi.in[n] {
					ok = ok || q == ge.in[n][i]
				}
			}
			if ok {
				same++
			} else {
				got := "none"
				if i < len(gi.in[n]) && gi.in[n][i] >= 0 {
					got = gi.name[gi.in[n][i]]
				}
				bad[fmt.Sprintf("%s[%d] <- %s (inferred %s)", ge.name[n], i, ge.name[ge.in[n][i]], got)]++
			}
		}
	}
	return same, total, bad
}

var commutative = map[string]bool{"add": true, "mul": true, "maximum": true, "minimum": true}

// minAgreement is the share of float activation inputs whose inferred producer
// must equal the execution trace's (measured, rounded down). The misses are
// known: tanh-GELU's fan-out of x, post-norm residuals (BERT reads the norm's
// output, inference picks its input), equal-shaped Q/K/V and K/V caches, rotary
// halves, and ops with no shape rule (arange, pad, empty).
var minAgreement = map[string]float64{
	"bert_train_bf16.json.gz": 84, "convnext_tiny_train_bf16.json.gz": 98, "gpt2_infer_fp16_b1.json.gz": 76,
	"gpt2_train_bf16.json.gz": 78, "gpt2_train_sdpa_stack.json.gz": 79, "llama_infer_fp16.json.gz": 68,
	"llama_train_bf16.json.gz": 74, "mlp_blocks_infer_fp32.json.gz": 100, "mlp_blocks_train_bf16.json.gz": 100,
	"torchnn_encoder_train_bf16.json.gz": 94,
}

// TestEdgeAgreement measures shape inference against the execution traces.
func TestEdgeAgreement(t *testing.T) {
	dir, exp := loadExpected(t)
	for _, name := range names(exp) {
		tr, err := trace.Open(dir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		et, err := trace.ReadET(dir + "/" + strings.TrimSuffix(name, ".json.gz") + ".et.json.gz")
		if err != nil {
			t.Fatal(err)
		}
		same, total, bad := edgeAgreement(t, tr, et)
		if pct := 100 * float64(same) / float64(total); pct < minAgreement[name] {
			t.Errorf("%s: inferred edges agree with the execution trace on %.1f%% of float inputs, want >= %.0f%%", name, pct, minAgreement[name])
		}
		t.Logf("%s: %d/%d inferred edges equal the execution trace's (%.1f%%)", name, same, total, 100*float64(same)/float64(total))
		n := 0
		for k, v := range bad {
			if n < 12 {
				t.Logf("   %4d x %s", v, k)
			}
			n++
		}
	}
}
