package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"

	"github.com/fuseadvise/fuseadvise/analysis"
	"github.com/fuseadvise/fuseadvise/bench"
	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/internal/pyenv"
	"github.com/fuseadvise/fuseadvise/internal/safefile"
	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/report"
	"github.com/fuseadvise/fuseadvise/verify"
)

var cmdRun = &Command{
	Name:      "run",
	UsageLine: "run [-o DIR] [-top N] [-pattern ID] [-et FILE] [-bench auto|on|off] [-modes LIST] [-max-autotune] [-python PATH] [-force] TRACE|DIR",
	Short:     "analyze, gen, verify, bench (with a GPU) and report in one command",
	Long: `Run is the whole pipeline on one trace (or a directory of rank files):

	1. analyze   rank the fusion opportunities       DIR/analysis.json, DIR/analysis.md
	2. gen       one kernel folder per opportunity   DIR/kernels/<name>/
	3. verify    each kernel in Triton's interpreter DIR/verify.json
	4. bench     on the GPU, when there is one       DIR/bench.json
	5. report    report and chart                    DIR/report/report.html, .md, .svg, bench.csv
	6. pr        the PR-ready folder                 DIR/pr/

Where the analysis offers its master weights, gen writes DIR/kernels/master_adamw/ too (the
MasterAdamW optimizer and its tests), where it offers the drop-in nn.MultiheadAttention,
DIR/kernels/multihead_attention/ (not verified or benchmarked here: each has its own tests),
and the PR carries them.

DIR appears complete or not at all. -bench auto (the default) benchmarks when a CUDA GPU is
visible to the Python environment and says so when not; on requires it; off skips it.
-modes auto (the default) times the forward, and also the backward and forward+backward
("full") when a generated chain runs in training in the trace (it has a backward there);
a LIST (forward, backward, full, all) as for bench chooses.
The exit status is 1 when a kernel fails verification or its GPU check (the report says
which), 2 for bad input or environment, 0 otherwise.`,
	Flags: func(fs *flag.FlagSet) func(context.Context, *Env, []string) error {
		out := fs.String("o", "fuseadvise-out", "write everything into `DIR`")
		top := fs.Int("top", 5, "generate kernels for the `N` best opportunities (0: all)")
		pattern := fs.String("pattern", "", "only the pattern `ID`")
		et := fs.String("et", "", "execution trace `FILE` recorded with the trace, for exact dataflow")
		benchMode := fs.String("bench", "auto", "benchmark on the GPU: auto, on or off")
		python := fs.String("python", "", "Python interpreter with torch and triton (default: $FUSEADVISE_PYTHON or the pinned venv)")
		modes := fs.String("modes", "auto", "bench: what to time, auto or a `LIST` of forward, backward, full, all (auto: all when a chain runs in training)")
		maxAT := fs.Bool("max-autotune", false, `bench: also time torch.compile(mode="max-autotune-no-cudagraphs")`)
		force := fs.Bool("force", false, "replace an existing DIR")
		return func(ctx context.Context, env *Env, args []string) error {
			if len(args) != 1 {
				return usagef("want one trace file or directory, got %d arguments", len(args))
			}
			switch *benchMode {
			case "auto", "on", "off":
			default:
				return usagef("unknown -bench %q (want auto, on or off)", *benchMode)
			}
			var ms []string // nil: auto
			if *modes != "auto" {
				var err error
				if ms, err = bench.ParseModes(*modes); err != nil {
					return usagef("-modes: %s", strings.TrimPrefix(err.Error(), "bench: "))
				}
			}
			if *top < 0 {
				return usagef("-top must be >= 0")
			}
			if err := checkPattern(*pattern); err != nil {
				return err
			}
			if *python != "" {
				if _, err := pyenv.Find(*python, env.Getenv); err != nil {
					return err
				}
			}
			r := &pipeline{env: env, trace: args[0], bench: *benchMode, modes: ms, python: *python, maxAutotune: *maxAT,
				opts: analysis.Options{Top: *top, Pattern: *pattern, ET: *et, NTop: 5}}
			var failed error
			err := safefile.Dir(*out, *force, func(tmp string) error {
				var err error
				failed, err = r.run(ctx, tmp)
				return err
			})
			if err != nil {
				return err
			}
			r.progress("done: %s (open %s)", *out, filepath.Join(*out, "report", "report.html"))
			return failed
		}
	},
}

type pipeline struct {
	env         *Env
	trace       string
	opts        analysis.Options
	bench       string
	modes       []string // nil: auto
	python      string
	maxAutotune bool
	stage       int
	tty         bool
}

const stages = 6

func (p *pipeline) progress(format string, a ...any) {
	fmt.Fprintf(p.env.Stderr, format+"\n", a...)
}

// step announces stage n; on a terminal it draws a bar of the stages done. It returns the
// context's error when the run was interrupted (a stage that does not watch the context
// ends first; the next one does not start).
func (p *pipeline) step(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.stage++
	if p.tty {
		done := p.stage - 1
		bar := ""
		for i := 0; i < stages; i++ {
			if i < done {
				bar += "█"
			} else {
				bar += "░"
			}
		}
		fmt.Fprintf(p.env.Stderr, "%s %d/%d %s\n", bar, p.stage, stages, name)
		return nil
	}
	p.progress("[%d/%d] %s", p.stage, stages, name)
	return nil
}

