package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/fuseadvise/fuseadvise/internal/safefile"
	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/verify"
)

// The PR folder's layout.
const (
	PRFile     = "PR.md"
	KernelsDir = "kernels" // one copy of each generated folder
	ResultsDir = "results" // bench.json, bench.csv, verify.json, report.md, report.svg
)

// WritePR writes the folder dir, ready to be proposed as a pull request: a copy of each
// generated folder in folders under kernels/ (kernel, reference, tests, bench script), the
// results under results/ (bench JSON and its Liger-Kernel CSV, verification JSON, the
// report and its chart) and PR.md, the evidence: trace, chain and source line, shapes,
// estimated and measured numbers, verification status and how to swap each kernel in.
// The folder appears complete or not at all; an existing dir is refused unless force.
//
// The folders' manifests are taken from in.Generated when it has them (same path), else
// read from the folders.
func WritePR(dir string, in Inputs, folders []string, force bool) error {
	if len(folders) == 0 {
		return fmt.Errorf("report: pr: no generated folders to include")
	}
	gens := make([]GenFolder, 0, len(folders))
	seen := make(map[string]string)
	for _, f := range folders {
		g, ok := findGen(in.Generated, f)
		if !ok {
			var err error
			if g, err = LoadGenFolder(f); err != nil {
				return fmt.Errorf("report: pr: %w", err)
			}
		}
		if prev, dup := seen[g.Name]; dup {
			return fmt.Errorf("report: pr: %s and %s have the same name %q", prev, f, g.Name)
		}
		seen[g.Name] = f
		gens = append(gens, g)
	}
	in.Generated = gens
	err := safefile.Dir(dir, force, func(tmp string) error {
		kdir := filepath.Join(tmp, KernelsDir)
		if err := os.Mkdir(kdir, 0o755); err != nil {
			return err
		}
		for _, g := range gens {
			if err := copyTree(g.Dir, filepath.Join(kdir, g.Name)); err != nil {
				return err
			}
		}
		rdir := filepath.Join(tmp, ResultsDir)
		if err := os.Mkdir(rdir, 0o755); err != nil {
			return err
		}
		files := []struct {
			name string
			skip bool
			fill func(w io.Writer) error
		}{
			{"bench.json", in.Bench == nil, func(w io.Writer) error { return writeIndented(w, in.Bench) }},
			{"bench.csv", in.Bench == nil, func(w io.Writer) error { return WriteCSV(w, in.Bench) }},
			{"verify.json", in.Verify == nil, func(w io.Writer) error { return writeIndented(w, in.Verify) }},
			{"report.md", false, func(w io.Writer) error { return Markdown(w, in) }},
			{ChartFile, false, func(w io.Writer) error { return SVG(w, in) }},
		}
		for _, f := range files {
			if f.skip {
				continue
			}
			if err := writeNew(filepath.Join(rdir, f.name), f.fill); err != nil {
				return err
			}
		}
		return writeNew(filepath.Join(tmp, PRFile), func(w io.Writer) error { return prMarkdown(w, in) })
	})
	if err != nil {
		return fmt.Errorf("report: pr: %w", err)
	}
	return nil
}

func findGen(gs []GenFolder, dir string) (GenFolder, bool) {
	clean := filepath.Clean(dir)
	for _, g := range gs {
		if g.Dir != "" && filepath.Clean(g.Dir) == clean {
			return g, true
		}
	}
	return GenFolder{}, false
}

