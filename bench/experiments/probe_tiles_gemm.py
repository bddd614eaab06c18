"""Probe: the GEMM templates' tile choice, statistics tile, fp32 precision and host cost.

linear_gelu and layernorm_linear no longer autotune per exact M: a tile is timed once per
bucket of shapes and launched directly (the ``gemm`` block of templates/_common/shared.py).
This script checks the choices on the GPU, for the large and decode-size shapes of
docs/benchmarks/h200.md:

1. ``tiles``: per case, every tile of the old autotune lists and the new candidate lists,
   timed one by one (the template run with its tile forced); reported: the untimed choice
   (the first candidate, what a CUDA-graph capture at an untuned bucket gets), the tile the
   template's tuning picks, the best of the new list, the best of the old list (the old
   autotuner's pick at best), and the best new tile with BLOCK_N < 64 (the decode tiles).
   Cases: linear_gelu bf16 16x4096x4096 and 8192x4096x4096, fp16 4096x768x3072, fp32
   4096x2048x8192; layernorm_linear (fold) bf16 16x4096x4096, 8192x1024x4096 and ConvNeXt's
   100352x96x384 and 25088x192x768.
2. ``stats``: layernorm_linear's row statistics, one row per program (before) against the
   ``[ROWS, BLOCK_K]`` tile of ``_stats_config`` (now), at K = 96, 192, 768, 4096.
3. ``fp32``: the fp32 GEMM with ``input_precision="tf32x3"`` (now) and ``"ieee"`` (before), same
   tile: time and max |error| against float64, beside eager cuBLAS's.
4. ``host``: per-call wall time and host time (fa_testing.wall_time_us: back to back, no CUDA
   graph, as an eager model calls it) of the fused call against the eager chain, and the
   cost of the first call at a new bucket (its tuning), for linear_gelu bf16 4x512x1024x4096
   (the review's repro: 105.4 against 40.1 us) and 16x4096x4096, layernorm_linear bf16
   16x4096x4096 and 4x512x1024x4096.

GPU times: CUDA events around the call only, the L2 flushed (256 MB written, then another
read: fa_testing.L2Flush) before every call, median (p20, p80) of --reps calls (default 50).
The kernels are compiled first by a pool of worker processes (one job per kernel and tile;
they fill Triton's on-disk cache), so the timing process mostly loads them.

Usage:
    python3 bench/experiments/probe_tiles_gemm.py [--reps 50] [--jobs 16] [--only tiles,stats,fp32,host]
    TRITON_INTERPRET=1 python3 bench/experiments/probe_tiles_gemm.py --check
        (CPU: every case and the plumbing at tiny shapes with a stand-in timer; exit 1 on a
        wrong result)

Output: a table per experiment on stdout; one JSON object per measurement on stderr.
"""

import argparse
import importlib.util
import json
import math
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "templates" / "_common"))

import fa_testing as fat  # noqa: E402

INTERPRET = fat.INTERPRET
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

# the old autotune lists (before the bucketed tuning): (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps)
OLD_LARGE_M = [(64, 128, 32, 4, 4), (128, 256, 64, 3, 8), (128, 128, 64, 3, 4), (128, 64, 64, 4, 4),
               (64, 64, 64, 4, 4), (128, 64, 32, 4, 4)]
OLD_SMALL_M = [(16, 64, 128, 4, 4), (64, 32, 128, 4, 4), (64, 64, 128, 4, 4), (16, 128, 64, 4, 4)]

# (template, M, K, N, dtype)
TILE_CASES = [
    ("linear_gelu", 16, 4096, 4096, "bf16"), ("linear_gelu", 8192, 4096, 4096, "bf16"),
    ("linear_gelu", 4096, 768, 3072, "fp16"), ("linear_gelu", 4096, 2048, 8192, "fp32"),
    ("layernorm_linear", 16, 4096, 4096, "bf16"), ("layernorm_linear", 8192, 1024, 4096, "bf16"),
    ("layernorm_linear", 100352, 96, 384, "bf16"), ("layernorm_linear", 25088, 192, 768, "bf16"),
]
STATS_CASES = [(100352, 96), (25088, 192), (8192, 768), (8192, 4096)]
FP32_CASE = ("linear_gelu", 4096, 2048, 8192, "fp32")
HOST_CASES = [("linear_gelu", 2048, 1024, 4096, "bf16"), ("linear_gelu", 16, 4096, 4096, "bf16"),
              ("layernorm_linear", 16, 4096, 4096, "bf16"), ("layernorm_linear", 2048, 1024, 4096, "bf16")]
