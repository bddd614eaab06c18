package report

import (
	"bytes"
	"io"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/bench"
)

func TestFormatBounded(t *testing.T) {
	for _, tc := range []struct {
		name, got, want string
	}{
		{"fmtUs 1e308", fmtUs(1e308), "1e+308"},
		{"fmtUs 1.5e6", fmtUs(1.5e6), "1.5e+06"},
		{"fmtUs 999999", fmtUs(999999), "999999"},
		{"fmtUs 138.4", fmtUs(138.4), "138"},
		{"fmtUs 0.0146", fmtUs(0.0146), "0.015"},
		{"fmtUs 4e-9", fmtUs(4e-9), "4e-09"},
		{"fmtUs 0", fmtUs(0), "0.000"},
		{"fmtUs NaN", fmtUs(math.NaN()), "?"},
		{"fmtX 1e300", fmtX(1e300), "1e+300×"},
		{"fmtX 10.58", fmtX(10.58), "10.58×"},
		{"fmtPct -1e9", fmtPct(-1e9), "-1e+09%"},
		{"fmtPct 92.4", fmtPct(92.4), "92%"},
		{"fmtMs 1e308", fmtMs(1e308), "1e+305 ms"},
		{"fmtMs 1234", fmtMs(1234), "1.23 ms"},
		{"shortest 1e300", shortest(1e300), "1e+300"},
		{"shortest 4250.5", shortest(4250.5), "4250.5"},
		{"shortest 0.1+0.2", shortest(0.1 + 0.2), "0.3"},
		{"tickLabel 2e6", tickLabel(2e6), "2e+06"},
		{"tickLabel 500", tickLabel(500), "500"},
		{"msString 1e308", msString(1e308), "1e+305"},
		{"msString 14.6", msString(14.6), "0.0146"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

// extreme returns the recorded inputs with the first case's numbers at the ends of
// float64's range, and targets on.
func extreme(t *testing.T) Inputs {
	in := recorded(t)
	b := *in.Bench
	b.CopyTBps = 1e300
	b.Cases = append([]bench.Case(nil), b.Cases...)
	c := &b.Cases[0]
	c.FusedUs, c.FusedP20, c.FusedP80 = 1e308, 1e307, 1.5e308
	c.EagerUs, c.EagerP20, c.EagerP80 = 1.7e308, 1e308, 1.79e308
	c.CompileUs, c.CompileP20, c.CompileP80 = 1e-300, 1e-301, 2e-300
	c.PredictedUs, c.FloorUs, c.GemmOnlyUs = 1e300, 1e-9, 1e307
	c.FusedWallUs, c.FusedHostUs = 1.2e308, 1e307
	c.EagerWallUs, c.EagerHostUs = 1.75e308, 1.1e308
	c.CompileWallUs, c.CompileHostUs = 2e-300, 1e-300
	in.Bench = &b
	in.Targets = true
	return in
}

var longNumber = regexp.MustCompile(`[0-9]{16,}`)

func TestHugeNumbers(t *testing.T) {
	in := extreme(t)
	csvOut := func(w io.Writer, in Inputs) error { return WriteCSV(w, in.Bench) }
	for _, tc := range []struct {
		name string
		f    func(io.Writer, Inputs) error
		want []string
	}{
		{"markdown", Markdown, []string{"| 1e+308 (1e+307-1.5e+308) | 1.2e+308 (host 1e+307) | 1.7e+308 (1e+308-1.79e+308) | 1.75e+308 (host 1.1e+308) | 1e-300 (1e-301-2e-300) | 2e-300 (host 1e-300) |", "measured copy bandwidth 1e+300 TB/s", "GEMM alone 1e+307 µs"}},
		{"csv", csvOut, []string{",1e+305,1e+304,1.5e+305,"}},
	} {
		out := render(t, tc.f, in)
		if m := longNumber.Find(out); m != nil {
			t.Errorf("%s: a number printed with %d digits: %.40s...", tc.name, len(m), m)
		}
		for _, w := range tc.want {
			if !bytes.Contains(out, []byte(w)) {
				t.Errorf("%s lacks %q", tc.name, w)
			}
		}
	}
	var b strings.Builder
	if err := WriteTargets(&b, in.Bench); err != nil {
		t.Fatal(err)
	}
	if m := longNumber.FindString(b.String()); m != "" {
		t.Errorf("targets: a number printed with %d digits", len(m))
	}
}

// TestAxisExtremes checks that times at the ends of float64's range give a finite axis
// with a few ticks: rounding 1.5e308 up to a nice number overflowed to +Inf (and 5e-324
// down to 0, whose log is -Inf), and the tick loop never ended.
func TestAxisExtremes(t *testing.T) {
	huge := extreme(t).Bench.Cases
	tiny := append([]bench.Case(nil), huge...)
	tiny[0].CompileUs, tiny[0].CompileP20, tiny[0].CompileP80 = 5e-324, 5e-324, 1e-323
	for _, cases := range [][]bench.Case{huge, tiny} {
		for _, sc := range []Scale{ScaleAuto, ScaleLog, ScaleLinear} {
			a := newAxis(cases, sc, labelW, chartW-valueW)
			finite := func(v float64) bool { return !math.IsInf(v, 0) && !math.IsNaN(v) }
			if !finite(a.lo) || !finite(a.hi) || a.lo >= a.hi {
				t.Fatalf("%v axis from %v to %v", sc, a.lo, a.hi)
			}
			vs, labels := a.ticks()
			if len(vs) < 2 || len(vs) > 2*maxDecadeTicks {
				t.Errorf("%v axis: %d ticks %q", sc, len(vs), labels)
			}
			for i, v := range vs {
				if x := a.x(v); !finite(v) || !finite(x) || len(labels[i]) > 8 {
					t.Errorf("%v axis: tick %v at x %v labelled %q", sc, v, x, labels[i])
				}
			}
		}
	}
	in := extreme(t)
	for _, sc := range []Scale{ScaleLog, ScaleLinear} {
		in.Scale = sc
		for _, tc := range []struct {
			name string
			f    func(io.Writer, Inputs) error
		}{{"svg", SVG}, {"html", HTML}} {
			out := render(t, tc.f, in)
			if tc.name == "svg" {
				if g := wellFormed(t, "extreme svg", out); g != len(in.Bench.Cases) {
					t.Errorf("extreme svg (%v): %d case groups, want %d", sc, g, len(in.Bench.Cases))
				}
			} else { // the chart (the verification table has NaN errors of its own)
				i, j := bytes.Index(out, []byte("<svg")), bytes.Index(out, []byte("</svg>"))
				if i < 0 || j < i {
					t.Fatalf("html (%v): no chart", sc)
				}
				out = out[i:j]
			}
			if m := regexp.MustCompile(`NaN|Inf|[0-9]{16,}`).Find(out); m != nil {
				t.Errorf("%s (%v): %.40q in the output", tc.name, sc, m)
			}
			// the speedup chart in both; the time chart (the huge median) in HTML only
			if !bytes.Contains(out, []byte("<title>vs eager: ")) {
				t.Errorf("%s (%v): no speedup bar", tc.name, sc)
			}
			if tc.name == "html" && !bytes.Contains(render(t, tc.f, in), []byte("fused (Triton): 1e+308 (1e+307-1.5e+308) µs")) {
				t.Errorf("%s (%v): the huge median's title is missing", tc.name, sc)
			}
		}
	}
}
