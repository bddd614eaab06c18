package report

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/bench"
	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/verify"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// recorded loads the recorded inputs in testdata.
func recorded(t *testing.T) Inputs {
	t.Helper()
	in, err := Load(Paths{
		Analysis:  filepath.Join("testdata", "analysis.json"),
		Generated: []string{filepath.Join("testdata", "gen")},
		Verify:    filepath.Join("testdata", "verify.json"),
		Bench:     filepath.Join("testdata", "bench.json"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./report -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s differs from the golden file at line %d:\ngot:  %q\nwant: %q\n(run go test ./report -update if the change is intended)", name, i+1, g, w)
			}
		}
		t.Fatalf("%s differs from the golden file", name)
	}
}

func render(t *testing.T, f func(io.Writer, Inputs) error, in Inputs) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := f(&b, in); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestGolden(t *testing.T) {
	full := recorded(t)
	noBench := full
	noBench.Bench = nil
	logScale := full
	logScale.Scale = ScaleLog
	linScale := full
	linScale.Scale = ScaleLinear
	withTargets := full
	withTargets.Targets = true
	csvOut := func(w io.Writer, in Inputs) error { return WriteCSV(w, in.Bench) }
	// the HTML's time chart alone (on a linear axis here; report.html holds the log one)
	timeSVG := func(w io.Writer, in Inputs) error {
		bw := bufio.NewWriter(w)
		writeTimeSVG(bw, in.Bench, in.Scale, in.Use)
		return bw.Flush()
	}
	for _, tc := range []struct {
		file string
		f    func(io.Writer, Inputs) error
		in   Inputs
	}{
		{"report.md", Markdown, full},
		{"report_targets.md", Markdown, withTargets},
		{"report.html", HTML, full},
		{"report.svg", SVG, full},
		{"report_linear_time.svg", timeSVG, linScale},
		{"bench.csv", csvOut, full},
		{"nobench.md", Markdown, noBench},
		{"nobench.svg", SVG, noBench},
		{"empty.md", Markdown, Inputs{}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			golden(t, tc.file, render(t, tc.f, tc.in))
		})
	}
	// The recorded times span 0.05 to 1465 us: auto picks the log axis.
	// (the time chart is in the HTML; report.svg is the linear speedup chart)
	if a, b := render(t, HTML, full), render(t, HTML, logScale); !bytes.Equal(a, b) {
		t.Error("auto scale did not pick log for times spanning four decades")
	}
}

// wellFormed parses b as XML to the end, checks that it is one <svg> element in the SVG
// namespace, and returns the number of <g> elements directly inside it (one per case).
func wellFormed(t *testing.T, name string, b []byte) (groups int) {
	t.Helper()
	groups, err := svgGroups(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return groups
}

// svgGroups is wellFormed's check.
func svgGroups(b []byte) (groups int, err error) {
	d := xml.NewDecoder(bytes.NewReader(b))
	depth, roots := 0, 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			switch depth {
			case 0:
				roots++
				if tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg" {
					return 0, fmt.Errorf("root element %v, want svg in the SVG namespace", tok.Name)
				}
			case 1:
				if tok.Name.Local == "g" {
					groups++
				}
			}
			depth++
		case xml.EndElement:
			depth--
		case xml.CharData:
			if depth == 0 && len(bytes.TrimSpace(tok)) > 0 {
				return 0, fmt.Errorf("text outside the root element: %q", tok)
			}
		}
	}
	if roots != 1 {
		return 0, fmt.Errorf("%d root elements, want one <svg>", roots)
	}
	return groups, nil
}

func TestSVGWellFormed(t *testing.T) {
	full := recorded(t)
	n := len(full.Bench.Cases)
	if n == 0 {
		t.Fatal("the recorded bench has no cases")
	}
	if g := wellFormed(t, "full", render(t, SVG, full)); g != n {
		t.Errorf("full: %d case groups, want %d", g, n)
	}
	full.Scale = ScaleLinear
	if g := wellFormed(t, "linear", render(t, SVG, full)); g != n {
		t.Errorf("linear: %d case groups, want %d", g, n)
	}
	if g := wellFormed(t, "no bench", render(t, SVG, Inputs{})); g != 0 {
		t.Errorf("no bench: %d case groups", g)
	}
	if g := wellFormed(t, "no cases", render(t, SVG, Inputs{Bench: &bench.Result{GPU: "x"}})); g != 0 {
		t.Errorf("no cases: %d case groups", g)
	}
}

