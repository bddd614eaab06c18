package bench

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fuseadvise/fuseadvise/internal/pyenv"
	"github.com/fuseadvise/fuseadvise/templates"
)

//go:embed harness.py
var harness []byte

// Harness returns the Python benchmark harness that Run executes.
func Harness() []byte { return harness }

// TimingLib is the file the harness times with (gpu_time_us, wall_time_us): the templates'
// fa_testing.py, which Run writes beside the harness. Every folder is timed by this copy,
// whatever version of it the folder holds.
const TimingLib = "_common/fa_testing.py"

// Options control a benchmark run.
type Options struct {
	Python      string // interpreter; "" = $FUSEADVISE_PYTHON or the pinned venv (internal/pyenv)
	MaxAutotune bool   // also time torch.compile(mode="max-autotune-no-cudagraphs")
	// Modes: what to time besides the forward, "backward" and/or "full" (forward and
	// backward), for the chains that have a backward; each adds one Case per folder.
	Modes   []string
	Repeats int           // timing repeats per provider (0: 3)
	Timeout time.Duration // for the whole run (0: none)
	// GPUs splits the folders over this many GPUs of the machine, one harness process per
	// GPU (CUDA_VISIBLE_DEVICES=i), round-robin; results keep the folders' order. 0 or 1:
	// one process on the default GPU. When CUDA_VISIBLE_DEVICES is already set (a
	// scheduler's "4,5"), process i gets the i-th listed device and GPUs is capped at the
	// number listed.
	GPUs   int
	Getenv func(string) string
	Stderr io.Writer // the harness's progress lines; nil discards them
	Runner Runner    // nil: run the harness with os/exec
}

// Runner runs the harness: python and its arguments, with extra environment variables
// (KEY=value); it returns the harness's stdout.
type Runner interface {
	Run(ctx context.Context, python string, args, env []string, stderr io.Writer) ([]byte, error)
}

// ExecRunner runs the harness as a subprocess.
type ExecRunner struct{}

func (ExecRunner) Run(ctx context.Context, python string, args, env []string, stderr io.Writer) ([]byte, error) {
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1")
	cmd.Env = append(withoutInterpret(cmd.Env), env...)
	cmd.Stderr = stderr
	return cmd.Output()
}

func withoutInterpret(env []string) []string {
	out := env[:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "TRITON_INTERPRET=") {
			out = append(out, e)
		}
	}
	return out
}

// NoGPUError says the machine has no GPU the harness can use.
type NoGPUError struct{ Msg string }

func (e *NoGPUError) Error() string {
	return "bench needs a CUDA GPU: " + e.Msg + " (use 'fuseadvise verify' for the CPU check in Triton's interpreter)"
}

// Run benchmarks the generated kernel folders dirs on the GPU.
func Run(ctx context.Context, dirs []string, o Options) (*Result, error) {
	if len(dirs) == 0 {
		return nil, errors.New("bench: no kernel folders given")
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "case.py")); err != nil {
			return nil, fmt.Errorf("%s: not a generated kernel folder (no case.py); create one with 'fuseadvise gen'", d)
		}
	}
	py := o.Python
	if o.Runner == nil {
		var err error
		if py, err = pyenv.Find(o.Python, o.Getenv); err != nil {
			return nil, err
		}
		o.Runner = ExecRunner{}
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	tmp, err := os.MkdirTemp("", "fuseadvise-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	script := filepath.Join(tmp, "harness.py")
	if err := os.WriteFile(script, harness, 0o644); err != nil {
		return nil, err
	}
	lib, err := templates.Read(TimingLib)
	if err != nil {
		return nil, fmt.Errorf("bench: %v", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "fa_testing.py"), lib, 0o644); err != nil {
		return nil, err
	}
	flags := []string{script}
	if o.MaxAutotune {
		flags = append(flags, "--max-autotune")
	}
	if o.Repeats > 0 {
		flags = append(flags, "--repeats", strconv.Itoa(o.Repeats))
	}
	if len(o.Modes) > 0 {
		modes, err := ParseModes(strings.Join(o.Modes, ","))
		if err != nil {
			return nil, err
		}
		flags = append(flags, "--modes", strings.Join(modes, ","))
	}
	abs := make([]string, len(dirs))
	for i, d := range dirs {
		if abs[i], err = filepath.Abs(d); err != nil {
			return nil, err
		}
	}
	stderr := o.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	stderr = &syncWriter{w: stderr}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	devices := visibleDevices(getenv("CUDA_VISIBLE_DEVICES"))
	n := max(1, min(o.GPUs, len(dirs)))
	if devices != nil {
		n = max(1, min(n, len(devices)))
	}
	type part struct {
		res *Result
		err error
	}
	parts := make([]part, n)
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		var mine []string // round-robin: folder i goes to GPU i % n
		for i := g; i < len(abs); i += n {
			mine = append(mine, abs[i])
		}
		var env []string
		if n > 1 {
			dev := strconv.Itoa(g)
			if devices != nil {
				dev = devices[g]
			}
			env = []string{"CUDA_VISIBLE_DEVICES=" + dev}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, runErr := o.Runner.Run(ctx, py, append(append([]string(nil), flags...), mine...), env, stderr)
			res, err := Parse(out)
			switch {
			case err != nil:
			case runErr != nil && ctx.Err() != nil:
				err = fmt.Errorf("bench: stopped after %v with %d of %d folders measured", o.Timeout, len(folderGroups(res.Cases)), len(mine))
			case runErr != nil:
				err = fmt.Errorf("bench: harness failed after %d of %d folders: %v", len(folderGroups(res.Cases)), len(mine), runErr)
			}
			parts[g] = part{res, err}
		}()
	}
	wg.Wait()
	// merge in the folders' order: folder i is case i/n of part i%n
	res := &Result{}
	var firstErr error
	for g, p := range parts {
		if p.err != nil && firstErr == nil {
			firstErr = p.err
		}
		if p.res != nil && res.GPU == "" {
			cases := res.Cases
			*res = *p.res
			res.Cases = cases
		}
		if p.res != nil && g > 0 && p.res.CopyTBps > 0 && p.res.CopyTBps < res.CopyTBps {
			res.CopyTBps = p.res.CopyTBps // the slowest GPU's, to be conservative about floors
		}
	}
	// in the folders' order: folder i is group i/n of part i%n, a group being a folder's
	// cases (one per mode: consecutive, with the folder's name)
	res.Cases = nil
	for i := range abs {
		if p := parts[i%n]; p.res != nil {
			if groups := folderGroups(p.res.Cases); i/n < len(groups) {
				res.Cases = append(res.Cases, groups[i/n]...)
			}
		}
	}
	if firstErr != nil {
		var ng *NoGPUError
		if errors.As(firstErr, &ng) {
			return nil, firstErr
		}
		return res, firstErr
	}
	return res, nil
}

