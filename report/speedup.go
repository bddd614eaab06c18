package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/bench"
)

// Verdict is the report's advice for one benchmarked case.
type Verdict string

// The verdicts, from worst to best.
const (
	Failed    Verdict = "failed"      // the GPU check against the reference failed
	NotTimed  Verdict = "not timed"   // no fused or no eager time
	DoNotShip Verdict = "do not ship" // slower than eager (speedup < 1.0x)
	// UseCompile: measurably faster than eager, but torch.compile of the chain is measurably
	// faster still (on the same basis): use torch.compile rather than the kernel.
	UseCompile Verdict = "torch.compile is faster: use it"
	// UseLibrary: the kernel would ship (or torch.compile would be advised), but a library
	// call (SDPA, FlexAttention, F.rms_norm, ...) is measurably faster still: use it.
	UseLibrary Verdict = "a library call is faster: use it"
	Review     Verdict = "review" // speedup > 10x: too good to trust without a look
	Noise      Verdict = "noise"  // the difference from eager is within the p20-p80 spread
	Ship       Verdict = "ship"   // measurably faster than eager (and not slower than torch.compile)
)

// Thresholds of the verdicts.
const (
	ReviewAbove = 10.0 // speedups above this are flagged for review
	ShipAtLeast = 1.0  // speedups below this are marked "do not ship"
)

// Basis is the figure a verdict is decided on.
type Basis string

const (
	OnGPUTime Basis = "GPU time" // CUDA-graph replays: the kernels alone, as under CUDA graphs or torch.compile
	OnPerCall Basis = "per call" // plain calls back to back: the host's overhead included, as an eager model pays it
)

// Use is how the traced model calls its kernels; it picks the basis of the verdicts.
type Use int

const (
	// UseEager: plain calls, one launch after another (the default: the analysis does not
	// record whether a trace ran under CUDA graphs). Verdicts on per-call time, where
	// measured; on GPU time for results without it.
	UseEager Use = iota
	// UseGraphs: under CUDA graphs (or torch.compile's): verdicts on GPU time.
	UseGraphs
)

// Speedup is one benchmarked case with the figures the report derives from it.
type Speedup struct {
	Case  bench.Case
	Label string // the folder name, or the pattern
	Sub   string // dtype and main shape

	VsEager      float64 // eager / fused GPU-time medians; 0 when either is missing
	VsCompile    float64 // compile / fused GPU-time medians; 0 when either is missing
	EagerNoise   bool    // |eager - fused| is less than the wider p20-p80 spread of the two, or the repeats' ranges overlap or nearly (bench.Noise)
	CompileNoise bool    // the same against torch.compile
	// Per call: the baseline's per-call wall time over the fused one (0 when either is
	// missing), and whether the repeats' ranges overlap or nearly (bench.Noise).
	WallVsEager      float64
	WallVsCompile    float64
	WallEagerNoise   bool
	WallCompileNoise bool
	FloorPct         float64 // floor / fused, in percent; 0 when unknown
	CopyPct          float64 // a plain copy of the same bytes / fused, in percent; 0 when unknown
	PredErrPct       float64 // (predicted - fused) / fused, in percent; valid when HasPred
	HasPred          bool

	// Verdict is the case's verdict: CallVerdict when Basis is OnPerCall, else GPUVerdict.
	Verdict     Verdict
	Basis       Basis
	GPUVerdict  Verdict // on GPU time
	CallVerdict Verdict // on per-call wall time; "" when not measured
	Notes       []string

	// Recommended is the measured-fastest way to run the chain, among the fused kernel,
	// torch.compile and the library ops (recommend), on the verdict's basis; zero for a case
	// not timed. Alternatives are the options it is compared with in Recommendation.
	Recommended  Option
	Alternatives []Option
}

// Speedups derives the report's figures for every case of r, in order, with verdicts for
// UseEager (SpeedupsFor).
func Speedups(r *bench.Result) []Speedup { return SpeedupsFor(r, UseEager) }

