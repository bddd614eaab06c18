package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fuseadvise/fuseadvise/bench"
)

// LibraryNames are the library ops the report and the PR name, by the harness's key (the
// adapters' library_ops): the exact call, from this fixed table. An op of a result that is
// not in it is left out of the tables and the recommendation: nothing a case holds is
// written into a report or a PR as a call to make.
var LibraryNames = map[string]string{
	"sdpa_flash":     "F.scaled_dot_product_attention (flash)",
	"sdpa_efficient": "F.scaled_dot_product_attention (memory-efficient)",
	"sdpa_cudnn":     "F.scaled_dot_product_attention (cuDNN)",
	"sdpa_math":      "F.scaled_dot_product_attention (math)",
	"flex":           "flex_attention (FlexAttention)",
	"rms_norm":       "F.rms_norm",
	"addmm_gelu":     "torch._addmm_activation(use_gelu=True)",
	// a generic chain that starts at a GEMM: its other form (templates/_generic/adapter.py)
	"cublas_pointwise": "cuBLAS GEMM + the generated pointwise kernel (kernel.gemm_cublas)",
}

// sdpaBackends are the SDPA backends by the bench's sdpa_backend, as the tables show them.
var sdpaBackends = map[string]string{"flash": "flash", "efficient": "memory-efficient", "cudnn": "cuDNN", "math": "math"}

// Option is one way to run a case's chain, with its measured time on the verdict's basis.
type Option struct {
	Key  string // "fused", "eager", "compile", or a LibraryNames key
	Name string // as the report writes it: "the fused kernel", "torch.compile", "F.rms_norm", ...
	Us   float64
	// the noise bounds of Us: the p20-p80 quantiles (GPU time only) and the repeats' spread
	P20, P80 float64
	Spread   []float64
}

// Short is the option's name in a list of times ("fused", "compile", "eager", or the call).
func (o Option) Short() string {
	switch o.Key {
	case "fused", "eager", "compile":
		return o.Key
	}
	return o.Name
}

// noiseOf reports whether options a and b differ by less than their noise (bench.Noise and
// the p20-p80 rule the verdicts use).
func noiseOf(a, b Option) bool {
	return noise(a.Us, a.P20, a.P80, b.Us, b.P20, b.P80) || bench.Noise(a.Us, b.Us, a.Spread, b.Spread)
}

// options lists the timed ways to run s's chain on the figure its verdict is decided on
// (per-call wall time or GPU time): the fused kernel, the eager chain, torch.compile and each
// library op of LibraryNames that ran.
func options(s *Speedup) []Option {
	c := &s.Case
	perCall := s.Basis == OnPerCall
	var out []Option
	add := func(key, name string, us, p20, p80 float64, spread []float64, wall float64, wallSpread []float64) {
		if perCall {
			us, p20, p80, spread = wall, 0, 0, wallSpread
		}
		if pos(us) {
			out = append(out, Option{Key: key, Name: name, Us: us, P20: p20, P80: p80, Spread: spread})
		}
	}
	add("fused", "the fused kernel", c.FusedUs, c.FusedP20, c.FusedP80, c.FusedSpread, c.FusedWallUs, c.FusedWallSpread)
	add("eager", "the eager chain", c.EagerUs, c.EagerP20, c.EagerP80, c.EagerSpread, c.EagerWallUs, c.EagerWallSpread)
	add("compile", "torch.compile", c.CompileUs, c.CompileP20, c.CompileP80, c.CompileSpread, c.CompileWallUs, c.CompileWallSpread)
	for _, key := range slices.Sorted(maps.Keys(c.Library)) {
		name, known := LibraryNames[key]
		if op := c.Library[key]; known && op.Refused == "" {
			add(key, name, op.Us, op.P20, op.P80, op.Spread, op.WallUs, op.WallSpread)
		}
	}
	return out
}

// recommend sets s.Recommended: the measured-fastest way to run the chain among the fused
// kernel, torch.compile and the library ops, on the verdict's basis, starting from what the
// verdict already decided between the kernel, eager and torch.compile (the kernel for ship and
// review, torch.compile for "torch.compile is faster", else the eager chain, or torch.compile
// where it is measurably faster than eager). A library op replaces that choice only when it is
// measurably faster (beyond the noise of both), so the kernel is kept where it is within
// noise of the fastest. A kernel that would ship but loses to a library op gets the verdict
// UseLibrary. Not set for a case that failed or was not timed.
func recommend(s *Speedup) {
	if s.Verdict == Failed || s.Verdict == NotTimed {
		return
	}
	opts := options(s)
	find := func(key string) (Option, bool) {
		for _, o := range opts {
			if o.Key == key {
				return o, true
			}
		}
		return Option{}, false
	}
	var base Option
	var ok bool
	switch s.Verdict {
	case Ship, Review:
		base, ok = find("fused")
	case UseCompile:
		base, ok = find("compile")
	default: // noise, do not ship: the kernel brings nothing over eager
		base, ok = find("eager")
		if cmp, has := find("compile"); has && (!ok || cmp.Us < base.Us && !noiseOf(cmp, base)) {
			base, ok = cmp, true
		}
	}
	if !ok {
		return
	}
	best := base
	for _, o := range opts {
		if _, lib := LibraryNames[o.Key]; lib && o.Us < best.Us && !noiseOf(o, base) {
			best = o
		}
	}
	s.Recommended = best
	s.Alternatives = nil
	for _, key := range []string{"fused", "compile"} {
		if o, has := find(key); has && key != best.Key {
			s.Alternatives = append(s.Alternatives, o)
		}
	}
	if best.Key != "eager" {
		if o, has := find("eager"); has && base.Key == "eager" {
			s.Alternatives = append(s.Alternatives, o)
		}
	}
	var lib *Option // the fastest other library op, for comparison
	for i, o := range opts {
		if _, is := LibraryNames[o.Key]; is && o.Key != best.Key && (lib == nil || o.Us < lib.Us) {
			lib = &opts[i]
		}
	}
	if lib != nil {
		s.Alternatives = append(s.Alternatives, *lib)
	}
	if _, isLib := LibraryNames[best.Key]; isLib && (s.Verdict == Ship || s.Verdict == Review || s.Verdict == UseCompile) {
		kernel, _ := find("fused")
		s.Verdict = UseLibrary
		s.Notes = append(s.Notes, fmt.Sprintf("%s is %s faster than the kernel", best.Name, fmtX(kernel.Us/best.Us)))
	}
}

