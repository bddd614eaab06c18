package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/bench"
)

// Inputs are everything one report is drawn from. Every part may be missing (nil or
// empty); the report then says what is missing instead of guessing.
type Inputs struct {
	Analysis  *Analysis     // `fuseadvise analyze -format json`
	Generated []GenFolder   // one per folder written by `fuseadvise gen`
	Verify    *VerifyResult // `fuseadvise verify` results
	Bench     *bench.Result // `fuseadvise bench` results (nil: no GPU run)

	// Scale is the chart's time axis; the zero value picks one from the data.
	Scale Scale
}

// Analysis is the JSON that `fuseadvise analyze -format json` writes (the contract in the
// pattern catalog): a trace summary and the opportunities, best first. Fields the
// analyzer adds beyond the contract are kept when the report knows them and ignored
// otherwise.
type Analysis struct {
	Trace         TraceInfo     `json:"trace"`
	Opportunities []Opportunity `json:"opportunities"`
	Notes         []string      `json:"notes,omitempty"`
}

// TraceInfo is the analysis's "trace" object.
type TraceInfo struct {
	Path       string     `json:"path"`
	Device     string     `json:"device"`
	Ranks      int        `json:"ranks,omitempty"`
	Steps      int        `json:"steps"`
	GPUBusyUs  float64    `json:"gpu_busy_us"`
	IdleUs     float64    `json:"idle_us,omitempty"`
	Kernels    int        `json:"kernels"`
	Launches   int        `json:"launches,omitempty"`
	TopKernels []NameTime `json:"top_kernels,omitempty"`
	TopOps     []NameTime `json:"top_ops,omitempty"`
}

// NameTime is a kernel or op name with its count and total GPU time.
type NameTime struct {
	Name  string  `json:"name"`
	Count int     `json:"count"`
	Us    float64 `json:"gpu_us"`
}

// Opportunity is one ranked fusion opportunity.
type Opportunity struct {
	Pattern           string       `json:"pattern"`
	Instances         int          `json:"instances"`
	BackwardInstances int          `json:"backward_instances,omitempty"`
	GPUTimeUs         float64      `json:"gpu_time_us"`
	EstFusedUs        float64      `json:"est_fused_us"`
	EstSavingUs       float64      `json:"est_saving_us"`
	SavingPct         float64      `json:"saving_pct_of_gpu_busy"`
	Shapes            []ShapeGroup `json:"shapes,omitempty"`
	Chain             Text         `json:"chain,omitempty"`  // the op chain, e.g. "aten::add -> aten::gelu"
	Source            Text         `json:"source,omitempty"` // the Python source line, when the trace has stacks
	Advice            Text         `json:"advice,omitempty"`
}

// ShapeGroup is the instances of an opportunity that share input shapes and dtype.
type ShapeGroup struct {
	Dims      [][]int64 `json:"dims"`
	Dtype     string    `json:"dtype"`
	Instances int       `json:"instances"`
}

// Text is a free-form string from the analysis. It decodes from a JSON string, a list of
// strings (joined), or any other JSON value (kept as compact JSON), so that the report
// reads an analyzer whose field shapes are still settling. It is data from the trace:
// every renderer escapes it.
type Text string

// UnmarshalJSON implements json.Unmarshaler.
func (t *Text) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*t = ""
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*t = Text(s)
	case b[0] == '[':
		var ss []string
		if json.Unmarshal(b, &ss) == nil {
			*t = Text(strings.Join(ss, " -> "))
			return nil
		}
		fallthrough
	default:
		if b[0] == '{' {
			// {"file": "model.py", "line": 42, ...} is the likely shape of a source.
			var loc struct {
				File string `json:"file"`
				Line int    `json:"line"`
				Text string `json:"text"`
			}
			if json.Unmarshal(b, &loc) == nil && loc.File != "" {
				s := loc.File
				if loc.Line > 0 {
					s += ":" + strconv.Itoa(loc.Line)
				}
				if loc.Text != "" {
					s += " " + loc.Text
				}
				*t = Text(s)
				return nil
			}
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, b); err != nil {
			return err
		}
		*t = Text(buf.String())
	}
	return nil
}

