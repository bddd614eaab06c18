package report

import (
	"bytes"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/patterns"
)

// genFolders copies the recorded generated folders into a temporary folder, with an
// executable file and a cache that the PR copy must leave out.
func genFolders(t *testing.T) (root string, dirs []string) {
	t.Helper()
	root = t.TempDir()
	for _, name := range []string{"gelu_pyops_bf16", "mask_softmax_fp32"} {
		dst := filepath.Join(root, name)
		if err := copyTree(filepath.Join("testdata", "gen", name), dst); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dst)
	}
	if err := os.WriteFile(filepath.Join(dirs[0], "run.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dirs[0], "__pycache__"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirs[0], "__pycache__", "kernel.pyc"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, dirs
}

func listFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestWritePR(t *testing.T) {
	_, dirs := genFolders(t)
	in := recorded(t) // its Generated point at testdata; the PR reads the copies in dirs
	out := filepath.Join(t.TempDir(), "pr")
	if err := WritePR(out, in, dirs, false); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(listFiles(t, out), "\n")
	want := strings.Join([]string{
		".fuseadvise",
		"PR.md",
		"kernels/gelu_pyops_bf16/README.md",
		"kernels/gelu_pyops_bf16/kernel.py",
		"kernels/gelu_pyops_bf16/manifest.json",
		"kernels/gelu_pyops_bf16/run.sh",
		// mask_softmax_fp32 failed verification: not offered, not copied
		"results/bench.csv",
		"results/bench.json",
		"results/report.md",
		"results/report.svg",
		"results/verify.json",
		"swap_in/fuseadvise_gelu_pyops_5b1c0e2a.py",
	}, "\n")
	if got != want {
		t.Errorf("PR folder files:\n%s\nwant:\n%s", got, want)
	}
	if fi, err := os.Stat(filepath.Join(out, "kernels/gelu_pyops_bf16/run.sh")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("run.sh lost its executable bit: %v", err)
	}
	pr, err := os.ReadFile(filepath.Join(out, PRFile))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "PR.md", pr)
	// the bench JSON round-trips
	b, err := LoadBench(filepath.Join(out, "results", "bench.json"))
	if err != nil || len(b.Cases) != len(in.Bench.Cases) || b.Cases[1].EagerUs != 1462.6 {
		t.Errorf("results/bench.json does not round-trip: %v", err)
	}

	// refused without force; the old folder stays
	if err := WritePR(out, in, dirs[:1], false); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second write without force: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, PRFile)); !bytes.Contains(b, []byte("mask_softmax_fp32")) {
		t.Error("a refused write changed the folder")
	}
	// with force it is replaced
	in.Bench = nil
	if err := WritePR(out, in, dirs[:1], true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, PRFile)); bytes.Contains(b, []byte("mask_softmax_fp32")) {
		t.Error("force did not replace the folder")
	}
	if _, err := os.Stat(filepath.Join(out, "results", "bench.csv")); err == nil {
		t.Error("results/bench.csv written without bench results")
	}
	pr, _ = os.ReadFile(filepath.Join(out, PRFile))
	if !bytes.Contains(pr, []byte("**Not benchmarked**")) {
		t.Error("PR.md without bench results does not say so")
	}
	// nothing left behind beside it
	ents, _ := os.ReadDir(filepath.Dir(out))
	if len(ents) != 1 {
		t.Errorf("temporary folders left beside the PR folder: %d entries", len(ents))
	}
}

func TestWritePRErrors(t *testing.T) {
	root, dirs := genFolders(t)
	in := recorded(t)
	out := filepath.Join(t.TempDir(), "pr")
	for _, tc := range []struct {
		name    string
		folders []string
		prep    func()
		want    string
	}{
		{"no folders", nil, nil, "no generated folders"},
		{"no manifest", []string{root}, nil, "manifest.json"},
		{"same name twice", []string{dirs[0], dirs[0]}, nil, "same name"},
		{"a link inside", dirs[:1], func() {
			if err := os.Symlink("/etc/passwd", filepath.Join(dirs[0], "passwd")); err != nil {
				t.Skip("no symlinks:", err)
			}
		}, "links are not copied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.prep != nil {
				tc.prep()
			}
			err := WritePR(out, in, tc.folders, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("a failed WritePR left the folder behind")
			}
		})
	}
}

