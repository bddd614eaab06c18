package main

import (
	"context"
	"flag"
	"io"

	"github.com/fuseadvise/fuseadvise/internal/safefile"
	"github.com/fuseadvise/fuseadvise/tracediff"
)

var cmdDiff = &Command{
	Name:      "diff",
	UsageLine: "diff [-format table|json|markdown] [-kernels N] [-o FILE] BEFORE AFTER",
	Short:     "compare a workload's traces before and after the fused kernels",
	Long: `Diff reads two profiles of the same workload, BEFORE and AFTER the fused kernels were applied
(each a trace file or a directory of rank files, as analyze reads them), analyzes both and
prints: step time (ProfilerStep spans added up, else the trace's span; per step when there are
steps), GPU busy time, kernels, launch calls and CPU ops, with deltas; each pattern's chains
(instances and GPU time) before and after; the kernels only one of the traces ran, by GPU time;
and whether the saving the analysis of BEFORE predicted arrived: its total estimated saving
against the measured GPU busy and step time savings, per step when both traces have
ProfilerStep spans ("arrived" when the GPU busy saving is at least 80% of the prediction).

Profile both runs the same way (steps, shapes, batch): the numbers are compared as they are.`,
	Flags: func(fs *flag.FlagSet) func(context.Context, *Env, []string) error {
		format := fs.String("format", "table", "output `format`: table, json or markdown")
		ntop := fs.Int("kernels", 5, "list at most `N` kernels that appeared and disappeared (-1: all)")
		out := fs.String("o", "", "write the result to `FILE` instead of standard output")
		return func(ctx context.Context, env *Env, args []string) error {
			if len(args) != 2 {
				return usagef("want two traces, BEFORE and AFTER, got %d arguments", len(args))
			}
			switch *format {
			case "table", "json", "markdown", "md":
			default:
				return usagef("unknown -format %q (want table, json or markdown)", *format)
			}
			if *ntop < -1 {
				return usagef("-kernels must be >= -1")
			}
			if err := checkOutputs(args, *out); err != nil {
				return err
			}
			r, traces, err := tracediff.Compare(args[0], args[1], tracediff.Options{NTop: *ntop})
			if err != nil {
				return err
			}
			warn(env, traces)
			render := func(w io.Writer) error {
				if *format == "json" {
					return r.WriteJSON(w)
				}
				return r.WriteText(w, *format != "table")
			}
			if *out != "" {
				return safefile.Write(*out, render)
			}
			return render(env.Stdout)
		}
	},
}
