"""Fused (bias +) dropout + residual add: ``y = residual + dropout(x + bias, p)``.

Replaces ``aten::add`` (bias, optional) -> ``aten::dropout`` > ``aten::native_dropout`` ->
``aten::add`` (residual), Megatron's ``bias_dropout_add``. Eager writes ``x + b``, the dropout
output and its mask; this kernel reads x, b and the residual once and writes y, and keeps no
mask: the backward regenerates it from (seed, element index).

- Dropout randomness: Philox, one ``tl.randint4x`` call per 8 elements of a row split into
  16-bit uniforms (``_keep``), counters from the element's (row, column) (so the mask does not
  depend on the tiling or on strides); keep where ``u16 >= p * 65536``, kept values scaled by
  ``1/(1-p)``. Not bit-identical to PyTorch's RNG (no
  fused kernel is); ``dropout_mask(shape, p, seed)`` returns the mask used, for testing.
  Counters are 32-bit: beyond 2**34 elements the mask pattern repeats.
- p = 0 or eval mode: a plain ``residual + (x + bias)``.
- fp32 / fp16 / bf16, fp32 math; intermediate results are rounded to the output dtype where
  eager rounds them (``x + b``, the scaled dropout output). Strides are runtime arguments.
- Autotuned over BLOCK_M x BLOCK_N and num_warps, keyed on the shape; one fixed config under
  ``TRITON_INTERPRET=1``.
- Training: ``DropoutAddFunction`` has a fused Triton backward (regenerates the mask; d_x =
  dy * keep / (1-p)); d_residual is dy itself; the bias gradient is an ATen row-sum in fp32.

Interpreter-safe: builtins only (``tl.randint4x``, ``tl.join``, ``tl.reshape``), no bf16 arithmetic.
"""

import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# FUSEADVISE_AUTOTUNE=0: only the first (safe) GPU config, e.g. for quick GPU test runs
AUTOTUNE = os.environ.get("FUSEADVISE_AUTOTUNE", "1") != "0"


def _configs():
    if INTERPRET:
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 64}, num_warps=4, num_stages=1)]
    tiles = [(1, 1024, 4), (4, 256, 4), (8, 128, 4), (16, 128, 4), (4, 1024, 8),
             (8, 512, 8), (32, 64, 4), (2, 2048, 8)]
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=1) for m, n, w in tiles]
    return configs if AUTOTUNE else configs[:1]


# --- fa:shared cast ---
# Triton 3.6's interpreter casts fp32 -> bf16 by truncation; the GPU rounds to nearest even.
# Under the interpreter, _cast rounds explicitly so both give the same bits.
_RNE_BF16 = tl.constexpr(INTERPRET)


@triton.jit
def _cast(y, dtype: tl.constexpr):
    """y (fp32) -> dtype, rounding to nearest even for bf16 on every backend."""
    if _RNE_BF16 and dtype == tl.bfloat16:
        bits = y.to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        y = tl.where(y != y, y, bits.to(tl.float32, bitcast=True))
    return y.to(dtype)
# --- fa:end cast ---


@triton.jit
def _round(z, ZT: tl.constexpr):
    """z (fp32) rounded to the branch's type (ZT: 0 fp32, 1 fp16, 2 bf16), back in fp32."""
    if ZT == 1:
        z = _cast(z, tl.float16).to(tl.float32)
    elif ZT == 2:
        z = _cast(z, tl.bfloat16).to(tl.float32)
    return z


