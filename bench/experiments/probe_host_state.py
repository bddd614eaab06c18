"""Does the host cost of a call depend on what the process did before? (GPU-only probe.)

The per-call host time of an eager chain (add -> gelu, 32x4096 bf16) and of one fused call
(the bias_gelu template), measured in one process: fresh, after a torch.compile'd call, after
a CUDA graph was captured and replayed, and after a torch.profiler session (the harness counts
launches with the profiler after timing each folder, so every later folder is timed after
one). Prints host and wall us per call for each state.

Usage: python3 bench/experiments/probe_host_state.py
"""
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "templates" / "_common"))
import fa_testing as fat  # noqa: E402

kernel = fat.load_sibling(ROOT / "templates" / "bias_gelu" / "kernel.py", "kernel")


def per_call(fn, n=3000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6


def main():
    x = torch.randn(32, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    rows = {
        "aten add": lambda: x + b,
        "eager add+gelu": lambda: F.gelu(x + b),
        "fused bias_gelu": lambda: kernel.bias_gelu(x, b),
    }

    def report(state):
        for name, fn in rows.items():
            h, w = per_call(fn)
            print(f"{state:28s} {name:18s} host {h:7.2f} wall {w:7.2f}", flush=True)

    report("fresh")
    comp = torch.compile(lambda: F.gelu(x + b))
    comp()
    report("after torch.compile")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        F.gelu(x + b)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        F.gelu(x + b)
    g.replay()
    torch.cuda.synchronize()
    report("after graph capture")
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]):
        F.gelu(x + b)
        torch.cuda.synchronize()
    report("after profiler (CUDA)")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        F.gelu(x + b)
        torch.cuda.synchronize()
    report("after profiler (CPU+CUDA)")


if __name__ == "__main__":
    main()
