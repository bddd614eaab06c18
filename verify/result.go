package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// Status is the outcome of one case.
type Status string

// Case outcomes. Only StatusPass and StatusSkipped count as verified.
const (
	StatusPass    Status = "pass"
	StatusFail    Status = "fail"    // an output or gradient differs from the reference
	StatusError   Status = "error"   // the kernel (or its wrapper) raised
	StatusTimeout Status = "timeout" // no result within Options.Timeout; the runner was killed
	StatusRefused Status = "refused" // too large for the interpreter; not run
	StatusSkipped Status = "skipped" // the variant does not apply, or skipped on request
)

// Result is the outcome of one Run.
type Result struct {
	Device  string   `json:"device"` // "cpu (TRITON_INTERPRET=1)" or "cuda"
	Python  string   `json:"python"` // the interpreter's base name, never its path (the JSON lands in PR folders)
	Torch   string   `json:"torch"`
	Triton  string   `json:"triton"`
	Trials  int      `json:"trials"`
	Seed    int64    `json:"seed"`
	Folders []Folder `json:"folders"`
	Seconds float64  `json:"seconds"` // wall time of the whole run
}

// Folder is the outcome for one generated kernel folder.
type Folder struct {
	Dir     string `json:"dir"`
	Pattern string `json:"pattern"`
	Dtype   string `json:"dtype"` // the traced dtype (case.py)
	Error   string `json:"error,omitempty"`
	Planned int    `json:"planned"` // cases the runner planned; fewer ran with FailFast or Only
	Cases   []Case `json:"cases"`

	none string // with Options.Only and no case of it here: the cases the folder has
}

// Case is the outcome of one case: one set of shapes, one dtype, one input variant, run for
// Result.Trials fresh random inputs (Seeds).
type Case struct {
	ID       string    `json:"id"` // name@dtype, unique in its folder
	Pattern  string    `json:"pattern"`
	Name     string    `json:"name"` // traced, adv-129x127, strided, transposed, offset, large, nan-inf, masked-rows, grad, ...
	Shapes   [][]int64 `json:"shapes"`
	Dtype    string    `json:"dtype"`
	Status   Status    `json:"status"`
	MaxAbs   Float     `json:"max_abs"` // max |got - want| over finite pairs; NaN / Inf when they do not match in place
	MaxRel   Float     `json:"max_rel"` // max |got - want| / |want| where |want| > atol
	Atol     float64   `json:"atol,omitempty"`
	Rtol     float64   `json:"rtol,omitempty"`
	Seeds    []int64   `json:"seeds"`
	Mismatch *Mismatch `json:"mismatch,omitempty"`
	Message  string    `json:"message,omitempty"`
	Seconds  float64   `json:"seconds"`
	// Tainted says the case raised or wrote out of bounds, so the runner process that ran it
	// may be corrupted: Run starts a fresh one for the next folder.
	Tainted bool `json:"tainted,omitempty"`
}

// Mismatch is the first element that failed a case.
type Mismatch struct {
	Output string  `json:"output"` // output name (adapter.OUTPUTS) or "grad <input>"
	Index  []int64 `json:"index"`
	Got    string  `json:"got"`
	Want   string  `json:"want"`
	Count  int64   `json:"count"` // mismatching elements in that output
	Numel  int64   `json:"numel"`
	Seed   int64   `json:"seed"`
	Note   string  `json:"note,omitempty"`
}

// Float is a float64 that JSON-encodes NaN and ±Inf as the strings "nan", "inf", "-inf".
type Float float64

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"nan"`), nil
	case math.IsInf(v, 1):
		return []byte(`"inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-inf"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (f *Float) UnmarshalJSON(b []byte) error {
	s := string(b)
	switch s {
	case `"nan"`, `"NaN"`:
		*f = Float(math.NaN())
		return nil
	case `"inf"`, `"Infinity"`:
		*f = Float(math.Inf(1))
		return nil
	case `"-inf"`, `"-Infinity"`:
		*f = Float(math.Inf(-1))
		return nil
	case "null":
		*f = 0
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("bad number %s", s)
	}
	*f = Float(v)
	return nil
}

