package trace

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestETJoin joins each H200 trace with its execution trace and checks the join
// rate (over cpu_ops with a Record function id) and that joined names agree.
func TestETJoin(t *testing.T) {
	for _, p := range sharedTraces(t) {
		if !strings.Contains(p, string(filepath.Separator)+"h200"+string(filepath.Separator)) {
			continue
		}
		name := traceName(p)
		t.Run(name, func(t *testing.T) {
			tr, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			et, err := ReadET(strings.TrimSuffix(p, ".json.gz") + ".et.json.gz")
			if err != nil {
				t.Fatal(err)
			}
			j := et.Join(tr)
			withRF, joined, mismatch, tensors := 0, 0, 0, 0
			for i, op := range tr.Ops {
				if op.Kind != KindCPUOp || op.RecordFunctionID < 0 {
					continue
				}
				withRF++
				if n, ok := j[int32(i)]; ok {
					joined++
					if n.Name != op.Name {
						mismatch++
					}
					for _, in := range n.Inputs {
						if in.IsTensor() {
							tensors++
						}
					}
				}
			}
			rate := float64(joined) / float64(withRF)
			t.Logf("%s: joined %d of %d cpu_ops with a Record function id (%.1f%%), %d name mismatches, %d input tensors",
				name, joined, withRF, 100*rate, mismatch, tensors)
			if rate < 0.95 {
				t.Errorf("join rate %.3f < 0.95", rate)
			}
			if mismatch > 0 {
				t.Errorf("%d joined ops have another name than their node", mismatch)
			}
			if tensors == 0 {
				t.Errorf("no input tensors in joined nodes")
			}
		})
	}
}