// notes echoes on stderr what explains an empty or partial analysis (the analysis's notes:
// no input shapes recorded, no GPU kernels, dataflow inferred rather than exact, ...), which
// otherwise only the report shows.
func (p *pipeline) notes(a *analysis.Result) {
	for _, n := range a.Notes {
		p.progress("  note: %s", n)
	}
}

// autoModes is what -modes auto times: the forward, and the backward and full modes too when
// any opportunity has instances that run in training (a backward in the trace).
func autoModes(a *analysis.Result) []string {
	for _, o := range a.Opportunities {
		if o.BackwardInstances > 0 {
			return bench.Modes
		}
	}
	if c := a.Coverage; c != nil && c.ClaimedWithBackwardUs > c.ClaimedUs { // generic chains
		return bench.Modes
	}
	return []string{"forward"}
}

// run executes the pipeline into dir. It returns failed (exit status 1: a kernel failed a
// check, the outputs are still complete) or err (nothing is kept).
func (p *pipeline) run(ctx context.Context, dir string) (failed, err error) {
	if f, ok := p.env.Stderr.(*os.File); ok {
		p.tty = term.IsTerminal(int(f.Fd()))
	}
	if err := p.step(ctx, "analyze "+p.trace); err != nil {
		return nil, err
	}
	a, traces, err := analysis.Run(p.trace, p.opts)
	if err != nil {
		return nil, err
	}
	warn(p.env, traces)
	analysisPath := filepath.Join(dir, "analysis.json")
	if err := safefile.Write(analysisPath, a.WriteJSON); err != nil {
		return nil, err
	}
	if err := safefile.Write(filepath.Join(dir, "analysis.md"), func(w io.Writer) error { return a.WriteText(w, true) }); err != nil {
		return nil, err
	}
	p.progress("  %d opportunities", len(a.Opportunities))
	p.notes(a)

	if err := p.step(ctx, "gen"); err != nil {
		return nil, err
	}
	items, skipped, err := codegen.SpecsFromReport(a.Report)
	if err != nil {
		return nil, err
	}
	for _, s := range skipped {
		p.progress("  skipped %s", s)
	}
	paths := report.Paths{Analysis: analysisPath}
	var kernels []string
	if len(items) > 0 {
		if kernels, err = codegen.WriteFolders(filepath.Join(dir, "kernels"), items, false); err != nil {
			return nil, err
		}
	}
	p.progress("  %d kernel folders", len(kernels))
	paths.Generated = kernels
	for _, m := range codegen.OfferedModules(a.Report) {
		if err := codegen.WriteModule(m, filepath.Join(dir, "kernels", m.Dir), false); err != nil {
			return nil, err
		}
		p.progress("  %s: %s, with its own tests", filepath.Join("kernels", m.Dir), m.What)
	}

	if err := p.step(ctx, "verify (Triton interpreter)"); err != nil {
		return nil, err
	}
	if len(kernels) > 0 {
		res, err := runVerify(ctx, p.env, kernels, verify.Options{Python: p.python})
		if err != nil {
			return nil, err
		}
		for i := range res.Folders { // relative to the output folder, not its temporary name
			res.Folders[i].Dir = filepath.Join("kernels", filepath.Base(res.Folders[i].Dir))
		}
		paths.Verify = filepath.Join(dir, "verify.json")
		if err := safefile.Write(paths.Verify, res.WriteJSON); err != nil {
			return nil, err
		}
		n := res.Counts()
		p.progress("  %d cases passed, %d failed", n[verify.StatusPass], len(res.Failures()))
		if res.Failed() {
			failed = verifyStatus(res)
		}
	}

	if err := p.step(ctx, "bench (GPU)"); err != nil {
		return nil, err
	}
	switch {
	case p.bench == "off":
		p.progress("  skipped (-bench off)")
	case len(kernels) == 0:
		p.progress("  nothing to measure")
	default:
		modes := p.modes
		if modes == nil {
			modes = autoModes(a)
			p.progress("  modes: %s", strings.Join(modes, ", "))
		}
		res, err := bench.Run(ctx, kernels, bench.Options{Python: p.python, MaxAutotune: p.maxAutotune, Modes: modes, Getenv: p.env.Getenv, Stderr: p.env.Stderr})
		var noGPU *bench.NoGPUError
		switch {
		case errors.As(err, &noGPU) && p.bench == "auto":
			p.progress("  skipped: %s", noGPU.Msg)
		case err != nil:
			return nil, err
		default:
			bench.Predict(res, patterns.DefaultCostModel())
			paths.Bench = filepath.Join(dir, "bench.json")
			if err := safefile.Write(paths.Bench, func(w io.Writer) error { return writeJSON(w, res) }); err != nil {
				return nil, err
			}
			for _, c := range res.Cases {
				if !c.Correct && failed == nil {
					failed = &exitError{code: 1, err: fmt.Errorf("bench: %s failed its GPU check: %s", c.Name, c.Error)}
				}
			}
		}
	}

	if err := p.step(ctx, "report"); err != nil {
		return nil, err
	}
	in, err := report.Load(paths)
	if err != nil {
		return nil, err
	}
	if err := report.WriteDir(filepath.Join(dir, "report"), in, false); err != nil {
		return nil, err
	}

	if err := p.step(ctx, "pr"); err != nil {
		return nil, err
	}
	if len(kernels) > 0 {
		if err := report.WritePR(filepath.Join(dir, "pr"), in, kernels, false); err != nil {
			return nil, err
		}
	} else {
		p.progress("  no kernels: no PR folder")
	}
	return failed, nil
}
