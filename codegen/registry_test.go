package codegen

import (
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/templates"
)

// templateFiles are the files of a template folder (docs/templates.md): the first three are
// embedded and copied into every generated folder, test_kernel.py is the template's own test.
var templateFiles = []string{"kernel.py", "reference.py", "adapter.py", "test_kernel.py"}

// adapterKinds are the tolerance classes (adapter.py's KIND, fa_testing.TOL) a kernel of
// each registry kind may use.
var adapterKinds = map[patterns.Kind][]string{
	patterns.KindPointwise: {"pointwise"},
	patterns.KindRow:       {"norm", "softmax"},
	patterns.KindGEMM:      {"gemm"},
	patterns.KindAttention: {"softmax", "gemm"},
}

// TestRegistryTemplates checks the registry against the template tree, naming what is
// missing: every entry has its template folder with all its files; every folder has an
// entry; the Python side agrees with the entry's kind and parameter schema (the names
// adapter.py reads, their defaults there, the enum values the template handles).
func TestRegistryTemplates(t *testing.T) {
	for _, problem := range templateProblems(os.DirFS("../templates"), patterns.Catalog()) {
		t.Error(problem)
	}
	// the embedded tree is what gen copies from
	for _, p := range patterns.Catalog() {
		for _, f := range templateFiles[:3] {
			if b, err := templates.Read(p.Template + "/" + f); err != nil || len(b) == 0 {
				t.Errorf("pattern %q: templates/%s/%s is not embedded (templates/templates.go): %v", p.ID, p.Template, f, err)
			}
		}
		if !slices.Contains(Patterns(), p.ID) {
			t.Errorf("pattern %q: codegen.Patterns() lacks it", p.ID)
		}
	}
	var names []string
	for _, f := range fields {
		names = append(names, f.name)
	}
	if !slices.Equal(names, patterns.KernelParamNames) {
		t.Errorf("codegen's parameter fields %v differ from patterns.KernelParamNames %v", names, patterns.KernelParamNames)
	}
}

var (
	reKind       = regexp.MustCompile(`(?m)^KIND\s*=\s*"([a-z_]+)"`)
	reParamRead  = regexp.MustCompile(`params(?:\.get\(|\[)"([a-z_]+)"`)
	reParamDflt  = regexp.MustCompile(`params\.get\("([a-z_]+)",\s*(float\("[^"]*"\)|"[^"]*"|[-+0-9.eE]+)\s*\)`)
	reFloatOfStr = regexp.MustCompile(`^float\("([^"]*)"\)$`)
	// a template without a backward says so in one line: has_backward returns False
	reNoBackward = regexp.MustCompile(`(?m)^def has_backward\(params\):\n    return False$`)
	reTrain      = regexp.MustCompile(`(?m)^def train\(kernel, inputs, params\):`)
)

// templateProblems lists what the template tree and the registry disagree on.
func templateProblems(tree fs.FS, cat []*patterns.Pattern) []string {
	var out []string
	bad := func(p *patterns.Pattern, format string, a ...any) {
		if m := fmt.Sprintf("pattern %q: ", p.ID) + fmt.Sprintf(format, a...); !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	owned := map[string]bool{}
	for _, p := range cat {
		owned[p.Template] = true
		src := map[string]string{}
		for _, f := range templateFiles {
			b, err := fs.ReadFile(tree, p.Template+"/"+f)
			if err != nil || len(b) == 0 {
				bad(p, "templates/%s/%s is missing or empty", p.Template, f)
				continue
			}
			src[f] = string(b)
		}
		adapter, ok := src["adapter.py"]
		if !ok {
			continue
		}
		if m := reKind.FindStringSubmatch(adapter); m == nil {
			bad(p, "templates/%s/adapter.py sets no KIND", p.Template)
		} else if !slices.Contains(adapterKinds[p.Kind], m[1]) {
			bad(p, "templates/%s/adapter.py has KIND %q, which a %s pattern does not use (want one of %v)", p.Template, m[1], p.Kind, adapterKinds[p.Kind])
		}
		read := map[string]bool{}
		for _, m := range reParamRead.FindAllStringSubmatch(adapter, -1) {
			read[m[1]] = true
		}
		for n := range read {
			if _, ok := p.Param(n); !ok && slices.Contains(patterns.KernelParamNames, n) {
				bad(p, "templates/%s/adapter.py reads params[%q], which the entry's Params do not declare", p.Template, n)
			}
		}
		for _, q := range p.Params {
			if !read[q.Name] {
				bad(p, "the entry's Params declare %q, which templates/%s/adapter.py never reads", q.Name, p.Template)
			}
		}
		for _, m := range reParamDflt.FindAllStringSubmatch(adapter, -1) {
			q, ok := p.Param(m[1])
			if !ok {
				continue
			}
			if !sameDefault(q, m[2]) {
				bad(p, "templates/%s/adapter.py defaults %s to %s, the entry's Params to %q", p.Template, m[1], m[2], q.Default)
			}
		}
		if noBwd := reNoBackward.MatchString(adapter); noBwd != p.ForwardOnly {
			bad(p, "the entry's ForwardOnly is %v, but templates/%s/adapter.py's has_backward %s", p.ForwardOnly, p.Template,
				map[bool]string{true: "returns False", false: "can return True"}[noBwd])
		}
		if !p.ForwardOnly && !reTrain.MatchString(adapter) {
			bad(p, "templates/%s/adapter.py has no train(kernel, inputs, params), the call bench's training modes time", p.Template)
		}
		code := src["kernel.py"] + src["reference.py"] + adapter
		for _, q := range p.Params {
			for _, v := range q.Values {
				lit := strconv.Quote(v)
				if _, err := strconv.ParseFloat(v, 64); err == nil && q.OrNumber {
					lit = v // a number: a Python number literal (ignore_index's -100)
				}
				if !strings.Contains(code, lit) {
					bad(p, "parameter %s: value %q appears nowhere in templates/%s/{kernel,reference,adapter}.py", q.Name, v, p.Template)
				}
			}
		}
	}
	ents, err := fs.ReadDir(tree, ".")
	if err != nil {
		return append(out, fmt.Sprintf("templates/: %v", err))
	}
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() || strings.HasPrefix(n, "_") || strings.HasPrefix(n, ".") {
			continue
		}
		if !owned[n] {
			out = append(out, fmt.Sprintf("templates/%s/: no registry entry has it as its Template (patterns/registry.go)", n))
		}
	}
	return out
}

