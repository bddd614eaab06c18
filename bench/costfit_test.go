package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/trace"
)

// The cost model's fit (docs/cost-model.md): its free constants are fitted on the benchmark
// cases of half of the shared H200 traces and checked on the other half and on the
// re-measured anchors.
//
//	go test ./bench -run TestCostFit -fit.update
//
// re-extracts the cases from the shared traces (traces/h200 of the shared folder, internal/shared)
// and docs/benchmarks/h200.json into testdata/costfit/cases.json, refits, and rewrites
// docs/benchmarks/cost-fit.md; without the flag the test refits from cases.json and checks that
// the page and patterns.DefaultCostModel agree with the fit.
var fitUpdate = flag.Bool("fit.update", false, "re-extract the cost fit's cases from the shared H200 traces, refit, rewrite docs/benchmarks/cost-fit.md")

const (
	halfFit     = "fit"
	halfHeldOut = "held out"
)

// fitSplit assigns each trace to a half, by model (a model's traces stay together, so no
// held-out case shares its model with a fitted one): GPT-2, nn.TransformerEncoder and the MLP
// blocks are fitted; BERT, Llama and ConvNeXt held out. Both halves have pointwise, row and
// GEMM cases, decode-size and large ones; rmsnorm_pyops and swiglu occur only in the held-out
// half.
var fitSplit = map[string]string{
	"gpt2_train_bf16":            halfFit,
	"gpt2_infer_fp16_b1":         halfFit,
	"gpt2_train_sdpa_stack":      halfFit,
	"torchnn_encoder_train_bf16": halfFit,
	"mlp_blocks_train_bf16":      halfFit,
	"mlp_blocks_infer_fp32":      halfFit,
	"bert_train_bf16":            halfHeldOut,
	"llama_train_bf16":           halfHeldOut,
	"llama_infer_fp16":           halfHeldOut,
	"convnext_tiny_train_bf16":   halfHeldOut,
}

// fitCase is one measured trace case with what the cost model reads of it.
type fitCase struct {
	Name        string               `json:"name"`   // the case in docs/benchmarks/h200.json
	Traces      []string             `json:"traces"` // the traces it was found in (the first one's figures)
	Half        string               `json:"half"`
	Shape       patterns.Shape       `json:"shape"`
	Calibration patterns.Calibration `json:"calibration"`
	Timing      string               `json:"timing"` // how its fused time was taken (cudagraph: back to back)
	Launches    int                  `json:"launches"`
	MeasuredUs  float64              `json:"measured_us"` // fused GPU time per call
}

// fitParam is one free constant of the model and the range searched. A CostModel reads a
// zero field as "the default", so a range that would start at 0 starts at zeroish.
const zeroish = 1e-9

// fitParam is one free constant of the model and the range searched.
type fitParam struct {
	name   string
	field  func(*patterns.CostModel) *float64
	lo, hi float64
}

var fitParams = []fitParam{
	{"FusedEfficiency", func(m *patterns.CostModel) *float64 { return &m.FusedEfficiency }, 0.6, 1.1},
	{"RowEfficiency", func(m *patterns.CostModel) *float64 { return &m.RowEfficiency }, 0.5, 1.1},
	{"RowL2Share", func(m *patterns.CostModel) *float64 { return &m.RowL2Share }, zeroish, 1},
	{"WarmReadShare", func(m *patterns.CostModel) *float64 { return &m.WarmReadShare }, zeroish, 1},
	{"RowKernelUs", func(m *patterns.CostModel) *float64 { return &m.RowKernelUs }, zeroish, 3},
	{"GraphGapUs", func(m *patterns.CostModel) *float64 { return &m.GraphGapUs }, zeroish, 2},
	{"GemmRatio16", func(m *patterns.CostModel) *float64 { return &m.GemmRatio16 }, 0.7, 1.6},
	{"GemmRatio32", func(m *patterns.CostModel) *float64 { return &m.GemmRatio32 }, 0.5, 3},
	{"EpilogueOverhead", func(m *patterns.CostModel) *float64 { return &m.EpilogueOverhead }, zeroish, 1},
}

const fitDevice = "NVIDIA H200"

// predictFit is the model's fused GPU time for a trace case: the estimate from its trace's
// calibration, plus the graph's gap per launch for a case timed back to back.
func predictFit(cm patterns.CostModel, c fitCase) float64 {
	s := c.Shape
	s.Warm = c.Timing == "cudagraph"
	us, ok := cm.Calibrated(c.Calibration).FusedUs(fitDevice, s)
	if !ok {
		return math.NaN()
	}
	if c.Timing == "cudagraph" {
		us += cm.GraphGapUs * float64(max(c.Launches, 1))
	}
	return us
}

// fitLoss is the mean |ln(predicted/measured)| over cases: relative, symmetric, not led by
// the largest cases.
func fitLoss(cm patterns.CostModel, cases []fitCase) float64 {
	var s float64
	for _, c := range cases {
		s += math.Abs(math.Log(predictFit(cm, c) / c.MeasuredUs))
	}
	return s / float64(len(cases))
}

