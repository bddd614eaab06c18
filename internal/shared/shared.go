package shared

import (
	"errors"
	"os"
	"path/filepath"
)

// Dir returns the shared folder: $FUSEADVISE_SHARED, or "shared" beside the directory that
// holds go.mod, found by walking up from the working directory.
func Dir() (string, error) {
	if d := os.Getenv("FUSEADVISE_SHARED"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			s := filepath.Join(filepath.Dir(d), "shared")
			if _, err := os.Stat(filepath.Join(s, "traces")); err != nil {
				return "", errors.New("shared traces not found beside the checkout (set FUSEADVISE_SHARED)")
			}
			return s, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("go.mod not found above " + wd)
		}
	}
}

// Path joins elem onto Dir.
func Path(elem ...string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{d}, elem...)...), nil
}