CHECK_SHAPES = {16: 16, 8192: 40, 4096: 33, 100352: 35, 25088: 20, 2048: 24}  # M at --check


def load(name, patch=None):
    """templates/<name>/kernel.py as a fresh module (``patch``: (old, new) source edit)."""
    path = ROOT / "templates" / name / "kernel.py"
    src = path.read_text()
    tag = ""
    if patch:
        assert src.count(patch[0]) == 1, patch
        src = src.replace(*patch)
        tag = "_patched"
    mod = type(sys)(f"probe_{name}{tag}")
    mod.__file__ = str(path)
    exec(compile(src, str(path), "exec"), mod.__dict__)  # noqa: S102 - the repository's own template
    return mod


def inputs(name, M, K, N, dt, device, seed=0):
    g = fat.gen(seed)
    dtype = DTYPES[dt]
    x = fat.randn([M, K], dtype, device, g, mean=-2.3 if name == "layernorm_linear" else 0.0, std=0.5)
    w = fat.randn([N, K], dtype, device, g, std=K ** -0.5)
    b = fat.randn([N], dtype, device, g)
    d = {"x": x, "w": w, "b": b}
    if name == "layernorm_linear":
        d["g"] = fat.randn([K], dtype, device, g, mean=1.0, std=0.2)
        d["beta"] = fat.randn([K], dtype, device, g, std=0.2)
    return d


def call(mod, name, d, out=None):
    if name == "linear_gelu":
        return mod.linear_gelu(d["x"], d["w"], d["b"], out=out)
    if "folded" not in d:
        d["folded"] = mod.fold_weights(d["g"], d["beta"], d["w"], d["b"])
    return mod.layernorm_linear(d["x"], d["g"], d["beta"], d["w"], d["b"], out=out, folded=d["folded"])


def eager(name, d):
    F = torch.nn.functional
    if name == "linear_gelu":
        return F.gelu(F.linear(d["x"], d["w"], d["b"]))
    return F.linear(F.layer_norm(d["x"], (d["x"].shape[-1],), d["g"], d["beta"], 1e-5), d["w"], d["b"])


class Forced:
    """Runs the template with its tile forced: replaces the module's _gemm_tile."""

    def __init__(self, mod, tile):
        self.mod, self.tile, self.saved = mod, tile, None

    def __enter__(self):
        self.saved = self.mod._gemm_tile
        self.mod._gemm_tile = lambda *a, **k: self.tile
        return self

    def __exit__(self, *exc):
        self.mod._gemm_tile = self.saved


def candidates(mod, M, K, dt):
    """(new candidates, old autotune candidates) for this M, K and dtype."""
    es = DTYPES[dt].itemsize
    bucket = max(16, 1 << (M - 1).bit_length())
    new = mod._gemm_candidates(bucket, K, es)
    old_group = OLD_SMALL_M if M <= 64 else OLD_LARGE_M
    kmax = max(32, 1 << (K - 1).bit_length())
    old = [t for t in old_group
           if t[2] <= kmax and (t[3] * (t[0] + t[1]) * t[2] + t[0] * t[1]) * es <= mod._GEMM_SMEM]
    return new, old or [(64, 64, 32, 2, 4)]


# --- compiling ahead ---------------------------------------------------------------------------

def _compile_job(job):
    """One launch of a template with a forced tile (fills Triton's on-disk cache); never raises."""
    name, M, K, N, dt, tile = job
    try:
        mod = load(name)
        d = inputs(name, min(M, 64), K, N, dt, "cuda")  # M's size does not change the compiled kernel
        with Forced(mod, tile):
            call(mod, name, d)
        torch.cuda.synchronize()
        return job, None
    except BaseException as e:  # noqa: BLE001 - a worker always answers
        return job, repr(e)[:200]


def precompile(jobs, workers, deadline_s=60.0):
    if workers <= 0 or not jobs:
        return
    t0 = time.time()
    print(f"# compiling {len(jobs)} kernels in {workers} processes", flush=True)
    pool = mp.get_context("spawn").Pool(workers)
    try:
        pending = [pool.apply_async(_compile_job, (j,)) for j in jobs]
        for r in pending:
            left = deadline_s - (time.time() - t0)
            if left <= 0:
                break
            try:
                job, err = r.get(timeout=left)
                if err:
                    print(f"#   {job[0]} {job[1:5]} tile {job[5]}: {err}", flush=True)
            except mp.TimeoutError:
                break
    finally:
        pool.terminate()
        pool.join()
    print(f"# compiled in {time.time() - t0:.1f} s", flush=True)


