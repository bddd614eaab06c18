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
	"regexp"
	"strings"

	"github.com/fuseadvise/fuseadvise/bench"
	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/internal/safefile"
	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/verify"
)

// The PR folder's layout.
const (
	PRFile     = "PR.md"
	KernelsDir = "kernels" // one copy of each generated folder offered
	SwapInDir  = "swap_in" // each offered kernel.py under its own module name, to copy beside the model
	ResultsDir = "results" // bench.json, bench.csv, verify.json, report.md, report.svg
)

// WritePR writes the folder dir, ready to be proposed as a pull request. Only the kernels
// that pay are offered: those measured faster than the eager chain they replace (on the
// verdict's basis: Speedup.FasterThanEager, at the folder's traced shape) or, where the
// folder was not benchmarked, predicted faster by the cost model, and not failing
// verification. Each offered folder is copied under kernels/ (kernel, reference, tests,
// bench script) and its kernel.py under swap_in/ as its own module (codegen.ModuleName), so
// several kernels copied beside one model do not collide. The results go under results/
// (bench JSON and its Liger-Kernel CSV, verification JSON, the report and its chart), and
// PR.md holds the evidence per kernel (trace, call site, this shape's instances and time,
// estimated and measured numbers, verification, how to swap it in) and, under "Not worth
// it", the other kernels with the numbers that rule them out. PR.md names no absolute local
// path, nor do the kernel folders' README.md and manifest.json (scrubFolder). The folder appears complete or not at all; an existing dir is refused unless force.
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
	items := prItems(in)
	if err := checkModules(items); err != nil {
		return fmt.Errorf("report: pr: %w", err)
	}
	err := safefile.Dir(dir, force, func(tmp string) error {
		offered := 0
		for _, it := range items {
			if !it.offered {
				continue
			}
			if offered == 0 {
				for _, d := range []string{KernelsDir, SwapInDir} {
					if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
						return err
					}
				}
			}
			offered++
			if err := copyTree(it.g.Dir, filepath.Join(tmp, KernelsDir, it.g.Name)); err != nil {
				return err
			}
			if err := scrubFolder(filepath.Join(tmp, KernelsDir, it.g.Name)); err != nil {
				return err
			}
			if it.hasKernel {
				dst := filepath.Join(tmp, SwapInDir, it.module+".py")
				if _, err := os.Stat(dst); err == nil {
					continue // the same module (checkModules: the same file) offered twice
				}
				if err := copyFile(filepath.Join(it.g.Dir, "kernel.py"), dst, 0o644); err != nil {
					return err
				}
			}
		}
		for _, m := range codegen.OfferedModules(in.Analysis) {
			// the modules the analysis's advice names (MasterAdamW, the drop-in
			// nn.MultiheadAttention): each one's folder, and its module to swap in
			for _, d := range []string{KernelsDir, SwapInDir} {
				if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
					return err
				}
			}
			mdir := filepath.Join(tmp, KernelsDir, m.Dir)
			if err := codegen.WriteModule(m, mdir, false); err != nil {
				return err
			}
			if err := copyFile(filepath.Join(mdir, m.Files[0]), filepath.Join(tmp, SwapInDir, m.Files[0]), 0o644); err != nil {
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
		return writeNew(filepath.Join(tmp, PRFile), func(w io.Writer) error {
			var b bytes.Buffer
			if err := prMarkdown(&b, in, items); err != nil {
				return err
			}
			_, err := io.WriteString(w, scrubPaths(b.String()))
			return err
		})
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

// prItem is one generated folder as the PR sees it: whether it is offered, and why not.
type prItem struct {
	g         GenFolder
	module    string    // the name its kernel is imported by (manifest.json, or from the folder name)
	hasKernel bool      // the folder has a kernel.py
	cases     []Speedup // its benchmark cases at its traced shape
	others    int       // its benchmark cases at other shapes (in the report, not here)
	group     *patterns.ShapeGroup
	offered   bool
	measured  bool   // decided on a measurement (else on the cost model's estimate)
	why       string // why it is not offered, with the numbers
}

// prItems decides, for each generated folder of in, whether the PR offers it.
func prItems(in Inputs) []prItem {
	sp := SpeedupsFor(in.Bench, in.Use)
	items := make([]prItem, 0, len(in.Generated))
	for _, g := range in.Generated {
		it := prItem{g: g, module: moduleName(g), group: findShapeGroup(in.Analysis, g)}
		if g.Dir != "" {
			if fi, err := os.Lstat(filepath.Join(g.Dir, "kernel.py")); err == nil && fi.Mode().IsRegular() {
				it.hasKernel = true
			}
		}
		for _, s := range sp {
			if !caseOf(s.Case, g) {
				continue
			}
			if len(g.Shapes) > 0 && shapeString(s.Case.Shape) != shapeString(g.Shapes[0]) {
				it.others++
				continue
			}
			it.cases = append(it.cases, s)
		}
		it.offered, it.why = decide(&it, in.Verify)
		items = append(items, it)
	}
	return items
}

// caseOf reports whether benchmark case c was run from folder g: by its name when it has one,
// else by pattern and dtype.
func caseOf(c bench.Case, g GenFolder) bool {
	if c.Name != "" {
		return c.Name == g.Name
	}
	return c.Pattern == g.Pattern && (c.Dtype == "" || c.Dtype == g.Dtype)
}

// decide says whether it is offered and, when not, why (with the numbers). Measured cases at
// the folder's shape decide when there are any (every forward and full case must be faster
// than eager);
// otherwise the cost model's estimate of one fused call against this shape's time per call
// now (or, lacking that, the estimated saving).
func decide(it *prItem, v *verify.Result) (bool, string) {
	if vs := verifyStatus(v, it.g); vs.Class == "fail" {
		return false, "verification " + vs.Text
	}
	if len(it.cases) > 0 {
		it.measured = true
		for _, s := range it.cases {
			// a backward case is shown, not judged (as by the targets): the full case,
			// forward and backward, is what a training step pays
			if s.Case.Mode == "backward" {
				continue
			}
			if !s.FasterThanEager() {
				return false, notFaster(s)
			}
			// offered only where the kernel is the fastest measured option (or within noise
			// of it): else the PR names the faster one
			if !s.KernelRecommended() {
				return false, fasterOption(s)
			}
		}
		return true, ""
	}
	now, n := nowPerCall(it)
	est := it.g.EstFusedUs
	bwd := it.g.EstBackwardSavingUs // a training trace's: the fused backward's saving, this shape
	switch {
	case pos(now) && pos(est) && est < now:
		return true, ""
	case pos(now) && pos(est) && (now-est)*float64(n)+bwd > 0:
		return true, "" // a forward slower than the chain's, more than made up in the backward
	case pos(now) && pos(est):
		why := fmt.Sprintf("predicted slower than the chain (not benchmarked): estimated %s µs per fused call, %s µs per call now (%s, %s µs in the trace)",
			fmtUs(est), fmtUs(now), plural(n, "instance"), fmtUs(now*float64(n)))
		if bwd > 0 {
			why += fmt.Sprintf("; the backward's estimated saving, %s µs, does not make it up", fmtUs(bwd))
		}
		return false, why
	case it.g.EstSavingUs+bwd > 0:
		return true, ""
	}
	return false, fmt.Sprintf("no saving predicted (not benchmarked): estimated saving %s µs", fmtUs(it.g.EstSavingUs+bwd))
}

// nowPerCall is this shape's GPU time per instance in the trace, and its instances: from the
// folder's manifest, else from the analysis's shape group of the same dtype and shapes.
func nowPerCall(it *prItem) (float64, int) {
	if it.g.Instances > 0 && pos(it.g.GPUTimeUs) {
		return it.g.GPUTimeUs / float64(it.g.Instances), it.g.Instances
	}
	if sg := it.group; sg != nil && sg.Instances > 0 && pos(sg.GPUTimeUs) {
		return sg.GPUTimeUs / float64(sg.Instances), sg.Instances
	}
	return 0, 0
}

// notFaster says why case s does not show its kernel faster than eager, with its numbers.
func notFaster(s Speedup) string {
	c := s.Case
	on := func(fused, eager, vs float64, noise bool, basis string) string {
		return fmt.Sprintf("fused %s µs, eager %s µs %s (%s vs eager)", fmtUs(fused), fmtUs(eager), basis, speedupCell(vs, noise))
	}
	nums := on(c.FusedUs, c.EagerUs, s.VsEager, s.EagerNoise, "GPU time")
	if s.Basis == OnPerCall {
		nums = on(c.FusedWallUs, c.EagerWallUs, s.WallVsEager, s.WallEagerNoise, "per call")
	}
	at := c.Dtype + " " + shapeString(c.Shape)
	if !c.Forward() {
		at += " " + c.Mode
	}
	switch s.Verdict {
	case DoNotShip:
		return "slower than the eager chain at " + at + ": " + nums
	case Noise:
		return "not measurably faster than the eager chain at " + at + ": " + nums
	case Failed:
		msg := "failed its GPU check at " + at
		if c.Error != "" {
			msg += ": " + c.Error
		}
		return msg
	}
	msg := "not timed at " + at
	if c.Error != "" {
		msg += ": " + c.Error
	}
	return msg
}

// fasterOption says which measured option beats the kernel of case s, with the numbers:
// "torch.compile is faster at bf16 [4096, 768]: use torch.compile — 8.1 µs vs fused 10 µs".
func fasterOption(s Speedup) string {
	c := s.Case
	at := c.Dtype + " " + shapeString(c.Shape)
	if !c.Forward() {
		at += " " + c.Mode
	}
	return s.Recommended.Name + " is faster at " + at + ": " + s.Recommendation()
}

// pyIdent matches a Python identifier in ASCII: what a module name from a manifest must be
// to be written into a snippet and a file name.
var pyIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// moduleName is the module g's kernel is imported by: its manifest's (when a plain
// identifier), or one made from the folder name (folders from before it was recorded).
func moduleName(g GenFolder) string {
	if pyIdent.MatchString(g.Module) {
		return g.Module
	}
	var b strings.Builder
	b.WriteString("fuseadvise_")
	for _, r := range g.Name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// checkModules refuses two offered kernels with one module name but different kernel.py
// files (one would overwrite the other beside the model); the same file twice is one module.
func checkModules(items []prItem) error {
	first := map[string]prItem{}
	for _, it := range items {
		if !it.offered || !it.hasKernel {
			continue
		}
		prev, ok := first[it.module]
		if !ok {
			first[it.module] = it
			continue
		}
		a, errA := os.ReadFile(filepath.Join(prev.g.Dir, "kernel.py"))
		b, errB := os.ReadFile(filepath.Join(it.g.Dir, "kernel.py"))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			return fmt.Errorf("%s and %s: different kernels with the same module name %s", prev.g.Dir, it.g.Dir, it.module)
		}
	}
	return nil
}

// prMarkdown writes PR.md: the kernels offered, with their evidence and how to swap each in;
// those not worth it, with their numbers; then how to check and what the files are.
func prMarkdown(w io.Writer, in Inputs, items []prItem) error {
	bw := bufio.NewWriter(w)
	p := func(s string) { bw.WriteString(s) }

	var pats []string
	var offered, rest []prItem
	for _, it := range items {
		if !it.offered {
			rest = append(rest, it)
			continue
		}
		offered = append(offered, it)
		if q := codeSpan(it.g.Pattern, false); !contains(pats, q) {
			pats = append(pats, q)
		}
	}
	if len(pats) == 0 {
		pats = []string{"none worth swapping in"}
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
		p("\n**Not benchmarked**: no GPU results were given, so the kernels below are offered on the cost model's estimates only.\n")
	}
	p(fmt.Sprintf("\n%s offered, each measured (or, where not benchmarked, predicted) faster than the eager chain it replaces", plural(len(offered), "kernel")))
	if in.Bench != nil {
		p(" and not measurably slower than torch.compile or a library call timed beside it")
	}
	if len(rest) > 0 {
		p(fmt.Sprintf("; %d not worth it (below, with the numbers)", len(rest)))
	}
	p(".\n")
	if a := in.Analysis; a != nil && len(a.Optimizers) > 0 {
		// the optimizer's fix is a constructor argument, often the largest single saving of a
		// training step: said before the kernels, with the analysis's estimate
		p("\n## The optimizer step (no kernel needed)\n\n")
		for _, f := range a.Optimizers {
			line := "- " + mdText(f.Advice)
			if f.Why == "" && pos(f.EstSavingUs) {
				line += fmt.Sprintf(". Estimated GPU saving %s µs over the trace's %s (from the trace's own update kernels, not measured here)", fmtUs(f.EstSavingUs), plural(f.Steps, "step"))
			}
			p(line + ".\n")
		}
	}
	if a := in.Analysis; a != nil && a.MasterWeightsOffered() {
		p("\n## The weights autocast casts (" + codeSpan(KernelsDir+"/"+codegen.MasterAdamWDir, false) + ", its module in " + codeSpan(SwapInDir+"/master_adamw.py", false) + ")\n\n")
		for _, m := range a.MasterWeights {
			if m.Why != "" {
				continue
			}
			p("- " + mdText(m.Advice) + fmt.Sprintf(". Estimated GPU saving %s µs over the trace's %s (the casts' own time in the trace).\n", fmtUs(m.EstSavingUs), plural(m.Steps, "step")))
		}
	}
	if a := in.Analysis; a != nil && a.MultiheadAttentionOffered() {
		p("\n## nn.MultiheadAttention's packed projection (" + codeSpan(KernelsDir+"/"+patterns.MultiheadAttentionDir, false) + ", its module in " + codeSpan(SwapInDir+"/multihead_attention.py", false) + ")\n\n")
		for _, f := range a.MultiheadAttention {
			if f.Why != "" {
				continue
			}
			p("- " + mdText(f.Advice) + fmt.Sprintf(". Estimated GPU saving %s µs over the trace's %s (the copies' own time in the trace less the stack's estimate).\n", fmtUs(f.EstSavingUs), plural(f.Steps, "step")))
		}
	}

	// warnings first: what should stop a reviewer
	var warn []string
	for _, it := range offered {
		g := it.g
		if v := verifyStatus(in.Verify, g); v.Class != "ship" {
			warn = append(warn, codeSpan(g.Name, false)+": "+mdText(v.Text))
		}
		for _, s := range it.cases {
			if s.Verdict != Ship {
				warn = append(warn, codeSpan(g.Name, false)+": benchmark "+mdText(s.Sub+": "+string(s.Verdict)))
			}
		}
		if !it.measured && in.Bench != nil {
			warn = append(warn, codeSpan(g.Name, false)+": not benchmarked at its traced shape: offered on the cost model's estimate")
		}
	}
	if len(warn) > 0 {
		p("\n> **Check before merging:**\n")
		for _, s := range warn {
			p("> - " + s + "\n")
		}
	}

	p("\n## Kernels to swap in\n")
	if len(offered) == 0 {
		p("\nNone: no kernel was measured (or, without a benchmark, predicted) faster than the chain it replaces.\n")
	}
	for i, it := range offered {
		prKernel(p, in, it, i+1)
	}

	if len(rest) > 0 {
		p("\n## Not worth it\n\n")
		p("Generated and checked, but not offered here (their folders are not in this PR; " + codeSpan(ResultsDir+"/report.md", false) + " has all their numbers):\n\n")
		p("| kernel | pattern | shapes | why not |\n|---|---|---|---|\n")
		for _, it := range rest {
			p("| " + codeSpan(it.g.Name, true) + " | " + codeSpan(it.g.Pattern+" "+it.g.Dtype, true) + " | " +
				codeSpan(shapesString(it.g.Shapes), true) + " | " + mdText(oneLine(it.why)) + " |\n")
		}
	}

	if len(offered) > 0 {
		p("\n## How to check\n\n")
		p("From each folder under " + codeSpan(KernelsDir+"/", false) + ":\n\n")
		p("    TRITON_INTERPRET=1 python -m pytest -q .   # CPU, Triton interpreter\n")
		p("    python -m pytest -q -m gpu .                # GPU, the traced shapes too\n")
		p("    python bench.py                             # GPU: fused vs eager vs torch.compile, JSON\n")
	}
	p("\n## Files\n\n")
	if len(offered) > 0 {
		p("- " + codeSpan(SwapInDir+"/", false) + ": each kernel's " + codeSpan("kernel.py", false) + " under its own module name, to copy beside the model code (it needs only torch and triton).\n")
		p("- " + codeSpan(KernelsDir+"/", false) + ": one folder per kernel (kernel.py, reference.py, adapter.py, tests, bench.py, manifest.json).\n")
	}
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

// prKernel writes one offered kernel's section: its evidence at its own shape, its
// verification and benchmark, and how to swap it in.
func prKernel(p func(string), in Inputs, it prItem, n int) {
	g := it.g
	p(fmt.Sprintf("\n### %d. %s: %s (%s)\n\n", n, codeSpan(g.Name, false), codeSpan(g.Pattern, false), codeSpan(g.Dtype, false)))
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
	// this shape's evidence only: never the pattern's totals or another shape group's
	if now, k := nowPerCall(&it); k > 0 {
		row("this shape in the trace", mdText(fmt.Sprintf("%s, %s µs GPU time now (%s µs per call)", plural(k, "forward instance"), fmtUs(now*float64(k)), fmtUs(now))))
	}
	if sg := it.group; sg != nil && len(sg.Sources) > 0 {
		row("source lines", codeSpan(strings.Join(sg.Sources, "; "), true))
	}
	if pos(g.EstFusedUs) {
		row("estimated fused time per call", fmtUs(g.EstFusedUs)+" µs")
	}
	saving := fmtUs(g.EstSavingUs) + " µs"
	if a := in.Analysis; a != nil && pos(a.Trace.GPUBusyUs) {
		saving += " (" + fmtPct(100*g.EstSavingUs/a.Trace.GPUBusyUs) + " of GPU busy)"
	}
	row("estimated saving, this shape", mdText(saving))
	if o := findOpportunity(in.Analysis, g.Pattern); o != nil && len(o.Advice) > 0 {
		row("advice", codeSpan(strings.Join(o.Advice, "; "), true))
	}
	row("verification", mdCell(verifyStatus(in.Verify, g), true)+verifyErrors(in.Verify, g))
	for _, s := range it.cases {
		row("benchmark "+codeSpan(s.Sub, true), benchCell(s))
	}
	if it.others > 0 {
		row("benchmarks at other shapes", mdText(fmt.Sprintf("%d, in %s/report.md", it.others, ResultsDir)))
	}
	p("\nHow to swap it in")
	if it.hasKernel {
		p(": copy " + codeSpan(SwapInDir+"/"+it.module+".py", false) + " beside the model code, then:\n\n")
	} else {
		p(" (the folder has no " + codeSpan("kernel.py", false) + "; its module would be " + codeSpan(it.module, false) + "):\n\n")
	}
	for _, l := range strings.Split(codegen.Usage(g.Pattern, it.module), "\n") {
		if l == "" {
			p("\n")
			continue
		}
		p("    " + l + "\n")
	}
	if g.Pattern == codegen.GenericPattern {
		// a generic chain's inputs and outputs are its own: numbers the model passes, keep
		// masks it draws, 16-bit copies that go to the GEMMs reading a value
		p("\nWhat each input and output is, and where an output goes (a 16-bit copy that a GEMM reads in place of\nthe value it casts): " +
			codeSpan(KernelsDir+"/"+g.Name+"/README.md", false) + ".\n")
	}
}

// benchCell is one benchmarked case's numbers and verdict.
func benchCell(s Speedup) string {
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
	if len(c.Library) > 0 && s.Recommendation() != "" { // the library calls it was measured against
		m += "; " + s.Recommendation()
	}
	m = mdText(m) + ": " + mdCell(verdictCell(s.Verdict), true)
	if s.Basis == OnPerCall {
		m += " (per call)"
	}
	if len(s.Notes) > 0 {
		m += " " + codeSpan(strings.Join(s.Notes, "; "), true)
	}
	return m
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

// findShapeGroup returns the analysis's shape group that folder g was generated for: the
// group of g's pattern with g's dtype and exactly g's shapes, or nil. (A group merely sharing
// the main input's shape is another shape's evidence: never shown for g.)
func findShapeGroup(a *patterns.Report, g GenFolder) *patterns.ShapeGroup {
	o := findOpportunity(a, g.Pattern)
	if o == nil || len(g.Shapes) == 0 {
		return nil
	}
	for i := range o.Shapes {
		sg := &o.Shapes[i]
		if string(sg.DType) == g.Dtype && shapesString(sg.Dims) == shapesString(g.Shapes) {
			return sg
		}
	}
	return nil
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

// scrubFolder rewrites a kernel folder's copy so that its README.md and manifest.json, which
// carry the trace's path as the command line gave it, name no absolute local path either
// (scrubPaths).
func scrubFolder(dir string) error {
	for _, name := range []string{"README.md", "manifest.json"} {
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		if s := scrubPaths(string(b)); s != string(b) {
			if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// absPath matches an absolute local path where one starts (the start of the text, or after
// a space, a bracket, a quote, a backtick, '=', ',' or ';'): /home/u/x.py, C:\Users\u\x.py.
var absPath = regexp.MustCompile("(^|[\\s(\\[{\"'`=,;])((?:/|[A-Za-z]:\\\\)[^\\s()\\[\\]{}\"'`,;|]+)")

// scrubPaths replaces every absolute local path in s (a trace's path, its Python frames, an
// error message) by what identifies it without the machine's layout: the part after
// site-packages/ or dist-packages/ for an installed package's file, else the file's name.
func scrubPaths(s string) string {
	return absPath.ReplaceAllStringFunc(s, func(m string) string {
		sub := absPath.FindStringSubmatch(m)
		lead, path := sub[1], sub[2]
		slashed := strings.ReplaceAll(path, "\\", "/")
		for _, pkg := range []string{"site-packages/", "dist-packages/"} {
			if i := strings.LastIndex(slashed, pkg); i >= 0 && i+len(pkg) < len(slashed) {
				return lead + slashed[i+len(pkg):]
			}
		}
		base := slashed[strings.LastIndex(slashed, "/")+1:]
		if base == "" {
			base = "…"
		}
		return lead + base
	})
}