func writeIndented(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func writeNew(path string, fill func(w io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	if err := fill(bw); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// skipCopy names what a copy of a generated folder leaves out: caches and hidden files.
func skipCopy(name string) bool {
	return strings.HasPrefix(name, ".") || name == "__pycache__"
}

// copyTree copies the regular files and folders under src to dst (which must not exist),
// keeping the executable bit. Links and special files are refused.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if rel != "." && skipCopy(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.Mkdir(target, 0o755)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			mode := os.FileMode(0o644)
			if info.Mode()&0o111 != 0 {
				mode = 0o755
			}
			return copyFile(path, target, mode)
		}
		return fmt.Errorf("%s: not a regular file or folder (links are not copied)", path)
	})
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// prMarkdown writes PR.md: the evidence for each kernel, then how to check and use it.
func prMarkdown(w io.Writer, in Inputs) error {
	bw := bufio.NewWriter(w)
	p := func(s string) { bw.WriteString(s) }
	sp := SpeedupsFor(in.Bench, in.Use)

	var pats []string
	for _, g := range in.Generated {
		if q := codeSpan(g.Pattern, false); !contains(pats, q) {
			pats = append(pats, q)
		}
	}
	p("# Fused Triton kernels: " + strings.Join(pats, ", ") + "\n\n")
	p("Generated by fuseadvise from a PyTorch profiler trace. Each kernel replaces a chain of eager ops that the trace\n")
	p("shows running as separate kernels; the evidence, the verification and the measured speedups are below.\n")
	if a := in.Analysis; a != nil {
		p("\nTrace: " + codeSpan(a.Trace.Path, false) + " on " + codeSpan(orUnknown(a.Trace.Device), false))
		p(", " + fmtMs(a.Trace.GPUBusyUs) + " GPU busy")
		if a.Trace.Steps > 0 {
			p(" over " + plural(a.Trace.Steps, "profiled step"))
		}
		p(".\n")
	}
	if r := in.Bench; r != nil {
		p("\nMeasured on " + codeSpan(orUnknown(r.GPU), false))
		if r.Torch != "" || r.Triton != "" {
			p(" with torch " + codeSpan(r.Torch, false) + " and triton " + codeSpan(r.Triton, false))
		}
		p(".\n")
	} else {
		p("\n**Not benchmarked**: no GPU results were given, so the savings below are the cost model's estimates only.\n")
	}

	// warnings first: what should stop a reviewer
	var warn []string
	for _, g := range in.Generated {
		if v := verifyStatus(in.Verify, g); v.Class != "ship" {
			warn = append(warn, codeSpan(g.Name, false)+": "+mdText(v.Text))
		}
		if b := benchStatus(sp, g); b.Class != "ship" && in.Bench != nil {
			warn = append(warn, codeSpan(g.Name, false)+": benchmark "+mdText(b.Text))
		}
	}
	if len(warn) > 0 {
		p("\n> **Check before merging:**\n")
		for _, s := range warn {
			p("> - " + s + "\n")
		}
	}

	p("\n## Kernels\n")
	for i, g := range in.Generated {
		p(fmt.Sprintf("\n### %d. %s: %s (%s)\n\n", i+1, codeSpan(g.Name, false), codeSpan(g.Pattern, false), codeSpan(g.Dtype, false)))
		p("| | |\n|---|---|\n")
		row := func(k, v string) { p("| " + k + " | " + v + " |\n") }
		row("folder", codeSpan(KernelsDir+"/"+g.Name+"/", true))
		row("trace", codeSpan(g.Source.Trace, true))
		row("call site", codeSpan(g.Source.Site, true))
		row("shapes", codeSpan(shapesString(g.Shapes), true))
		if len(g.Params) > 0 {
			b, _ := json.Marshal(g.Params)
			row("parameters", codeSpan(string(b), true))
		}
		if o := findOpportunity(in.Analysis, g.Pattern); o != nil {
			inst := fmt.Sprintf("%d forward", o.Instances)
			if o.BackwardInstances > 0 {
				inst += fmt.Sprintf(", %d backward", o.BackwardInstances)
			}
			row("instances of the pattern in the trace", inst)
			row("GPU time of the pattern now", fmtUs(o.GPUTimeUs)+" µs forward")
			row("estimated saving, whole pattern", fmt.Sprintf("%s µs (%s of GPU busy)", fmtUs(o.EstSavingUs), fmtPct(o.SavingPct)))
			if sg := findShapeGroup(o, g); sg != nil {
				row("this shape", mdText(fmt.Sprintf("%d instances, %s µs now, estimated %s µs fused", sg.Instances, fmtUs(sg.GPUTimeUs), fmtUs(sg.EstFusedUs))))
				if len(sg.Sources) > 0 {
					row("source lines", codeSpan(strings.Join(sg.Sources, "; "), true))
				}
			}
			if len(o.Advice) > 0 {
				row("advice", codeSpan(strings.Join(o.Advice, "; "), true))
			}
		} else {
			row("estimated saving", fmtUs(g.EstSavingUs)+" µs")
		}
		if pos(g.EstFusedUs) {
			row("estimated fused time per call", fmtUs(g.EstFusedUs)+" µs")
		}
		row("verification", mdCell(verifyStatus(in.Verify, g), true)+verifyErrors(in.Verify, g))
		for _, s := range sp {
			if !matches(s.Case.Name, s.Case.Pattern, s.Case.Dtype, g) {
				continue
			}
			c := s.Case
			m := "fused " + timeCell(c.FusedUs, c.FusedP20, c.FusedP80) + " µs, eager " + timeCell(c.EagerUs, c.EagerP20, c.EagerP80) +
				" µs, torch.compile " + timeCell(c.CompileUs, c.CompileP20, c.CompileP80) + " µs"
			if s.VsEager > 0 {
				m += "; " + speedupCell(s.VsEager, s.EagerNoise) + " vs eager"
			}
			if s.VsCompile > 0 {
				m += ", " + speedupCell(s.VsCompile, s.CompileNoise) + " vs compile"
			}
			if pos(c.FusedWallUs) {
				m += "; per call: fused " + perCallCell(c.FusedWallUs, c.FusedHostUs) + " µs, eager " + perCallCell(c.EagerWallUs, c.EagerHostUs) +
					" µs, torch.compile " + perCallCell(c.CompileWallUs, c.CompileHostUs) + " µs"
				if s.WallVsEager > 0 {
					m += ", " + speedupCell(s.WallVsEager, s.WallEagerNoise) + " vs eager"
				}
			}
			if s.FloorPct > 0 {
				m += "; " + fmtPct(s.FloorPct) + " of floor"
			}
			if s.CopyPct > 0 {
				m += ", " + fmtPct(s.CopyPct) + " of a copy of the same bytes"
			}
			if s.HasPred {
				m += "; predicted " + fmtUs(c.PredictedUs) + " µs (" + fmtSignedPct(s.PredErrPct) + ")"
			}
			m = mdText(m) + ": " + mdCell(verdictCell(s.Verdict), true)
			if s.Basis == OnPerCall {
				m += " (per call)"
			}
			if len(s.Notes) > 0 {
				m += " " + codeSpan(strings.Join(s.Notes, "; "), true)
			}
			row("benchmark "+codeSpan(c.Dtype+" "+shapeString(c.Shape), true), m)
		}
		p("\nHow to swap it in:\n\n")
		if snippet := swapIn(g.Dir); snippet != "" {
			p(snippet)
		} else {
			p("See " + codeSpan(KernelsDir+"/"+g.Name+"/README.md", false) + ".\n")
		}
	}

	p("\n## How to check\n\n")
	p("From each kernel folder:\n\n")
	p("    TRITON_INTERPRET=1 python -m pytest -q .   # CPU, Triton interpreter\n")
	p("    python -m pytest -q -m gpu .                # GPU, the traced shapes too\n")
	p("    python bench.py                             # GPU: fused vs eager vs torch.compile, JSON\n")
	p("\n## Files\n\n")
	p("- " + codeSpan(KernelsDir+"/", false) + ": one folder per kernel (kernel.py, reference.py, adapter.py, tests, bench.py, manifest.json).\n")
	p("- " + codeSpan(ResultsDir+"/", false) + ": ")
	var rs []string
	if in.Bench != nil {
		rs = append(rs, codeSpan("bench.json", false)+" (raw timings)", codeSpan("bench.csv", false)+" (Liger-Kernel benchmark schema)")
	}
	if in.Verify != nil {
		rs = append(rs, codeSpan("verify.json", false))
	}
	rs = append(rs, codeSpan("report.md", false)+" and "+codeSpan(ChartFile, false)+" (the full report)")
	p(strings.Join(rs, ", ") + ".\n")
	return bw.Flush()
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func findOpportunity(a *patterns.Report, pattern string) *patterns.Opportunity {
	if a == nil {
		return nil
	}
	for i := range a.Opportunities {
		if a.Opportunities[i].Pattern == pattern {
			return &a.Opportunities[i]
		}
	}
	return nil
}

// findShapeGroup returns the opportunity's shape group that folder g was generated for:
// same dtype and shapes, or same dtype and main input shape.
func findShapeGroup(o *patterns.Opportunity, g GenFolder) *patterns.ShapeGroup {
	var near *patterns.ShapeGroup
	for i := range o.Shapes {
		sg := &o.Shapes[i]
		if string(sg.DType) != g.Dtype || len(sg.Dims) == 0 || len(g.Shapes) == 0 {
			continue
		}
		if shapesString(sg.Dims) == shapesString(g.Shapes) {
			return sg
		}
		if near == nil && shapeString(sg.Dims[0]) == shapeString(g.Shapes[0]) {
			near = sg
		}
	}
	return near
}

// verifyErrors is ", max abs err X, max rel err Y" over the folder's checked cases, ""
// when there are none.
func verifyErrors(v *verify.Result, g GenFolder) string {
	var abs, rel float64
	n := 0
	for _, f := range verifyFolders(v, g) {
		for _, c := range f.Cases {
			if checked(c) {
				abs, rel = math.Max(abs, float64(c.MaxAbs)), math.Max(rel, float64(c.MaxRel))
				n++
			}
		}
	}
	if n == 0 {
		return ""
	}
	return mdText(fmt.Sprintf(", max abs err %s, max rel err %s", fmtSci(abs), fmtSci(rel)))
}

// swapIn returns the "Swap it in" section of a generated folder's README.md (written by
// codegen from static text), indented code included, or "".
func swapIn(dir string) string {
	if dir == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		return ""
	}
	const head = "## Swap it in\n"
	i := bytes.Index(b, []byte(head))
	if i < 0 {
		return ""
	}
	rest := b[i+len(head):]
	if j := bytes.Index(rest, []byte("\n## ")); j >= 0 {
		rest = rest[:j+1]
	}
	// keep only the indented code lines: the snippet itself
	var out []string
	for _, l := range strings.Split(string(rest), "\n") {
		if strings.HasPrefix(l, "    ") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return strings.Join(out, "\n") + "\n"
}
