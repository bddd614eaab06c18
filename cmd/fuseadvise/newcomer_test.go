package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `report` with nothing to report is a usage error, not an empty report on stdout.
func TestReportWithoutInputs(t *testing.T) {
	code, out, errs := run(t, "report")
	if code != 2 || out != "" || !strings.Contains(errs, "nothing to report") || !strings.Contains(errs, "usage: fuseadvise report") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestVersion(t *testing.T) {
	code, out, errs := run(t, "version")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"fuseadvise ", "github.com/fuseadvise/fuseadvise", "\ngo go1.", "torch 2.11.0, triton 3.6.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("version lacks %q:\n%s", want, out)
		}
	}
	if code, _, errs := run(t, "version", "extra"); code != 2 || !strings.Contains(errs, "takes no arguments") {
		t.Errorf("version extra: exit %d, %q", code, errs)
	}
	var b bytes.Buffer
	writeVersion(&b, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/fuseadvise/fuseadvise", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}})
	if want := "fuseadvise v1.2.3 (github.com/fuseadvise/fuseadvise)\nrevision 0123456789ab with local changes\ngo go1.26.8\n"; !strings.HasPrefix(b.String(), want) {
		t.Errorf("got\n%s\nwant it to start with\n%s", b.String(), want)
	}
}

// SIGTERM (kill, timeout, a scheduler) cancels a run as Ctrl-C does: the run stops at the next
// stage, removes its temporary .DIR.tmp-* folder and exits 130, instead of dying with it
// left behind.
func TestSIGTERMLeavesNoTemporaryFolder(t *testing.T) {
	ctx, stop := notifyContext()
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Skip("cannot signal this process:", err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM did not cancel the context")
	}
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := Main(ctx, &Env{Stdout: &out, Stderr: &errb, Stdin: strings.NewReader("")},
		[]string{"run", "-o", filepath.Join(dir, "out"), "-bench", "off", bundled})
	if code != 130 || !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("exit %d, stderr %q: want 130 and 'interrupted'", code, errb.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}

// A stage that ends after the interrupt does not let the next one start.
func TestRunStopsBetweenStages(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pipeline{env: &Env{Stderr: &bytes.Buffer{}}}
	if err := p.step(ctx, "analyze"); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := p.step(ctx, "gen"); err != context.Canceled {
		t.Errorf("step after cancel: %v", err)
	}
}

// `run` says on the terminal why its result is empty or partial (the analysis's notes), not
// only in the report it writes; the note on inferred dataflow comes with what it found
// (TestAnalyzeNotesInferredDataflow).
func TestRunEchoesNotes(t *testing.T) {
	tr := `{"traceEvents": [
  {"ph": "X", "cat": "cpu_op", "name": "aten::gelu", "pid": 1, "tid": 1, "ts": 10, "dur": 50, "args": {"External id": 1}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5, "args": {"correlation": 7}},
  {"ph": "X", "cat": "kernel", "name": "gelu_kernel", "pid": 0, "tid": 7, "ts": 30, "dur": 10, "args": {"correlation": 7, "device": 0, "stream": 7}}
]}`
	dir := t.TempDir()
	path := filepath.Join(dir, "noshapes.json")
	if err := os.WriteFile(path, []byte(tr), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "run", "-o", filepath.Join(dir, "out"), "-bench", "off", path)
	if code != 0 || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, out, errs)
	}
	for _, want := range []string{"0 opportunities", "note: " + path + ": no input shapes recorded (profile with record_shapes=True)"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
}

// TestAnalyzeNotesInferredDataflow: an analysis from the Kineto trace alone that found chains
// says its dataflow is inferred, what that can get wrong and how to make it exact (-et); with
// the execution trace it does not.
func TestAnalyzeNotesInferredDataflow(t *testing.T) {
	trace, et := "../../testdata/models/vit_train_bf16.json.gz", "../../testdata/models/vit_train_bf16.et.json.gz"
	for _, tc := range []struct {
		args []string
		want bool
	}{{[]string{"analyze", trace}, true}, {[]string{"analyze", "-et", et, trace}, false}} {
		code, out, errs := run(t, tc.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errs)
		}
		got := strings.Contains(out, "dataflow inferred from op order and shapes") && strings.Contains(out, "pass it with -et")
		if got != tc.want {
			t.Errorf("%v: the inferred-dataflow note %v, want %v:\n%s", tc.args, got, tc.want, out)
		}
	}
}

// A stage that does not watch its context (parsing a trace, writing folders) does not hold
// the process after a signal: after the grace period main removes the temporaries and
// exits 130; a command that unwinds within it keeps its own exit status.
func TestRunUntilStopped(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	defer close(release)
	removed := false
	var errb bytes.Buffer
	started := make(chan struct{})
	go func() { <-started; cancel() }()
	code := runUntilStopped(ctx, &errb, 50*time.Millisecond, func() int { close(started); <-release; return 0 }, func() { removed = true })
	if code != 130 || !removed || !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("stuck command: exit %d, temporaries removed %v, stderr %q", code, removed, errb.String())
	}

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	removed = false
	code = runUntilStopped(ctx, &errb, time.Minute, func() int { return 7 }, func() { removed = true })
	if code != 7 || removed {
		t.Errorf("a command that returns: exit %d, temporaries removed %v", code, removed)
	}
}
