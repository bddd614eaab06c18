"""Fused RMSNorm: the HF ``LlamaRMSNorm`` / ``T5LayerNorm`` op chain as one row-wise kernel.

Replaces ``to`` -> ``pow`` -> ``mean`` -> ``add`` (eps) -> ``rsqrt`` -> ``mul`` -> ``to`` -> ``mul``
(weight): eager launches 6-8 kernels and materialises fp32 copies of the row; this kernel
reads x and the weight once per row and writes y (and 4 bytes of rstd per row for backward).
``F.rms_norm`` / ``nn.RMSNorm`` are also worth adopting in the model code.

- One program per row. A row that fits one block (BLOCK_N = next_power_of_2(N), capped at 8192
  on a GPU) is read once and kept in registers; longer rows are read in BLOCK_N chunks (two
  passes: sum of squares, then normalise). Autotuned over num_warps, keyed on N; one fixed config under ``TRITON_INTERPRET=1``.
- Casting (``casting=``), matching the model code or bf16 results differ:
  ``"llama"`` (LlamaRMSNorm): variance and normalisation in fp32, the normalised row cast back
  to the input dtype, then multiplied by the weight in ``promote_types(x, weight)`` (the
  output dtype). ``"fp32"``: everything in fp32, ``(x * rstd * w)`` cast once to x's dtype.
- fp32 / fp16 / bf16; strides are runtime arguments (2-D ``[rows, N]`` view).
- Training: ``RMSNormFunction`` has a backward: d_x is a fused Triton row kernel (recomputes
  the normalised row from x and the saved rstd); d_weight is an ATen reduction over rows in
  fp32 (a cross-row reduction).

Interpreter-safe: ``tl.sqrt`` and division (no libdevice), no bf16 arithmetic, ``tl.full``.
"""

import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# FUSEADVISE_AUTOTUNE=0: only the first (safe) GPU config, e.g. for quick GPU test runs
AUTOTUNE = os.environ.get("FUSEADVISE_AUTOTUNE", "1") != "0"
CASTING = {"llama": 0, "fp32": 1}
MAX_BLOCK_N = 128 if INTERPRET else 8192


def _configs():
    if INTERPRET:
        return [triton.Config({}, num_warps=4, num_stages=1)]
    configs = [triton.Config({}, num_warps=w, num_stages=1) for w in (4, 2, 8, 16)]
    return configs if AUTOTUNE else configs[:1]


