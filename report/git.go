package report

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/fuseadvise/fuseadvise/internal/safefile"
)

// RepoSubdir is the folder of the user's repository that CommitToRepo puts PR folders in.
const RepoSubdir = "fuseadvise"

// CommitToRepo adds the PR folder prDir to the git repository at repoPath as a new
// branch: one commit on top of HEAD (or a root commit when the repository has none yet)
// whose tree is HEAD's plus prDir under fuseadvise/<base name of prDir>/. The user's
// working tree, index and HEAD are not touched: the commit is built with a temporary
// index and git plumbing, and only refs/heads/<branch> is created. An existing branch is
// refused.
func CommitToRepo(repoPath, branch, prDir string) error {
	_, err := CommitPR(repoPath, branch, prDir)
	return err
}

// CommitPR is CommitToRepo, also returning the new commit's id.
func CommitPR(repoPath, branch, prDir string) (string, error) {
	c, err := commitPR(repoPath, branch, prDir)
	if err != nil {
		return "", fmt.Errorf("report: commit to %s: %w", repoPath, err)
	}
	return c, nil
}

type gitRunner struct {
	repo string
	env  []string
	opts []string // global options before the command
}

// run runs git in the repository with stdin and returns its trimmed standard output.
func (g *gitRunner) run(stdin []byte, args ...string) (string, error) {
	all := append(append([]string{"-C", g.repo}, g.opts...), args...)
	cmd := exec.Command("git", all...)
	cmd.Env = g.env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("git %s: %s", args[0], msg)
	}
	return strings.TrimSpace(out.String()), nil
}

// gitEnv is the environment without the variables that would point git elsewhere than
// the repository given.
func gitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
			"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_PREFIX":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GIT_TERMINAL_PROMPT=0")
}

type treeFile struct {
	abs, rel string
	mode     string
}

func commitPR(repoPath, branch, prDir string) (string, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", errors.New("git not found")
	}
	if branch == "" || strings.HasPrefix(branch, "-") {
		return "", fmt.Errorf("invalid branch name %q", branch)
	}
	absRepo, err := filepath.Abs(repoPath)
	if err != nil {
		return "", err
	}
	g := &gitRunner{repo: absRepo, env: gitEnv()}
	if _, err := g.run(nil, "rev-parse", "--absolute-git-dir"); err != nil {
		return "", fmt.Errorf("not a git repository: %v", err)
	}
	if _, err := g.run(nil, "check-ref-format", "--branch", branch); err != nil {
		return "", fmt.Errorf("invalid branch name %q", branch)
	}
	ref := "refs/heads/" + branch
	if _, err := g.run(nil, "rev-parse", "--verify", "--quiet", ref); err == nil {
		return "", fmt.Errorf("branch %s already exists", branch)
	}
	parent, err := g.run(nil, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	if err != nil {
		parent = "" // unborn HEAD: a root commit
	}

	prDir = filepath.Clean(prDir)
	name := filepath.Base(prDir)
	if name == "." || name == ".." || name == string(filepath.Separator) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("%s: cannot name the folder in the repository after it", prDir)
	}
	prefix := RepoSubdir + "/" + name
	files, err := listTree(prDir, prefix)
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", fmt.Errorf("%s: no files to commit", prDir)
	}

	tmp, err := os.MkdirTemp("", "fuseadvise-index-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	// The temporary index: no split index (it would write a shared index file into the
	// repository), no untracked cache, no file-system monitor.
	gi := &gitRunner{
		repo: absRepo,
		env:  append(append([]string(nil), g.env...), "GIT_INDEX_FILE="+filepath.Join(tmp, "index"), "GIT_LITERAL_PATHSPECS=1"),
		opts: []string{"-c", "core.splitIndex=false", "-c", "core.untrackedCache=false", "-c", "core.fsmonitor=false"},
	}
	if parent != "" {
		if _, err := gi.run(nil, "read-tree", parent); err != nil {
			return "", err
		}
		// drop what HEAD already has under the prefix: the folder is replaced, not merged
		old, err := gi.run(nil, "ls-files", "-z", "--cached", "--", prefix+"/")
		if err != nil {
			return "", err
		}
		if old = strings.TrimRight(old, "\x00"); old != "" {
			if _, err := gi.run([]byte(old+"\x00"), "update-index", "-z", "--force-remove", "--stdin"); err != nil {
				return "", err
			}
		}
	}

	var paths bytes.Buffer
	for _, f := range files {
		paths.WriteString(f.abs + "\n")
	}
	out, err := gi.run(paths.Bytes(), "hash-object", "-w", "--no-filters", "--stdin-paths")
	if err != nil {
		return "", err
	}
	ids := strings.Fields(out)
	if len(ids) != len(files) {
		return "", fmt.Errorf("git hash-object: %d ids for %d files", len(ids), len(files))
	}
	var info bytes.Buffer
	for i, f := range files {
		fmt.Fprintf(&info, "%s %s\t%s\x00", f.mode, ids[i], f.rel)
	}
	if _, err := gi.run(info.Bytes(), "update-index", "-z", "--add", "--index-info"); err != nil {
		return "", err
	}
	tree, err := gi.run(nil, "write-tree")
	if err != nil {
		return "", err
	}

	msg := "fuseadvise: add " + prefix + "\n\n" + commitTitle(prDir) + "See " + prefix + "/" + PRFile + " for the evidence.\n"
	args := []string{"commit-tree", "--no-gpg-sign", tree}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	args = append(args, "-F", "-")
	if _, err := g.run(nil, "var", "GIT_COMMITTER_IDENT"); err != nil {
		// no identity configured: sign as the tool rather than fail
		g.env = append(g.env, "GIT_AUTHOR_NAME=fuseadvise", "GIT_AUTHOR_EMAIL=fuseadvise@localhost",
			"GIT_COMMITTER_NAME=fuseadvise", "GIT_COMMITTER_EMAIL=fuseadvise@localhost")
	}
	commit, err := g.run([]byte(msg), args...)
	if err != nil {
		return "", err
	}
	// "" as the old value: create only, fail if the branch appeared meanwhile
	if _, err := g.run(nil, "update-ref", "-m", "fuseadvise: "+prefix, ref, commit, ""); err != nil {
		return "", err
	}
	return commit, nil
}

// commitTitle is the first heading of dir/PR.md and a blank line, or "".
func commitTitle(dir string) string {
	f, err := os.Open(filepath.Join(dir, PRFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if t, ok := strings.CutPrefix(sc.Text(), "# "); ok {
			return strings.TrimSpace(t) + "\n\n"
		}
	}
	return ""
}

// listTree lists the regular files under dir with their paths in the repository (under
// prefix) and git modes. Links and special files are refused, as are names git or
// hash-object --stdin-paths cannot carry.
func listTree(dir, prefix string) ([]treeFile, error) {
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	var files []treeFile
	err = filepath.WalkDir(absDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return fmt.Errorf("%s: a git folder inside the PR folder", p)
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file (links are not committed)", p)
		}
		if d.Name() == safefile.Marker && filepath.Dir(p) == absDir {
			return nil // fuseadvise's own bookkeeping, not part of the user's commit
		}
		rel, err := filepath.Rel(absDir, p)
		if err != nil {
			return err
		}
		if strings.ContainsAny(p, "\n\r\x00") {
			return fmt.Errorf("%q: a file name with a line break", p)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := "100644"
		if info.Mode()&0o111 != 0 {
			mode = "100755"
		}
		files = append(files, treeFile{abs: p, rel: path.Join(prefix, filepath.ToSlash(rel)), mode: mode})
		return nil
	})
	return files, err
}
