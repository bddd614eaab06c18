package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/fuseadvise/fuseadvise/bench"
	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/verify"
)

// Inputs are everything one report is drawn from. Every part may be missing (nil or
// empty); the report then says what is missing instead of guessing.
type Inputs struct {
	Analysis  *patterns.Report // `fuseadvise analyze -format json`
	Trace     *TraceExtra      // the analyze verb's "summary" (top kernels, idle time), when present
	Generated []GenFolder      // one per folder written by `fuseadvise gen`
	Verify    *verify.Result   // `fuseadvise verify -format json`
	Bench     *bench.Result    // `fuseadvise bench` (nil: no GPU run)

	// Scale is the time axis of the HTML's time chart (the speedup chart is linear); the zero
	// value picks one from the data.
	Scale Scale
	// Targets adds to the report (Markdown and HTML) a "Performance targets" section, the
	// check of Bench against the project's targets (Targets), when Bench is present.
	Targets bool
	// Use is how the traced model calls its kernels, which picks the figure each verdict is
	// decided on: per-call time for UseEager (the zero value; GPU time for cases without
	// per-call figures), GPU time for UseGraphs (CUDA graphs, torch.compile). UseFor picks
	// it from the analysis's summary (Trace); the report says which figure decided.
	Use Use
}

// TraceExtra is the "summary" object the analyze verb adds beside the contract's "trace":
// ranks, idle time, launch count and the top kernels and ops by GPU time.
type TraceExtra struct {
	Ranks    int     `json:"ranks,omitempty"`
	IdleUs   float64 `json:"idle_us,omitempty"`
	Launches int     `json:"launches,omitempty"`
	// KernelUs is the GPU time of all kernels; GraphKernelUs of those launched by
	// cudaGraphLaunch, CompiledKernelUs of Inductor's (torch.compile: triton_ kernels).
	KernelUs         float64 `json:"kernel_us,omitempty"`
	GraphKernelUs    float64 `json:"graph_kernel_us,omitempty"`
	CompiledKernelUs float64 `json:"compiled_kernel_us,omitempty"`
	// LaunchMode is how the traced model launched its kernels: "eager", "cuda_graphs" (at
	// least half the kernel time from graph launches) or "compiled" (at least a tenth from
	// Inductor's kernels); "" in analyses from before it was recorded.
	LaunchMode string     `json:"launch_mode,omitempty"`
	TopKernels []NameTime `json:"top_kernels,omitempty"`
	TopOps     []NameTime `json:"top_ops,omitempty"`
}

// Launch modes of TraceExtra.LaunchMode.
const (
	LaunchEager    = "eager"
	LaunchGraphs   = "cuda_graphs"
	LaunchCompiled = "compiled"
)

// LaunchModeOf classifies a trace by where its kernel time came from (TraceExtra.LaunchMode).
func LaunchModeOf(kernelUs, graphUs, compiledUs float64) string {
	switch {
	case kernelUs <= 0:
		return LaunchEager
	case graphUs >= 0.5*kernelUs:
		return LaunchGraphs
	case compiledUs >= 0.1*kernelUs:
		return LaunchCompiled
	}
	return LaunchEager
}

// UseFor is the Use matching a trace summary: GPU time for a model run under CUDA graphs or
// torch.compile, per-call time otherwise (no summary or no recorded mode included).
func UseFor(x *TraceExtra) Use {
	if x != nil && (x.LaunchMode == LaunchGraphs || x.LaunchMode == LaunchCompiled) {
		return UseGraphs
	}
	return UseEager
}

// NameTime is a kernel or op name with its count and total GPU time.
type NameTime struct {
	Name  string  `json:"name"`
	Count int     `json:"count"`
	Us    float64 `json:"gpu_us"`
}

// GenFolder is one generated kernel folder, described by its manifest.json.
type GenFolder struct {
	Dir  string `json:"-"` // where it was read from
	Name string `json:"-"` // the folder's base name
	codegen.Manifest
}

// maxInput bounds the JSON files the loaders read.
const maxInput = 256 << 20

// readJSON decodes the JSON file path into v, rejecting trailing data. Errors name the
// file and, for syntax and type errors, the byte offset.
func readJSON(path string, v any) error {
	b, err := readFile(path)
	if err != nil {
		return err
	}
	return decodeJSON(path, b, v)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(b) > maxInput {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxInput)
	}
	return b, nil
}

func decodeJSON(name string, b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: empty file, want a JSON object", name)
		}
		return jsonError(name, err)
	}
	off := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		rest := b[off:]
		trimmed := bytes.TrimLeft(rest, " \t\r\n")
		return fmt.Errorf("%s: offset %d: data after the JSON object", name, off+int64(len(rest)-len(trimmed)))
	}
	return nil
}