// fitModel searches each parameter in turn over 61 points of its range, keeping the best,
// for six rounds, from cm: deterministic, and enough for a loss this smooth in few
// parameters. Each fitted value is rounded to 3 significant digits.
func fitModel(cm patterns.CostModel, cases []fitCase) patterns.CostModel {
	for round := 0; round < 6; round++ {
		for _, p := range fitParams {
			best, bestLoss := *p.field(&cm), fitLoss(cm, cases)
			for i := 0; i <= 60; i++ {
				v := p.lo + (p.hi-p.lo)*float64(i)/60
				*p.field(&cm) = v
				if l := fitLoss(cm, cases); l < bestLoss-1e-12 {
					best, bestLoss = v, l
				}
			}
			*p.field(&cm) = best
		}
	}
	for _, p := range fitParams {
		f := p.field(&cm)
		*f, _ = strconv.ParseFloat(strconv.FormatFloat(*f, 'g', 3, 64), 64)
	}
	return cm
}

type fitStats struct {
	n              int
	median, within float64 // median |error|, share within +-25%
}

func errorStats(errs []float64) fitStats {
	a := make([]float64, len(errs))
	within := 0
	for i, e := range errs {
		a[i] = math.Abs(e)
		if a[i] <= 0.25 {
			within++
		}
	}
	slices.Sort(a)
	s := fitStats{n: len(a)}
	if len(a) > 0 {
		s.median = a[len(a)/2]
		if len(a)%2 == 0 {
			s.median = (a[len(a)/2-1] + a[len(a)/2]) / 2
		}
		s.within = float64(within) / float64(len(a))
	}
	return s
}

func (s fitStats) String() string {
	return fmt.Sprintf("%d cases: median |error| %.1f%%, %.0f%% within ±25%%", s.n, 100*s.median, 100*s.within)
}

// anchorsFile holds the 34 anchor cases re-measured after the timing fix, none from a trace.
const anchorsFile = "../docs/benchmarks/h200-anchors-2026-12-01b.json"