// Passed reports whether the case verified (or did not apply).
func (c *Case) Passed() bool { return c.Status == StatusPass || c.Status == StatusSkipped }

// Failed reports whether any folder could not be checked or any case did not pass (a
// refused or timed-out case counts as failed: it was not verified). A run with no cases fails.
func (r *Result) Failed() bool {
	n := 0
	for _, f := range r.Folders {
		if f.Error != "" {
			return true
		}
		for _, c := range f.Cases {
			if !c.Passed() {
				return true
			}
			n++
		}
	}
	return n == 0
}

// Counts returns the number of cases per status.
func (r *Result) Counts() map[Status]int {
	m := make(map[Status]int)
	for _, f := range r.Folders {
		for _, c := range f.Cases {
			m[c.Status]++
		}
	}
	return m
}

// Failures returns the cases that did not pass, in order.
func (r *Result) Failures() []Case {
	var out []Case
	for _, f := range r.Folders {
		for _, c := range f.Cases {
			if !c.Passed() {
				out = append(out, c)
			}
		}
	}
	return out
}

// Format is an output format for the verify verb.
type Format string

// Output formats.
const (
	FormatTable    Format = "table"
	FormatMarkdown Format = "markdown"
	FormatJSON     Format = "json"
)

// ParseFormat accepts table (or text), markdown (or md) and json.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "", "table", "text":
		return FormatTable, nil
	case "markdown", "md":
		return FormatMarkdown, nil
	case "json":
		return FormatJSON, nil
	}
	return "", fmt.Errorf("unknown format %q (want table, markdown or json)", s)
}

// Write writes r in format f.
func (r *Result) Write(w io.Writer, f Format) error {
	switch f {
	case FormatJSON:
		return r.WriteJSON(w)
	case FormatMarkdown:
		return r.WriteTable(w, true)
	case FormatTable, "":
		return r.WriteTable(w, false)
	}
	return fmt.Errorf("verify: unknown format %q", string(f))
}