// Recommendation is the case's advice as a sentence: "use F.scaled_dot_product_attention
// (cuDNN) — 212 µs vs fused 240 µs, compile 410 µs" ("keep the eager chain" when nothing
// measured beats it); "" when the case was not timed.
func (s *Speedup) Recommendation() string {
	r := s.Recommended
	if r.Key == "" {
		return ""
	}
	unit := " µs"
	if s.Basis == OnPerCall {
		unit = " µs per call"
	}
	verb := "use "
	if r.Key == "eager" {
		verb = "keep "
	}
	out := verb + r.Name + " — " + fmtUs(r.Us) + unit
	var vs []string
	for _, o := range s.Alternatives {
		v := o.Short() + " " + fmtUs(o.Us) + " µs"
		if o.Us < r.Us { // faster, but within noise of the recommended option
			v += " (noise)"
		}
		vs = append(vs, v)
	}
	if len(vs) > 0 {
		out += " vs " + strings.Join(vs, ", ")
	}
	return out
}

// KernelRecommended reports whether the fused kernel is the case's recommended option (the
// fastest measured, or within noise of it): what the PR requires to offer it.
func (s *Speedup) KernelRecommended() bool { return s.Recommended.Key == "fused" }

// hasLibrary reports whether any case of sp has library ops (timed or refused).
func hasLibrary(sp []Speedup) bool {
	for _, s := range sp {
		if len(s.Case.Library) > 0 {
			return true
		}
	}
	return false
}

// libraryColumns says which library columns the speedup table has: SDPA, FlexAttention,
// other library ops, each where any case has it timed.
func libraryColumns(sp []Speedup) (sdpa, flex, other bool) {
	for _, s := range sp {
		c := &s.Case
		sdpa = sdpa || pos(c.SdpaUs)
		flex = flex || pos(c.FlexUs)
		_, known := LibraryNames[c.LibraryOp]
		other = other || pos(c.LibraryUs) && known
	}
	return sdpa, flex, other
}

// libraryCell is a library op's GPU time, "median (p20-p80)", with what ran in brackets
// ("212 (211-213) cuDNN"); "-" when none ran, the refusals in a note.
func libraryCell(c *bench.Case, key, label string) cell {
	op, ok := c.Library[key]
	if !ok || !pos(op.Us) {
		return numc("-")
	}
	t := timeCell(op.Us, op.P20, op.P80)
	if label != "" {
		t += " " + label
	}
	return numc(t)
}

// libraryNote lists the library ops a case refused, with why ("F.scaled_dot_product_attention
// (flash) refused: No available kernel."), and those timed as a plain call, known names only;
// then whether torch.compile rewrote the chain to SDPA.
func libraryNote(c *bench.Case) []string {
	var out []string
	for _, key := range slices.Sorted(maps.Keys(c.Library)) {
		name, known := LibraryNames[key]
		switch op := c.Library[key]; {
		case !known:
		case op.Refused != "":
			out = append(out, name+" refused: "+op.Refused)
		case op.Timing == "call":
			out = append(out, name+" timed as a plain call (not captured in a CUDA graph: host overhead included)")
		}
	}
	if c.CompileSDPA != nil {
		if *c.CompileSDPA {
			out = append(out, "torch.compile rewrote the chain to SDPA")
		} else {
			out = append(out, "torch.compile left the chain unfused (no SDPA rewrite)")
		}
	}
	return out
}

// libraryReading explains the library columns and the recommendation (for reports whose
// bench has library ops).
func libraryReading() []para {
	return []para{
		{txt("sdpa µs, flex µs, library µs: GPU time of the library calls that compute the same forward, timed beside the kernel the same way (with their backward through autograd in the backward and full modes): "),
			code("F.scaled_dot_product_attention"), txt(" under its fastest backend that accepted the case, FlexAttention, and any other library op ("),
			code("F.rms_norm"), txt(", the cuBLASLt GELU epilogue); a call that refused the case, or whose output differed from the chain's, is named in the notes with why.")},
		{txt("recommended: the measured-fastest way to run the chain among the fused kernel, torch.compile and the library calls, on the verdict's figure; a faster option replaces the kernel only when it is faster beyond the noise of both (the rule of (noise) above), so a kernel within noise of the fastest is kept and the faster time is marked (noise). The verdict \"" + string(UseLibrary) + "\" marks a kernel that is faster than eager but measurably slower than a library call; the PR offers a kernel only where it is the recommended option.")},
	}
}