// SpeedupsFor derives the report's figures for every case of r, in order, with verdicts on
// the figure that matches use: per-call time for UseEager (where measured), GPU time for
// UseGraphs.
func SpeedupsFor(r *bench.Result, use Use) []Speedup {
	if r == nil {
		return nil
	}
	out := make([]Speedup, 0, len(r.Cases))
	for _, c := range r.Cases {
		out = append(out, speedup(c, use))
	}
	return out
}

// hasPerCall reports whether any case of sp has per-call figures.
func hasPerCall(sp []Speedup) bool {
	for _, s := range sp {
		if c := &s.Case; pos(c.FusedWallUs) || pos(c.EagerWallUs) || pos(c.CompileWallUs) {
			return true
		}
	}
	return false
}

// VsEagerDecided is the speedup over eager on the verdict's basis, and whether it is noise.
func (s *Speedup) VsEagerDecided() (float64, bool) {
	if s.Basis == OnPerCall {
		return s.WallVsEager, s.WallEagerNoise
	}
	return s.VsEager, s.EagerNoise
}

func pos(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// noise reports whether medians a and b differ by less than the wider of their p20-p80
// spreads. Without quantiles the spread is zero and nothing is noise.
func noise(a, a20, a80, b, b20, b80 float64) bool {
	sa, sb := a80-a20, b80-b20
	if !pos(sa) {
		sa = 0
	}
	if !pos(sb) {
		sb = 0
	}
	return math.Abs(a-b) < math.Max(sa, sb)
}

func speedup(c bench.Case, use Use) Speedup {
	s := Speedup{Case: c, Label: c.Name, Sub: c.Dtype + " " + shapeString(c.Shape)}
	if s.Label == "" {
		s.Label = c.Pattern
	}
	if !c.Forward() {
		s.Label += " [" + c.Mode + "]"
	}
	timed := c.Error == "" && pos(c.FusedUs)
	if timed && pos(c.EagerUs) {
		s.VsEager = c.EagerUs / c.FusedUs
		s.EagerNoise = noise(c.FusedUs, c.FusedP20, c.FusedP80, c.EagerUs, c.EagerP20, c.EagerP80) ||
			bench.Noise(c.FusedUs, c.EagerUs, c.FusedSpread, c.EagerSpread)
	}
	if timed && pos(c.CompileUs) {
		s.VsCompile = c.CompileUs / c.FusedUs
		s.CompileNoise = noise(c.FusedUs, c.FusedP20, c.FusedP80, c.CompileUs, c.CompileP20, c.CompileP80) ||
			bench.Noise(c.FusedUs, c.CompileUs, c.FusedSpread, c.CompileSpread)
	}
	if timed && pos(c.FloorUs) {
		s.FloorPct = 100 * c.FloorUs / c.FusedUs
	}
	// a copy of a GEMM chain's bytes bounds nothing: its floor is the arithmetic
	if timed && pos(c.CopyUs) && !gemmPattern(c.Pattern) {
		s.CopyPct = 100 * c.CopyUs / c.FusedUs
	}
	if timed && pos(c.PredictedUs) {
		s.HasPred = true
		s.PredErrPct = 100 * (c.PredictedUs - c.FusedUs) / c.FusedUs
	}
	if timed && pos(c.FusedWallUs) && pos(c.EagerWallUs) {
		s.WallVsEager = c.EagerWallUs / c.FusedWallUs
		s.WallEagerNoise = bench.Noise(c.FusedWallUs, c.EagerWallUs, c.FusedWallSpread, c.EagerWallSpread)
	}
	if timed && pos(c.FusedWallUs) && pos(c.CompileWallUs) {
		s.WallVsCompile = c.CompileWallUs / c.FusedWallUs
		s.WallCompileNoise = bench.Noise(c.FusedWallUs, c.CompileWallUs, c.FusedWallSpread, c.CompileWallSpread)
	}
	var gpuNote, callNote string
	switch {
	case !c.Correct:
		s.GPUVerdict = Failed
		if c.Error != "" {
			s.Notes = append(s.Notes, "error: "+c.Error)
		} else {
			s.Notes = append(s.Notes, "the GPU check against the reference failed")
		}
	case !timed || s.VsEager == 0:
		s.GPUVerdict = NotTimed
		if c.Error != "" {
			s.Notes = append(s.Notes, "error: "+c.Error)
		}
	default:
		s.GPUVerdict, gpuNote = judge(s.VsEager, s.EagerNoise, s.VsCompile, s.CompileNoise, "the p20-p80 spread")
	}
	if c.Correct && s.WallVsEager > 0 {
		s.CallVerdict, callNote = judge(s.WallVsEager, s.WallEagerNoise, s.WallVsCompile, s.WallCompileNoise, "the repeats' spread")
	}
	// the verdict on the figure that matches how the model runs; the other one beside it
	var note string
	s.Verdict, s.Basis, note = s.GPUVerdict, OnGPUTime, gpuNote
	other, on, otherVs, otherNoise := s.CallVerdict, "per call", s.WallVsEager, s.WallEagerNoise
	if use == UseEager && s.CallVerdict != "" {
		s.Verdict, s.Basis, note = s.CallVerdict, OnPerCall, callNote
		other, on, otherVs, otherNoise = s.GPUVerdict, "on GPU time", s.VsEager, s.EagerNoise
	}
	if note != "" {
		s.Notes = append(s.Notes, note)
	}
	if other != "" && other != s.Verdict && other != NotTimed {
		s.Notes = append(s.Notes, fmt.Sprintf("%s: %s (%s vs eager)", on, other, speedupCell(otherVs, otherNoise)))
	}
	// torch.compile faster on a figure whose verdict does not already say so
	if s.VsCompile > 0 && s.VsCompile < 1 && !s.CompileNoise && !(s.Basis == OnGPUTime && s.Verdict == UseCompile) {
		s.Notes = append(s.Notes, "torch.compile is faster")
	}
	if s.WallVsCompile > 0 && s.WallVsCompile < 1 && !s.WallCompileNoise && !(s.Basis == OnPerCall && s.Verdict == UseCompile) {
		s.Notes = append(s.Notes, "torch.compile is faster per call")
	}
	if timed && pos(c.FusedHostUs) && c.FusedHostUs > c.FusedUs {
		s.Notes = append(s.Notes, fmt.Sprintf("host-bound: a fused call takes %s µs to return, its kernels %s µs", fmtUs(c.FusedHostUs), fmtUs(c.FusedUs)))
	}
	if pos(c.GemmOnlyUs) && timed {
		s.Notes = append(s.Notes, fmt.Sprintf("GEMM alone %s µs (%s of fused)", fmtUs(c.GemmOnlyUs), fmtPct(100*c.GemmOnlyUs/c.FusedUs)))
	}
	if c.Launches > 0 && c.EagerLaunches > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("launches %d -> %d", c.EagerLaunches, c.Launches))
	}
	if c.CUDAGraph {
		s.Notes = append(s.Notes, "timed in a CUDA graph")
	}
	s.Notes = append(s.Notes, libraryNote(&c)...)
	recommend(&s)
	return s
}

