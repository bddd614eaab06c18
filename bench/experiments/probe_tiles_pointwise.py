"""Probe (GPU): the pointwise templates' tile heuristic against the autotuner it replaced.

bias_gelu, gelu_pyops, dropout_add and swiglu choose their tile (BLOCK_M x BLOCK_N, num_warps)
with ``_tiles`` (templates/_common/shared.py) instead of benchmarking the eight configs of
their former ``@triton.autotune`` list. For the large and the decode-size shapes of these
templates in docs/benchmarks/h200.md, this times the template's kernel (through its public
wrapper, with ``_tiles`` replaced) with the heuristic's tile and with each former config, and
prints per case: the heuristic's tile and GPU time, the best former config and its time, their
ratio, and both against the memory floor (the case's bytes at the copy bandwidth measured
here). Then, at the decode-size shapes, the per-call wall and host time of the fused call and
of the eager chain, called back to back as an eager model calls them (no CUDA graph).

GPU time: CUDA events around the call only, L2 emptied before every call (256 MB written, then
another 256 MB read: fa_testing.L2Flush), median of --reps calls (>= 50) after a warm-up.
Compilation dominates the run time (one kernel per tile and dtype); --budget-s stops starting
new cases after that many seconds (default 80).

Usage: python3 bench/experiments/probe_tiles_pointwise.py [--budget-s 80] [--reps 60] [--only REGEX] [--json FILE]
Output: the tables on stdout; with --json, one JSON object per measurement in FILE.
"""

import argparse
import importlib.util
import json
import math
import pathlib
import re
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "templates" / "_common"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fa_testing as fat  # noqa: E402

# the configs of the former @triton.autotune list: (BLOCK_M, BLOCK_N, num_warps)
OLD = [(1, 1024, 4), (4, 256, 4), (8, 128, 4), (16, 128, 4), (4, 1024, 8), (8, 512, 8), (32, 64, 4), (2, 2048, 8)]
DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# (template, label, dtype, shape, params); the large and decode-size shapes of docs/benchmarks/h200.md
CASES = [  # large shapes first, then decode-size ones (--budget-s may cut the tail)
    ("bias_gelu", "erf", "bf16", [8192, 16384], {"approximate": "none"}),
    ("gelu_pyops", "", "fp16", [16384, 3072], {}),
    ("dropout_add", "p=0.1", "bf16", [8192, 4096], {"p": 0.1}),
    ("swiglu", "", "bf16", [8192, 11008], {}),
    ("bias_gelu", "erf", "fp16", [16384, 3072], {"approximate": "none"}),
    ("bias_gelu", "tanh", "fp32", [8192, 16384], {"approximate": "tanh"}),
    ("dropout_add", "p=0.1", "fp32", [16, 256, 2048], {"p": 0.1}),
    ("bias_gelu", "erf", "bf16", [32, 4096], {"approximate": "none"}),
    ("gelu_pyops", "", "fp16", [1, 128, 3072], {}),
    ("gelu_pyops", "", "bf16", [8, 512, 3072], {}),
    ("dropout_add", "p=0.1", "bf16", [8, 512, 768], {"p": 0.1}),
    ("swiglu", "", "bf16", [4, 512, 2816], {}),
    ("swiglu", "", "fp16", [32, 11008], {}),
]
DECODE = 1 << 22  # cases of at most this many elements also get the per-call wall/host table


def load(pattern):
    path = ROOT / "templates" / pattern / "kernel.py"
    spec = importlib.util.spec_from_file_location(f"_probe_{pattern}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def case_fns(pattern, mod, dtype, shape, params, gen):
    """(fused, eager, bytes moved at the floor) for one case; inputs made on the GPU."""
    dt = DT[dtype]

    def randn(*s):
        return torch.randn(*s, device="cuda", dtype=dt, generator=gen)

    n, es = math.prod(shape), torch.tensor([], dtype=dt).element_size()
    if pattern == "bias_gelu":
        x, b, a = randn(*shape), randn(shape[-1]), params["approximate"]
        return (lambda: mod.bias_gelu(x, b, a)), (lambda: F.gelu(x + b, approximate=a)), 2 * n * es
    if pattern == "gelu_pyops":
        x, b = randn(*shape), randn(shape[-1])

        def eager():
            z = x + b
            return 0.5 * z * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * torch.pow(z, 3.0))))
        return (lambda: mod.new_gelu(x, b)), eager, 2 * n * es
    if pattern == "dropout_add":
        x, r, b, p = randn(*shape), randn(*shape), randn(shape[-1]), params["p"]
        return (lambda: mod.dropout_add(x, r, b, p, 1234)), (lambda: r + F.dropout(x + b, p, True)), 3 * n * es
    if pattern == "swiglu":
        gate, up = randn(*shape[:-1], 2 * shape[-1]).chunk(2, dim=-1)
        return (lambda: mod.swiglu(gate, up)), (lambda: F.silu(gate) * up), 3 * n * es
    raise ValueError(pattern)