// TestWellFormedRejects checks that the check above can fail: empty output, a document
// that is not an SVG, two roots, stray text.
func TestWellFormedRejects(t *testing.T) {
	for _, bad := range []string{"", "  \n", `<html></html>`, `<svg></svg>`, `<svg xmlns="http://www.w3.org/2000/svg"></svg><svg xmlns="http://www.w3.org/2000/svg"></svg>`, `x<svg xmlns="http://www.w3.org/2000/svg"></svg>`, `<svg xmlns="http://www.w3.org/2000/svg"><g></svg>`} {
		if _, err := svgGroups([]byte(bad)); err == nil {
			t.Errorf("wellFormed accepted %q", bad)
		}
	}
}

// hostile returns the recorded inputs with attack strings in every field that comes from
// a trace or a tool's output.
func hostile(t *testing.T) Inputs {
	const evil = `aten::<script>alert(1)</script>"><img src=x onerror=alert(2)>` + "`|*_[x](javascript:alert(3))\x01\n"
	in := recorded(t)
	a := *in.Analysis
	a.Trace.Path = evil
	a.Trace.Device = evil
	a.Trace.Dataflow = evil
	a.Notes = append(a.Notes, evil)
	a.Calibration = append(a.Calibration, patterns.Calibration{BandwidthSource: evil, OverheadSource: evil})
	ops := append([]patterns.Opportunity(nil), a.Opportunities...)
	ops[0].Pattern = evil
	ops[0].Fused = evil
	ops[0].Advice = []string{evil, evil}
	ops[0].Shapes = append([]patterns.ShapeGroup(nil), ops[0].Shapes...)
	ops[0].Shapes[0].Sources = []string{evil}
	ops[0].Shapes[0].DType = patterns.DType(evil)
	a.Opportunities = ops
	in.Analysis = &a
	x := *in.Trace
	x.TopKernels = append([]NameTime{{Name: evil, Count: 1, Us: 1}}, x.TopKernels...)
	in.Trace = &x

	gens := append([]GenFolder(nil), in.Generated...)
	gens[0].Name = evil
	gens[0].Pattern = evil
	gens[0].Source = codegen.ManifestSource{Trace: evil, Site: evil}
	in.Generated = gens

	v := *in.Verify
	v.Device, v.Torch = evil, evil
	v.Folders = append([]verify.Folder(nil), v.Folders...)
	v.Folders[0].Error = evil
	v.Folders[1].Dir = evil
	v.Folders[1].Cases = append([]verify.Case(nil), v.Folders[1].Cases...)
	v.Folders[1].Cases[1].Name, v.Folders[1].Cases[1].Message = evil, evil
	v.Folders[1].Cases[1].Mismatch = &verify.Mismatch{Output: evil, Got: evil, Want: evil, Note: evil}
	in.Verify = &v

	b := *in.Bench
	b.GPU, b.Torch, b.Command, b.Date = evil, evil, evil, evil
	b.Cases = append([]bench.Case(nil), b.Cases...)
	b.Cases[0].Name, b.Cases[0].Dtype = evil, evil
	b.Cases[6].Error = evil
	in.Bench = &b
	return in
}

var markupRE = regexp.MustCompile(`(?i)<(script|img)`)

func TestEscaping(t *testing.T) {
	in := hostile(t)
	for _, tc := range []struct {
		name string
		f    func(io.Writer, Inputs) error
	}{{"html", HTML}, {"svg", SVG}} {
		out := render(t, tc.f, in)
		if m := markupRE.Find(out); m != nil {
			t.Errorf("%s: trace data became markup: %q", tc.name, m)
		}
		if !bytes.Contains(out, []byte("&lt;script&gt;alert(1)&lt;/script&gt;")) {
			t.Errorf("%s: the crafted op name does not appear escaped", tc.name)
		}
		if bytes.Contains(out, []byte("\x01")) {
			t.Errorf("%s: a control character reached the output", tc.name)
		}
	}
	if g := wellFormed(t, "hostile svg", render(t, SVG, in)); g != len(in.Bench.Cases) {
		t.Errorf("hostile svg: %d case groups, want %d", g, len(in.Bench.Cases))
	}

	// Markdown: outside code spans, no markup and no link; inside, the name intact.
	md := string(render(t, Markdown, in))
	if !strings.Contains(md, "<script>alert(1)</script>") {
		t.Error("markdown: the crafted op name is missing from its code span")
	}
	if rest := unescaped(stripCodeSpans(md)); markupRE.MatchString(rest) || strings.Contains(rest, "](javascript") {
		t.Errorf("markdown: trace data outside a code span:\n%s", rest)
	}
	cells := -1 // the current table's pipe count, from its header
	for _, l := range strings.Split(md, "\n") {
		if !strings.HasPrefix(l, "|") {
			cells = -1
			continue
		}
		n := strings.Count(strings.ReplaceAll(l, `\|`, ""), "|")
		if cells < 0 {
			cells = n
		} else if n != cells {
			t.Errorf("markdown: a '|' in the data split a table row (%d cells, header %d): %q", n, cells, l)
		}
	}

	// PR.md too.
	var pr bytes.Buffer
	if err := prMarkdown(&pr, in, prItems(in)); err != nil {
		t.Fatal(err)
	}
	if rest := unescaped(stripCodeSpans(pr.String())); markupRE.MatchString(rest) {
		t.Errorf("PR.md: trace data outside a code span:\n%s", rest)
	}
}

