package verify

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fuseadvise/fuseadvise/internal/pyenv"
)

// Defaults for Options' zero values.
const (
	DefaultTimeout = 2 * time.Minute
	DefaultTrials  = 3
	// MaxSeed is the largest base seed: a case's seeds are Seed*1e6 plus its own part, and
	// torch takes seeds below 2**64.
	MaxSeed         = 1_000_000_000_000
	DefaultMaxElems = 1 << 20
)

// startupTimeout bounds the wait for a runner's first line (importing torch takes seconds,
// more on a cold disk).
var startupTimeout = 3 * time.Minute

// Options control a verification run. The zero value verifies on the CPU in Triton's
// interpreter with the pinned Python environment.
type Options struct {
	// Python is the interpreter; "" means $FUSEADVISE_PYTHON, else the venv that
	// scripts/setup-python.sh creates ($FUSEADVISE_VENV, else
	// $XDG_CACHE_HOME/fuseadvise/venv-torch<v>-triton<v>, else under ~/.cache).
	Python string
	// Timeout is the longest a case (or loading a folder) may run before its runner process
	// is killed and the case reported as timed out (0: DefaultTimeout).
	Timeout time.Duration
	// GPU runs the same cases compiled for a CUDA device (no TRITON_INTERPRET), plus the
	// traced shapes at full size. Without a CUDA device Run returns an error.
	GPU bool
	// Format is the output format the CLI asked for; Run does not use it (see Result.Write).
	Format Format
	// Trials is the number of fresh random inputs per case (0: DefaultTrials).
	Trials int
	// Seed is the base of the per-trial seeds (each case's seeds are in its result).
	Seed int64
	// Jobs is the number of runner processes run in parallel (0: GOMAXPROCS, with GPU at most
	// DefaultGPUJobs).
	Jobs int
	// FailFast stops each folder at its first case that does not pass.
	FailFast bool
	// MaxElems refuses interpreter cases with more input elements than this
	// (0: DefaultMaxElems; negative: no limit). Not applied with GPU.
	MaxElems int64
	// Skip lists case ids (name@dtype) or names not to run in any folder.
	Skip []string
	// Only, when set, lists the case ids (name@dtype) or names to run; the others are not
	// run. A folder with none of them gets an error naming its cases.
	Only []string
	// Stderr receives the runner processes' stderr (kernel prints, tracebacks of failed
	// cases); nil keeps only the end of it for error messages.
	Stderr io.Writer
	// Progress, when set, is called once per finished case (from several goroutines,
	// serialised).
	Progress func(dir string, c Case)
	// FolderDone, when set, is called once per folder when all its cases have finished
	// (from several goroutines, one call at a time), with the folder's result; done of total
	// folders are finished then.
	FolderDone func(f Folder, done, total int)
	// Runner starts the Python processes; nil runs the embedded runner script with Python.
	Runner Runner
	// Getenv reads the environment for the Python lookup (nil: os.Getenv).
	Getenv func(string) string

	skipFor func(dir string) []string // per-folder skips (the mutation suite's baseline failures)
}

// EnvError says the Python environment cannot run verify (missing, wrong versions, no
// CUDA device for GPU); its message says how to fix it.
type EnvError struct{ Msg string }

func (e *EnvError) Error() string { return "verify: " + e.Msg }

