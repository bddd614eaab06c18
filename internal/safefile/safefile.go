package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Marker is the file Dir puts in every folder it creates. Replacing an existing folder
// (replace=true, the CLI's -force) is allowed only when it holds this file, so -force can
// replace an earlier output but never a user's own file or folder.
const Marker = ".fuseadvise"

const markerText = "Written by fuseadvise. 'fuseadvise ... -force' may replace this folder.\n"

// live is the set of temporary files and folders Write and Dir are filling, for
// RemoveTemporaries. Publishing a result (the renames into place) holds the lock, so a
// removal never lands between the renames of a replacement.
var live = struct {
	sync.Mutex
	paths  map[string]bool
	closed bool // RemoveTemporaries ran: nothing new may start
}{paths: make(map[string]bool)}

// ErrInterrupted is returned by Write and Dir once RemoveTemporaries has run.
var ErrInterrupted = errors.New("interrupted")

func track(tmp string) error {
	live.Lock()
	defer live.Unlock()
	if live.closed {
		return ErrInterrupted
	}
	live.paths[tmp] = true
	return nil
}

// interrupted reports whether RemoveTemporaries has run.
func interrupted() bool {
	live.Lock()
	defer live.Unlock()
	return live.closed
}

func untrack(tmp string) {
	live.Lock()
	defer live.Unlock()
	delete(live.paths, tmp)
}

// publish runs the renames that put a finished result in place, never alongside
// RemoveTemporaries.
func publish(rename func() error) error {
	live.Lock()
	defer live.Unlock()
	if live.closed {
		return ErrInterrupted
	}
	return rename()
}

// RemoveTemporaries removes every temporary file and folder that Write and Dir are still
// filling, and makes every later or unfinished Write and Dir fail with ErrInterrupted
// (leaving its target as it was). It is for a process that must exit now, on a signal,
// while a stage that does not watch its context is still writing: nothing half-written
// stays behind.
func RemoveTemporaries() {
	live.Lock()
	defer live.Unlock()
	live.closed = true
	for p := range live.paths {
		os.RemoveAll(p)
		delete(live.paths, p)
	}
}

// Write creates path with the content fill writes. On any error the target is left as it
// was (absent, or its previous content) and no temporary file remains. A path that is a
// device or a pipe (/dev/stdout, a FIFO) is written directly; a symbolic link is followed;
// a directory is refused. Errors name path, not the temporary file.
func Write(path string, fill func(w io.Writer) error) error {
	var fillErr error
	err := write(path, func(w io.Writer) error {
		fillErr = fill(w)
		return fillErr
	})
	if err != nil && err == fillErr {
		return err // the content's own error, as it was
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func write(path string, fill func(w io.Writer) error) (err error) {
	if fi, err := os.Lstat(path); err == nil {
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := filepath.EvalSymlinks(path)
			if err != nil {
				return err
			}
			return write(target, fill)
		case fi.IsDir():
			return errors.New("is a directory")
		case !fi.Mode().IsRegular(): // a device or a pipe: no rename over it
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				return err
			}
			if err := fill(f); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && errors.Is(pe.Err, fs.ErrNotExist) {
			return errors.New("no such directory: " + filepath.Clean(dir))
		}
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			if interrupted() {
				err = ErrInterrupted
			}
		}
	}()
	if err = track(tmp); err != nil {
		return err
	}
	defer untrack(tmp)
	if err = fill(f); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return publish(func() error { return os.Rename(tmp, path) })
}

// Dir creates the folder path by filling a temporary sibling folder and renaming it into
// place; the folder gets a Marker file. If path exists, Dir fails unless replace is set and
// path is a folder Dir wrote (it holds the Marker), which is then removed only after the new
// one is complete.
func Dir(path string, replace bool, fill func(tmpdir string) error) (err error) {
	path = filepath.Clean(path)
	if fi, err := os.Lstat(path); err == nil {
		if !replace {
			return fmt.Errorf("%s: already exists (use -force to replace it)", path)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s: exists and is not a folder fuseadvise wrote: not replacing it", path)
		}
		if _, err := os.Stat(filepath.Join(path, Marker)); err != nil {
			return fmt.Errorf("%s: exists and is not a folder fuseadvise wrote (no %s file): not replacing it", path, Marker)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(path)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
			if interrupted() { // whatever failed, it failed because the temporary was removed
				err = ErrInterrupted
			}
		}
	}()
	if err = track(tmp); err != nil {
		return err
	}
	defer untrack(tmp)
	if err = os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err = fill(tmp); err != nil {
		return err
	}
	if err = os.WriteFile(filepath.Join(tmp, Marker), []byte(markerText), 0o644); err != nil {
		return err
	}
	return publish(func() error {
		if _, statErr := os.Lstat(path); statErr == nil {
			old := tmp + ".old"
			if err := os.Rename(path, old); err != nil {
				return err
			}
			if err := os.Rename(tmp, path); err != nil {
				os.Rename(old, path)
				return err
			}
			return os.RemoveAll(old)
		}
		return os.Rename(tmp, path)
	})
}