func TestCostFit(t *testing.T) {
	casesFile := filepath.Join("testdata", "costfit", "cases.json")
	if *fitUpdate {
		cases, err := extractFitCases(shared.Require(t, "traces", "h200"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.MarshalIndent(cases, "", "  ")
		if err := os.WriteFile(casesFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(casesFile)
	if err != nil {
		t.Fatal(err)
	}
	var cases []fitCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	var train, held []fitCase
	for _, c := range cases {
		if c.Half == halfFit {
			train = append(train, c)
		} else {
			held = append(held, c)
		}
	}
	if len(train) < 20 || len(held) < 20 {
		t.Fatalf("fit %d cases, held out %d: too few", len(train), len(held))
	}
	fitted := fitModel(fitStart(), train)
	page := fitPage(fitted, train, held, t)
	pagePath := filepath.Join("..", "docs", "benchmarks", "cost-fit.md")
	if *fitUpdate {
		if err := os.WriteFile(pagePath, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(pagePath)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != page {
		t.Errorf("%s is not what the fit gives now: run go test ./bench -run TestCostFit -fit.update", pagePath)
	}
	def := patterns.DefaultCostModel()
	for _, p := range fitParams {
		if got, w := *p.field(&def), *p.field(&fitted); got != w {
			t.Errorf("DefaultCostModel().%s = %v, the fit gives %v: set it in patterns/cost.go", p.name, got, w)
		}
	}
}

// fitPage is docs/benchmarks/cost-fit.md: the split, the fitted constants, the errors of each
// half and of the anchors, and every held-out case.
func fitPage(cm patterns.CostModel, train, held []fitCase, t *testing.T) string {
	var w strings.Builder
	w.WriteString("# The cost model's fit (generated)\n\n")
	w.WriteString("Written by `go test ./bench -run TestCostFit -fit.update` (bench/costfit_test.go); what it\n")
	w.WriteString("means and how the split was chosen: [docs/cost-model.md](../cost-model.md). Predicted and\n")
	w.WriteString("measured: the fused kernel's GPU time per call (`fused_us`), not the per-call wall time.\n\n")
	traces := map[string][]string{}
	for tr, h := range fitSplit {
		traces[h] = append(traces[h], tr)
	}
	w.WriteString("| half | traces | cases |\n|---|---|---:|\n")
	for _, h := range []string{halfFit, halfHeldOut} {
		slices.Sort(traces[h])
		n := len(train)
		if h == halfHeldOut {
			n = len(held)
		}
		fmt.Fprintf(&w, "| %s | %s | %d |\n", h, strings.Join(traces[h], ", "), n)
	}
	w.WriteString("\n## Fitted constants\n\n| constant | value |\n|---|---:|\n")
	for _, p := range fitParams {
		fmt.Fprintf(&w, "| %s | %g |\n", p.name, *p.field(&cm))
	}
	errs := func(cs []fitCase) []float64 {
		var e []float64
		for _, c := range cs {
			e = append(e, predictFit(cm, c)/c.MeasuredUs-1)
		}
		return e
	}
	anchors, aerrs := anchorErrors(cm, t)
	w.WriteString("\n## Error\n\n")
	fmt.Fprintf(&w, "- fitted half: %s\n", errorStats(errs(train)))
	fmt.Fprintf(&w, "- **held-out half: %s**\n", errorStats(errs(held)))
	fmt.Fprintf(&w, "- anchors re-measured after the timing fix (no trace; device-table bandwidth): %s\n", errorStats(aerrs))
	w.WriteString("\n## Held-out cases\n\n| case | traces | timing | measured µs | predicted µs | error |\n|---|---|---|---:|---:|---:|\n")
	he := errs(held)
	for i, c := range held {
		fmt.Fprintf(&w, "| `%s` | %s | %s | %.2f | %.2f | %+.0f%% |\n", c.Name, strings.Join(c.Traces, ", "), c.Timing,
			c.MeasuredUs, predictFit(cm, c), 100*he[i])
	}
	w.WriteString("\n## Anchors\n\n| case | timing | measured µs | predicted µs | error |\n|---|---|---:|---:|---:|\n")
	for i, c := range anchors {
		fmt.Fprintf(&w, "| `%s` | %s | %.2f | %.2f | %+.0f%% |\n", c.Name, c.Timing["fused"], c.FusedUs, c.PredictedUs, 100*aerrs[i])
	}
	w.WriteString("\n## Fitted-half cases\n\n| case | traces | timing | measured µs | predicted µs | error |\n|---|---|---|---:|---:|---:|\n")
	te := errs(train)
	for i, c := range train {
		fmt.Fprintf(&w, "| `%s` | %s | %s | %.2f | %.2f | %+.0f%% |\n", c.Name, strings.Join(c.Traces, ", "), c.Timing,
			c.MeasuredUs, predictFit(cm, c), 100*te[i])
	}
	return w.String()
}

// fitStart is where the search starts (fixed, so that the fit does not depend on the current
// defaults): the constants of 2026-11-29, fitted by hand on all 87 cases, and none of the L2
// shares.
func fitStart() patterns.CostModel {
	m := patterns.DefaultCostModel()
	m.FusedEfficiency, m.RowEfficiency, m.RowKernelUs, m.GraphGapUs = 0.92, 0.92, 0.5, 0.45
	m.GemmRatio16, m.GemmRatio32, m.EpilogueOverhead = 1.04, 2.1, 0.25
	m.RowL2Share, m.WarmReadShare = zeroish, zeroish
	return m
}

// anchorErrors predicts the re-measured anchors (forward cases) with cm through
// bench.Predict, the path a benchmark without a trace takes.
func anchorErrors(cm patterns.CostModel, t *testing.T) ([]Case, []float64) {
	b, err := os.ReadFile(anchorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	var kept []Case
	for _, c := range r.Cases {
		if c.Correct && (c.Mode == "" || c.Mode == "forward") && c.FusedUs > 0 {
			c.PredictedUs, c.PredictedFrom, c.PredictedGapUs = 0, "", 0
			kept = append(kept, c)
		}
	}
	r.Cases = kept
	Predict(&r, cm)
	var errs []float64
	for _, c := range r.Cases {
		errs = append(errs, c.PredictedUs/c.FusedUs-1)
	}
	return r.Cases, errs
}

// extractFitCases finds every measured case of docs/benchmarks/h200.json in the shared H200
// traces (by its folder name without the hash, which codegen derives from the case) and
// records what the cost model reads of it there.
func extractFitCases(traces string) ([]fitCase, error) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "benchmarks", "h200.json"))
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	byPrefix := map[string]Case{}
	for _, c := range r.Cases {
		byPrefix[stripHash(c.Name)] = c
	}
	found := map[string]*fitCase{}
	for _, name := range slices.Sorted(maps.Keys(fitSplit)) {
		path := filepath.Join(traces, name+".json.gz")
		tr, err := trace.Open(path)
		if err != nil {
			return nil, err
		}
		ccs, err := patterns.CostCases(tr, patterns.Options{})
		if err != nil {
			return nil, err
		}
		for _, cc := range ccs {
			spec, why := codegen.SpecFromGroup(cc.Shape.Pattern, cc.Group)
			if why != "" || codegen.Validate(spec) != nil {
				continue
			}
			dir, err := codegen.DirName(spec)
			if err != nil {
				return nil, err
			}
			m, ok := byPrefix[stripHash(dir)]
			if !ok {
				continue
			}
			if fc := found[m.Name]; fc != nil {
				if fc.Half != fitSplit[name] {
					return nil, fmt.Errorf("%s: found in traces of both halves (%s, %s)", m.Name, fc.Traces[0], name)
				}
				fc.Traces = append(fc.Traces, name)
				continue
			}
			found[m.Name] = &fitCase{Name: m.Name, Traces: []string{name}, Half: fitSplit[name], Shape: cc.Shape,
				Calibration: cc.Calibration, Timing: m.Timing["fused"], Launches: m.Launches, MeasuredUs: m.FusedUs}
		}
	}
	var out []fitCase
	for _, n := range slices.Sorted(maps.Keys(found)) {
		out = append(out, *found[n])
	}
	return out, nil
}

func stripHash(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		return name[:i]
	}
	return name
}
