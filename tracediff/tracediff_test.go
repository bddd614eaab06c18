package tracediff

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/analysis"
	"github.com/fuseadvise/fuseadvise/internal/shared"
)

var update = flag.Bool("update", false, "update the golden files")

// kop is one top-level CPU op of a synthetic trace and the one kernel it launches.
type kop struct {
	name     string
	dims     string // the "Input Dims" JSON
	types    string // the "Input type" JSON
	conc     string // the "Concrete Inputs" JSON
	kernel   string
	kernelUs int
}

var (
	mm   = kop{"aten::mm", `[[1024, 768], [768, 3072]]`, `["c10::BFloat16", "c10::BFloat16"]`, `["", ""]`, "sm90_gemm_bf16", 40}
	bias = kop{"aten::add", `[[1024, 3072], [3072], []]`, `["c10::BFloat16", "c10::BFloat16", "Scalar"]`, `["", "", "1"]`, "elementwise_add_kernel", 8}
	gelu = kop{"aten::gelu", `[[1024, 3072], []]`, `["c10::BFloat16", "Scalar"]`, `["", "'tanh'"]`, "gelu_kernel", 8}
	// fused is what the generated bias_gelu kernel looks like in a trace: one op, one kernel.
	fused = kop{"fuseadvise::bias_gelu", `[[1024, 3072], [3072]]`, `["c10::BFloat16", "c10::BFloat16"]`, `["", ""]`, "bias_gelu_fused_kernel", 9}
)

// kineto writes a Kineto trace of steps ProfilerStep spans, each running ops in order: an op
// takes 20 µs of host time and launches its kernel 5 µs in.
func kineto(t *testing.T, dir, name string, steps int, ops ...kop) string {
	t.Helper()
	var ev []string
	ts, corr := 1000, 1
	for s := 0; s < steps; s++ {
		start := ts
		ts += 5
		for _, o := range ops {
			ev = append(ev,
				fmt.Sprintf(`{"ph": "X", "cat": "cpu_op", "name": %q, "pid": 1, "tid": 1, "ts": %d, "dur": 20, "args": {"External id": %d, "Input Dims": %s, "Input type": %s, "Concrete Inputs": %s}}`,
					o.name, ts, corr, o.dims, o.types, o.conc),
				fmt.Sprintf(`{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": %d, "dur": 4, "args": {"External id": %d, "correlation": %d}}`,
					ts+5, corr, corr),
				fmt.Sprintf(`{"ph": "X", "cat": "kernel", "name": %q, "pid": 0, "tid": 7, "ts": %d, "dur": %d, "args": {"External id": %d, "correlation": %d, "device": 0, "stream": 7}}`,
					o.kernel, ts+10, o.kernelUs, corr, corr))
			ts += 60
			corr++
		}
		ev = append(ev, fmt.Sprintf(`{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d", "pid": 1, "tid": 1, "ts": %d, "dur": %d, "args": {}}`,
			s+1, start, ts-start))
		ts += 10
	}
	body := `{"deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": [
  ` + strings.Join(ev, ",\n  ") + "\n]}\n"
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// pair writes BEFORE (a GEMM, its bias add and a GELU, two steps) and AFTER (the add and the
// GELU replaced by one fused kernel), relative to the working directory so that the golden
// files name stable paths.
func pair(t *testing.T) (before, after string) {
	dir, err := os.MkdirTemp(".", "diff-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	before = kineto(t, dir, "before.json", 2, mm, bias, gelu, mm, bias, gelu)
	after = kineto(t, dir, "after.json", 2, mm, fused, mm, fused)
	return before, after
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./tracediff -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run with -update and review the diff):\n%s", name, got)
	}
}

