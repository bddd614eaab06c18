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

func TestDirReplacesOnlyItsOwnFolders(t *testing.T) {
	root := t.TempDir()
	precious := filepath.Join(root, "precious.txt")
	os.WriteFile(precious, []byte("mine"), 0o644)
	userDir := filepath.Join(root, "mydir")
	os.Mkdir(userDir, 0o755)
	os.WriteFile(filepath.Join(userDir, "keep.txt"), []byte("mine"), 0o644)
	fill := func(tmp string) error { return os.WriteFile(filepath.Join(tmp, "report.md"), []byte("r"), 0o644) }
	for _, p := range []string{precious, userDir} {
		if err := Dir(p, true, fill); err == nil || !strings.Contains(err.Error(), "not a folder fuseadvise wrote") {
			t.Errorf("%s: replace of a user's path: %v", p, err)
		}
	}
	if b, _ := os.ReadFile(precious); string(b) != "mine" {
		t.Error("a user's file was replaced")
	}
	if _, err := os.Stat(filepath.Join(userDir, "keep.txt")); err != nil {
		t.Error("a user's folder was replaced")
	}
	ours := filepath.Join(root, "out")
	if err := Dir(ours, false, fill); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ours, Marker)); err != nil {
		t.Fatalf("no marker: %v", err)
	}
	if err := Dir(ours, true, fill); err != nil {
		t.Errorf("replacing our own folder: %v", err)
	}
}

func TestWriteSpecialPaths(t *testing.T) {
	dir := t.TempDir()
	// a directory is refused, naming the path, not a temporary file
	err := Write(dir, func(w io.Writer) error { return nil })
	if err == nil || !strings.HasPrefix(err.Error(), dir+": ") || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory: %v", err)
	}
	// a missing parent folder is named
	err = Write(filepath.Join(dir, "absent", "x.json"), func(w io.Writer) error { return nil })
	if err == nil || strings.Contains(err.Error(), ".tmp-") || !strings.Contains(err.Error(), "no such directory") {
		t.Errorf("missing parent: %v", err)
	}
	// a symbolic link is followed: the target gets the content, the link stays a link
	target := filepath.Join(dir, "target.json")
	os.WriteFile(target, []byte("old"), 0o644)
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(target, link); err != nil {
		t.Skip(err)
	}
	if err := Write(link, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the link was replaced by a file")
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Errorf("target content %q", b)
	}
	// a device is written through, never renamed over
	if err := Write(os.DevNull, func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err }); err != nil {
		t.Errorf("%s: %v", os.DevNull, err)
	}
	if fi, err := os.Stat(os.DevNull); err != nil || fi.Mode().IsRegular() {
		t.Fatalf("%s is no longer a device: %v", os.DevNull, fi.Mode())
	}
}

// reopen undoes RemoveTemporaries, for the tests after it.
func reopen() {
	live.Lock()
	live.closed = false
	live.Unlock()
}

// A process exiting on a signal while a folder and a file are half-written removes both
// temporaries; the targets stay as they were, and nothing new starts.
func TestRemoveTemporaries(t *testing.T) {
	defer reopen()
	root := t.TempDir()
	prev := filepath.Join(root, "out")
	if err := Dir(prev, false, func(tmp string) error { return os.WriteFile(filepath.Join(tmp, "a"), []byte("old"), 0o644) }); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "f.json")
	var dirErr, fileErr error
	dirErr = Dir(prev, true, func(tmp string) error {
		if err := os.WriteFile(filepath.Join(tmp, "a"), []byte("new"), 0o644); err != nil {
			return err
		}
		fileErr = Write(file, func(w io.Writer) error {
			io.WriteString(w, "half")
			if n := len(temporaries(t, root)); n != 2 {
				t.Errorf("%d temporaries while filling, want 2", n)
			}
			RemoveTemporaries() // the signal arrives
			return nil
		})
		return nil
	})
	if !errors.Is(dirErr, ErrInterrupted) || !errors.Is(fileErr, ErrInterrupted) {
		t.Errorf("Dir: %v, Write: %v; want %v", dirErr, fileErr, ErrInterrupted)
	}
	if left := temporaries(t, root); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if b, _ := os.ReadFile(filepath.Join(prev, "a")); string(b) != "old" {
		t.Errorf("the previous folder changed: %q", b)
	}
	if _, err := os.Stat(file); err == nil {
		t.Error("the file was written")
	}
	if err := Write(file, func(w io.Writer) error { return nil }); !errors.Is(err, ErrInterrupted) {
		t.Errorf("a Write after RemoveTemporaries: %v", err)
	}
}

func temporaries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			out = append(out, e.Name())
		}
	}
	return out
}
