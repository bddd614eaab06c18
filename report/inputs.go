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

	// Scale is the chart's time axis; the zero value picks one from the data.
	Scale Scale
}

// TraceExtra is the "summary" object the analyze verb adds beside the contract's "trace":
// ranks, idle time, launch count and the top kernels and ops by GPU time.
type TraceExtra struct {
	Ranks      int        `json:"ranks,omitempty"`
	IdleUs     float64    `json:"idle_us,omitempty"`
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

// LoadAnalysis reads the JSON written by `fuseadvise analyze -format json`: the analysis,
// and the verb's "summary" of the trace (nil when it has none).
func LoadAnalysis(path string) (*patterns.Report, *TraceExtra, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("report: analysis: %w", err)
	}
	var a patterns.Report
	if err := decodeJSON(path, b, &a); err != nil {
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
		return nil, nil, fmt.Errorf("report: analysis: %s: summary: %v", path, err)
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
		if in.Analysis, in.Trace, err = LoadAnalysis(p.Analysis); err != nil {
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
