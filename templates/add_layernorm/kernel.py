"""Fused residual add + LayerNorm: ``s = x + residual; y = layer_norm(s)``, both written.

Replaces ``aten::add`` -> ``aten::layer_norm`` (``native_layer_norm``) in pre-/post-LN
transformer blocks. The sum ``s`` is still needed (it is the next residual), so the kernel
writes it, but it never reads it back from memory: eager reads x and r, writes s, reads s,
writes y; this kernel reads x and r and writes s and y.

- One program per row, LayerNorm over the last dim with optional weight and bias, two-pass
  statistics (mean, then variance of ``s - mean``) in fp32. When the row fits one block
  (BLOCK_N = next_power_of_2(N), capped at 8192 on a GPU) it stays in registers; longer rows
  are processed in chunks, recomputing ``x + r``. ``s`` is rounded to its dtype before the
  statistics, as eager does.
- fp32 / fp16 / bf16; strides are runtime arguments (2-D ``[rows, N]`` views). The residual
  may broadcast along x's leading dims (BERT's position embeddings ``[1, S, H]`` added to
  ``[B, S, H]``): its rows repeat every ``S`` rows of x and are read, not expanded; its
  gradient sums over the repeats.
- Autotuned over num_warps, keyed on N; one fixed config under ``TRITON_INTERPRET=1``.
- Training: ``AddLayerNormFunction`` has a backward through ATen's
  ``native_layer_norm_backward`` using the mean/rstd this kernel saved (Liger's data show a
  fused LayerNorm backward is often slower than ATen's for N <= 4096), plus the gradient
  flowing into ``s`` directly; d_x = d_residual = that sum.

Interpreter-safe: builtins only, ``tl.full``, no bf16 arithmetic; runtime-length loops are
``while`` loops (Triton 3.6's interpreter with numpy 2.4 rejects ``range(runtime N)``).
"""

import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# FUSEADVISE_AUTOTUNE=0: only the first (safe) GPU config, e.g. for quick GPU test runs
AUTOTUNE = os.environ.get("FUSEADVISE_AUTOTUNE", "1") != "0"
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


@triton.jit
def _sum_chunk(X, R, S, cols, N, sxn, srn, ssn, STORE: tl.constexpr):
    m = cols < N
    x = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32)
    r = tl.load(R + cols * srn, mask=m, other=0.0).to(tl.float32)
    s = _cast(x + r, S.dtype.element_ty)
    if STORE:
        tl.store(S + cols * ssn, s, mask=m)
    return tl.where(m, s.to(tl.float32), 0.0)