// judge is the verdict of a correct, timed case from its speedups over eager and over
// torch.compile on one basis (vsCompile 0: not measured) and whether each is within noise
// (spread names the noise), with a note explaining it ("" for ship). A kernel measurably
// faster than eager but measurably slower than torch.compile is UseCompile, whatever its
// speedup over eager: the advice is torch.compile, not the kernel.
func judge(vs float64, isNoise bool, vsCompile float64, compileNoise bool, spread string) (Verdict, string) {
	compileFaster := vsCompile > 0 && vsCompile < 1 && !compileNoise
	switch {
	case vs < ShipAtLeast:
		if isNoise {
			return DoNotShip, "slower than eager within noise: no gain"
		}
		return DoNotShip, ""
	case vs > ReviewAbove && !compileFaster:
		return Review, fmt.Sprintf("speedup above %g×: check the baseline and the shapes", ReviewAbove)
	case isNoise:
		return Noise, "faster than eager by less than " + spread
	case compileFaster:
		return UseCompile, fmt.Sprintf("torch.compile of the chain is %s faster than the kernel", fmtX(1/vsCompile))
	}
	return Ship, ""
}

// FasterThanEager reports whether the case was measured faster than the eager chain, beyond
// noise, on the figure its verdict is decided on: what a kernel must show to be offered for
// swapping in (Ship, Review, UseCompile and UseLibrary cases).
func (s *Speedup) FasterThanEager() bool {
	switch s.Verdict {
	case Ship, Review, UseCompile, UseLibrary:
		return true
	}
	return false
}

