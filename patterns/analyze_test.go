package patterns

import (
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"

	"github.com/fuseadvise/fuseadvise/trace"
)

func biasGeluTrace() *trace.Trace {
	return synth(
		op{name: "mm", in: []string{"bf16:1024x768", "bf16:768x3072"}},
		op{name: "add", in: []string{"bf16:1024x3072", "bf16:3072", "=1"}},
		op{name: "gelu", in: []string{"bf16:1024x3072", "=none"}},
	)
}

// TestCostEstimate checks the model's arithmetic on a chain with known bytes.
func TestCostEstimate(t *testing.T) {
	cm := DefaultCostModel()
	cm.BandwidthGBs = 10000 // = 1e7 bytes/us
	cm.KernelOverheadUs = 2
	r, err := Analyze([]*trace.Trace{biasGeluTrace()}, Options{Cost: cm})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Opportunities) != 1 {
		t.Fatalf("opportunities: %+v", r.Opportunities)
	}
	o := r.Opportunities[0]
	// bytes: read x (1024*3072*2) + bias (3072*2) + write y (1024*3072*2); 12.6 MB fit in the
	// H200's L2, whose writes are then free: only the reads are charged
	bytes := float64(1024*3072*2*2 + 3072*2)
	reads := bytes - 1024*3072*2
	wantFused := round2(reads/(cm.FusedEfficiency*1e7) + 2)
	if o.Pattern != "bias_gelu" || o.GPUTimeUs != 10 || o.EstFusedUs != wantFused || o.EstSavingUs != round2(10-wantFused) {
		t.Errorf("got %s gpu %v fused %v saving %v; want bias_gelu 10 %v %v", o.Pattern, o.GPUTimeUs, o.EstFusedUs, o.EstSavingUs, wantFused, round2(10-wantFused))
	}
	if o.Shapes[0].Bytes != int64(bytes) || o.Shapes[0].Params.Approximate != "none" || !o.Shapes[0].Valid {
		t.Errorf("shape group %+v", o.Shapes[0])
	}
	if r.Calibration[0].BandwidthSource != "option" || r.Calibration[0].KernelOverheadUs != 2 {
		t.Errorf("calibration %+v", r.Calibration[0])
	}
	// busy time: 3 kernels of 5 us, overlapping none of each other? They start 11 us apart.
	if r.Trace.GPUBusyUs != 15 || math.Abs(o.SavingPct-o.EstSavingUs/15*100) > 0.05 {
		t.Errorf("busy %v, pct %v", r.Trace.GPUBusyUs, o.SavingPct)
	}
}

