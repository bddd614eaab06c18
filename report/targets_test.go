package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/bench"
)

func TestTargets(t *testing.T) {
	r := &bench.Result{GPU: "NVIDIA H200", Cases: []bench.Case{
		// large memory-bound, at 1.07x the floor, 3.6x eager, 1.5x compile, predicted +4%
		{Pattern: "bias_gelu", Name: "a", Shape: []int64{8192, 16384}, Dtype: "bf16", Correct: true,
			FusedUs: 135, EagerUs: 493, CompileUs: 208, FloorUs: 126.5, PredictedUs: 140, Launches: 1},
		// large, 1.5x the floor (a miss; 1.12x a plain copy: no note), slower than compile (a miss), predicted -30% (a miss)
		{Pattern: "bias_gelu", Name: "b", Shape: []int64{8192, 16384}, Dtype: "bf16", Correct: true,
			FusedUs: 190, EagerUs: 493, CompileUs: 180, FloorUs: 126.5, CopyUs: 170, PredictedUs: 133, Launches: 1},
		// decode size with two launches (a miss)
		{Pattern: "swiglu", Name: "c", Shape: []int64{32, 11008}, Dtype: "fp16", Correct: true,
			FusedUs: 3, EagerUs: 9, CompileUs: 6, FloorUs: 0.5, Launches: 2},
		// GEMM at 1.02x the GEMM alone
		{Pattern: "layernorm_linear", Name: "d", Shape: []int64{8192, 4096}, Dtype: "bf16", Correct: true,
			FusedUs: 413, EagerUs: 452, CompileUs: 445, FloorUs: 404, GemmOnlyUs: 405, Launches: 2},
	}}
	got := map[string]Target{}
	for _, tg := range Targets(r) {
		got[tg.Name] = tg
	}
	check := func(name string, met bool, misses int, cases int) {
		t.Helper()
		tg, ok := got[name]
		if !ok {
			t.Fatalf("no target %q", name)
		}
		if tg.Met != met || len(tg.Misses) != misses || tg.Cases != cases {
			t.Errorf("%s: met %v misses %v cases %d, want met %v, %d misses, %d cases", name, tg.Met, tg.Misses, tg.Cases, met, misses, cases)
		}
	}
	check("memory-bound, large shapes: fused / floor", false, 1, 2)
	if m := got["memory-bound, large shapes: fused / floor"].Misses; len(m) != 1 || strings.Contains(m[0], "copy ceiling") {
		t.Errorf("a miss 1.12x a plain copy is not at the copy ceiling: %q", m)
	}
	check("every case vs torch.compile", false, 1, 4)
	check("GEMM patterns: fused / GEMM alone", true, 0, 1)
	check("decode size (M <= 32): one launch, fused time", false, 1, 1)
	check("predicted vs measured fused time", false, 1, 2)
	if g := got["geometric mean vs eager ATen"]; !strings.HasPrefix(g.Got, "2.36x") || g.Met {
		// (493/135 * 493/190 * 9/3 * 452/413)^(1/4) = 2.36
		t.Errorf("geomean vs eager: %+v", g)
	}
	var b strings.Builder
	if err := WriteTargets(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`| memory-bound, large shapes: fused / floor | \<= 1.11x | worst 1.50x | 2 | **no** (1 of 2) |`, "| geometric mean vs eager ATen | \\>= 2.5x | 2.36x over 4 cases | 4 | **no** |", "- b (", "1.50x"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}

// TestTargetsInReport checks that Inputs.Targets adds the targets section to the Markdown
// and HTML reports and so to WriteDir's report.md, and that it is off by default.
func TestTargetsInReport(t *testing.T) {
	in := recorded(t)
	plain := render(t, Markdown, in)
	if bytes.Contains(plain, []byte("Performance targets")) {
		t.Fatal("the targets are in the report by default")
	}
	in.Targets = true
	md := string(render(t, Markdown, in))
	for _, want := range []string{"## Performance targets", "| geometric mean vs eager ATen |", "\\<= 1.11x"} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown with Targets lacks %q", want)
		}
	}
	if strings.Index(md, "## Performance targets") > strings.Index(md, "## How to read this report") {
		t.Error("the targets section comes after the reading notes")
	}
	if html := string(render(t, HTML, in)); !strings.Contains(html, "Performance targets") || !strings.Contains(html, "geometric mean vs eager ATen") {
		t.Error("HTML with Targets lacks the targets section")
	}
	out := filepath.Join(t.TempDir(), "rep")
	if err := WriteDir(out, in, false); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(out, MarkdownFile)); err != nil || string(got) != md {
		t.Errorf("WriteDir with Targets: report.md is not the Markdown report (%v)", err)
	}

	// without benchmark results there is nothing to check: no section
	in.Bench = nil
	noBench := in
	noBench.Targets = false
	if got, base := render(t, Markdown, in), render(t, Markdown, noBench); !bytes.Equal(got, base) {
		t.Error("Targets without benchmark results changed the report")
	}
}

