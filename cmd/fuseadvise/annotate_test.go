package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAnalyzeAnnotate(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "marked.json")
	code, stdout, errs := run(t, "analyze", "-format", "json", "-annotate", out, bundled)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Opportunities []struct {
			Pattern   string
			Instances int
		}
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var marked struct {
		TraceEvents []struct {
			Ph, Cat string
			Args    struct{ Pattern string }
		}
	}
	if err := json.Unmarshal(b, &marked); err != nil {
		t.Fatalf("annotated trace does not parse: %v", err)
	}
	slices := map[string]int{}
	for _, e := range marked.TraceEvents {
		if e.Ph == "X" && e.Cat == "fuseadvise" {
			slices[e.Args.Pattern]++
		}
	}
	for _, o := range rep.Opportunities {
		if slices[o.Pattern] != o.Instances {
			t.Errorf("%s: %d slices, %d instances", o.Pattern, slices[o.Pattern], o.Instances)
		}
	}
	if len(rep.Opportunities) == 0 {
		t.Error("no opportunities in the bundled trace")
	}
}

func TestAnalyzeAnnotateErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"onto the trace", []string{"analyze", "-annotate", bundled, bundled}, "mlp_blocks_infer_fp32.json.gz"},
		{"into a folder", []string{"analyze", "-annotate", dir, bundled}, dir},
		{"missing folder", []string{"analyze", "-annotate", filepath.Join(dir, "no", "x.json"), bundled}, "x.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, errs := run(t, tc.args...)
			if code != 2 || stdout != "" {
				t.Errorf("exit %d, stdout %q; want 2 and nothing", code, stdout)
			}
			// a usage error is followed by the usage lines
			if first := strings.SplitN(errs, "\n", 2)[0]; !strings.HasPrefix(first, "fuseadvise: ") || !strings.Contains(first, tc.want) {
				t.Errorf("stderr %q: want a first line naming %s", errs, tc.want)
			}
		})
	}
}
