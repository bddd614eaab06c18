package codegen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/internal/safefile"
	"github.com/fuseadvise/fuseadvise/templates"
)

// FormatVersion is written into manifest.json; it changes when the folder layout does.
const FormatVersion = 1

// copied lists the files copied unchanged: folder name -> embedded template path ("%s" is
// the pattern).
var copied = []struct{ name, from string }{
	{"kernel.py", "%s/kernel.py"},
	{"reference.py", "%s/reference.py"},
	{"adapter.py", "%s/adapter.py"},
	{"fa_testing.py", "_common/fa_testing.py"},
	{"test_generated.py", "_common/test_generated.py"},
	{"bench.py", "_common/bench.py"},
	{"pytest.ini", "_common/pytest.ini"},
}

// Render returns the folder's files (name -> content) for spec, after Validate.
func Render(spec Spec) (map[string][]byte, error) {
	s, err := resolve(spec)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte)
	for _, c := range copied {
		from := c.from
		if strings.Contains(from, "%s") {
			from = fmt.Sprintf(from, s.Pattern)
		}
		b, err := templates.Read(from)
		if err != nil {
			return nil, fmt.Errorf("codegen: %s: template %s: %v", s.Pattern, from, err)
		}
		out[c.name] = b
	}
	// Only enums from the validated tables reach case.py; check again, belt and braces.
	for _, w := range []string{s.Pattern, s.Dtype, s.Params.Approximate, s.Params.MaskKind, s.Params.Casting} {
		if w != "" && !safeWord(w) {
			return nil, fmt.Errorf("codegen: %s: unsafe value %s", s.Pattern, strconv.Quote(w))
		}
	}
	out["case.py"] = casePy(s)
	names := make([]string, 0, len(out)+2)
	for n := range out {
		names = append(names, n)
	}
	names = append(names, "manifest.json", "README.md")
	sort.Strings(names)
	m, err := manifest(s, names)
	if err != nil {
		return nil, err
	}
	out["manifest.json"] = m
	out["README.md"] = readme(s)
	return out, nil
}