// TestTargetsCopyCeiling checks the note on a floor miss that a plain copy of the same bytes
// cannot beat either: rmsnorm bf16 8192x4096 on the H200, 37.2 µs fused, 31.6 µs floor,
// 37.1 µs copy.
func TestTargetsCopyCeiling(t *testing.T) {
	r := &bench.Result{GPU: "NVIDIA H200", Cases: []bench.Case{
		{Pattern: "rmsnorm", Name: "near", Shape: []int64{8192, 4096}, Dtype: "bf16", Correct: true,
			FusedUs: 37.2, EagerUs: 90, CompileUs: 40, FloorUs: 31.6, CopyUs: 37.1, Launches: 1},
		{Pattern: "rmsnorm", Name: "far", Shape: []int64{8192, 4096}, Dtype: "bf16", Correct: true,
			FusedUs: 45, EagerUs: 90, CompileUs: 40, FloorUs: 31.6, CopyUs: 37.1, Launches: 1},
	}}
	var misses []string
	for _, tg := range Targets(r) {
		if tg.Name == "memory-bound, large shapes: fused / floor" {
			misses = tg.Misses
		}
	}
	want := []string{
		"near (bf16 [8192, 4096]) 1.18x (at the copy ceiling for this size: copy 37.1 µs)",
		"far (bf16 [8192, 4096]) 1.42x",
	}
	if strings.Join(misses, "\n") != strings.Join(want, "\n") {
		t.Errorf("floor misses = %q, want %q", misses, want)
	}
	sp := Speedups(r)
	if got := fmtPct(sp[0].CopyPct); got != "100%" {
		t.Errorf("%% of copy = %s, want 100%%", got)
	}
}

