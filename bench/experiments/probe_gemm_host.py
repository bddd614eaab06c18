"""Probe: where a generic GEMM head's forward spends host time (GPU-only).

bench measured the generic GEMM heads' forward at 32-135 µs of host a call against eager's
33-73 (docs/benchmarks/h200-generic-gemm-2026-12-03b.json), and the tuner's do_bench timing
of the library path at 75 µs where a CUDA-graph replay of it takes 17 (probe_gemm_tuner.py):
do_bench's window holds the host's time whenever it exceeds the GPU's. This probe takes the
forward apart. Per folder, µs of host per call (median of bursts of 10 calls, each burst
started on an idle GPU: the calls are queued, never waited for):

  eager            the traced chain (adapter.reference)
  fused kept       adapter.fused as bench calls it, the tuner's choice
  fused library    the same with the library path forced (cuBLAS, then the pointwise kernel)
  fused tile       the same with the first Triton tile forced
  gemm_cublas      the traced GEMM in eager PyTorch, then the program's kernel
  pieces of the library path: _gemm_planned, _gemm_views, torch.empty of the GEMM output,
  addmm(out=) under no_grad, the pointwise kernel on a given output (fused(out=)),
  torch.no_grad() entered and left

then whether any of these synchronizes the host (torch.cuda.set_sync_debug_mode), and the
top functions of a cProfile of 200 library-path calls by own time. With -rounds R, then the
library path against gemm_cublas (the same GPU work) and its pieces assembled by hand, timed
in R interleaved rounds (the medians): the H200 host drifts by tens of percent between runs.

Usage: python3 bench/experiments/probe_gemm_host.py [-top N] FOLDER...  (generic GEMM folders)
"""
import cProfile
import importlib.util
import io
import pathlib
import pstats
import statistics
import sys
import time

import torch