def _prune(configs, named_args, **kwargs):
    """At least 8 elements of a block per thread: more warps than BLOCK_N / 256 only add
    cross-warp reduction steps, and at microsecond scale the autotuner's timings are noise
    enough to pick them (16 warps for rows of 768 measured 18.4 us where 4 warps took 13.3 us
    on the H200)."""
    most = max(2, kwargs.get("BLOCK_N", 8192) // 256)
    return [c for c in configs if c.num_warps <= most] or configs[:1]


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


@triton.autotune(configs=_configs(), key=["N"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _rmsnorm_fwd(X, W, Y, RSTD, N, sxm, sxn, sym, syn, eps,
                 CAST: tl.constexpr, SINGLE: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    X += row * sxm
    Y += row * sym
    if SINGLE:  # the whole row in registers: one read of x
        cols = tl.arange(0, BLOCK_N)
        m = cols < N
        x = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        tl.store(RSTD + row, rstd)
        n = x * rstd
        if CAST == 0:  # llama: back to the input dtype before the weight multiply
            n = _cast(n, X.dtype.element_ty).to(tl.float32)
        w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + cols * syn, _cast(n * w, Y.dtype.element_ty), mask=m)
    else:  # chunked: sum of squares, then normalise
        acc = tl.full([BLOCK_N], 0, tl.float32)
        start = 0
        while start < N:  # (while: Triton 3.6's interpreter with numpy 2.4 rejects range(runtime N))
            cols = start + tl.arange(0, BLOCK_N)
            x = tl.load(X + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
            acc += x * x
            start += BLOCK_N
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        tl.store(RSTD + row, rstd)
        start = 0
        while start < N:
            cols = start + tl.arange(0, BLOCK_N)
            m = cols < N
            x = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32)
            w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
            n = x * rstd
            if CAST == 0:  # llama: back to the input dtype before the weight multiply
                n = _cast(n, X.dtype.element_ty).to(tl.float32)
            tl.store(Y + cols * syn, _cast(n * w, Y.dtype.element_ty), mask=m)
            start += BLOCK_N


@triton.autotune(configs=_configs(), key=["N"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _rmsnorm_bwd_dx(DY, X, W, RSTD, DX, N, sdym, sdyn, sxm, sxn,
                    CAST: tl.constexpr, BLOCK_N: tl.constexpr):
    # dx = rstd * (dn - xhat * mean(dn * xhat)), dn = dy * w, xhat = x * rstd; DX contiguous
    row = tl.program_id(0).to(tl.int64)
    DY += row * sdym
    X += row * sxm
    DX += row * N
    rstd = tl.load(RSTD + row)
    acc = tl.full([BLOCK_N], 0, tl.float32)
    start = 0
    while start < N:
        cols = start + tl.arange(0, BLOCK_N)
        m = cols < N
        dy = tl.load(DY + cols * sdyn, mask=m, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        x = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32)
        dn = dy * w
        if CAST == 0:
            dn = _cast(dn, X.dtype.element_ty).to(tl.float32)
        acc += dn * x * rstd
        start += BLOCK_N
    c = tl.sum(acc, axis=0) / N
    start = 0
    while start < N:
        cols = start + tl.arange(0, BLOCK_N)
        m = cols < N
        dy = tl.load(DY + cols * sdyn, mask=m, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        x = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32)
        dn = dy * w
        if CAST == 0:
            dn = _cast(dn, X.dtype.element_ty).to(tl.float32)
        dx = rstd * (dn - x * rstd * c)
        tl.store(DX + cols, _cast(dx, DX.dtype.element_ty), mask=m)
        start += BLOCK_N


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


def _block(n, block_n):
    return block_n or min(triton.next_power_of_2(max(n, 1)), MAX_BLOCK_N)


def out_dtype(x, weight, casting):
    return torch.promote_types(x.dtype, weight.dtype) if casting == "llama" else x.dtype


def _check(x, weight, casting):
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"rmsnorm: unsupported dtype {x.dtype}")
    if casting not in CASTING:
        raise ValueError(f"rmsnorm: casting={casting!r} (want one of {sorted(CASTING)})")
    if x.dim() == 0 or weight.shape != (x.shape[-1],):
        raise ValueError(f"rmsnorm: weight {tuple(weight.shape)} does not match x {tuple(x.shape)}")


def rms_norm(x, weight, eps=1e-6, casting="llama", out=None, rstd=None, block_n=None):
    """y = RMSNorm(x) * weight over the last dim; forward only (see RMSNormFunction).

    ``rstd``, if given, receives 1/sqrt(mean(x^2)+eps) per row (fp32). ``block_n`` forces the
    chunk size (tests use it to exercise rows longer than a block)."""
    _check(x, weight, casting)
    # the kernels index vectors (bias, norm weights) as contiguous: a strided view is copied (tiny)
    weight = None if weight is None else weight.contiguous()
    dtype = out_dtype(x, weight, casting)
    if out is None:
        out = torch.empty(x.shape, dtype=dtype, device=x.device)
    elif out.shape != x.shape or out.dtype != dtype:
        raise ValueError("rmsnorm: out has the wrong shape or dtype")
    x2, y2 = _rows(x), _rows(out, view_only=True)
    M, N = x2.shape
    if rstd is None:
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    if x.numel() == 0:
        return out
    _rmsnorm_fwd[(M,)](x2, weight, y2, rstd, N, x2.stride(0), x2.stride(1), y2.stride(0), y2.stride(1),
                       float(eps), CAST=CASTING[casting], SINGLE=N <= _block(N, block_n), BLOCK_N=_block(N, block_n))
    return out


class RMSNormFunction(torch.autograd.Function):
    """Autograd for rms_norm: fused Triton d_x kernel; ATen fp32 row reduction for d_weight."""

    @staticmethod
    def forward(ctx, x, weight, eps, casting):
        M = x.numel() // x.shape[-1] if x.dim() else 0
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
        y = rms_norm(x, weight, eps, casting, rstd=rstd)
        ctx.save_for_backward(x, weight, rstd)
        ctx.casting = casting
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        x2, dy2 = _rows(x), _rows(dy)
        M, N = x2.shape
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if x.numel() and ctx.needs_input_grad[0]:
            _rmsnorm_bwd_dx[(M,)](dy2, x2, weight, rstd, dx, N, dy2.stride(0), dy2.stride(1),
                                  x2.stride(0), x2.stride(1), CAST=CASTING[ctx.casting], BLOCK_N=_block(N, None))
        dw = None
        if ctx.needs_input_grad[1]:
            n = x2.float() * rstd[:, None]
            if ctx.casting == "llama":
                n = n.to(x.dtype).float()
            dw = (dy2.float() * n).sum(0).to(weight.dtype)
        return dx, dw, None, None


class RMSNorm(torch.nn.Module):
    """Drop-in for ``LlamaRMSNorm`` (casting="llama") or an all-fp32 RMSNorm (casting="fp32")."""

    def __init__(self, hidden_size, eps=1e-6, casting="llama", device=None, dtype=None):
        super().__init__()
        if casting not in CASTING:
            raise ValueError(f"casting={casting!r} (want one of {sorted(CASTING)})")
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.variance_epsilon = eps
        self.casting = casting

    @classmethod
    def from_module(cls, m, casting="llama"):
        """From an HF LlamaRMSNorm-like module (``weight``, ``variance_epsilon`` or ``eps``)."""
        eps = getattr(m, "variance_epsilon", getattr(m, "eps", 1e-6))
        new = cls(m.weight.shape[0], eps, casting, device=m.weight.device, dtype=m.weight.dtype)
        with torch.no_grad():
            new.weight.copy_(m.weight)
        return new

    def forward(self, x):
        return RMSNormFunction.apply(x, self.weight, self.variance_epsilon, self.casting)
