package report

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/fuseadvise/fuseadvise/internal/safefile"
)

// The files WriteDir writes.
const (
	MarkdownFile = "report.md"
	HTMLFile     = "report.html"
	CSVFile      = "bench.csv"
)

// WriteDir writes the report into the folder dir: report.md, report.html, report.svg (the
// chart report.md links to) and, when there are benchmark results, bench.csv. The folder
// appears complete or not at all; an existing dir is refused unless force.
func WriteDir(dir string, in Inputs, force bool) error {
	err := safefile.Dir(dir, force, func(tmp string) error {
		files := []struct {
			name string
			fill func(w io.Writer) error
		}{
			{MarkdownFile, func(w io.Writer) error { return Markdown(w, in) }},
			{HTMLFile, func(w io.Writer) error { return HTML(w, in) }},
			{ChartFile, func(w io.Writer) error { return SVG(w, in) }},
		}
		if in.Bench != nil {
			files = append(files, struct {
				name string
				fill func(w io.Writer) error
			}{CSVFile, func(w io.Writer) error { return WriteCSV(w, in.Bench) }})
		}
		for _, f := range files {
			if err := writeNew(filepath.Join(tmp, f.name), f.fill); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
