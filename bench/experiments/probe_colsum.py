"""Probe: a Linear's bias gradient, the column sum of its output gradient (GPU).

On the shared BERT training trace the largest unclaimed part of AddmmBackward0 is ATen's
bias-gradient sum, ``dy.sum(0)`` of a [4096, 768] bf16 gradient: 42 calls of 12.6 us (ATen's
``reduce_kernel`` over the leading dim), where reading its 6 MB takes about 1.5 us at copy
bandwidth. This probe times the alternatives:

  aten          dy.sum(0) (what eager's AddmmBackward0 and layernorm_linear's backward run)
  compile       torch.compile of it
  rows=R bn=B   two launches: programs of R rows x B columns write fp32 partial sums [M/R, N]
                (a [BLOCK_M, B] accumulator over the rows, reduced once), then the templates'
                _sum_parts adds them up into the bias' type

Each variant is captured in a CUDA graph and its replay timed by fa_testing.gpu_time_us (L2
flushed before each replay without dirty lines); results checked against the fp64 sum (max
abs difference relative to the sum's magnitude).

Usage, from the repository root:
  python bench/experiments/probe_colsum.py [--only SUBSTRING] [--compile] [--json]
  python bench/experiments/probe_colsum.py --smoke      (the interpreter, tiny shapes)
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import probekit as pk  # noqa: E402  (sets TRITON_INTERPRET for --smoke)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

ln = pk.load_template("layernorm_linear", "kernel")  # _sum_parts, _launch, _cast


@triton.jit
def _col_partials(DY, PART, M, N, sm, sn, ROWS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program (g, j): the sum of rows [g * ROWS, (g + 1) * ROWS) of DY's columns
    [j * BLOCK_N, ...) into PART[g, cols] (fp32)."""
    g = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cm = cols < N
    acc = tl.full([BLOCK_M, BLOCK_N], 0, tl.float32)
    r0 = g.to(tl.int64) * ROWS
    for i in range(0, ROWS, BLOCK_M):
        rows = r0 + i + tl.arange(0, BLOCK_M)
        acc += tl.load(DY + rows[:, None] * sm + cols[None, :] * sn, mask=(rows < M)[:, None] & cm[None, :],
                       other=0.0).to(tl.float32)
    tl.store(PART + g * N + cols, tl.sum(acc, axis=0), mask=cm)


def colsum(dy, rows, bn, block_m=32, warps=4):
    M, N = dy.shape
    G = triton.cdiv(M, rows)
    part = torch.empty(G, N, dtype=torch.float32, device=dy.device)
    _col_partials[(G, triton.cdiv(N, bn))](dy, part, M, N, dy.stride(0), dy.stride(1),
                                           ROWS=rows, BLOCK_M=min(block_m, rows), BLOCK_N=bn, num_warps=warps)
    out = torch.empty(N, dtype=dy.dtype, device=dy.device)
    ln._part_sums(part, [out])
    return out


CASES = [  # (label, M, N, dtype): BERT's, BERT's FFN and decoder, GPT-2's 2304, Llama's 2048-token rows
    ("bert 4096x768", 4096, 768, torch.bfloat16),
    ("bert 4096x3072", 4096, 3072, torch.bfloat16),
    ("bert 4096x8192", 4096, 8192, torch.bfloat16),
    ("gpt2 4096x2304", 4096, 2304, torch.bfloat16),
    ("16384x1024", 16384, 1024, torch.bfloat16),
    ("fp32 4096x768", 4096, 768, torch.float32),
]
VARIANTS = [(r, b) for r in (32, 64, 128, 256) for b in (64, 128, 256)]


def main():
    a = pk.arguments(__doc__)
    dev = "cpu" if a.smoke else "cuda"
    timer = pk.wall_timer if a.smoke else pk.gpu_timer
    tab = pk.Table(a.json, bandwidth=True)
    tab.header()
    cases = [("smoke 300x200", 300, 200, torch.bfloat16)] if a.smoke else CASES
    for label, M, N, dtype in cases:
        if a.only and a.only not in label:
            continue
        dy = torch.randn(M, N, device=dev).to(dtype)
        want = dy.double().sum(0)
        nbytes = dy.numel() * dy.element_size()

        def row(name, fn, cfg=""):
            try:
                got = fn()
                diff = (got.double() - want).abs().max().item()
                bad = diff > (3e-2 if dtype != torch.float32 else 1e-3) * (1 + want.abs().max().item())
                t = timer(fn)
                tab.row(label, name, t, cfg, diff, bad, gbs=nbytes / (t[0] * 1e3))
            except Exception as e:  # noqa: BLE001
                tab.error(label, name, e)

        row("aten", lambda: dy.sum(0))
        if getattr(a, "compile", False) and not a.smoke:
            f = torch.compile(lambda t: t.sum(0))
            row("compile", lambda: f(dy))
        for r, b in (VARIANTS[:2] if a.smoke else VARIANTS):
            row(f"rows={r} bn={b}", lambda r=r, b=b: colsum(dy, r, b), f"{triton.cdiv(M, r) * triton.cdiv(N, b)} programs")


if __name__ == "__main__":
    main()
