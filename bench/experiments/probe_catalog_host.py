"""Probe: where the catalog's GEMM templates (linear_gelu, layernorm_linear) spend host time per
call, and what each way of running them costs (GPU-only).

bench measured them slower than eager per call although faster on the GPU
(docs/benchmarks/h200-catalog-gemm-2026-12-04c.json: layernorm_linear 1x128x768x3072 fp16
98.6 µs a call against eager's 53.5; linear_gelu 2048x1024x1024 32.6 against 24.9). Per folder,
in R interleaved rounds (the H200 host drifts by tens of percent over seconds; the medians),
host µs a call (bursts of 10 calls started on an idle GPU, never waited for) of:

  eager            the traced chain (adapter.reference)
  fused            adapter.fused as bench calls it (the tuner's eager-use choice)
  fused, wrapper   the same, TMA kernels launched through Triton's own launcher wrapper
                   (each descriptor encoded per launch) instead of _gemm_launch's direct path
  tma / pointer / one launch / library
                   the bucket's path forced: the GPU-fastest tile (on the TMA kernel where the
                   operands allow), the same tile on the pointer kernel, layernorm_linear's
                   one launch (the statistics in the GEMM kernel), the library path (cuBLAS)

and their GPU time (the tuner's _gemm_time_ms: CUDA-graph replays after an L2 sweep); then
pieces (layernorm_linear's statistics pass alone, the GEMM with statistics given, an output's
torch.empty) and the top functions of a cProfile of 200 calls of ``fused`` by own time.

Usage: python3 bench/experiments/probe_catalog_host.py [-rounds R] [-top N] FOLDER...
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
    spec = importlib.util.spec_from_file_location(f"_c_{abs(hash(str(folder)))}_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def host_us(fn, bursts=20, k=10):
    for _ in range(3):
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


def main():
    args = sys.argv[1:]
    rounds, top = 5, 20
    for flag in ("-rounds", "-top"):
        if flag in args:
            i = args.index(flag)
            if flag == "-rounds":
                rounds = int(args[i + 1])
            else:
                top = int(args[i + 1])
            del args[i:i + 2]
    for arg in args:
        probe(pathlib.Path(arg).resolve(), rounds, top)


def probe(folder, rounds, top):
    sys.path.insert(0, str(folder))
    fat = load(folder, "fa_testing")
    case = load(folder, "case")
    kernel = load(folder, "kernel")
    adapter = load(folder, "adapter")
    ref = load(folder, "reference")
    sys.path.remove(str(folder))
    dt = fat.DTYPES[case.DTYPE]
    inputs = adapter.make_inputs(case.SHAPES, dt, case.PARAMS, "cuda", 0)
    params = case.PARAMS

    def fused():
        return adapter.fused(kernel, inputs, params)

    fused()
    torch.cuda.synchronize()
    tuned, eager_use = dict(kernel._GEMM_TUNED), dict(kernel._GEMM_EAGER)
    print(f"{folder.name}: tuned {list(tuned.values())}, eager use {list(eager_use.values())}, "
          f"direct TMA launches {len(kernel._TMA_LAUNCH)}", flush=True)
    direct = dict(kernel._TMA_LAUNCH)
    (key, best), = [(k, t) for k, t in tuned.items()]
    tile = best if best is not kernel.GEMM_LIBRARY else kernel._gemm_candidates(key[1], key[3], dt.itemsize)[0]
    forced = {"tma": tile, "pointer": tile + (1,), "one launch": tile + (2,), "library": kernel.GEMM_LIBRARY}

    def state(path):
        """Force a path: None (as tuned, eager use as picked), "wrapper" (the same, through
        Triton's launcher wrapper), or one of forced's (for every use)."""
        kernel._TMA_LAUNCH = {} if path == "wrapper" else direct
        kernel._GEMM_EAGER.clear()
        if path in forced:
            kernel._GEMM_TUNED[key] = forced[path]
        else:
            kernel._GEMM_TUNED[key] = best
            kernel._GEMM_EAGER.update(eager_use)

    rows = [("eager", None), ("fused", None), ("fused, wrapper", "wrapper")] + [(p, p) for p in forced]
    if not hasattr(kernel, "ln_stats"):
        rows.remove(("one launch", "one launch"))
    host = {label: [] for label, _ in rows}
    gpu = {}
    for r in range(rounds):
        for label, path in (rows if r % 2 == 0 else rows[::-1]):
            if label == "eager":
                host[label].append(host_us(lambda: adapter.reference(ref, inputs, params)))
                continue
            state(path)
            host[label].append(host_us(fused))
            if r == 0:
                gpu[label] = 1e3 * kernel._gemm_time_ms(fused)
    state(None)
    gpu["eager"] = 1e3 * kernel._gemm_time_ms(lambda: adapter.reference(ref, inputs, params))
    print(f"  {rounds} interleaved rounds; tile {tile}: host µs a call (median) / GPU µs (graph replay)")
    for label, v in host.items():
        print(f"    {label:16s} {statistics.median(v):7.1f} / {gpu.get(label, float('nan')):6.1f}   "
              f"rounds {' '.join(f'{x:.1f}' for x in v)}", flush=True)

    shape = tuple(inputs["x"].shape[:-1]) + (inputs["weight"].shape[0],)
    pieces = [("torch.empty out", lambda: torch.empty(shape, dtype=dt, device="cuda"))]
    if hasattr(kernel, "ln_stats"):
        x = inputs["x"]
        stats = kernel.ln_stats(x)
        folded = inputs.get("_folded")
        g, b, w, bias = inputs.get("ln_weight"), inputs.get("ln_bias"), inputs["weight"], inputs.get("bias")
        pieces += [("ln_stats", lambda: kernel.ln_stats(x)),
                   ("GEMM, stats given", lambda: kernel.layernorm_linear(x, g, b, w, bias, stats=stats,
                                                                         folded=folded))]
    for label, fn in pieces:
        try:
            print(f"    {label:16s} {host_us(fn):7.1f}", flush=True)
        except Exception as e:  # noqa: BLE001 - a piece that does not apply here
            print(f"    {label:16s} failed: {type(e).__name__}: {str(e)[:80]}")

    prof = cProfile.Profile()
    torch.cuda.synchronize()
    prof.enable()
    for _ in range(200):
        fused()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
    print("  cProfile of 200 calls of fused (own time):")
    for line in s.getvalue().splitlines():
        if line.strip() and ("{" in line or ".py" in line or "ncalls" in line):
            print("   ", line[:150])


if __name__ == "__main__":
    main()
