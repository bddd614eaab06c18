package shared

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTB records what Require and Missing do to a test.
type fakeTB struct {
	skipped, failed string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Skip(args ...any)  { f.skipped = args[0].(string) }
func (f *fakeTB) Fatal(args ...any) { f.failed = args[0].(string) }

func TestRequire(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "traces", "h200"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FUSEADVISE_SHARED", dir)

	for _, req := range []string{"", "0", "1"} {
		t.Run("require="+req, func(t *testing.T) {
			t.Setenv(RequireEnv, req)
			var f fakeTB
			if p := Require(&f, "traces", "h200"); p != filepath.Join(dir, "traces", "h200") || f.skipped != "" || f.failed != "" {
				t.Errorf("present: Require = %q, skipped %q, failed %q", p, f.skipped, f.failed)
			}
			f = fakeTB{}
			p := Require(&f, "traces", "h200", "missing.json.gz")
			if p != "" {
				t.Errorf("missing: Require = %q, want \"\"", p)
			}
			if req == "1" {
				if f.failed == "" || f.skipped != "" {
					t.Errorf("missing, required: skipped %q, failed %q; want a failure", f.skipped, f.failed)
				}
				if !strings.Contains(f.failed, "missing.json.gz") || !strings.Contains(f.failed, RequireEnv+"=1") {
					t.Errorf("failure message %q does not say what is missing and why it fails", f.failed)
				}
			} else if f.skipped == "" || f.failed != "" {
				t.Errorf("missing, not required: skipped %q, failed %q; want a skip", f.skipped, f.failed)
			}
		})
	}
}

// Without FUSEADVISE_SHARED and without ../shared beside go.mod, Require fails when
// required: the case of a CI checkout without its shared data.
func TestRequireNoSharedDir(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	if err := os.MkdirAll(filepath.Join(repo, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Join(repo, "sub"))
	t.Setenv("FUSEADVISE_SHARED", "")
	t.Setenv(RequireEnv, "1")
	var f fakeTB
	if p := Require(&f, "traces", "h200"); p != "" || !strings.Contains(f.failed, "not found beside the checkout") {
		t.Errorf("Require = %q, failed %q", p, f.failed)
	}
	t.Setenv(RequireEnv, "")
	f = fakeTB{}
	if Require(&f, "traces"); f.skipped == "" || f.failed != "" {
		t.Errorf("not required: skipped %q, failed %q", f.skipped, f.failed)
	}
}

// A real test that needs missing shared data fails (exit status 1, the reason printed) when
// required and is skipped (exit 0) otherwise: the test binary runs itself as the child.
func TestRequireRealTest(t *testing.T) {
	if os.Getenv("FUSEADVISE_SHARED_CHILD") == "1" {
		Require(t, "traces", "no-such-dir")
		t.Log("reached past Require")
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{"1", ""} {
		cmd := exec.Command(exe, "-test.run", "^TestRequireRealTest$", "-test.v")
		cmd.Env = append(os.Environ(), "FUSEADVISE_SHARED_CHILD=1", "FUSEADVISE_SHARED="+t.TempDir(), RequireEnv+"="+req)
		out, err := cmd.CombinedOutput()
		s := string(out)
		if strings.Contains(s, "reached past Require") {
			t.Errorf("%s=%q: the test went on past Require:\n%s", RequireEnv, req, s)
		}
		if req == "1" {
			if err == nil || !strings.Contains(s, "--- FAIL") || !strings.Contains(s, "shared data missing") {
				t.Errorf("%s=1: err %v, want a failed test:\n%s", RequireEnv, err, s)
			}
		} else if err != nil || !strings.Contains(s, "--- SKIP") {
			t.Errorf("%s unset: err %v, want a skipped test:\n%s", RequireEnv, err, s)
		}
	}
}