// unescaped drops Markdown backslash escapes and the characters they escape: what is left
// is what a renderer could read as markup.
func unescaped(s string) string {
	return regexp.MustCompile(`\\[[:punct:]]`).ReplaceAllString(s, "")
}

// stripCodeSpans removes Markdown code spans (backtick fences of any length).
func stripCodeSpans(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '`' {
			b.WriteByte(s[i])
			i++
			continue
		}
		n := 0
		for i+n < len(s) && s[i+n] == '`' {
			n++
		}
		fence := strings.Repeat("`", n)
		end := strings.Index(s[i+n:], fence)
		for end >= 0 && i+n+end+n < len(s) && s[i+n+end+n] == '`' { // a longer run is not the closer
			next := strings.Index(s[i+n+end+n:], fence)
			if next < 0 {
				end = -1
				break
			}
			end += n + next
		}
		if end < 0 {
			b.WriteString(s[i:])
			break
		}
		i += n + end + n
	}
	return b.String()
}

func TestCodeSpan(t *testing.T) {
	for _, tc := range []struct {
		in      string
		inTable bool
		want    string
	}{
		{"aten::add", false, "`aten::add`"},
		{"a`b", false, "``a`b``"},
		{"`x`", false, "`` `x` ``"},
		{"a|b", true, "`a\\|b`"},
		{"a|b", false, "`a|b`"},
		{"line\nbreak", false, "`line break`"},
		{"", false, ""},
	} {
		if got := codeSpan(tc.in, tc.inTable); got != tc.want {
			t.Errorf("codeSpan(%q, %v) = %q, want %q", tc.in, tc.inTable, got, tc.want)
		}
	}
}

func TestSpeedupVerdicts(t *testing.T) {
	base := bench.Case{Pattern: "p", Dtype: "bf16", Shape: []int64{4}, Correct: true,
		FusedUs: 10, FusedP20: 9.9, FusedP80: 10.1, EagerUs: 20, EagerP20: 19.8, EagerP80: 20.2,
		CompileUs: 15, CompileP20: 14.8, CompileP80: 15.2, FloorUs: 5, PredictedUs: 8}
	with := func(f func(c *bench.Case)) bench.Case { c := base; f(&c); return c }
	for _, tc := range []struct {
		name    string
		c       bench.Case
		verdict Verdict
		vsEager float64
		noise   bool
	}{
		{"ship", base, Ship, 2, false},
		{"review above 10x", with(func(c *bench.Case) { c.EagerUs, c.EagerP20, c.EagerP80 = 101, 100, 102 }), Review, 10.1, false},
		{"exactly 10x ships", with(func(c *bench.Case) { c.EagerUs, c.EagerP20, c.EagerP80 = 100, 99, 101 }), Ship, 10, false},
		{"slower", with(func(c *bench.Case) { c.EagerUs, c.EagerP20, c.EagerP80 = 8, 7.9, 8.1 }), DoNotShip, 0.8, false},
		{"slower within noise", with(func(c *bench.Case) { c.EagerUs, c.EagerP20, c.EagerP80 = 9.8, 9, 11 }), DoNotShip, 0.98, true},
		{"faster within noise", with(func(c *bench.Case) { c.EagerUs, c.EagerP20, c.EagerP80 = 10.5, 9.5, 11.5 }), Noise, 1.05, true},
		{"no quantiles: never noise", with(func(c *bench.Case) {
			c.FusedP20, c.FusedP80, c.EagerUs, c.EagerP20, c.EagerP80 = 0, 0, 10.01, 0, 0
		}), Ship, 1.001, false},
		{"repeats overlap", with(func(c *bench.Case) {
			c.EagerUs, c.EagerP20, c.EagerP80 = 10.5, 10.45, 10.55
			c.FusedSpread, c.EagerSpread = []float64{9.9, 10.6}, []float64{10.3, 10.7}
		}), Noise, 1.05, true},
		{"wrong on the GPU", with(func(c *bench.Case) { c.Correct, c.Error = false, "mismatch" }), Failed, 0, false},
		{"errored", with(func(c *bench.Case) { c.Error = "out of memory" }), NotTimed, 0, false},
		{"no eager time", with(func(c *bench.Case) { c.EagerUs = 0 }), NotTimed, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := speedup(tc.c, UseEager)
			if s.Verdict != tc.verdict {
				t.Errorf("verdict %q, want %q (notes %q)", s.Verdict, tc.verdict, s.Notes)
			}
			if d := s.VsEager - tc.vsEager; d > 1e-9 || d < -1e-9 {
				t.Errorf("vs eager %v, want %v", s.VsEager, tc.vsEager)
			}
			if s.EagerNoise != tc.noise {
				t.Errorf("noise %v, want %v", s.EagerNoise, tc.noise)
			}
		})
	}
	s := speedup(base, UseEager)
	if s.FloorPct != 50 || !s.HasPred || s.PredErrPct != -20 || s.VsCompile != 1.5 {
		t.Errorf("floor %v%%, prediction error %v%% (%v), vs compile %v; want 50, -20, 1.5", s.FloorPct, s.PredErrPct, s.HasPred, s.VsCompile)
	}
	slowerThanCompile := speedup(with(func(c *bench.Case) { c.CompileUs, c.CompileP20, c.CompileP80 = 7, 6.9, 7.1 }), UseEager)
	if slowerThanCompile.Verdict != UseCompile || !strings.Contains(strings.Join(slowerThanCompile.Notes, ";"), "torch.compile of the chain is 1.43× faster") {
		t.Errorf("verdict %q, notes %q: want %q and by how much", slowerThanCompile.Verdict, slowerThanCompile.Notes, UseCompile)
	}
}