// jsonError describes a decoding error of the file name in JSON's terms: the byte offset,
// the field and what it should hold, never Go's type names.
func jsonError(name string, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("%s: offset %d: invalid JSON: %s", name, se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &te):
		field := ""
		if te.Field != "" {
			field = " field " + te.Field + ":"
		}
		return fmt.Errorf("%s: offset %d:%s got %s, want %s", name, te.Offset, field, jsonValue(te.Value), jsonWant(te.Type))
	}
	return fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "json: "))
}

// jsonValue names the kind of JSON value an UnmarshalTypeError found ("string", "number 1.5", ...).
func jsonValue(v string) string {
	switch {
	case v == "array", v == "object":
		return "an " + v
	case v == "bool":
		return "true or false"
	case strings.HasPrefix(v, "number "):
		return "the number " + strings.TrimPrefix(v, "number ")
	case v == "":
		return "a value"
	}
	return "a " + v
}

// jsonWant names the JSON value a Go type holds.
func jsonWant(t reflect.Type) string {
	if t == nil {
		return "another kind of value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("an integer that fits in %d bits", t.Bits())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return fmt.Sprintf("a non-negative integer that fits in %d bits", t.Bits())
	case reflect.Float32, reflect.Float64:
		return "a number in range"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Pointer:
		return jsonWant(t.Elem())
	}
	return "another kind of value"
}

// A signature is the top-level keys that tell one verb's JSON from another's (and from a
// profiler trace).
type signature struct {
	what string // the command that writes the file
	keys []sigKey
}

type sigKey struct {
	name string
	kind byte // the first byte of the value: '{', '[' or '"'
	null bool // null is allowed too (an empty list written by Go)
}

var (
	analysisSig = signature{"fuseadvise analyze -format json", []sigKey{{"trace", '{', false}, {"opportunities", '[', false}}}
	verifySig   = signature{"fuseadvise verify -format json", []sigKey{{"device", '"', false}, {"folders", '[', true}}}
	benchSig    = signature{"fuseadvise bench", []sigKey{{"gpu", '"', false}, {"cases", '[', true}}}
)

var kindName = map[byte]string{'{': "object", '[': "array", '"': "string"}

// check reports whether b, the file name, is a JSON object with sig's keys. Syntax errors,
// an empty file and trailing data are reported as decodeJSON does.
func (sig signature) check(name string, b []byte) error {
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		return fmt.Errorf("%s: not the JSON of '%s': gzip-compressed (a profiler trace? run 'fuseadvise analyze -format json' on it)", name, sig.what)
	}
	var raw json.RawMessage
	if err := decodeJSON(name, b, &raw); err != nil {
		return err
	}
	var top map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &top) != nil {
		got := "a number"
		switch raw[0] {
		case '[':
			got = "an array"
		case '"':
			got = "a string"
		case 't', 'f':
			got = "true or false"
		case 'n':
			got = "null"
		}
		return fmt.Errorf("%s: not the JSON of '%s': %s, want an object", name, sig.what, got)
	}
	for _, k := range sig.keys {
		v, ok := top[k.name]
		if ok && len(v) > 0 && (v[0] == k.kind || k.null && string(v) == "null") {
			continue
		}
		why := fmt.Sprintf("no %q %s", k.name, kindName[k.kind])
		if _, ok := top["traceEvents"]; ok {
			why = "it is a profiler trace (run 'fuseadvise analyze -format json' on it)"
		} else {
			for _, other := range []signature{analysisSig, verifySig, benchSig} {
				if other.what != sig.what && other.matches(top) {
					why = "it is the JSON of '" + other.what + "'"
				}
			}
		}
		return fmt.Errorf("%s: not the JSON of '%s': %s", name, sig.what, why)
	}
	return nil
}

func (sig signature) matches(top map[string]json.RawMessage) bool {
	for _, k := range sig.keys {
		v := top[k.name]
		if len(v) == 0 || v[0] != k.kind && !(k.null && string(v) == "null") {
			return false
		}
	}
	return true
}

// readSigned reads the JSON file path, checks it has sig's keys, and decodes it into v.
func readSigned(path string, sig signature, v any) ([]byte, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	if err := sig.check(path, b); err != nil {
		return nil, err
	}
	return b, decodeJSON(path, b, v)
}

