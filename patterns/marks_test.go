package patterns

import (
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// TestMarksAgreeWithAnalyze checks that Marks finds the instances Analyze counts,
// with the same counted set, and locates each on its ops.
func TestMarksAgreeWithAnalyze(t *testing.T) {
	synthetic := synth(
		op{name: "mm", in: []string{"bf16:1024x768", "bf16:768x3072"}},
		op{name: "add", in: []string{"bf16:1024x3072", "bf16:3072", "=1"}},
		op{name: "gelu", in: []string{"bf16:1024x3072", "=tanh"}},
	)
	real, err := trace.Load("../testdata/traces/mlp_blocks_infer_fp32.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		traces []*trace.Trace
	}{{"synthetic bias_gelu", []*trace.Trace{synthetic}}, {"mlp_blocks_infer_fp32", real}} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Analyze(tc.traces, Options{})
			if err != nil {
				t.Fatal(err)
			}
			marks, err := Marks(tc.traces, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(marks) != len(tc.traces) {
				t.Fatalf("%d mark lists for %d traces", len(marks), len(tc.traces))
			}
			type count struct{ all, counted, last int }
			got := map[string]count{}
			for ti, ms := range marks {
				for i, m := range ms {
					c := got[m.Pattern]
					c.all++
					if m.Counted {
						c.counted++
					}
					if m.N != c.last+1 {
						t.Errorf("%s #%d after #%d", m.Pattern, m.N, c.last)
					}
					c.last = m.N
					got[m.Pattern] = c
					if i > 0 && m.Start < ms[i-1].Start {
						t.Errorf("marks not in time order at %d", i)
					}
					first := &tc.traces[ti].Ops[m.FirstOp]
					if first.Start != m.Start || m.End < m.Start {
						t.Errorf("%s #%d: span [%d, %d], first op starts at %d", m.Pattern, m.N, m.Start, m.End, first.Start)
					}
				}
			}
			if len(r.Opportunities) == 0 {
				t.Fatal("no opportunities: the test trace lost its chains")
			}
			for _, o := range r.Opportunities {
				if c := got[o.Pattern]; c.all != o.Instances || c.counted != o.CountedInstances {
					t.Errorf("%s: marks %d (%d counted), Analyze %d (%d counted)", o.Pattern, c.all, c.counted, o.Instances, o.CountedInstances)
				}
				delete(got, o.Pattern)
			}
			for p := range got {
				t.Errorf("marks of %s, which Analyze does not report", p)
			}
		})
	}
	if _, err := Marks(nil, Options{}); err == nil {
		t.Error("no traces: no error")
	}
	if _, err := Marks([]*trace.Trace{synthetic}, Options{Pattern: "nope"}); err == nil {
		t.Error("unknown pattern: no error")
	}
}
