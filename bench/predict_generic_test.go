package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/program"
)

// Repredict gives a generic folder without an analysis estimate (an example) its program's
// fused kernel: a pointwise one, or a row kernel for a program ending in a reduction; a
// generic folder with an estimate keeps it.
func TestRepredictGeneric(t *testing.T) {
	root := t.TempDir()
	mk := func(name, manifest string) string {
		d := filepath.Join(root, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "manifest.json"), []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	pw := `{"dims":[4096,4096],"inputs":[{"dtype":"bf16","dims":[4096,4096]}],"steps":[{"op":"sigmoid","args":[{"in":0}],"dtype":"bf16"},{"op":"mul","args":[{"step":0},{"in":0}],"dtype":"bf16"}],"outputs":[1]}`
	row := `{"dims":[4096,4096],"inputs":[{"dtype":"bf16","dims":[4096,4096]}],"steps":[{"op":"mul","args":[{"in":0},{"num":0.5}],"dtype":"bf16"},{"op":"softmax","args":[{"step":0}],"dtype":"bf16"}],"outputs":[1]}`
	dirs := []string{
		mk("pw", `{"pattern":"generic","program":`+pw+`}`),
		mk("row", `{"pattern":"generic","program":`+row+`}`),
		mk("traced", `{"pattern":"generic","est_fused_us":40,"program":`+pw+`}`),
	}
	r := &Result{GPU: "NVIDIA H200"}
	for _, n := range []string{"pw", "row", "traced"} {
		r.Cases = append(r.Cases, Case{Name: n, Pattern: patterns.GenericPatternID, Correct: true, Bytes: 4096 * 4096 * 4, Shape: []int64{4096, 4096}, Dtype: "bf16"})
	}
	if err := Repredict(r, dirs, patterns.DefaultCostModel()); err != nil {
		t.Fatal(err)
	}
	cm := patterns.DefaultCostModel()
	for i, src := range []string{pw, row} {
		var p program.Program
		if err := json.Unmarshal([]byte(src), &p); err != nil {
			t.Fatal(err)
		}
		want, ok := cm.GenericFusedUs("NVIDIA H200", &p, false)
		if c := r.Cases[i]; !ok || c.PredictedUs != want || c.PredictedFrom != FromCostModel {
			t.Errorf("%s: %v from %q, want %v from the cost model", c.Name, c.PredictedUs, c.PredictedFrom, want)
		}
	}
	if r.Cases[1].PredictedUs <= r.Cases[0].PredictedUs {
		t.Errorf("the row program (%v) is predicted no slower than the pointwise one of the same bytes (%v)", r.Cases[1].PredictedUs, r.Cases[0].PredictedUs)
	}
	if c := r.Cases[2]; c.PredictedUs != 40 || c.PredictedFrom != FromAnalysis {
		t.Errorf("traced generic folder: %v from %q, want the manifest's 40 from analysis", c.PredictedUs, c.PredictedFrom)
	}
	bad := mk("bad", `{"pattern":"generic","program":{"dims":[4],"inputs":[],"steps":[],"outputs":[]}}`)
	if err := Repredict(&Result{Cases: []Case{{Name: "bad"}}}, []string{bad}, cm); err == nil {
		t.Error("an invalid program in a manifest was accepted")
	}
}