// WriteJSON writes r as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteTable writes one row per case (pattern, case, shape, dtype, max abs / rel error,
// result), then the first mismatch or error of every failed case, then a summary line.
// markdown selects a Markdown table.
func (r *Result) WriteTable(w io.Writer, markdown bool) error {
	opts := []tablewriter.Option{
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithAlignment(tw.Alignment{tw.AlignLeft, tw.AlignLeft, tw.AlignLeft, tw.AlignLeft,
			tw.AlignRight, tw.AlignRight, tw.AlignLeft}),
	}
	if markdown {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewMarkdown()))
	} else {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{Symbols: tw.NewSymbols(tw.StyleLight)})))
	}
	t := tablewriter.NewTable(w, opts...)
	t.Header("Pattern", "Case", "Shape", "Dtype", "Max abs err", "Max rel err", "Result")
	labels := r.labels()
	for i, f := range r.Folders {
		if f.Error != "" {
			if err := t.Append(labels[i], "(folder)", "", f.Dtype, "", "", "ERROR"); err != nil {
				return err
			}
		}
		for _, c := range f.Cases {
			abs, rel := fmtErr(c.MaxAbs), fmtErr(c.MaxRel)
			if c.Status == StatusRefused || c.Status == StatusSkipped || c.Status == StatusTimeout || (c.Status == StatusError && c.Atol == 0) {
				abs, rel = "-", "-"
			}
			if err := t.Append(labels[i], c.Name, fmtShapes(c.Shapes), c.Dtype, abs, rel, resultWord(c.Status)); err != nil {
				return err
			}
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	var b strings.Builder
	bullet := ""
	if markdown {
		bullet = "- "
	}
	failed := false
	for i, f := range r.Folders {
		if f.Error != "" {
			if !failed {
				b.WriteString("\nFailures:\n")
				failed = true
			}
			fmt.Fprintf(&b, "%s%s (%s): %s\n", bullet, labels[i], f.Dir, f.Error)
		}
		for _, c := range f.Cases {
			if c.Passed() {
				continue
			}
			if !failed {
				b.WriteString("\nFailures:\n")
				failed = true
			}
			fmt.Fprintf(&b, "%s%s %s (%s %s): %s\n", bullet, labels[i], c.Name, fmtShapes(c.Shapes), c.Dtype, Describe(c))
			if markdown {
				fmt.Fprintf(&b, "  - again: `%s`\n", r.Rerun(f.Dir, c))
			} else {
				fmt.Fprintf(&b, "  again: %s\n", r.Rerun(f.Dir, c))
			}
		}
	}
	counts := r.Counts()
	total := 0
	for _, n := range counts {
		total += n
	}
	fmt.Fprintf(&b, "\n%d folders, %d cases: %d pass", len(r.Folders), total, counts[StatusPass])
	for _, s := range []Status{StatusFail, StatusError, StatusTimeout, StatusRefused, StatusSkipped} {
		if counts[s] > 0 {
			fmt.Fprintf(&b, ", %d %s", counts[s], s)
		}
	}
	fmt.Fprintf(&b, " (%s; torch %s, triton %s; up to %d trials per case)\n", r.Device, r.Torch, r.Triton, r.Trials)
	_, err := io.WriteString(w, b.String())
	return err
}

// Rerun is the command that runs case c of the folder dir again as this run did: the same
// device, trials and base seed give the same inputs.
func (r *Result) Rerun(dir string, c Case) string {
	cmd := "fuseadvise verify"
	if r.Device == "cuda" {
		cmd += " -gpu"
	}
	if r.Trials != DefaultTrials {
		cmd += fmt.Sprintf(" -trials %d", r.Trials)
	}
	if r.Seed != 0 {
		cmd += fmt.Sprintf(" -seed %d", r.Seed)
	}
	return fmt.Sprintf("%s -case %s %s", cmd, shellWord(c.ID), shellWord(dir))
}

// shellWord is s as one POSIX shell word: as it is when it holds only characters no shell
// treats specially, else single-quoted.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./_-", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Describe says why a case did not pass, in one line: the first mismatching element (output,
// index, got, want, seed) and how many differ, or the error, time-out or refusal message.
func Describe(c Case) string {
	var parts []string
	if m := c.Mismatch; m != nil {
		idx := make([]string, len(m.Index))
		for i, v := range m.Index {
			idx[i] = strconv.FormatInt(v, 10)
		}
		s := fmt.Sprintf("%s: %d of %d elements differ (atol=%g, rtol=%g); first at [%s]: got %s, want %s (seed %d)",
			m.Output, m.Count, m.Numel, c.Atol, c.Rtol, strings.Join(idx, ", "), m.Got, m.Want, m.Seed)
		if m.Note != "" {
			s += "; " + m.Note
		}
		parts = append(parts, s)
	}
	if c.Message != "" {
		parts = append(parts, c.Message)
	}
	if len(parts) == 0 {
		parts = append(parts, string(c.Status))
	}
	return strings.Join(parts, "; ")
}

// labels names each folder in the table: its pattern, plus the folder name when several
// folders share a pattern.
func (r *Result) labels() []string {
	n := make(map[string]int)
	for _, f := range r.Folders {
		n[f.Pattern]++
	}
	out := make([]string, len(r.Folders))
	for i, f := range r.Folders {
		p := f.Pattern
		if p == "" {
			p = filepath.Base(f.Dir)
		} else if n[f.Pattern] > 1 {
			p += " [" + filepath.Base(f.Dir) + "]"
		}
		out[i] = p
	}
	return out
}

func resultWord(s Status) string {
	switch s {
	case StatusPass:
		return "pass"
	case StatusSkipped:
		return "skipped"
	}
	return strings.ToUpper(string(s))
}

func fmtErr(f Float) string {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	case v == 0:
		return "0"
	}
	return strconv.FormatFloat(v, 'e', 1, 64)
}

func fmtShapes(shapes [][]int64) string {
	parts := make([]string, len(shapes))
	for i, s := range shapes {
		d := make([]string, len(s))
		for j, v := range s {
			d[j] = strconv.FormatInt(v, 10)
		}
		parts[i] = strings.Join(d, "x")
		if len(s) == 0 {
			parts[i] = "()"
		}
	}
	return strings.Join(parts, ", ")
}
