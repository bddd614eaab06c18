// Package bench measures generated kernels on a GPU: the fused Triton kernel against the
// unfused eager chain exactly as the trace ran it ("vs ATen") and torch.compile of the same
// chain. Two figures per provider: its GPU time, the CUDA-graph replay timed by CUDA events
// around the call with L2 emptied of dirty lines before every call (a median with p20/p80,
// repeated runs for a spread; do_bench_cudagraph, back to back and L2-warm, for
// microsecond-scale cases), and its per-call time as an eager model calls it (the wall time
// per call of back-to-back plain calls, and the host time for one call to return). Beside
// them: the floor (the fewest bytes the chain must move over the measured copy bandwidth), a
// plain copy of the same bytes, and the analyzer's predicted fused time.
//
// The GPU belongs to a Python harness (harness.py, embedded): Run writes it, with the
// templates' fa_testing.py that holds its timing functions, to a temporary folder and runs
// it over the generated folders with the pinned interpreter (internal/pyenv), then parses its
// JSON lines into a Result. A Runner interface lets tests replay recorded harness output, so
// everything but the measurement itself is tested without a GPU; test_timing.py tests the
// timing loops against a simulated GPU (TestPythonTiming runs it).
package bench
