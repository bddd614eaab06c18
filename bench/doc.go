// Package bench measures generated kernels on a GPU: the fused Triton kernel against the
// unfused eager chain exactly as the trace ran it ("vs ATen") and torch.compile of the same
// chain, each captured in a CUDA graph and its replay timed as a median with p20/p80 by
// triton.testing.do_bench (GPU time, L2 flushed, repeated runs for a spread;
// do_bench_cudagraph for microsecond-scale cases), next to the floor (the fewest bytes the
// chain must move over the measured copy bandwidth), a plain copy of the same bytes, and the
// analyzer's predicted fused time.
//
// The GPU belongs to a Python harness (harness.py, embedded): Run writes it to a temporary
// file and runs it over the generated folders with the pinned interpreter (internal/pyenv),
// then parses its JSON lines into a Result. A Runner interface lets tests replay recorded
// harness output, so everything but the measurement itself is tested without a GPU.
package bench
