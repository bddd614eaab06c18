package analysis

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// rankTrace is a small Kineto trace of one rank of a job of world ranks: one ProfilerStep
// holding a bias+GELU chain (mm, add, gelu, one kernel each) on an H200; slow stretches the
// step and the kernels, as a straggler rank's would be.
func rankTrace(rank, world int, slow float64) string {
	var ev []string
	ts := 1000.0
	corr := 100
	step := 200.0 * slow
	ev = append(ev, fmt.Sprintf(`{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": %.3f, "dur": %.3f}`, ts, step))
	for i, op := range []struct{ name, dims, types, concrete string }{
		{"aten::mm", `[[1024, 768], [768, 3072]]`, `["c10::BFloat16", "c10::BFloat16"]`, `["", ""]`},
		{"aten::add", `[[1024, 3072], [3072], []]`, `["c10::BFloat16", "c10::BFloat16", "Scalar"]`, `["", "", "1"]`},
		{"aten::gelu", `[[1024, 3072], []]`, `["c10::BFloat16", "String"]`, `["", "none"]`},
	} {
		start := ts + 10 + float64(i)*40*slow
		ev = append(ev,
			fmt.Sprintf(`{"ph": "X", "cat": "cpu_op", "name": %q, "pid": 1, "tid": 1, "ts": %.3f, "dur": 20.000, "args": {"External id": %d, "Input Dims": %s, "Input type": %s, "Concrete Inputs": %s}}`,
				op.name, start, i+1, op.dims, op.types, op.concrete),
			fmt.Sprintf(`{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": %.3f, "dur": 4.000, "args": {"External id": %d, "correlation": %d}}`,
				start+5, i+1, corr),
			fmt.Sprintf(`{"ph": "X", "cat": "kernel", "name": "%s_kernel", "pid": 0, "tid": 7, "ts": %.3f, "dur": %.3f, "args": {"External id": %d, "device": 0, "stream": 7, "correlation": %d}}`,
				strings.TrimPrefix(op.name, "aten::"), start+10, 8*slow, i+1, corr))
		corr++
	}
	return fmt.Sprintf(`{
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150000000000, "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
  "distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d},
  "baseTimeNanoseconds": 1000000000000,
  "traceEvents": [
  %s
  ]
}
`, rank, world, strings.Join(ev, ",\n  "))
}

// rankDir writes the ranks of a job of world ranks into a new directory; rank straggler
// (if any) runs 1.5 times slower than the others.
func rankDir(t testing.TB, world, straggler int) string {
	dir := t.TempDir()
	for r := range world {
		slow := 1.0
		if r == straggler {
			slow = 1.5
		}
		name := filepath.Join(dir, fmt.Sprintf("worker%d.1.pt.trace.json", r))
		if err := os.WriteFile(name, []byte(rankTrace(r, world, slow)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A directory of a job's ranks gets a per-rank table with the spread; the straggler (rank
// 2) shows as the max of step time and GPU busy. One trace gets no such table.
func TestRanksTable(t *testing.T) {
	dir := rankDir(t, 4, 2)
	r, traces, err := Run(dir, Options{NTop: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) != 4 || len(r.Ranks) != 4 || len(r.Opportunities) == 0 || len(r.Opportunities[0].PerRank) != 4 {
		t.Fatalf("%d traces, %d ranks, opportunities %+v", len(traces), len(r.Ranks), r.Opportunities)
	}
	r.Trace.Path = "ranks" // the temporary directory's name changes between runs
	for i := range r.Ranks {
		r.Ranks[i].Path = filepath.Base(r.Ranks[i].Path)
	}
	for _, md := range []bool{false, true} {
		var b bytes.Buffer
		if err := r.WriteText(&b, md); err != nil {
			t.Fatal(err)
		}
		name := "ranks.table"
		if md {
			name = "ranks.markdown"
		}
		golden(t, name, b.Bytes())
		out := b.String()
		for _, want := range []string{"Ranks", "top saving µs (bias_gelu)", "median", "max"} {
			if !strings.Contains(out, want) {
				t.Errorf("markdown %v: %q missing", md, want)
			}
		}
	}
	one, _, err := Run(bundled, Options{NTop: 3})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := one.WriteText(&b, false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Ranks") {
		t.Error("a single trace has a per-rank table")
	}
}

// Beyond maxRankRows ranks the table lists the ranks with the longest steps (the straggler
// first) and the spread over all.
func TestRanksTableMany(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and analyzes 40 rank files")
	}
	r, _, err := Run(rankDir(t, 40, 17), Options{NTop: 3})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "40 ranks: the 32 with the longest steps") {
		t.Errorf("no note on the ranks left out:\n%s", out)
	}
	// the first row under the header is the straggler's: rank 17, its 300 µs step
	lines := strings.Split(out[strings.Index(out, "│   rank"):], "\n")
	cells := strings.Split(lines[2], "│")
	if len(cells) < 4 || strings.TrimSpace(cells[1]) != "17" || strings.TrimSpace(cells[3]) != "300.0" {
		t.Errorf("the straggler is not listed first: %q", lines[2])
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n%s", name, got)
	}
}
