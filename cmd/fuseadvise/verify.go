package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/internal/safefile"
	"github.com/fuseadvise/fuseadvise/verify"
)

var cmdVerify = &Command{
	Name:      "verify",
	UsageLine: "verify [-format table|json|markdown] [-o FILE] [-gpu] [-timeout D] [-trials N] [-seed N] [-case ID,...] [-failfast] [-python PATH] DIR...",
	Short:     "run the generated kernels in Triton's interpreter against the reference",
	Long: `Verify runs each generated kernel folder (from 'fuseadvise gen'; a folder of such folders
is expanded) under TRITON_INTERPRET=1 on the CPU against its eager PyTorch reference: the
trace's shapes scaled down to interpreter size, plus adversarial cases (ragged 129x127, primes,
a single element, one past a block, rows longer than a block, an empty batch, non-contiguous,
transposed, channels-last, expanded and offset inputs, broadcast and fully-masked rows, large
positive and negative magnitudes), in every dtype the pattern supports, with NaN-poisoned outputs in guard bands,
fresh random inputs per trial, NaN/inf parity, inputs checked unmodified, and gradients for
patterns with a backward: output gradients contiguous, expanded (y.sum()'s), transposed and
one output's at a time, a second derivative (eager's, or a clear refusal), and for a generic
chain each input broadcast otherwise than traced, so that every reduction of a broadcast
input's gradient the kernel carries runs. A generic chain's output is held to the precision
of the steps it is computed from (a 16-bit one whose steps eager rounds as the kernel does,
to eager's bits but for 1% of its elements; a 16-bit output or gradient to no more bias
against the chain in fp32 than eager's), its inputs are planted with the program's numbers
and its ops' kinks (hardswish's 3), and a GEMM head's outputs and gradients are held to the
range the GEMM's rounding allows.

Each case prints its max abs and rel error; a failing case says where the first mismatch is
(index, got, want) and the command that runs it again with the same inputs (-case, -seed). Exit status 1 when any case fails, 2 for usage or environment errors.
-gpu runs the same cases compiled on a CUDA GPU instead.

The Python environment is the pinned venv that scripts/setup-python.sh creates (torch 2.11.0,
triton 3.6.0), or -python, or $FUSEADVISE_PYTHON.`,
	Flags: func(fs *flag.FlagSet) func(context.Context, *Env, []string) error {
		format := fs.String("format", "table", "output `format`: table, json or markdown")
		out := fs.String("o", "", "write the result to `FILE` instead of standard output")
		gpu := fs.Bool("gpu", false, "run the cases compiled on a CUDA GPU instead of the interpreter")
		timeout := fs.Duration("timeout", 0, "time limit per case (default "+verify.DefaultTimeout.String()+")")
		trials := fs.Int("trials", 0, "fresh random inputs per case (default 3)")
		python := fs.String("python", "", "Python interpreter with torch and triton (default: $FUSEADVISE_PYTHON or the pinned venv)")
		failFast := fs.Bool("failfast", false, "stop each folder at its first failing case")
		seed := fs.Int64("seed", 0, "base of the cases' random seeds (a failure's rerun line names it)")
		only := fs.String("case", "", "run only these cases: comma-separated `ids` (name@dtype, as a failure names them) or names")
		return func(ctx context.Context, env *Env, args []string) error {
			f, err := verify.ParseFormat(*format)
			if err != nil {
				return usagef("%v", err)
			}
			if len(args) == 0 {
				return usagef("want one or more generated kernel folders")
			}
			if *trials < 0 {
				return usagef("-trials must be >= 1 (0: the default)")
			}
			if *timeout < 0 {
				return usagef("-timeout must be > 0 (0: the default)")
			}
			if *seed < 0 || *seed > verify.MaxSeed {
				return usagef("-seed must be between 0 and %d", verify.MaxSeed)
			}
			var cases []string
			for _, c := range strings.Split(*only, ",") {
				if c = strings.TrimSpace(c); c != "" {
					cases = append(cases, c)
				}
			}
			if err := checkOutputs(nil, *out); err != nil {
				return err
			}
			dirs, err := kernelFolders(args)
			if err != nil {
				return err
			}
			res, err := runVerify(ctx, env, dirs, verify.Options{Python: *python, GPU: *gpu, Timeout: *timeout,
				Trials: *trials, Seed: *seed, Only: cases, FailFast: *failFast})
			if err != nil {
				return err
			}
			render := func(w io.Writer) error { return res.Write(w, f) }
			if *out != "" {
				err = safefile.Write(*out, render)
			} else {
				err = render(env.Stdout)
			}
			if err != nil {
				return err
			}
			return verifyStatus(res)
		}
	},
}

