package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiffInHelp(t *testing.T) {
	code, out, _ := run(t, "help")
	if code != 0 || !strings.Contains(out, "\tdiff ") {
		t.Errorf("help (exit %d) does not list diff:\n%s", code, out)
	}
	code, out, _ = run(t, "help", "diff")
	if code != 0 || !strings.Contains(out, "usage: fuseadvise diff") || !strings.Contains(out, "BEFORE AFTER") {
		t.Errorf("help diff (exit %d):\n%s", code, out)
	}
}

// The bundled trace against itself: nothing changed, nothing of the prediction arrived.
func TestDiffSameTrace(t *testing.T) {
	code, out, errs := run(t, "diff", "-format", "json", bundled, bundled)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r struct {
		Before, After struct {
			GPUBusyUs float64 `json:"gpu_busy_us"`
		}
		Verdict struct{ Outcome string }
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if r.Before.GPUBusyUs == 0 || r.Before != r.After || r.Verdict.Outcome != "not arrived" {
		t.Errorf("%+v", r)
	}
	for _, format := range []string{"table", "markdown"} {
		code, out, errs := run(t, "diff", "-format", format, bundled, bundled)
		if code != 0 || !strings.Contains(out, "Did the predicted saving arrive?") {
			t.Errorf("-format %s: exit %d, %s\n%s", format, code, errs, out)
		}
	}
}

func TestDiffErrors(t *testing.T) {
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "notes.json")
	os.WriteFile(notJSON, []byte("hello, this is not a trace"), 0o644)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"one trace", []string{"diff", bundled}, "want two traces"},
		{"bad format", []string{"diff", "-format", "xml", bundled, bundled}, `unknown -format "xml"`},
		{"bad after", []string{"diff", bundled, notJSON}, "notes.json"},
		{"bad before", []string{"diff", notJSON, bundled}, "notes.json"},
		{"missing", []string{"diff", bundled, filepath.Join(dir, "absent.json")}, "absent.json"},
		{"output over an input", []string{"diff", "-o", notJSON, bundled, notJSON}, "notes.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := run(t, tt.args...)
			if code != 2 || out != "" {
				t.Errorf("exit %d, stdout %q, want 2 and nothing", code, out)
			}
			first := strings.SplitN(errs, "\n", 2)[0]
			if !strings.HasPrefix(first, "fuseadvise: ") || !strings.Contains(first, tt.want) {
				t.Errorf("first stderr line %q: want the one-line error naming %q", first, tt.want)
			}
		})
	}
}