// TestTargetsPerCall: a fused call returns within HostMaxUs, and its per-call wall time is no
// worse than eager's (a difference within the repeats' spread is no miss); cases without
// per-call figures (older results) are not counted.
func TestTargetsPerCall(t *testing.T) {
	r := &bench.Result{GPU: "NVIDIA H200", Cases: []bench.Case{
		{Pattern: "bias_gelu", Name: "a", Shape: []int64{8192, 16384}, Dtype: "bf16", Correct: true,
			FusedUs: 135, EagerUs: 493, FusedWallUs: 136, FusedHostUs: 9.8, EagerWallUs: 494, EagerHostUs: 14},
		// host 16.2 µs (a miss); per call within the spread of eager's (no miss)
		{Pattern: "swiglu", Name: "b", Shape: []int64{8192, 11008}, Dtype: "bf16", Correct: true,
			FusedUs: 190, EagerUs: 195, FusedWallUs: 200, FusedHostUs: 16.2, EagerWallUs: 198, EagerHostUs: 12,
			FusedWallSpread: []float64{197, 203}, EagerWallSpread: []float64{196, 201}},
		// slower per call than eager (a miss)
		{Pattern: "rmsnorm_pyops", Name: "c", Shape: []int64{32, 4096}, Dtype: "fp16", Correct: true,
			FusedUs: 2, EagerUs: 6, FusedWallUs: 12, FusedHostUs: 5, EagerWallUs: 9, EagerHostUs: 8},
		// an older result's case: not counted
		{Pattern: "bias_gelu", Name: "d", Shape: []int64{8192, 16384}, Dtype: "bf16", Correct: true, FusedUs: 135, EagerUs: 493},
	}}
	got := map[string]Target{}
	for _, tg := range Targets(r) {
		got[tg.Name] = tg
	}
	for _, tc := range []struct {
		name   string
		gotStr string
		misses []string
		cases  int
	}{
		{"host time of a fused call", "worst 16.2 µs", []string{"b (bf16 [8192, 11008]) 16.2 µs"}, 3},
		{"every case per call vs eager", "worst 0.75x", []string{"c (fp16 [32, 4096]) 0.75x"}, 3},
	} {
		tg := got[tc.name]
		if tg.Got != tc.gotStr || strings.Join(tg.Misses, "\n") != strings.Join(tc.misses, "\n") || tg.Cases != tc.cases || tg.Met {
			t.Errorf("%s: %+v, want %q, misses %q over %d cases, not met", tc.name, tg, tc.gotStr, tc.misses, tc.cases)
		}
	}
	// an older result: no case falls under either target
	old := &bench.Result{GPU: "NVIDIA H200", Cases: r.Cases[3:]}
	for _, tg := range Targets(old) {
		if (tg.Name == "host time of a fused call" || tg.Name == "every case per call vs eager") && (tg.Cases != 0 || tg.Got != "-") {
			t.Errorf("%s on a result without per-call figures: %+v", tg.Name, tg)
		}
	}
}

// Training cases: judged by the training targets on "full" only ("backward" is reported, not
// judged); none of them counts toward the forward targets (decode launches, floor, ...).
func TestTargetsTraining(t *testing.T) {
	fwd := bench.Case{Pattern: "swiglu", Name: "s", Shape: []int64{32, 11008}, Dtype: "bf16", Correct: true,
		Mode: "forward", FusedUs: 3, EagerUs: 9, CompileUs: 3, FloorUs: 0.5, Launches: 1}
	full := fwd
	full.Mode, full.FusedUs, full.EagerUs, full.CompileUs, full.FloorUs, full.Launches = "full", 10, 15, 12, 0, 0
	full.FusedPeakBytes, full.EagerPeakBytes = 300, 200
	bwd := full
	bwd.Mode, bwd.FusedUs, bwd.CompileUs = "backward", 9, 1 // far slower than compile: not judged
	got := map[string]Target{}
	for _, tg := range Targets(&bench.Result{Cases: []bench.Case{fwd, full, bwd}}) {
		got[tg.Name] = tg
	}
	for name, want := range map[string]struct {
		cases int
		met   bool
		miss  string
	}{
		"training (forward + backward), memory-bound: vs eager": {1, false, "s [full] (bf16 [32, 11008]) 1.50x"},
		"training (forward + backward): vs torch.compile":       {1, true, ""},
		"training (forward + backward): peak memory vs eager":   {1, false, "s [full] (bf16 [32, 11008]) 1.50x eager's peak"},
		"decode size (M <= 32): one launch, fused time":         {1, true, ""},
		"every case vs torch.compile":                           {1, true, ""},
	} {
		tg, ok := got[name]
		if !ok {
			t.Errorf("no target %q", name)
			continue
		}
		if tg.Cases != want.cases || tg.Met != want.met || want.miss != "" && (len(tg.Misses) != 1 || tg.Misses[0] != want.miss) {
			t.Errorf("%s: cases %d met %v misses %q; want %d %v %q", name, tg.Cases, tg.Met, tg.Misses, want.cases, want.met, want.miss)
		}
	}
	// forward-only results keep the forward targets only
	for _, tg := range Targets(&bench.Result{Cases: []bench.Case{fwd}}) {
		if strings.HasPrefix(tg.Name, "training") {
			t.Errorf("forward-only result has target %q", tg.Name)
		}
	}
}

