package main

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/fuseadvise/fuseadvise/report"
)

var cmdPR = &Command{
	Name:      "pr",
	UsageLine: "pr [-o DIR] [-analysis FILE] [-verify FILE] [-bench FILE] [-repo PATH -branch NAME] [-force] KERNEL_DIR...",
	Short:     "a PR-ready folder, or a branch in a git repository",
	Long: `Pr writes a folder ready to be proposed as a pull request: a copy of each generated kernel
folder under kernels/ (kernel, autograd wrapper and module, reference, tests, bench script),
the results under results/ (benchmark JSON and its Liger-Kernel-schema CSV, verification
JSON, the report and its chart), and PR.md with the evidence: the trace, the chain and its
source line, shapes, estimated and measured numbers, verification status, and how to swap
each kernel in.

With -repo, the folder is also committed to that git repository as a new branch (-branch,
default fuseadvise/kernels) under fuseadvise/<folder name>/, built with git plumbing and a
temporary index: the repository's working tree, index and HEAD are left as they were. An
existing branch is refused.`,
	Flags: func(fs *flag.FlagSet) func(context.Context, *Env, []string) error {
		p := reportFlags(fs)
		out := fs.String("o", "fuseadvise-pr", "write the PR folder to `DIR`")
		repo := fs.String("repo", "", "also commit the folder as a new branch of the git repository at `PATH`")
		branch := fs.String("branch", "fuseadvise/kernels", "the branch `NAME` for -repo")
		force := fs.Bool("force", false, "replace an existing PR folder")
		return func(ctx context.Context, env *Env, args []string) error {
			if len(args) == 0 {
				return usagef("want one or more generated kernel folders")
			}
			branchSet := false
			fs.Visit(func(f *flag.Flag) { branchSet = branchSet || f.Name == "branch" })
			if branchSet && *repo == "" {
				return usagef("-branch needs -repo")
			}
			if *repo != "" {
				if err := checkRepo(*repo, *branch); err != nil {
					return err
				}
			}
			dirs, err := kernelFolders(args)
			if err != nil {
				return err
			}
			in, err := loadReportInputs(p, dirs)
			if err != nil {
				return err
			}
			return writePR(env, *out, in, dirs, *force, *repo, *branch)
		}
	},
}

// checkRepo makes sure the commit that -repo asks for can be made, before any folder is
// written: repo is a git repository, branch a valid and new branch name.
func checkRepo(repo, branch string) error {
	git := func(args ...string) error {
		return exec.Command("git", append([]string{"-C", repo}, args...)...).Run()
	}
	if _, err := exec.LookPath("git"); err != nil {
		return fmt.Errorf("-repo needs git on PATH: %v", err)
	}
	if err := git("rev-parse", "--git-dir"); err != nil {
		return fmt.Errorf("%s: not a git repository", repo)
	}
	if err := git("check-ref-format", "--branch", branch); err != nil || strings.HasPrefix(branch, "-") {
		return usagef("-branch %q is not a valid branch name", branch)
	}
	if err := git("rev-parse", "--verify", "--quiet", "refs/heads/"+branch); err == nil {
		return fmt.Errorf("%s: branch %s already exists (choose another -branch)", repo, branch)
	}
	return nil
}

func writePR(env *Env, out string, in report.Inputs, dirs []string, force bool, repo, branch string) error {
	if err := report.WritePR(out, in, dirs, force); err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "wrote %s (see %s)\n", out, filepath.Join(out, report.PRFile))
	if repo != "" {
		commit, err := report.CommitPR(repo, branch, out)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stderr, "committed %s to %s as branch %s (%s); your working tree is untouched\n", out, repo, branch, commit)
	}
	return nil
}