// GenFolder is one generated kernel folder, described by its manifest.json.
type GenFolder struct {
	Dir         string         `json:"-"` // where it was read from
	Name        string         `json:"-"` // the folder's base name
	Format      int            `json:"format"`
	Pattern     string         `json:"pattern"`
	Dtype       string         `json:"dtype"`
	TorchDtype  string         `json:"torch_dtype"`
	Shapes      [][]int64      `json:"shapes"`
	Params      map[string]any `json:"params"`
	Source      GenSource      `json:"source"`
	EstSavingUs float64        `json:"est_saving_us"`
	Files       []string       `json:"files"`
	Run         GenRun         `json:"run"`
}

// GenSource is where a generated folder's opportunity was found.
type GenSource struct {
	Trace string `json:"trace"`
	Site  string `json:"site"`
}

// GenRun holds the commands that check and time a generated folder.
type GenRun struct {
	Interpreter string `json:"interpreter"`
	GPU         string `json:"gpu"`
	Bench       string `json:"bench"`
}

// VerifyResult is what `fuseadvise verify` writes: one entry per checked case.
type VerifyResult struct {
	Mode    string       `json:"mode,omitempty"` // "interpreter" or "gpu"
	Command string       `json:"command,omitempty"`
	Date    string       `json:"date,omitempty"`
	Cases   []VerifyCase `json:"cases"`
}

// VerifyCase is one verified case of one generated folder.
type VerifyCase struct {
	Pattern   string    `json:"pattern"`
	Name      string    `json:"name,omitempty"` // the generated folder's name
	Case      string    `json:"case"`           // the test case id
	Shape     []int64   `json:"shape,omitempty"`
	Shapes    [][]int64 `json:"shapes,omitempty"`
	Dtype     string    `json:"dtype"`
	MaxAbsErr float64   `json:"max_abs_err"`
	MaxRelErr float64   `json:"max_rel_err"`
	Atol      float64   `json:"atol,omitempty"`
	Rtol      float64   `json:"rtol,omitempty"`
	Pass      bool      `json:"pass"`
	Skipped   bool      `json:"skipped,omitempty"`
	Error     string    `json:"error,omitempty"`
}

// maxInput bounds the JSON files the loaders read.
const maxInput = 256 << 20

// readJSON decodes the JSON file path into v, rejecting trailing data. Errors name the
// file and, for syntax and type errors, the byte offset.
func readJSON(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxInput+1))
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if len(b) > maxInput {
		return fmt.Errorf("%s: larger than %d bytes", path, maxInput)
	}
	return decodeJSON(path, b, v)
}

func decodeJSON(name string, b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return fmt.Errorf("%s: offset %d: invalid JSON: %v", name, se.Offset, err)
		case errors.As(err, &te):
			return fmt.Errorf("%s: offset %d: field %s: cannot hold %s", name, te.Offset, te.Field, te.Value)
		case errors.Is(err, io.EOF):
			return fmt.Errorf("%s: empty file, want a JSON object", name)
		}
		return fmt.Errorf("%s: %v", name, err)
	}
	off := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		rest := b[off:]
		trimmed := bytes.TrimLeft(rest, " \t\r\n")
		return fmt.Errorf("%s: offset %d: data after the JSON object", name, off+int64(len(rest)-len(trimmed)))
	}
	return nil
}

// LoadAnalysis reads the JSON written by `fuseadvise analyze -format json`.
func LoadAnalysis(path string) (*Analysis, error) {
	var a Analysis
	if err := readJSON(path, &a); err != nil {
		return nil, fmt.Errorf("report: analysis: %w", err)
	}
	for i, o := range a.Opportunities {
		if o.Pattern == "" {
			return nil, fmt.Errorf("report: analysis: %s: opportunity %d has no pattern", path, i)
		}
	}
	return &a, nil
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

// LoadVerify reads the JSON written by `fuseadvise verify`.
func LoadVerify(path string) (*VerifyResult, error) {
	var v VerifyResult
	if err := readJSON(path, &v); err != nil {
		return nil, fmt.Errorf("report: verify: %w", err)
	}
	return &v, nil
}

// LoadBench reads the JSON written by `fuseadvise bench`.
func LoadBench(path string) (*bench.Result, error) {
	var r bench.Result
	if err := readJSON(path, &r); err != nil {
		return nil, fmt.Errorf("report: bench: %w", err)
	}
	for i, c := range r.Cases {
		if c.Pattern == "" {
			return nil, fmt.Errorf("report: bench: %s: case %d has no pattern", path, i)
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
		if in.Analysis, err = LoadAnalysis(p.Analysis); err != nil {
			return in, err
		}
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
