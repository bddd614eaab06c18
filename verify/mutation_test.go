package verify

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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
//
// To be fast without being weaker, the mutants run in stages, each for those still alive:
// (1) the case that killed the mutant last time (its kill hint, testdata/mutation_hints.json),
// (2) the cases that killed other mutants of its pattern, (3) every other case, in the
// runner's order, up to the first that fails. A stale hint (the kernel or the cases changed)
// or a missing one only costs time: a mutant survives only when no case kills it.
// -mutations.update-hints rewrites the hints from the run. The runner processes are forked
// from one that imported torch once (forkRunner): a fresh one follows every folder where a
// case raised or wrote out of bounds, about a third of the mutants.
func TestMutations(t *testing.T) {
	py := venv(t)
	base := genFolders(t) // per pattern, and per variant (specs_test.go)
	var patterns []string // folder keys: patterns and variants
	for p := range base {
		if wantPattern(folderPattern(p)) {
			patterns = append(patterns, p)
		}
	}
	sort.Strings(patterns)

	// baseline: the cases of each pattern and those the unmutated kernels fail (shared with
	// TestTemplatesVerify)
	tr := verifyTemplates(t, patterns...)
	plan := map[string][]string{}
	baseFail := map[string][]string{}
	for i, p := range patterns {
		f := tr.Folders[i]
		if f.Error != "" {
			t.Fatalf("%s: the unmutated folder does not load: %s", p, f.Error)
		}
		for _, c := range f.Cases {
			plan[p] = append(plan[p], c.ID)
			if !c.Passed() {
				baseFail[p] = append(baseFail[p], c.ID)
				t.Logf("baseline: %s %s fails unmutated; skipped for its mutants", p, c.ID)
			}
		}
	}
	t.Logf("baseline: %d templates (shared with TestTemplatesVerify; %.1fs)", len(patterns), tr.Seconds)

	// mutants: one per mutation and folder of its pattern (the pattern's, then its
	// variants'), a group killed when any of them is
	root := t.TempDir()
	var muts, groups []*mutant
	covered := map[string]bool{}
	for _, m := range mutations {
		if _, ok := base[m.Pattern]; !ok || !wantPattern(m.Pattern) {
			continue
		}
		covered[m.Pattern] = true
		var first *mutant
		for _, key := range patterns {
			if folderPattern(key) != m.Pattern {
				continue
			}
			bdir := base[key]
			src, err := os.ReadFile(filepath.Join(bdir, "kernel.py"))
			if err != nil {
				t.Fatal(err)
			}
			out, err := m.apply(string(src))
			if err != nil {
				t.Error(err)
				break
			}
			dir := filepath.Join(root, key+"-"+m.Name)
			if err := copyDir(bdir, dir); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "kernel.py"), []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			mu := &mutant{m: m, folder: key, dir: dir, tried: map[string]bool{}}
			if first == nil {
				first = mu
				groups = append(groups, mu)
			}
			first.group = append(first.group, mu)
			mu.first = first
			muts = append(muts, mu)
		}
	}
	for _, p := range patterns {
		if p != folderPattern(p) {
			continue
		}
		if !covered[p] {
			t.Logf("pattern %s has a template but no mutations: add some to mutations_test.go", p)
		}
	}
	if len(muts) == 0 {
		t.Fatal("no mutants ran")
	}

	hints, err := readHints(hintsFile)
	if err != nil {
		t.Fatal(err)
	}
	if !*useHints {
		hints = map[string]string{}
	}
	opts := Options{Python: py, Trials: 1, Timeout: 90 * time.Second, Jobs: runtime.GOMAXPROCS(0), FailFast: true}
	if *mutFork {
		opts.Runner = newForkRunner(t, py) // nil (Run's own runners) where unsupported
	}
	// the cases that killed some mutant of each pattern (by the hints)
	killers := map[string][]string{}
	for k, id := range hints {
		p, _, _ := strings.Cut(k, "/")
		if !slices.Contains(killers[p], id) {
			killers[p] = append(killers[p], id)
		}
	}
	usable := func(mu *mutant, id string) bool {
		p := mu.folder
		return slices.Contains(plan[p], id) && !slices.Contains(baseFail[p], id) && !mu.tried[id]
	}
	// Stages, each for the mutants still alive: 1. the mutant's kill hint; 2. the cases that
	// killed other mutants of its pattern; 3. every other case.
	var stages []stage
	start := time.Now()
	for n := 1; n <= 3; n++ {
		st := stage{n: n}
		for _, mu := range muts {
			if mu.first.killer() != nil {
				continue
			}
			mu.next = nil
			switch n {
			case 1:
				if h := hints[mu.key()]; h != "" && usable(mu, h) {
					mu.hint = h
					mu.next = []string{h}
				}
			case 2:
				for _, id := range killers[mu.folder] {
					if usable(mu, id) {
						mu.next = append(mu.next, id)
					}
				}
			}
			if n < 3 && len(mu.next) == 0 {
				continue
			}
			st.muts = append(st.muts, mu)
		}
		st.wall = runMutants(t, st.muts, opts, func(mu *mutant) []string {
			if n < 3 { // only mu.next
				return slices.DeleteFunc(slices.Clone(plan[mu.folder]), func(id string) bool { return slices.Contains(mu.next, id) })
			}
			skip := slices.Clone(baseFail[mu.folder])
			for id := range mu.tried {
				skip = append(skip, id)
			}
			return skip
		})
		for _, mu := range st.muts {
			for _, id := range mu.next {
				mu.tried[id] = true
			}
			if mu.killedBy != "" && mu.first.killer() == mu { // a group counts once
				st.killed++
			}
		}
		stages = append(stages, st)
	}
	elapsed := time.Since(start)

	killed, stale, cases := 0, 0, 0
	caseSec := 0.0
	var report strings.Builder
	fmt.Fprintf(&report, "| pattern | mutant | bug class | killed by | cases run | case seconds |\n|---|---|---|---|---:|---:|\n")
	for _, g := range groups {
		mu := g
		if k := g.killer(); k != nil {
			mu = k
		}
		key := g.key()
		by := mu.killedBy
		if by != "" && mu.folder != mu.m.Pattern {
			by = mu.folder + ": " + by
		}
		if by != "" {
			killed++
			if _, ok := survivors[key]; ok {
				t.Logf("%s is listed as a survivor but was killed by %s: remove it from survivors", key, by)
			}
			if mu.killerID != mu.hint && mu.killerID != "(folder error)" {
				stale++
			}
		} else {
			by = "SURVIVED"
			if why, ok := survivors[key]; ok {
				by += " (" + why + ")"
			} else {
				t.Errorf("mutant %s (%s: %q -> %q) survived every case: add a case that kills it, or document it in survivors and docs/verify.md",
					key, mu.m.Class, mu.m.Old, mu.m.New)
			}
		}
		if mu.hint == "" && mu.killedBy != "" {
			by += " (no hint)"
		} else if mu.hint != "" && mu.killerID != mu.hint && mu.killedBy != "" {
			by += " (hint " + mu.hint + " stale)"
		}
		nc, sec := 0, 0.0
		for _, v := range g.group {
			nc += v.cases
			sec += v.seconds
		}
		cases += nc
		caseSec += sec
		fmt.Fprintf(&report, "| %s | %s | %s | %s | %d | %.1f |\n", mu.m.Pattern, mu.m.Name, mu.m.Class, by, nc, sec)
	}
	n := len(groups)
	rate := float64(killed) / float64(n)
	var sts []string
	for _, st := range stages {
		sts = append(sts, fmt.Sprintf("%s: %d run, %d killed, %.1fs", stageNames[st.n], len(st.muts), st.killed, st.wall.Seconds()))
	}
	t.Logf("mutation suite: %d of %d mutants killed (%.1f%%) in %.1fs with %d runner processes (%s); "+
		"%d cases, %.1f case-seconds; %d tainted folders (a fresh runner after each)\n%s",
		killed, n, 100*rate, elapsed.Seconds(), opts.Jobs, strings.Join(sts, "; "),
		cases, caseSec, countTainted(muts), report.String())
	if rate < 0.95 {
		t.Errorf("kill rate %.1f%% < 95%%", 100*rate)
	}
	if *updateHints {
		if err := writeHints(hintsFile, muts); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", hintsFile)
	} else if stale > 0 {
		t.Logf("%d of %d kill hints are missing or stale (each such mutant ran its other cases): "+
			"refresh them with go test ./verify -run 'TestMutations$' -mutations.update-hints", stale, n)
	}
}