func TestChainReplaced(t *testing.T) {
	before, after := pair(t)
	r, traces, err := Compare(before, after, Options{NTop: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) != 2 {
		t.Errorf("%d traces, want 2", len(traces))
	}
	b, a := r.Before, r.After
	if b.Steps != 2 || a.Steps != 2 || b.StepSource != "profiler steps" {
		t.Errorf("steps %d and %d (%s), want 2 profiler steps each", b.Steps, a.Steps, b.StepSource)
	}
	// Two chains a step: 4 kernels of 8 µs gone, 2 of 9 µs new; one launch and one op fewer per chain.
	if b.Kernels != 12 || a.Kernels != 8 || b.Ops != 12 || a.Ops != 8 || b.Launches != 12 || a.Launches != 8 {
		t.Errorf("kernels %d -> %d, ops %d -> %d, launches %d -> %d", b.Kernels, a.Kernels, b.Ops, a.Ops, b.Launches, a.Launches)
	}
	if d := b.GPUBusyUs - a.GPUBusyUs; d != 4*(8+8-9) {
		t.Errorf("GPU busy %v -> %v µs, want 28 µs less", b.GPUBusyUs, a.GPUBusyUs)
	}
	if b.StepUs-a.StepUs != 4*60 {
		t.Errorf("step time %v -> %v µs, want 240 µs less (one op of 60 µs per chain)", b.StepUs, a.StepUs)
	}
	var found bool
	for _, p := range r.Patterns {
		if p.Pattern == "bias_gelu" {
			found = true
			if p.InstancesBefore != 4 || p.InstancesAfter != 0 || p.GPUAfterUs != 0 || p.GPUBeforeUs <= 0 {
				t.Errorf("bias_gelu %+v, want 4 instances before, none after", p)
			}
		}
	}
	if !found {
		t.Fatalf("bias_gelu not among %+v", r.Patterns)
	}
	names := func(ks []Kernel) string {
		var s []string
		for _, k := range ks {
			s = append(s, fmt.Sprintf("%s x%d", k.Name, k.Count))
		}
		return strings.Join(s, ", ")
	}
	if got := names(r.Disappeared); got != "elementwise_add_kernel x4, gelu_kernel x4" {
		t.Errorf("disappeared: %s", got)
	}
	if got := names(r.Appeared); got != "bias_gelu_fused_kernel x4" {
		t.Errorf("appeared: %s", got)
	}
	v := r.Verdict
	if v.Basis != "per step" || v.BusySavingUs != 14 || v.StepSavingUs != 120 || v.PredictedUs <= 0 {
		t.Errorf("verdict %+v, want per step, 14 µs busy and 120 µs step saved", v)
	}
	if want := map[bool]string{true: "arrived", false: "partly"}[v.BusySavingUs >= v.PredictedUs*ArrivedPct/100]; v.Outcome != want {
		t.Errorf("outcome %q, want %q (%v of %v µs)", v.Outcome, want, v.BusySavingUs, v.PredictedUs)
	}
}

func TestGolden(t *testing.T) {
	before, after := pair(t)
	r, _, err := Compare(before, after, Options{NTop: 5})
	if err != nil {
		t.Fatal(err)
	}
	// The paths hold a random folder name: the golden files name the files alone.
	r.Before.Path, r.After.Path = "before.json", "after.json"
	for _, format := range []string{"table", "json", "markdown"} {
		var buf bytes.Buffer
		if format == "json" {
			err = r.WriteJSON(&buf)
		} else {
			err = r.WriteText(&buf, format == "markdown")
		}
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "chain_replaced."+format, buf.String())
	}
}

