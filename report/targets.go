package report

import (
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/fuseadvise/fuseadvise/bench"
	"github.com/fuseadvise/fuseadvise/patterns"
)

// The project's performance targets for generated kernels on the benchmark matrix.
const (
	FloorRatioMax    = 1.11 // memory-bound cases at large shapes: fused <= 1.11x the floor (>= 90% of copy bandwidth)
	BwdFloorRatioMax = 1.15 // training, memory-bound backwards at large shapes (floor >= LargeFloorUs): fused <= 1.15x the backward's floor
	CopyRatioNear    = 1.05 // a floor miss within 1.05x of a plain copy of the same bytes is at the copy ceiling
	LargeFloorUs     = 20.0 // "large": the floor is at least this long (about 85 MB moved on an H200)
	VsCompileMin     = 1.0  // every case at least as fast as torch.compile
	VsCompileGeomean = 1.5  // geometric mean over torch.compile
	VsEagerGeomean   = 2.5  // geometric mean over eager ATen
	GemmRatioMax     = 1.03 // GEMM patterns: fused <= 1.03x the GEMM alone
	DecodeMaxRows    = 32   // decode-size: M <= 32 rows
	DecodeMaxUs      = 6.0  // decode-size: one launch, <= 6 us
	PredErrMax       = 0.20 // every case: |predicted - measured| / measured <= 20%
	PredErrMedianMax = 0.10 // median of |error| <= 10%
	HostMaxUs        = 15.0 // every case with per-call figures: a fused call returns within 15 µs
	WallVsEagerMin   = 1.0  // every case with per-call figures: fused per-call wall time <= eager's
	TrainVsEagerMin  = 2.0  // training ("full": forward + backward), memory-bound cases: >= 2x eager
	TrainVsCompile   = 1.0  // training ("full"), every case: >= 1.0x torch.compile
	LibraryRatioMax  = 1.10 // forward and full, cases SDPA or FlexAttention accept: fused <= 1.10x the fastest of them
)

// gemmPattern reports whether a pattern's fused kernel contains a GEMM.
func gemmPattern(p string) bool { return patterns.IsGEMM(p) }

// memoryBound reports whether a pattern's fused kernel is judged against its memory floor:
// neither a GEMM pattern nor attention (its floor is its FLOPs at the GEMM rate; its targets are
// the library calls, torch.compile and eager). Chains outside the registry (generic) are.
func memoryBound(p string) bool {
	q, ok := patterns.Lookup(p)
	return !ok || (q.Kind != patterns.KindGEMM && q.Kind != patterns.KindAttention)
}

// rows is M: the product of the main input's dims but the last.
func rows(c *bench.Case) int64 {
	if len(c.Shape) == 0 {
		return 0
	}
	m := int64(1)
	for _, d := range c.Shape[:len(c.Shape)-1] {
		m *= d
	}
	return m
}

// Target is one checked target: what was asked, what was measured, and the cases that miss it.
type Target struct {
	Name   string
	Want   string
	Got    string
	Cases  int // cases the target applies to
	Met    bool
	Misses []string
}

