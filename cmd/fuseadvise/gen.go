package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/fuseadvise/fuseadvise/analysis"
	"github.com/fuseadvise/fuseadvise/bench"
	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/patterns"
)

var cmdGen = &Command{
	Name:      "gen",
	UsageLine: "gen [-o DIR] [-pattern ID] [-top N] [-force] TRACE|DIR | gen -from ANALYSIS.json | gen -anchors",
	Short:     "write fused Triton kernels, references, tests and benchmarks",
	Long: `Gen writes one folder per opportunity (grouped by pattern, shape and dtype) under -o:
the fused Triton kernel module (kernels, launcher, autograd wrapper, drop-in nn.Module),
reference.py (the eager PyTorch chain exactly as the trace ran it), pytest tests (interpreter
and GPU marks), bench.py, case.py (the traced shapes and parameters), manifest.json and a
README on how to swap it in. Chains outside the catalog (generic chains of elementwise ops,
optionally ending in a last-dim reduction) get a folder rendered from their op program
(generic-...); those whose scalars or semantics the trace does not record are listed with the
reason and skipped. Where the analysis offers its master weights (a training step under
autocast casting fp32 GEMM weights), gen also writes master_adamw/: the MasterAdamW optimizer,
its tests and a README; where it offers the drop-in nn.MultiheadAttention (self-attention
splitting its packed projection with copies), multihead_attention/: the module, its tests and
a README (verify and bench pass these over in DIR/*).

The opportunities come from analyzing TRACE (with -pattern and -top as in analyze), or from the
JSON that 'analyze -format json' wrote (-from). -anchors writes the H200 benchmark matrix
instead (the reference shapes of the project's GPU results).

Only validated numbers and known enum values from the trace enter the generated code; op
names, paths and call sites go into manifest.json and README.md as data. Output is
deterministic; if a folder exists, gen writes nothing and stops unless -force (which
replaces folders gen wrote), and folders are written atomically.`,
	Flags: func(fs *flag.FlagSet) func(context.Context, *Env, []string) error {
		out := fs.String("o", "fused", "write the kernel folders under `DIR`")
		pattern := fs.String("pattern", "", "only the pattern `ID`")
		top := fs.Int("top", 0, "only the `N` best opportunities (0: all)")
		from := fs.String("from", "", "read opportunities from analyze's JSON `FILE` instead of a trace")
		anchors := fs.Bool("anchors", false, "write the H200 benchmark matrix instead of a trace's opportunities")
		force := fs.Bool("force", false, "replace existing folders")
		return func(ctx context.Context, env *Env, args []string) error {
			if *top < 0 {
				return usagef("-top must be >= 0")
			}
			if err := checkPattern(*pattern); err != nil {
				return err
			}
			var items []codegen.Item
			var modules []codegen.Module // the modules whose advice the analysis offers, written beside the kernels
			switch {
			case *anchors:
				if len(args) != 0 || *from != "" {
					return usagef("-anchors takes no trace and no -from")
				}
				for _, s := range bench.Anchors() {
					name, err := codegen.DirName(s)
					if err != nil {
						return err
					}
					items = append(items, codegen.Item{Spec: s, Name: name})
				}
			default:
				var skipped []string
				var err error
				var rep *patterns.Report
				items, skipped, rep, err = specsFor(args, *from, analysis.Options{Top: *top, Pattern: *pattern})
				if err != nil {
					return err
				}
				modules = codegen.OfferedModules(rep)
				for _, s := range skipped {
					fmt.Fprintf(env.Stderr, "skipped %s\n", s)
				}
			}
			if len(items) == 0 && len(modules) == 0 {
				fmt.Fprintln(env.Stderr, "nothing to generate: no opportunity with a template")
				return nil
			}
			dirs, err := codegen.WriteFolders(*out, items, *force)
			for _, d := range dirs {
				fmt.Fprintln(env.Stdout, d)
			}
			if err != nil {
				return err
			}
			for _, m := range modules {
				d := filepath.Join(*out, m.Dir)
				if err := codegen.WriteModule(m, d, *force); err != nil {
					return err
				}
				fmt.Fprintf(env.Stderr, "%s: %s (its README says how to swap it in)\n", d, m.What)
			}
			return nil
		}
	},
}

// specsFor turns a trace's (or a saved analysis's) opportunities into generator specs
// (codegen.SpecsFromReport): the folders to write and the groups skipped, with a reason, and
// the analysis.
func specsFor(args []string, from string, o analysis.Options) ([]codegen.Item, []string, *patterns.Report, error) {
	var rep *patterns.Report
	switch {
	case from != "" && len(args) > 0:
		return nil, nil, nil, usagef("give a trace or -from, not both")
	case from != "":
		a, err := analysis.ReadJSON(from, o)
		if err != nil {
			return nil, nil, nil, err
		}
		rep = a.Report
	case len(args) == 1:
		a, _, err := analysis.Run(args[0], o)
		if err != nil {
			return nil, nil, nil, err
		}
		rep = a.Report
	default:
		return nil, nil, nil, usagef("want one trace file or directory (or -from FILE), got %d arguments", len(args))
	}
	items, skipped, err := codegen.SpecsFromReport(rep)
	return items, skipped, rep, err
}
