"""layernorm_linear at small M: the statistics in the GEMM's K loop (one launch) against the
statistics kernel then the GEMM (two launches, TMA where aligned), and eager. GPU-only probe.

For M in 1..128 (K = N = 4096 and 768 x 3072, bf16, fold with pre-folded weights, no shared
statistics): GPU time (fa_testing.gpu_time_us of the call's CUDA-graph replay, L2 flushed) and
per-call wall and host time (fa_testing.wall_time_us) of the two paths, chosen by setting
kernel.INLINE_STATS_M, next to eager (F.layer_norm then F.linear). Says where the in-loop
statistics stop paying, which sets INLINE_STATS_M.

Usage: python3 bench/experiments/probe_inline_stats.py
"""
import pathlib
import sys

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "templates" / "_common"))
import fa_testing as fat  # noqa: E402

kernel = fat.load_sibling(ROOT / "templates" / "layernorm_linear" / "kernel.py", "kernel")


def main():
    dt = torch.bfloat16
    print(f"{'K x N':>10s} {'M':>4s} | {'GPU us: inline':>14s} {'two':>7s} {'eager':>7s} | "
          f"{'per call us: inline':>19s} {'two':>7s} {'eager':>7s} | {'host: inline':>12s} {'two':>6s}")
    for k, n in ((4096, 4096), (768, 3072)):
        g = torch.Generator(device="cuda").manual_seed(0)
        w = torch.randn(n, k, device="cuda", dtype=dt, generator=g) * k ** -0.5
        b = torch.randn(n, device="cuda", dtype=dt, generator=g)
        lw = 1 + 0.2 * torch.randn(k, device="cuda", dtype=dt, generator=g)
        lb = 0.2 * torch.randn(k, device="cuda", dtype=dt, generator=g)
        folded = kernel.fold_weights(lw, lb, w, b)
        for m in (1, 8, 16, 32, 64, 128):
            x = torch.randn(m, k, device="cuda", dtype=dt, generator=g)
            row = {}
            for path, limit in (("inline", 1 << 30), ("two", 0)):
                kernel.INLINE_STATS_M = limit
                fn = lambda: kernel.layernorm_linear(x, lw, lb, w, b, folded=folded)  # noqa: E731
                fn()
                want = F.linear(F.layer_norm(x, (k,), lw, lb), w, b)
                err = (fn().float() - want.float()).abs().max().item()
                replay = fat.graph_replay(fn)
                gpu = fat.gpu_time_us(replay or fn, 25, 100)[0]
                wall = fat.wall_time_us(fn, 20)
                row[path] = (gpu, wall["wall_us"], wall["host_us"], err)
            eager = lambda: F.linear(F.layer_norm(x, (k,), lw, lb), w, b)  # noqa: E731
            replay = fat.graph_replay(eager)
            eg = fat.gpu_time_us(replay or eager, 25, 100)[0]
            ew = fat.wall_time_us(eager, 20)["wall_us"]
            i, t = row["inline"], row["two"]
            print(f"{k:>5d}x{n:<4d} {m:>4d} | {i[0]:14.1f} {t[0]:7.1f} {eg:7.1f} | {i[1]:19.1f} {t[1]:7.1f} {ew:7.1f} | "
                  f"{i[2]:12.1f} {t[2]:6.1f}   max|err| {i[3]:.3g} / {t[3]:.3g}", flush=True)
    kernel.INLINE_STATS_M = 16


if __name__ == "__main__":
    main()
