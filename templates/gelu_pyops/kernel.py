"""Fused tanh-GELU written as Python ops (HF ``NewGELUActivation``, minGPT), with an optional bias.

Replaces the 6-9 pointwise ATen launches of
``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))`` (``pow``, ``mul``, ``add``, ``mul``,
``tanh``, ``add``, ``mul``, ``mul``; plus the bias ``add`` when present) with one kernel that
reads x once and writes y once. It computes the same function as
``F.gelu(x, approximate="tanh")``, which is also worth adopting in the model code.

- Inputs fp32 / fp16 / bf16, any rank; optional bias of the size of the last dim. Math is
  fp32 (every load is upcast at once); eager rounds after every op in fp16/bf16, this kernel
  rounds once, so it is closer to the fp32 result than eager is.
- ``dtype``: y's dtype when it differs from x's. Under autocast ``torch.pow`` runs in fp32, so
  the traced chain takes bf16/fp16 x and returns fp32 y; ``dtype=torch.float32`` does the same
  in one kernel (x + bias is then kept in fp32; eager rounds it to the inputs' type first).
- Strides are runtime arguments (2-D ``[rows, N]`` view, no copy when one exists).
- Autotuned over BLOCK_M x BLOCK_N and num_warps, keyed on the shape; one fixed config under
  ``TRITON_INTERPRET=1``.
- Training: ``NewGELUFunction`` has a backward: a fused Triton kernel for the derivative
  (recomputed from x and b, nothing but the inputs saved); the bias gradient is an ATen row-sum
  in fp32.

Interpreter-safe: builtins only (tanh as ``2/(1+exp(-2x))-1``), no libdevice, no bf16 math.
"""

import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# FUSEADVISE_AUTOTUNE=0: only the first (safe) GPU config, e.g. for quick GPU test runs
AUTOTUNE = os.environ.get("FUSEADVISE_AUTOTUNE", "1") != "0"

GELU_ERF = 0
GELU_TANH = 1
APPROXIMATE = {"none": GELU_ERF, "tanh": GELU_TANH}


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
def _tanh(x):
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0


@triton.jit
def _erf(x):
    """erf(x), Abramowitz & Stegun 7.1.26: |error| <= 1.5e-7.

    The rsqrt's ~2^-22 relative error adds up to 1.6e-6 near x = 0, where the GELU scales it
    by x / 2 (GELU error <= 3e-7 * max(1, |x|) in all).
    """
    ax = tl.abs(x)
    # t = 1 / d with d >= 1: rsqrt(d)^2 is cheaper than an fp32 division
    r = tl.math.rsqrt(1.0 + 0.3275911 * ax)
    t = r * r
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    # x = +-inf: t = 0 and exp(-inf) = 0, so y = 1; x = NaN stays NaN
    y = 1.0 - poly * tl.exp(-ax * ax)
    return tl.where(x < 0, -y, y)


@triton.jit
def _gelu(x, APPROX: tl.constexpr):
    if APPROX == 1:
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = 0.5 * x * (1.0 + _tanh(inner))
    else:
        y = 0.5 * x * (1.0 + _erf(x * 0.7071067811865476))
    return y


@triton.jit
def _gelu_grad(x, APPROX: tl.constexpr):
    if APPROX == 1:
        x2 = x * x
        t = _tanh(0.7978845608028654 * (x + 0.044715 * x2 * x))
        d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * x2)
    else:
        cdf = 0.5 * (1.0 + _erf(x * 0.7071067811865476))
        pdf = tl.exp(-0.5 * x * x) * 0.3989422804014327
        d = cdf + x * pdf
    return d


