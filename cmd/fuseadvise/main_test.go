package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/fuseadvise/fuseadvise/patterns"
)

var update = flag.Bool("update", false, "update the golden files")

const bundled = "../../testdata/traces/mlp_blocks_infer_fp32.json.gz"

// run runs the CLI in-process and returns its exit status, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), &Env{Stdout: &out, Stderr: &errb, Stdin: strings.NewReader("")}, args)
	return code, out.String(), errb.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/fuseadvise -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run with -update and review the diff):\n%s", name, got)
	}
}

func TestAnalyzeGolden(t *testing.T) {
	for _, format := range []string{"table", "json", "markdown"} {
		t.Run(format, func(t *testing.T) {
			code, out, errs := run(t, "analyze", "-format", format, bundled)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			golden(t, "analyze.mlp_blocks_infer_fp32."+format, out)
		})
	}
}

func TestFlagsAfterArguments(t *testing.T) {
	code1, out1, _ := run(t, "analyze", "-format", "json", bundled)
	code2, out2, _ := run(t, "analyze", bundled, "-format", "json")
	if code1 != 0 || code2 != 0 || out1 != out2 {
		t.Errorf("flags after the trace parse differently: %d %d", code1, code2)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "notes.json")
	os.WriteFile(notJSON, []byte("hello, this is not a trace"), 0o644)
	truncated := filepath.Join(dir, "cut.json")
	os.WriteFile(truncated, []byte(`{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2},`), 0o644)
	tests := []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"no verb", nil, 2, "no verb given"},
		{"unknown verb", []string{"frobnicate"}, 2, `unknown verb "frobnicate"`},
		{"unknown flag", []string{"analyze", "-nope", bundled}, 2, "usage: fuseadvise analyze"},
		{"bad format", []string{"analyze", "-format", "xml", bundled}, 2, `unknown -format "xml"`},
		{"no trace", []string{"analyze"}, 2, "want one trace file or directory"},
		{"missing file", []string{"analyze", filepath.Join(dir, "absent.json")}, 2, "absent.json"},
		{"not json", []string{"analyze", notJSON}, 2, "notes.json"},
		{"truncated", []string{"analyze", truncated}, 2, "cut.json"},
		{"bench without folders", []string{"bench"}, 2, "want one or more generated kernel folders"},
		{"bench unknown mode", []string{"bench", "-modes", "forward,sideways", dir}, 2, `unknown mode "sideways"`},
		{"run unknown mode", []string{"run", "-modes", "sideways", bundled}, 2, `-modes: unknown mode "sideways"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := run(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errs)
			}
			if !strings.Contains(errs, tt.want) {
				t.Errorf("stderr %q lacks %q", errs, tt.want)
			}
			if out != "" {
				t.Errorf("an error left output on stdout: %q", out)
			}
			if first := strings.SplitN(errs, "\n", 2)[0]; !strings.HasPrefix(first, "fuseadvise: ") {
				t.Errorf("first stderr line %q is not the one-line error", first)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := run(t, "help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, c := range commands {
		if !strings.Contains(out, c.Name) {
			t.Errorf("help lacks %s", c.Name)
		}
		code, out, _ := run(t, c.Name, "-h")
		if code != 0 || !strings.Contains(out, "usage: fuseadvise "+c.Name) {
			t.Errorf("%s -h: exit %d, %q", c.Name, code, out)
		}
	}
}

func TestPprofWritesProfile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	code, _, errs := run(t, "pprof", "-o", out, bundled)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() == 0 {
		t.Fatalf("no profile written: %v", err)
	}
}

func TestOutputFileNotLeftOnError(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "a.json")
	code, _, _ := run(t, "analyze", "-o", out, filepath.Join(dir, "absent.json.gz"))
	if code != 2 {
		t.Fatalf("exit %d", code)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}

// unescapedMarkup finds an HTML tag or a link target not preceded by a backslash escape.
var unescapedMarkup = regexp.MustCompile(`(^|[^\\])(<img|\]\(javascript)`)

// An op name crafted with a terminal escape sequence, a line break and Markdown reaches the
// table and Markdown outputs as inert text.
func TestAnalyzeEscapesTraceText(t *testing.T) {
	evil := `A|B\u001b[31mRED\u001b[0m\nline2 [x](javascript:alert(1)) <img src=x onerror=alert(1)>`
	tr := `{"traceEvents": [
  {"ph": "X", "cat": "cpu_op", "name": "` + evil + `", "pid": 1, "tid": 1, "ts": 10, "dur": 50, "args": {"External id": 1}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5, "args": {"correlation": 7}},
  {"ph": "X", "cat": "kernel", "name": "k` + evil + `", "pid": 0, "tid": 7, "ts": 30, "dur": 10, "args": {"correlation": 7, "device": 0, "stream": 7}}
]}`
	path := filepath.Join(t.TempDir(), "evil.json")
	if err := os.WriteFile(path, []byte(tr), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"table", "markdown"} {
		code, out, errs := run(t, "analyze", "-format", format, path)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", format, code, errs)
		}
		if !strings.Contains(out, "RED") {
			t.Fatalf("%s: the op is not in the output:\n%s", format, out)
		}
		if strings.ContainsRune(out, '\x1b') {
			t.Errorf("%s: an escape sequence reached the output", format)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "line2") {
				t.Errorf("%s: a line break inside a name split the output: %q", format, line)
			}
		}
		if format == "markdown" && unescapedMarkup.MatchString(out) {
			t.Errorf("markdown: markup passed through: %q", unescapedMarkup.FindString(out))
		}
	}
}

// The catalog in analyze's help and in -pattern's error comes from the registry.
func TestHelpListsTheCatalog(t *testing.T) {
	_, help, _ := run(t, "help", "analyze")
	_, _, errs := run(t, "analyze", "-pattern", "nope", bundled)
	for _, p := range patterns.Catalog() {
		if !strings.Contains(help, p.ID) || !strings.Contains(errs, p.ID) {
			t.Errorf("%s missing from analyze's help or -pattern's error", p.ID)
		}
	}
	long := strings.SplitN(help, "\n\n", 2)[1] // after the usage line
	for _, l := range strings.Split(long, "\n") {
		if len(l) > 100 && !strings.HasPrefix(l, "  -") {
			t.Errorf("help line longer than 100 bytes: %q", l)
		}
	}
}

// A directory of unrelated traces (the shared public corpus: twelve models, four GPU types)
// is not one job's ranks: a one-line error naming the odd file, exit 2, nothing on stdout.
func TestUnrelatedTracesAreNotOneJob(t *testing.T) {
	dir := shared.Require(t, "traces", "public")
	code, out, errs := run(t, "analyze", dir)
	if code != 2 || out != "" || !strings.Contains(errs, "a directory is read as the ranks of one job") ||
		strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, ".json") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
