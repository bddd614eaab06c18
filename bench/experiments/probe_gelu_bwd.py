"""linear_gelu's GELU derivative with the bias gradient's partial sums, at the traced shapes
(GPU-only probe): why the pass with HAS_DB ran 2-3x eager's gelu_backward
(probe_bwd_kernels.py: 102.8 against 35.7 us at ConvNeXt's 32x28x28x768).

Variants, each dz = dy * gelu'(pre) (erf) over [M, N] bf16 and db's partial sums:
  eager        torch.ops.aten.gelu_backward, then dz.sum(0) (what eager's backward runs)
  no-db        the template's kernel without the bias gradient (HAS_DB=False: one tile a program)
  template     the template's kernel with HAS_DB (a tl.sum over the tile's rows each step)
  acc2d        the same walk, the tile's rows added up in a [BLOCK_M, BLOCK_N] register
               accumulator and reduced once after the loop
  pipeN        acc2d's walk as a tl.range loop software-pipelined over N stages
each with DB_PROGRAMS 2048 (p2048, the template's first form) and 512. GPU time by
probekit.gpu_timer (the harness's method: a CUDA-graph replay of one call after an L2 flush,
median); dz and db checked against the first variant's. The figures in
docs/benchmarks/probe-gelu-bwd-2026-12-03.txt were taken with this probe at 271e13c, which
timed with a timer of its own (a graph of 20 calls after a 256 MiB fill and sum, median of 30).

    python3 bench/experiments/probe_gelu_bwd.py
"""
import probekit  # noqa: I001 -- before torch (probekit's --smoke sets TRITON_INTERPRET)

import torch
import triton
import triton.language as tl

k = probekit.load_template("linear_gelu", "kernel")
_gelu_grad, _cast = k._gelu_grad, k._cast

SHAPES = {"convnext 32x56x56x384": (100352, 384), "convnext 32x28x28x768": (25088, 768),
          "convnext 32x14x14x1536": (6272, 1536), "convnext 32x7x7x3072": (1568, 3072),
          "bert 16x256x3072": (4096, 3072), "mlp 16x256x8192": (4096, 8192)}


@triton.jit
def _acc2d_kernel(DY, PRE, DZ, PART, M, N, rows, sdym, spm, sdzm,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rn = (pid % tiles_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    g = (pid // tiles_n).to(tl.int64)
    r = g * rows
    end = tl.minimum(r + rows, M)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    while r < end:
        rm = r + tl.arange(0, BLOCK_M)
        mask = (rm[:, None] < end) & (rn[None, :] < N)
        dy = tl.load(DY + rm[:, None] * sdym + rn[None, :], mask=mask, other=0.0).to(tl.float32)
        z = tl.load(PRE + rm[:, None] * spm + rn[None, :], mask=mask, other=0.0).to(tl.float32)
        dz = _cast(dy * _gelu_grad(z, 0), DZ.dtype.element_ty)
        tl.store(DZ + rm[:, None] * sdzm + rn[None, :], dz, mask=mask)
        acc += tl.where(mask, dz.to(tl.float32), 0.0)
        r += BLOCK_M
    tl.store(PART + g * N + rn, tl.sum(acc, axis=0), mask=rn < N)


@triton.jit
def _pipe_kernel(DY, PRE, DZ, PART, M, N, rows, sdym, spm, sdzm,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rn = (pid % tiles_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    g = (pid // tiles_n).to(tl.int64)
    r0 = g * rows
    end = tl.minimum(r0 + rows, M)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for t in tl.range(0, tl.cdiv(end - r0, BLOCK_M), num_stages=STAGES):
        rm = r0 + t * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = (rm[:, None] < end) & (rn[None, :] < N)
        dy = tl.load(DY + rm[:, None] * sdym + rn[None, :], mask=mask, other=0.0).to(tl.float32)
        z = tl.load(PRE + rm[:, None] * spm + rn[None, :], mask=mask, other=0.0).to(tl.float32)
        dz = _cast(dy * _gelu_grad(z, 0), DZ.dtype.element_ty)
        tl.store(DZ + rm[:, None] * sdzm + rn[None, :], dz, mask=mask)
        acc += tl.where(mask, dz.to(tl.float32), 0.0)
    tl.store(PART + g * N + rn, tl.sum(acc, axis=0), mask=rn < N)


def time_us(fn):
    return probekit.gpu_timer(fn)[0]


def plan(M, N, programs):
    bm, bn, warps = k._tiles(N, 2)
    tiles_n = -(-N // bn)
    rows = -(-M // max(1, programs // tiles_n))
    rows = -(-rows // bm) * bm
    groups = -(-M // rows)
    return bm, bn, warps, rows, groups, tiles_n


def main():
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; µs a call")
    for name, (M, N) in SHAPES.items():
        dy = torch.randn(M, N, dtype=torch.bfloat16, device="cuda")
        pre = torch.randn(M, N, dtype=torch.bfloat16, device="cuda")
        dz = torch.empty_like(pre)
        db = torch.empty(N, dtype=torch.bfloat16, device="cuda")
        res = {"eager": time_us(lambda: torch.ops.aten.gelu_backward(dy, pre).sum(0))}
        bm, bn, warps, *_ = plan(M, N, 2048)
        grid = (-(-M // bm) * -(-N // bn),)
        res["no-db"] = time_us(lambda: k._launch(k._gelu_bwd_kernel, grid, (dy, pre, dz, dz, M, N, bm, N, 1, N, N),
                                                 num_warps=warps, APPROX=0, HAS_DB=False, BLOCK_M=bm, BLOCK_N=bn))
        want = None
        for programs in (2048, 512):
            bm, bn, warps, rows, groups, tiles_n = plan(M, N, programs)
            part = torch.empty(groups, N, dtype=torch.float32, device="cuda")

            def template():
                k._launch(k._gelu_bwd_kernel, (groups * tiles_n,), (dy, pre, dz, part, M, N, rows, N, 1, N, N),
                          num_warps=warps, APPROX=0, HAS_DB=True, BLOCK_M=bm, BLOCK_N=bn)
                k._part_sums(part, [db])

            def acc2d():
                _acc2d_kernel[(groups * tiles_n,)](dy, pre, dz, part, M, N, rows, N, N, N,
                                                   BLOCK_M=bm, BLOCK_N=bn, num_warps=warps)
                k._part_sums(part, [db])

            def pipe(stages):
                def run():
                    _pipe_kernel[(groups * tiles_n,)](dy, pre, dz, part, M, N, rows, N, N, N,
                                                      BLOCK_M=bm, BLOCK_N=bn, STAGES=stages, num_warps=warps)
                    k._part_sums(part, [db])
                return run

            for vname, fn in ((f"template p{programs}", template), (f"acc2d p{programs}", acc2d),
                              (f"pipe2 p{programs}", pipe(2)), (f"pipe3 p{programs}", pipe(3))):
                res[vname] = time_us(fn)
                fn()
                torch.cuda.synchronize()
                got = (dz.clone(), db.float().clone())
                if want is None:
                    want = got
                ok = torch.equal(got[0], want[0]) and torch.allclose(got[1], want[1], rtol=1e-2, atol=1e-1)
                if not ok:
                    res[vname + " WRONG"] = 0.0
        print(f"{name:26s} tiles {bm}x{bn} w{warps} " + "  ".join(f"{n} {v:.1f}" for n, v in res.items()))


if __name__ == "__main__":
    main()
