package main

import (
	"context"
	"flag"

	"github.com/fuseadvise/fuseadvise/report"
)

var cmdReport = &Command{
	Name:      "report",
	UsageLine: "report [-analysis FILE] [-verify FILE] [-bench FILE] [-o DIR [-force]] [-format markdown|html] [-targets] [KERNEL_DIR...]",
	Short:     "a markdown and HTML report from analysis, verification and benchmarks",
	Long: `Report draws one report from the outputs of the other verbs: the analysis (analyze -format json),
the generated kernel folders (arguments; a folder of them is expanded), the verification
results (verify -format json) and the GPU benchmark (bench). Every part is optional; the
report says what is missing rather than guessing.

It shows the trace summary, the ranked opportunities with their source lines and advice, what
was generated, the verification results, and the speedup table (fused / eager / torch.compile
medians with p20/p80, speedups, % of the floor, predicted vs measured) with a chart drawn as
SVG. Speedups above 10x are flagged for review, below 1.0x marked "do not ship", and
differences inside the measurement spread called noise. -targets appends the check against
the project's performance targets (fused / floor, vs torch.compile and eager, GEMM patterns
vs the GEMM alone, decode-size launches, predicted vs measured).

With -o DIR it writes report.md, report.html, report.svg and (with benchmark results) bench.csv
in Liger-Kernel's schema into DIR; without, it prints the -format report (markdown by
default) on standard output.`,
	Flags: func(fs *flag.FlagSet) func(context.Context, *Env, []string) error {
		p := reportFlags(fs)
		bench := p.bench
		out := fs.String("o", "", "write report.md, report.html and report.svg into `DIR`")
		format := fs.String("format", "markdown", "standard output `format`: markdown or html")
		force := fs.Bool("force", false, "replace an existing -o DIR")
		targets := fs.Bool("targets", false, "end the Markdown report with the check of the benchmark against the project's performance targets")
		return func(ctx context.Context, env *Env, args []string) error {
			if *format != "markdown" && *format != "md" && *format != "html" {
				return usagef("unknown -format %q (want markdown or html)", *format)
			}
			if *targets && *bench == "" {
				return usagef("-targets needs -bench")
			}
			if *p.analysis == "" && *p.verify == "" && *bench == "" && len(args) == 0 {
				return usagef("nothing to report: give -analysis, -verify, -bench or kernel folders")
			}
			in, err := loadReportInputs(p, args)
			if err != nil {
				return err
			}
			in.Targets = *targets
			if *out != "" {
				return report.WriteDir(*out, in, *force)
			}
			if *format == "html" {
				return report.HTML(env.Stdout, in)
			}
			return report.Markdown(env.Stdout, in)
		}
	},
}

type reportPaths struct{ analysis, verify, bench *string }

func reportFlags(fs *flag.FlagSet) reportPaths {
	return reportPaths{
		analysis: fs.String("analysis", "", "the analysis JSON `FILE` (analyze -format json)"),
		verify:   fs.String("verify", "", "the verification JSON `FILE` (verify -format json)"),
		bench:    fs.String("bench", "", "the benchmark JSON `FILE` (bench)"),
	}
}

func loadReportInputs(p reportPaths, kernelArgs []string) (report.Inputs, error) {
	var dirs []string
	if len(kernelArgs) > 0 {
		var err error
		if dirs, err = kernelFolders(kernelArgs); err != nil {
			return report.Inputs{}, err
		}
	}
	return report.Load(report.Paths{Analysis: *p.analysis, Verify: *p.verify, Bench: *p.bench, Generated: dirs})
}
