"""Where a fused call's host time goes, per generated folder (GPU-only probe).

For each kernel folder given (as `fuseadvise gen` writes them): the fused and the eager
provider called as the bench harness calls them (adapter.fused / adapter.reference on the
case's inputs), back to back: host us per call, the number of launch-cache entries before and
after (a count that grows means a launch that recompiles or misses the cache on every call),
and the top functions of a cProfile of the fused calls by own time.

Usage: python3 bench/experiments/probe_call_host.py [-n CALLS] [-top K] FOLDER...
"""
import argparse
import cProfile
import io
import pathlib
import pstats
import sys
import time

import torch


def load(folder, name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"_p_{abs(hash(str(folder)))}_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def host_us(fn, n):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=500)
    ap.add_argument("-top", type=int, default=12)
    ap.add_argument("folders", nargs="+")
    a = ap.parse_args()
    for d in a.folders:
        folder = pathlib.Path(d).resolve()
        sys.path.insert(0, str(folder))
        sys.modules.pop("fa_testing", None)
        case, fat = load(folder, "case"), load(folder, "fa_testing")
        kernel, ref, adapter = load(folder, "kernel"), load(folder, "reference"), load(folder, "adapter")
        inputs = adapter.make_inputs(case.SHAPES, fat.DTYPES[case.DTYPE], case.PARAMS, "cuda", 0)
        fused = lambda: adapter.fused(kernel, inputs, case.PARAMS)  # noqa: E731
        eager = lambda: adapter.reference(ref, inputs, case.PARAMS)  # noqa: E731
        fused()
        torch.cuda.synchronize()
        before = len(getattr(kernel, "_COMPILED", {}))
        hf, he = host_us(fused, a.n), host_us(eager, a.n)
        after = len(getattr(kernel, "_COMPILED", {}))
        print(f"== {folder.name}: host us/call fused {hf:.1f} eager {he:.1f}; launch cache {before} -> {after}")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(a.n):
            fused()
        prof.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(a.top)
        print("\n".join(line for line in s.getvalue().splitlines() if line.strip())[-3000:])
        sys.path.remove(str(folder))


if __name__ == "__main__":
    main()
