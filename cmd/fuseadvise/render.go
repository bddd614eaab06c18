package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

func sortNameTimes(v []NameTime) {
	slices.SortStableFunc(v, func(a, b NameTime) int {
		if c := cmp.Compare(b.Us, a.Us); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

// table writes rows under a header, as a box table or as markdown. align has one entry per
// column: 'l' or 'r'.
func table(w io.Writer, markdown bool, align string, header []string, rows [][]string) error {
	al := make(tw.Alignment, len(align))
	for i, c := range align {
		al[i] = tw.AlignLeft
		if c == 'r' {
			al[i] = tw.AlignRight
		}
	}
	opts := []tablewriter.Option{
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithAlignment(al),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
	}
	if markdown {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewMarkdown()))
	} else {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{Symbols: tw.NewSymbols(tw.StyleLight)})))
	}
	t := tablewriter.NewTable(w, opts...)
	t.Header(toAny(header)...)
	for _, r := range rows {
		if err := t.Append(toAny(r)...); err != nil {
			return err
		}
	}
	return t.Render()
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// f1 formats microseconds with one decimal.
func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func pct(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + "%" }

// shorten cuts long (templated C++) kernel names for tables; JSON keeps them whole.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func heading(w io.Writer, markdown bool, level int, s string) {
	if markdown {
		fmt.Fprintf(w, "%s %s\n\n", strings.Repeat("#", level), s)
		return
	}
	fmt.Fprintf(w, "%s\n\n", s)
}

func writeSummary(w io.Writer, s TraceSummary, markdown bool) error {
	heading(w, markdown, 2, "Trace")
	busyPct := 0.0
	if s.GPUBusyUs+s.IdleUs > 0 {
		busyPct = 100 * s.GPUBusyUs / (s.GPUBusyUs + s.IdleUs)
	}
	rows := [][]string{
		{"file", s.Path},
		{"device", s.Device},
		{"ranks", strconv.Itoa(s.Ranks)},
		{"steps", strconv.Itoa(s.Steps)},
		{"GPU busy", f1(s.GPUBusyUs) + " µs"},
		{"GPU idle in steps", f1(s.IdleUs) + " µs (busy " + pct(busyPct) + ")"},
		{"kernels", strconv.Itoa(s.Kernels)},
		{"launches", strconv.Itoa(s.Launches)},
	}
	if err := table(w, markdown, "ll", []string{"trace", "value"}, rows); err != nil {
		return err
	}
	for _, part := range []struct {
		title string
		v     []NameTime
	}{{"Top kernels by GPU time", s.TopKernels}, {"Top ops by GPU time (inclusive)", s.TopOps}} {
		if len(part.v) == 0 {
			continue
		}
		fmt.Fprintln(w)
		heading(w, markdown, 3, part.title)
		rows = rows[:0]
		for _, k := range part.v {
			share := 0.0
			if s.GPUBusyUs > 0 {
				share = 100 * k.Us / s.GPUBusyUs
			}
			rows = append(rows, []string{shorten(k.Name, 90), strconv.Itoa(k.Count), f1(k.Us), pct(share)})
		}
		if err := table(w, markdown, "lrrr", []string{"name", "count", "GPU µs", "% busy"}, rows); err != nil {
			return err
		}
	}
	return nil
}

func writeAnalysisText(w io.Writer, a *Analysis, markdown bool) error {
	if markdown {
		fmt.Fprintf(w, "# fuseadvise analysis\n\n")
	}
	if err := writeSummary(w, a.Trace, markdown); err != nil {
		return err
	}
	if len(a.Notes) > 0 {
		fmt.Fprintln(w)
		heading(w, markdown, 3, "Notes")
		for _, n := range a.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
	return nil
}
