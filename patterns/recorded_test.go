package patterns

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// recordedSets are the folders of traces recorded for detection checks (docs/recording.md):
// the models never analyzed before (scripts/record_models.py) and the GEMM + pointwise corpus
// (scripts/record_corpus.py). Each holds NAME.json.gz and NAME.et.json.gz per trace and an
// EXPECTED.json written by scripts/expected_counts.py from the execution traces.
var recordedSets = []string{"../testdata/models", "../testdata/corpus"}

// recordedExpect is one trace's entry of a recorded set's EXPECTED.json.
type recordedExpect struct {
	Mode      string         `json:"mode"`
	Steps     int            `json:"steps"`
	Model     string         `json:"model"`
	DType     string         `json:"dtype"`
	Instances map[string]int `json:"forward_instances"` // catalog pattern -> forward instances
	Generic   map[string]int `json:"generic_instances"` // genericKey -> instances
}

// genericKey names a generic chain as scripts/expected_counts.py does: "OPS DTYPE DIMS",
// ops comma-joined, dims x-joined.
func genericKey(c GenericChain) string {
	d := make([]string, len(c.Dims))
	for i, v := range c.Dims {
		d[i] = fmt.Sprint(v)
	}
	return strings.Join(c.Ops, ",") + " " + string(c.DType) + " " + strings.Join(d, "x")
}

// reportCounts is what a report found: forward instances per catalog pattern and per generic
// chain key.
func reportCounts(r *Report) (pats, generic map[string]int) {
	pats, generic = map[string]int{}, map[string]int{}
	for _, o := range r.Opportunities {
		pats[o.Pattern] += o.Instances
	}
	for _, c := range r.GenericChains {
		generic[genericKey(c)] += c.Instances
	}
	return pats, generic
}

// countDiff is one count where a report and EXPECTED.json differ: kind is "pattern" or
// "generic", key the pattern or genericKey.
type countDiff struct {
	kind, key string
	got, want int
}

func (d countDiff) String() string {
	return fmt.Sprintf("%s %s: got %d, want %d", d.kind, d.key, d.got, d.want)
}

