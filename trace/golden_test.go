package trace

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"
)

var update = flag.Bool("update", false, "update the golden files")

// sharedTraces lists the shared traces (public and h200), skipping the test when
// the shared data is absent (failing it when it is required: shared.Require).
func sharedTraces(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"public", "h200"} {
		d := shared.Require(t, "traces", dir)
		m, _ := filepath.Glob(filepath.Join(d, "*.json.gz"))
		for _, p := range m {
			if !isETName(filepath.Base(p)) {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		shared.Missing(t, "no *.json.gz in the shared traces/public and traces/h200")
	}
	return out
}

func traceName(p string) string { return strings.TrimSuffix(filepath.Base(p), ".json.gz") }

// summary is the compact text of a golden file.
func summary(t *Trace) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d world %d base %d devices %d\n", t.Rank, t.WorldSize, t.BaseTimeNs, len(t.Devices))
	fmt.Fprintf(&b, "events %d:", t.Events())
	for k := KindOther; k <= KindGPUAnnotation; k++ {
		fmt.Fprintf(&b, " %s=%d", k, t.EventCount(k))
	}
	b.WriteString("\n")
	linked, graph := 0, 0
	for _, a := range t.Acts {
		if a.Kind == ActKernel && a.Op >= 0 {
			linked++
		}
		if a.Graph {
			graph++
		}
	}
	withInputs := 0
	for _, op := range t.Ops {
		if op.Inputs != nil {
			withInputs++
		}
	}
	fmt.Fprintf(&b, "threads %d ops %d ops-with-inputs %d python %d\n", len(t.Threads), len(t.Ops), withInputs, len(t.Python))
	fmt.Fprintf(&b, "acts %d kernels %d linked-kernels %d graph-acts %d launches %d\n", len(t.Acts), t.KernelCount(), linked, graph, t.LaunchCount())
	fmt.Fprintf(&b, "steps %d", len(t.Steps))
	for i, s := range t.Steps {
		if i == 3 {
			b.WriteString(" ...")
			break
		}
		fmt.Fprintf(&b, " %s(%d)", s.Name, s.Dur)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "gpu-busy-ns %d idle-ns %d fwd-bwd %d\n", t.GPUBusyNs(), t.IdleNs(), t.FwdBwdLinks())
	for _, k := range t.TopKernels(5) {
		name := k.Name
		if len(name) > 100 {
			name = name[:100] + "..."
		}
		fmt.Fprintf(&b, "kernel %d %d %s\n", k.Ns, k.Count, name)
	}
	for _, k := range t.TopOps(5) {
		fmt.Fprintf(&b, "op %d %d %s\n", k.Ns, k.Count, k.Name)
	}
	for _, w := range t.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	return b.String()
}

func TestGolden(t *testing.T) {
	for _, p := range sharedTraces(t) {
		name := traceName(p)
		t.Run(name, func(t *testing.T) {
			tr, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			got := summary(tr)
			golden := filepath.Join("testdata", "golden", name+".txt")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./trace -update)", err)
			}
			if got != string(want) {
				t.Errorf("summary differs from %s:\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
		})
	}
}
