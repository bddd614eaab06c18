package patterns

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
)

// TestRegistry checks that every pattern declares every piece of its entry, and names what
// is missing. (codegen's TestRegistryTemplates checks the template folders against the
// entries; bench's TestRegistryBenchMatrix the benchmark matrix.)
func TestRegistry(t *testing.T) {
	if len(Catalog()) == 0 {
		t.Fatal("the registry is empty")
	}
	seen := map[string]bool{}
	for _, p := range Catalog() {
		for _, problem := range entryProblems(p) {
			t.Errorf("pattern %q: %s", p.ID, problem)
		}
		if seen[p.ID] {
			t.Errorf("pattern %q: registered twice", p.ID)
		}
		seen[p.ID] = true
		if q, ok := Lookup(p.ID); !ok || q != p {
			t.Errorf("pattern %q: Lookup does not find it", p.ID)
		}
	}
}

// entryProblems lists what p's entry lacks or gets wrong.
func entryProblems(p *Pattern) []string {
	var out []string
	miss := func(what string) { out = append(out, "no "+what) }
	if p.ID == "" || !safeID(p.ID) {
		out = append(out, "the id must be lower-case letters, digits and '_'")
	}
	if !slices.Contains(Kinds, p.Kind) {
		out = append(out, fmt.Sprintf("kind %q is not one of %v", p.Kind, Kinds))
	}
	switch {
	case p.Kind == KindGEMM && p.GEMM != GEMMEpilogue && p.GEMM != GEMMStats:
		out = append(out, fmt.Sprintf("a gemm pattern needs GEMM %q or %q, not %q", GEMMEpilogue, GEMMStats, p.GEMM))
	case p.Kind != KindGEMM && p.GEMM != "":
		out = append(out, fmt.Sprintf("GEMM %q set on a %s pattern", p.GEMM, p.Kind))
	}
	if p.Kind == KindGEMM && p.check == nil {
		miss("shape check (check: a GEMM case needs its weight [N, K])")
	}
	if p.Outputs < 0 {
		out = append(out, fmt.Sprintf("outputs %d < 0", p.Outputs))
	}
	if _, ok := p.Param("out_dtype"); p.CastsOutput && !ok {
		miss("out_dtype parameter (CastsOutput: a GEMM's cast taken sets the output's type)")
	}
	for what, v := range map[string]string{"chain (Chain)": p.Chain, "fused kernel (Fused)": p.Fused,
		"advice (Advice)": p.Advice, "refusals (Refuses)": p.Refuses, "template folder (Template)": p.Template,
		"usage snippet (Usage)": p.Usage} {
		if v == "" {
			miss(what)
		}
	}
	if p.Template != "" && !safeID(p.Template) {
		out = append(out, fmt.Sprintf("template folder %q must be lower-case letters, digits and '_'", p.Template))
	}
	if len(p.Anchors) == 0 {
		miss("anchors (Anchors)")
	}
	if p.match == nil {
		miss("matcher (match)")
	}
	if p.toCase == nil {
		miss("spec mapping (toCase)")
	}
	names := map[string]bool{}
	for _, q := range p.Params {
		if names[q.Name] {
			out = append(out, fmt.Sprintf("parameter %q declared twice", q.Name))
		}
		names[q.Name] = true
		for _, problem := range paramProblems(q) {
			out = append(out, fmt.Sprintf("parameter %q: %s", q.Name, problem))
		}
	}
	return out
}

// paramProblems lists what is wrong with one schema entry.
func paramProblems(q Param) []string {
	var out []string
	if !slices.Contains(KernelParamNames, q.Name) {
		out = append(out, fmt.Sprintf("not a kernel parameter (KernelParamNames: %v)", KernelParamNames))
	}
	switch q.Kind {
	case ParamEnum:
		if len(q.Values) == 0 {
			out = append(out, "an enum without values")
		}
		for _, v := range q.Values {
			if v == "" || !safeWord(v) {
				out = append(out, fmt.Sprintf("value %q is not a plain word", v))
			}
		}
		if q.Default == "" {
			out = append(out, "no default")
		} else if _, err := q.CheckWord(""); err != nil {
			out = append(out, "the default is not allowed: "+err.Error())
		}
	case ParamNumber:
		if !(q.Min <= q.Max) {
			out = append(out, fmt.Sprintf("empty range [%v, %v]", q.Min, q.Max))
		}
		if _, err := strconv.ParseFloat(q.Default, 64); err != nil {
			out = append(out, fmt.Sprintf("default %q is not a number", q.Default))
		} else if _, err := q.CheckNumber(0); err != nil {
			out = append(out, "the default is out of range: "+err.Error())
		}
	case ParamBool, ParamDtype:
		if q.Default != "" {
			out = append(out, fmt.Sprintf("a %s takes no default (%q)", q.Kind, q.Default))
		}
	default:
		out = append(out, fmt.Sprintf("kind %q is not enum, bool, number or dtype", q.Kind))
	}
	return out
}

func safeID(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return s != ""
}

// safeWord: letters, digits, '_', '-' (what codegen writes into case.py as a string).
func safeWord(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// The registry test itself: an entry missing pieces is reported, naming them.
func TestRegistryNamesWhatIsMissing(t *testing.T) {
	tests := []struct {
		name string
		p    Pattern
		want []string
	}{
		{"empty", Pattern{ID: "conv_relu"}, []string{`kind "" is not one of`, "no chain", "no advice", "no template folder",
			"no usage snippet", "no anchors", "no matcher", "no spec mapping"}},
		{"gemm without form", Pattern{ID: "x", Kind: KindGEMM}, []string{"a gemm pattern needs GEMM", "no shape check"}},
		{"casts its output without out_dtype", Pattern{ID: "x", Kind: KindRow, CastsOutput: true}, []string{"no out_dtype parameter"}},
		{"bad params", Pattern{ID: "x", Kind: KindRow, Params: []Param{
			{Name: "alpha", Kind: ParamNumber, Min: 0, Max: 1, Default: "0.5"},
			{Name: "eps", Kind: ParamNumber, Min: 0, MinOpen: true, Max: 1},
			{Name: "casting", Kind: ParamEnum, Values: []string{"llama"}, Default: "gemma"},
			{Name: "p", Kind: ParamNumber, Min: 0, Max: 1, Default: "0"},
			{Name: "p", Kind: ParamNumber, Min: 0, Max: 1, Default: "0"},
		}}, []string{`parameter "alpha": not a kernel parameter`, `parameter "eps": default "" is not a number`,
			`parameter "casting": the default is not allowed`, `parameter "p" declared twice`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := entryProblems(&tt.p)
			for _, w := range tt.want {
				found := false
				for _, g := range got {
					found = found || len(g) >= len(w) && g[:len(w)] == w
				}
				if !found {
					t.Errorf("no problem starting %q in %q", w, got)
				}
			}
		})
	}
}