// countDiffs lists where r's counts differ from e's, catalog patterns first, each key in
// either side once, in order; nil when they agree.
func countDiffs(r *Report, e recordedExpect) []countDiff {
	pats, generic := reportCounts(r)
	var out []countDiff
	cmp := func(kind string, got, want map[string]int) {
		keys := slices.Sorted(maps.Keys(got))
		for k := range want {
			if _, ok := got[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			if got[k] != want[k] {
				out = append(out, countDiff{kind, k, got[k], want[k]})
			}
		}
	}
	cmp("pattern", pats, e.Instances)
	cmp("generic", generic, e.Generic)
	return out
}

// countMismatches is countDiffs as text; nil when the counts agree.
func countMismatches(r *Report, e recordedExpect) []string {
	var out []string
	for _, d := range countDiffs(r, e) {
		out = append(out, d.String())
	}
	return out
}

// knownDiffs is a recorded set's KINETO_KNOWN.json: where detection from the Kineto trace
// alone is known to differ from the execution trace's counts, and why. Each entry names
// a difference exactly (both counts), so a change in detection, better or worse, fails
// the test until the file says what it finds now.
type knownDiffs struct {
	// Reasons: reason id -> what the Kineto trace lacks there (a sentence).
	Reasons map[string]string `json:"reasons"`
	// Traces: trace file -> "pattern NAME" or "generic KEY" -> the difference.
	Traces map[string]map[string]knownDiff `json:"traces"`
}

type knownDiff struct {
	Kineto int    `json:"kineto"` // what the Kineto trace alone finds
	ET     int    `json:"et"`     // EXPECTED.json's count (the execution trace's)
	Reason string `json:"reason"` // a key of Reasons
}

// loadKnown reads dir/KINETO_KNOWN.json (none: no known differences) and checks that every
// entry gives a defined, non-empty reason and names a trace of exp.
func loadKnown(dir string, exp map[string]recordedExpect) (knownDiffs, error) {
	var k knownDiffs
	b, err := os.ReadFile(filepath.Join(dir, "KINETO_KNOWN.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return k, nil
	}
	if err != nil {
		return k, err
	}
	if err := json.Unmarshal(b, &k); err != nil {
		return k, fmt.Errorf("%s/KINETO_KNOWN.json: %w", dir, err)
	}
	for name, diffs := range k.Traces {
		if _, ok := exp[name]; !ok {
			return k, fmt.Errorf("%s/KINETO_KNOWN.json: %s is not in EXPECTED.json", dir, name)
		}
		for key, d := range diffs {
			if strings.TrimSpace(k.Reasons[d.Reason]) == "" {
				return k, fmt.Errorf("%s/KINETO_KNOWN.json: %s: %s: reason %q is not defined", dir, name, key, d.Reason)
			}
		}
	}
	return k, nil
}

// judge splits a trace's differences into the ones known (with their reasons, for the log)
// and the errors: a difference not known, or known with other counts, and a known
// difference that is no longer there.
func judge(diffs []countDiff, known map[string]knownDiff, reasons map[string]string) (explained, errs []string) {
	seen := map[string]bool{}
	for _, d := range diffs {
		key := d.kind + " " + d.key
		k, ok := known[key]
		switch {
		case !ok:
			errs = append(errs, d.String())
		case k.Kineto != d.got || k.ET != d.want:
			errs = append(errs, fmt.Sprintf("%s (KINETO_KNOWN.json says Kineto %d, execution trace %d)", d, k.Kineto, k.ET))
		default:
			explained = append(explained, fmt.Sprintf("%s: known: %s", d, reasons[k.Reason]))
		}
		seen[key] = true
	}
	for _, key := range slices.Sorted(maps.Keys(known)) {
		if !seen[key] {
			errs = append(errs, fmt.Sprintf("%s: KINETO_KNOWN.json lists a difference that is no longer there (Kineto %d, execution trace %d)", key, known[key].Kineto, known[key].ET))
		}
	}
	return explained, errs
}

// errNoExpected says a recorded set has no EXPECTED.json (its traces are not recorded yet).
var errNoExpected = errors.New("no EXPECTED.json")

// loadRecorded reads dir/EXPECTED.json and checks that it names every trace in dir and only
// those: a trace recorded but not expected, or expected but missing, is an error.
func loadRecorded(dir string) (map[string]recordedExpect, error) {
	b, err := os.ReadFile(filepath.Join(dir, "EXPECTED.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoExpected
	}
	if err != nil {
		return nil, err
	}
	var m map[string]recordedExpect
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s/EXPECTED.json: %w", dir, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%s/EXPECTED.json: no traces", dir)
	}
	onDisk, err := filepath.Glob(filepath.Join(dir, "*.json.gz"))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, p := range onDisk {
		name := filepath.Base(p)
		if strings.HasSuffix(name, ".et.json.gz") {
			continue
		}
		seen[name] = true
		if _, ok := m[name]; !ok {
			return nil, fmt.Errorf("%s: %s is not in EXPECTED.json", dir, name)
		}
	}
	for name, e := range m {
		if !seen[name] {
			return nil, fmt.Errorf("%s/EXPECTED.json: %s: no such trace", dir, name)
		}
		if e.Instances == nil {
			return nil, fmt.Errorf("%s/EXPECTED.json: %s: no forward_instances", dir, name)
		}
	}
	return m, nil
}

// recordedMismatches analyzes dir/name (with its execution trace when withET) and compares
// the counts with e.
func recordedMismatches(dir, name string, e recordedExpect, withET bool) ([]countDiff, error) {
	tr, err := trace.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	opts := Options{}
	if withET {
		et, err := trace.ReadET(filepath.Join(dir, strings.TrimSuffix(name, ".json.gz")+".et.json.gz"))
		if err != nil {
			return nil, err
		}
		opts.ET = map[*trace.Trace]*trace.ExecTrace{tr: et}
	}
	r, err := Analyze([]*trace.Trace{tr}, opts)
	if err != nil {
		return nil, err
	}
	return countDiffs(r, e), nil
}

func checkRecorded(t *testing.T, withET bool) {
	for _, dir := range recordedSets {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			exp, err := loadRecorded(dir)
			if errors.Is(err, errNoExpected) {
				t.Skipf("%s: no recorded traces yet (docs/recording.md says how to record them)", dir)
			}
			if err != nil {
				t.Fatal(err)
			}
			known, err := loadKnown(dir, exp)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range slices.Sorted(maps.Keys(exp)) {
				t.Run(strings.TrimSuffix(name, ".json.gz"), func(t *testing.T) {
					diffs, err := recordedMismatches(dir, name, exp[name], withET)
					if err != nil {
						t.Fatal(err)
					}
					if withET { // the counts come from the execution trace: nothing is excused
						for _, d := range diffs {
							t.Error(d)
						}
						return
					}
					explained, errs := judge(diffs, known.Traces[name], known.Reasons)
					for _, m := range explained {
						t.Log(m)
					}
					for _, m := range errs {
						t.Error(m)
					}
				})
			}
		})
	}
}

