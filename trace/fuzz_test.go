package trace

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// FuzzOpen checks that no input makes the parser panic, and that failures are
// *Error values with an offset inside the input.
func FuzzOpen(f *testing.F) {
	f.Add([]byte(kineto))
	f.Add([]byte(strings.NewReplacer("\n", "", "  ", "").Replace(kineto)))
	f.Add([]byte(`[{"name": "aten::add", "ph": "X", "ts": 10, "dur": 5, "tid": 1, "pid": "CPU functions", "args": {}}]`))
	f.Add([]byte(`{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a\"b\u00b5", "pid": "1", "tid": "x", "ts": 1.5e3, "dur": -1}], "baseTimeNanoseconds": 5000}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, split := range []int{0, 1 << 30} {
			old := minSplit
			minSplit = split
			tr, err := parse("fuzz.json", data, nil)
			minSplit = old
			if err != nil {
				var te *Error
				if !errors.As(err, &te) {
					t.Fatalf("error %v is %T, not *Error", err, err)
				}
				if te.Offset > int64(len(data)) {
					t.Fatalf("offset %d beyond the input (%d bytes)", te.Offset, len(data))
				}
				continue
			}
			_ = summary(tr)
		}
	})
}

// TestSplitEquivalence parses shared traces with the array split into many
// chunks and in one chunk, and compares the results.
func TestSplitEquivalence(t *testing.T) {
	defer func(old int) { minSplit = old }(minSplit)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(7))
	for _, p := range sharedTraces(t) {
		name := traceName(p)
		if !strings.HasPrefix(name, "hta_") && !strings.HasPrefix(name, "tl_h100_bert") && !strings.HasPrefix(name, "gpt2_train_sdpa") {
			continue
		}
		data, release, err := readFile(p)
		if err != nil {
			t.Fatal(err)
		}
		minSplit = 1 << 40
		one, err := parse(p, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		minSplit = 0
		var doc *rawTrace
		s := string(data)
		doc, serr := parseDoc(s)
		if serr != nil {
			t.Fatal(serr.msg)
		}
		if len(doc.chunks) < 2 {
			t.Errorf("%s: parsed in %d chunk(s), want several", name, len(doc.chunks))
		}
		many, err := parse(p, data, nil)
		release()
		if err != nil {
			t.Fatal(err)
		}
		if a, b := summary(one), summary(many); a != b {
			t.Errorf("%s: split parse differs:\n%s\nvs\n%s", name, a, b)
		}
	}
}
