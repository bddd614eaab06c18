"""Probe: what does back-to-back timing add to a microsecond-scale kernel?

The harness times cases whose fused kernel takes under 30 us with
``triton.testing.do_bench_cudagraph`` (many calls captured back to back in one CUDA graph);
the cost model predicts a kernel's duration, as CUPTI records it in a trace. On the H200 the
decode-size fused kernels measured 1.8-2.3 us per call while the model, calibrated on the
traces' kernel durations, gave 1.1-1.3 us. Hypothesis: per call, the graph adds a launch gap
between consecutive kernels that a kernel's duration does not contain.

For each generated folder given: the fused call timed as the harness times it
(``do_bench_cudagraph``, median) and the fused kernels' durations from torch.profiler
(CUPTI) over 50 plain calls (median per call, summed over the call's kernels); ``gap_us`` is
their difference. An SM copy of 4 KB is measured the same way.

Output: one JSON object per line (folder, per_call_us, kernel_us, gap_us, kernels) on stdout;
a table on stderr.

Usage: python probe_gap.py FOLDER... (folders written by fuseadvise gen; run from the
repository root).
"""

import json
import pathlib
import statistics
import sys

import torch

sys.path.insert(0, "templates/_common")
import fa_testing as fat  # noqa: E402


def kernel_us(fn, calls=50):
    """Median per-call GPU kernel time (sum of the call's kernels) from the profiler."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    durs = [e.time_range.elapsed_us() for e in prof.events()
            if e.device_type.name == "CUDA" and e.time_range.elapsed_us() > 0]
    per_call = len(durs) // calls if calls else 0
    if per_call == 0:
        return None, 0
    sums = [sum(durs[i * per_call:(i + 1) * per_call]) for i in range(calls)]
    return statistics.median(sums), per_call


def per_call_us(fn):
    from triton.testing import do_bench_cudagraph
    return do_bench_cudagraph(fn, rep=100, quantiles=[0.5, 0.2, 0.8])[0] * 1e3


def measure(name, fn):
    pc = per_call_us(fn)
    ku, n = kernel_us(fn)
    row = {"folder": name, "per_call_us": pc, "kernel_us": ku, "gap_us": None if ku is None else pc - ku,
           "kernels": n}
    print(json.dumps(row), flush=True)
    print(f"{name:60s} per call {pc:6.2f}  kernels {n} {ku if ku is None else round(ku, 2):>6}  "
          f"gap {row['gap_us'] if ku is None else round(row['gap_us'], 2)}", file=sys.stderr, flush=True)


def main():
    src = torch.empty(512, device="cuda")
    dst = torch.empty_like(src)
    measure("copy-4KB", lambda: torch.mul(src, 1, out=dst))
    for folder in map(pathlib.Path, sys.argv[1:]):
        case = fat.load_sibling(str(folder / "case.py"), "case")
        adapter = fat.load_sibling(str(folder / "case.py"), "adapter")
        kernel = fat.load_sibling(str(folder / "case.py"), "kernel")
        dt = fat.DTYPES[case.DTYPE]
        inputs = adapter.make_inputs(case.SHAPES, dt, case.PARAMS, "cuda", 0)
        measure(folder.name, lambda: adapter.fused(kernel, inputs, case.PARAMS))


if __name__ == "__main__":
    main()