// Write renders spec into the folder dir. dir must not exist unless force is set, in which
// case it is replaced if it is a folder fuseadvise wrote (internal/safefile's marker). The
// folder is written under a temporary name beside dir and renamed into place, so dir is
// never seen half-written.
func Write(dir string, spec Spec, force bool) error {
	files, err := Render(spec)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	err = safefile.Dir(dir, force, func(tmp string) error {
		for _, n := range names {
			if err := writeFile(filepath.Join(tmp, n), files[n]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("codegen: %v", err)
	}
	return nil
}

func writeFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pyFloat prints a finite float as a Python float literal.
func pyFloat(v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// safeWord reports whether s is a plain word: ASCII letters, digits, '_' and '-'.
func safeWord(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return s != ""
}

// pyStr prints a plain word (checked by safeWord in Render) as a Python string literal.
func pyStr(s string) string { return `"` + s + `"` }

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// param is one parameter: its name, its Python literal and its JSON value.
type param struct {
	name string
	py   string
	json any
}

func params(s Spec) []param {
	info := patternTable[s.Pattern]
	p := s.Params
	var out []param
	if info.approximate {
		out = append(out, param{"approximate", pyStr(p.Approximate), p.Approximate})
	}
	if info.bias {
		out = append(out, param{"has_bias", pyBool(p.HasBias), p.HasBias})
	}
	if info.mask {
		out = append(out, param{"mask_kind", pyStr(p.MaskKind), p.MaskKind})
		var fill string
		switch p.MaskFill {
		case "-inf":
			fill = `float("-inf")`
		case "min":
			fill = pyStr("min")
		default:
			v, _ := strconv.ParseFloat(p.MaskFill, 64) // checked by resolve
			fill = pyFloat(v)
		}
		out = append(out, param{"mask_fill", fill, p.MaskFill})
		out = append(out, param{"scale", pyFloat(p.Scale), p.Scale})
	}
	if info.eps {
		out = append(out, param{"eps", pyFloat(p.Eps), p.Eps})
	}
	if info.p {
		out = append(out, param{"p", pyFloat(p.P), p.P})
	}
	if info.casting {
		out = append(out, param{"casting", pyStr(p.Casting), p.Casting})
	}
	if info.residual && p.ResidualDtype != "" { // written only when set: same-dtype cases keep their text
		out = append(out, param{"residual_dtype", pyStr(p.ResidualDtype), p.ResidualDtype})
	}
	if info.mask && p.MaskDtype != "" {
		out = append(out, param{"mask_dtype", pyStr(p.MaskDtype), p.MaskDtype})
	}
	if info.outDtype && p.OutDtype != "" {
		out = append(out, param{"out_dtype", pyStr(p.OutDtype), p.OutDtype})
	}
	return out
}

func casePy(s Spec) []byte {
	var b bytes.Buffer
	b.WriteString("# Generated by fuseadvise codegen from validated numbers and enums. Do not edit.\n")
	b.WriteString("# The traced case this folder's kernel was generated for (see docs/templates.md).\n\n")
	b.WriteString("PATTERN = " + pyStr(s.Pattern) + "\n")
	b.WriteString("DTYPE = " + pyStr(s.Dtype) + "\n")
	b.WriteString("SHAPES = [")
	for i, sh := range s.Shapes {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("[")
		for j, d := range sh {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.FormatInt(d, 10))
		}
		b.WriteString("]")
	}
	b.WriteString("]\n")
	b.WriteString("PARAMS = {\n")
	for _, p := range params(s) {
		b.WriteString("    " + pyStr(p.name) + ": " + p.py + ",\n")
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// Manifest is the content of a generated folder's manifest.json: what was generated, from
// where, and the commands that check and time it. Later stages (report, pr) read it back.
type Manifest struct {
	Format      int            `json:"format"`
	Pattern     string         `json:"pattern"`
	Dtype       string         `json:"dtype"`
	TorchDtype  string         `json:"torch_dtype"`
	Shapes      [][]int64      `json:"shapes"`
	Params      map[string]any `json:"params"`
	Source      ManifestSource `json:"source"`
	EstSavingUs float64        `json:"est_saving_us"`
	EstFusedUs  float64        `json:"est_fused_us,omitempty"` // one call, as the cost model estimates it
	Files       []string       `json:"files"`
	Run         ManifestRun    `json:"run"`
}

// ManifestSource is where the opportunity was found (data from the trace, never code).
type ManifestSource struct {
	Trace string `json:"trace"`
	Site  string `json:"site"`
}

// ManifestRun holds the commands that check and time a generated folder.
type ManifestRun struct {
	Interpreter string `json:"interpreter"`
	GPU         string `json:"gpu"`
	Bench       string `json:"bench"`
}

var runCmds = ManifestRun{
	Interpreter: "TRITON_INTERPRET=1 python -m pytest -q .",
	GPU:         "python -m pytest -q -m gpu .",
	Bench:       "python bench.py",
}

func manifest(s Spec, files []string) ([]byte, error) {
	ps := make(map[string]any)
	for _, p := range params(s) {
		ps[p.name] = p.json
	}
	m := Manifest{
		Format: FormatVersion, Pattern: s.Pattern, Dtype: s.Dtype, TorchDtype: dtypes[s.Dtype],
		Shapes: s.Shapes, Params: ps, Source: ManifestSource{s.Source.Trace, s.Source.Site},
		EstSavingUs: s.EstSavingUs, EstFusedUs: s.EstFusedUs, Files: files, Run: runCmds,
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("codegen: manifest: %v", err)
	}
	return append(b, '\n'), nil
}

// usage is the README's swap-in snippet per pattern (static text: no spec data in it).
var usage = map[string]string{
	"bias_gelu":        "from kernel import BiasGELU\ny = BiasGELU(approximate)(x, bias)        # was F.gelu(x + bias, approximate=...)",
	"gelu_pyops":       "from kernel import NewGELU\ny = NewGELU()(x)                         # was HF NewGELUActivation / 0.5*x*(1+tanh(...))",
	"linear_gelu":      "from kernel import LinearGELU\nlayer = LinearGELU.from_linear(linear, approximate)  # was F.gelu(linear(x))\ny = layer(x)",
	"mask_softmax":     "from kernel import MaskSoftmax\ny = MaskSoftmax(scale=..., mask_kind=..., p=...)(scores, mask)  # was softmax(masked_fill(scores*scale, mask, fill))",
	"layernorm_linear": "from kernel import LayerNormLinear\nlayer = LayerNormLinear.from_modules(layer_norm, linear)  # was linear(layer_norm(x))\ny = layer(x)",
	"add_layernorm":    "from kernel import AddLayerNorm\ns, y = AddLayerNorm.from_layer_norm(layer_norm)(x, residual)  # was s = x + residual; y = layer_norm(s)",
	"dropout_add":      "from kernel import DropoutAdd\ny = DropoutAdd(p)(x, residual, bias)     # was residual + dropout(x + bias, p)",
	"rmsnorm_pyops":    "from kernel import RMSNorm\nnorm = RMSNorm.from_module(llama_rms_norm)  # was LlamaRMSNorm\ny = norm(x)",
	"swiglu":           "from kernel import SwiGLU\ny = SwiGLU()(gate, up)                   # was F.silu(gate) * up",
}

func readme(s Spec) []byte {
	var b bytes.Buffer
	b.WriteString("# Fused kernel: " + s.Pattern + " (" + s.Dtype + ")\n\n")
	b.WriteString("Generated by `fuseadvise gen`. `kernel.py` is the pattern's Triton template, unchanged;\n")
	b.WriteString("`case.py` holds the traced shapes, dtype and parameters; `reference.py` is the eager chain\n")
	b.WriteString("it replaces. The source of this opportunity and its estimated saving are in `manifest.json`.\n\n")
	b.WriteString("## Check it\n\n")
	b.WriteString("    TRITON_INTERPRET=1 python -m pytest -q .   # CPU, Triton interpreter, small shapes\n")
	b.WriteString("    python -m pytest -q -m gpu .                # on a GPU, the traced shapes too\n")
	b.WriteString("    python bench.py                             # GPU: fused vs eager vs torch.compile, JSON\n\n")
	b.WriteString("## Swap it in\n\n")
	b.WriteString("Copy `kernel.py` next to the model code (it needs only torch and triton), then:\n\n")
	for _, l := range strings.Split(usage[s.Pattern], "\n") {
		b.WriteString("    " + l + "\n")
	}
	b.WriteString("\nThe module's docstring says which parts have a backward. Benchmark before shipping: a\n")
	b.WriteString("speedup below 1.0x in `bench.py` means do not ship.\n\n")
	b.WriteString("## Source (data from the trace, JSON-escaped)\n\n")
	src, _ := json.Marshal(ManifestSource{s.Source.Trace, s.Source.Site})
	b.WriteString("    " + string(src) + "\n")
	fmt.Fprintf(&b, "\nEstimated saving: %s us.\n", strconv.FormatFloat(s.EstSavingUs, 'f', 1, 64))
	return b.Bytes()
}