var useHints = flag.Bool("mutations.hints", true, "TestMutations: run each mutant's kill hint first (false: every case in the runner's order)")

var mutFork = flag.Bool("mutations.fork", true, "TestMutations: fork the runner processes from one that imported torch once")

var updateHints = flag.Bool("mutations.update-hints", false, "TestMutations: rewrite "+hintsFile+" from this run's kills")

// hintsFile records, per mutant (pattern/name), the case that killed it: TestMutations runs
// that case first. Entries for mutants or cases that no longer exist are ignored.
const hintsFile = "testdata/mutation_hints.json"

var stageNames = map[int]string{1: "kill hints", 2: "the pattern's killers", 3: "all other cases"}

// stage is one run of TestMutations over the mutants still alive.
type stage struct {
	n      int
	muts   []*mutant
	killed int
	wall   time.Duration
}

// mutant is one applied mutation in one folder of its pattern and what the suite found.
type mutant struct {
	m        mutation
	folder   string    // the folder's key in genFolders: the pattern, or one of its variants
	first    *mutant   // the mutation's mutant in its pattern's first folder: the group's
	group    []*mutant // on first: the mutation's mutants, one per folder
	dir      string
	hint     string          // the case id tried first ("" when none applies)
	next     []string        // the cases of the current stage (stages 1 and 2)
	tried    map[string]bool // the cases run in earlier stages
	killedBy string          // "name@dtype (status)" or "folder error: ..."; "" while it survives
	killerID string          // the id of the case that killed it
	cases    int             // cases run, over all stages
	seconds  float64
	tainted  bool
}

