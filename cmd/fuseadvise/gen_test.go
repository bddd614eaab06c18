package main

import (
	"bytes"
	"github.com/fuseadvise/fuseadvise/internal/shared"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestGenFromTrace(t *testing.T) {
	out := filepath.Join(t.TempDir(), "k")
	code, stdout, errs := run(t, "gen", "-o", out, bundled)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	dirs := strings.Fields(stdout)
	if len(dirs) == 0 {
		t.Fatalf("no folder generated (stderr %s)", errs)
	}
	for _, d := range dirs {
		for _, f := range []string{"kernel.py", "reference.py", "case.py", "manifest.json", "bench.py", "test_generated.py", "README.md"} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				t.Errorf("%s: %v", d, err)
			}
		}
	}
	// a second run refuses to overwrite; -force gives byte-identical files
	if code, _, errs := run(t, "gen", "-o", out, bundled); code != 2 || !strings.Contains(errs, "already exists") {
		t.Errorf("overwrite without -force: exit %d, %s", code, errs)
	}
	before, _ := os.ReadFile(filepath.Join(dirs[0], "case.py"))
	if code, _, errs := run(t, "gen", "-force", "-o", out, bundled); code != 0 {
		t.Fatalf("-force: exit %d: %s", code, errs)
	}
	after, _ := os.ReadFile(filepath.Join(dirs[0], "case.py"))
	if !bytes.Equal(before, after) {
		t.Error("regeneration is not byte-identical")
	}
	// -from the saved analysis gives the same folders
	js := filepath.Join(t.TempDir(), "a.json")
	if code, _, errs := run(t, "analyze", "-format", "json", "-o", js, bundled); code != 0 {
		t.Fatalf("analyze: %s", errs)
	}
	out2 := filepath.Join(t.TempDir(), "k2")
	code, stdout2, errs := run(t, "gen", "-from", js, "-o", out2)
	if code != 0 || len(strings.Fields(stdout2)) != len(dirs) {
		t.Errorf("gen -from: exit %d, %d folders, want %d: %s", code, len(strings.Fields(stdout2)), len(dirs), errs)
	}
}

func TestGenFromRejectsOtherJSON(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"array.json":   `[1, 2]`,
		"object.json":  `{"a": 1}`,
		"trace.json":   `{"traceEvents": []}`,
		"badtype.json": `{"trace": {}, "opportunities": {"x": 1}}`,
		"notjson.json": `hello`,
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o644)
		code, out, errs := run(t, "gen", "-from", p, "-o", filepath.Join(dir, "k"))
		if code != 2 || out != "" || !strings.Contains(errs, name+": not the JSON of 'fuseadvise analyze -format json'") {
			t.Errorf("%s: exit %d, stderr %q", name, code, errs)
		}
		if strings.Contains(errs, "Go value") || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%s: error not one plain line: %q", name, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "k")); err == nil {
		t.Error("an output folder was created")
	}
}

// TestGenWritesModules: a training trace whose autocast casts fp32 GEMM weights gets the
// master_adamw/ folder beside its kernels, one whose nn.MultiheadAttention splits its packed
// projection the multihead_attention/ folder (not among the kernel folders stdout lists, and
// passed over where DIR/* names the kernels); an inference trace gets neither.
func TestGenWritesModules(t *testing.T) {
	for _, tc := range []struct {
		trace  func(t *testing.T) string
		module string
		files  []string
	}{
		{func(*testing.T) string { return "../../testdata/models/pythia_train_bf16.json.gz" }, "master_adamw",
			[]string{"master_adamw.py", "test_master_adamw.py"}},
		{func(t *testing.T) string {
			return shared.Require(t, "traces", "h200", "torchnn_encoder_train_bf16.json.gz")
		}, "multihead_attention", []string{"multihead_attention.py", "test_multihead_attention.py"}},
	} {
		t.Run(tc.module, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "k")
			code, stdout, errs := run(t, "gen", "-o", out, "-top", "1", tc.trace(t))
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			d := filepath.Join(out, tc.module)
			for _, f := range append(tc.files, "README.md", "pytest.ini") {
				if _, err := os.Stat(filepath.Join(d, f)); err != nil {
					t.Errorf("%v", err)
				}
			}
			listed := slices.ContainsFunc(strings.Fields(stdout), func(l string) bool { return filepath.Base(l) == tc.module })
			if listed || !strings.Contains(errs, d) {
				t.Errorf("stdout %q lists the module's folder, or stderr %q does not name it", stdout, errs)
			}
			all, _ := filepath.Glob(filepath.Join(out, "*"))
			dirs, err := kernelFolders(all)
			if err != nil || slices.Contains(dirs, d) || slices.ContainsFunc(dirs, func(k string) bool { return filepath.Base(k) == "master_adamw" }) {
				t.Errorf("kernelFolders(%v) = %v, %v: want the kernel folders without the modules'", all, dirs, err)
			}
			if _, err := kernelFolders([]string{d}); err == nil || !strings.Contains(err.Error(), "not a kernel folder") {
				t.Errorf("kernelFolders of the module's folder alone: %v", err)
			}
		})
	}
	out2 := filepath.Join(t.TempDir(), "k")
	if code, _, errs := run(t, "gen", "-o", out2, bundled); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, m := range []string{"master_adamw", "multihead_attention"} {
		if _, err := os.Stat(filepath.Join(out2, m)); err == nil {
			t.Errorf("an inference trace got %s/", m)
		}
	}
}