// visibleDevices splits a CUDA_VISIBLE_DEVICES value ("4,5", "GPU-<uuid>,...") into its
// devices; nil when the value is empty (every GPU of the machine is visible).
func visibleDevices(v string) []string {
	var out []string
	for _, d := range strings.Split(v, ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Parse reads the harness's output: a header line, one JSON object per folder, then the
// launch counts of the folders that ran (launchCounts), merged into their cases.
func Parse(out []byte) (*Result, error) {
	res := &Result{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	header := false
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue // stray prints of a kernel module
		}
		if !header {
			var h struct {
				Error string `json:"error"`
				Result
			}
			if err := json.Unmarshal(line, &h); err != nil {
				return nil, fmt.Errorf("bench: harness output line %d: %v", n, err)
			}
			if h.Error != "" {
				return nil, &NoGPUError{Msg: h.Error}
			}
			*res = h.Result
			header = true
			continue
		}
		if bytes.Contains(line, []byte(`"launch_counts"`)) {
			var lc launchCounts
			if err := json.Unmarshal(line, &lc); err != nil {
				return nil, fmt.Errorf("bench: harness output line %d: %v", n, err)
			}
			if err := lc.merge(res.Cases); err != nil {
				return nil, fmt.Errorf("bench: harness output line %d: %v", n, err)
			}
			continue
		}
		var c Case
		if err := json.Unmarshal(line, &c); err != nil {
			return nil, fmt.Errorf("bench: harness output line %d: %v", n, err)
		}
		if err := c.CheckLibrary(); err != nil {
			return nil, fmt.Errorf("bench: harness output line %d (%s): %v", n, c.Name, err)
		}
		res.Cases = append(res.Cases, c)
	}
	if !header {
		return nil, errors.New("bench: the harness printed no result (see its messages above)")
	}
	return res, nil
}

// Noise reports whether medians a and b differ by less than their runs' spread: the ranges
// of their repeated medians (sa, sb: [min, max]) overlap, or nearly: the gap between them is
// smaller than the narrower range is wide. One slow repeat (a collection, a host hiccup) widens
// its range but does not hide a difference that every repeat shows: 171 µs in [171, 204]
// against 515 µs in [508, 865] is a difference, although the second range is 357 µs wide.
func Noise(a, b float64, sa, sb []float64) bool {
	if len(sa) != 2 || len(sb) != 2 {
		return false
	}
	if sa[0] > sb[0] { // sa is the range that starts lower
		sa, sb = sb, sa
	}
	gap := sb[0] - sa[1] // < 0: the ranges overlap
	return gap < min(sa[1]-sa[0], sb[1]-sb[0])
}

// Modes a benchmark can time, in their order in the results.
var Modes = []string{"forward", "backward", "full"}

// ParseModes reads a comma-separated list of Modes ("forward" is always timed and may be
// left out; "all" is all three) into the harness's order, or says which word is unknown.
func ParseModes(s string) ([]string, error) {
	want := map[string]bool{"forward": true}
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		switch {
		case m == "":
		case m == "all":
			for _, x := range Modes {
				want[x] = true
			}
		case slices.Contains(Modes, m):
			want[m] = true
		default:
			return nil, fmt.Errorf("bench: unknown mode %q (want forward, backward, full or all)", m)
		}
	}
	var out []string
	for _, m := range Modes {
		if want[m] {
			out = append(out, m)
		}
	}
	return out, nil
}

// folderGroups splits the cases of one harness run into its folders' groups: the
// consecutive cases of one name (a folder timed in several modes has one case per mode).
func folderGroups(cases []Case) [][]Case {
	var out [][]Case
	for i := 0; i < len(cases); {
		j := i + 1
		for j < len(cases) && cases[j].Name == cases[i].Name {
			j++
		}
		out = append(out, cases[i:j])
		i = j
	}
	return out
}
