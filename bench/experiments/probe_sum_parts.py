"""Probe: _sum_parts' column block against the number of partial sums (GPU-only).

The shared _sum_parts (templates/_common/shared.py) adds up a backward's per-program partial
sums, fp32 [G, N], into a bias' or weight's gradient: one program per SUM_BLOCK_N (32)
columns, each walking all G rows. At a bias of N = 512 that is 16 programs on 132 SMs, and
probe_bwd_kernels.py timed it at 3.6-8.9 µs of a 30 µs GEMM-head backward. This times one
launch per (G, N, BLOCK_N), as bench times a call (fa_testing.gpu_time_us of a CUDA-graph
replay, L2 flushed), the output bf16, and prints µs per cell with the fastest marked.

Usage: python3 bench/experiments/probe_sum_parts.py
"""
import importlib.util
import pathlib

import torch

import probekit  # beside this file: fa_testing on the path

fat = probekit.fat
_spec = importlib.util.spec_from_file_location(
    "_fa_shared", probekit.ROOT / "templates" / "_common" / "shared.py")
shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shared)


def main():
    blocks = (8, 16, 32, 64)
    print(f"{'G':>6s} {'N':>6s} " + " ".join(f"{'BN=' + str(b):>10s}" for b in blocks))
    for G in (128, 512, 1024, 4096):
        for N in (384, 512, 768, 1024, 2048, 4096):
            part = torch.randn(G, N, device="cuda")
            out = torch.empty(N, dtype=torch.bfloat16, device="cuda")
            want = part.sum(0)
            cells = []
            for bn in blocks:
                shared.SUM_BLOCK_N = bn
                shared._part_sums(part, [out])
                torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=2e-2 * G ** 0.5)
                replay = fat.graph_replay(lambda: shared._part_sums(part, [out]))
                cells.append(fat.gpu_time_us(replay or (lambda: shared._part_sums(part, [out])))[0])
            best = min(cells)
            print(f"{G:6d} {N:6d} " + " ".join(f"{c:9.2f}{'*' if c == best else ' '}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
