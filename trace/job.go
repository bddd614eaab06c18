package trace

import (
	"fmt"
	"path/filepath"
)

// CheckJob reports, as an *Error naming the odd file, why the traces of a directory are not
// the ranks of one distributed job, which is how a directory is analyzed (one job's ranks,
// merged): a file without a distributedInfo rank among several, two files of one rank, a rank
// outside the world size or world sizes that differ, another GPU model than the lowest
// rank's, or a time window that does not overlap the lowest rank's (the ranks of a job run
// together; traces recorded at different times do not). traces are in OpenDir's order (by
// rank, unknown ranks last); one trace is always one job.
func CheckJob(traces []*Trace) error {
	if len(traces) < 2 {
		return nil
	}
	first := traces[0]
	odd := func(t *Trace, format string, a ...any) error {
		return &Error{Path: t.Path, Offset: -1, Msg: fmt.Sprintf(format, a...) +
			"; a directory is read as the ranks of one job: analyze the files one at a time"}
	}
	ref := fmt.Sprintf("rank %d (%s)", first.Rank, filepath.Base(first.Path))
	lo, hi, ok := first.window()
	seen := map[int]string{}
	for _, t := range traces {
		if t.Rank < 0 {
			return odd(t, "no distributedInfo rank in a directory of %d traces", len(traces))
		}
		if g, g0 := t.gpu(), first.gpu(); g != "" && g0 != "" && g != g0 {
			return odd(t, "recorded on %s, %s on %s", g, ref, g0)
		}
		if a, b, ok2 := t.window(); ok && ok2 && (a > hi || b < lo) {
			return odd(t, "its events do not overlap %s's in time (%s apart)", ref, apart(max(a-hi, lo-b)))
		}
		if prev, dup := seen[t.Rank]; dup {
			return odd(t, "rank %d again (also %s)", t.Rank, prev)
		}
		seen[t.Rank] = filepath.Base(t.Path)
		if t.WorldSize > 0 && t.Rank >= t.WorldSize {
			return odd(t, "rank %d of a world of %d", t.Rank, t.WorldSize)
		}
		if t.WorldSize != first.WorldSize && t.WorldSize > 0 && first.WorldSize > 0 {
			return odd(t, "world size %d, %s has %d", t.WorldSize, ref, first.WorldSize)
		}
	}
	if n := first.WorldSize; n > 0 && len(traces) > n {
		return odd(traces[len(traces)-1], "%d traces for a world of %d", len(traces), n)
	}
	return nil
}

// gpu is the name of the trace's first device, "" when the file lists none.
func (t *Trace) gpu() string {
	if len(t.Devices) == 0 {
		return ""
	}
	return t.Devices[0].Name
}

// window is the span of the trace's ops and GPU activities in ns (absolute, as recorded);
// ok is false for a trace with neither.
func (t *Trace) window() (lo, hi int64, ok bool) {
	add := func(s, d int64) {
		if !ok || s < lo {
			lo = s
		}
		if !ok || s+d > hi {
			hi = s + d
		}
		ok = true
	}
	for i := range t.Ops {
		add(t.Ops[i].Start, t.Ops[i].Dur)
	}
	for i := range t.Acts {
		add(t.Acts[i].Start, t.Acts[i].Dur)
	}
	return lo, hi, ok
}

// apart says a gap of ns nanoseconds in the unit that reads best.
func apart(ns int64) string {
	s := float64(ns) / 1e9
	switch {
	case s < 120:
		return fmt.Sprintf("%.1f s", s)
	case s < 2*86400:
		return fmt.Sprintf("%.1f h", s/3600)
	}
	return fmt.Sprintf("%.0f days", s/86400)
}
