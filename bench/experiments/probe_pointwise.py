"""Probe: where do the pointwise templates lose time against the floor on a GPU?

Standalone variants of the two slow cases of the first H200 run (erf GELU in bf16 at
8192x16384: 191 us against a 126.5 us floor; bias+dropout+residual in bf16 at 8192x4096:
111 us against 47.4 us), each timed with do_bench (median, L2 flushed) over a few tilings:

- gelu: libdevice erf (tl.math.erf) vs an Abramowitz-Stegun 7.1.26 erf (one exp, one
  reciprocal, five FMAs, |error| < 1.5e-7), vs the tanh GELU (the memory-bound reference).
- dropout: one Philox draw per element (tl.rand) vs one tl.randint4x draw per 4 elements
  split into 16-bit lanes (8 decisions per Philox call; p resolution 2**-16).

Usage: python probe_pointwise.py  (prints one line per variant; needs CUDA)
"""

import torch
import triton
import triton.language as tl
from triton.testing import do_bench


@triton.jit
def _erf_as(x):
    # Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7
    ax = tl.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * ax)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    y = 1.0 - poly * tl.exp(-ax * ax)
    return tl.where(x < 0, -y, y)


@triton.jit
def _gelu_k(X, B, Y, N, numel, VARIANT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < numel
    x = tl.load(X + offs, mask=m, other=0.0).to(tl.float32)
    b = tl.load(B + offs % N, mask=m, other=0.0).to(tl.float32)
    x = (x + b).to(Y.dtype.element_ty).to(tl.float32)
    if VARIANT == 0:
        y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif VARIANT == 1:
        y = 0.5 * x * (1.0 + _erf_as(x * 0.7071067811865476))
    else:
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = 0.5 * x * (2.0 / (1.0 + tl.exp(-2.0 * inner)))
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=m)


@triton.jit
def _dropout_k(X, B, R, Y, N, numel, p, scale, seed, VARIANT: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < numel
    x = tl.load(X + offs, mask=m, other=0.0).to(tl.float32)
    b = tl.load(B + offs % N, mask=m, other=0.0).to(tl.float32)
    r = tl.load(R + offs, mask=m, other=0.0).to(tl.float32)
    z = (x + b).to(Y.dtype.element_ty).to(tl.float32)
    if VARIANT == 0:
        keep = tl.rand(seed, offs.to(tl.int32)) >= p
    else:
        # one Philox call per 8 elements: 4 x 32-bit words, each split into two 16-bit lanes
        base = pid * (BLOCK // 8) + tl.arange(0, BLOCK // 8)
        r0, r1, r2, r3 = tl.randint4x(seed, base)
        w = tl.join(tl.join(r0, r1), tl.join(r2, r3))  # [BLOCK//8, 2, 2]
        w = tl.reshape(w, (BLOCK // 2,))
        lanes = tl.join(w & 0xFFFF, w >> 16)  # [BLOCK//2, 2]
        u = tl.reshape(lanes, (BLOCK,))
        keep = u.to(tl.float32) >= p * 65536.0
    z = tl.where(keep, z * scale, 0.0).to(Y.dtype.element_ty).to(tl.float32)
    tl.store(Y + offs, (r + z).to(Y.dtype.element_ty), mask=m)


def best(fn_for, configs):
    out = []
    for blk, w in configs:
        ms = do_bench(lambda: fn_for(blk, w), warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
        out.append((ms[0] * 1e3, blk, w))
    return min(out)


def main():
    dev = "cuda"
    copy_bw = None
    n = 1 << 28
    a = torch.empty(n, device=dev).normal_()
    b_ = torch.empty_like(a)
    ms = do_bench(lambda: b_.copy_(a), quantiles=[0.5])
    copy_bw = 2 * n * 4 / (ms * 1e-3)
    del a, b_
    print(f"copy bandwidth {copy_bw / 1e12:.3f} TB/s")
    cfgs = [(1024, 4), (2048, 4), (2048, 8), (4096, 8), (8192, 8), (8192, 16)]

    M, N = 8192, 16384
    x = torch.randn(M, N, device=dev, dtype=torch.bfloat16)
    bias = torch.randn(N, device=dev, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    floor = 2 * x.numel() * 2 / copy_bw * 1e6
    ref = torch.nn.functional.gelu((x + bias).float()).bfloat16()
    for v, name in [(0, "erf (libdevice)"), (1, "erf (A&S 7.1.26)"), (2, "tanh")]:
        def run(blk, w, v=v):
            _gelu_k[(triton.cdiv(x.numel(), blk),)](x, bias, y, N, x.numel(), VARIANT=v, BLOCK=blk, num_warps=w)
        t, blk, w = best(run, cfgs)
        run(blk, w)
        err = (y.float() - ref.float()).abs().max().item()
        print(f"gelu {name:18s} {t:8.1f} us  floor {floor:6.1f}  x{t / floor:.2f}  BLOCK={blk} warps={w}  max|err| vs erf ref {err:.3g}")

    M, N = 8192, 4096
    x = torch.randn(M, N, device=dev, dtype=torch.bfloat16)
    r = torch.randn_like(x)
    bias = torch.randn(N, device=dev, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    floor = 3 * x.numel() * 2 / copy_bw * 1e6
    for v, name in [(0, "tl.rand per element"), (1, "randint4x, 16-bit lanes")]:
        def run(blk, w, v=v):
            _dropout_k[(triton.cdiv(x.numel(), blk),)](x, bias, r, y, N, x.numel(), 0.1, 1 / 0.9, 1234,
                                                     VARIANT=v, BLOCK=blk, num_warps=w)
        t, blk, w = best(run, cfgs)
        run(blk, w)
        kept = ((y - r).abs() > 0).float().mean().item()
        print(f"dropout {name:24s} {t:8.1f} us  floor {floor:6.1f}  x{t / floor:.2f}  BLOCK={blk} warps={w}  kept {kept:.4f} (want ~0.9)")


if __name__ == "__main__":
    main()
