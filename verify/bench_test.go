package verify

import (
	"context"
	"sort"
	"testing"
)

// BenchmarkVerifyTemplates verifies one generated folder per template with the default
// options (every case, DefaultTrials trials, GOMAXPROCS runner processes), the way
// 'fuseadvise verify' runs. Each iteration includes starting the runners (importing torch).
//
//	go test ./verify -run '^$' -bench VerifyTemplates -benchtime 1x
func BenchmarkVerifyTemplates(b *testing.B) {
	py := venv(b)
	folders := genFolders(b)
	var dirs []string
	for _, d := range folders {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	cases := 0
	for b.Loop() {
		res, err := Run(context.Background(), dirs, Options{Python: py})
		if err != nil {
			b.Fatal(err)
		}
		cases = 0
		for _, f := range res.Folders {
			cases += len(f.Cases)
		}
	}
	b.ReportMetric(float64(len(dirs)), "templates")
	b.ReportMetric(float64(cases), "cases")
}