// Targets checks r against the performance targets. Cases that failed their GPU check or
// were not timed count as misses of every target they fall under.
func Targets(r *bench.Result) []Target {
	if r == nil {
		return nil
	}
	var floor, compileEach, gemm, decode, pred, host, perCall Target
	floor = Target{Name: "memory-bound, large shapes: fused / floor", Want: fmt.Sprintf("<= %.2fx", FloorRatioMax)}
	compileEach = Target{Name: "every case vs torch.compile", Want: fmt.Sprintf(">= %.1fx", VsCompileMin)}
	gemm = Target{Name: "GEMM patterns: fused / GEMM alone", Want: fmt.Sprintf("<= %.2fx", GemmRatioMax)}
	decode = Target{Name: fmt.Sprintf("decode size (M <= %d): one launch, fused time", DecodeMaxRows), Want: fmt.Sprintf("1 launch, <= %.0f µs", DecodeMaxUs)}
	pred = Target{Name: "predicted vs measured fused time", Want: fmt.Sprintf("each |err| <= %.0f%%, median <= %.0f%%", 100*PredErrMax, 100*PredErrMedianMax)}
	host = Target{Name: "host time of a fused call", Want: fmt.Sprintf("<= %.0f µs", HostMaxUs)}
	perCall = Target{Name: "every case per call vs eager", Want: fmt.Sprintf(">= %.1fx", WallVsEagerMin)}
	var worstHost float64
	minPerCall := math.Inf(1)
	var logC, logE []float64
	var worstFloor, worstGemm, worstDecode, minCompile float64
	minCompile = math.Inf(1)
	var errs []float64
	trainE := Target{Name: "training (forward + backward), memory-bound: vs eager", Want: fmt.Sprintf(">= %.1fx", TrainVsEagerMin)}
	trainC := Target{Name: "training (forward + backward): vs torch.compile", Want: fmt.Sprintf(">= %.1fx", TrainVsCompile)}
	trainM := Target{Name: "training (forward + backward): peak memory vs eager", Want: "<= eager's"}
	trainF := Target{Name: "training, memory-bound backward, large shapes: fused / floor", Want: fmt.Sprintf("<= %.2fx", BwdFloorRatioMax)}
	minTrainE, minTrainC, worstMem, worstBwdFloor := math.Inf(1), math.Inf(1), 0.0, 0.0
	training := false // any backward or full case: the training targets are listed
	lib := Target{Name: "forward and full: fused / fastest of SDPA's backends and FlexAttention", Want: fmt.Sprintf("<= %.2fx", LibraryRatioMax)}
	worstLib := 0.0
	for _, s := range Speedups(r) {
		c := s.Case
		label := s.Label + " (" + s.Sub + ")"
		timed := c.Correct && c.FusedUs > 0
		if best, name := fastestAttentionCall(&c); best > 0 && c.Mode != "backward" {
			lib.Cases++
			ratio := 0.0
			if timed {
				ratio = c.FusedUs / best
				worstLib = max(worstLib, ratio)
			}
			if !timed || ratio > LibraryRatioMax {
				lib.Misses = append(lib.Misses, fmt.Sprintf("%s %sx (%s %s µs)", label, fixed(ratio, 2), name, fmtUs(best)))
			}
		}
		if !c.Forward() {
			// the training targets, on "full" (what a training step runs); "backward" is
			// judged on its own against its floor only (the backward's fewest bytes, or
			// FLOPs, recorded by bench from the adapter's bwd_nbytes)
			training = true
			if c.Mode == "backward" && memoryBound(c.Pattern) && c.FloorUs >= LargeFloorUs {
				trainF.Cases++
				ratio := 0.0
				if timed {
					ratio = c.FusedUs / c.FloorUs
					worstBwdFloor = max(worstBwdFloor, ratio)
				}
				if !timed || ratio > BwdFloorRatioMax {
					trainF.Misses = append(trainF.Misses, floorMiss(label, ratio, timed, &c))
				}
			}
			if c.Mode != "full" {
				continue
			}
			if memoryBound(c.Pattern) {
				trainE.Cases++
				if timed && s.VsEager > 0 {
					minTrainE = min(minTrainE, s.VsEager)
				}
				if !timed || s.VsEager < TrainVsEagerMin && !s.EagerNoise {
					trainE.Misses = append(trainE.Misses, label+" "+fixed(s.VsEager, 2)+"x")
				}
			}
			trainC.Cases++
			if timed && s.VsCompile > 0 {
				minTrainC = min(minTrainC, s.VsCompile)
			}
			if !timed || s.VsCompile < TrainVsCompile && !s.CompileNoise {
				trainC.Misses = append(trainC.Misses, label+" "+fixed(s.VsCompile, 2)+"x")
			}
			if c.FusedPeakBytes > 0 && c.EagerPeakBytes > 0 {
				trainM.Cases++
				ratio := float64(c.FusedPeakBytes) / float64(c.EagerPeakBytes)
				worstMem = max(worstMem, ratio)
				if ratio > 1 {
					trainM.Misses = append(trainM.Misses, label+" "+fixed(ratio, 2)+"x eager's peak")
				}
			}
			continue
		}
		if memoryBound(c.Pattern) && c.FloorUs >= LargeFloorUs {
			floor.Cases++
			ratio := 0.0
			if timed {
				ratio = c.FusedUs / c.FloorUs
				worstFloor = max(worstFloor, ratio)
			}
			if !timed || ratio > FloorRatioMax {
				floor.Misses = append(floor.Misses, floorMiss(label, ratio, timed, &c))
			}
		}
		compileEach.Cases++
		if timed && s.VsCompile > 0 {
			logC = append(logC, math.Log(s.VsCompile))
			minCompile = min(minCompile, s.VsCompile)
		}
		if timed && s.VsEager > 0 {
			logE = append(logE, math.Log(s.VsEager))
		}
		if !timed || s.VsCompile < VsCompileMin && !s.CompileNoise {
			compileEach.Misses = append(compileEach.Misses, label+" "+fixed(s.VsCompile, 2)+"x")
		}
		if gemmPattern(c.Pattern) {
			gemm.Cases++
			ratio := 0.0
			if timed && c.GemmOnlyUs > 0 {
				ratio = c.FusedUs / c.GemmOnlyUs
				worstGemm = max(worstGemm, ratio)
			}
			switch {
			case timed && c.GemmOnlyUs <= 0:
				gemm.Misses = append(gemm.Misses, label+" GEMM alone not measured")
			case ratio == 0 || ratio > GemmRatioMax:
				gemm.Misses = append(gemm.Misses, label+" "+fixed(ratio, 2)+"x")
			}
		}
		if m := rows(&c); m > 0 && m <= DecodeMaxRows {
			decode.Cases++
			if timed {
				worstDecode = max(worstDecode, c.FusedUs)
			}
			if !timed || c.Launches != 1 || c.FusedUs > DecodeMaxUs {
				decode.Misses = append(decode.Misses, fmt.Sprintf("%s %s µs, %d launch(es)", label, fixed(c.FusedUs, 1), c.Launches))
			}
		}
		// per call: only results that measured it (a failed case has none)
		if pos(c.FusedHostUs) {
			host.Cases++
			worstHost = max(worstHost, c.FusedHostUs)
			if c.FusedHostUs > HostMaxUs {
				host.Misses = append(host.Misses, label+" "+fixed(c.FusedHostUs, 1)+" µs")
			}
		}
		if pos(c.FusedWallUs) || pos(c.EagerWallUs) {
			perCall.Cases++
			if s.WallVsEager > 0 {
				minPerCall = min(minPerCall, s.WallVsEager)
			}
			if s.WallVsEager == 0 || s.WallVsEager < WallVsEagerMin && !s.WallEagerNoise {
				perCall.Misses = append(perCall.Misses, label+" "+fixed(s.WallVsEager, 2)+"x")
			}
		}
		if c.PredictedUs > 0 {
			pred.Cases++
			e := 0.0
			if timed {
				e = (c.PredictedUs - c.FusedUs) / c.FusedUs
				errs = append(errs, math.Abs(e))
			}
			if !timed || math.Abs(e) > PredErrMax {
				pred.Misses = append(pred.Misses, label+" "+signed(fixed(100*e, 0), e)+"%")
			}
		}
	}
	geo := func(l []float64) float64 {
		if len(l) == 0 {
			return 0
		}
		s := 0.0
		for _, v := range l {
			s += v
		}
		return math.Exp(s / float64(len(l)))
	}
	floor.Got, floor.Met = "worst "+fixed(worstFloor, 2)+"x", len(floor.Misses) == 0
	if math.IsInf(minCompile, 1) {
		minCompile = 0
	}
	compileEach.Got, compileEach.Met = "worst "+fixed(minCompile, 2)+"x", len(compileEach.Misses) == 0
	gc, ge := geo(logC), geo(logE)
	geoC := Target{Name: "geometric mean vs torch.compile", Want: fmt.Sprintf(">= %.1fx", VsCompileGeomean),
		Got: fmt.Sprintf("%sx over %d cases", fixed(gc, 2), len(logC)), Cases: len(logC), Met: gc >= VsCompileGeomean}
	geoE := Target{Name: "geometric mean vs eager ATen", Want: fmt.Sprintf(">= %.1fx", VsEagerGeomean),
		Got: fmt.Sprintf("%sx over %d cases", fixed(ge, 2), len(logE)), Cases: len(logE), Met: ge >= VsEagerGeomean}
	gemm.Got, gemm.Met = "worst "+fixed(worstGemm, 2)+"x", len(gemm.Misses) == 0
	if worstGemm == 0 {
		gemm.Got = "GEMM alone not measured"
	}
	decode.Got, decode.Met = "worst "+fixed(worstDecode, 1)+" µs", len(decode.Misses) == 0
	med := 0.0
	if len(errs) > 0 {
		slices.Sort(errs)
		med = errs[len(errs)/2]
	}
	pred.Got = "median |err| " + fixed(100*med, 0) + "%"
	pred.Met = len(pred.Misses) == 0 && med <= PredErrMedianMax
	host.Got, host.Met = "worst "+fixed(worstHost, 1)+" µs", len(host.Misses) == 0
	if math.IsInf(minPerCall, 1) {
		minPerCall = 0
	}
	perCall.Got, perCall.Met = "worst "+fixed(minPerCall, 2)+"x", len(perCall.Misses) == 0
	inf0 := func(v float64) float64 {
		if math.IsInf(v, 0) {
			return 0
		}
		return v
	}
	trainE.Got, trainE.Met = "worst "+fixed(inf0(minTrainE), 2)+"x", len(trainE.Misses) == 0
	trainC.Got, trainC.Met = "worst "+fixed(inf0(minTrainC), 2)+"x", len(trainC.Misses) == 0
	trainM.Got, trainM.Met = "worst "+fixed(worstMem, 2)+"x", len(trainM.Misses) == 0
	trainF.Got, trainF.Met = "worst "+fixed(worstBwdFloor, 2)+"x", len(trainF.Misses) == 0
	lib.Got, lib.Met = "worst "+fixed(worstLib, 2)+"x", len(lib.Misses) == 0
	ts := []Target{floor, compileEach, geoC, geoE, gemm, decode, pred, host, perCall}
	if lib.Cases > 0 { // results with SDPA or FlexAttention timed
		ts = append(ts, lib)
	}
	if training { // results with training modes
		ts = append(ts, trainE, trainC, trainM, trainF)
	}
	for i := range ts {
		if ts[i].Cases == 0 {
			ts[i].Got = "-" // nothing measured under this target
		}
	}
	return ts
}