// Run verifies each generated kernel folder in dirs (written by codegen.Write) against its
// eager reference and returns one Case per case run. An error means the run itself could not
// happen (no folders, bad environment, cancelled); failing kernels are reported in the Result
// (see Result.Failed), not as an error.
func Run(ctx context.Context, dirs []string, opts Options) (*Result, error) {
	start := time.Now()
	if len(dirs) == 0 {
		return nil, errors.New("verify: no kernel folders given")
	}
	abs := make([]string, len(dirs))
	for i, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "case.py")); err != nil {
			return nil, fmt.Errorf("verify: %s: not a generated kernel folder (no case.py); create one with 'fuseadvise gen'", d)
		}
		a, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("verify: %s: %v", d, err)
		}
		abs[i] = a
	}
	o := opts
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Trials <= 0 {
		o.Trials = DefaultTrials
	}
	if o.Seed < 0 || o.Seed > MaxSeed {
		return nil, fmt.Errorf("verify: seed %d out of range [0, %d]", o.Seed, MaxSeed)
	}
	if o.MaxElems == 0 {
		o.MaxElems = DefaultMaxElems
	}
	if o.MaxElems < 0 || o.GPU {
		o.MaxElems = 0
	}
	o.Jobs = jobs(o, len(abs))
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	python := o.Python
	if python == "" {
		python = "python"
	}
	if o.Runner == nil {
		py, err := pyenv.Find(o.Python, o.Getenv)
		if err != nil {
			return nil, &EnvError{err.Error()}
		}
		python = py
		tmp, err := os.MkdirTemp("", "fuseadvise-verify-")
		if err != nil {
			return nil, fmt.Errorf("verify: %v", err)
		}
		defer os.RemoveAll(tmp)
		script, err := writeRunner(tmp)
		if err != nil {
			return nil, fmt.Errorf("verify: %v", err)
		}
		o.Runner = &execRunner{python: py, script: script, stderr: o.Stderr}
	}

	device := "cpu"
	if o.GPU {
		device = "cuda"
	}
	args := []string{"--device", device, "--trials", strconv.Itoa(o.Trials),
		"--seed", strconv.FormatInt(o.Seed, 10), "--max-elems", strconv.FormatInt(o.MaxElems, 10), "--threads", "1"}
	if o.FailFast {
		args = append(args, "--fail-fast")
	}
	env := runnerEnv(os.Environ(), !o.GPU)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := &Result{Trials: o.Trials, Seed: o.Seed, Python: filepath.Base(python), Folders: make([]Folder, len(abs))}
	if o.GPU {
		res.Device = "cuda"
	} else {
		res.Device = "cpu (TRITON_INTERPRET=1)"
	}
	var (
		mu       sync.Mutex
		firstErr error
		helloSet bool
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	var progressMu sync.Mutex
	finished := 0 // folders done, under progressMu
	progress := func(dir string, c Case) {
		if o.Progress != nil {
			progressMu.Lock()
			o.Progress(dir, c)
			progressMu.Unlock()
		}
	}
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range abs {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range o.Jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &worker{o: &o, args: args, env: env, python: python, progress: progress}
			defer w.stop()
			for i := range next {
				f, err := w.folder(ctx, abs[i])
				f.Dir = dirs[i] // as the caller named it: no absolute machine path in the result
				res.Folders[i] = f
				if err != nil {
					fail(err)
					return
				}
				if o.FolderDone != nil {
					progressMu.Lock()
					finished++
					o.FolderDone(f, finished, len(abs))
					progressMu.Unlock()
				}
				if f.tainted() {
					w.stop() // the next folder gets a process the kernel could not have corrupted
				}
				if w.hello != nil {
					mu.Lock()
					if !helloSet {
						helloSet = true
						res.Torch, res.Triton = w.hello.Torch, w.hello.Triton
						if w.hello.Executable != "" {
							res.Python = filepath.Base(w.hello.Executable)
						}
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	if firstErr != nil {
		return res, firstErr
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("verify: %v", err)
	}
	if len(o.Only) > 0 && res.Folders[0].none != "" && slices.IndexFunc(res.Folders, func(f Folder) bool { return f.none == "" }) < 0 {
		return res, fmt.Errorf("verify: %s: %s", res.Folders[0].Dir, res.Folders[0].none)
	}
	return res, nil
}

// event is one line from the runner.
type event struct {
	Ev string `json:"ev"`
	// hello
	Torch      string `json:"torch"`
	Triton     string `json:"triton"`
	Executable string `json:"executable"`
	Error      string `json:"error"`
	Cuda       bool   `json:"cuda"`
	Interpret  bool   `json:"interpret"`
	// fatal, error, plan, done
	Msg     string     `json:"msg"`
	Dir     string     `json:"dir"`
	Pattern string     `json:"pattern"`
	Dtype   string     `json:"dtype"`
	Cases   []planCase `json:"cases"`
	// start
	ID string `json:"id"`

	raw []byte // the whole line, for case events
}

type planCase struct {
	ID     string    `json:"id"`
	Name   string    `json:"name"`
	Shapes [][]int64 `json:"shapes"`
	Dtype  string    `json:"dtype"`
}

type line struct {
	b   []byte
	err error // set on the last value sent: io.EOF or a read error
}

// worker owns one runner process at a time and verifies folders with it, restarting it
// after a time-out or a crash.
type worker struct {
	o        *Options
	args     []string
	env      []string
	python   string
	progress func(string, Case)

	proc   *Proc
	cancel context.CancelFunc
	lines  chan line
	hello  *event
}

func (w *worker) stop() {
	if w.proc == nil {
		return
	}
	w.proc.Stdin.Close()
	w.cancel()
	for range w.lines {
	}
	w.proc.Wait()
	w.proc = nil
}

// kill ends the process at once and returns its exit error (with the end of stderr).
func (w *worker) kill() error {
	if w.proc == nil {
		return nil
	}
	w.cancel()
	w.proc.Stdin.Close()
	for range w.lines {
	}
	err := w.proc.Wait()
	w.proc = nil
	return err
}

func (w *worker) start(ctx context.Context) error {
	pctx, cancel := context.WithCancel(ctx)
	p, err := w.o.Runner.Start(pctx, w.args, w.env)
	if err != nil {
		cancel()
		return &EnvError{fmt.Sprintf("cannot start %s: %v: %s", w.python, err, pyenv.Fix)}
	}
	w.proc, w.cancel = p, cancel
	w.lines = make(chan line, 16)
	go func(r io.Reader, out chan<- line) {
		defer close(out)
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			b, err := br.ReadBytes('\n')
			if len(b) > 0 && err == nil {
				out <- line{b: b}
				continue
			}
			if err == nil {
				err = io.EOF
			}
			out <- line{err: err}
			return
		}
	}(p.Stdout, w.lines)
	ev, err := w.next(ctx, startupTimeout)
	if err != nil {
		werr := w.kill()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errTimeout) {
			return &EnvError{fmt.Sprintf("%s printed nothing within %v of starting (importing torch): %v", w.python, startupTimeout, werr)}
		}
		if !errors.Is(err, io.EOF) {
			return &EnvError{fmt.Sprintf("%s: %v: %s", w.python, err, pyenv.Fix)}
		}
		return &EnvError{fmt.Sprintf("%s exited before running anything (%v): %s", w.python, werr, pyenv.Fix)}
	}
	if ev.Ev != "hello" {
		w.kill()
		return &EnvError{fmt.Sprintf("%s: runner protocol: first line is %q, want hello", w.python, ev.Ev)}
	}
	if ev.Error != "" {
		w.kill()
		return &EnvError{fmt.Sprintf("%s cannot import torch and triton (%s): %s", w.python, ev.Error, pyenv.Fix)}
	}
	if base(ev.Torch) != pyenv.TorchVersion || base(ev.Triton) != pyenv.TritonVersion {
		w.kill()
		return &EnvError{fmt.Sprintf("%s has torch %s and triton %s; verify needs torch %s and triton %s: %s",
			w.python, ev.Torch, ev.Triton, pyenv.TorchVersion, pyenv.TritonVersion, pyenv.Fix)}
	}
	w.hello = ev
	return nil
}

var errTimeout = errors.New("timed out")

// next returns the next event, waiting at most d. At the end of the output it returns the
// read error (io.EOF); on a time-out errTimeout.
func (w *worker) next(ctx context.Context, d time.Duration) (*event, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, errTimeout
		case l, ok := <-w.lines:
			if !ok {
				return nil, io.EOF
			}
			if l.err != nil {
				return nil, l.err
			}
			ev := &event{}
			if err := json.Unmarshal(l.b, ev); err != nil {
				return nil, fmt.Errorf("runner protocol: %v in %q", err, truncate(string(l.b), 200))
			}
			ev.raw = l.b
			return ev, nil
		}
	}
}