def load(folder, name):
    spec = importlib.util.spec_from_file_location(f"_h_{abs(hash(str(folder)))}_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def host_us(fn, bursts=40, k=10):
    for _ in range(5):
        fn()
    times = []
    for _ in range(bursts):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        times.append((time.perf_counter() - t0) / k * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def syncs(fn):
    """Whether fn() synchronizes the host with the device (set_sync_debug_mode's error)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
        return "no"
    except RuntimeError as e:
        return "YES: " + str(e).splitlines()[0][:100]
    finally:
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()


def main():
    args = sys.argv[1:]
    top = 16
    rounds = 0
    if "-rounds" in args:
        i = args.index("-rounds")
        rounds = int(args[i + 1])
        del args[i:i + 2]
    if "-top" in args:
        i = args.index("-top")
        top = int(args[i + 1])
        del args[i:i + 2]
    for arg in args:
        folder = pathlib.Path(arg).resolve()
        sys.path.insert(0, str(folder))
        fat = load(folder, "fa_testing")
        case = load(folder, "case")
        kernel = load(folder, "kernel")
        adapter = load(folder, "adapter")
        ref = load(folder, "reference")
        dt = fat.DTYPES[case.DTYPE]
        inputs = adapter.make_inputs(case.SHAPES, dt, case.PARAMS, "cuda", 0)
        xs = [inputs[n] for n in adapter.NAMES]
        if not case.GEMM["bias"]:
            xs.insert(2, None)
        a, w, bias, *rest = xs

        def call():
            return adapter.fused(kernel, inputs, case.PARAMS)

        call()
        torch.cuda.synchronize()
        key = list(kernel._GEMM_TUNED)[0]
        kept = kernel._GEMM_TUNED[key]
        # the paths are forced through _GEMM_TUNED below: the eager-use choice would override
        # them outside a capture, so it is reported and dropped ("fused kept": the GPU's choice)
        eager = kernel._GEMM_EAGER.pop(key, None)
        first = [t for t in kernel._gemm_candidates(key[1], key[3], a.element_size())][0]
        print(f"{folder.name}: kept {kept}, eager use {eager or kept}", flush=True)
        rows = [("eager", lambda: adapter.reference(ref, inputs, case.PARAMS))]
        rows.append(("fused kept", call))
        for label, tile in (("fused library", kernel.GEMM_LIBRARY), ("fused tile", first)):
            def forced(tile=tile):
                kernel._GEMM_TUNED[key] = tile
                return call()
            rows.append((label, forced))
        rows.append(("gemm_cublas", lambda: kernel.gemm_cublas(*xs)))
        shape, out_shapes = kernel._gemm_planned(a, w, bias, rest)[:2]
        x0 = torch.empty(shape, dtype=kernel.GEMM_DTYPE, device="cuda")
        outs = [torch.empty(s, dtype=d, device="cuda") for s, d in zip(out_shapes, kernel.OUT_DTYPES)]
        a2, wt, x02 = a.reshape(-1, a.shape[-1]), w.t(), x0.view(-1, x0.shape[-1])

        def addmm():
            with torch.no_grad():
                if bias is None:
                    torch.mm(a2, wt, out=x02)
                else:
                    torch.addmm(bias, a2, wt, out=x02)

        def addmm_bare():
            if bias is None:
                torch.mm(a2, wt, out=x02)
            else:
                torch.addmm(bias, a2, wt, out=x02)

        def no_grad():
            with torch.no_grad():
                pass

        rows += [("  _gemm_planned", lambda: kernel._gemm_planned(a, w, bias, rest)),
                 ("  _gemm_views", lambda: kernel._gemm_views(a, w)),
                 ("  torch.empty pre", lambda: torch.empty(shape, dtype=kernel.GEMM_DTYPE, device="cuda")),
                 ("  addmm(out=) no_grad", addmm),
                 ("  addmm(out=) bare", addmm_bare),
                 ("  F.linear", lambda: kernel.gemm_only(a, w, bias)),
                 ("  fused(out=)", lambda: kernel.fused(x0, *rest, out=outs)),
                 ("  fused()", lambda: kernel.fused(x0, *rest)),
                 ("  no_grad()", no_grad)]
        for label, fn in rows:
            try:
                us = host_us(fn)
                sync = syncs(fn)
            except Exception as e:  # noqa: BLE001 - a piece that does not apply here
                print(f"  {label:24s} failed: {type(e).__name__}: {str(e)[:80]}")
                continue
            print(f"  {label:24s} {us:7.1f} µs   syncs: {sync}", flush=True)
        kernel._GEMM_TUNED[key] = kernel.GEMM_LIBRARY
        prof = cProfile.Profile()
        torch.cuda.synchronize()
        prof.enable()
        for _ in range(200):
            call()
        prof.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
        print("  cProfile of 200 library-path calls (own time):")
        for line in s.getvalue().splitlines():
            if line.strip() and ("{" in line or ".py" in line or "ncalls" in line):
                print("   ", line[:150])
        if rounds:
            interleaved(kernel, key, call, xs, x0, outs, rest, rounds)
        kernel._GEMM_TUNED[key] = kept
        sys.path.remove(str(folder))


def interleaved(kernel, key, call, xs, x0, outs, rest, rounds):
    """The library path against gemm_cublas and hand-assembled variants, R interleaved rounds."""
    a, w, bias = xs[:3]
    a2, x02 = a.reshape(-1, a.shape[-1]), x0.view(-1, x0.shape[-1])
    kernel._GEMM_TUNED[key] = kernel.GEMM_LIBRARY
    call()
    launch = kernel._fwd_planned((x0, *rest))[1]

    def addmm_out():
        if bias is None:
            torch.mm(a2, w.t(), out=x02)
        else:
            torch.addmm(bias, a2, w.t(), out=x02)

    # the first output over the GEMM output, in place; any other output into outs' own
    def lib_by_hand():  # the GEMM output allocated, addmm(out=), the kernel in place
        o = torch.empty_like(x0)
        if bias is None:
            torch.mm(a2, w.t(), out=o.view(-1, o.shape[-1]))
        else:
            torch.addmm(bias, a2, w.t(), out=o.view(-1, o.shape[-1]))
        kernel._fused_run(launch, (o, *rest), [o, *outs[1:]])

    def linear_in_place():  # F.linear allocates, the kernel in place on its result
        o = kernel.gemm_only(a, w, bias)
        kernel._fused_run(launch, (o, *rest), [o, *outs[1:]])

    rows = [("gemm_fused (library)", call), ("gemm_cublas", lambda: kernel.gemm_cublas(*xs)),
            ("addmm(out=)", addmm_out), ("F.linear", lambda: kernel.gemm_only(a, w, bias)),
            ("empty+addmm(out=)+kernel", lib_by_hand), ("F.linear+kernel in place", linear_in_place),
            ("kernel in place alone", lambda: kernel._fused_run(launch, (x0, *rest), [x0, *outs[1:]]))]
    with torch.no_grad():
        got = {label: [] for label, _ in rows}
        for _ in range(rounds):
            for label, fn in rows:
                got[label].append(host_us(fn, bursts=20))
    print(f"  interleaved, {rounds} rounds under no_grad (median host µs a call):")
    for label, v in got.items():
        print(f"    {label:28s} {statistics.median(v):7.1f}")


if __name__ == "__main__":
    main()
