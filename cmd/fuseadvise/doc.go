/*
Fuseadvise is the tool to reach for after torch.profiler shows a slow step. It reads the
trace, finds the chains of PyTorch ops worth fusing, writes a fused Triton kernel for each,
proves it right in Triton's interpreter against the PyTorch result, measures it on a GPU
against eager ATen and torch.compile, and hands back a report and a PR-ready folder.

Usage:

	fuseadvise VERB [flags] FILE...

Verbs:

	analyze   find and rank fusion opportunities in a trace (table, JSON or markdown)
	pprof     write GPU time by launching CPU-op stack as a pprof profile
	gen       write fused Triton kernels, references, tests and benchmarks
	verify    run the generated kernels in Triton's interpreter against the reference
	bench     measure fused vs eager vs torch.compile on a GPU
	report    a markdown and HTML report from analysis, verification and benchmarks
	pr        a PR-ready folder, or a branch in a git repository
	run       analyze, gen, verify, bench (with a GPU) and report in one command
	version   print fuseadvise's version, its Go version and the pinned torch and triton

Results go to standard output or -o; progress and warnings go to standard error. Exit
status: 0 success, 1 a check failed (verify, bench), 2 bad usage or bad input, 130
interrupted (Ctrl-C or SIGTERM: what was being written is removed).
*/
package main
