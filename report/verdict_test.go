package report

import (
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/bench"
)

// TestUseCompileVerdict: a kernel faster than eager but slower than torch.compile is not
// "ship" (the "ship" printed beside 0.81× torch.compile): the verdict says to use
// torch.compile, on the basis the verdict is decided on.
func TestUseCompileVerdict(t *testing.T) {
	base := bench.Case{Pattern: "p", Dtype: "bf16", Shape: []int64{4}, Correct: true,
		FusedUs: 10, FusedP20: 9.9, FusedP80: 10.1, EagerUs: 20, EagerP20: 19.8, EagerP80: 20.2,
		CompileUs: 15, CompileP20: 14.8, CompileP80: 15.2}
	with := func(f func(c *bench.Case)) bench.Case { c := base; f(&c); return c }
	perCall := func(c *bench.Case) {
		c.FusedWallUs, c.EagerWallUs, c.CompileWallUs = 12, 30, 20
		c.FusedWallSpread, c.EagerWallSpread, c.CompileWallSpread = []float64{11.9, 12.1}, []float64{29.8, 30.2}, []float64{19.8, 20.2}
	}
	for _, tc := range []struct {
		name    string
		c       bench.Case
		use     Use
		verdict Verdict
		offered bool   // FasterThanEager
		note    string // in the notes
	}{
		{"compile slower: ship", base, UseEager, Ship, true, ""},
		{"0.81x torch.compile", with(func(c *bench.Case) { c.CompileUs, c.CompileP20, c.CompileP80 = 8.1, 8.0, 8.2 }),
			UseEager, UseCompile, true, "torch.compile of the chain is 1.23× faster than the kernel"},
		{"compile faster within noise: ship", with(func(c *bench.Case) { c.CompileUs, c.CompileP20, c.CompileP80 = 9.9, 9.0, 11.0 }),
			UseEager, Ship, true, ""},
		{"compile faster and over 10x eager: use compile, not review",
			with(func(c *bench.Case) {
				c.EagerUs, c.EagerP20, c.EagerP80, c.CompileUs, c.CompileP20, c.CompileP80 = 200, 199, 201, 5, 4.9, 5.1
			}),
			UseEager, UseCompile, true, ""},
		{"slower than eager stays do not ship", with(func(c *bench.Case) {
			c.EagerUs, c.EagerP20, c.EagerP80, c.CompileUs, c.CompileP20, c.CompileP80 = 8, 7.9, 8.1, 5, 4.9, 5.1
		}), UseEager, DoNotShip, false, "torch.compile is faster"},
		{"within noise of eager stays noise", with(func(c *bench.Case) {
			c.EagerUs, c.EagerP20, c.EagerP80, c.CompileUs, c.CompileP20, c.CompileP80 = 10.5, 9.5, 11.5, 5, 4.9, 5.1
		}), UseEager, Noise, false, "torch.compile is faster"},
		// per call decides for an eager model: compile's host overhead makes it slower per call
		{"compile faster on GPU time only, eager model: ship per call", with(func(c *bench.Case) {
			perCall(c)
			c.CompileUs, c.CompileP20, c.CompileP80 = 8, 7.9, 8.1
		}), UseEager, Ship, true, "on GPU time: torch.compile is faster: use it"},
		{"the same under CUDA graphs: use compile", with(func(c *bench.Case) {
			perCall(c)
			c.CompileUs, c.CompileP20, c.CompileP80 = 8, 7.9, 8.1
		}), UseGraphs, UseCompile, true, "torch.compile of the chain is 1.25× faster"},
		{"compile faster per call, eager model: use compile", with(func(c *bench.Case) {
			perCall(c)
			c.CompileWallUs, c.CompileWallSpread = 9, []float64{8.9, 9.1}
		}), UseEager, UseCompile, true, "torch.compile of the chain is 1.33× faster"},
		{"failed", with(func(c *bench.Case) { c.Correct = false }), UseEager, Failed, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := speedup(tc.c, tc.use)
			if s.Verdict != tc.verdict {
				t.Errorf("verdict %q, want %q (notes %q)", s.Verdict, tc.verdict, s.Notes)
			}
			if s.FasterThanEager() != tc.offered {
				t.Errorf("FasterThanEager %v, want %v", s.FasterThanEager(), tc.offered)
			}
			notes := strings.Join(s.Notes, "; ")
			if tc.note != "" && !strings.Contains(notes, tc.note) {
				t.Errorf("notes %q lack %q", notes, tc.note)
			}
			if s.Verdict == UseCompile && strings.Count(notes+string(s.Verdict), "torch.compile is faster") > 1 {
				t.Errorf("verdict and notes repeat it: %q / %q", s.Verdict, notes)
			}
		})
	}
	// the summary and the folder status name it
	r := &bench.Result{Cases: []bench.Case{with(func(c *bench.Case) { c.Name = "k"; c.CompileUs, c.CompileP20, c.CompileP80 = 8.1, 8.0, 8.2 })}}
	sp := Speedups(r)
	if c := benchStatus(sp, GenFolder{Name: "k"}); !strings.Contains(c.Text, string(UseCompile)) {
		t.Errorf("folder status %q does not say to use torch.compile", c.Text)
	}
	if md := string(render(t, Markdown, Inputs{Bench: r})); !strings.Contains(md, "1 "+string(UseCompile)) || strings.Contains(md, "1 ship") {
		t.Errorf("the summary does not count the case as %q:\n%s", UseCompile, md)
	}
}
