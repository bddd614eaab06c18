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

// RequireEnv names the environment variable that makes missing shared data fail the tests
// that need it instead of skipping them: "1" (CI) requires it.
const RequireEnv = "FUSEADVISE_REQUIRE_SHARED"

// Required reports whether the shared data is required ($FUSEADVISE_REQUIRE_SHARED=1).
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// TB is the part of testing.TB that Require and Missing use.
type TB interface {
	Helper()
	Skip(args ...any)
	Fatal(args ...any)
}

// Require returns the path of elem inside the shared folder for test t. When the folder or
// that path does not exist, it skips t, or fails it when the shared data is required
// (Required), and returns "".
func Require(t TB, elem ...string) string {
	t.Helper()
	p, err := Path(elem...)
	if err == nil {
		if _, err = os.Stat(p); err == nil {
			return p
		}
	}
	Missing(t, err.Error())
	return ""
}

// Missing skips t because shared data is missing (msg says what), or fails it when the
// shared data is required.
func Missing(t TB, msg string) {
	t.Helper()
	if Required() {
		t.Fatal("shared data missing: " + msg + " (" + RequireEnv + "=1: the tests must run on the real traces; " +
			"put the shared folder beside the checkout or set FUSEADVISE_SHARED)")
		return
	}
	t.Skip("shared data missing: " + msg + " (skipped; " + RequireEnv + "=1 makes this a failure)")
}