// TestTargetsBackwardFloor: backward cases whose floor is large are held to 1.15x of it
// (memory-bound patterns only, as the forward's floor target; a miss near its plain copy is
// noted as at the copy ceiling, as the forward's are); small floors, GEMM patterns,
// full and forward cases are not counted, and a backward case without a floor (results from
// before it was recorded) is not either.
func TestTargetsBackwardFloor(t *testing.T) {
	bwd := func(name, pattern string, fused, floor float64) bench.Case {
		return bench.Case{Pattern: pattern, Name: name, Shape: []int64{8192, 4096}, Dtype: "bf16", Correct: true,
			Mode: "backward", FusedUs: fused, EagerUs: 2 * fused, CompileUs: fused, FloorUs: floor}
	}
	full := bwd("f", "rmsnorm_pyops", 200, 30) // 6.7x its floor: a full case, not counted
	copyBound := bwd("copy", "dropout_add", 38, 31.6)
	copyBound.CopyUs = 37
	full.Mode = "full"
	r := &bench.Result{GPU: "NVIDIA H200", Cases: []bench.Case{
		bwd("met", "rmsnorm_pyops", 52, 47.3),       // 1.10x
		bwd("missed", "add_layernorm", 172.4, 63.1), // 2.73x
		copyBound,                            // 1.20x, within 1.05x of its copy
		bwd("small", "swiglu", 15.8, 10),     // floor under 20 µs
		bwd("gemm", "linear_gelu", 470, 200), // a GEMM pattern
		bwd("old", "gelu_pyops", 247, 0),     // no floor recorded
		full,
	}}
	var got *Target
	for _, tg := range Targets(r) {
		if strings.Contains(tg.Name, "backward, large shapes") {
			got = &tg
		}
	}
	if got == nil {
		t.Fatal("no backward floor target")
	}
	want := []string{"missed [backward] (bf16 [8192, 4096]) 2.73x",
		"copy [backward] (bf16 [8192, 4096]) 1.20x (at the copy ceiling for this size: copy 37.0 µs)"}
	if got.Cases != 3 || got.Met || got.Got != "worst 2.73x" || got.Want != "<= 1.15x" || strings.Join(got.Misses, "\n") != strings.Join(want, "\n") {
		t.Errorf("target %+v, want 3 cases, worst 2.73x, the misses %q", *got, want)
	}
	var b strings.Builder
	if err := WriteTargets(&b, r); err != nil {
		t.Fatal(err)
	}
	if row := `| training, memory-bound backward, large shapes: fused / floor | \<= 1.15x | worst 2.73x | 3 | **no** (2 of 3) |`; !strings.Contains(b.String(), row) {
		t.Errorf("markdown lacks %q:\n%s", row, b.String())
	}
}

// TestGoldenTrainTargets: the targets of a training result, the four large anchors of the
// H200 run of 2026-12-02 (forward, backward and full) with the backward and full floors
// bench now records (their bytes from the adapters' bwd_nbytes at that run's copy bandwidth).
func TestGoldenTrainTargets(t *testing.T) {
	r, err := LoadBench(filepath.Join("testdata", "bench-train.json"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteTargets(&b, r); err != nil {
		t.Fatal(err)
	}
	golden(t, "targets_train.md", b.Bytes())
}

func TestMemoryBound(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		want    bool
	}{
		{"bias_gelu", true}, {"add_layernorm", true}, {"generic", true},
		{"linear_gelu", false}, {"layernorm_linear", false}, {"attention", false},
	} {
		if got := memoryBound(tc.pattern); got != tc.want {
			t.Errorf("memoryBound(%q) = %v, want %v", tc.pattern, got, tc.want)
		}
	}
}
