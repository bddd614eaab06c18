package pyenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Pinned versions; keep in step with scripts/setup-python.sh.
const (
	TorchVersion  = "2.11.0"
	TritonVersion = "3.6.0"
)

// Fix is the one-line remedy printed with every environment error.
const Fix = "run 'bash scripts/setup-python.sh' (creates the pinned venv) or pass -python PATH"

// DefaultVenv is where scripts/setup-python.sh puts the venv: $FUSEADVISE_VENV, else
// $XDG_CACHE_HOME/fuseadvise/venv-torchX-tritonY, else ~/.cache/fuseadvise/....
func DefaultVenv(getenv func(string) string) string {
	if v := getenv("FUSEADVISE_VENV"); v != "" {
		return v
	}
	cache := getenv("XDG_CACHE_HOME")
	if cache == "" {
		home := getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "fuseadvise", "venv-torch"+TorchVersion+"-triton"+TritonVersion)
}

// Find returns the interpreter to use: explicit if set, else $FUSEADVISE_PYTHON, else the
// default venv's python. It checks that the file exists, not what it has (see Check).
func Find(explicit string, getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	py := explicit
	if py == "" {
		py = getenv("FUSEADVISE_PYTHON")
	}
	if py == "" {
		py = filepath.Join(DefaultVenv(getenv), "bin", "python")
		if _, err := os.Stat(py); err != nil {
			return "", fmt.Errorf("no Python environment with torch and triton at %s: %s", filepath.Dir(filepath.Dir(py)), Fix)
		}
		return py, nil
	}
	if strings.ContainsRune(py, os.PathSeparator) {
		if _, err := os.Stat(py); err != nil {
			return "", fmt.Errorf("python %s: %v: %s", py, errors.Unwrap(err), Fix)
		}
		return py, nil
	}
	p, err := exec.LookPath(py)
	if err != nil {
		return "", fmt.Errorf("python %q not found on PATH: %s", py, Fix)
	}
	return p, nil
}

// Versions reports torch and triton versions of the interpreter py.
func Versions(ctx context.Context, py string) (torch, triton string, err error) {
	cmd := exec.CommandContext(ctx, py, "-c", "import torch, triton; print(torch.__version__); print(triton.__version__)")
	out, err := cmd.Output()
	if err != nil {
		msg := err.Error()
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			lines := strings.Split(strings.TrimSpace(string(ee.Stderr)), "\n")
			msg = lines[len(lines)-1]
		}
		return "", "", fmt.Errorf("%s cannot import torch and triton (%s): %s", py, msg, Fix)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return "", "", fmt.Errorf("%s: unexpected version output %q", py, out)
	}
	return f[0], f[1], nil
}

// Check verifies that py has the pinned torch and triton (a local "+cu130" suffix is fine).
func Check(ctx context.Context, py string) error {
	torch, triton, err := Versions(ctx, py)
	if err != nil {
		return err
	}
	if base(torch) != TorchVersion || base(triton) != TritonVersion {
		return fmt.Errorf("%s has torch %s and triton %s; fuseadvise pins torch %s and triton %s (the GPU machine's): %s",
			py, torch, triton, TorchVersion, TritonVersion, Fix)
	}
	return nil
}

func base(v string) string {
	if i := strings.IndexByte(v, '+'); i >= 0 {
		return v[:i]
	}
	return v
}
