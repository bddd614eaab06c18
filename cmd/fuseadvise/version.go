package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/fuseadvise/fuseadvise/internal/pyenv"
)

var cmdVersion = &Command{
	Name:      "version",
	UsageLine: "version",
	Short:     "print fuseadvise's version, its Go version and the pinned torch and triton",
	Long: `Version prints the fuseadvise module's version (a release tag, or "(devel)" for a build from
a checkout, with its VCS revision when the build recorded one), the Go version it was built
with, and the torch and triton versions its kernels are verified and measured with (the venv
that scripts/setup-python.sh creates). Include it in bug reports.`,
	Flags: func(fs *flag.FlagSet) func(context.Context, *Env, []string) error {
		return func(ctx context.Context, env *Env, args []string) error {
			if len(args) != 0 {
				return usagef("takes no arguments")
			}
			info, _ := debug.ReadBuildInfo()
			writeVersion(env.Stdout, info)
			return nil
		}
	},
}

// writeVersion prints the version lines from the build information (nil: not recorded).
func writeVersion(w io.Writer, info *debug.BuildInfo) {
	path, version, goVersion := "github.com/fuseadvise/fuseadvise", "(unknown)", runtime.Version()
	var rev, modified string
	if info != nil {
		if info.Main.Path != "" {
			path = info.Main.Path
		}
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	fmt.Fprintf(w, "fuseadvise %s (%s)\n", version, path)
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if modified == "true" {
			rev += " with local changes"
		}
		fmt.Fprintf(w, "revision %s\n", rev)
	}
	fmt.Fprintf(w, "go %s\n", goVersion)
	fmt.Fprintf(w, "torch %s, triton %s (pinned: the kernels' Python environment)\n", pyenv.TorchVersion, pyenv.TritonVersion)
}