func TestVerdict(t *testing.T) {
	side := func(steps int, step, busy, est float64) Side {
		return Side{Steps: steps, StepUs: step, GPUBusyUs: busy, EstSavingUs: est}
	}
	tests := []struct {
		name    string
		b, a    Side
		outcome string
		basis   string
		busy    float64
	}{
		{"all of it", side(0, 1000, 800, 100), side(0, 900, 700, 0), "arrived", "whole trace", 100},
		{"80% is enough", side(0, 1000, 800, 100), side(0, 950, 720, 0), "arrived", "whole trace", 80},
		{"half", side(0, 1000, 800, 100), side(0, 1000, 750, 0), "partly", "whole trace", 50},
		{"slower", side(0, 1000, 800, 100), side(0, 1000, 820, 0), "not arrived", "whole trace", -20},
		{"nothing predicted", side(0, 1000, 800, 0), side(0, 1000, 700, 0), "nothing predicted", "whole trace", 100},
		{"per step, 2 steps vs 4", side(2, 2000, 1600, 200), side(4, 3600, 2800, 0), "arrived", "per step", 100},
		{"one side without steps", side(2, 2000, 1600, 200), side(0, 1800, 1400, 0), "arrived", "whole trace", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := verdict(tt.b, tt.a)
			if v.Outcome != tt.outcome || v.Basis != tt.basis || v.BusySavingUs != tt.busy {
				t.Errorf("got %s %s %v µs, want %s %s %v µs", v.Outcome, v.Basis, v.BusySavingUs, tt.outcome, tt.basis, tt.busy)
			}
			if !strings.HasPrefix(strings.ToLower(v.Sentence()), tt.outcome) {
				t.Errorf("sentence %q does not start with %q", v.Sentence(), tt.outcome)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	before, _ := pair(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "notes.json")
	os.WriteFile(bad, []byte("not a trace"), 0o644)
	for _, args := range [][2]string{{before, bad}, {bad, before}, {before, filepath.Join(dir, "absent.json")}} {
		_, _, err := Compare(args[0], args[1], Options{})
		if err == nil {
			t.Fatalf("%v: no error", args)
		}
		wrong := args[1]
		if wrong == before {
			wrong = args[0]
		}
		if msg := err.Error(); !strings.Contains(msg, filepath.Base(wrong)) || strings.Contains(msg, "\n") {
			t.Errorf("%v: error %q does not name %s on one line", args, msg, filepath.Base(wrong))
		}
	}
}

// Two shared traces of GPT-2 training (eager attention, then SDPA and stacked ops): the
// comparison holds together; the numbers are the traces' own and not checked.
func TestShared(t *testing.T) {
	if testing.Short() {
		t.Skip("parses two shared traces")
	}
	before := shared.Require(t, "traces", "h200", "gpt2_train_bf16.json.gz")
	after := shared.Require(t, "traces", "h200", "gpt2_train_sdpa_stack.json.gz")
	r, _, err := Compare(before, after, Options{NTop: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Side{r.Before, r.After} {
		if s.StepUs <= 0 || s.GPUBusyUs <= 0 || s.Kernels == 0 || s.Launches == 0 || s.Ops == 0 {
			t.Errorf("%s: empty figures %+v", s.Path, s)
		}
	}
	if len(r.Patterns) == 0 || len(r.Appeared) == 0 || len(r.Disappeared) == 0 || len(r.Appeared) > 5 {
		t.Errorf("%d patterns, %d kernels appeared, %d gone", len(r.Patterns), len(r.Appeared), len(r.Disappeared))
	}
	// the two GPT-2 profiles run different work (the kernels both ran, 904 against 231 times):
	// the figures are shown, the verdict is withheld
	if r.Verdict.Outcome != "not comparable" || r.Verdict.PredictedUs <= 0 ||
		!strings.HasPrefix(r.Verdict.Sentence(), "Not comparable") {
		t.Errorf("verdict %+v", r.Verdict)
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil || !json.Valid(js.Bytes()) {
		t.Errorf("JSON: %v", err)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text, false); err != nil || !strings.Contains(text.String(), "Did the predicted saving arrive?") {
		t.Errorf("text: %v", err)
	}
}

func TestSameWorkload(t *testing.T) {
	k := func(name string, n int) analysis.NameTime { return analysis.NameTime{Name: name, Count: n} }
	before := []analysis.NameTime{k("gemm", 40), k("add", 20), k("gelu", 20)}
	tests := []struct {
		name   string
		after  []analysis.NameTime
		bs, as int // steps
		note   string
	}{
		{"chains replaced", []analysis.NameTime{k("gemm", 40), k("fused", 20)}, 0, 0, ""},
		{"twice the steps", []analysis.NameTime{k("gemm", 80), k("fused", 40)}, 2, 4, ""},
		{"a quarter of the layers", []analysis.NameTime{k("gemm", 10), k("fused", 5)}, 0, 0, "launched 40 times in BEFORE and 10 in AFTER"},
		{"nothing shared", []analysis.NameTime{k("other", 10)}, 0, 0, "share no kernel name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sameWorkload(before, tt.after, Side{Steps: tt.bs}, Side{Steps: tt.as})
			if (tt.note == "") != (got == "") || !strings.Contains(got, tt.note) {
				t.Errorf("note %q, want %q", got, tt.note)
			}
		})
	}
}
