package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/fuseadvise/fuseadvise/bench"
	"github.com/fuseadvise/fuseadvise/internal/safefile"
	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/report"
)

var cmdBench = &Command{
	Name:      "bench",
	UsageLine: "bench [-o FILE] [-max-autotune] [-repeats N] [-gpus N] [-timeout D] [-modes LIST] [-python PATH] DIR... | bench -predict RESULT [-o FILE] DIR...",
	Short:     "measure fused vs eager vs torch.compile on a GPU",
	Long: `Bench measures each generated kernel folder (from 'fuseadvise gen') on the GPU: first a
correctness check of the compiled kernel against the reference on the traced shapes (a kernel
that fails it is not timed), then the fused kernel, the unfused eager chain exactly as the
trace ran it, and torch.compile of that chain (default mode; -max-autotune adds
"max-autotune-no-cudagraphs"), each timed two ways:
  GPU time: captured in a CUDA graph and its replay timed between CUDA events, L2 flushed
    before every call by writing one 256 MiB buffer and reading another (no dirty lines left
    to write back inside the timed window); median with p20/p80, repeated -repeats times for
    a spread; microsecond-scale cases as many replays back to back (do_bench_cudagraph,
    L2-warm).
  per call: the plain call, no graph, as an eager model makes it: wall time per call of about
    20 ms of back-to-back calls with one synchronize at the end, and the host time a call
    takes to return.

Reported per case: medians and spreads, speedups, the floor (fewest bytes / measured copy
bandwidth), % of floor, a plain copy of the same bytes timed the same way, launches, the
kernel's configuration, the analyzer's predicted time, and a verdict: "do not ship" below
1.0x over eager, "review" above 10x, decided on per-call time (eager use) where it was
measured, with the GPU-time verdict beside it.

Training (-modes backward,full or all): for the chains with a backward, after their
gradients pass a GPU check, one more case per mode: "backward" times the backward from one
forward's saved state, "full" the forward and its backward, fused (the kernel's
autograd.Function) against eager and torch.compile (AOTAutograd). Every case also carries the
peak memory of one call per provider.

Library calls: where a folder's adapter names library ops that compute the same chain
(attention: F.scaled_dot_product_attention per backend and FlexAttention; rms_norm:
F.rms_norm; linear_gelu: the cuBLASLt GELU epilogue), each is checked against the reference
and timed beside the others in every mode, or recorded as refused with the reason; the case's
recommended option is the measured fastest of the kernel, torch.compile and these calls.

The result is JSON (-o, default standard output), read by 'fuseadvise report' and 'pr'.
Without a GPU, bench says so in one line and exits with status 2.

-predict RESULT measures nothing: it rewrites the predicted times of an earlier result with
the current cost model (each case's folder among DIR... gives the analysis's estimate from its
manifest.json, the cost model the rest), for results measured before the model changed.`,
	Flags: func(fs *flag.FlagSet) func(context.Context, *Env, []string) error {
		out := fs.String("o", "", "write the JSON result to `FILE` (default standard output)")
		maxAT := fs.Bool("max-autotune", false, `also time torch.compile(mode="max-autotune-no-cudagraphs")`)
		repeats := fs.Int("repeats", 3, "timing repeats per provider, for the spread")
		gpus := fs.Int("gpus", 1, "split the folders over `N` GPUs, one harness process each (the first N of $CUDA_VISIBLE_DEVICES when it is set)")
		timeout := fs.Duration("timeout", 0, "stop after `D` (e.g. 9m), keeping what was measured")
		python := fs.String("python", "", "Python interpreter with torch and triton (default: $FUSEADVISE_PYTHON or the pinned venv)")
		predict := fs.String("predict", "", "no GPU: rewrite the predictions of the earlier result `RESULT` with the current cost model")
		modes := fs.String("modes", "forward", "what to time: `LIST` of forward, backward, full, or all (backward and full: chains with a backward)")
		return func(ctx context.Context, env *Env, args []string) error {
			if len(args) == 0 {
				return usagef("want one or more generated kernel folders")
			}
			if *predict != "" {
				return repredict(env, *predict, *out, args)
			}
			if *repeats < 1 {
				return usagef("-repeats must be >= 1")
			}
			if *gpus < 1 {
				return usagef("-gpus must be >= 1")
			}
			if *timeout < 0 {
				return usagef("-timeout must be >= 0")
			}
			ms, err := bench.ParseModes(*modes)
			if err != nil {
				return usagef("-modes: %v", strings.TrimPrefix(err.Error(), "bench: "))
			}
			dirs, err := kernelFolders(args)
			if err != nil {
				return err
			}
			res, err := bench.Run(ctx, dirs, bench.Options{
				Python: *python, MaxAutotune: *maxAT, Repeats: *repeats, Timeout: *timeout, GPUs: *gpus,
				Modes: ms, Getenv: env.Getenv, Stderr: env.Stderr,
			})
			if res != nil {
				bench.Predict(res, patterns.DefaultCostModel())
			}
			if res != nil && len(res.Cases) > 0 {
				if werr := emitJSON(env, *out, res); werr != nil {
					return werr
				}
			}
			if err != nil {
				return err
			}
			wrong := 0
			for _, s := range report.Speedups(res) {
				c := &s.Case
				fmt.Fprintf(env.Stderr, "%-44s GPU: fused %8.1f µs  eager %8.1f  compile %8.1f  floor %7.1f  %5.2fx eager  %5.2fx compile",
					s.Label, c.FusedUs, c.EagerUs, c.CompileUs, c.FloorUs, s.VsEager, s.VsCompile)
				if c.FusedWallUs > 0 {
					fmt.Fprintf(env.Stderr, "  per call: fused %7.1f µs (host %5.1f)  eager %7.1f  %5.2fx eager",
						c.FusedWallUs, c.FusedHostUs, c.EagerWallUs, s.WallVsEager)
				}
				fmt.Fprintf(env.Stderr, "  %s (on %s)\n", s.Verdict, s.Basis)
				if len(c.Library) > 0 && s.Recommendation() != "" {
					fmt.Fprintf(env.Stderr, "%-44s %s\n", "", s.Recommendation())
				}
				if !c.Correct {
					wrong++
				}
			}
			if wrong > 0 {
				return &exitError{code: 1, err: fmt.Errorf("bench: %d kernel(s) failed their GPU check against the reference (not timed)", wrong)}
			}
			return nil
		}
	},
}

// emitJSON writes v as indented JSON to path, atomically, or to stdout when path is "".
func emitJSON(env *Env, path string, v any) error {
	if path == "" {
		return writeJSON(env.Stdout, v)
	}
	return safefile.Write(path, func(w io.Writer) error { return writeJSON(w, v) })
}

// repredict is bench -predict: an earlier result's predictions from the current code.
func repredict(env *Env, path, out string, args []string) error {
	res, err := report.LoadBench(path)
	if err != nil {
		return err
	}
	dirs, err := kernelFolders(args)
	if err != nil {
		return err
	}
	if err := bench.Repredict(res, dirs, patterns.DefaultCostModel()); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	return emitJSON(env, out, res)
}