# --- timing --------------------------------------------------------------------------------------

def gpu_us(fn, reps):
    """[median, p20, p80] GPU time in us: L2 flushed (written, then another buffer read) before
    every call, events around the call only."""
    if INTERPRET:
        fn()
        return [float("nan")] * 3
    fn()
    torch.cuda.synchronize()
    flush = fat.l2_flush()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        flush()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return fat.quantiles([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])


def max_rel(got, want):
    w = want.double()
    return ((got.double() - w).abs().max() / w.abs().max().clamp(min=1e-30)).item()


def emit(**fields):
    print(json.dumps(fields), file=sys.stderr, flush=True)


def fmt(t):
    return "x".join(map(str, t[:3])) + f"/s{t[3]}w{t[4]}" if t else "-"


# --- experiments -----------------------------------------------------------------------------------

def exp_tiles(mods, device, reps, check):
    print("\n## tiles (GPU us, median; the untimed choice, the template's tuned pick, best new, best old, best BLOCK_N<64)")
    print(f"{'case':44s} {'untimed':>22s} {'tuned':>22s} {'best new':>22s} {'best old':>22s} {'BN<64':>22s}")
    for name, M, K, N, dt in TILE_CASES:
        if check:
            M = CHECK_SHAPES[M]
            K, N = min(K, 72), min(N, 48)
        mod = mods[name]
        d = inputs(name, M, K, N, dt, device)
        want = eager(name, d)
        new, old = candidates(mod, M, K, dt)
        times = {}
        for tile in dict.fromkeys(new + old):
            with Forced(mod, tile):
                try:
                    err = max_rel(call(mod, name, d), want)
                    t = gpu_us(lambda: call(mod, name, d), reps)
                except Exception as e:  # noqa: BLE001 - a tile that does not fit here
                    emit(exp="tiles", case=[name, M, K, N, dt], tile=tile, error=repr(e)[:200])
                    continue
            times[tile] = t[0]
            emit(exp="tiles", case=[name, M, K, N, dt], tile=tile, median_us=t[0], p20_us=t[1], p80_us=t[2],
                 max_rel_err=err, new=tile in new, old=tile in old)
            if err > (1e-3 if dt == "fp32" else 3e-2):
                raise AssertionError(f"{name} {M}x{K}x{N} {dt} tile {tile}: max rel error {err:.3g}")
        # the template's own tuning (a fresh bucket): the tile it keeps
        mod._GEMM_TUNED.clear()
        if not check:
            call(mod, name, d)
        tuned = next(iter(mod._GEMM_TUNED.values()), None)
        narrow = [t for t in new if t[1] < 64 and t in times]

        def cell(t):
            return f"{fmt(t)} {times[t]:7.1f}" if t in times else "-"
        best_new = min((t for t in new if t in times), key=times.get, default=None)
        best_old = min((t for t in old if t in times), key=times.get, default=None)
        print(f"{name + ' ' + dt + ' ' + f'{M}x{K}x{N}':44s} {cell(new[0]):>22s} {cell(tuned):>22s} "
              f"{cell(best_new):>22s} {cell(best_old):>22s} {cell(min(narrow, key=times.get, default=None)):>22s}",
              flush=True)


def exp_stats(mods, device, reps, check):
    mod = mods["layernorm_linear"]
    print("\n## stats (GPU us, median): one row per program (before) vs the [ROWS, BLOCK_K] tile (now)")
    for M, K in STATS_CASES:
        if check:
            M, K = 33, min(K, 300)
        x = fat.randn([M, K], torch.bfloat16, device, fat.gen(1), mean=-2.3, std=0.5)
        mean = torch.empty(M, dtype=torch.float32, device=device)
        rstd = torch.empty(M, dtype=torch.float32, device=device)
        rows, block, warps = mod._stats_config(M, K)
        old_block = min(1 << (K - 1).bit_length(), mod.MAX_BLOCK_K)

        def run(r, blk, w):
            mod._launch(mod._ln_stats_kernel, (math.ceil(M / r),), (x, mean, rstd, M, K, x.stride(0), x.stride(1), 1e-5),
                        num_warps=w, ROWS=r, BLOCK_K=blk, SINGLE=K <= blk)
        res = {}
        for label, cfg in (("before", (1, old_block, 4 if old_block <= 1024 else 8)), ("now", (rows, block, warps))):
            t = gpu_us(lambda: run(*cfg), reps)
            xf = x.float()
            err = max((mean - xf.mean(-1)).abs().max().item(),
                      (rstd - torch.rsqrt(xf.var(-1, unbiased=False) + 1e-5)).abs().max().item() / 10)
            if err > 1e-3:
                raise AssertionError(f"stats {M}x{K} {label}: error {err:.3g}")
            res[label] = t[0]
            emit(exp="stats", M=M, K=K, variant=label, rows=cfg[0], block_k=cfg[1], warps=cfg[2], median_us=t[0],
                 p20_us=t[1], p80_us=t[2])
        print(f"  {M}x{K}: before {res['before']:8.1f}   now {res['now']:8.1f}  (ROWS={rows}, BLOCK_K={block}, "
              f"{warps} warps)", flush=True)