func TestRecordedVerdicts(t *testing.T) {
	// case 1 has no per-call figures (GPU time decides for any use); case 3 is host-bound
	// (slower than eager on GPU time, faster per call), case 4 the other way round
	for _, tc := range []struct {
		use  Use
		want []Verdict
	}{
		{UseEager, []Verdict{Ship, Review, Ship, Ship, DoNotShip, Noise, Failed}},
		{UseGraphs, []Verdict{Ship, Review, Ship, DoNotShip, Ship, Noise, Failed}},
	} {
		var got []Verdict
		for _, s := range SpeedupsFor(recorded(t).Bench, tc.use) {
			got = append(got, s.Verdict)
		}
		if strings.Join(verdictStrings(got), ",") != strings.Join(verdictStrings(tc.want), ",") {
			t.Errorf("use %d: verdicts %q, want %q", tc.use, got, tc.want)
		}
	}
}

func TestPerCallVerdicts(t *testing.T) {
	base := bench.Case{Pattern: "p", Dtype: "bf16", Shape: []int64{4}, Correct: true,
		FusedUs: 10, FusedP20: 9.9, FusedP80: 10.1, EagerUs: 20, EagerP20: 19.8, EagerP80: 20.2,
		FusedWallUs: 12, FusedHostUs: 6, EagerWallUs: 30, EagerHostUs: 25}
	with := func(f func(c *bench.Case)) bench.Case { c := base; f(&c); return c }
	for _, tc := range []struct {
		name         string
		c            bench.Case
		use          Use
		verdict      Verdict
		basis        Basis
		gpu, perCall Verdict
		note         string // a note the verdict must carry
	}{
		{"eager use: per call decides", base, UseEager, Ship, OnPerCall, Ship, Ship, ""},
		{"graphs: GPU time decides", base, UseGraphs, Ship, OnGPUTime, Ship, Ship, ""},
		{"host-heavy fused call loses per call", with(func(c *bench.Case) { c.FusedWallUs, c.FusedHostUs = 35, 33 }),
			UseEager, DoNotShip, OnPerCall, Ship, DoNotShip, "on GPU time: ship (2.00× vs eager)"},
		{"the same under graphs", with(func(c *bench.Case) { c.FusedWallUs, c.FusedHostUs = 35, 33 }),
			UseGraphs, Ship, OnGPUTime, Ship, DoNotShip, "per call: do not ship (0.86× vs eager)"},
		{"host-bound eager chain: per call wins", with(func(c *bench.Case) { c.EagerUs, c.EagerP20, c.EagerP80 = 8, 7.9, 8.1 }),
			UseEager, Ship, OnPerCall, DoNotShip, Ship, "on GPU time: do not ship (0.80× vs eager)"},
		{"per-call spreads overlap", with(func(c *bench.Case) {
			c.EagerWallUs, c.FusedWallSpread, c.EagerWallSpread = 12.5, []float64{11.8, 12.6}, []float64{12.3, 12.9}
		}), UseEager, Noise, OnPerCall, Ship, Noise, "faster than eager by less than the repeats' spread"},
		{"no eager per-call time: GPU time decides", with(func(c *bench.Case) { c.EagerWallUs = 0 }),
			UseEager, Ship, OnGPUTime, Ship, "", ""},
		{"old result: no per-call figures", with(func(c *bench.Case) { c.FusedWallUs, c.FusedHostUs, c.EagerWallUs, c.EagerHostUs = 0, 0, 0, 0 }),
			UseEager, Ship, OnGPUTime, Ship, "", ""},
		{"wrong on the GPU", with(func(c *bench.Case) { c.Correct = false }), UseEager, Failed, OnGPUTime, Failed, "", ""},
		{"host-bound fused call", with(func(c *bench.Case) { c.FusedHostUs = 11 }), UseEager, Ship, OnPerCall, Ship, Ship,
			"host-bound: a fused call takes 11.0 µs to return, its kernels 10.0 µs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := speedup(tc.c, tc.use)
			if s.Verdict != tc.verdict || s.Basis != tc.basis || s.GPUVerdict != tc.gpu || s.CallVerdict != tc.perCall {
				t.Errorf("verdict %q on %q (GPU %q, per call %q), want %q on %q (%q, %q)",
					s.Verdict, s.Basis, s.GPUVerdict, s.CallVerdict, tc.verdict, tc.basis, tc.gpu, tc.perCall)
			}
			if notes := strings.Join(s.Notes, "; "); tc.note != "" && !strings.Contains(notes, tc.note) {
				t.Errorf("notes %q lack %q", notes, tc.note)
			}
		})
	}
	if s := speedup(base, UseEager); s.WallVsEager != 2.5 || s.VsEager != 2 {
		t.Errorf("per call %vx, GPU %vx; want 2.5 and 2", s.WallVsEager, s.VsEager)
	}
}

