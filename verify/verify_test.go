package verify

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "update the golden files in testdata/golden")

// request is what Run sends a runner process.
type request struct {
	Dir  string   `json:"dir"`
	Skip []string `json:"skip"`
	Only []string `json:"only"`
}

// step is what a fake runner process does for one request: print lines, then hang until
// killed, exit (with stderr text), or wait for the next request.
type step struct {
	lines  []string
	hang   bool
	exit   bool
	stderr string
}

// fakeRunner replays scripted runner output, so the Go side is tested without Python.
type fakeRunner struct {
	hello string
	serve func(proc int, req request) step

	mu       sync.Mutex
	starts   int
	requests []request
	args     [][]string
	env      [][]string
}

const helloOK = `{"ev": "hello", "torch": "2.11.0+cu130", "triton": "3.6.0", "python": "3.11.7", "executable": "/venv/bin/python", "interpret": true, "cuda": false}`

func (f *fakeRunner) Start(ctx context.Context, args, env []string) (*Proc, error) {
	f.mu.Lock()
	f.starts++
	n := f.starts
	f.args = append(f.args, args)
	f.env = append(f.env, env)
	f.mu.Unlock()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan struct{})
	var exitErr error
	go func() {
		<-ctx.Done()
		inR.CloseWithError(ctx.Err())
		outW.CloseWithError(io.EOF)
	}()
	go func() {
		defer close(done)
		defer outW.Close()
		hello := f.hello
		if hello == "" {
			hello = helloOK
		}
		if _, err := io.WriteString(outW, hello+"\n"); err != nil {
			return
		}
		sc := bufio.NewScanner(inR)
		for sc.Scan() {
			var req request
			if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
				exitErr = fmt.Errorf("bad request %q", sc.Text())
				return
			}
			f.mu.Lock()
			f.requests = append(f.requests, req)
			f.mu.Unlock()
			s := f.serve(n, req)
			for _, l := range s.lines {
				if _, err := io.WriteString(outW, strings.ReplaceAll(l, "DIR", req.Dir)+"\n"); err != nil {
					return
				}
			}
			if s.hang {
				<-ctx.Done()
				exitErr = errors.New("signal: killed")
				return
			}
			if s.exit {
				exitErr = fmt.Errorf("exit status 1; stderr ends:\n%s", s.stderr)
				return
			}
		}
	}()
	return &Proc{Stdin: inW, Stdout: outR, Wait: func() error { <-done; return exitErr }}, nil
}

