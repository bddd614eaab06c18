"""Probe: does software pipelining bring rmsnorm_pyops' one-pass backward nearer its memory
floor (GPU)?

The template's _rmsnorm_bwd walked its program's rows in a `while` loop, which Triton does not
pipeline: each tile's loads of dy and x wait for the previous tile's sums and stores. At
bf16 8192x4096 the backward ran at 1.58x its floor (docs/benchmarks/h200.md). This probe times
the kernel alone (no autograd, no weight-gradient sum) as the template launches it with that
loop ("while": its STAGES=1, what it keeps for tiles of more than two rows), beside a copy of
it whose loop is `for ... in tl.range(..., num_stages=S)` (S = 2, 3: the next tiles' loads
issued while the current one is reduced; the template took S = 3 for tiles of one or two
rows), and with more row groups (programs), each variant's dx and partial sums checked
against the while loop's.

GPU time: the launch captured in a CUDA graph and the replay timed with the L2 flushed
(fa_testing.gpu_time_us, bench's method); floor: dy and x read and dx written at the measured
copy bandwidth of the same bytes.

Usage, from the repository root: python bench/experiments/probe_bwd_pipeline.py [--json]
"""
import sys

import probekit as kit  # first: --smoke's TRITON_INTERPRET before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

K = kit.load_template("rmsnorm_pyops", "kernel")
_cast = K._cast


@triton.jit(do_not_specialize=["M", "rows"])
def _rmsnorm_bwd_pipe(DY, X, W, RSTD, DX, PART, M, N, rows, sdym, sdyn, sxm, sxn,
                      CAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      STAGES: tl.constexpr):
    """_rmsnorm_bwd (HAS_DX, HAS_DW) with its row loop pipelined."""
    g = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    cm = cols < N
    w = tl.load(W + cols, mask=cm, other=0.0).to(tl.float32)
    acc = tl.full([BLOCK_N], 0, tl.float32)
    r0 = g * rows
    end = tl.minimum(r0 + rows, M)
    n_tiles = tl.cdiv(end - r0, BLOCK_M)
    for i in tl.range(0, n_tiles, num_stages=STAGES):
        rm = r0 + i * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
        m = (rm[:, None] < end) & cm[None, :]
        dy = tl.load(DY + rm[:, None] * sdym + cols[None, :] * sdyn, mask=m, other=0.0).to(tl.float32)
        x = tl.load(X + rm[:, None] * sxm + cols[None, :] * sxn, mask=m, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + rm, mask=rm < end, other=0.0)
        n = x * rstd[:, None]
        dn = dy * w[None, :]
        if CAST == 0:
            dn = _cast(dn, X.dtype.element_ty).to(tl.float32)
        c = tl.sum(dn * x * rstd[:, None], axis=1) / N
        dx = rstd[:, None] * (dn - n * c[:, None])
        tl.store(DX + rm[:, None] * N + cols[None, :], _cast(dx, DX.dtype.element_ty), mask=m)
        acc += tl.sum(dy * n, axis=0)
    tl.store(PART + g * N + cols, acc, mask=cm)


CASES = [("bf16-8192x4096", 8192, 4096, torch.bfloat16), ("bf16-4096x2048", 4096, 2048, torch.bfloat16),
         ("fp32-2048x1024", 2048, 1024, torch.float32), ("bf16-16384x4096", 16384, 4096, torch.bfloat16)]


def main():
    a = kit.arguments(__doc__, compile_=False)
    dev = "cuda"
    rows_out = []
    for label, M, N, dt in CASES:
        if a.only and a.only not in label:
            continue
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(M, N, dtype=dt, device=dev, generator=g)
        dy = torch.randn(M, N, dtype=dt, device=dev, generator=g)
        w = torch.randn(N, dtype=dt, device=dev, generator=g)
        rstd = torch.rand(M, dtype=torch.float32, device=dev, generator=g) + 0.5
        block = triton.next_power_of_2(N)
        bm = max(1, K.ROW_TILE // block)
        warps = K._bwd_warps(bm * block)
        cast = K.CASTING["llama"]
        copy_src = torch.empty(3 * M * N * dt.itemsize // 8, dtype=torch.float32, device=dev)  # 8 bytes an element moved
        copy_dst = torch.empty_like(copy_src)
        floor = kit.gpu_timer(lambda: torch.mul(copy_src, 1.0, out=copy_dst))[0]

        def plan(groups_target):
            rows = max(K.DW_MIN_ROWS, -(-M // groups_target))
            rows = -(-rows // bm) * bm
            return rows, -(-M // rows)

        dx_ref = torch.empty_like(x)
        rows, groups = plan(K.DW_GROUPS)
        part_ref = torch.empty((groups, N), dtype=torch.float32, device=dev)

        def current(dx=dx_ref, part=part_ref, rows=rows, groups=groups):
            K._rmsnorm_bwd[(groups,)](dy, x, w, rstd, dx, part, M, N, rows, N, 1, N, 1, CAST=cast, HAS_DX=True,
                                      HAS_DW=True, BLOCK_M=bm, BLOCK_N=block, STAGES=1, num_warps=warps)
        current()
        torch.cuda.synchronize()
        variants = [("while", current, f"while, groups={groups} rows={rows} warps={warps}")]
        for stages in (2, 3):
            for gt in (K.DW_GROUPS, 1024):
                r, gr = plan(gt)
                dx = torch.empty_like(x)
                part = torch.empty((gr, N), dtype=torch.float32, device=dev)

                def pipe(dx=dx, part=part, r=r, gr=gr, stages=stages):
                    _rmsnorm_bwd_pipe[(gr,)](dy, x, w, rstd, dx, part, M, N, r, N, 1, N, 1, CAST=cast,
                                             BLOCK_M=bm, BLOCK_N=block, STAGES=stages, num_warps=warps)
                variants.append((f"for stages={stages} groups={gr}", pipe, (dx, part, gr)))
        for name, fn, extra in variants:
            fn()
            torch.cuda.synchronize()
            diff = 0.0
            if not isinstance(extra, str):
                dx, part, gr = extra
                diff = max((dx.float() - dx_ref.float()).abs().max().item(),
                           (part.sum(0) - part_ref.sum(0)).abs().max().item() / max(1.0, part_ref.sum(0).abs().max().item()))
            med, p20, p80 = kit.gpu_timer(fn)
            rows_out.append({"case": label, "variant": name, "median_us": round(med, 1), "p20_us": round(p20, 1),
                             "p80_us": round(p80, 1), "floor_us": round(floor, 1), "over_floor": round(med / floor, 2),
                             "maxdiff": diff})
            print(rows_out[-1] if a.json else f"{label:18s} {name:30s} {med:7.1f} us  floor {floor:6.1f}  x{med / floor:.2f}  diff {diff:.1e}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
