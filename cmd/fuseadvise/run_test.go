package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/analysis"
	"github.com/fuseadvise/fuseadvise/internal/pyenv"
	"github.com/fuseadvise/fuseadvise/patterns"
)

// TestAutoModes: -modes auto times the backward and full modes exactly when a chain of the
// analysis runs in training (a catalog instance with a backward, or generic chains whose
// backward kernels the coverage counts).
func TestAutoModes(t *testing.T) {
	tests := []struct {
		name string
		rep  patterns.Report
		want string
	}{
		{"inference", patterns.Report{Opportunities: []patterns.Opportunity{{Pattern: "bias_gelu", Instances: 3}}}, "forward"},
		{"training", patterns.Report{Opportunities: []patterns.Opportunity{{Pattern: "bias_gelu", Instances: 3}, {Pattern: "swiglu", Instances: 2, BackwardInstances: 2}}}, "forward,backward,full"},
		{"generic in training", patterns.Report{Coverage: &patterns.Coverage{ClaimedUs: 10, ClaimedWithBackwardUs: 25}}, "forward,backward,full"},
		{"generic inference", patterns.Report{Coverage: &patterns.Coverage{ClaimedUs: 10, ClaimedWithBackwardUs: 10}}, "forward"},
		{"nothing found", patterns.Report{}, "forward"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(autoModes(&analysis.Result{Report: &tt.rep}), ","); got != tt.want {
				t.Errorf("autoModes = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestRunPipeline runs the README's main job on the bundled trace for real (the Triton
// interpreter in the pinned venv), restricted to one pattern to keep it short, and checks
// every stage left its output.
func TestRunPipeline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Triton interpreter")
	}
	if _, err := pyenv.Find("", nil); err != nil {
		t.Skipf("no Python environment (%v)", err)
	}
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, errs := run(t, "run", "-o", out, "-pattern", "dropout_add", "-top", "1", "-bench", "off", bundled)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	if stdout != "" {
		t.Errorf("run printed results on stdout: %q", stdout)
	}
	for _, f := range []string{"analysis.json", "analysis.md", "verify.json", "report/report.md", "report/report.html", "report/report.svg", "pr/PR.md"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s", f)
		}
	}
	kernels, _ := filepath.Glob(filepath.Join(out, "kernels", "dropout_add-*", "kernel.py"))
	if len(kernels) != 1 {
		t.Errorf("kernel folders: %v", kernels)
	}
	var v struct {
		Folders []struct {
			Cases []struct{ Status string } `json:"cases"`
		} `json:"folders"`
	}
	b, _ := os.ReadFile(filepath.Join(out, "verify.json"))
	if err := json.Unmarshal(b, &v); err != nil || len(v.Folders) != 1 || len(v.Folders[0].Cases) < 6 {
		t.Fatalf("verify.json: %v %s", err, b)
	}
	for _, want := range []string{"[1/6] analyze", "[3/6] verify", "skipped (-bench off)", "done: "} {
		if !strings.Contains(errs, want) {
			t.Errorf("progress lacks %q:\n%s", want, errs)
		}
	}
	// a second run refuses to overwrite, and leaves the first result alone
	if code, _, errs := run(t, "run", "-o", out, "-pattern", "dropout_add", "-top", "1", "-bench", "off", bundled); code != 2 || !strings.Contains(errs, "already exists") {
		t.Errorf("rerun: exit %d: %s", code, errs)
	}
}