// LoadAnalysis reads the JSON written by `fuseadvise analyze -format json`: the analysis,
// and the verb's "summary" of the trace (nil when it has none).
func LoadAnalysis(path string) (*patterns.Report, *TraceExtra, error) {
	var a patterns.Report
	b, err := readSigned(path, analysisSig, &a)
	if err != nil {
		return nil, nil, fmt.Errorf("report: analysis: %w", err)
	}
	for i, o := range a.Opportunities {
		if o.Pattern == "" {
			return nil, nil, fmt.Errorf("report: analysis: %s: opportunity %d has no pattern", path, i)
		}
	}
	var extra struct {
		Summary *TraceExtra `json:"summary"`
	}
	if err := json.Unmarshal(b, &extra); err != nil {
		return nil, nil, fmt.Errorf("report: analysis: %w", jsonError(path, err))
	}
	x := extra.Summary
	if x == nil {
		return &a, nil, nil
	}
	if x.Ranks == 0 && x.IdleUs == 0 && x.Launches == 0 && len(x.TopKernels) == 0 && len(x.TopOps) == 0 {
		x = nil
	}
	return &a, x, nil
}

// LoadGenFolder reads dir/manifest.json.
func LoadGenFolder(dir string) (GenFolder, error) {
	var g GenFolder
	path := filepath.Join(dir, "manifest.json")
	if err := readJSON(path, &g); err != nil {
		return g, fmt.Errorf("report: generated folder: %w", err)
	}
	if g.Pattern == "" {
		return g, fmt.Errorf("report: generated folder: %s: no pattern", path)
	}
	g.Dir = dir
	g.Name = filepath.Base(filepath.Clean(dir))
	return g, nil
}

// LoadGenFolders reads the manifests of dirs, in order. A directory without a
// manifest.json but whose subfolders have one (the output folder of `fuseadvise gen`)
// stands for those subfolders, sorted by name.
func LoadGenFolders(dirs ...string) ([]GenFolder, error) {
	var out []GenFolder
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "manifest.json")); err == nil {
			g, err := LoadGenFolder(d)
			if err != nil {
				return nil, err
			}
			out = append(out, g)
			continue
		}
		ents, err := os.ReadDir(d)
		if err != nil {
			return nil, fmt.Errorf("report: generated folder: %w", err)
		}
		var subs []string
		for _, e := range ents {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				if _, err := os.Stat(filepath.Join(d, e.Name(), "manifest.json")); err == nil {
					subs = append(subs, e.Name())
				}
			}
		}
		if len(subs) == 0 {
			return nil, fmt.Errorf("report: generated folder: %s: no manifest.json in it or its subfolders", d)
		}
		sort.Strings(subs)
		for _, s := range subs {
			g, err := LoadGenFolder(filepath.Join(d, s))
			if err != nil {
				return nil, err
			}
			out = append(out, g)
		}
	}
	return out, nil
}

// LoadVerify reads the JSON written by `fuseadvise verify -format json`.
func LoadVerify(path string) (*verify.Result, error) {
	var v verify.Result
	if _, err := readSigned(path, verifySig, &v); err != nil {
		return nil, fmt.Errorf("report: verify: %w", err)
	}
	return &v, nil
}

// LoadBench reads the JSON written by `fuseadvise bench`.
func LoadBench(path string) (*bench.Result, error) {
	var r bench.Result
	if _, err := readSigned(path, benchSig, &r); err != nil {
		return nil, fmt.Errorf("report: bench: %w", err)
	}
	for i, c := range r.Cases {
		if c.Pattern == "" {
			return nil, fmt.Errorf("report: bench: %s: case %d has no pattern", path, i)
		}
		if err := c.CheckLibrary(); err != nil {
			return nil, fmt.Errorf("report: bench: %s: case %d (%s): %v", path, i, c.Name, err)
		}
	}
	return &r, nil
}

// Paths names the files Load reads; empty names are skipped.
type Paths struct {
	Analysis  string   // analyze JSON
	Generated []string // generated folders, or folders of them
	Verify    string   // verify JSON
	Bench     string   // bench JSON
}

// Load reads the inputs named by p.
func Load(p Paths) (Inputs, error) {
	var in Inputs
	var err error
	if p.Analysis != "" {
		if in.Analysis, in.Trace, err = LoadAnalysis(p.Analysis); err != nil {
			return in, err
		}
		in.Use = UseFor(in.Trace)
	}
	if len(p.Generated) > 0 {
		if in.Generated, err = LoadGenFolders(p.Generated...); err != nil {
			return in, err
		}
	}
	if p.Verify != "" {
		if in.Verify, err = LoadVerify(p.Verify); err != nil {
			return in, err
		}
	}
	if p.Bench != "" {
		if in.Bench, err = LoadBench(p.Bench); err != nil {
			return in, err
		}
	}
	return in, nil
}
