package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/internal/pyenv"
	"github.com/fuseadvise/fuseadvise/patterns"
)

// fakeRunner replays recorded harness output, so bench's Go side is tested without a GPU.
type fakeRunner struct {
	out  []byte
	err  error
	args []string
}

func (f *fakeRunner) Run(ctx context.Context, python string, args, env []string, stderr io.Writer) ([]byte, error) {
	f.args = args
	return f.out, f.err
}

func folders(t *testing.T, names ...string) []string {
	t.Helper()
	var dirs []string
	for _, n := range names {
		d := filepath.Join(t.TempDir(), n)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "case.py"), []byte("PATTERN = \"bias_gelu\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	return dirs
}

func TestRunParsesRecordedHarnessOutput(t *testing.T) {
	out, err := os.ReadFile("testdata/harness-fake.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRunner{out: out}
	res, err := Run(context.Background(), folders(t, "a", "b", "c"), Options{Runner: f, MaxAutotune: true, Repeats: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.GPU != "NVIDIA H200" || res.CopyTBps != 4.25 || len(res.Cases) != 3 {
		t.Fatalf("header/cases = %q %v %d", res.GPU, res.CopyTBps, len(res.Cases))
	}
	args := strings.Join(f.args, " ")
	for _, want := range []string{"harness.py", "--max-autotune", "--repeats 5"} {
		if !strings.Contains(args, want) {
			t.Errorf("harness args %q lack %q", args, want)
		}
	}
	if c := res.Cases[0]; c.Launches != 1 || c.EagerLaunches != 2 || c.Bytes != 536903680 || c.CopyUs != 130.4 || !strings.Contains(c.Config, "BLOCK_N: 512") {
		t.Errorf("case 0 details lost: %+v", c)
	}
	if res.FlushBytes != 256<<20 {
		t.Errorf("flush_bytes = %d, want 256 MiB", res.FlushBytes)
	}
	c := res.Cases[0]
	perCall := []struct {
		name      string
		got, want float64
	}{
		{"fused_wall_us", c.FusedWallUs, 136.4}, {"fused_host_us", c.FusedHostUs, 9.8},
		{"eager_wall_us", c.EagerWallUs, 494.6}, {"eager_host_us", c.EagerHostUs, 14.1},
		{"compile_wall_us", c.CompileWallUs, 210.3}, {"compile_host_us", c.CompileHostUs, 31.0},
		{"compile_max_autotune_wall_us", c.CompileMaxWallUs, 209.1}, {"compile_max_autotune_host_us", c.CompileMaxHostUs, 30.2},
		{"fused_wall_spread_us[1]", c.FusedWallSpread[1], 137.0}, {"eager_wall_spread_us[0]", c.EagerWallSpread[0], 494.0},
		{"compile_wall_spread_us[1]", c.CompileWallSpread[1], 211.0},
	}
	for _, f := range perCall {
		if f.got != f.want {
			t.Errorf("case 0 %s = %v, want %v", f.name, f.got, f.want)
		}
	}
	if c.WallCalls["fused"] != 147 || c.WallCalls["compile_max"] != 96 {
		t.Errorf("case 0 wall_calls = %v", c.WallCalls)
	}
	// a case from a harness without the per-call figures (and without copy_us) loads with zeros
	if c := res.Cases[1]; c.CopyUs != 0 || c.FusedWallUs != 0 || c.EagerHostUs != 0 || c.FusedWallSpread != nil || c.WallCalls != nil {
		t.Errorf("case 1 has no copy_us nor per-call figures, got %+v", c)
	}
	if c := res.Cases[2]; !strings.Contains(c.Error, "12 of 5767168") {
		t.Errorf("case 2 error lost: %q", c.Error)
	}
}

// libRunner records what Run put beside the harness script.
type libRunner struct{ lib []byte }

func (l *libRunner) Run(ctx context.Context, python string, args, env []string, stderr io.Writer) ([]byte, error) {
	var err error
	l.lib, err = os.ReadFile(filepath.Join(filepath.Dir(args[0]), "fa_testing.py"))
	return []byte(`{"gpu": "NVIDIA H200", "copy_tbps": 4.2}` + "\n"), err
}

// TestRunWritesTimingLib: the harness times every folder with the templates' fa_testing.py,
// which Run writes beside it, not with the folder's own (possibly older) copy.
func TestParseLaunchCounts(t *testing.T) {
	head := `{"gpu": "G", "copy_tbps": 4}` + "\n"
	a := `{"name": "a", "correct": true, "fused_us": 1}` + "\n"
	res, err := Parse([]byte(head + a + `{"launch_counts": "a", "launches": 3, "eager_launches": 5}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Cases[0]; len(res.Cases) != 1 || c.Launches != 3 || c.EagerLaunches != 5 {
		t.Errorf("cases = %+v, want one with 3 and 5 launches", res.Cases)
	}
	// a folder timed in several modes: the counts are the forward's
	bwd := `{"name": "a", "mode": "backward", "correct": true, "fused_us": 2}` + "\n"
	res, err = Parse([]byte(head + strings.Replace(a, `"correct"`, `"mode": "forward", "correct"`, 1) + bwd +
		`{"launch_counts": "a", "launches": 3, "eager_launches": 5}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cases) != 2 || res.Cases[0].Launches != 3 || res.Cases[1].Launches != 0 || res.Cases[1].Forward() {
		t.Errorf("modes: cases = %+v", res.Cases)
	}
	// counts of a folder that printed no result: the harness is broken, say so
	_, err = Parse([]byte(head + a + `{"launch_counts": "b", "launches": 1}` + "\n"))
	if err == nil || !strings.Contains(err.Error(), `"b"`) || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("stray counts: err = %v", err)
	}
}

func TestParseModes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // joined; "error" for an error
	}{
		{"", "forward"},
		{"forward", "forward"},
		{"full", "forward,full"},
		{"full, backward", "forward,backward,full"},
		{"all", "forward,backward,full"},
		{"backwards", "error"},
	} {
		got, err := ParseModes(tc.in)
		if tc.want == "error" {
			if err == nil || !strings.Contains(err.Error(), `"backwards"`) {
				t.Errorf("ParseModes(%q) err = %v, want one naming the word", tc.in, err)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("ParseModes(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestRunPassesModes(t *testing.T) {
	out, err := os.ReadFile("testdata/harness-fake.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRunner{out: out}
	if _, err := Run(context.Background(), folders(t, "a"), Options{Runner: f, Modes: []string{"full"}}); err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(f.args, " "); !strings.Contains(args, "--modes forward,full") {
		t.Errorf("harness args %q lack --modes forward,full", args)
	}
}

func TestRunWritesTimingLib(t *testing.T) {
	l := &libRunner{}
	if _, err := Run(context.Background(), folders(t, "a"), Options{Runner: l}); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "templates", TimingLib))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(l.lib, want) || !bytes.Contains(l.lib, []byte("def gpu_time_us(")) {
		t.Errorf("fa_testing.py beside the harness is not the templates' (%d bytes, want %d)", len(l.lib), len(want))
	}
}

// TestPythonTiming runs test_timing.py and test_library.py with the pinned venv: the timing
// loops against a simulated GPU, the harness's JSON fields (checked against this package's
// json tags), a folder's bench.py output, the library ops timed beside the providers, the
// torch.compile-to-SDPA signal and the backward mode's forward on the capture stream. On a GPU
// machine it also times a real kernel and captures a backward.
func TestPythonTiming(t *testing.T) {
	py, err := pyenv.Find("", nil)
	if err != nil {
		t.Skipf("no Python environment: %v", err)
	}
	cmd := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_timing.py", "test_library.py")
	cmd.Env = withoutInterpret(os.Environ())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest test_timing.py test_library.py: %v\n%s", err, out)
	}
}

func TestNoGPU(t *testing.T) {
	f := &fakeRunner{out: []byte(`{"error": "no CUDA GPU visible to torch (torch.cuda.is_available() is False)"}` + "\n"), err: errors.New("exit status 2")}
	_, err := Run(context.Background(), folders(t, "a"), Options{Runner: f})
	var ng *NoGPUError
	if !errors.As(err, &ng) || !strings.Contains(err.Error(), "needs a CUDA GPU") {
		t.Fatalf("err = %v, want a NoGPUError", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
}

func TestRejectsNonKernelFolder(t *testing.T) {
	_, err := Run(context.Background(), []string{t.TempDir()}, Options{Runner: &fakeRunner{}})
	if err == nil || !strings.Contains(err.Error(), "not a generated kernel folder") {
		t.Fatalf("err = %v", err)
	}
}

func TestHarnessFailureKeepsMeasuredCases(t *testing.T) {
	out, _ := os.ReadFile("testdata/harness-fake.jsonl")
	lines := strings.SplitN(string(out), "\n", 4)
	f := &fakeRunner{out: []byte(strings.Join(lines[:3], "\n")), err: errors.New("signal: killed")}
	res, err := Run(context.Background(), folders(t, "a", "b"), Options{Runner: f})
	if err == nil || !strings.Contains(err.Error(), "after 1 of 2 folders") {
		t.Fatalf("err = %v", err)
	}
	if res == nil || len(res.Cases) != 1 {
		t.Fatalf("measured cases lost: %+v", res)
	}
}

func TestNoise(t *testing.T) {
	if !Noise(13, 12.9, []float64{12.9, 13.2}, []float64{12.8, 13.1}) {
		t.Error("overlapping spreads should be noise")
	}
	if Noise(135, 208, []float64{134.8, 135.6}, []float64{207.9, 208.6}) {
		t.Error("separated medians are not noise")
	}
	// one slow repeat widens a range; every repeat still shows the difference
	if Noise(171, 515, []float64{170.6, 204.4}, []float64{508.1, 865.1}) {
		t.Error("a 3x difference that every repeat shows is not noise")
	}
	// nearly touching ranges: closer than the narrower one is wide
	if !Noise(10, 10.6, []float64{9.9, 10.2}, []float64{10.3, 10.7}) {
		t.Error("ranges 0.1 apart, each 0.3-0.4 wide, should be noise")
	}
}

// TestHarnessWithoutGPU runs the real harness in the pinned venv on this (GPU-less) machine:
// it must say so in one line, which Run turns into a NoGPUError.
func TestHarnessWithoutGPU(t *testing.T) {
	py, err := pyenv.Find("", nil)
	if err != nil {
		t.Skipf("no Python environment: %v", err)
	}
	var stderr strings.Builder
	_, err = Run(context.Background(), folders(t, "a"), Options{Python: py, Stderr: &stderr})
	var ng *NoGPUError
	if !errors.As(err, &ng) {
		t.Fatalf("err = %v (stderr %s), want a NoGPUError", err, stderr.String())
	}
}

func TestAnchorsValidate(t *testing.T) {
	specs := Anchors()
	if len(specs) == 0 {
		t.Fatal("no anchor specs")
	}
	for _, s := range specs {
		if err := codegen.Validate(s); err != nil {
			t.Errorf("%s %v: %v", s.Pattern, s.Shapes, err)
		}
	}
}

// echoRunner answers like the harness: one case per folder argument, named after it, and
// records which GPU each folder was sent to.
type echoRunner struct {
	mu    sync.Mutex
	gpuOf map[string]string
	modes map[string][]string // folders timed in several modes: one result line each
}

func (e *echoRunner) Run(ctx context.Context, python string, args, env []string, stderr io.Writer) ([]byte, error) {
	var b strings.Builder
	b.WriteString(`{"gpu": "NVIDIA H200", "copy_tbps": 4.2}` + "\n")
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range args {
		if !filepath.IsAbs(a) || strings.HasSuffix(a, "harness.py") {
			continue
		}
		e.gpuOf[filepath.Base(a)] = strings.Join(env, ",")
		modes := e.modes[filepath.Base(a)]
		if modes == nil {
			modes = []string{"forward"}
		}
		for _, m := range modes {
			fmt.Fprintf(&b, `{"name": %q, "mode": %q, "correct": true, "fused_us": 1}`+"\n", filepath.Base(a), m)
		}
	}
	return []byte(b.String()), nil
}

func TestSplitOverGPUsKeepsOrder(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	e := &echoRunner{gpuOf: map[string]string{}}
	res, err := Run(context.Background(), folders(t, names...), Options{Runner: e, GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range res.Cases {
		got = append(got, c.Name)
	}
	if strings.Join(got, "") != strings.Join(names, "") {
		t.Errorf("merged order %v, want %v", got, names)
	}
	for i, n := range names {
		want := fmt.Sprintf("CUDA_VISIBLE_DEVICES=%d", i%2)
		if e.gpuOf[n] != want {
			t.Errorf("%s ran with %q, want %q", n, e.gpuOf[n], want)
		}
	}
}

// TestSplitKeepsEachFolderModes: a folder timed in several modes has one case per mode;
// merged over one or two GPUs, every case is kept, each folder's together, folders in order
// (the merge once took one case per folder: a folder's later modes stood in for the next
// folders, whose results were lost).
func TestSplitKeepsEachFolderModes(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	three := []string{"forward", "backward", "full"}
	for _, gpus := range []int{1, 2} {
		e := &echoRunner{gpuOf: map[string]string{}, modes: map[string][]string{"a": three, "d": three}}
		res, err := Run(context.Background(), folders(t, names...), Options{Runner: e, GPUs: gpus})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range res.Cases {
			got = append(got, c.Name+":"+c.Mode)
		}
		want := "a:forward a:backward a:full b:forward c:forward d:forward d:backward d:full e:forward"
		if strings.Join(got, " ") != want {
			t.Errorf("%d GPU(s): cases %v, want %s", gpus, got, want)
		}
	}
}

// TestSplitOverVisibleGPUs: with CUDA_VISIBLE_DEVICES set (by a scheduler), -gpus indexes
// into its list and is capped at its length.
func TestSplitOverVisibleGPUs(t *testing.T) {
	names := []string{"a", "b", "c"}
	tests := []struct {
		name    string
		visible string // the parent's CUDA_VISIBLE_DEVICES; "" = unset
		gpus    int
		want    []string // env each folder ran with
	}{
		{"unset", "", 2, []string{"CUDA_VISIBLE_DEVICES=0", "CUDA_VISIBLE_DEVICES=1", "CUDA_VISIBLE_DEVICES=0"}},
		{"scheduler list", "4,5", 2, []string{"CUDA_VISIBLE_DEVICES=4", "CUDA_VISIBLE_DEVICES=5", "CUDA_VISIBLE_DEVICES=4"}},
		{"capped at the list", "4,5", 3, []string{"CUDA_VISIBLE_DEVICES=4", "CUDA_VISIBLE_DEVICES=5", "CUDA_VISIBLE_DEVICES=4"}},
		{"one listed: inherit it", "6", 2, []string{"", "", ""}},
		{"spaces and uuids", " GPU-aa , GPU-bb,GPU-cc ", 3, []string{"CUDA_VISIBLE_DEVICES=GPU-aa", "CUDA_VISIBLE_DEVICES=GPU-bb", "CUDA_VISIBLE_DEVICES=GPU-cc"}},
		{"one gpu asked", "4,5", 1, []string{"", "", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &echoRunner{gpuOf: map[string]string{}}
			getenv := func(k string) string {
				if k == "CUDA_VISIBLE_DEVICES" {
					return tt.visible
				}
				return ""
			}
			res, err := Run(context.Background(), folders(t, names...), Options{Runner: e, GPUs: tt.gpus, Getenv: getenv})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Cases) != len(names) {
				t.Fatalf("%d cases, want %d", len(res.Cases), len(names))
			}
			for i, n := range names {
				if e.gpuOf[n] != tt.want[i] {
					t.Errorf("%s ran with %q, want %q", n, e.gpuOf[n], tt.want[i])
				}
			}
		})
	}
}

func TestPredict(t *testing.T) {
	r := &Result{GPU: "NVIDIA H200", Cases: []Case{
		{Pattern: "bias_gelu", Correct: true, Bytes: 536903680},
		{Pattern: "swiglu", Correct: true, Bytes: 1 << 20, PredictedUs: 7},
		{Pattern: "layernorm_linear", Correct: true, Dtype: "bf16", Bytes: 1, GemmOnlyUs: 400,
			Shapes: [][]int64{{8192, 4096}, {4096, 4096}, {4096}}},
		{Pattern: "dropout_add", Correct: false, Bytes: 1 << 20},
		// 16 MiB in, 8 MiB out: under 0.69 of the H200's 50 MiB L2, so the writes are free
		{Pattern: "swiglu", Correct: true, Dtype: "bf16", Shape: []int64{1024, 4096}, Bytes: 3 * 1024 * 4096 * 2},
		// timed back to back in one graph, two launches: the graph's gaps join the prediction
		{Pattern: "layernorm_linear", Correct: true, PredictedUs: 3, Launches: 2, Timing: map[string]string{"fused": "cudagraph"}},
		// the same swiglu timed back to back: its inputs are warm in L2 too
		{Pattern: "swiglu", Correct: true, Dtype: "bf16", Shape: []int64{1024, 4096}, Bytes: 3 * 1024 * 4096 * 2,
			Timing: map[string]string{"fused": "cudagraph"}, Launches: 1},
	}}
	dm := patterns.DefaultCostModel()
	Predict(r, dm)
	c := r.Cases
	bw := dm.FusedEfficiency * 4250e3 // bytes per us
	if want := 536903680/bw + 1.1; c[0].PredictedFrom != FromCostModel || math.Abs(c[0].PredictedUs-want) > 1e-9 {
		t.Errorf("memory-bound: %v %q, want %v", c[0].PredictedUs, c[0].PredictedFrom, want)
	}
	if c[1].PredictedUs != 7 || c[1].PredictedFrom != FromAnalysis {
		t.Errorf("an analysis prediction was replaced: %+v", c[1])
	}
	// the stats pass (8192*4096*2 + 8*8192 bytes, a row kernel: too big for L2, and one row
	// kernel's overhead), then the faster of the measured GEMM as a Triton GEMM runs it
	// (GemmRatio16 for bf16) and the library path: the GEMM as measured, the normalized input
	// written (twice the stats pass's bytes) and a kernel's overhead
	extra := float64(8192*4096*2 + 8*8192)
	stats := extra/(dm.RowEfficiency*4250e3) + 1.1 + dm.RowKernelUs
	triton, library := dm.GemmRatio16*400, 400+2*extra/(dm.FusedEfficiency*4250e3)+1.1
	if want := stats + min(triton, library); math.Abs(c[2].PredictedUs-want) > 1e-9 || library >= triton {
		t.Errorf("layernorm_linear: %v, want %v (the library path, %v, under the Triton GEMM's %v)", c[2].PredictedUs, want, library, triton)
	}
	gap := 2 * dm.GraphGapUs
	if c[5].PredictedGapUs != gap || c[5].PredictedUs != 3+gap {
		t.Errorf("back-to-back timing: %+v, want GraphGapUs per launch added to 3", c[5])
	}
	Predict(r, dm)
	if c[5].PredictedUs != 3+gap {
		t.Errorf("a second Predict added the gap again: %v", c[5].PredictedUs)
	}
	if c[3].PredictedUs != 0 {
		t.Errorf("a case that failed its GPU check got a prediction: %v", c[3].PredictedUs)
	}
	if want := float64(2*1024*4096*2)/bw + 1.1; math.Abs(c[4].PredictedUs-want) > 1e-9 {
		t.Errorf("L2-resident swiglu: %v, want %v (reads only)", c[4].PredictedUs, want)
	}
	if want := float64(2*1024*4096*2)*(1-dm.WarmReadShare)/bw + 1.1 + dm.GraphGapUs; math.Abs(c[6].PredictedUs-want) > 1e-9 {
		t.Errorf("L2-resident swiglu timed back to back: %v, want %v (WarmReadShare of the reads served by L2, one gap)", c[6].PredictedUs, want)
	}
}

// Repredict takes each case's estimate from its folder's manifest, runs Predict for the
// others, drops the old gap, and refuses a case without a folder.
func TestRepredict(t *testing.T) {
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
	traced := mk("traced", `{"est_fused_us": 12.5}`)
	anchor := mk("anchor", `{}`)
	r := &Result{GPU: "NVIDIA H200", Cases: []Case{
		{Name: "traced", Pattern: "swiglu", Correct: true, Bytes: 1 << 30, PredictedUs: 99, PredictedFrom: FromAnalysis},
		{Name: "anchor", Pattern: "bias_gelu", Correct: true, Bytes: 536903680, PredictedUs: 7, PredictedFrom: FromCostModel,
			PredictedGapUs: 0.45, Timing: map[string]string{"fused": "graph-replay"}},
	}}
	if err := Repredict(r, []string{traced, anchor}, patterns.DefaultCostModel()); err != nil {
		t.Fatal(err)
	}
	if c := r.Cases[0]; c.PredictedUs != 12.5 || c.PredictedFrom != FromAnalysis {
		t.Errorf("traced case: %v %q, want the manifest's 12.5 from analysis", c.PredictedUs, c.PredictedFrom)
	}
	if c := r.Cases[1]; c.PredictedFrom != FromCostModel || c.PredictedGapUs != 0 || math.Abs(c.PredictedUs-(536903680/(patterns.DefaultCostModel().FusedEfficiency*4250e3)+1.1)) > 1e-9 {
		t.Errorf("anchor case: %+v, want the cost model's estimate and no gap", c)
	}
	if err := Repredict(r, []string{traced}, patterns.DefaultCostModel()); err == nil {
		t.Error("a case without a folder was accepted")
	}
}

// TestParseLibraryOps: recorded harness output with library ops (SDPA's backends, one
// refusing the case; FlexAttention, timed as a call in the forward and refused in training;
// F.rms_norm; the cuBLASLt GELU epilogue refused by the adapter) keeps every op's figures and
// refusal in each mode, the summary fields and whether torch.compile rewrote the chain to
// SDPA, merged over one or two GPUs like the other fields.
func TestParseLibraryOps(t *testing.T) {
	out, err := os.ReadFile("testdata/harness-library.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"attention-causal-bf16-4x16x1024x64", "rmsnorm_pyops-fp32-bf16-8192x4096", "linear_gelu-bf16-8192x4096x4096"}
	for _, gpus := range []int{1, 2} {
		var f Runner = &fakeRunner{out: out}
		if gpus == 2 { // each GPU's harness prints the header and its own folders' lines
			f = &splitRunner{out: string(out)}
		}
		res, err := Run(context.Background(), folders(t, names...), Options{Runner: f, GPUs: gpus})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range res.Cases {
			got = append(got, c.Name+"/"+c.Mode)
		}
		want := names[0] + "/forward " + names[0] + "/backward " + names[0] + "/full " + names[1] + "/forward " + names[2] + "/forward"
		if strings.Join(got, " ") != want {
			t.Fatalf("gpus=%d: cases %v, want %s", gpus, got, want)
		}
		fwd, bwd, full, rms, lin := res.Cases[0], res.Cases[1], res.Cases[2], res.Cases[3], res.Cases[4]
		if fwd.SdpaUs != 212 || fwd.SdpaBackend != "cudnn" || fwd.FlexUs != 260.5 || fwd.CompileSDPA == nil || *fwd.CompileSDPA {
			t.Errorf("gpus=%d: forward summary %v %q %v %v", gpus, fwd.SdpaUs, fwd.SdpaBackend, fwd.FlexUs, fwd.CompileSDPA)
		}
		if c := fwd.Library["sdpa_cudnn"]; c.Us != 212 || c.P20 != 211.1 || c.Spread[1] != 212.7 || c.WallUs != 223.5 || c.PeakBytes != 8519680 || c.Timing != "graph-replay" {
			t.Errorf("gpus=%d: sdpa_cudnn %+v", gpus, c)
		}
		if fwd.Library["flex"].Timing != "call" || fwd.Library["sdpa_flash"].Refused != "No available kernel. Aborting execution." {
			t.Errorf("gpus=%d: flex %+v, flash %+v", gpus, fwd.Library["flex"], fwd.Library["sdpa_flash"])
		}
		if fwd.Launches != 1 || fwd.EagerLaunches != 5 {
			t.Errorf("gpus=%d: launches %d/%d", gpus, fwd.Launches, fwd.EagerLaunches)
		}
		if bwd.SdpaUs != 655 || bwd.FlexUs != 0 || !strings.Contains(bwd.Library["flex"].Refused, "backward") || full.SdpaUs != 868 || full.Library["sdpa_efficient"].Us != 950 {
			t.Errorf("gpus=%d: training modes %+v / %+v", gpus, bwd.Library, full.Library)
		}
		if rms.LibraryUs != 36.1 || rms.LibraryOp != "rms_norm" || rms.CompileSDPA != nil || rms.Library["rms_norm"].HostUs != 11 {
			t.Errorf("gpus=%d: rmsnorm %+v", gpus, rms)
		}
		if lin.LibraryUs != 0 || !strings.HasPrefix(lin.Library["addmm_gelu"].Refused, "cuBLASLt's GELU epilogue") {
			t.Errorf("gpus=%d: linear_gelu %+v", gpus, lin.Library)
		}
	}
}

// splitRunner answers like the harness on a split run: the recorded header, then the
// recorded lines of the folders it was given (a folder's lines are those with its name).
type splitRunner struct{ out string }

func (s *splitRunner) Run(ctx context.Context, python string, args, env []string, stderr io.Writer) ([]byte, error) {
	lines := strings.Split(strings.TrimSpace(s.out), "\n")
	var b strings.Builder
	b.WriteString(lines[0] + "\n")
	for _, a := range args {
		if !filepath.IsAbs(a) || strings.HasSuffix(a, "harness.py") {
			continue
		}
		for _, l := range lines[1:] {
			if strings.Contains(l, `"`+filepath.Base(a)+`"`) {
				b.WriteString(l + "\n")
			}
		}
	}
	return []byte(b.String()), nil
}

// TestParseRejectsBadLibraryOps: a library op neither timed nor refused (or both), or a
// summary field no timed op backs, is an error naming the line, not a half-read result.
func TestParseRejectsBadLibraryOps(t *testing.T) {
	head := `{"gpu": "G", "copy_tbps": 4}` + "\n"
	for _, tc := range []struct{ line, want string }{
		{`{"name": "a", "correct": true, "library": {"sdpa_flash": {}}}`, `library op "sdpa_flash" has neither a time nor a reason`},
		{`{"name": "a", "correct": true, "library": {"flex": {"us": 3, "refused": "no"}}}`, `library op "flex" is both timed and refused`},
		{`{"name": "a", "correct": true, "library": {"sdpa_cudnn": {"us": 3}}, "sdpa_us": 2, "sdpa_backend": "cudnn"}`, `sdpa_us 2 is not the time of library op "sdpa_cudnn"`},
		{`{"name": "a", "correct": true, "sdpa_us": 2}`, "sdpa_us without sdpa_backend"},
		{`{"name": "a", "correct": true, "library_us": 2, "library_op": "rms_norm"}`, `library_us 2 is not the time of library op "rms_norm"`},
	} {
		_, err := Parse([]byte(head + tc.line + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%s: err = %v, want %q on line 2", tc.line, err, tc.want)
		}
	}
}

// The backward and full cases get the cost model's fused backward from their forward case:
// a memory-bound backward moves the forward's bytes plus its reads again, full adds the
// forward's prediction; no forward, a failed one or a failed backward gives none.
func TestPredictBackward(t *testing.T) {
	const n = 8192 * 11008
	fwd := Case{Pattern: "swiglu", Name: "swiglu-big", Mode: "forward", Correct: true, Dtype: "bf16",
		Shape: []int64{8192, 11008}, Bytes: 3 * n * 2}
	r := &Result{GPU: "NVIDIA H200", Cases: []Case{
		fwd,
		{Pattern: "swiglu", Name: "swiglu-big", Mode: "backward", Correct: true},
		{Pattern: "swiglu", Name: "swiglu-big", Mode: "full", Correct: true},
		{Pattern: "swiglu", Name: "swiglu-big", Mode: "backward", Correct: false},
		{Pattern: "swiglu", Name: "no-forward", Mode: "backward", Correct: true},
	}}
	dm := patterns.DefaultCostModel()
	Predict(r, dm)
	c := r.Cases
	bw := dm.FusedEfficiency * 4250e3
	// reads: dY, a, b (the forward's reads again and the gradient); writes: da, db
	if want := float64(3*n*2+2*n*2)/bw + 1.1; c[1].PredictedFrom != FromCostModel || math.Abs(c[1].PredictedUs-want) > 1e-6 {
		t.Errorf("backward: %v %q, want %v", c[1].PredictedUs, c[1].PredictedFrom, want)
	}
	if want := c[0].PredictedUs + c[1].PredictedUs; math.Abs(c[2].PredictedUs-want) > 1e-9 {
		t.Errorf("full: %v, want forward + backward = %v", c[2].PredictedUs, want)
	}
	if c[3].PredictedUs != 0 || c[4].PredictedUs != 0 {
		t.Errorf("a failed backward or one without its forward got a prediction: %v, %v", c[3].PredictedUs, c[4].PredictedUs)
	}
	before := c[2].PredictedUs
	Predict(r, dm)
	if c[2].PredictedUs != before {
		t.Errorf("a second Predict changed full: %v -> %v", before, c[2].PredictedUs)
	}
}
