package patterns

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/fuseadvise/fuseadvise/trace"
)

// Mark is one chain instance located in its trace, for marking the trace itself
// (analyze -annotate).
type Mark struct {
	Pattern string
	N       int   // 1-based number of the instance among its pattern's in this trace, in time order
	Start   int64 // ns, absolute clock: the first op's start
	End     int64 // ns: the latest end among the chain's ops
	FirstOp int32 // OpID of the chain's first op
	// SavingUs is the estimated saving, forward and backward (0 when not modeled); Counted tells whether the
	// instance is in the non-overlapping set that Report.Totals sums.
	SavingUs float64
	Counted  bool
}

// Marks finds the same instances Analyze finds (same options, Top aside) and
// returns them per trace, in the order of traces, each trace's sorted by start.
func Marks(traces []*trace.Trace, opts Options) ([][]Mark, error) {
	if len(traces) == 0 {
		return nil, fmt.Errorf("patterns: no trace to analyze")
	}
	if _, ok := Lookup(opts.Pattern); opts.Pattern != "" && !ok {
		return nil, fmt.Errorf("patterns: unknown pattern %q", opts.Pattern)
	}
	cm := opts.Cost.withDefaults()
	var all []ranked
	for ti, t := range traces {
		g := newGraph(t)
		if et := opts.ET[t]; et != nil {
			if err := g.fromET(et); err != nil {
				return nil, fmt.Errorf("patterns: %s: %w", t.Path, err)
			}
		} else {
			g.infer()
		}
		shapes := false
		for n := range g.nodes {
			shapes = shapes || len(g.ins(int32(n))) > 0
		}
		if !shapes { // Analyze matches nothing here either
			continue
		}
		device := summarize(t).Device
		m, _ := calibrate(cm, g, device)
		for _, in := range detect(g, opts.Pattern) {
			rk, _ := rankInstance(&m, t, in, device)
			rk.ti, rk.rank = ti, ti
			all = append(all, rk)
		}
	}
	keep := counted(traces, all)
	out := make([][]Mark, len(traces))
	for i, rk := range all {
		t := traces[rk.ti]
		if len(rk.in.Ops) == 0 {
			continue
		}
		mk := Mark{Pattern: rk.in.Pattern, FirstOp: rk.in.Ops[0], Start: t.Ops[rk.in.Ops[0]].Start,
			SavingUs: round2(valueOf(rk).us), Counted: keep[i]}
		for _, id := range rk.in.Ops {
			op := &t.Ops[id]
			if op.Start < mk.Start {
				mk.Start, mk.FirstOp = op.Start, id
			}
			mk.End = max(mk.End, op.Start+op.Dur)
		}
		out[rk.ti] = append(out[rk.ti], mk)
	}
	for _, ms := range out {
		slices.SortStableFunc(ms, func(a, b Mark) int { return cmp.Compare(a.Start, b.Start) })
		n := map[string]int{}
		for i := range ms {
			n[ms[i].Pattern]++
			ms[i].N = n[ms[i].Pattern]
		}
	}
	return out, nil
}