// TestRecordedCounts: on every recorded trace, detection from the Kineto trace alone finds
// the forward instances of every catalog pattern and every generic chain that the execution
// trace's exact dataflow gives (EXPECTED.json), except where KINETO_KNOWN.json records the
// difference exactly, with the reason (logged with -v). Skipped while a set is not recorded.
func TestRecordedCounts(t *testing.T) { checkRecorded(t, false) }

// TestRecordedCountsET: the execution trace gives EXPECTED.json's counts (they were computed
// from it: this catches a detector change that moves them).
func TestRecordedCountsET(t *testing.T) { checkRecorded(t, true) }

// TestRecordedCheckFailsOnWrongData: the comparison reports a wrong count, a missing or extra
// pattern, a generic chain of another shape, dtype or op sequence, and a set whose
// EXPECTED.json and traces disagree on what was recorded.
func TestRecordedCheckFailsOnWrongData(t *testing.T) {
	// a synthetic trace with catalog and generic chains
	ops := []op{
		{name: "linear", in: []string{"f32:8x32", "f32:64x32", "f32:64"}},
		{name: "mul", in: []string{"f32:8x64", "=1.702"}},
		{name: "sigmoid", in: []string{"f32:8x64"}},
		{name: "mul", in: []string{"f32:8x64", "f32:8x64"}},
	}
	r, err := Analyze([]*trace.Trace{synth(append(ops, ops...)...)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	right := recordedExpect{Instances: map[string]int{}, Generic: map[string]int{"mul,sigmoid,mul fp32 8x64": 2}}
	for _, o := range r.Opportunities {
		right.Instances[o.Pattern] = o.Instances
	}
	if mm := countMismatches(r, right); mm != nil {
		t.Fatalf("right counts reported as wrong: %v", mm)
	}
	with := func(f func(e *recordedExpect)) recordedExpect {
		e := recordedExpect{Instances: maps.Clone(right.Instances), Generic: maps.Clone(right.Generic)}
		f(&e)
		return e
	}
	wrong := []struct {
		name string
		e    recordedExpect
		want string
	}{
		{"one more instance", with(func(e *recordedExpect) { e.Generic["mul,sigmoid,mul fp32 8x64"] = 3 }),
			"generic mul,sigmoid,mul fp32 8x64: got 2, want 3"},
		{"another shape", with(func(e *recordedExpect) {
			delete(e.Generic, "mul,sigmoid,mul fp32 8x64")
			e.Generic["mul,sigmoid,mul fp32 8x128"] = 2
		}), "generic mul,sigmoid,mul fp32 8x128: got 0, want 2"},
		{"another dtype", with(func(e *recordedExpect) {
			delete(e.Generic, "mul,sigmoid,mul fp32 8x64")
			e.Generic["mul,sigmoid,mul bf16 8x64"] = 2
		}), "generic mul,sigmoid,mul bf16 8x64: got 0, want 2"},
		{"a chain not found", with(func(e *recordedExpect) { e.Generic["sigmoid,mul fp32 8x64"] = 2 }),
			"generic sigmoid,mul fp32 8x64: got 0, want 2"},
		{"a chain found but not expected", with(func(e *recordedExpect) { e.Generic = nil }),
			"generic mul,sigmoid,mul fp32 8x64: got 2, want 0"},
		{"a catalog pattern not found", with(func(e *recordedExpect) { e.Instances["swiglu"] = 4 }),
			"pattern swiglu: got 0, want 4"},
	}
	for _, w := range wrong {
		mm := countMismatches(r, w.e)
		if !slices.Contains(mm, w.want) {
			t.Errorf("%s: mismatches %q, want one %q", w.name, mm, w.want)
		}
	}

	// a folder: the repository's H200 trace of four MLP blocks with its known counts
	dir := t.TempDir()
	src, err := os.ReadFile("../testdata/traces/mlp_blocks_infer_fp32.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	const name = "mlp_blocks_infer_fp32.json.gz"
	if err := os.WriteFile(filepath.Join(dir, name), src, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(m map[string]recordedExpect) {
		t.Helper()
		b, _ := json.Marshal(m)
		if err := os.WriteFile(filepath.Join(dir, "EXPECTED.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := loadRecorded(dir); !errors.Is(err, errNoExpected) {
		t.Errorf("no EXPECTED.json: got %v, want errNoExpected (the test skips)", err)
	}
	mlp := recordedExpect{Instances: map[string]int{"add_layernorm": 9, "dropout_add": 12, "layernorm_linear": 12, "linear_gelu": 12}}
	write(map[string]recordedExpect{name: mlp})
	exp, err := loadRecorded(dir)
	if err != nil {
		t.Fatal(err)
	}
	if mm, err := recordedMismatches(dir, name, exp[name], false); err != nil || mm != nil {
		t.Errorf("the right counts: mismatches %v, error %v", mm, err)
	}
	bad := recordedExpect{Instances: maps.Clone(mlp.Instances)}
	bad.Instances["add_layernorm"] = 12
	if mm, err := recordedMismatches(dir, name, bad, false); err != nil || !slices.Equal(mm, []countDiff{{"pattern", "add_layernorm", 9, 12}}) {
		t.Errorf("a wrong count: mismatches %v, error %v", mm, err)
	}
	if _, err := recordedMismatches(dir, name, mlp, true); err == nil {
		t.Error("with no execution trace beside it: no error")
	}
	write(map[string]recordedExpect{name: mlp, "gone.json.gz": mlp})
	if _, err := loadRecorded(dir); err == nil || !strings.Contains(err.Error(), "gone.json.gz: no such trace") {
		t.Errorf("an expected trace missing: got %v", err)
	}
	write(map[string]recordedExpect{"other.json.gz": mlp})
	if err := os.WriteFile(filepath.Join(dir, "other.json.gz"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadRecorded(dir); err == nil || !strings.Contains(err.Error(), name+" is not in EXPECTED.json") {
		t.Errorf("a recorded trace not expected: got %v", err)
	}
}

// TestRecordedKnownDiffs: a known difference is excused only with its exact counts; another
// count, a difference not listed, a listed one that is gone, an undefined reason and a trace
// not recorded are errors.
func TestRecordedKnownDiffs(t *testing.T) {
	reasons := map[string]string{"rotary": "the slices of q read the newest same-shaped value"}
	known := map[string]knownDiff{
		"generic mul,add fp16 8x64": {Kineto: 2, ET: 0, Reason: "rotary"},
		"pattern attention":         {Kineto: 4, ET: 6, Reason: "rotary"},
	}
	diffs := []countDiff{{"pattern", "attention", 4, 6}, {"generic", "mul,add fp16 8x64", 2, 0}}
	explained, errs := judge(diffs, known, reasons)
	if len(explained) != 2 || errs != nil {
		t.Errorf("the known differences: explained %q, errors %q", explained, errs)
	}
	for _, c := range []struct {
		name  string
		diffs []countDiff
		want  string
	}{
		{"another count", []countDiff{diffs[0], {"generic", "mul,add fp16 8x64", 3, 0}},
			"generic mul,add fp16 8x64: got 3, want 0 (KINETO_KNOWN.json says Kineto 2, execution trace 0)"},
		{"not listed", append(slices.Clone(diffs), countDiff{"generic", "mul,neg fp16 8x64", 1, 0}),
			"generic mul,neg fp16 8x64: got 1, want 0"},
		{"gone", diffs[:1],
			"generic mul,add fp16 8x64: KINETO_KNOWN.json lists a difference that is no longer there (Kineto 2, execution trace 0)"},
	} {
		if _, errs := judge(c.diffs, known, reasons); !slices.Contains(errs, c.want) {
			t.Errorf("%s: errors %q, want one %q", c.name, errs, c.want)
		}
	}

	dir := t.TempDir()
	exp := map[string]recordedExpect{"a.json.gz": {}}
	if k, err := loadKnown(dir, exp); err != nil || k.Traces != nil {
		t.Errorf("no KINETO_KNOWN.json: %v, %v; want no known differences", k, err)
	}
	for _, c := range []struct{ file, want string }{
		{`{"reasons": {}, "traces": {"a.json.gz": {"pattern attention": {"kineto": 1, "et": 2, "reason": "why"}}}}`,
			`reason "why" is not defined`},
		{`{"reasons": {"why": " "}, "traces": {"a.json.gz": {"pattern attention": {"kineto": 1, "et": 2, "reason": "why"}}}}`,
			`reason "why" is not defined`},
		{`{"reasons": {"why": "because"}, "traces": {"b.json.gz": {}}}`, "b.json.gz is not in EXPECTED.json"},
		{`{"reasons": [}`, "KINETO_KNOWN.json"},
	} {
		if err := os.WriteFile(filepath.Join(dir, "KINETO_KNOWN.json"), []byte(c.file), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := loadKnown(dir, exp); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.file, err, c.want)
		}
	}
}

// TestParallelResidualNorms: a parallel-residual block (GPT-NeoX, as in the recorded
// pythia_train_bf16) normalizes one x twice, ln1(x) for the attention and ln2(x) for the MLP.
// From the Kineto trace alone the second LayerNorm's input is x, not the first LayerNorm's
// output (the newest value of its shape): dataflow rule 5. Both norms then read the residual
// add, as the execution trace shows. A norm of a norm's output that nothing read yet (CLIP's
// pre_layrnorm, then the first layer's layer_norm1, as in the shared OWLv2 trace) stays one.
func TestParallelResidualNorms(t *testing.T) {
	ln := op{name: "layer_norm", in: []string{"f32:8x128x768", "=[768]", "f32:768", "f32:768", "=1e-05", "=True"}}
	block := []op{
		{name: "add", in: []string{"f32:8x128x768", "f32:8x128x768", "=1"}}, // x = the residual sum
		ln,
		{name: "linear", in: []string{"f32:8x128x768", "f32:2304x768", "f32:2304"}}, // attention's QKV
		ln,
		{name: "linear", in: []string{"f32:8x128x768", "f32:3072x768", "f32:3072"}}, // the MLP's input
	}
	want := map[string]int{"add_layernorm": 2, "layernorm_linear": 2}
	if got := synthCounts(t, synth(block...)); !maps.Equal(got, want) {
		t.Errorf("parallel residual: %v, want %v", got, want)
	}
	preNorm := []op{
		{name: "add", in: []string{"f32:8x128x768", "f32:8x128x768", "=1"}}, // patch + position embeddings
		ln, // pre_layrnorm
		ln, // layer_norm1 of the first layer: reads pre_layrnorm's output
		{name: "linear", in: []string{"f32:8x128x768", "f32:2304x768", "f32:2304"}},
	}
	want = map[string]int{"add_layernorm": 1, "layernorm_linear": 1}
	if got := synthCounts(t, synth(preNorm...)); !maps.Equal(got, want) {
		t.Errorf("a norm of a fresh norm: %v, want %v", got, want)
	}
}

// TestNormThenMatmulByTransposedWeight: Falcon's Linear is `x @ W.T` (aten::numpy_T, then
// aten::matmul), two activation inputs as far as the Kineto dataflow knows. The matmul reads
// the LayerNorm's output, not the LayerNorm's input: rule 3 (a residual join reads a norm's
// input) is not for GEMMs. Before, the recorded falcon_train_bf16 gave 1 layernorm_linear of 3
// from the Kineto trace alone.
func TestNormThenMatmulByTransposedWeight(t *testing.T) {
	ops := []op{
		{name: "add", in: []string{"f32:4x512x1024", "f32:4x512x1024", "=1"}}, // x
		{name: "layer_norm", in: []string{"f32:4x512x1024", "=[1024]", "f32:1024", "f32:1024", "=1e-05", "=True"}},
		{name: "numpy_T", in: []string{"f32:1152x1024"}},
		{name: "matmul", in: []string{"f32:4x512x1024", "f32:1024x1152"}},
	}
	want := map[string]int{"add_layernorm": 1, "layernorm_linear": 1}
	if got := synthCounts(t, synth(ops...)); !maps.Equal(got, want) {
		t.Errorf("layer_norm, then x @ W.T: %v, want %v", got, want)
	}
}

// TestWrittenNormResidual: a pre-norm block with an RMSNorm written out in ops under autocast
// (HF Llama: weight * (x * rsqrt(mean(x**2) + eps)), fp32 like x) whose output two projections
// read: from the Kineto trace alone the residual add reads x, the norm's input, not the
// norm's output, the newest fp32 value of x's shape (dataflow rule 3, writtenNormInput); the
// weight's mul still reads the product (it finishes the norm). Then the norm's output has the
// projections alone for readers, as the execution trace has it.
func TestWrittenNormResidual(t *testing.T) {
	const x, row = "f32:4x8x16", "f32:4x8x1"
	tr := synth(
		op{name: "add", in: []string{x, x, "=1"}}, // x: the residual stream
		op{name: "pow", in: []string{x, "=2"}},
		op{name: "mean", in: []string{x, "=[-1]", "=True"}},
		op{name: "add", in: []string{row, "=1e-06", "=1"}},
		op{name: "rsqrt", in: []string{row}},
		op{name: "mul", in: []string{x, row}},
		op{name: "mul", in: []string{"f32:16", x}}, // the weight's: the norm's output
		op{name: "linear", in: []string{x, "f32:32x16"}, kids: []op{{name: "to", in: []string{x, "=15"}}}},
		op{name: "linear", in: []string{x, "f32:32x16"}, kids: []op{{name: "to", in: []string{x, "=15"}}}},
		op{name: "add", in: []string{x, "bf16:4x8x16", "=1"}}, // x + f(norm(x))
	)
	g := newGraph(tr)
	g.infer()
	node := func(name string, nth int) int32 {
		for b := range g.nodes {
			if g.name[b] == name {
				if nth == 0 {
					return int32(b)
				}
				nth--
			}
		}
		t.Fatalf("no %s #%d", name, nth)
		return -1
	}
	xs, prod, out, join := node("add", 0), node("mul", 0), node("mul", 1), node("add", 2)
	if got := g.in[join][0]; got != xs {
		t.Errorf("the residual add reads node %d (%s), want x, node %d", got, g.name[got], xs)
	}
	if got := g.in[out][1]; got != prod {
		t.Errorf("the weight's mul reads node %d (%s), want the product, node %d", got, g.name[got], prod)
	}
	if got := len(g.cons[out]); got != 2 {
		t.Errorf("the norm's output has %d readers, want the two projections", got)
	}
}
