package patterns

import (
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/fuseadvise/fuseadvise/trace"
)

// The detector's cost is judged against the parse it follows: on the largest
// shared trace (tl_h100_owlv2-large_pt2.6, 55.6 MB raw, 132k events), compare
//
//	go test -run '^$' -bench 'Parse|Analyze' -benchtime 5x ./patterns
//
// BenchmarkAnalyze / BenchmarkParse is the fraction detection adds (target <= 20%).
const benchTrace = "tl_h100_owlv2-large_pt2.6.json.gz"

func benchPath(b *testing.B) string {
	return shared.Require(b, "traces", "public", benchTrace)
}

// BenchmarkParse is trace.Open on the benchmark trace (the reference).
func BenchmarkParse(b *testing.B) {
	p := benchPath(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := trace.Open(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnalyze is Analyze (graph, inference, matching, cost) on the
// already-parsed trace.
func BenchmarkAnalyze(b *testing.B) {
	t, err := trace.Open(benchPath(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Analyze([]*trace.Trace{t}, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