def exp_fp32(mods, device, reps, check):
    name, M, K, N, dt = FP32_CASE
    if check:
        M, K, N = 33, 72, 48
    print("\n## fp32 (GPU us, median; max |error| against float64)")
    d = inputs(name, M, K, N, dt, device)
    want = eager(name, {k: v.double() for k, v in d.items()})
    e_eager = (eager(name, d).double() - want).abs().max().item()
    tile = mods[name]._gemm_candidates(max(16, 1 << (M - 1).bit_length()), K, 4)[0]
    for label, mod in (("tf32x3 (now)", mods[name]), ("ieee (before)", mods[name + "_ieee"])):
        with Forced(mod, tile):
            err = (call(mod, name, d).double() - want).abs().max().item()
            t = gpu_us(lambda: call(mod, name, d), reps)
        emit(exp="fp32", variant=label, M=M, K=K, N=N, tile=tile, median_us=t[0], p20_us=t[1], p80_us=t[2],
             max_abs_err=err, eager_max_abs_err=e_eager)
        print(f"  {label:14s} {M}x{K}x{N} tile {fmt(tile)}: {t[0]:9.1f} us, max|err| {err:.2e} (eager cuBLAS {e_eager:.2e})",
              flush=True)
        if err > 1e-4:
            raise AssertionError(f"fp32 {label}: error {err:.3g}")


def exp_host(mods, device, reps, check):
    print("\n## host (per call, back to back, no CUDA graph: wall us / host us; first call at a new bucket)")
    for name, M, K, N, dt in HOST_CASES:
        if check:
            M, K, N = CHECK_SHAPES[M], 64, 48
        mod = mods[name]
        d = inputs(name, M, K, N, dt, device)
        mod._GEMM_TUNED.clear()
        t0 = time.perf_counter()
        call(mod, name, d)
        if not INTERPRET:
            torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        if INTERPRET:
            print(f"  {name} {dt} {M}x{K}x{N}: first call {first_s:.2f} s (interpreter: no timing)")
            continue
        f = fat.wall_time_us(lambda: call(mod, name, d))
        e = fat.wall_time_us(lambda: eager(name, d))
        emit(exp="host", case=[name, M, K, N, dt], fused=f, eager=e, first_call_s=first_s)
        print(f"  {name + ' ' + dt + ' ' + f'{M}x{K}x{N}':40s} fused {f['wall_us']:7.1f} / {f['host_us']:5.1f}   "
              f"eager {e['wall_us']:7.1f} / {e['host_us']:5.1f}   first call (tuning) {first_s:.2f} s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--only", default="tiles,stats,fp32,host")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if args.check != INTERPRET:
        sys.exit("--check needs TRITON_INTERPRET=1, and timing needs it unset")
    device = "cpu" if args.check else "cuda"
    if not args.check:
        fat.require_cuda("probe_tiles_gemm")
        print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton "
              f"{__import__('triton').__version__}", flush=True)
    mods = {n: load(n) for n in ("linear_gelu", "layernorm_linear")}
    mods["linear_gelu_ieee"] = load("linear_gelu", ('tl.constexpr("ieee" if INTERPRET else "tf32x3")',
                                                    'tl.constexpr("ieee")'))
    only = set(args.only.split(","))
    if not args.check and only & {"tiles", "host"}:
        jobs = []
        for name, M, K, N, dt in TILE_CASES + (HOST_CASES if "host" in only else []):
            new, old = candidates(mods[name], M, K, dt)
            jobs += [(name, M, K, N, dt, t) for t in dict.fromkeys(new + old)]
        # one job per compiled kernel: M and N are runtime arguments (all here multiples of 16)
        precompile(list({(j[0], j[2], j[4], j[5]): j for j in jobs}.values()), args.jobs)
    t0 = time.time()
    for exp in ("tiles", "stats", "fp32", "host"):
        if exp in only:
            globals()[f"exp_{exp}"](mods, device, 3 if args.check else args.reps, args.check)
    print(f"\n# done in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