@triton.autotune(configs=_configs(), key=["M", "N"])
@triton.jit
def _bias_gelu_fwd(X, B, Y, M, N, sxm, sxn, sym, syn,
                   HAS_BIAS: tl.constexpr, APPROX: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    rm64 = rm.to(tl.int64)[:, None]
    rn64 = rn.to(tl.int64)[None, :]
    x = tl.load(X + rm64 * sxm + rn64 * sxn, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b = tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)
        # eager rounds x + b to its dtype before the GELU (here: y's; with dtype=fp32 the sum
        # stays fp32 where eager rounds it to the inputs' type first, see the module docstring)
        x = _cast(x + b[None, :], Y.dtype.element_ty).to(tl.float32)
    y = _gelu(x, APPROX)
    tl.store(Y + rm64 * sym + rn64 * syn, _cast(y, Y.dtype.element_ty), mask=mask)


@triton.autotune(configs=_configs(), key=["M", "N"])
@triton.jit
def _bias_gelu_bwd(DY, X, B, DZ, M, N, sdym, sdyn, sxm, sxn, sdzm, sdzn,
                   HAS_BIAS: tl.constexpr, APPROX: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    rm64 = rm.to(tl.int64)[:, None]
    rn64 = rn.to(tl.int64)[None, :]
    x = tl.load(X + rm64 * sxm + rn64 * sxn, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b = tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)
        x = _cast(x + b[None, :], DZ.dtype.element_ty).to(tl.float32)
    dy = tl.load(DY + rm64 * sdym + rn64 * sdyn, mask=mask, other=0.0).to(tl.float32)
    dz = dy * _gelu_grad(x, APPROX)
    tl.store(DZ + rm64 * sdzm + rn64 * sdzn, _cast(dz, DZ.dtype.element_ty), mask=mask)


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


def _check(x, bias):
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"gelu_pyops: unsupported dtype {x.dtype}")
    if bias is not None:
        if bias.dim() != 1 or bias.shape[0] != (x.shape[-1] if x.dim() else 1):
            raise ValueError(f"gelu_pyops: bias shape {tuple(bias.shape)} does not match x {tuple(x.shape)}")
        if bias.device != x.device:
            raise ValueError("gelu_pyops: x and bias on different devices")


def new_gelu(x, bias=None, out=None, dtype=None):
    """y = NewGELU(x + bias) (tanh GELU) in ``dtype`` (default: x's, promoted with the bias');
    forward only (see NewGELUFunction for autograd)."""
    _check(x, bias)
    # the kernels index vectors (bias, norm weights) as contiguous: a strided view is copied (tiny)
    bias = None if bias is None else bias.contiguous()
    if dtype is None:
        dtype = x.dtype if bias is None else torch.promote_types(x.dtype, bias.dtype)
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"gelu_pyops: unsupported output dtype {dtype}")
    if out is None:
        out = torch.empty(x.shape, dtype=dtype, device=x.device)
    elif out.shape != x.shape or out.dtype != dtype:
        raise ValueError("gelu_pyops: out has the wrong shape or dtype")
    if x.numel() == 0:
        return out
    x2, y2 = _rows(x), _rows(out, view_only=True)
    M, N = x2.shape
    b = bias if bias is not None else x2  # dummy pointer, never read
    _bias_gelu_fwd[lambda meta: _grid(meta, M, N)](
        x2, b, y2, M, N, x2.stride(0), x2.stride(1), y2.stride(0), y2.stride(1),
        HAS_BIAS=bias is not None, APPROX=GELU_TANH)
    return out


class NewGELUFunction(torch.autograd.Function):
    """Autograd for new_gelu: fused Triton derivative kernel; ATen row-sum for the bias grad."""

    @staticmethod
    def forward(ctx, x, bias=None, dtype=None):
        y = new_gelu(x, bias, dtype=dtype)
        ctx.save_for_backward(x, bias)
        ctx.has_bias = bias is not None
        ctx.zdtype = y.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        x, bias = ctx.saved_tensors
        dz = torch.empty(x.shape, dtype=ctx.zdtype, device=x.device)
        if x.numel():
            x2, dy2, dz2 = _rows(x), _rows(dy), _rows(dz)
            M, N = x2.shape
            b = bias if ctx.has_bias else x2
            _bias_gelu_bwd[lambda meta: _grid(meta, M, N)](
                dy2, x2, b, dz2, M, N, dy2.stride(0), dy2.stride(1), x2.stride(0), x2.stride(1),
                dz2.stride(0), dz2.stride(1), HAS_BIAS=ctx.has_bias, APPROX=GELU_TANH)
        dx = dz.to(x.dtype) if ctx.needs_input_grad[0] else None
        db = None
        if ctx.has_bias and ctx.needs_input_grad[1]:
            db = _rows(dz).sum(0, dtype=torch.float32).to(bias.dtype)
        return dx, db, None


class NewGELU(torch.nn.Module):
    """Drop-in for HF ``NewGELUActivation`` (``NewGELU()(x)``), with an optional bias argument."""

    def forward(self, x, bias=None):
        return NewGELUFunction.apply(x, bias)