// TestDeviceTableFallback: no large kernels to calibrate from, so the H200 row.
func TestDeviceTableFallback(t *testing.T) {
	r, err := Analyze([]*trace.Trace{biasGeluTrace()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Calibration[0]
	if c.BandwidthSource != "device table" || c.BandwidthGBs != 4250 || c.ComputeTFLOPs != 679 {
		t.Errorf("calibration %+v", c)
	}
}

func TestMergedRanks(t *testing.T) {
	a, b := biasGeluTrace(), biasGeluTrace()
	a.Rank, b.Rank = 0, 1
	r, err := Analyze([]*trace.Trace{a, b}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := r.Opportunities[0]
	if o.Instances != 2 || len(o.PerRank) != 2 || o.PerRank[1].Rank != 1 || o.PerRank[1].Instances != 1 || len(r.Ranks) != 2 || r.Trace.Kernels != 6 {
		t.Errorf("merged: instances %d per-rank %+v ranks %d kernels %d", o.Instances, o.PerRank, len(r.Ranks), r.Trace.Kernels)
	}
}

func TestNotes(t *testing.T) {
	noGPU := biasGeluTrace()
	noGPU.Acts = nil
	for i := range noGPU.Ops {
		noGPU.Ops[i].Acts = nil
	}
	noShapes := biasGeluTrace()
	for i := range noShapes.Ops {
		noShapes.Ops[i].Inputs = nil
	}
	tests := []struct {
		name      string
		tr        *trace.Trace
		note      string
		instances int
	}{
		{"no GPU events", noGPU, "no GPU kernels", 1},
		{"no shapes", noShapes, "no input shapes recorded", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Analyze([]*trace.Trace{tc.tr}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(r.Notes, "\n"), tc.note) {
				t.Errorf("notes %q lack %q", r.Notes, tc.note)
			}
			n := 0
			for _, o := range r.Opportunities {
				n += o.Instances
				if o.EstSavingUs != 0 || o.GPUTimeUs != 0 {
					t.Errorf("%s: saving %v gpu %v without GPU data", o.Pattern, o.EstSavingUs, o.GPUTimeUs)
				}
			}
			if n != tc.instances {
				t.Errorf("instances %d, want %d", n, tc.instances)
			}
		})
	}
}

func TestOptionsErrors(t *testing.T) {
	if _, err := Analyze(nil, Options{}); err == nil {
		t.Error("no traces: no error")
	}
	if _, err := Analyze([]*trace.Trace{biasGeluTrace()}, Options{Pattern: "nope"}); err == nil {
		t.Error("unknown pattern: no error")
	}
	r, err := Analyze([]*trace.Trace{biasGeluTrace()}, Options{Pattern: "swiglu"})
	if err != nil || len(r.Opportunities) != 0 {
		t.Errorf("pattern filter: %v %+v", err, r)
	}
}

// TestContractFields checks the JSON field names of the contract.
func TestContractFields(t *testing.T) {
	r, err := Analyze([]*trace.Trace{biasGeluTrace()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(r)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	tr := m["trace"].(map[string]any)
	for _, k := range []string{"path", "device", "steps", "gpu_busy_us", "kernels"} {
		if _, ok := tr[k]; !ok {
			t.Errorf("trace lacks %q", k)
		}
	}
	o := m["opportunities"].([]any)[0].(map[string]any)
	for _, k := range []string{"pattern", "instances", "backward_instances", "gpu_time_us", "est_fused_us", "est_saving_us", "saving_pct_of_gpu_busy", "shapes"} {
		if _, ok := o[k]; !ok {
			t.Errorf("opportunity lacks %q", k)
		}
	}
	s := o["shapes"].([]any)[0].(map[string]any)
	for _, k := range []string{"dims", "dtype", "instances"} {
		if _, ok := s[k]; !ok {
			t.Errorf("shape group lacks %q", k)
		}
	}
}

// A forward-only kernel is never offered for training: on a training trace (BERT, every
// layer_norm -> linear with a backward) a forward-only layernorm_linear (the registry entry
// marked so for the test: no pattern is forward-only today) saves nothing and removes no
// launch, a note says why, and the other patterns keep their savings; an inference trace's
// layernorm_linear instances (TimeSformer on an H100: no backward) keep theirs.
func TestForwardOnlySavesNothingInTraining(t *testing.T) {
	p, _ := Lookup("layernorm_linear")
	p.ForwardOnly = true
	t.Cleanup(func() { p.ForwardOnly = false })
	for _, tc := range []struct {
		dir, file string
		training  bool
	}{{"h200", "bert_train_bf16.json.gz", true}, {"public", "tl_h100_timesformer_pt2.6.json.gz", false}} {
		tr, err := trace.Open(filepath.Join(shared.Require(t, "traces", tc.dir), tc.file))
		if err != nil {
			t.Fatal(err)
		}
		r, err := Analyze([]*trace.Trace{tr}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var ll *Opportunity
		others := 0.0
		for i := range r.Opportunities {
			if o := &r.Opportunities[i]; o.Pattern == "layernorm_linear" {
				ll = o
			} else {
				others += o.EstSavingUs
			}
		}
		if ll == nil {
			t.Fatalf("%s: no layernorm_linear opportunity", tc.file)
		}
		noted := slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "layernorm_linear: forward only") })
		if tc.training {
			if ll.BackwardInstances == 0 || ll.EstSavingUs != 0 || ll.LaunchesSaved != 0 || !noted || others <= 0 {
				t.Errorf("%s: layernorm_linear %d backward instances, saving %v, launches %d, noted %v; others %v",
					tc.file, ll.BackwardInstances, ll.EstSavingUs, ll.LaunchesSaved, noted, others)
			}
		} else if ll.BackwardInstances != 0 || ll.EstSavingUs <= 0 || noted {
			t.Errorf("%s (inference): layernorm_linear %d backward instances, saving %v, noted %v",
				tc.file, ll.BackwardInstances, ll.EstSavingUs, noted)
		}
	}
}

// A pattern whose backward is counted as eager's (BackwardAsEager: layernorm_linear) keeps its
// forward's saving in training, claims none in the backward, and a note says why.
func TestBackwardAsEager(t *testing.T) {
	tr, err := trace.Open(filepath.Join(shared.Require(t, "traces", "h200"), "bert_train_bf16.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze([]*trace.Trace{tr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(r.Opportunities, func(o Opportunity) bool { return o.Pattern == "layernorm_linear" })
	if i < 0 {
		t.Fatal("no layernorm_linear opportunity")
	}
	o := r.Opportunities[i]
	noted := slices.ContainsFunc(r.Notes, func(n string) bool {
		return strings.HasPrefix(n, "layernorm_linear: ") && strings.Contains(n, "counted at its traced time")
	})
	if o.BackwardInstances == 0 || o.EstSavingUs <= 0 || o.EstBackwardSavingUs != 0 || !noted {
		t.Errorf("layernorm_linear: %d backward instances, saving %v, backward saving %v, noted %v",
			o.BackwardInstances, o.EstSavingUs, o.EstBackwardSavingUs, noted)
	}
}
