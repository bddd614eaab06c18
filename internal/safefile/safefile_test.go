package safefile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteLeavesNothingOnError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.json")
	err := Write(path, func(w io.Writer) error {
		io.WriteString(w, "half of it")
		return errors.New("boom")
	})
	if err == nil || err.Error() != "boom" {
		t.Fatalf("err = %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
}

func TestWriteReplacesOnlyWhenComplete(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.txt")
	os.WriteFile(path, []byte("old"), 0o644)
	Write(path, func(w io.Writer) error { io.WriteString(w, "new but"); return errors.New("failed") })
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("a failed write changed the file: %q", b)
	}
	if err := Write(path, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("content %q", b)
	}
}

func TestDir(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "pr")
	fill := func(content string) func(string) error {
		return func(tmp string) error { return os.WriteFile(filepath.Join(tmp, "PR.md"), []byte(content), 0o644) }
	}
	if err := Dir(path, false, fill("one")); err != nil {
		t.Fatal(err)
	}
	if err := Dir(path, false, fill("two")); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("overwrite without replace: %v", err)
	}
	if err := Dir(path, true, func(tmp string) error { fill("half")(tmp); return errors.New("failed") }); err == nil {
		t.Fatal("want the fill's error")
	}
	if b, _ := os.ReadFile(filepath.Join(path, "PR.md")); string(b) != "one" {
		t.Fatalf("a failed replace changed the folder: %q", b)
	}
	if err := Dir(path, true, fill("three")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(path, "PR.md")); string(b) != "three" {
		t.Fatalf("replace: %q", b)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Fatalf("temporary folders left behind: %v", entries)
	}
}
