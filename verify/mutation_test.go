package verify

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fuseadvise/fuseadvise/codegen"
)

var mutPattern = flag.String("mutations.pattern", "", "TestMutations: run only these patterns' mutants (comma-separated)")

func wantPattern(p string) bool {
	return *mutPattern == "" || strings.Contains(","+*mutPattern+",", ","+p+",")
}

// survivors are the mutants known to survive, with the reason (docs/verify.md explains
// each). A mutant that survives and is not listed here fails the suite.
var survivors = map[string]string{}

// TestMutationsApply checks that every mutation matches its template exactly once (no
// Python needed): a template edit that breaks a mutation fails here, loudly.
func TestMutationsApply(t *testing.T) {
	seen := map[string]bool{}
	have := map[string]bool{}
	for _, p := range codegen.Patterns() {
		have[p] = true
	}
	for _, m := range mutations {
		key := m.Pattern + "/" + m.Name
		if seen[key] {
			t.Errorf("duplicate mutation %s", key)
		}
		seen[key] = true
		if !have[m.Pattern] {
			continue
		}
		src, err := templatesKernel(m.Pattern)
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.apply(src)
		if err != nil {
			t.Error(err)
			continue
		}
		if out == src || m.Old == m.New {
			t.Errorf("%s: no change", key)
		}
	}
	// a non-matching mutation is an error, never a silent no-op
	if _, err := (mutation{"x", "y", "", "def f(", "a < b", "a <= b"}).apply("def f(x):\n    return a <= b\n"); err == nil {
		t.Error("a mutation whose Old does not occur applied")
	}
	if _, err := (mutation{"x", "y", "", "def f(", "a", "b"}).apply("def f(x):\n    return a + a\n"); err == nil {
		t.Error("a mutation whose Old occurs twice applied")
	}
	got, err := (mutation{"x", "y", "", "def g(", "1", "2"}).apply("def f():\n    return 1\n\n\ndef g():\n    return 1\n")
	if err != nil || got != "def f():\n    return 1\n\n\ndef g():\n    return 2\n" {
		t.Errorf("scoped apply = %q, %v", got, err)
	}
}

func templatesKernel(pattern string) (string, error) {
	files, err := codegen.Render(specs[pattern])
	if err != nil {
		return "", err
	}
	return string(files["kernel.py"]), nil
}

// TestMutations is the mutation suite: each mutation is applied to a freshly generated
// folder of its pattern and verify must fail on it. Cases that fail on the unmutated kernel
// are skipped for its mutants (a mutant is killed only by a case the original passes). Run
// with -v for the table of mutants and the case that killed each.
func TestMutations(t *testing.T) {
	py := venv(t)
	base := genFolders(t)
	var patterns []string
	for p := range base {
		patterns = append(patterns, p)
	}
	sort.Strings(patterns)
	opts := Options{Python: py, Trials: 1, Timeout: 90 * time.Second, Jobs: runtime.GOMAXPROCS(0)}

	// baseline: which cases the unmutated kernels fail (reported by TestTemplatesVerify)
	var dirs []string
	for _, p := range patterns {
		if wantPattern(p) {
			dirs = append(dirs, base[p])
		}
	}
	start := time.Now()
	res, err := Run(context.Background(), dirs, opts)
	if err != nil {
		t.Fatal(err)
	}
	baseFail := map[string][]string{}
	for _, f := range res.Folders {
		if f.Error != "" {
			t.Fatalf("%s: the unmutated folder does not load: %s", f.Pattern, f.Error)
		}
		for _, c := range f.Cases {
			if !c.Passed() {
				baseFail[f.Pattern] = append(baseFail[f.Pattern], c.ID)
				t.Logf("baseline: %s %s fails unmutated; skipped for its mutants", f.Pattern, c.ID)
			}
		}
	}
	t.Logf("baseline: %d folders in %.1fs", len(dirs), time.Since(start).Seconds())

	// mutants
	root := t.TempDir()
	var mdirs []string
	mutOf := map[string]mutation{}
	covered := map[string]bool{}
	for _, m := range mutations {
		bdir, ok := base[m.Pattern]
		if !ok || !wantPattern(m.Pattern) {
			continue
		}
		covered[m.Pattern] = true
		src, err := os.ReadFile(filepath.Join(bdir, "kernel.py"))
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.apply(string(src))
		if err != nil {
			t.Error(err)
			continue
		}
		dir := filepath.Join(root, m.Pattern+"-"+m.Name)
		if err := copyDir(bdir, dir); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "kernel.py"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		mdirs = append(mdirs, dir)
		mutOf[dir] = m
	}
	for _, p := range patterns {
		if !covered[p] {
			t.Logf("pattern %s has a template but no mutations: add some to mutations_test.go", p)
		}
	}
	mopts := opts
	mopts.FailFast = true
	mopts.skipFor = func(dir string) []string { return baseFail[mutOf[dir].Pattern] }
	start = time.Now()
	mres, err := Run(context.Background(), mdirs, mopts)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)

	killed := 0
	var report strings.Builder
	fmt.Fprintf(&report, "| pattern | mutant | bug class | killed by |\n|---|---|---|---|\n")
	for _, f := range mres.Folders {
		m := mutOf[f.Dir]
		by := ""
		if f.Error != "" {
			by = "folder error: " + truncate(strings.ReplaceAll(f.Error, "\n", " "), 60)
		}
		for _, c := range f.Cases {
			if !c.Passed() && by == "" {
				by = fmt.Sprintf("%s@%s (%s)", c.Name, c.Dtype, c.Status)
			}
		}
		key := m.Pattern + "/" + m.Name
		if by != "" {
			killed++
			if _, ok := survivors[key]; ok {
				t.Logf("%s is listed as a survivor but was killed by %s: remove it from survivors", key, by)
			}
		} else {
			by = "SURVIVED"
			if why, ok := survivors[key]; ok {
				by += " (" + why + ")"
			} else {
				t.Errorf("mutant %s (%s: %q -> %q) survived: add a case that kills it, or document it in survivors and docs/verify.md",
					key, m.Class, m.Old, m.New)
			}
		}
		fmt.Fprintf(&report, "| %s | %s | %s | %s |\n", m.Pattern, m.Name, m.Class, by)
	}
	n := len(mres.Folders)
	rate := 0.0
	if n > 0 {
		rate = float64(killed) / float64(n)
	}
	t.Logf("mutation suite: %d of %d mutants killed (%.1f%%) in %.1fs with %d runner processes\n%s",
		killed, n, 100*rate, elapsed.Seconds(), mopts.Jobs, report.String())
	if n == 0 {
		t.Fatal("no mutants ran")
	}
	if rate < 0.95 {
		t.Errorf("kill rate %.1f%% < 95%%", 100*rate)
	}
}

func copyDir(from, to string) error {
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