// folder verifies one folder. The error is for conditions that stop the whole run.
func (w *worker) folder(ctx context.Context, dir string) (Folder, error) {
	f := Folder{Dir: dir}
	plan := map[string]planCase{}
	var order []string
	results := map[string]Case{}
	skip := append([]string(nil), w.o.Skip...)
	if w.o.skipFor != nil {
		skip = append(skip, w.o.skipFor(dir)...)
	}
	stopped := false
	finish := func() Folder {
		for _, id := range order {
			if c, ok := results[id]; ok {
				f.Cases = append(f.Cases, c)
			}
		}
		f.Planned = len(order)
		return f
	}
	record := func(c Case) {
		results[c.ID] = c
		w.progress(dir, c)
		if w.o.FailFast && !c.Passed() {
			stopped = true
		}
	}
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return finish(), ctx.Err()
		}
		if attempt > len(order)+1 {
			f.Error = "runner keeps dying; giving up on this folder"
			return finish(), nil
		}
		if w.proc == nil {
			if err := w.start(ctx); err != nil {
				return finish(), err
			}
		}
		done := append([]string(nil), skip...)
		for id := range results {
			done = append(done, id)
		}
		sort.Strings(done)
		req, _ := json.Marshal(map[string]any{"dir": dir, "skip": done, "only": w.o.Only})
		if _, err := w.proc.Stdin.Write(append(req, '\n')); err != nil {
			werr := w.kill()
			if ctx.Err() != nil {
				return finish(), ctx.Err()
			}
			f.Error = fmt.Sprintf("runner died: %v", werr)
			return finish(), nil
		}
		current := ""
		for {
			ev, err := w.next(ctx, w.o.Timeout)
			if err != nil {
				if ctx.Err() != nil {
					w.kill()
					return finish(), ctx.Err()
				}
				var msg string
				status := StatusError
				if errors.Is(err, errTimeout) {
					w.kill()
					status = StatusTimeout
					msg = fmt.Sprintf("no result within %v: runner killed", w.o.Timeout)
				} else {
					werr := w.kill()
					msg = fmt.Sprintf("runner process died (%v)", werr)
					if werr == nil {
						msg = fmt.Sprintf("runner process ended early (%v)", err)
					}
				}
				if current == "" {
					if status == StatusTimeout {
						f.Error = fmt.Sprintf("loading the folder took longer than %v: runner killed", w.o.Timeout)
					} else {
						f.Error = msg
					}
					return finish(), nil
				}
				pc := plan[current]
				record(Case{ID: current, Pattern: f.Pattern, Name: pc.Name, Shapes: pc.Shapes, Dtype: pc.Dtype,
					Status: status, Message: msg, MaxAbs: Float(nanF()), MaxRel: Float(nanF())})
				if stopped {
					return finish(), nil
				}
				break // restart and go on with the remaining cases
			}
			switch ev.Ev {
			case "fatal":
				w.kill()
				return finish(), &EnvError{ev.Msg}
			case "error":
				f.Error = ev.Msg
			case "plan":
				if order == nil {
					f.Pattern, f.Dtype = ev.Pattern, ev.Dtype
					for _, c := range ev.Cases {
						plan[c.ID] = c
						order = append(order, c.ID)
					}
				}
			case "start":
				current = ev.ID
			case "case":
				var c Case
				if err := json.Unmarshal(ev.raw, &c); err != nil {
					w.kill()
					f.Error = fmt.Sprintf("runner protocol: bad case line: %v", err)
					return finish(), nil
				}
				if _, ok := plan[c.ID]; !ok {
					plan[c.ID] = planCase{ID: c.ID, Name: c.Name, Shapes: c.Shapes, Dtype: c.Dtype}
					order = append(order, c.ID)
				}
				record(c)
				current = ""
			case "done":
				if len(w.o.Only) > 0 && len(results) == 0 && f.Error == "" {
					f.none = noneOf(w.o.Only, order, plan)
				}
				return finish(), nil
			default:
				// unknown events are ignored: newer runners may add some
			}
		}
	}
}