// isolateGit skips the test without git and keeps the user's git configuration out of it.
func isolateGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	cfg := filepath.Join(t.TempDir(), "gitconfig")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_CONFIG_GLOBAL", cfg)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
}

// git runs git in dir and returns its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// userRepo makes a repository with a commit, an unstaged change, a staged new file and an
// untracked file.
func userRepo(t *testing.T) string {
	t.Helper()
	repo := t.TempDir()
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "config", "user.name", "User")
	git(t, repo, "config", "user.email", "user@example.com")
	write := func(name, s string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(repo, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("model.py", "x = 1\n")
	write("fuseadvise/old/stale.txt", "from an earlier PR folder of the same name\n")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "initial")
	write("model.py", "x = 2  # unstaged\n")
	write("staged.py", "y = 1\n")
	git(t, repo, "add", "staged.py")
	write("untracked.txt", "u\n")
	return repo
}

func TestCommitToRepo(t *testing.T) {
	isolateGit(t)
	_, dirs := genFolders(t)
	prDir := filepath.Join(t.TempDir(), "gpt2-gelu")
	if err := WritePR(prDir, recorded(t), dirs, false); err != nil {
		t.Fatal(err)
	}
	repo := userRepo(t)
	status := git(t, repo, "status", "--porcelain=v1", "--untracked-files=all")
	head := git(t, repo, "rev-parse", "HEAD")
	symref := git(t, repo, "symbolic-ref", "HEAD")
	index := fileHash(t, filepath.Join(repo, ".git", "index"))
	model := fileHash(t, filepath.Join(repo, "model.py"))

	commit, err := CommitPR(repo, "fuseadvise/gpt2-gelu", prDir)
	if err != nil {
		t.Fatal(err)
	}

	// the user's side is untouched
	if got := fileHash(t, filepath.Join(repo, ".git", "index")); got != index {
		t.Error("the index file changed")
	}
	if got := fileHash(t, filepath.Join(repo, "model.py")); got != model {
		t.Error("the working tree changed")
	}
	if _, err := os.Stat(filepath.Join(repo, "fuseadvise", "gpt2-gelu")); err == nil {
		t.Error("the PR folder was written into the working tree")
	}
	if got := git(t, repo, "rev-parse", "HEAD"); got != head {
		t.Errorf("HEAD moved: %s -> %s", head, got)
	}
	if got := git(t, repo, "symbolic-ref", "HEAD"); got != symref {
		t.Errorf("HEAD now points at %s", got)
	}
	if got := git(t, repo, "status", "--porcelain=v1", "--untracked-files=all"); got != status {
		t.Errorf("status changed:\n%s\nwas:\n%s", got, status)
	}

	// the branch has HEAD's tree plus the PR folder
	if got := strings.TrimSpace(git(t, repo, "rev-parse", "fuseadvise/gpt2-gelu")); got != commit {
		t.Errorf("branch at %s, CommitPR said %s", got, commit)
	}
	if got := git(t, repo, "rev-parse", commit+"^"); got != head {
		t.Errorf("parent %s, want HEAD %s", got, head)
	}
	files := strings.Fields(git(t, repo, "ls-tree", "-r", "--name-only", commit))
	want := []string{"fuseadvise/gpt2-gelu/PR.md", "fuseadvise/gpt2-gelu/kernels/gelu_pyops_bf16/manifest.json",
		"fuseadvise/gpt2-gelu/results/bench.csv", "fuseadvise/old/stale.txt", "model.py"}
	for _, w := range want {
		if !contains(files, w) {
			t.Errorf("branch lacks %s; has %q", w, files)
		}
	}
	if contains(files, "staged.py") || contains(files, "untracked.txt") {
		t.Errorf("the commit took the user's uncommitted files: %q", files)
	}
	if got := git(t, repo, "show", commit+":model.py"); got != "x = 1\n" {
		t.Errorf("model.py on the branch is %q, want the committed version", got)
	}
	pr, _ := os.ReadFile(filepath.Join(prDir, PRFile))
	if got := git(t, repo, "show", commit+":fuseadvise/gpt2-gelu/PR.md"); got != string(pr) {
		t.Error("PR.md on the branch differs from the folder's")
	}
	if got := git(t, repo, "ls-tree", commit, "fuseadvise/gpt2-gelu/kernels/gelu_pyops_bf16/run.sh"); !strings.HasPrefix(got, "100755 ") {
		t.Errorf("run.sh mode: %q", got)
	}
	if msg := git(t, repo, "log", "-1", "--format=%an <%ae>%n%B", commit); !strings.Contains(msg, "User <user@example.com>") || !strings.Contains(msg, "fuseadvise: add fuseadvise/gpt2-gelu") {
		t.Errorf("commit message/author: %q", msg)
	}

	// an existing branch is refused, and nothing moves
	if err := CommitToRepo(repo, "fuseadvise/gpt2-gelu", prDir); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("existing branch: %v", err)
	}
	if err := CommitToRepo(repo, "main", prDir); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("the checked-out branch: %v", err)
	}
	for _, bad := range []string{"", "-x", "a..b", "has space"} {
		if err := CommitToRepo(repo, bad, prDir); err == nil {
			t.Errorf("branch %q accepted", bad)
		}
	}
	if err := CommitToRepo(t.TempDir(), "b", prDir); err == nil || !strings.Contains(err.Error(), "not a git repository") {
		t.Errorf("not a repository: %v", err)
	}
	if got := fileHash(t, filepath.Join(repo, ".git", "index")); got != index {
		t.Error("the index file changed")
	}
}