// floorMiss is a floor target's line for case c at ratio fused / floor: a timed case within
// CopyRatioNear of its plain copy of the same bytes is noted as at the copy ceiling.
func floorMiss(label string, ratio float64, timed bool, c *bench.Case) string {
	m := label + " " + fixed(ratio, 2) + "x"
	if timed && pos(c.CopyUs) && c.FusedUs <= CopyRatioNear*c.CopyUs {
		m += " (at the copy ceiling for this size: copy " + fmtUs(c.CopyUs) + " µs)"
	}
	return m
}

// fastestAttentionCall is the GPU time of the fastest of c's SDPA backends and FlexAttention,
// and its name from the fixed table; 0 when neither was timed.
func fastestAttentionCall(c *bench.Case) (float64, string) {
	best, name := 0.0, ""
	if _, known := sdpaBackends[c.SdpaBackend]; known && pos(c.SdpaUs) {
		best, name = c.SdpaUs, LibraryNames["sdpa_"+c.SdpaBackend]
	}
	if pos(c.FlexUs) && (best == 0 || c.FlexUs < best) {
		best, name = c.FlexUs, LibraryNames["flex"]
	}
	return best, name
}

// signed puts a + before s, v's formatted value, when v is not negative.
func signed(s string, v float64) string {
	if v >= 0 && s != "?" {
		return "+" + s
	}
	return s
}

// WriteTargets writes the targets as a markdown table, then each missed target's cases.
func WriteTargets(w io.Writer, r *bench.Result) error {
	ts := Targets(r)
	if ts == nil {
		_, err := fmt.Fprintln(w, "No benchmark results: no target can be checked.")
		return err
	}
	fmt.Fprintln(w, "| target | wanted | measured | cases | met |")
	fmt.Fprintln(w, "|---|---|---|---:|---|")
	for _, t := range ts {
		met := "yes"
		switch {
		case !t.Met && len(t.Misses) > 0:
			met = fmt.Sprintf("**no** (%d of %d)", len(t.Misses), t.Cases)
		case !t.Met:
			met = "**no**"
		}
		if t.Cases == 0 {
			met = "no case"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s |\n", mdText(t.Name), mdText(t.Want), mdText(t.Got), t.Cases, met)
	}
	for _, t := range ts {
		if len(t.Misses) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nMissed — %s (%s):\n\n", mdText(t.Name), mdText(t.Want))
		for _, m := range t.Misses {
			fmt.Fprintf(w, "- %s\n", mdText(m))
		}
	}
	return nil
}