def copy_bandwidth():
    """Bytes per second of a 1 GiB device-to-device copy (read + write), L2 flushed."""
    src = torch.empty(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    us = fat.gpu_time_us(lambda: dst.copy_(src), warmup_ms=10, rep_ms=50)[0]
    return 2 * src.numel() * 4 / (us * 1e-6)


def gpu_us(fn, reps, flush):
    """Median GPU time (us) of fn over reps calls, each after flush(), events around the call."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        flush()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return fat.quantiles([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)], (0.5,))[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-s", type=float, default=80.0)
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--only", default="", help="regex on 'template label dtype shape'")
    ap.add_argument("--json", default="", help="also write one JSON object per measurement to this file")
    args = ap.parse_args()
    fat.require_cuda("probe_tiles_pointwise")
    t0 = time.time()
    flush = fat.l2_flush()
    bw = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}: copy {bw / 1e9:.0f} GB/s; GPU time = median of {args.reps}, "
          f"L2 flushed before each call", flush=True)
    log = open(args.json, "w") if args.json else None
    mods = {}
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, walls = [], []
    for pattern, label, dtype, shape, params in CASES:
        name = f"{pattern} {label} {dtype} {'x'.join(map(str, shape))}".replace("  ", " ")
        if args.only and not re.search(args.only, name):
            continue
        if time.time() - t0 > args.budget_s:
            print(f"(budget spent: {name} and later cases skipped)")
            break
        mod = mods.get(pattern) or mods.setdefault(pattern, load(pattern))
        fused, eager, nbytes = case_fns(pattern, mod, dtype, shape, params, gen)
        heur = mod._tiles
        M, N = math.prod(shape[:-1]), shape[-1]
        es = max(torch.tensor([], dtype=DT[dtype]).element_size(), 1)
        h = heur(N, es, 8 if pattern == "dropout_add" else 1)
        times = {}
        try:
            for cfg in [h] + [c for c in OLD if c != h]:
                mod._tiles = lambda *a, cfg=cfg, **k: cfg
                times[cfg] = gpu_us(fused, args.reps, flush)
                if log:
                    print(json.dumps({"case": name, "tile": cfg, "us": times[cfg]}), file=log, flush=True)
        finally:
            mod._tiles = heur
        best = min((c for c in OLD if c in times), key=times.get)
        floor = nbytes / bw * 1e6
        rows.append((name, h, times[h], best, times[best], floor))
        if M * N <= DECODE:
            f, e = fat.wall_time_us(fused, target_ms=10), fat.wall_time_us(eager, target_ms=10)
            walls.append((name, f["wall_us"], f["host_us"], e["wall_us"], e["host_us"]))
            if log:
                print(json.dumps({"case": name, "fused": f, "eager": e}), file=log, flush=True)
    print()
    print(f"{'case':34s} {'heuristic tile':>16s} {'us':>8s} {'best former':>16s} {'us':>8s} "
          f"{'heur/best':>9s} {'floor us':>8s} {'heur/floor':>10s}")
    for name, h, th, b, tb, fl in rows:
        print(f"{name:34s} {str(h):>16s} {th:8.2f} {str(b):>16s} {tb:8.2f} {th / tb:9.3f} {fl:8.2f} {th / fl:10.3f}")
    if walls:
        print()
        print("per call, back to back, no CUDA graph (us): fused wall / host, eager chain wall / host")
        print(f"{'case':34s} {'fused wall':>10s} {'host':>8s} {'eager wall':>10s} {'host':>8s}")
        for name, fw, fh, ew, eh in walls:
            print(f"{name:34s} {fw:10.2f} {fh:8.2f} {ew:10.2f} {eh:8.2f}")
    print(f"\n{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
