package bench

import (
	"testing"

	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/patterns"
)

// TestRegistryBenchMatrix checks the benchmark matrix against the registry, naming what is
// missing: every case is of a registered pattern and generates; every registered pattern
// has at least one case, so the H200 results cover it.
func TestRegistryBenchMatrix(t *testing.T) {
	for _, problem := range matrixProblems(matrix(), patterns.Catalog()) {
		t.Error(problem)
	}
}

func matrixProblems(m []codegen.Spec, cat []*patterns.Pattern) []string {
	var out []string
	cases := map[string]int{}
	for _, s := range m {
		if _, ok := patterns.Lookup(s.Pattern); !ok {
			out = append(out, "bench matrix (bench/matrix.go): a case of "+s.Pattern+", which the registry (patterns/registry.go) lacks")
			continue
		}
		cases[s.Pattern]++
		if err := codegen.Validate(s); err != nil {
			out = append(out, "bench matrix (bench/matrix.go): "+err.Error())
		}
	}
	for _, p := range cat {
		if cases[p.ID] == 0 {
			out = append(out, "pattern "+p.ID+": no case in the bench matrix (bench/matrix.go)")
		}
	}
	return out
}

func TestRegistryBenchMatrixNamesWhatIsMissing(t *testing.T) {
	m := []codegen.Spec{
		{Pattern: "conv_relu", Dtype: "bf16", Shapes: [][]int64{{8, 64}}},
		{Pattern: "swiglu", Dtype: "bf16", Shapes: [][]int64{{8, 64}}, Params: codegen.Params{Eps: 1e-5}},
	}
	sw, _ := patterns.Lookup("swiglu")
	lg, _ := patterns.Lookup("linear_gelu")
	got := matrixProblems(m, []*patterns.Pattern{sw, lg})
	want := []string{
		"bench matrix (bench/matrix.go): a case of conv_relu, which the registry (patterns/registry.go) lacks",
		`bench matrix (bench/matrix.go): codegen: swiglu: parameter eps="1e-05" is not used by this pattern`,
		"pattern linear_gelu: no case in the bench matrix (bench/matrix.go)",
	}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %q, want %q", got[i], want[i])
		}
	}
}