// Tally counts speedups by verdict.
func tally(ss []Speedup) map[Verdict]int {
	m := make(map[Verdict]int)
	for _, s := range ss {
		m[s.Verdict]++
	}
	return m
}

// verdictOrder lists the verdicts in the order summaries give them.
var verdictOrder = []Verdict{Ship, UseCompile, UseLibrary, Noise, Review, DoNotShip, NotTimed, Failed}

// Formatting shared by the renderers.

// bigNum is the magnitude from which numbers are printed with three significant digits
// and an exponent (1.23e+06) instead of all their digits: a bench median of 1e308 would
// otherwise fill a table cell with 309 digits.
const bigNum = 1e6

// fixed prints v with prec decimals, or as %.3g from bigNum on, so that its width is
// bounded; NaN and infinities print as "?".
func fixed(v float64, prec int) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "?"
	case math.Abs(v) >= bigNum:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// shortest prints v with as few digits as read it back, as %.3g beyond bigNum or below
// 0.001.
func shortest(v float64) string {
	if a := math.Abs(v); a >= bigNum || a != 0 && a < 1e-3 {
		return fixed(v, 0)
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if len(s) > 12 { // 0.30000000000000004
		s = strconv.FormatFloat(v, 'g', 6, 64)
	}
	return s
}

// fmtUs prints a time in microseconds with three significant digits or more (%.3g below
// 0.001 and from bigNum on).
func fmtUs(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fixed(v, 0)
	case a >= 10:
		return fixed(v, 1)
	case a >= 1:
		return fixed(v, 2)
	case a != 0 && a < 1e-3:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return fixed(v, 3)
}

func fmtX(v float64) string {
	if v >= 100 {
		return fixed(v, 0) + "×"
	}
	return fixed(v, 2) + "×"
}

func fmtPct(v float64) string {
	if math.Abs(v) >= 10 {
		return fixed(v, 0) + "%"
	}
	return fixed(v, 1) + "%"
}

func fmtSignedPct(v float64) string {
	s := fmtPct(v)
	if v >= 0 {
		s = "+" + s
	}
	return s
}

// fmtSci prints an error magnitude.
func fmtSci(v float64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'e', 1, 64)
}

func shapeString(d []int64) string {
	if len(d) == 0 {
		return "[]"
	}
	parts := make([]string, len(d))
	for i, x := range d {
		parts[i] = strconv.FormatInt(x, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func shapesString(ds [][]int64) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = shapeString(d)
	}
	return strings.Join(parts, " ")
}

// speedupCell is a speedup with its noise mark, "" when unknown.
func speedupCell(v float64, isNoise bool) string {
	if v == 0 {
		return "-"
	}
	s := fmtX(v)
	if isNoise {
		s += " (noise)"
	}
	return s
}

// timeCell is "median (p20-p80)".
func timeCell(med, p20, p80 float64) string {
	if !pos(med) {
		return "-"
	}
	if pos(p20) && pos(p80) {
		return fmtUs(med) + " (" + fmtUs(p20) + "-" + fmtUs(p80) + ")"
	}
	return fmtUs(med)
}
