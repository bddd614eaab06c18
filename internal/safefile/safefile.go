package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write creates path with the content fill writes. On any error the target is left as it
// was (absent, or its previous content) and no temporary file remains.
func Write(path string, fill func(w io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err = fill(f); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Dir creates the folder path by filling a temporary sibling folder and renaming it into
// place. If path exists, Dir fails unless replace is set, in which case the old folder is
// removed only after the new one is complete.
func Dir(path string, replace bool, fill func(tmpdir string) error) (err error) {
	path = filepath.Clean(path)
	if _, err := os.Stat(path); err == nil && !replace {
		return fmt.Errorf("%s: already exists (use -force to replace it)", path)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
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
		}
	}()
	if err = os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err = fill(tmp); err != nil {
		return err
	}
	if replace {
		old := tmp + ".old"
		if err = os.Rename(path, old); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err = os.Rename(tmp, path); err != nil {
			os.Rename(old, path)
			return err
		}
		return os.RemoveAll(old)
	}
	return os.Rename(tmp, path)
}