@triton.autotune(configs=_configs(), key=["N"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _add_layernorm_fwd(X, R, W, B, S, Y, MEAN, RSTD, N, RR,
                       sxm, sxn, srm, srn, ssm, ssn, sym, syn, eps,
                       HAS_W: tl.constexpr, HAS_B: tl.constexpr, SINGLE: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    X += row * sxm
    R += (tl.program_id(0) % RR).to(tl.int64) * srm  # a broadcast residual repeats every RR rows
    S += row * ssm
    Y += row * sym
    if SINGLE:  # the whole row in registers
        cols = tl.arange(0, BLOCK_N)
        m = cols < N
        s = _sum_chunk(X, R, S, cols, N, sxn, srn, ssn, True)
        mean = tl.sum(s, axis=0) / N
        d = tl.where(m, s - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
        y = d * rstd
        if HAS_W:
            y = y * tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(B + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + cols * syn, _cast(y, Y.dtype.element_ty), mask=m)
    else:  # chunked: sum (writing s), variance, normalise
        acc = tl.full([BLOCK_N], 0, tl.float32)
        start = 0
        while start < N:
            acc += _sum_chunk(X, R, S, start + tl.arange(0, BLOCK_N), N, sxn, srn, ssn, True)
            start += BLOCK_N
        mean = tl.sum(acc, axis=0) / N
        acc = tl.full([BLOCK_N], 0, tl.float32)
        start = 0
        while start < N:
            cols = start + tl.arange(0, BLOCK_N)
            s = _sum_chunk(X, R, S, cols, N, sxn, srn, ssn, False)
            d = tl.where(cols < N, s - mean, 0.0)
            acc += d * d
            start += BLOCK_N
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        start = 0
        while start < N:
            cols = start + tl.arange(0, BLOCK_N)
            m = cols < N
            s = _sum_chunk(X, R, S, cols, N, sxn, srn, ssn, False)
            y = (s - mean) * rstd
            if HAS_W:
                y = y * tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
            if HAS_B:
                y = y + tl.load(B + cols, mask=m, other=0.0).to(tl.float32)
            tl.store(Y + cols * syn, _cast(y, Y.dtype.element_ty), mask=m)
            start += BLOCK_N
    tl.store(MEAN + row, mean)
    tl.store(RSTD + row, rstd)


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


def _residual_rows(x, residual):
    """How many rows the residual has when it is x's shape or broadcasts along x's leading
    dims only (position embeddings [1, S, H] added to [B, S, H]): its rows then repeat every
    that many rows of x. None when it broadcasts otherwise."""
    if residual.dim() == 0 or residual.dim() > x.dim():
        return None
    shape = (1,) * (x.dim() - residual.dim()) + tuple(residual.shape)
    k = 0
    while k < x.dim() - 1 and shape[k] == 1:
        k += 1
    if shape[k:] != tuple(x.shape[k:]):
        return None
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows


def _check(x, residual, weight, bias):
    for t in (x, residual):
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"add_layernorm: unsupported dtype {t.dtype}")
    if x.dim() == 0 or _residual_rows(x, residual) is None:
        raise ValueError(f"add_layernorm: residual {tuple(residual.shape)} does not match x {tuple(x.shape)} "
                         "(x's shape, or its trailing dims with leading 1s)")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.shape != (x.shape[-1],):
            raise ValueError(f"add_layernorm: {name} {tuple(t.shape)} does not match x {tuple(x.shape)}")


def add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5, out=None, block_n=None, stats=False):
    """Returns (s, y): s = x + residual, y = layer_norm(s, (N,), weight, bias, eps).

    ``out`` = (s, y) buffers to write into; ``stats=True`` also returns fp32 (mean, rstd) per
    row; ``block_n`` forces the chunk size (tests use it for rows longer than a block)."""
    _check(x, residual, weight, bias)
    # the kernels index vectors (bias, norm weights) as contiguous: a strided view is copied (tiny)
    weight = None if weight is None else weight.contiguous()
    bias = None if bias is None else bias.contiguous()
    dtype = torch.promote_types(x.dtype, residual.dtype)
    if out is None:
        out = (torch.empty(x.shape, dtype=dtype, device=x.device), torch.empty(x.shape, dtype=dtype, device=x.device))
    s, y = out
    if s.shape != x.shape or y.shape != x.shape or s.dtype != dtype or y.dtype != dtype:
        raise ValueError("add_layernorm: out has the wrong shape or dtype")
    x2, r2, s2, y2 = _rows(x), _rows(residual), _rows(s, view_only=True), _rows(y, view_only=True)
    M, N = x2.shape
    rr = max(_residual_rows(x, residual), 1)
    mean = torch.empty(M, dtype=torch.float32, device=x.device)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    if x.numel():
        block = block_n or min(triton.next_power_of_2(N), MAX_BLOCK_N)
        _add_layernorm_fwd[(M,)](
            x2, r2, weight if weight is not None else x2, bias if bias is not None else x2, s2, y2, mean, rstd, N, rr,
            x2.stride(0), x2.stride(1), r2.stride(0), r2.stride(1), s2.stride(0), s2.stride(1),
            y2.stride(0), y2.stride(1), float(eps),
            HAS_W=weight is not None, HAS_B=bias is not None, SINGLE=N <= block, BLOCK_N=block)
    return (s, y, mean, rstd) if stats else (s, y)


class AddLayerNormFunction(torch.autograd.Function):
    """Autograd for add_layer_norm: ATen native_layer_norm_backward with the saved mean/rstd."""

    @staticmethod
    def forward(ctx, x, residual, weight, bias, eps):
        s, y, mean, rstd = add_layer_norm(x, residual, weight, bias, eps, stats=True)
        ctx.save_for_backward(s, weight, bias, mean, rstd)
        ctx.dtypes = (x.dtype, residual.dtype)
        ctx.rshape = residual.shape
        return s, y

    @staticmethod
    def backward(ctx, ds, dy):
        s, weight, bias, mean, rstd = ctx.saved_tensors
        n = s.shape[-1]
        # CUDA's native_layer_norm keeps fp32 stats; the CPU kernels want the input dtype
        sd = torch.float32 if s.is_cuda else s.dtype
        shp = s.shape[:-1] + (1,)
        mask = [True, weight is not None and ctx.needs_input_grad[2], bias is not None and ctx.needs_input_grad[3]]
        if dy is None:
            dy = torch.zeros_like(s)
        dsn, dw, db = torch.ops.aten.native_layer_norm_backward(
            dy.contiguous(), s, [n], mean.view(shp).to(sd), rstd.view(shp).to(sd), weight, bias, mask)
        total = dsn if ds is None else dsn + ds
        dr = total
        if ctx.rshape != total.shape:  # a broadcast residual: its gradient sums the repeats
            dr = total.float().sum_to_size(ctx.rshape)
        return total.to(ctx.dtypes[0]), dr.to(ctx.dtypes[1]), dw, db, None


class AddLayerNorm(torch.nn.Module):
    """Drop-in for ``s = x + residual; y = layer_norm(s)``: ``s, y = AddLayerNorm(N)(x, residual)``."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        n = normalized_shape if isinstance(normalized_shape, int) else normalized_shape[-1]
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(n, device=device, dtype=dtype)) if elementwise_affine else None
        self.bias = torch.nn.Parameter(torch.zeros(n, device=device, dtype=dtype)) if elementwise_affine and bias else None

    @classmethod
    def from_layer_norm(cls, ln):
        """From an ``nn.LayerNorm`` over the last dim (shares its parameters)."""
        if len(ln.normalized_shape) != 1:
            raise ValueError("only LayerNorm over the last dim")
        new = cls(ln.normalized_shape[0], ln.eps, elementwise_affine=False)
        new.weight, new.bias = ln.weight, ln.bias
        return new

    def forward(self, x, residual):
        return AddLayerNormFunction.apply(x, residual, self.weight, self.bias, self.eps)