@triton.jit
def _keep(seed, rm, pid_n, N, p, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The dropout keep-mask for rows rm, columns pid_n * BLOCK_N + [0, BLOCK_N) of [M, N].

    One Philox call (``tl.randint4x``: four 32-bit words) serves 8 consecutive elements of a
    row, split into eight 16-bit uniforms: one ``tl.rand`` per element made the kernel
    compute-bound on Philox rounds (111 us against a 47 us floor at 8192x4096 bf16 on an
    H200). Element (r, c) draws from counter ``r * ceil(N / 8) + c // 8``, so the mask
    depends on (seed, r, c) only, never on the tiling (BLOCK_N is a multiple of 8).
    keep = u16 >= p * 65536: p is resolved to 2**-16.
    """
    groups_per_row = (N + 7) // 8
    g = pid_n * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
    ctr = rm[:, None] * groups_per_row + g[None, :]
    r0, r1, r2, r3 = tl.randint4x(seed, ctr)
    w = tl.join(tl.join(r0, r1), tl.join(r2, r3))  # [BLOCK_M, BLOCK_N // 8, 2, 2]
    w = tl.reshape(w, (BLOCK_M, BLOCK_N // 2)).to(tl.uint32, bitcast=True)
    u = tl.reshape(tl.join(w & 0xFFFF, w >> 16), (BLOCK_M, BLOCK_N))
    return u.to(tl.float32) >= p * 65536.0


@triton.autotune(configs=_configs(), key=["M", "N"])
@triton.jit
def _dropout_add_fwd(X, B, R, Y, M, N, sxm, sxn, srm, srn, sym, syn, p, scale, seed,
                     HAS_BIAS: tl.constexpr, DROPOUT: tl.constexpr, ZT: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # ZT: the branch's type (x + b, the dropout; 0 fp32, 1 fp16, 2 bf16), which eager rounds
    # to before the residual add (bf16 under autocast even when the residual, and so y, is fp32)
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    rm64 = rm.to(tl.int64)[:, None]
    rn64 = rn.to(tl.int64)[None, :]
    z = tl.load(X + rm64 * sxm + rn64 * sxn, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b = tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)
        z = _round(z + b[None, :], ZT)
    if DROPOUT:
        keep = _keep(seed, rm, tl.program_id(1), N, p, BLOCK_M, BLOCK_N)
        z = _round(z * tl.where(keep, scale, 0.0), ZT)  # NaN*0 = NaN, as eager
    r = tl.load(R + rm64 * srm + rn64 * srn, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + rm64 * sym + rn64 * syn, _cast(r + z, Y.dtype.element_ty), mask=mask)


@triton.autotune(configs=_configs(), key=["M", "N"])
@triton.jit
def _dropout_add_bwd(DY, DZ, M, N, sdym, sdyn, p, scale, seed,
                     DROPOUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # DZ is contiguous [M, N]
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    rm64 = rm.to(tl.int64)[:, None]
    rn64 = rn.to(tl.int64)[None, :]
    dz = tl.load(DY + rm64 * sdym + rn64 * sdyn, mask=mask, other=0.0).to(tl.float32)
    if DROPOUT:
        dz = dz * tl.where(_keep(seed, rm, tl.program_id(1), N, p, BLOCK_M, BLOCK_N), scale, 0.0)
    tl.store(DZ + rm64 * N + rn64, _cast(dz, DZ.dtype.element_ty), mask=mask)


@triton.autotune(configs=_configs(), key=["M", "N"])
@triton.jit
def _mask_kernel(K, M, N, p, seed, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    keep = _keep(seed, rm, tl.program_id(1), N, p, BLOCK_M, BLOCK_N)
    tl.store(K + rm.to(tl.int64)[:, None] * N + rn[None, :], keep.to(tl.int8), mask=mask)


# --- fa:shared rows ---
def _rows(t, view_only=False):
    """A 2-D [rows, N] view of t; a copy only when no such view exists (never for outputs)."""
    if t.dim() == 2:
        return t
    n = t.shape[-1] if t.dim() > 0 else 1
    try:
        return t.view(-1, n)
    except RuntimeError:
        if view_only:
            raise ValueError("output must be viewable as [rows, N]")
        return t.reshape(-1, n)
# --- fa:end rows ---


def _grid(meta, M, N):
    return (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))


def _check(x, residual, bias, p):
    for t in (x, residual):
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"dropout_add: unsupported dtype {t.dtype}")
    if residual.shape != x.shape:
        raise ValueError(f"dropout_add: residual {tuple(residual.shape)} and x {tuple(x.shape)} differ in shape")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != (x.shape[-1] if x.dim() else 1)):
        raise ValueError(f"dropout_add: bias shape {tuple(bias.shape)} does not match x {tuple(x.shape)}")
    if not (0.0 <= p < 1.0):
        raise ValueError(f"dropout_add: p={p} (want 0 <= p < 1)")


def _branch_dtype(x, bias):
    """The type eager computes x + b and the dropout in."""
    return x.dtype if bias is None else torch.promote_types(x.dtype, bias.dtype)


def _out_dtype(x, residual, bias):
    return torch.promote_types(_branch_dtype(x, bias), residual.dtype)


_ZT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def new_seed():
    """A dropout seed drawn from torch's default CPU generator (reproducible under manual_seed)."""
    return int(torch.randint(0, 2**31 - 1, (1,)).item())


def dropout_add(x, residual, bias=None, p=0.0, seed=0, training=True, out=None):
    """y = residual + dropout(x + bias, p) with the mask of (seed, element index)."""
    _check(x, residual, bias, p)
    # the kernels index vectors (bias, norm weights) as contiguous: a strided view is copied (tiny)
    bias = None if bias is None else bias.contiguous()
    dtype = _out_dtype(x, residual, bias)
    if out is None:
        out = torch.empty(x.shape, dtype=dtype, device=x.device)
    elif out.shape != x.shape or out.dtype != dtype:
        raise ValueError("dropout_add: out has the wrong shape or dtype")
    if x.numel() == 0:
        return out
    x2, r2, y2 = _rows(x), _rows(residual), _rows(out, view_only=True)
    M, N = x2.shape
    drop = training and p > 0
    _dropout_add_fwd[lambda meta: _grid(meta, M, N)](
        x2, bias if bias is not None else x2, r2, y2, M, N, x2.stride(0), x2.stride(1),
        r2.stride(0), r2.stride(1), y2.stride(0), y2.stride(1), float(p), 1.0 / (1.0 - p), int(seed),
        HAS_BIAS=bias is not None, DROPOUT=drop, ZT=_ZT[_branch_dtype(x, bias)])
    return out


def dropout_mask(shape, p, seed, device):
    """The keep-mask (bool) that dropout_add uses for a tensor of this shape, p and seed."""
    shape = tuple(shape)
    n = shape[-1] if shape else 1
    m = 1
    for d in shape[:-1]:
        m *= d
    k = torch.empty((m, n), dtype=torch.int8, device=device)
    if k.numel():
        _mask_kernel[lambda meta: _grid(meta, m, n)](k, m, n, float(p), int(seed))
    return k.view(shape).bool()


class DropoutAddFunction(torch.autograd.Function):
    """Autograd for dropout_add: fused Triton backward regenerating the mask; ATen bias row-sum."""

    @staticmethod
    def forward(ctx, x, residual, bias, p, seed, training):
        y = dropout_add(x, residual, bias, p, seed, training)
        ctx.p, ctx.seed, ctx.drop = p, seed, training and p > 0
        ctx.has_bias = bias is not None
        ctx.dtypes = (x.dtype, residual.dtype, None if bias is None else bias.dtype)
        return y

    @staticmethod
    def backward(ctx, dy):
        xd, rd, bd = ctx.dtypes
        dz = torch.empty(dy.shape, dtype=dy.dtype, device=dy.device)
        if dy.numel():
            dy2 = _rows(dy)
            M, N = dy2.shape
            _dropout_add_bwd[lambda meta: _grid(meta, M, N)](
                dy2, dz, M, N, dy2.stride(0), dy2.stride(1), float(ctx.p), 1.0 / (1.0 - ctx.p), int(ctx.seed),
                DROPOUT=ctx.drop)
        dx = dz.to(xd) if ctx.needs_input_grad[0] else None
        dr = dy.to(rd) if ctx.needs_input_grad[1] else None
        db = None
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = _rows(dz).sum(0, dtype=torch.float32).to(bd)
        return dx, dr, db, None, None, None


class DropoutAdd(torch.nn.Module):
    """Drop-in for ``residual + F.dropout(x + bias, p, self.training)``:
    ``DropoutAdd(p)(x, residual, bias)``. A fresh seed per call from torch's CPU generator."""

    def __init__(self, p=0.1):
        super().__init__()
        if not (0.0 <= p < 1.0):
            raise ValueError(f"p={p} (want 0 <= p < 1)")
        self.p = p

    def forward(self, x, residual, bias=None):
        seed = new_seed() if self.training and self.p > 0 else 0
        return DropoutAddFunction.apply(x, residual, bias, self.p, seed, self.training)
