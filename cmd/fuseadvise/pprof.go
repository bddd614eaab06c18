package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/fuseadvise/fuseadvise/internal/gpuprof"
	"github.com/fuseadvise/fuseadvise/internal/safefile"
	"github.com/fuseadvise/fuseadvise/trace"
)

var cmdPprof = &Command{
	Name:      "pprof",
	UsageLine: "pprof [-o FILE] TRACE|DIR",
	Short:     "write GPU time by launching CPU-op stack as a pprof profile",
	Long: `Pprof writes a pprof profile (gzipped protobuf) of the trace: the GPU time of every kernel,
memcpy and memset attributed to the stack of CPU ops that launched it, with Python frames on
top when the trace was recorded with_stack=True. Sample types: gpu_time (default), launches,
and cpu_time (each op's self time on the CPU). Labels: rank, device, stream.

A directory of rank files gives one profile with a rank label. Open the result with

	go tool pprof -http=: out.pb.gz

The flame graph reads module -> op -> kernel: wide runs of small elementwise or
normalization kernels under one op are the fusion candidates that 'analyze' ranks.`,
	Flags: func(fs *flag.FlagSet) func(context.Context, *Env, []string) error {
		out := fs.String("o", "trace.pb.gz", "write the profile to `FILE`")
		return func(ctx context.Context, env *Env, args []string) error {
			if len(args) != 1 {
				return usagef("want one trace file or directory, got %d arguments", len(args))
			}
			if err := checkOutputs(args, *out); err != nil {
				return err
			}
			traces, err := trace.Load(args[0])
			if err != nil {
				return err
			}
			warn(env, traces)
			if err := writePprof(*out, traces); err != nil {
				return err
			}
			fmt.Fprintf(env.Stderr, "wrote %s; open it with: go tool pprof -http=: %s\n", *out, *out)
			return nil
		}
	},
}

func writePprof(path string, traces []*trace.Trace) error {
	p, err := gpuprof.Build(traces)
	if err != nil {
		return err
	}
	return safefile.Write(path, func(w io.Writer) error { return p.Write(w) })
}

// warn prints each trace's tolerated problems to stderr, one line each.
func warn(env *Env, traces []*trace.Trace) {
	for _, t := range traces {
		for _, w := range t.Warnings {
			fmt.Fprintf(env.Stderr, "warning: %s: %s\n", t.Path, w)
		}
	}
}
