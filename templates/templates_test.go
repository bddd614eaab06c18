package templates

import (
	"strings"
	"testing"
)

func TestPatternsHaveAllFiles(t *testing.T) {
	ps := Patterns()
	if len(ps) == 0 {
		t.Fatal("no patterns embedded")
	}
	for _, p := range ps {
		if strings.HasPrefix(p, "_") {
			t.Errorf("pattern %q: helper folder listed as a pattern", p)
		}
		for _, f := range []string{"kernel.py", "reference.py", "adapter.py"} {
			b, err := Read(p + "/" + f)
			if err != nil || len(b) == 0 {
				t.Errorf("%s/%s: missing or empty (%v)", p, f, err)
			}
		}
		if !Has(p) {
			t.Errorf("Has(%q) = false", p)
		}
	}
	for _, f := range []string{"fa_testing.py", "test_generated.py", "bench.py", "pytest.ini"} {
		if _, err := Read("_common/" + f); err != nil {
			t.Errorf("_common/%s: %v", f, err)
		}
	}
	if Has("nope") || Has("_common") {
		t.Error("Has accepts unknown names")
	}
}
