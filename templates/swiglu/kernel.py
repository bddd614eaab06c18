"""Fused SwiGLU: ``y = silu(gate) * up`` in one pass over memory.

Replaces ``aten::silu`` -> ``aten::mul`` (LLaMA-style MLPs: ``down(silu(gate(x)) * up(x))``):
eager writes ``silu(gate)`` and reads it back; this kernel reads gate and up once and writes y.
gate and up are often the two halves of one projection (``chunk``/``split``): they are read
through their own strides, so those non-contiguous views need no copy.

- fp32 / fp16 / bf16 in and out (the output dtype is ``promote_types(gate, up)``), fp32 math;
  ``silu(gate)`` is rounded to gate's dtype before the multiply, as eager does.
- Autotuned over BLOCK_M x BLOCK_N and num_warps, keyed on the shape; one fixed config under
  ``TRITON_INTERPRET=1``.
- Training: ``SwiGLUFunction`` has a fused Triton backward that recomputes ``sigmoid(gate)``
  (only gate and up are saved) and writes d_gate and d_up in one pass.

Interpreter-safe: sigmoid as ``1/(1+exp(-x))``, builtins only, no bf16 arithmetic.
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


@triton.autotune(configs=_configs(), key=["M", "N"])
@triton.jit
def _swiglu_fwd(G, U, Y, M, N, sgm, sgn, sum_, sun, sym, syn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    rm64 = rm.to(tl.int64)[:, None]
    rn64 = rn.to(tl.int64)[None, :]
    g = tl.load(G + rm64 * sgm + rn64 * sgn, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + rm64 * sum_ + rn64 * sun, mask=mask, other=0.0).to(tl.float32)
    s = _cast(g / (1.0 + tl.exp(-g)), G.dtype.element_ty).to(tl.float32)  # eager rounds silu(g)
    tl.store(Y + rm64 * sym + rn64 * syn, _cast(s * u, Y.dtype.element_ty), mask=mask)


@triton.autotune(configs=_configs(), key=["M", "N"])
@triton.jit
def _swiglu_bwd(DY, G, U, DG, DU, M, N, sdym, sdyn, sgm, sgn, sum_, sun,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # DG and DU are contiguous [M, N]
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    rm64 = rm.to(tl.int64)[:, None]
    rn64 = rn.to(tl.int64)[None, :]
    dy = tl.load(DY + rm64 * sdym + rn64 * sdyn, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + rm64 * sgm + rn64 * sgn, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + rm64 * sum_ + rn64 * sun, mask=mask, other=0.0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-g))
    silu = _cast(g * sig, G.dtype.element_ty).to(tl.float32)
    du = dy * silu
    dg = dy * u * sig * (1.0 + g * (1.0 - sig))
    off = rm64 * N + rn64
    tl.store(DG + off, _cast(dg, DG.dtype.element_ty), mask=mask)
    tl.store(DU + off, _cast(du, DU.dtype.element_ty), mask=mask)


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


def _check(gate, up):
    for t in (gate, up):
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"swiglu: unsupported dtype {t.dtype}")
    if gate.shape != up.shape:
        raise ValueError(f"swiglu: gate {tuple(gate.shape)} and up {tuple(up.shape)} differ in shape")
    if gate.device != up.device:
        raise ValueError("swiglu: gate and up on different devices")


def swiglu(gate, up, out=None):
    """y = silu(gate) * up; forward only (see SwiGLUFunction for autograd)."""
    _check(gate, up)
    dtype = torch.promote_types(gate.dtype, up.dtype)
    if out is None:
        out = torch.empty(gate.shape, dtype=dtype, device=gate.device)
    elif out.shape != gate.shape or out.dtype != dtype:
        raise ValueError("swiglu: out has the wrong shape or dtype")
    if gate.numel() == 0:
        return out
    g2, u2, y2 = _rows(gate), _rows(up), _rows(out, view_only=True)
    M, N = g2.shape
    _swiglu_fwd[lambda meta: _grid(meta, M, N)](
        g2, u2, y2, M, N, g2.stride(0), g2.stride(1), u2.stride(0), u2.stride(1),
        y2.stride(0), y2.stride(1))
    return out


class SwiGLUFunction(torch.autograd.Function):
    """Autograd for swiglu: fused Triton backward (d_gate and d_up in one pass)."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return swiglu(gate, up)

    @staticmethod
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        dg = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
        du = torch.empty(up.shape, dtype=up.dtype, device=up.device)
        if gate.numel():
            g2, u2, dy2 = _rows(gate), _rows(up), _rows(dy)
            M, N = g2.shape
            _swiglu_bwd[lambda meta: _grid(meta, M, N)](
                dy2, g2, u2, dg, du, M, N, dy2.stride(0), dy2.stride(1), g2.stride(0), g2.stride(1),
                u2.stride(0), u2.stride(1))
        return dg, du


class SwiGLU(torch.nn.Module):
    """Drop-in for ``F.silu(gate) * up``: ``SwiGLU()(gate, up)``."""

    def forward(self, gate, up):
        return SwiGLUFunction.apply(gate, up)