// key names the mutant in the kill hints: pattern/name in the pattern's own folder,
// pattern+variant/name in a variant's.
func (mu *mutant) key() string { return mu.folder + "/" + mu.m.Name }

// killer is the mutant of mu's group (mu is the group's first) that a case killed, or nil.
func (mu *mutant) killer() *mutant {
	for _, v := range mu.group {
		if v.killedBy != "" {
			return v
		}
	}
	return nil
}

// runMutants runs verify on the mutants' folders (FailFast), each skipping the cases skip
// returns, and records what killed each. It returns the wall time.
func runMutants(t *testing.T, muts []*mutant, opts Options, skip func(*mutant) []string) time.Duration {
	t.Helper()
	if len(muts) == 0 {
		return 0
	}
	byDir := map[string]*mutant{}
	dirs := make([]string, len(muts))
	for i, mu := range muts {
		dirs[i] = mu.dir
		byDir[mu.dir] = mu
	}
	opts.skipFor = func(dir string) []string { return skip(byDir[dir]) }
	start := time.Now()
	res, err := Run(context.Background(), dirs, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Folders {
		mu := byDir[f.Dir]
		if f.Error != "" && mu.killedBy == "" {
			mu.killedBy = "folder error: " + truncate(strings.ReplaceAll(f.Error, "\n", " "), 60)
			mu.killerID = "(folder error)"
		}
		for _, c := range f.Cases {
			mu.cases++
			mu.seconds += c.Seconds
			if !c.Passed() && mu.killedBy == "" {
				mu.killedBy = fmt.Sprintf("%s@%s (%s)", c.Name, c.Dtype, c.Status)
				mu.killerID = c.ID
			}
		}
		if f.tainted() {
			mu.tainted = true
		}
	}
	return time.Since(start)
}

func countTainted(ms []*mutant) int {
	n := 0
	for _, mu := range ms {
		if mu.tainted {
			n++
		}
	}
	return n
}

func readHints(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return h, nil
}

// writeHints writes the killing case of every killed mutant (sorted keys, one per line),
// keeping the entries of mutants this run did not cover (-mutations.pattern).
func writeHints(path string, muts []*mutant) error {
	h, err := readHints(path)
	if err != nil {
		return err
	}
	for _, mu := range muts {
		delete(h, mu.key())
		if mu.killerID != "" && mu.killerID != "(folder error)" {
			h[mu.key()] = mu.killerID
		}
	}
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
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
