package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"

	"github.com/fuseadvise/fuseadvise/analysis"
	"github.com/fuseadvise/fuseadvise/annotate"
	"github.com/fuseadvise/fuseadvise/internal/safefile"
)

var cmdAnalyze = &Command{
	Name:      "analyze",
	UsageLine: "analyze [-format table|json|markdown] [-top N] [-pattern ID] [-et FILE] [-pprof FILE] [-annotate OUT] [-kernels N] [-o FILE] TRACE|DIR",
	Short:     "find and rank fusion opportunities in a trace",
	Long: `Analyze reads a PyTorch profiler trace (.json or .json.gz, Kineto or the legacy array form)
or a directory of rank files, links every GPU kernel to the CPU op that launched it, finds the
` + wrap("chains of ops worth fusing (the pattern catalog: "+catalogIDs()+"), estimates the saving of each and prints them "+
		"ranked, after a summary of the trace: device, ranks, steps, GPU busy and idle time, kernel and launch counts, top "+
		"kernels and top ops by GPU time.", helpWidth) + `

Chains of memory-bound ops outside the catalog follow (generic chains, which gen writes a
kernel for), then the optimizer steps whose updates run unfused: a foreach or per-tensor-loop
Adam/AdamW step gets the advice fused=True, the fused step's GPU time estimated from the
step's own update kernels. Then two findings whose remedy is a module gen writes beside the
kernels: autocast's casts of fp32 GEMM weights in a bf16 training step (keep them in bf16 with
fp32 masters in MasterAdamW: master_adamw/), and nn.MultiheadAttention's copies of its packed
q/k/v projection (the drop-in MultiheadAttention: multihead_attention/). Each says why where
it is not offered.

Dataflow between ops is inferred from the trace alone (op order, nesting, input shapes).
With -et, the PyTorch execution trace recorded in the same run gives exact tensor identities
instead.

-format json follows the JSON contract of the pattern catalog: a "trace" object and a ranked
"opportunities" list. -pprof also writes the pprof profile that the pprof verb writes.
-annotate writes a copy of the trace with one slice per chain found (process "fuseadvise",
a thread per pattern; args: pattern, instance, estimated saving, counted) and a flow to the
chain's first op, for Perfetto or chrome://tracing; every original event is kept as written.`,
	Flags: func(fs *flag.FlagSet) func(context.Context, *Env, []string) error {
		format := fs.String("format", "table", "output `format`: table, json or markdown")
		top := fs.Int("top", 0, "show only the `N` best opportunities (0: all)")
		pattern := fs.String("pattern", "", "show only the pattern `ID`")
		et := fs.String("et", "", "execution trace `FILE` (.et.json[.gz]) recorded with the trace, for exact dataflow")
		pprofOut := fs.String("pprof", "", "also write a pprof profile to `FILE`")
		annotateOut := fs.String("annotate", "", "also write the trace with its chains marked, for Perfetto, to `OUT` (a folder for a rank folder)")
		out := fs.String("o", "", "write the result to `FILE` instead of standard output")
		ntop := fs.Int("kernels", 5, "list the `N` top kernels and ops in the summary")
		return func(ctx context.Context, env *Env, args []string) error {
			if len(args) != 1 {
				return usagef("want one trace file or directory, got %d arguments", len(args))
			}
			switch *format {
			case "table", "json", "markdown", "md":
			default:
				return usagef("unknown -format %q (want table, json or markdown)", *format)
			}
			if *top < 0 {
				return usagef("-top must be >= 0")
			}
			if *ntop < 0 {
				return usagef("-kernels must be >= 0")
			}
			if err := checkPattern(*pattern); err != nil {
				return err
			}
			if err := checkOutputs([]string{args[0], *et}, *out, *pprofOut, *annotateOut); err != nil {
				return err
			}
			a, traces, err := analysis.Run(args[0], analysis.Options{Top: *top, Pattern: *pattern, ET: *et, NTop: *ntop})
			if err != nil {
				return err
			}
			warn(env, traces)
			if *pprofOut != "" {
				if err := writePprof(*pprofOut, traces); err != nil {
					return err
				}
			}
			if *annotateOut != "" {
				if err := annotate.Write(*annotateOut, args[0], traces, annotate.Options{Pattern: *pattern, ET: *et}); err != nil {
					return err
				}
			}
			render := func(w io.Writer) error {
				if *format == "json" {
					return a.WriteJSON(w)
				}
				return a.WriteText(w, *format != "table")
			}
			if *out != "" {
				return safefile.Write(*out, render)
			}
			return render(env.Stdout)
		}
	},
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