// folders makes n empty folders that look generated (a case.py).
func folders(t *testing.T, names ...string) []string {
	t.Helper()
	root := t.TempDir()
	var out []string
	for _, n := range names {
		d := filepath.Join(root, n)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "case.py"), []byte("PATTERN = \"x\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func recorded(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/bias_gelu.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestRecorded replays the real runner's output for a generated bias_gelu folder (recorded
// with one trial) and checks the parsed result and its renderings against golden files.
func TestRecorded(t *testing.T) {
	lines := recorded(t)
	if !strings.Contains(lines[0], `"hello"`) {
		t.Fatalf("recording starts with %q", lines[0])
	}
	body := lines[1:]
	fr := &fakeRunner{hello: lines[0], serve: func(int, request) step { return step{lines: body} }}
	dirs := folders(t, "bias_gelu_bf16")
	res, err := Run(context.Background(), dirs, Options{Runner: fr, Trials: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Torch != "2.11.0+cu130" || res.Triton != "3.6.0" || res.Python != "python" {
		t.Errorf("env = %q %q %q", res.Torch, res.Triton, res.Python)
	}
	if len(res.Folders) != 1 {
		t.Fatalf("%d folders", len(res.Folders))
	}
	f := res.Folders[0]
	if f.Pattern != "bias_gelu" || f.Dtype != "bf16" || f.Planned != 25 || len(f.Cases) != 25 {
		t.Errorf("folder = %s %s planned %d, %d cases", f.Pattern, f.Dtype, f.Planned, len(f.Cases))
	}
	c := f.Cases[0]
	if c.ID != "traced@bf16" || c.Status != StatusPass || fmtShapes(c.Shapes) != "1x48x257" || c.Atol != 0.01 || len(c.Seeds) != 1 {
		t.Errorf("first case = %+v", c)
	}
	fails := res.Failures()
	if len(fails) != 1 || fails[0].Name != "strided-vec" {
		t.Fatalf("failures = %+v", fails)
	}
	m := fails[0].Mismatch
	if m == nil || m.Output != "y" || m.Got != "nan" || m.Want != "0.126953125" || m.Count != 11547 || m.Numel != 12336 ||
		len(m.Index) != 3 || m.Index[2] != 1 {
		t.Errorf("mismatch = %+v", m)
	}
	if !math.IsNaN(float64(fails[0].MaxAbs)) {
		t.Errorf("max abs = %v, want NaN (a NaN where a number is wanted)", fails[0].MaxAbs)
	}
	if !res.Failed() {
		t.Error("Failed() = false with a failing case")
	}
	if n := res.Counts(); n[StatusPass] != 24 || n[StatusFail] != 1 {
		t.Errorf("counts = %v", n)
	}
	// the request asked for the folder's absolute path and skipped nothing
	if len(fr.requests) != 1 || fr.requests[0].Dir != dirs[0] || len(fr.requests[0].Skip) != 0 {
		t.Errorf("requests = %+v", fr.requests)
	}
	args := strings.Join(fr.args[0], " ")
	if !strings.Contains(args, "--device cpu") || !strings.Contains(args, "--trials 1") || !strings.Contains(args, "--max-elems 1048576") {
		t.Errorf("runner args = %s", args)
	}
	if !containsEnv(fr.env[0], "TRITON_INTERPRET=1") {
		t.Error("TRITON_INTERPRET=1 not set for the CPU runner")
	}

	res.Folders[0].Dir = "/gen/bias_gelu_bf16" // stable golden output
	res.Seconds = 0
	for _, format := range []Format{FormatTable, FormatMarkdown, FormatJSON} {
		var b bytes.Buffer
		if err := res.Write(&b, format); err != nil {
			t.Fatal(err)
		}
		golden(t, "bias_gelu."+string(format), b.Bytes())
	}
	// JSON round trip keeps NaN
	var back Result
	var b bytes.Buffer
	res.WriteJSON(&b)
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Failures(); len(got) != 1 || !math.IsNaN(float64(got[0].MaxAbs)) {
		t.Errorf("JSON round trip: failures %+v", got)
	}
}

func containsEnv(env []string, kv string) bool {
	for _, e := range env {
		if e == kv {
			return true
		}
	}
	return false
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden (go test -update to accept):\n%s", name, got)
	}
}

const (
	plan3 = `{"ev": "plan", "dir": "DIR", "pattern": "p", "dtype": "fp32", "cases": [` +
		`{"id": "a@fp32", "name": "a", "shapes": [[4, 5]], "dtype": "fp32"},` +
		`{"id": "b@fp32", "name": "b", "shapes": [[6]], "dtype": "fp32"},` +
		`{"id": "c@fp32", "name": "c", "shapes": [[7, 8]], "dtype": "fp32"}]}`
	passA = `{"ev": "case", "id": "a@fp32", "name": "a", "pattern": "p", "shapes": [[4, 5]], "dtype": "fp32", "status": "pass", "max_abs": 1e-7, "max_rel": 0, "atol": 1e-5, "rtol": 1e-5, "seeds": [1, 2]}`
	passB = `{"ev": "case", "id": "b@fp32", "name": "b", "pattern": "p", "shapes": [[6]], "dtype": "fp32", "status": "pass", "max_abs": 0, "max_rel": 0, "atol": 1e-5, "rtol": 1e-5, "seeds": [3]}`
	failB = `{"ev": "case", "id": "b@fp32", "name": "b", "pattern": "p", "shapes": [[6]], "dtype": "fp32", "status": "fail", "max_abs": 0.5, "max_rel": 1, "atol": 1e-5, "rtol": 1e-5, "seeds": [3], "mismatch": {"output": "y", "index": [2], "got": "1.5", "want": "1.0", "count": 1, "numel": 6, "seed": 3}}`
	passC = `{"ev": "case", "id": "c@fp32", "name": "c", "pattern": "p", "shapes": [[7, 8]], "dtype": "fp32", "status": "pass", "max_abs": 0, "max_rel": 0, "atol": 1e-5, "rtol": 1e-5, "seeds": [4]}`
	done  = `{"ev": "done", "dir": "DIR"}`
)

// TestTimeoutRestart: a case that hangs is killed after Options.Timeout and reported as
// timed out; a fresh runner goes on with the folder's other cases, told to skip those done.
func TestTimeoutRestart(t *testing.T) {
	fr := &fakeRunner{serve: func(proc int, req request) step {
		if proc == 1 {
			return step{lines: []string{plan3, `{"ev": "start", "id": "a@fp32"}`, passA, `{"ev": "start", "id": "b@fp32"}`}, hang: true}
		}
		return step{lines: []string{plan3, `{"ev": "start", "id": "c@fp32"}`, passC, done}}
	}}
	res, err := Run(context.Background(), folders(t, "f"), Options{Runner: fr, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cs := res.Folders[0].Cases
	if len(cs) != 3 || cs[0].Status != StatusPass || cs[1].Status != StatusTimeout || cs[2].Status != StatusPass {
		t.Fatalf("cases = %+v", cs)
	}
	if !strings.Contains(cs[1].Message, "no result within 300ms") || fmtShapes(cs[1].Shapes) != "6" {
		t.Errorf("timed-out case = %+v", cs[1])
	}
	if fr.starts != 2 || len(fr.requests) != 2 {
		t.Fatalf("starts = %d, requests = %+v", fr.starts, fr.requests)
	}
	if got := strings.Join(fr.requests[1].Skip, ","); got != "a@fp32,b@fp32" {
		t.Errorf("second request skips %q, want a@fp32,b@fp32", got)
	}
	if !res.Failed() {
		t.Error("a timed-out case must fail the run")
	}
	var b bytes.Buffer
	res.WriteTable(&b, false)
	if !strings.Contains(b.String(), "TIMEOUT") || !strings.Contains(b.String(), "p b (6 fp32): no result within 300ms: runner killed") {
		t.Errorf("table:\n%s", b.String())
	}
}

// TestCrash: a runner that dies in the middle of a case gets that case reported as an error
// with the end of its stderr, and the folder goes on in a fresh process.
func TestCrash(t *testing.T) {
	fr := &fakeRunner{serve: func(proc int, req request) step {
		if proc == 1 {
			return step{lines: []string{plan3, `{"ev": "start", "id": "a@fp32"}`}, exit: true, stderr: "Segmentation fault"}
		}
		return step{lines: []string{plan3, `{"ev": "start", "id": "b@fp32"}`, passB, `{"ev": "start", "id": "c@fp32"}`, passC, done}}
	}}
	res, err := Run(context.Background(), folders(t, "f"), Options{Runner: fr})
	if err != nil {
		t.Fatal(err)
	}
	cs := res.Folders[0].Cases
	if len(cs) != 3 || cs[0].Status != StatusError || cs[1].Status != StatusPass || cs[2].Status != StatusPass {
		t.Fatalf("cases = %+v", cs)
	}
	if !strings.Contains(cs[0].Message, "runner process died") || !strings.Contains(cs[0].Message, "Segmentation fault") {
		t.Errorf("crash message = %q", cs[0].Message)
	}
}

// TestFailFastAndSkip: FailFast stops the folder at its first failure (the runner is told
// with --fail-fast); Skip is passed in every request.
func TestFailFastAndSkip(t *testing.T) {
	fr := &fakeRunner{serve: func(proc int, req request) step {
		return step{lines: []string{plan3, `{"ev": "start", "id": "b@fp32"}`, failB, done}}
	}}
	res, err := Run(context.Background(), folders(t, "f"), Options{Runner: fr, FailFast: true, Skip: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(fr.args[0], " "), "--fail-fast") {
		t.Errorf("args = %v", fr.args[0])
	}
	if got := strings.Join(fr.requests[0].Skip, ","); got != "a" {
		t.Errorf("skip = %q", got)
	}
	f := res.Folders[0]
	if f.Planned != 3 || len(f.Cases) != 1 || f.Cases[0].Status != StatusFail {
		t.Fatalf("folder = %+v", f)
	}
	if d := Describe(f.Cases[0]); d != "y: 1 of 6 elements differ (atol=1e-05, rtol=1e-05); first at [2]: got 1.5, want 1.0 (seed 3)" {
		t.Errorf("Describe = %q", d)
	}
}

// TestOnlyAndSeed: -case's ids reach the runner in every request and -seed as --seed; a
// failure's rerun line names the device, trials, seed, case and folder; a folder with none of
// the cases asked for runs none, and a run with none of them anywhere is an error naming the
// first folder's cases.
func TestOnlyAndSeed(t *testing.T) {
	fr := &fakeRunner{serve: func(proc int, req request) step {
		if strings.HasSuffix(req.Dir, "none") {
			return step{lines: []string{plan3, done}}
		}
		return step{lines: []string{plan3, `{"ev": "start", "id": "b@fp32"}`, failB, done}}
	}}
	dirs := folders(t, "f", "none")
	res, err := Run(context.Background(), dirs, Options{Runner: fr, Only: []string{"b@fp32"}, Seed: 7, Trials: 1, Jobs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(fr.args[0], " "), "--seed 7") {
		t.Errorf("args = %v", fr.args[0])
	}
	for _, r := range fr.requests {
		if got := strings.Join(r.Only, ","); got != "b@fp32" {
			t.Errorf("%s: only = %q", r.Dir, got)
		}
	}
	f := res.Folders[0]
	if len(f.Cases) != 1 || f.Error != "" {
		t.Fatalf("folder = %+v", f)
	}
	want := "fuseadvise verify -trials 1 -seed 7 -case b@fp32 " + dirs[0]
	if got := res.Rerun(f.Dir, f.Cases[0]); got != want {
		t.Errorf("Rerun = %q, want %q", got, want)
	}
	var b strings.Builder
	if err := res.Write(&b, FormatTable); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "  again: "+want+"\n") {
		t.Errorf("table has no rerun line:\n%s", b.String())
	}
	if f := res.Folders[1]; f.Error != "" || len(f.Cases) != 0 {
		t.Errorf("folder without the case: %+v", f)
	}
	_, err = Run(context.Background(), dirs[1:], Options{Runner: fr, Only: []string{"b@fp32"}})
	if want := dirs[1] + ": no case b@fp32 (its cases: a, b, c)"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("no folder with the case: error %v, want one ending %q", err, want)
	}
	// a folder name a shell would split or expand is quoted
	if got := res.Rerun("gen/my kernels/it's", Case{ID: "grad@bf16"}); got != `fuseadvise verify -trials 1 -seed 7 -case grad@bf16 'gen/my kernels/it'\''s'` {
		t.Errorf("Rerun of an odd path = %s", got)
	}
	if _, err := Run(context.Background(), dirs, Options{Runner: fr, Seed: -1}); err == nil {
		t.Error("a negative seed ran")
	}
}

// TestParallel: several folders over two runner processes, results in the input order.
func TestParallel(t *testing.T) {
	fr := &fakeRunner{}
	fr.serve = func(proc int, req request) step {
		// the first process holds its first folder until a second one has started (at most
		// 5 s), so that two workers take folders however the scheduler runs them: on a loaded
		// machine one worker had taken all five before the other began
		for deadline := time.Now().Add(5 * time.Second); proc == 1 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			fr.mu.Lock()
			n := fr.starts
			fr.mu.Unlock()
			if n >= 2 {
				break
			}
		}
		return step{lines: []string{plan3, passA, passB, passC, done}}
	}
	dirs := folders(t, "f1", "f2", "f3", "f4", "f5")
	var mu sync.Mutex
	seen := 0
	var done []int
	folderDone := func(f Folder, n, total int) {
		if len(f.Cases) != 3 || total != 5 {
			t.Errorf("FolderDone(%s with %d cases, %d, %d)", f.Dir, len(f.Cases), n, total)
		}
		done = append(done, n) // FolderDone is called one at a time
	}
	res, err := Run(context.Background(), dirs, Options{Runner: fr, Jobs: 2, FolderDone: folderDone,
		Progress: func(string, Case) { mu.Lock(); seen++; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(done) != "[1 2 3 4 5]" {
		t.Errorf("FolderDone counts %v, want 1..5", done)
	}
	if fr.starts != 2 {
		t.Errorf("%d runner processes, want 2", fr.starts)
	}
	for i, f := range res.Folders {
		if f.Dir != dirs[i] || len(f.Cases) != 3 {
			t.Errorf("folder %d = %s with %d cases", i, f.Dir, len(f.Cases))
		}
	}
	if seen != 15 || res.Failed() {
		t.Errorf("progress saw %d cases; failed = %v", seen, res.Failed())
	}
}

// TestFolderError: a folder the runner cannot load is an error row, not a run error.
func TestFolderError(t *testing.T) {
	fr := &fakeRunner{serve: func(proc int, req request) step {
		return step{lines: []string{`{"ev": "error", "dir": "DIR", "msg": "SyntaxError: invalid syntax (kernel.py, line 3)"}`, done}}
	}}
	res, err := Run(context.Background(), folders(t, "f"), Options{Runner: fr})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Failed() || !strings.Contains(res.Folders[0].Error, "SyntaxError") {
		t.Errorf("folder = %+v", res.Folders[0])
	}
	var b bytes.Buffer
	res.WriteTable(&b, true)
	if !strings.Contains(b.String(), "ERROR") || !strings.Contains(b.String(), "SyntaxError: invalid syntax (kernel.py, line 3)") {
		t.Errorf("markdown:\n%s", b.String())
	}
}

// TestEnvErrors: a broken environment stops the run with an error that says how to fix it.
func TestEnvErrors(t *testing.T) {
	tests := []struct {
		name  string
		hello string
		gpu   bool
		serve func(int, request) step
		want  []string
	}{
		{"no torch", `{"ev": "hello", "error": "ModuleNotFoundError: No module named 'torch'"}`, false, nil,
			[]string{"cannot import torch and triton", "No module named 'torch'", "scripts/setup-python.sh", "-python"}},
		{"old torch", `{"ev": "hello", "torch": "2.5.1", "triton": "3.1.0"}`, false, nil,
			[]string{"torch 2.5.1 and triton 3.1.0", "needs torch 2.11.0 and triton 3.6.0", "scripts/setup-python.sh"}},
		{"no cuda", "", true, func(int, request) step {
			return step{lines: []string{`{"ev": "fatal", "msg": "no CUDA device: torch.cuda.is_available() is False"}`}, exit: true}
		}, []string{"verify: no CUDA device"}},
		{"not a runner", `Python 2.7`, false, nil, []string{"runner protocol"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serve := tt.serve
			if serve == nil {
				serve = func(int, request) step { return step{lines: []string{done}} }
			}
			fr := &fakeRunner{hello: tt.hello, serve: serve}
			_, err := Run(context.Background(), folders(t, "f"), Options{Runner: fr, GPU: tt.gpu})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if tt.gpu && (containsEnv(fr.env[0], "TRITON_INTERPRET=1") || !strings.Contains(strings.Join(fr.args[0], " "), "--device cuda")) {
				t.Errorf("GPU run: args %v, TRITON_INTERPRET set", fr.args[0])
			}
		})
	}
}

// TestBadInput: no folders, or a folder that codegen did not write.
func TestBadInput(t *testing.T) {
	if _, err := Run(context.Background(), nil, Options{Runner: &fakeRunner{}}); err == nil {
		t.Error("no folders: no error")
	}
	_, err := Run(context.Background(), []string{t.TempDir()}, Options{Runner: &fakeRunner{}})
	if err == nil || !strings.Contains(err.Error(), "not a generated kernel folder (no case.py)") {
		t.Errorf("err = %v", err)
	}
	if _, err := ParseFormat("xml"); err == nil {
		t.Error("ParseFormat(xml): no error")
	}
}

// TestPythonLookup: with no interpreter anywhere, Run says how to get one; a python that is
// not the pinned environment (a shell script printing old versions) is rejected through the
// real exec path.
func TestPythonLookup(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"HOME": home}
	getenv := func(k string) string { return env[k] }
	_, err := Run(context.Background(), folders(t, "f"), Options{Getenv: getenv})
	var ee *EnvError
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), filepath.Join(home, ".cache", "fuseadvise", "venv-torch2.11.0-triton3.6.0")) ||
		!strings.Contains(err.Error(), "setup-python.sh") {
		t.Errorf("err = %v", err)
	}
	env["XDG_CACHE_HOME"] = filepath.Join(home, "xdg")
	_, err = Run(context.Background(), folders(t, "f"), Options{Getenv: getenv})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(home, "xdg", "fuseadvise")) {
		t.Errorf("XDG_CACHE_HOME not honoured: %v", err)
	}
	env["FUSEADVISE_VENV"] = filepath.Join(home, "myvenv")
	_, err = Run(context.Background(), folders(t, "f"), Options{Getenv: getenv})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(home, "myvenv")) {
		t.Errorf("FUSEADVISE_VENV not honoured: %v", err)
	}

	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	fake := filepath.Join(t.TempDir(), "python")
	script := "#!/bin/sh\necho '{\"ev\": \"hello\", \"torch\": \"2.4.0\", \"triton\": \"3.0.0\"}'\ncat >/dev/null\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), folders(t, "f"), Options{Python: fake})
	if err == nil || !strings.Contains(err.Error(), "has torch 2.4.0 and triton 3.0.0") || !strings.Contains(err.Error(), "-python") {
		t.Errorf("err = %v", err)
	}
	env["FUSEADVISE_PYTHON"] = fake
	_, err = Run(context.Background(), folders(t, "f"), Options{Getenv: getenv})
	if err == nil || !strings.Contains(err.Error(), "has torch 2.4.0") {
		t.Errorf("FUSEADVISE_PYTHON not used: %v", err)
	}
}

// TestExecTimeout: the real exec path kills a runner that hangs (a shell script that sleeps
// after its plan) and reports the case as timed out.
func TestExecTimeout(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	fake := filepath.Join(t.TempDir(), "python")
	script := "#!/bin/sh\necho '" + helloOK + "'\nread req\n" +
		"echo '" + strings.ReplaceAll(plan3, "DIR", "x") + "'\necho '{\"ev\": \"start\", \"id\": \"a@fp32\"}'\nsleep 60\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	old := startupTimeout
	startupTimeout = 10 * time.Second
	defer func() { startupTimeout = old }()
	start := time.Now()
	res, err := Run(context.Background(), folders(t, "f"), Options{Python: fake, Timeout: 500 * time.Millisecond, FailFast: true})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("took %v: the hung runner was not killed", el)
	}
	cs := res.Folders[0].Cases
	if len(cs) != 1 || cs[0].Status != StatusTimeout {
		t.Errorf("cases = %+v", cs)
	}
}

func TestFloatJSON(t *testing.T) {
	for _, v := range []float64{0, 1.5e-7, math.NaN(), math.Inf(1), math.Inf(-1)} {
		b, err := json.Marshal(Float(v))
		if err != nil {
			t.Fatal(err)
		}
		var back Float
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !(float64(back) == v || math.IsNaN(v) && math.IsNaN(float64(back))) {
			t.Errorf("%v -> %s -> %v", v, b, back)
		}
	}
	var f Float
	if err := json.Unmarshal([]byte(`"x"`), &f); err == nil {
		t.Error(`"x" accepted`)
	}
}

func TestFailedSemantics(t *testing.T) {
	pass := Case{Status: StatusPass}
	tests := []struct {
		name string
		r    Result
		want bool
	}{
		{"empty", Result{}, true},
		{"all pass", Result{Folders: []Folder{{Cases: []Case{pass, {Status: StatusSkipped}}}}}, false},
		{"refused", Result{Folders: []Folder{{Cases: []Case{pass, {Status: StatusRefused}}}}}, true},
		{"folder error", Result{Folders: []Folder{{Error: "x", Cases: []Case{pass}}}}, true},
	}
	for _, tt := range tests {
		if got := tt.r.Failed(); got != tt.want {
			t.Errorf("%s: Failed() = %v", tt.name, got)
		}
	}
}

// TestJobs: runner processes by default one a CPU, at most DefaultGPUJobs on a GPU (their
// inputs share its memory), as asked when asked, never more than the folders.
func TestJobs(t *testing.T) {
	cpus := runtime.GOMAXPROCS(0)
	for _, c := range []struct {
		o    Options
		n    int
		want int
	}{
		{Options{}, 1000, cpus},
		{Options{GPU: true}, 1000, min(cpus, DefaultGPUJobs)},
		{Options{GPU: true, Jobs: 12}, 1000, 12},
		{Options{Jobs: 3}, 2, 2},
		{Options{}, 0, 1},
	} {
		if got := jobs(c.o, c.n); got != c.want {
			t.Errorf("jobs(%+v, %d) = %d, want %d", c.o, c.n, got, c.want)
		}
	}
}