// TestOldResults: a result from before the per-call figures and the read-back flush (six
// cases of the H200 results of 2026-11-29) loads, is judged on GPU time, shows no per-call column and says
// how its L2 flush was done.
func TestOldResults(t *testing.T) {
	r, err := LoadBench(filepath.Join("testdata", "bench-2026-11-29.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.FlushBytes != 0 || len(r.Cases) == 0 {
		t.Fatalf("flush_bytes %d, %d cases: want an old result", r.FlushBytes, len(r.Cases))
	}
	for _, s := range Speedups(r) {
		if s.Basis != OnGPUTime || s.Verdict != s.GPUVerdict || s.CallVerdict != "" || s.WallVsEager != 0 {
			t.Fatalf("%s: verdict %q on %q, per call %q: want the GPU-time verdict", s.Label, s.Verdict, s.Basis, s.CallVerdict)
		}
	}
	md := string(render(t, Markdown, Inputs{Bench: r}))
	if strings.Contains(md, "per call µs") || strings.Contains(md, "GPU-time verdict") || strings.Contains(md, "decided on per-call") {
		t.Error("an old result's report has per-call columns")
	}
	if !strings.Contains(md, "whose dirty lines are written back inside the timed call") {
		t.Error("an old result's report does not say its flush left dirty lines")
	}
	in := recorded(t)
	md = string(render(t, Markdown, in))
	if !strings.Contains(md, "256 MiB written, then 256 MiB read") || !strings.Contains(md, "fused per call µs") {
		t.Error("a new result's report lacks its flush or its per-call columns")
	}
}

func verdictStrings(vs []Verdict) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

func TestCSV(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCSV(&b, recorded(t).Bench); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rows[0], ",") != "kernel_name,kernel_provider,kernel_operation_mode,metric_name,metric_unit,x_name,x_label,x_value,y_value_50,y_value_20,y_value_80,extra_benchmark_config_str,gpu_name,timestamp,liger_version" {
		t.Errorf("header %q", rows[0])
	}
	// 6 timed cases x 3 providers; the failed case has no rows
	if len(rows) != 1+18 {
		t.Fatalf("%d rows, want 19", len(rows))
	}
	first := rows[1]
	want := []string{"gelu_pyops", "fuseadvise", "forward", "speed", "ms", "numel", "elements of the main input", "12582912",
		"0.0146", "0.0144", "0.0149", `{"dtype":"bf16","shapes":[[8,512,3072]],"name":"gelu_pyops_bf16"}`, "NVIDIA H200", "2026-11-29 18:30:00", ""}
	if strings.Join(first, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("first row\n got %q\nwant %q", first, want)
	}
	if rows[2][1] != "torch" || rows[2][8] != "0.1412" || rows[3][1] != "torch_compile" {
		t.Errorf("eager/compile rows %q %q", rows[2], rows[3])
	}

	// a training case: its mode, and memory rows where the peaks were measured
	res := &bench.Result{GPU: "G", Cases: []bench.Case{{Pattern: "swiglu", Name: "s", Dtype: "bf16", Shape: []int64{2, 3},
		Correct: true, Mode: "full", FusedUs: 10, EagerUs: 20, FusedPeakBytes: 3 << 20, EagerPeakBytes: 6 << 20}}}
	b.Reset()
	if err := WriteCSV(&b, res); err != nil {
		t.Fatal(err)
	}
	rows, err = csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows[1:] {
		got = append(got, strings.Join([]string{r[1], r[2], r[3], r[4], r[8]}, " "))
	}
	want2 := "fuseadvise full speed ms 0.01|torch full speed ms 0.02|fuseadvise full memory MB 3.000|torch full memory MB 6.000"
	if strings.Join(got, "|") != want2 {
		t.Errorf("training rows\n got %s\nwant %s", strings.Join(got, "|"), want2)
	}

	b.Reset()
	if err := WriteCSV(&b, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Count(b.String(), "\n") != 1 {
		t.Errorf("no bench: want the header only, got %q", b.String())
	}
	if got := csvText("=HYPERLINK(1)"); got != "'=HYPERLINK(1)" {
		t.Errorf("csvText = %q", got)
	}
}

func TestNoBench(t *testing.T) {
	in := recorded(t)
	in.Bench = nil
	md := string(render(t, Markdown, in))
	for _, want := range []string{"No benchmark results: the kernels were not timed on a GPU", "Not benchmarked: no GPU results", "not benchmarked"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown without bench results lacks %q", want)
		}
	}
	// without a GPU the chart shows the cost model's predicted speedups, titled as such
	const predicted = "predicted by the cost model, not measured"
	if !strings.Contains(md, "report.svg") {
		t.Error("markdown without bench results does not link the predicted chart")
	}
	html := string(render(t, HTML, in))
	if !strings.Contains(html, "No benchmark results") || !strings.Contains(html, "<svg") || !strings.Contains(html, predicted) {
		t.Error("HTML without bench results should say so and draw the predicted chart")
	}
	svg := string(render(t, SVG, in))
	if !strings.Contains(svg, predicted) || strings.Contains(svg, "vs torch.compile") {
		t.Error("SVG without bench results should draw predicted speedups over the chain only")
	}
	if g := wellFormed(t, "predicted", []byte(svg)); g == 0 {
		t.Error("predicted SVG has no bars")
	}
	// neither bench nor predictions: a note, and no chart linked
	bare := Inputs{Analysis: in.Analysis}
	if md := string(render(t, Markdown, bare)); strings.Contains(md, "report.svg") {
		t.Error("markdown links a chart with nothing in it")
	}
	if svg := string(render(t, SVG, bare)); !strings.Contains(svg, "No benchmark results") {
		t.Error("SVG without bench results or predictions should say so")
	}
	// nothing at all still renders
	if md := string(render(t, Markdown, Inputs{})); !strings.Contains(md, "No analysis given") || !strings.Contains(md, "Not verified") {
		t.Errorf("empty inputs: %s", md)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, content string
		load          func(string) error
		want          string
	}{
		{"syntax.json", `{"trace": {"path": "x",}}`, func(p string) error { _, _, err := LoadAnalysis(p); return err }, "syntax.json: offset 24: invalid JSON: invalid character"},
		{"type.json", `{"gpu": "g", "cases": [{"pattern": "p", "fused_us": "fast"}]}`, func(p string) error { _, err := LoadBench(p); return err }, "type.json: offset 58: field cases.fused_us: got a string, want a number in range"},
		{"int.json", `{"gpu": "g", "cases": [{"pattern": "p", "shape": [1.5]}]}`, func(p string) error { _, err := LoadBench(p); return err }, "int.json: offset 53: field cases.shape: got the number 1.5, want an integer that fits in 64 bits"},
		{"summary.json", `{"trace": {}, "opportunities": [], "summary": {"top_kernels": {}}}`, func(p string) error { _, _, err := LoadAnalysis(p); return err }, "summary.json: offset 63: field summary.top_kernels: got an object, want an array"},
		{"trailing.json", `{"device": "cpu", "folders": []} {}`, func(p string) error { _, err := LoadVerify(p); return err }, "trailing.json: offset 33: data after the JSON object"},
		{"empty.json", ``, func(p string) error { _, err := LoadBench(p); return err }, "empty.json: empty file"},
		{"nopattern.json", `{"gpu": "g", "cases": [{"fused_us": 1}]}`, func(p string) error { _, err := LoadBench(p); return err }, "case 0 has no pattern"},
		{"noopp.json", `{"trace": {}, "opportunities": [{"instances": 1}]}`, func(p string) error { _, _, err := LoadAnalysis(p); return err }, "opportunity 0 has no pattern"},
		// each file must carry its verb's signature keys
		{"trace.json.gz", "\x1f\x8b\x08\x00", func(p string) error { _, _, err := LoadAnalysis(p); return err }, "trace.json.gz: not the JSON of 'fuseadvise analyze -format json': gzip-compressed"},
		{"kineto.json", `{"schemaVersion": 1, "traceEvents": []}`, func(p string) error { _, _, err := LoadAnalysis(p); return err }, "kineto.json: not the JSON of 'fuseadvise analyze -format json': it is a profiler trace"},
		{"other.json", `{"a": 1}`, func(p string) error { _, _, err := LoadAnalysis(p); return err }, "other.json: not the JSON of 'fuseadvise analyze -format json': no \"trace\" object"},
		{"noopps.json", `{"trace": {}}`, func(p string) error { _, _, err := LoadAnalysis(p); return err }, "noopps.json: not the JSON of 'fuseadvise analyze -format json': no \"opportunities\" array"},
		{"nullopps.json", `{"trace": {}, "opportunities": null}`, func(p string) error { _, _, err := LoadAnalysis(p); return err }, "no \"opportunities\" array"},
		{"array.json", " \n[{\"trace\": {}}]", func(p string) error { _, _, err := LoadAnalysis(p); return err }, "array.json: not the JSON of 'fuseadvise analyze -format json': an array, want an object"},
		{"null.json", `null`, func(p string) error { _, err := LoadVerify(p); return err }, "null.json: not the JSON of 'fuseadvise verify -format json': null, want an object"},
		{"a-as-verify.json", `{"trace": {}, "opportunities": []}`, func(p string) error { _, err := LoadVerify(p); return err }, "a-as-verify.json: not the JSON of 'fuseadvise verify -format json': it is the JSON of 'fuseadvise analyze -format json'"},
		{"a-as-bench.json", `{"trace": {}, "opportunities": []}`, func(p string) error { _, err := LoadBench(p); return err }, "a-as-bench.json: not the JSON of 'fuseadvise bench': it is the JSON of 'fuseadvise analyze -format json'"},
		{"b-as-verify.json", `{"gpu": "g", "cases": []}`, func(p string) error { _, err := LoadVerify(p); return err }, "b-as-verify.json: not the JSON of 'fuseadvise verify -format json': it is the JSON of 'fuseadvise bench'"},
		{"v-as-bench.json", `{"device": "cpu", "folders": []}`, func(p string) error { _, err := LoadBench(p); return err }, "v-as-bench.json: not the JSON of 'fuseadvise bench': it is the JSON of 'fuseadvise verify -format json'"},
		{"nodevice.json", `{"folders": []}`, func(p string) error { _, err := LoadVerify(p); return err }, "nodevice.json: not the JSON of 'fuseadvise verify -format json': no \"device\" string"},
		{"foldersobj.json", `{"device": "cpu", "folders": {}}`, func(p string) error { _, err := LoadVerify(p); return err }, "no \"folders\" array"},
		{"nocases.json", `{"gpu": "g"}`, func(p string) error { _, err := LoadBench(p); return err }, "nocases.json: not the JSON of 'fuseadvise bench': no \"cases\" array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.load(write(tc.name, tc.content))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			} else if msg := err.Error(); strings.Contains(msg, "Go value") || strings.Contains(msg, "Go struct") || strings.Contains(msg, "unmarshal") || strings.Contains(msg, "\n") {
				t.Errorf("error %q names Go types or spans lines", msg)
			}
		})
	}
	// the smallest files each verb can write load: an empty list may be null
	if _, _, err := LoadAnalysis(write("a.json", `{"trace": {"path": "t"}, "opportunities": []}`)); err != nil {
		t.Errorf("minimal analysis: %v", err)
	}
	if _, err := LoadVerify(write("v.json", `{"device": "cuda", "folders": null}`)); err != nil {
		t.Errorf("minimal verify: %v", err)
	}
	if _, err := LoadBench(write("b.json", `{"gpu": "NVIDIA H200", "cases": null}`)); err != nil {
		t.Errorf("minimal bench: %v", err)
	}
	if _, err := LoadBench(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := LoadGenFolders(dir); err == nil || !strings.Contains(err.Error(), "no manifest.json") {
		t.Errorf("folder without manifests: %v", err)
	}
}

