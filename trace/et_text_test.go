package trace

import (
	"os"
	"path/filepath"
	"testing"
)

// A String argument of an execution-trace node (gelu's approximate) is kept as the value's
// Text; other non-tensor values and tensors have none.
func TestETStringArgument(t *testing.T) {
	doc := `{"nodes": [{"id": 5, "name": "aten::gelu", "attrs": [{"name": "rf_id", "type": "uint64", "value": 9}],
	  "inputs": {"values": [[587, 585, 0, 12, 2, "cuda:0"], "tanh", 3], "types": ["Tensor(c10::BFloat16)", "String", "Int"]},
	  "outputs": {"values": [[589, 590, 0, 12, 2, "cuda:0"]], "types": ["Tensor(c10::BFloat16)"]}}]}`
	path := filepath.Join(t.TempDir(), "x.et.json")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	et, err := ReadET(path)
	if err != nil {
		t.Fatal(err)
	}
	in := et.Nodes[0].Inputs
	if len(in) != 3 || !in[0].IsTensor() || in[0].Text != "" || in[1].IsTensor() || in[1].Text != "tanh" || in[2].Text != "" {
		t.Errorf("inputs %+v: want a tensor, the String \"tanh\", an Int without text", in)
	}
}
