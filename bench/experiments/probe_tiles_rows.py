"""Probe: the row kernels' heuristic layouts against the old autotuner's configs (GPU only).

add_layernorm, rmsnorm_pyops and mask_softmax now choose BLOCK_N, ROWS and num_warps from
the row length (``_plan`` in each kernel.py) instead of autotuning. For the benchmark
matrix's shapes of the three templates (docs/benchmarks/h200.md: the large and the
decode-size ones, plus a chunked row each and the review's add_layernorm 4096x768 fp16),
this times the heuristic's choice and every config of the old autotune list (as its pruning
left it), each through the template's wrapper (adapter.fused, as the benchmark harness calls
it) with the plan forced: CUDA events around the call, the L2 emptied before each call (a
256 MB buffer written, then another read: fa_testing.L2Flush), the median of --reps calls.
The heuristic's output is checked against the eager chain first.

Then the per-call wall and host time of the fused call and of the eager chain, called back
to back as an eager model calls them (fa_testing.wall_time_us, as the harness measures
them), for the decode-size shapes: the targets are wall <= eager's and host <= 15 us.

Compiling every config (about 170 kernels) is the slow part: --jobs worker processes compile
them first into Triton's on-disk cache (on inputs of the right dtypes and strides, left
uninitialised), and the timing process then loads them from it.

Usage, from the repository root on a GPU machine:

    python3 bench/experiments/probe_tiles_rows.py [--jobs 12] [--reps 60] [--only REGEX] [--json]

Prints a table (and with --json one JSON object per case and config). About 40-60 s.
"""

import argparse
import json
import math
import multiprocessing as mp
import pathlib
import re
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "templates" / "_common"))

import torch  # noqa: E402

import fa_testing as fat  # noqa: E402

# (pattern, dtype, shapes, params): the matrix's cases of the three templates
NORM = {"eps": 1e-5}
RMS = {"eps": 1e-6, "casting": "llama"}
ADD = {"mask_kind": "additive", "scale": 0.125}
BOOL = {"mask_kind": "bool", "scale": 0.125}
CAUSAL = {"mask_kind": "causal", "scale": 0.125}
AUTOCAST = {"out_dtype": "fp32"}
CASES = [
    ("add_layernorm", "bf16", [[8192, 4096]], NORM),
    ("add_layernorm", "bf16", [[16, 256, 2048]], NORM),
    ("add_layernorm", "fp32", [[16, 256, 2048]], NORM),
    ("add_layernorm", "bf16", [[8, 512, 1024]], NORM),
    ("add_layernorm", "bf16", [[8, 512, 768]], NORM),
    ("add_layernorm", "fp32", [[16, 256, 768], [1, 256, 768]], NORM),
    ("add_layernorm", "fp16", [[4096, 768]], NORM),
    ("add_layernorm", "fp16", [[1, 128, 768]], NORM),
    ("add_layernorm", "fp16", [[32, 1024]], NORM),
    ("add_layernorm", "bf16", [[1024, 16384]], NORM),
    ("rmsnorm_pyops", "bf16", [[8192, 4096]], RMS),
    ("rmsnorm_pyops", "fp32", [[4, 512, 1024]], RMS),
    ("rmsnorm_pyops", "fp16", [[2, 256, 1024]], RMS),
    ("rmsnorm_pyops", "fp16", [[32, 4096]], RMS),
    ("rmsnorm_pyops", "bf16", [[512, 16384]], RMS),
    ("mask_softmax", "fp16", [[4, 32, 2048, 2048], [4, 1, 2048, 2048]], ADD),
    ("mask_softmax", "fp16", [[4, 32, 2048, 2048], [4, 1, 2048, 2048]], BOOL),
    ("mask_softmax", "bf16", [[8, 16, 1024, 1024], [8, 1, 1024, 1024]], ADD),
    ("mask_softmax", "bf16", [[8, 16, 1024, 1024], [8, 1, 1024, 1024]], BOOL),
    ("mask_softmax", "bf16", [[8, 12, 512, 512]], CAUSAL),
    ("mask_softmax", "bf16", [[4, 16, 512, 512]], CAUSAL),
    ("mask_softmax", "bf16", [[1, 32, 512, 512], [1, 1, 512, 512]], dict(ADD, mask_dtype="fp32", **AUTOCAST)),
    ("mask_softmax", "bf16", [[1, 32, 512, 512], [1, 1, 512, 512]], dict(BOOL, **AUTOCAST)),
    ("mask_softmax", "bf16", [[16, 12, 256, 256], [16, 1, 256, 256]], ADD),
    ("mask_softmax", "fp16", [[2, 16, 256, 256]], CAUSAL),
    ("mask_softmax", "fp16", [[8, 12, 129, 129], [8, 1, 129, 129]], ADD),
    ("mask_softmax", "fp16", [[8, 12, 129, 129], [8, 1, 129, 129]], BOOL),
    ("mask_softmax", "fp16", [[1, 12, 128, 128]], CAUSAL),
    ("mask_softmax", "bf16", [[1, 8, 256, 16384]], CAUSAL),
]
# decode-size cases for the per-call wall and host time (and the review's 4096x768)
HOST_CASES = [("add_layernorm", "fp16", [[4096, 768]], NORM), ("add_layernorm", "fp16", [[1, 128, 768]], NORM),
              ("rmsnorm_pyops", "fp16", [[32, 4096]], RMS), ("mask_softmax", "fp16", [[1, 12, 128, 128]], CAUSAL),
              ("mask_softmax", "fp16", [[8, 12, 129, 129], [8, 1, 129, 129]], BOOL)]

