package templates

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the templates' shared blocks from "+SharedSource)

// TestSharedBlocks: every template's copy of a shared helper is the source's, and no template
// defines a shared helper outside its block (a hand-kept copy).
func TestSharedBlocks(t *testing.T) {
	src, err := os.ReadFile(SharedSource)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := SharedBlocks(string(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatalf("%s: no blocks", SharedSource)
	}
	defs := map[string]string{} // function defined in a block -> block
	def := regexp.MustCompile(`(?m)^def (_[A-Za-z0-9_]+)\(`)
	for name, text := range blocks {
		for _, m := range def.FindAllStringSubmatch(text, -1) {
			defs[m[1]] = name
		}
	}
	paths := []string{filepath.Join(MasterAdamW, "master_adamw.py")}
	for _, p := range Patterns() {
		paths = append(paths, filepath.Join(p, "kernel.py"))
	}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got, names, err := SyncShared(string(b), blocks)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if got != string(b) {
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: shared blocks rewritten", path)
			} else {
				t.Errorf("%s: a shared block differs from %s (go test ./templates -run TestSharedBlocks -update)", path, SharedSource)
			}
		}
		// outside the blocks, no definition of a shared helper
		outside := got
		for _, n := range names {
			outside = strings.Replace(outside, blocks[n], "", 1)
		}
		for _, m := range def.FindAllStringSubmatch(outside, -1) {
			if blk, ok := defs[m[1]]; ok {
				t.Errorf("%s: defines %s outside the shared block %q: carry the block instead", path, m[1], blk)
			}
		}
	}
}

func TestSyncShared(t *testing.T) {
	src := "x = 1\n# --- fa:shared a ---\ndef _a():\n    return 1\n# --- fa:end a ---\n"
	blocks, err := SharedBlocks(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want, err string }{
		{"head\n# --- fa:shared a ---\nold\n# --- fa:end a ---\ntail\n",
			"head\n# --- fa:shared a ---\ndef _a():\n    return 1\n# --- fa:end a ---\ntail\n", ""},
		{"no blocks\n", "no blocks\n", ""},
		{"# --- fa:shared b ---\n# --- fa:end b ---\n", "", "not in"},
		{"# --- fa:shared a ---\nunterminated\n", "", "no end marker"},
	} {
		got, _, err := SyncShared(tc.in, blocks)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("SyncShared(%q): error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("SyncShared(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