// sameDefault reports whether a Python default literal (a string, float("..."), a number)
// is the schema entry's default. Flags and dtypes have no default in the schema: codegen
// always writes a flag, and a dtype's default is derived.
func sameDefault(q patterns.Param, lit string) bool {
	switch q.Kind {
	case patterns.ParamBool, patterns.ParamDtype:
		return true
	}
	word := lit
	if m := reFloatOfStr.FindStringSubmatch(lit); m != nil {
		word = m[1]
	} else if s, err := strconv.Unquote(lit); err == nil {
		word = s
	}
	if q.Kind == patterns.ParamNumber {
		a, err1 := strconv.ParseFloat(word, 64)
		b, err2 := strconv.ParseFloat(q.Default, 64)
		return err1 == nil && err2 == nil && a == b
	}
	return word == q.Default
}

// The test names what is missing: a fake tree and a fake entry, each missing a piece.
func TestRegistryTemplatesNamesWhatIsMissing(t *testing.T) {
	eps := patterns.Param{Name: "eps", Kind: patterns.ParamNumber, Min: 0, MinOpen: true, Max: 1, Default: "1e-5"}
	mode := patterns.Param{Name: "casting", Kind: patterns.ParamEnum, Values: []string{"llama", "fp32"}, Default: "llama"}
	cat := []*patterns.Pattern{
		{ID: "norm_x", Kind: patterns.KindRow, Template: "norm_x", Params: []patterns.Param{eps, mode}},
		{ID: "gone", Kind: patterns.KindPointwise, Template: "gone"},
		{ID: "fwd", Kind: patterns.KindPointwise, Template: "fwd", ForwardOnly: true},
	}
	tree := fstest.MapFS{
		"norm_x/kernel.py":    {Data: []byte(`MODES = ("llama",)`)},
		"norm_x/reference.py": {Data: []byte("x")},
		"norm_x/adapter.py": {Data: []byte("KIND = \"gemm\"\n" +
			`e = params.get("eps", 1e-6); b = params["has_bias"]`)},
		"fwd/kernel.py":           {Data: []byte("x")},
		"fwd/reference.py":        {Data: []byte("x")},
		"fwd/test_kernel.py":      {Data: []byte("x")},
		"fwd/adapter.py":          {Data: []byte("KIND = \"pointwise\"\ndef has_backward(params):\n    return True\n")},
		"stray/kernel.py":         {Data: []byte("x")},
		"_common/fa_testing.py":   {Data: []byte("x")},
		"__pycache__/x.cpython.p": {Data: []byte("x")},
	}
	got := templateProblems(tree, cat)
	want := []string{
		`pattern "norm_x": templates/norm_x/test_kernel.py is missing`,
		`pattern "norm_x": templates/norm_x/adapter.py has KIND "gemm"`,
		`pattern "norm_x": templates/norm_x/adapter.py reads params["has_bias"]`,
		`pattern "norm_x": the entry's Params declare "casting", which templates/norm_x/adapter.py never reads`,
		`pattern "norm_x": templates/norm_x/adapter.py defaults eps to 1e-6`,
		`pattern "norm_x": parameter casting: value "fp32" appears nowhere`,
		`pattern "norm_x": templates/norm_x/adapter.py has no train(kernel, inputs, params)`,
		`pattern "fwd": the entry's ForwardOnly is true, but templates/fwd/adapter.py's has_backward can return True`,
		`pattern "gone": templates/gone/kernel.py is missing`,
		`templates/stray/: no registry entry`,
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
			t.Errorf("no problem starting %q in:\n%s", w, strings.Join(got, "\n"))
		}
	}
	if len(got) != len(want)+3 { // "gone" lacks all four files
		t.Errorf("%d problems, want %d:\n%s", len(got), len(want)+3, strings.Join(got, "\n"))
	}
}
