package patterns

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/fuseadvise/fuseadvise/trace"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.json from the current output")

// goldenTraces lists the shared traces the golden reports cover.
func goldenTraces(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"public", "h200"} {
		d := shared.Require(t, "traces", dir)
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			n := e.Name()
			if strings.HasSuffix(n, ".json.gz") && !strings.HasSuffix(n, ".et.json.gz") {
				out = append(out, filepath.Join(d, n))
			}
		}
	}
	if len(out) != 22 {
		t.Fatalf("found %d shared traces, want 22 (12 public + 10 h200)", len(out))
	}
	return out
}

// TestGolden analyzes every shared trace (12 public, PyTorch 1.9 to 2.7, and
// the 10 H200 traces) and compares the report with testdata/golden. Paths are
// reduced to base names so the files hold no machine paths.
func TestGolden(t *testing.T) {
	for _, path := range goldenTraces(t) {
		name := strings.TrimSuffix(filepath.Base(path), ".json.gz")
		t.Run(name, func(t *testing.T) {
			tr, err := trace.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Analyze([]*trace.Trace{tr}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			r.Trace.Path = filepath.Base(r.Trace.Path)
			for i, n := range r.Notes {
				r.Notes[i] = strings.ReplaceAll(n, path, filepath.Base(path))
			}
			got, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			file := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("report differs from %s (go test -run TestGolden -update to accept):\n%s", file, firstDiff(string(got), string(want)))
			}
		})
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			return "line " + itoa(i+1) + ":\n got: " + al[i] + "\nwant: " + bl[i]
		}
	}
	return "lengths differ: got " + itoa(len(al)) + " lines, want " + itoa(len(bl))
}
