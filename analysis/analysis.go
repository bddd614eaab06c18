package analysis

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/report"
	"github.com/fuseadvise/fuseadvise/trace"
)

// Options select what Run reports.
type Options struct {
	Top     int    // only the Top best opportunities (0: all)
	Pattern string // only this pattern id ("" for all)
	ET      string // an execution trace recorded with the trace, for exact dataflow
	NTop    int    // top kernels and ops listed in the summary (< 0: all)
}

// Result is what analyze prints: the detector's report (the JSON contract: "trace",
// "opportunities", plus ranks, calibration and notes) and a summary of the trace.
type Result struct {
	*patterns.Report
	Summary Summary `json:"summary"`
}

// Summary is the part of the trace summary the contract's "trace" object lacks (ranks,
// idle time, launches, top kernels and ops); report reads it back as the same type.
type Summary = report.TraceExtra

// NameTime is a kernel or op name with its count and total GPU time.
type NameTime = report.NameTime

// Run analyzes the trace file or rank directory at path. It returns the traces too, for
// their warnings and the pprof profile.
func Run(path string, o Options) (*Result, []*trace.Trace, error) {
	traces, err := trace.Load(path)
	if err != nil {
		return nil, nil, err
	}
	popts := patterns.Options{Top: o.Top, Pattern: o.Pattern}
	if o.ET != "" {
		if len(traces) != 1 {
			return nil, nil, fmt.Errorf("%s: -et takes one execution trace, for a single trace file (this is %d rank files)", path, len(traces))
		}
		et, err := trace.ReadET(o.ET)
		if err != nil {
			return nil, nil, err
		}
		popts.ET = map[*trace.Trace]*trace.ExecTrace{traces[0]: et}
	}
	rep, err := patterns.Analyze(traces, popts)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", path, err)
	}
	rep.Trace.Path = path
	return &Result{Report: rep, Summary: summarize(traces, o.NTop)}, traces, nil
}

// ReadJSON reads what WriteJSON wrote (analyze -format json) and keeps the opportunities o
// selects (Top, Pattern).
func ReadJSON(path string, o Options) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Result
	var shape struct {
		Trace         *json.RawMessage `json:"trace"`
		Opportunities *json.RawMessage `json:"opportunities"`
	}
	err = json.Unmarshal(b, &shape)
	if err == nil && (shape.Trace == nil || shape.Opportunities == nil) {
		err = fmt.Errorf("no \"trace\" object or \"opportunities\" list")
	}
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: not the JSON of 'fuseadvise analyze -format json': %s", path, jsonProblem(err))
	}
	r.Opportunities = selectOpportunities(r.Opportunities, o)
	return &r, nil
}

func selectOpportunities(ops []patterns.Opportunity, o Options) []patterns.Opportunity {
	var out []patterns.Opportunity
	for _, op := range ops {
		if o.Pattern == "" || op.Pattern == o.Pattern {
			out = append(out, op)
		}
	}
	if o.Top > 0 && len(out) > o.Top {
		out = out[:o.Top]
	}
	return out
}

// jsonProblem describes a decoding error without Go type names.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("offset %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field == "" {
			return fmt.Sprintf("offset %d: a JSON %s where an object was expected", te.Offset, te.Value)
		}
		return fmt.Sprintf("offset %d: field %q holds a JSON %s", te.Offset, te.Field, te.Value)
	}
	return err.Error()
}

// WriteJSON writes r as indented JSON (the catalog's contract plus "summary").
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

func us(ns int64) float64 { return float64(ns) / 1e3 }

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
