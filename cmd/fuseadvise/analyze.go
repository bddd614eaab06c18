package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/fuseadvise/fuseadvise/internal/safefile"
	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/report"
	"github.com/fuseadvise/fuseadvise/trace"
)

var cmdAnalyze = &Command{
	Name:      "analyze",
	UsageLine: "analyze [-format table|json|markdown] [-top N] [-pattern ID] [-et FILE] [-pprof FILE] [-kernels N] [-o FILE] TRACE|DIR",
	Short:     "find and rank fusion opportunities in a trace",
	Long: `Analyze reads a PyTorch profiler trace (.json or .json.gz, Kineto or the legacy array form)
or a directory of rank files, links every GPU kernel to the CPU op that launched it, finds the
` + wrap("chains of ops worth fusing (the pattern catalog: "+catalogIDs()+"), estimates the saving of each and prints them "+
		"ranked, after a summary of the trace: device, ranks, steps, GPU busy and idle time, kernel and launch counts, top "+
		"kernels and top ops by GPU time.", helpWidth) + `

Dataflow between ops is inferred from the trace alone (op order, nesting, input shapes).
With -et, the PyTorch execution trace recorded in the same run gives exact tensor identities
instead.

-format json follows the JSON contract of the pattern catalog: a "trace" object and a ranked
"opportunities" list. -pprof also writes the pprof profile that the pprof verb writes.`,
	Flags: func(fs *flag.FlagSet) func(context.Context, *Env, []string) error {
		format := fs.String("format", "table", "output `format`: table, json or markdown")
		top := fs.Int("top", 0, "show only the `N` best opportunities (0: all)")
		pattern := fs.String("pattern", "", "show only the pattern `ID`")
		et := fs.String("et", "", "execution trace `FILE` (.et.json[.gz]) recorded with the trace, for exact dataflow")
		pprofOut := fs.String("pprof", "", "also write a pprof profile to `FILE`")
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
			if err := checkOutputs([]string{args[0], *et}, *out, *pprofOut); err != nil {
				return err
			}
			a, err := analyze(args[0], analyzeOptions{Top: *top, Pattern: *pattern, ET: *et, NTop: *ntop})
			if err != nil {
				return err
			}
			warn(env, a.traces)
			if *pprofOut != "" {
				if err := writePprof(*pprofOut, a.traces); err != nil {
					return err
				}
			}
			render := func(w io.Writer) error {
				switch *format {
				case "json":
					return writeJSON(w, a.Result)
				case "markdown", "md":
					return writeAnalysisText(w, a.Result, true)
				}
				return writeAnalysisText(w, a.Result, false)
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

type analyzeOptions struct {
	Top     int
	Pattern string
	ET      string
	NTop    int
}

// analysis is the result of analyze and the traces it came from.
type analysis struct {
	Result *Analysis
	traces []*trace.Trace
}

// Analysis is what analyze prints: the detector's report (the JSON contract: "trace",
// "opportunities", plus ranks, calibration and notes) and a summary of the trace.
type Analysis struct {
	*patterns.Report
	Summary Summary `json:"summary"`
}

// Summary is the part of the trace summary the contract's "trace" object lacks (ranks,
// idle time, launches, top kernels and ops); report reads it back as the same type.
type Summary = report.TraceExtra

// NameTime is a kernel or op name with its count and total GPU time.
type NameTime = report.NameTime

func us(ns int64) float64 { return float64(ns) / 1e3 }

func analyze(path string, o analyzeOptions) (*analysis, error) {
	traces, err := trace.Load(path)
	if err != nil {
		return nil, err
	}
	popts := patterns.Options{Top: o.Top, Pattern: o.Pattern}
	if o.ET != "" {
		if len(traces) != 1 {
			return nil, fmt.Errorf("%s: -et takes one execution trace, for a single trace file (this is %d rank files)", path, len(traces))
		}
		et, err := trace.ReadET(o.ET)
		if err != nil {
			return nil, err
		}
		popts.ET = map[*trace.Trace]*trace.ExecTrace{traces[0]: et}
	}
	rep, err := patterns.Analyze(traces, popts)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	rep.Trace.Path = path
	return &analysis{Result: &Analysis{Report: rep, Summary: summarize(traces, o.NTop)}, traces: traces}, nil
}

func summarize(traces []*trace.Trace, ntop int) Summary {
	s := Summary{Ranks: len(traces)}
	kernels := map[string]*NameTime{}
	ops := map[string]*NameTime{}
	var korder, oorder []string
	add := func(m map[string]*NameTime, order *[]string, nt trace.NameTime) {
		v := m[nt.Name]
		if v == nil {
			v = &NameTime{Name: nt.Name}
			m[nt.Name] = v
			*order = append(*order, nt.Name)
		}
		v.Count += nt.Count
		v.Us += us(nt.Ns)
	}
	for _, t := range traces {
		s.IdleUs += us(t.IdleNs())
		s.Launches += t.LaunchCount()
		for _, k := range t.TopKernels(-1) {
			add(kernels, &korder, k)
		}
		for i := range t.Acts {
			a := &t.Acts[i]
			if a.Kind != trace.ActKernel {
				continue
			}
			s.KernelUs += us(a.Dur)
			if a.Graph {
				s.GraphKernelUs += us(a.Dur)
			}
			if strings.HasPrefix(a.Name, "triton_") {
				s.CompiledKernelUs += us(a.Dur)
			}
		}
		for _, k := range t.TopOps(-1) {
			add(ops, &oorder, k)
		}
	}
	s.LaunchMode = report.LaunchModeOf(s.KernelUs, s.GraphKernelUs, s.CompiledKernelUs)
	s.TopKernels = topN(kernels, korder, ntop)
	s.TopOps = topN(ops, oorder, ntop)
	return s
}

func topN(m map[string]*NameTime, order []string, n int) []NameTime {
	out := make([]NameTime, 0, len(order))
	for _, name := range order {
		out = append(out, *m[name])
	}
	sortNameTimes(out)
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out
}