func TestParseScale(t *testing.T) {
	for in, want := range map[string]Scale{"": ScaleAuto, "auto": ScaleAuto, "linear": ScaleLinear, "log": ScaleLog} {
		if got, err := ParseScale(in); err != nil || got != want {
			t.Errorf("ParseScale(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseScale("cubic"); err == nil {
		t.Error("ParseScale(cubic) succeeded")
	}
}

func BenchmarkHTML(b *testing.B) {
	in, err := Load(Paths{
		Analysis:  filepath.Join("testdata", "analysis.json"),
		Generated: []string{filepath.Join("testdata", "gen")},
		Verify:    filepath.Join("testdata", "verify.json"),
		Bench:     filepath.Join("testdata", "bench.json"),
	})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := HTML(io.Discard, in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestGoldenLibrary: a bench result with library ops (SDPA's backends, one refusing;
// FlexAttention; F.rms_norm; the GELU epilogue refused) gets the sdpa, flex and library
// columns, each case's recommended option (the measured fastest of the kernel, torch.compile
// and the library calls) and the refusals in its notes, in Markdown and HTML.
func TestGoldenLibrary(t *testing.T) {
	r, err := LoadBench(filepath.Join("testdata", "bench-library.json"))
	if err != nil {
		t.Fatal(err)
	}
	in := Inputs{Bench: r}
	golden(t, "library.md", render(t, Markdown, in))
	golden(t, "library.html", render(t, HTML, in))
	sp := SpeedupsFor(r, in.Use)
	want := []struct {
		v   Verdict
		rec string
	}{
		{UseLibrary, "use F.scaled_dot_product_attention (cuDNN) — 212 µs vs fused 240 µs, compile 410 µs, F.scaled_dot_product_attention (memory-efficient) 251 µs"},
		{UseLibrary, "use F.scaled_dot_product_attention (cuDNN) — 655 µs vs fused 690 µs, compile 1350 µs, F.scaled_dot_product_attention (memory-efficient) 702 µs"},
		{Ship, "use the fused kernel — 931 µs vs compile 1760 µs, F.scaled_dot_product_attention (cuDNN) 928 µs (noise)"},
		{Ship, "use the fused kernel — 33.9 µs vs compile 35.0 µs, F.rms_norm 36.1 µs"},
		{Ship, "use the fused kernel — 410 µs vs compile 420 µs"},
	}
	for i, w := range want {
		if sp[i].Verdict != w.v || sp[i].Recommendation() != w.rec {
			t.Errorf("case %d (%s): %q, %q; want %q, %q", i, sp[i].Label, sp[i].Verdict, sp[i].Recommendation(), w.v, w.rec)
		}
	}
}

// The method paragraph says how the training modes' per-call figures were taken when bench
// took them over several chains in one backward (bench.Case.WallCopies), and only then.
func TestPerCallStepCopies(t *testing.T) {
	c := func(mode string, copies int) bench.Case {
		return bench.Case{Pattern: "swiglu", Name: "s", Dtype: "bf16", Shape: []int64{2, 3}, Correct: true, Mode: mode,
			FusedUs: 10, EagerUs: 20, FusedWallUs: 30, EagerWallUs: 40, WallCopies: copies}
	}
	const want = "In the backward and full modes a call is 8 chains with one backward"
	for _, tc := range []struct {
		cases []bench.Case
		says  bool
	}{
		{[]bench.Case{c("forward", 0), c("full", 8)}, true},
		{[]bench.Case{c("forward", 0), c("full", 0)}, false},
	} {
		out := string(render(t, Markdown, Inputs{Bench: &bench.Result{GPU: "G", Cases: tc.cases}}))
		if strings.Contains(out, want) != tc.says {
			t.Errorf("copies %d: says %q = %v, want %v", tc.cases[1].WallCopies, want, !tc.says, tc.says)
		}
	}
}