func TestCommitToRepoReplacesSameName(t *testing.T) {
	isolateGit(t)
	repo := userRepo(t)
	// a PR folder named like one HEAD already has: the branch has the new one only
	prDir := filepath.Join(t.TempDir(), "old")
	if err := os.MkdirAll(prDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prDir, "PR.md"), []byte("# New\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := CommitPR(repo, "new", prDir)
	if err != nil {
		t.Fatal(err)
	}
	files := strings.Fields(git(t, repo, "ls-tree", "-r", "--name-only", c))
	if contains(files, "fuseadvise/old/stale.txt") || !contains(files, "fuseadvise/old/PR.md") {
		t.Errorf("files %q: want the old folder replaced", files)
	}
	if msg := git(t, repo, "log", "-1", "--format=%B", c); !strings.Contains(msg, "New") {
		t.Errorf("message %q lacks PR.md's title", msg)
	}
}

func TestCommitToRepoUnborn(t *testing.T) {
	isolateGit(t)
	repo := t.TempDir()
	git(t, repo, "init", "-q", "-b", "main")
	// no identity configured: the tool signs
	prDir := filepath.Join(t.TempDir(), "p")
	if err := os.MkdirAll(prDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prDir, "PR.md"), []byte("# T\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_AUTHOR_NAME", "")
	t.Setenv("GIT_COMMITTER_NAME", "")
	t.Setenv("EMAIL", "")
	c, err := CommitPR(repo, "fa", prDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := git(t, repo, "rev-list", "--count", c); strings.TrimSpace(got) != "1" {
		t.Errorf("want a root commit, history has %s commits", got)
	}
	if _, err := os.Stat(filepath.Join(repo, ".git", "index")); err == nil {
		t.Error("an index was created in the user's repository")
	}
}

func TestWriteDir(t *testing.T) {
	in := recorded(t)
	out := filepath.Join(t.TempDir(), "rep")
	if err := WriteDir(out, in, false); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(listFiles(t, out), " "); got != ".fuseadvise bench.csv report.html report.md report.svg" {
		t.Errorf("files %q", got)
	}
	md, _ := os.ReadFile(filepath.Join(out, MarkdownFile))
	if want := render(t, Markdown, in); !bytes.Equal(md, want) {
		t.Error("report.md differs from Markdown's output")
	}
	if err := WriteDir(out, in, false); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second write without force: %v", err)
	}
	in.Bench = nil
	if err := WriteDir(out, in, true); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(listFiles(t, out), " "); got != ".fuseadvise report.html report.md report.svg" {
		t.Errorf("without bench results: files %q", got)
	}
}

// gitFiles lists the files of the repository's .git folder outside objects/.
func gitFiles(t *testing.T, repo string) map[string]bool {
	t.Helper()
	out := make(map[string]bool)
	for _, f := range listFiles(t, filepath.Join(repo, ".git")) {
		if !strings.HasPrefix(f, "objects/") {
			out[f] = true
		}
	}
	return out
}

func TestCommitToRepoSplitIndex(t *testing.T) {
	isolateGit(t)
	repo := userRepo(t)
	git(t, repo, "config", "core.splitIndex", "true")
	git(t, repo, "update-index", "--split-index")
	git(t, repo, "status", "--porcelain")
	before := gitFiles(t, repo)
	prDir := filepath.Join(t.TempDir(), "p")
	if err := os.MkdirAll(prDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prDir, "PR.md"), []byte("# T\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := CommitPR(repo, "fa", prDir); err != nil {
		t.Fatal(err)
	}
	after := gitFiles(t, repo)
	for f := range after {
		if !before[f] && f != "refs/heads/fa" && f != "logs/refs/heads/fa" {
			t.Errorf("CommitPR wrote %s into the repository", f)
		}
	}
	for f := range before {
		if !after[f] {
			t.Errorf("CommitPR removed %s from the repository", f)
		}
	}
}

// TestWritePRMasterWeights: where the analysis offers master weights, the PR carries the
// optimizer's folder and module and says what it saves; where it does not, neither.
func TestWritePRMasterWeights(t *testing.T) {
	_, dirs := genFolders(t)
	for _, offered := range []bool{true, false} {
		in := recorded(t)
		m := patterns.MasterWeights{DType: patterns.BF16, Optimizer: "AdamW", Steps: 2, Tensors: 4, Params: 1000,
			ForwardUs: 10, BackwardUs: 20, Kernels: 16, Advice: "autocast casts 4 fp32 GEMM weights; MasterAdamW"}
		if offered {
			m.EstSavingUs = 30
		} else {
			m.Why = "the optimizer is SGD; MasterAdamW replaces Adam and AdamW"
		}
		in.Analysis.MasterWeights = []patterns.MasterWeights{m}
		out := filepath.Join(t.TempDir(), "pr")
		if err := WritePR(out, in, dirs, false); err != nil {
			t.Fatal(err)
		}
		files := strings.Join(listFiles(t, out), "\n")
		pr, _ := os.ReadFile(filepath.Join(out, PRFile))
		for _, f := range []string{"kernels/master_adamw/master_adamw.py", "kernels/master_adamw/test_master_adamw.py",
			"kernels/master_adamw/README.md", "swap_in/master_adamw.py"} {
			if strings.Contains(files, f) != offered {
				t.Errorf("offered %v: %s in the PR folder: %v", offered, f, !offered)
			}
		}
		if bytes.Contains(pr, []byte("Estimated GPU saving 30.0 µs")) != offered {
			t.Errorf("offered %v: PR.md's master weights section:\n%s", offered, pr)
		}
	}
}

// TestWritePRMultiheadAttention: where the analysis offers the drop-in nn.MultiheadAttention,
// the PR carries its folder and module and says what it saves; where it does not, neither.
func TestWritePRMultiheadAttention(t *testing.T) {
	_, dirs := genFolders(t)
	for _, offered := range []bool{true, false} {
		in := recorded(t)
		f := patterns.MultiheadAttention{Calls: 8, Steps: 2, Shapes: [][]int64{{3, 512, 8, 1024}}, BatchFirst: true, DType: patterns.BF16,
			ForwardUs: 10, BackwardUs: 30, Kernels: 22, EstStackUs: 5, Advice: "nn.MultiheadAttention splits its packed q/k/v projection with copies"}
		if offered {
			f.EstSavingUs = 35
		} else {
			f.Why = "no backward of the split in the trace (inference)"
		}
		in.Analysis.MultiheadAttention = []patterns.MultiheadAttention{f}
		out := filepath.Join(t.TempDir(), "pr")
		if err := WritePR(out, in, dirs, false); err != nil {
			t.Fatal(err)
		}
		files := strings.Join(listFiles(t, out), "\n")
		pr, _ := os.ReadFile(filepath.Join(out, PRFile))
		for _, name := range []string{"kernels/multihead_attention/multihead_attention.py", "kernels/multihead_attention/test_multihead_attention.py",
			"kernels/multihead_attention/README.md", "swap_in/multihead_attention.py"} {
			if strings.Contains(files, name) != offered {
				t.Errorf("offered %v: %s in the PR folder: %v", offered, name, !offered)
			}
		}
		if bytes.Contains(pr, []byte("Estimated GPU saving 35.0 µs")) != offered {
			t.Errorf("offered %v: PR.md's nn.MultiheadAttention section:\n%s", offered, pr)
		}
	}
}