// noneOf says that a folder has none of the cases asked for, and which it has.
func noneOf(only, order []string, plan map[string]planCase) string {
	var names []string
	seen := map[string]bool{}
	for _, id := range order {
		if n := plan[id].Name; !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	return fmt.Sprintf("no case %s (its cases: %s)", strings.Join(only, ", "), strings.Join(names, ", "))
}

// tainted reports whether a case of f may have corrupted the process that ran it.
func (f *Folder) tainted() bool {
	if f.Error != "" {
		return true
	}
	for _, c := range f.Cases {
		if c.Tainted {
			return true
		}
	}
	return false
}

func nanF() float64 { return math.NaN() }

func base(v string) string {
	if i := strings.IndexByte(v, '+'); i >= 0 {
		return v[:i]
	}
	return v
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// DefaultGPUJobs caps the runner processes that share one GPU when Options.Jobs is 0: each
// case's inputs live on the device, and a generic folder's case of offsets past 2**31 takes
// 16 GiB (eight runners of 16 CPUs at once ran an H200's 140 GiB out of memory).
const DefaultGPUJobs = 4

// jobs is the number of runner processes for n folders: Options.Jobs, or GOMAXPROCS (at
// most DefaultGPUJobs with GPU), and never more than the folders.
func jobs(o Options, n int) int {
	j := o.Jobs
	if j <= 0 {
		j = runtime.GOMAXPROCS(0)
		if o.GPU {
			j = min(j, DefaultGPUJobs)
		}
	}
	return max(min(j, n), 1)
}
