package verify

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	tpl "github.com/fuseadvise/fuseadvise/templates"
)

//go:embed runner/runner.py
var runnerPy []byte

// RunnerScript returns the Python runner that Run executes (written to a temporary file).
func RunnerScript() []byte { return runnerPy }

// writeRunner writes the runner script into dir and, beside it, the folders' checks in this
// version (templates' _common/fa_testing.py: the runner compares with its compare, one source
// with the folders' assert_close); it returns the script's path.
func writeRunner(dir string) (string, error) {
	fat, err := tpl.Read("_common/fa_testing.py")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "fa_testing.py"), fat, 0o644); err != nil {
		return "", err
	}
	script := filepath.Join(dir, "runner.py")
	return script, os.WriteFile(script, runnerPy, 0o644)
}

// A Runner starts the Python side of verify: one long-lived process that reads requests (one
// JSON object per line: {"dir": ..., "skip": [...]}) on Proc.Stdin and writes events (JSON
// lines, described in runner/runner.py) on Proc.Stdout. The process must end when ctx is
// done. Tests substitute a Runner that replays recorded output.
type Runner interface {
	Start(ctx context.Context, args, env []string) (*Proc, error)
}

// Proc is one started runner process.
type Proc struct {
	Stdin  io.WriteCloser
	Stdout io.Reader
	// Wait waits for the process to exit once Stdout is drained; its error carries the end
	// of the process's stderr.
	Wait func() error
}

// execRunner runs the embedded runner script with a Python interpreter.
type execRunner struct {
	python string
	script string
	stderr io.Writer // optional copy of every process's stderr
}

func (r *execRunner) Start(ctx context.Context, args, env []string) (*Proc, error) {
	cmd := exec.CommandContext(ctx, r.python, append([]string{r.script}, args...)...)
	cmd.Env = env
	setProcessGroup(cmd) // Cancel kills the whole group: kernels may spawn nothing, but be sure
	cmd.WaitDelay = 5 * time.Second
	tail := &tailBuffer{max: 8 << 10}
	if r.stderr != nil {
		cmd.Stderr = io.MultiWriter(tail, lockedWriter(r.stderr))
	} else {
		cmd.Stderr = tail
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %v", r.python, err)
	}
	wait := func() error {
		err := cmd.Wait()
		if err != nil {
			if t := tail.lastLines(6); t != "" {
				return fmt.Errorf("%v; stderr ends:\n%s", err, t)
			}
		}
		return err
	}
	return &Proc{Stdin: stdin, Stdout: stdout, Wait: wait}, nil
}

// runnerEnv is the environment of a runner process: the caller's, with TRITON_INTERPRET set
// (CPU) or removed (GPU), one CPU thread per BLAS library (processes run in parallel), and no
// __pycache__ written into the kernel folders.
func runnerEnv(base []string, interpret bool) []string {
	drop := map[string]bool{"TRITON_INTERPRET": true, "OMP_NUM_THREADS": true, "MKL_NUM_THREADS": true,
		"OPENBLAS_NUM_THREADS": true, "PYTHONDONTWRITEBYTECODE": true, "PYTHONUNBUFFERED": true}
	var env []string
	for _, e := range base {
		k, _, _ := strings.Cut(e, "=")
		if !drop[k] {
			env = append(env, e)
		}
	}
	env = append(env, "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1",
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	if interpret {
		env = append(env, "TRITON_INTERPRET=1")
	}
	return env
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) lastLines(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(t.b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

var stderrMu sync.Mutex

type syncWriter struct{ w io.Writer }

func (s syncWriter) Write(p []byte) (int, error) {
	stderrMu.Lock()
	defer stderrMu.Unlock()
	return s.w.Write(p)
}

// lockedWriter serialises writes from several runner processes' stderr.
func lockedWriter(w io.Writer) io.Writer { return syncWriter{w} }
