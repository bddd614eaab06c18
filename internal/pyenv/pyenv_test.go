package pyenv

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaultVenv(t *testing.T) {
	want := filepath.Join("/home/u/.cache", "fuseadvise", "venv-torch"+TorchVersion+"-triton"+TritonVersion)
	if got := DefaultVenv(env(map[string]string{"HOME": "/home/u"})); got != want {
		t.Errorf("HOME: %s, want %s", got, want)
	}
	if got := DefaultVenv(env(map[string]string{"HOME": "/home/u", "XDG_CACHE_HOME": "/c"})); !strings.HasPrefix(got, "/c/fuseadvise/") {
		t.Errorf("XDG_CACHE_HOME ignored: %s", got)
	}
	if got := DefaultVenv(env(map[string]string{"FUSEADVISE_VENV": "/v"})); got != "/v" {
		t.Errorf("FUSEADVISE_VENV ignored: %s", got)
	}
}

func TestFindErrorsSayHowToFix(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name     string
		explicit string
		env      map[string]string
	}{
		{"no venv", "", map[string]string{"FUSEADVISE_VENV": filepath.Join(dir, "absent")}},
		{"missing explicit path", filepath.Join(dir, "nope", "python"), nil},
		{"not on PATH", "no-such-python-here", map[string]string{"PATH": dir}},
	} {
		_, err := Find(tt.explicit, env(tt.env))
		if err == nil || !strings.Contains(err.Error(), "setup-python.sh") {
			t.Errorf("%s: err = %v, want the fix", tt.name, err)
		}
	}
}

func TestCheckRejectsWrongVersions(t *testing.T) {
	// a fake interpreter that prints other versions
	py := filepath.Join(t.TempDir(), "python")
	os.WriteFile(py, []byte("#!/bin/sh\necho 2.5.0\necho 3.1.0\n"), 0o755)
	err := Check(context.Background(), py)
	if err == nil || !strings.Contains(err.Error(), "torch 2.5.0") || !strings.Contains(err.Error(), "setup-python.sh") {
		t.Errorf("err = %v", err)
	}
	ok := filepath.Join(t.TempDir(), "python")
	os.WriteFile(ok, []byte("#!/bin/sh\necho "+TorchVersion+"+cu130\necho "+TritonVersion+"\n"), 0o755)
	if err := Check(context.Background(), ok); err != nil {
		t.Errorf("pinned versions with a local suffix: %v", err)
	}
}
