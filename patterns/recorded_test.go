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

// countMismatches lists where r's counts differ from e's, catalog patterns first, each key in
// either side once, in order; nil when they agree.
func countMismatches(r *Report, e recordedExpect) []string {
	pats, generic := reportCounts(r)
	var out []string
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
				out = append(out, fmt.Sprintf("%s %s: got %d, want %d", kind, k, got[k], want[k]))
			}
		}
	}
	cmp("pattern", pats, e.Instances)
	cmp("generic", generic, e.Generic)
	return out
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
func recordedMismatches(dir, name string, e recordedExpect, withET bool) ([]string, error) {
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
	return countMismatches(r, e), nil
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
			for _, name := range slices.Sorted(maps.Keys(exp)) {
				t.Run(strings.TrimSuffix(name, ".json.gz"), func(t *testing.T) {
					mm, err := recordedMismatches(dir, name, exp[name], withET)
					if err != nil {
						t.Fatal(err)
					}
					for _, m := range mm {
						t.Error(m)
					}
				})
			}
		})
	}
}

// TestRecordedCounts: on every recorded trace, detection from the Kineto trace alone finds
// the forward instances of every catalog pattern and every generic chain that the execution
// trace's exact dataflow gives (EXPECTED.json). Skipped while a set is not recorded.
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
		t.Errorf("the right counts: mismatches %q, error %v", mm, err)
	}
	bad := recordedExpect{Instances: maps.Clone(mlp.Instances)}
	bad.Instances["add_layernorm"] = 12
	if mm, err := recordedMismatches(dir, name, bad, false); err != nil || !slices.Equal(mm, []string{"pattern add_layernorm: got 9, want 12"}) {
		t.Errorf("a wrong count: mismatches %q, error %v", mm, err)
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