# The old autotune lists, as the templates had them before the heuristics
OLD_NORM_WARPS = (4, 2, 8, 16)  # pruned to num_warps <= max(2, BLOCK_N // 256)
OLD_LONG_WARPS = (4, 1, 2, 8, 16)
OLD_ROWS_TILES = [(1, 4), (1, 1), (1, 2), (2, 2), (4, 2), (2, 4), (4, 4), (8, 4), (16, 4), (4, 8), (8, 8), (16, 8),
                  (32, 8), (1, 8), (1, 16), (2, 16)]  # (ROWS, num_warps)


def label(case):
    pattern, dtype, shapes, params = case
    kind = params.get("mask_kind", "")
    extra = "->fp32" if params.get("out_dtype") else ""
    return f"{pattern} {kind} {dtype}{extra} {'x'.join(map(str, shapes[0]))}".replace("  ", " ")


def load(pattern):
    folder = ROOT / "templates" / pattern
    return tuple(fat.load_sibling(str(folder / "kernel.py"), n) for n in ("kernel", "reference", "adapter"))


def plans(case, kernel):
    """[(name, plan)]: the heuristic's, then the old autotune list's (as _plan's tuple)."""
    pattern, _, shapes, _ = case
    n = shapes[0][-1]
    if pattern != "mask_softmax":
        block, warps = kernel._plan(n, kernel.MAX_BLOCK_N)
        old = [w for w in OLD_NORM_WARPS if w <= max(2, block // 256)] or [4]
        return [("heuristic", (block, warps))] + [(f"w{w}", (block, w)) for w in old]
    block, rows, warps = kernel._plan(n, None, kernel.MAX_BLOCK_N)
    if n > block:
        return [("heuristic", (block, rows, warps))] + [(f"w{w}", (block, 1, w)) for w in OLD_LONG_WARPS]
    keep = [(r, w) for r, w in OLD_ROWS_TILES if 256 <= r * block <= 16384 and w * 32 <= r * block]
    if not keep:  # the old prune's fallback: the largest tile
        keep = [max(OLD_ROWS_TILES, key=lambda c: (c[0] * block <= 16384, c[0], -c[1]))]
    return [("heuristic", (block, rows, warps))] + [(f"r{r}w{w}", (block, r, w)) for r, w in keep]


def force(kernel, plan):
    """Makes the kernel's wrapper use this plan (its _plan replaced)."""
    kernel._plan = lambda *a, **k: plan


def gpu_randn(shape, dtype, device, g, mean=0.0, std=1.0):
    """fa_testing.randn on the GPU (the CPU generator is slow for 512M elements)."""
    return (torch.randn(list(shape), device=device) * std + mean).to(dtype)


def empty_randn(shape, dtype, device, g, mean=0.0, std=1.0):
    return torch.empty(list(shape), dtype=dtype, device=device)


def compile_worker(items):
    """Compiles the (case index, plan) items into Triton's on-disk cache: one call each on
    uninitialised inputs of the case's dtypes and strides."""
    fat.randn = empty_randn
    mods = {}
    for ci, plan in items:
        case = CASES[ci]
        pattern, dtype, shapes, params = case
        if pattern not in mods:
            mods[pattern] = load(pattern)
        kernel, _, adapter = mods[pattern]
        inputs = adapter.make_inputs(shapes, fat.DTYPES[dtype], params, "cuda", 0)
        force(kernel, plan)
        adapter.fused(kernel, inputs, params)
        del inputs
    torch.cuda.synchronize()
    return len(items)


def check(got, want, atol, rtol, name):
    """fa_testing.assert_close's test, on the GPU (the large cases would take GBs of host
    memory in float64); a failing row block is then reported by assert_close."""
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"{name}: {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}")
    g2, w2 = got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])
    step = max(1, (1 << 24) // g2.shape[1])
    for i in range(0, g2.shape[0], step):
        a, b = g2[i:i + step].double(), w2[i:i + step].double()
        same = (a == b) | (a.isnan() & b.isnan())
        if not bool((same | ((a - b).abs() <= atol + rtol * b.abs())).all()):
            fat.assert_close(g2[i:i + step], w2[i:i + step], atol, rtol, name=f"{name} rows {i}..")


def median_us(fn, flush, reps):
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
    ap.add_argument("--jobs", type=int, default=12, help="compile processes (0: compile in this one)")
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--only", default="", help="regex on the case label")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    fat.require_cuda("probe_tiles_rows")
    t0 = time.time()
    cases = [i for i, c in enumerate(CASES) if re.search(args.only, label(c))]
    mods = {p: load(p) for p in ("add_layernorm", "rmsnorm_pyops", "mask_softmax")}
    saved = {p: m[0]._plan for p, m in mods.items()}
    work = {i: plans(CASES[i], mods[CASES[i][0]][0]) for i in cases}
    items = [(i, plan) for i in cases for _, plan in work[i]]
    if args.jobs > 0:
        chunks = [items[k::args.jobs] for k in range(args.jobs)]
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            pool.map(compile_worker, [c for c in chunks if c])
    print(f"# {len(items)} kernels compiled in {time.time() - t0:.1f} s", file=sys.stderr)

    fat.randn = gpu_randn
    flush = fat.l2_flush()
    rows, ratios = [], []
    for i in cases:
        case = CASES[i]
        pattern, dtype, shapes, params = case
        kernel, ref, adapter = mods[pattern]
        inputs = adapter.make_inputs(shapes, fat.DTYPES[dtype], params, "cuda", 0)
        times = {}
        for name, plan in work[i]:
            force(kernel, plan)
            if name == "heuristic":  # the output checked once
                got = adapter.fused(kernel, inputs, params)
                want = adapter.reference(ref, inputs, params)
                atol, rtol = adapter.tolerance(fat.DTYPES[dtype], shapes, params)
                for g, w in zip(got, want):
                    check(g, w, atol, rtol, label(case))
                del got, want
            times[name] = median_us(lambda: adapter.fused(kernel, inputs, params), flush, args.reps)
            if args.json:
                print(json.dumps({"case": label(case), "config": name, "plan": list(plan), "median_us": times[name]}))
        kernel._plan = saved[pattern]
        best = min((t, n) for n, t in times.items() if n != "heuristic")
        plan = dict(work[i])["heuristic"]
        ratios.append(times["heuristic"] / best[0])
        rows.append((label(case), "/".join(map(str, plan)), times["heuristic"], best[1], best[0], ratios[-1]))
        del inputs
        torch.cuda.empty_cache()

    print(f"\n{'case':46s} {'heuristic':>16s} {'us':>8s} {'best old':>9s} {'us':>8s} {'h/best':>7s}")
    for name, plan, th, bn, tb, r in rows:
        print(f"{name:46s} {plan:>16s} {th:8.2f} {bn:>9s} {tb:8.2f} {r:7.3f}")
    if ratios:
        gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"heuristic / best old config: geometric mean {gm:.3f}, worst {max(ratios):.3f}, "
              f"{sum(r <= 1.03 for r in ratios)} of {len(ratios)} within 3%")
    print("(plan: BLOCK_N/num_warps for the norms, BLOCK_N/ROWS/num_warps for mask_softmax)")

    print(f"\n{'per call, as an eager model calls it':46s} {'fused wall':>10s} {'host':>7s} "
          f"{'eager wall':>10s} {'host':>7s}")
    for case in HOST_CASES:
        pattern, dtype, shapes, params = case
        if not re.search(args.only, label(case)):
            continue
        kernel, ref, adapter = mods[pattern]
        inputs = adapter.make_inputs(shapes, fat.DTYPES[dtype], params, "cuda", 0)
        f = fat.wall_time_us(lambda: adapter.fused(kernel, inputs, params))
        e = fat.wall_time_us(lambda: adapter.reference(ref, inputs, params))
        name = label(case)
        print(f"{name:46s} {f['wall_us']:10.2f} {f['host_us']:7.2f} {e['wall_us']:10.2f} {e['host_us']:7.2f}")
        if args.json:
            print(json.dumps({"case": name, "fused": f, "eager": e}))
    print(f"# {time.time() - t0:.1f} s in all", file=sys.stderr)


if __name__ == "__main__":
    main()