// runVerify runs verify, reporting each failing case on stderr as it finishes.
func runVerify(ctx context.Context, env *Env, dirs []string, o verify.Options) (*verify.Result, error) {
	o.Getenv = env.Getenv
	o.Progress = func(dir string, c verify.Case) {
		if !c.Passed() {
			fmt.Fprintf(env.Stderr, "FAIL %s: %s\n", filepath.Base(dir), verify.Describe(c))
		}
	}
	o.FolderDone = func(f verify.Folder, done, total int) {
		fmt.Fprintf(env.Stderr, "verify %d/%d %s: %s\n", done, total, filepath.Base(f.Dir), folderLine(f))
	}
	return verify.Run(ctx, dirs, o)
}

// folderLine sums up one verified folder: its cases passed out of those that ran, or its
// error.
func folderLine(f verify.Folder) string {
	if f.Error != "" {
		return "error: " + f.Error
	}
	pass := 0
	for _, c := range f.Cases {
		if c.Passed() {
			pass++
		}
	}
	if pass == len(f.Cases) {
		return fmt.Sprintf("%d cases passed", pass)
	}
	return fmt.Sprintf("%d of %d cases passed", pass, len(f.Cases))
}

func verifyStatus(res *verify.Result) error {
	if !res.Failed() {
		return nil
	}
	for _, f := range res.Folders {
		if f.Error != "" {
			return &exitError{code: 1, err: fmt.Errorf("verify: %s: %s", f.Dir, f.Error)}
		}
	}
	if fs := res.Failures(); len(fs) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("verify: %d case(s) failed; first: %s", len(fs), verify.Describe(fs[0]))}
	}
	return &exitError{code: 1, err: fmt.Errorf("verify: no case ran, so nothing was verified")}
}

// kernelFolders expands the arguments: a generated folder (with case.py) stands for itself,
// any other folder for the generated folders directly inside it. The module folders gen
// writes beside the kernels (master_adamw/, multihead_attention/: a module and its own tests,
// no case) are passed over, so that DIR/* names the kernels.
func kernelFolders(args []string) ([]string, error) {
	var dirs []string
	for _, a := range args {
		if _, err := os.Stat(filepath.Join(a, "case.py")); err == nil {
			dirs = append(dirs, a)
			continue
		}
		if m, ok := codegen.IsModuleDir(a); ok {
			if len(args) > 1 {
				continue
			}
			return nil, fmt.Errorf("%s: the folder of %s, not a kernel folder: its tests run with pytest there (its README)", a, m.What)
		}
		entries, err := os.ReadDir(a)
		if err != nil {
			return nil, err
		}
		n := len(dirs)
		for _, e := range entries {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				if _, err := os.Stat(filepath.Join(a, e.Name(), "case.py")); err == nil {
					dirs = append(dirs, filepath.Join(a, e.Name()))
				}
			}
		}
		if len(dirs) == n {
			return nil, fmt.Errorf("%s: not a generated kernel folder and holds none (create them with 'fuseadvise gen')", a)
		}
	}
	return dirs, nil
}
