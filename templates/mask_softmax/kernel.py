"""Fused scale + mask + softmax (+ dropout) over the last dim of attention scores.

Replaces ``mul``/``div`` (scale) -> ``masked_fill`` / ``add`` (mask) -> ``softmax``
(-> ``dropout``): eager writes and re-reads the scaled and the masked scores; this kernel reads
the scores (and the mask, usually broadcast) once and writes the probabilities once. When the
whole ``bmm -> mask -> softmax -> bmm`` chain is present, ``F.scaled_dot_product_attention`` is
the better fix; this kernel is for code that needs the probabilities.

- ``y = softmax(mask(scale * x))`` with mask kinds: ``"none"``; ``"bool"`` (True = masked,
  ``masked_fill`` semantics, filled with ``mask_fill``: ``-inf``, ``"min"`` = the dtype's
  finfo.min, or a number such as -10000); ``"additive"`` (a float mask added, e.g. HF's
  ``[b, 1, 1, sk]`` / ``[b, 1, sq, sk]`` with finfo.min; the output dtype is then
  ``promote_types(scores, mask)``, as in eager); ``"causal"`` (computed in-kernel:
  column j of query row i is masked when ``j > i + (sk - sq)``, the KV-cache convention).
- The mask is read through its own strides after broadcasting to the scores' shape (stride 0
  on broadcast dims): no expanded copy is made.
- Fully masked rows behave like PyTorch eager: with ``-inf`` fills ``softmax`` of an all
  ``-inf`` row is NaN (and so is any row containing +inf or NaN); with finite fills the row
  is uniform.
- Rows that fit one block (BLOCK_N = next_power_of_2(sk), capped at 8192 on a GPU) are loaded
  once, 1 to 32 of them per program (a [ROWS, BLOCK_N] tile, ROWS autotuned), with 32-bit row
  index arithmetic: one short row per program with 64-bit index math (four divisions per row)
  left sk = 129..512 at 20-50% of copy bandwidth on an H200. Longer rows, one per program:
  an online (running max / running sum) first pass, then a normalising pass.
  fp32 math; ``scale * x`` (and ``+ mask``) is rounded to the dtype before the softmax, as
  eager does.
- ``dtype`` (a case's ``out_dtype``): the probabilities' dtype when it differs from the
  default (autocast runs ``softmax`` in fp32, and ``softmax(..., dtype=torch.float32)`` does
  too: bf16/fp16 scores in, fp32 probabilities out).
- Optional dropout on the probabilities (``p``, ``seed``): Philox ``tl.rand(seed, row * sk +
  col)``, keep where ``rand >= p``, scaled by 1/(1-p); ``dropout_mask`` returns the mask used.
- Autotuned over ROWS and num_warps, keyed on sk; fixed configs under ``TRITON_INTERPRET=1``.
- Training: ``MaskSoftmaxFunction`` has a backward for p == 0 through ATen
  (``_softmax_backward_data`` on the saved probabilities, masked positions zeroed as
  ``masked_fill``'s backward does, times ``scale``); no gradient flows to the mask. With
  dropout (p > 0) the backward raises NotImplementedError: use it for inference or p = 0.

Interpreter-safe: builtins only (``tl.exp``, ``tl.rand``), ``tl.full``, no bf16 arithmetic;
runtime-length loops are ``while`` loops.
"""

import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# FUSEADVISE_AUTOTUNE=0: only the first (safe) GPU config, e.g. for quick GPU test runs
AUTOTUNE = os.environ.get("FUSEADVISE_AUTOTUNE", "1") != "0"
MAX_BLOCK_N = 128 if INTERPRET else 8192
MASK_KINDS = {"none": 0, "bool": 1, "additive": 2, "causal": 3}


def _long_configs():
    if INTERPRET:
        return [triton.Config({}, num_warps=4, num_stages=1)]
    configs = [triton.Config({}, num_warps=w, num_stages=1) for w in (4, 1, 2, 8, 16)]
    return configs if AUTOTUNE else configs[:1]


def _rows_configs():
    if INTERPRET:
        return [triton.Config({"ROWS": 4}, num_warps=4, num_stages=1)]
    tiles = [(1, 4), (1, 1), (1, 2), (2, 2), (4, 2), (2, 4), (4, 4), (8, 4), (16, 4), (4, 8), (8, 8), (16, 8),
             (32, 8), (1, 8), (1, 16), (2, 16)]
    configs = [triton.Config({"ROWS": r}, num_warps=w, num_stages=1) for r, w in tiles]
    return configs if AUTOTUNE else configs[:1]


def _prune_rows(configs, named_args, **kwargs):
    """Tiles of 256-16K elements, and at least one element per thread (one config if none)."""
    n = kwargs.get("BLOCK_N", named_args.get("BLOCK_N"))
    keep = [c for c in configs
            if 256 <= c.kwargs["ROWS"] * n <= 16384 and c.num_warps * 32 <= c.kwargs["ROWS"] * n]
    if not keep:  # tiny rows: the largest tile; long rows: one row per program
        keep = [max(configs, key=lambda c: (c.kwargs["ROWS"] * n <= 16384, c.kwargs["ROWS"], -c.num_warps))]
    return keep


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
def _scores(xp, mp, cols, qrow, inb, M, N, sxn, smn, scale, fill, KIND: tl.constexpr, SDT: tl.constexpr):
    """The masked, scaled scores at cols, fp32; -inf outside the row. xp/mp point at the
    row(s): a scalar pointer for one row, a [ROWS, 1] block of them for a tile (qrow alike)."""
    s = tl.load(xp + cols * sxn, mask=inb, other=0.0).to(tl.float32)
    s = _cast(s * scale, xp.dtype.element_ty).to(tl.float32)
    if KIND == 1:
        mk = tl.load(mp + cols * smn, mask=inb, other=0).to(tl.int1)
        s = tl.where(mk, fill, s)
    elif KIND == 2:
        a = tl.load(mp + cols * smn, mask=inb, other=0.0).to(tl.float32)
        s = _cast(s + a, SDT).to(tl.float32)  # x + mask in promote_types(x, mask), as eager
    elif KIND == 3:
        s = tl.where(cols > qrow + (N - M), fill, s)
    return tl.where(inb, s, float("-inf"))


@triton.autotune(configs=_rows_configs(), key=["N", "BLOCK_N"], prune_configs_by={"early_config_prune": _prune_rows})
@triton.jit
def _mask_softmax_rows(X, MASK, Y, SUM, R, H, M, N,
                       sxb, sxh, sxm, sxn, smb, smh, smm, smn, syb, syh, sym, syn,
                       scale, fill, p, pscale, seed,
                       KIND: tl.constexpr, DROPOUT: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """Rows that fit one block: ROWS of them per program, each loaded once."""
    # flat index of (b, h, m); int32 (R < 2**31): 64-bit division costs more than a short row
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    qrow = row % M
    bh = row // M
    h = (bh % H).to(tl.int64)
    b = (bh // H).to(tl.int64)
    qrow = qrow.to(tl.int64)
    row = row.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)[None, :]
    inb = (row < R)[:, None] & (cols < N)
    xp = X + (b * sxb + h * sxh + qrow * sxm)[:, None]
    mp = MASK + (b * smb + h * smh + qrow * smm)[:, None]
    s = _scores(xp, mp, cols, qrow[:, None], inb, M, N, sxn, smn, scale, fill, KIND, SUM.dtype.element_ty)
    mx = tl.max(s, axis=1)
    safe = tl.where(mx == float("-inf"), 0.0, mx)  # all -inf: 0/0 = NaN below, as eager
    e = tl.exp(s - safe[:, None])
    y = e / tl.sum(e, axis=1)[:, None]
    if DROPOUT:
        y = y * tl.where(tl.rand(seed, row[:, None] * N + cols) >= p, pscale, 0.0)  # NaN * 0 = NaN, as eager
    yp = Y + (b * syb + h * syh + qrow * sym)[:, None]
    tl.store(yp + cols * syn, _cast(y, Y.dtype.element_ty), mask=inb)


@triton.autotune(configs=_long_configs(), key=["N"])
@triton.jit
def _mask_softmax_long(X, MASK, Y, SUM, H, M, N,
                       sxb, sxh, sxm, sxn, smb, smh, smm, smn, syb, syh, sym, syn,
                       scale, fill, p, pscale, seed,
                       KIND: tl.constexpr, DROPOUT: tl.constexpr, BLOCK_N: tl.constexpr):
    """Rows longer than one block, one per program: an online pass, then a normalising pass."""
    row = tl.program_id(0)  # flat index of (b, h, m), int32 (R < 2**31)
    qrow = row % M
    bh = row // M
    h = (bh % H).to(tl.int64)
    b = (bh // H).to(tl.int64)
    qrow = qrow.to(tl.int64)
    row = row.to(tl.int64)
    X += b * sxb + h * sxh + qrow * sxm
    MASK += b * smb + h * smh + qrow * smm
    Y += b * syb + h * syh + qrow * sym
    # pass 1: per-lane running max and running sum of exp
    m_run = tl.full([BLOCK_N], float("-inf"), tl.float32)
    l_run = tl.full([BLOCK_N], 0, tl.float32)
    start = 0
    while start < N:
        cols = start + tl.arange(0, BLOCK_N)
        s = _scores(X, MASK, cols, qrow, cols < N, M, N, sxn, smn, scale, fill, KIND, SUM.dtype.element_ty)
        m_new = tl.maximum(m_run, s)
        safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        l_run = l_run * tl.exp(m_run - safe) + tl.exp(s - safe)
        m_run = m_new
        start += BLOCK_N
    mx = tl.max(m_run, axis=0)
    safe = tl.where(mx == float("-inf"), 0.0, mx)
    total = tl.sum(tl.where(m_run == float("-inf"), 0.0, l_run * tl.exp(m_run - safe)), axis=0)
    # pass 2: normalise
    start = 0
    while start < N:
        cols = start + tl.arange(0, BLOCK_N)
        s = _scores(X, MASK, cols, qrow, cols < N, M, N, sxn, smn, scale, fill, KIND, SUM.dtype.element_ty)
        y = tl.exp(s - safe) / total
        if DROPOUT:
            y = y * tl.where(tl.rand(seed, row * N + cols) >= p, pscale, 0.0)  # NaN * 0 = NaN, as eager
        tl.store(Y + cols * syn, _cast(y, Y.dtype.element_ty), mask=cols < N)
        start += BLOCK_N


@triton.jit
def _mask_kernel(K, N, p, seed, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    start = 0
    while start < N:
        cols = start + tl.arange(0, BLOCK_N)
        keep = tl.rand(seed, row * N + cols) >= p
        tl.store(K + row * N + cols, keep.to(tl.int8), mask=cols < N)
        start += BLOCK_N


def fill_value(mask_fill, dtype):
    """The masked_fill value: a number, float('-inf'), or "min" (the dtype's finfo.min)."""
    if isinstance(mask_fill, str):
        if mask_fill == "min":
            return float(torch.finfo(dtype).min)
        if mask_fill == "-inf":
            return float("-inf")
        raise ValueError(f"mask_fill={mask_fill!r}")
    return float(mask_fill)


def out_dtype(x, mask, mask_kind):
    """x's dtype, or promote_types(x, mask) for an additive mask (eager's x + mask)."""
    if mask_kind == "additive" and mask is not None:
        return torch.promote_types(x.dtype, mask.dtype)
    return x.dtype


def _as4d(t):
    while t.dim() < 4:
        t = t.unsqueeze(0)
    return t


def _check(x, mask, mask_kind, p):
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"mask_softmax: unsupported dtype {x.dtype}")
    if not 2 <= x.dim() <= 4:
        raise ValueError(f"mask_softmax: scores of rank {x.dim()} (want 2..4)")
    if mask_kind not in MASK_KINDS:
        raise ValueError(f"mask_softmax: mask_kind={mask_kind!r} (want one of {sorted(MASK_KINDS)})")
    if mask_kind in ("bool", "additive"):
        if mask is None:
            raise ValueError(f"mask_softmax: mask_kind={mask_kind!r} needs a mask")
        if mask_kind == "bool" and mask.dtype != torch.bool:
            raise TypeError("mask_softmax: a bool mask must have dtype torch.bool")
        if mask_kind == "additive" and not mask.dtype.is_floating_point:
            raise TypeError("mask_softmax: an additive mask must be floating point")
    if not (0.0 <= p < 1.0):
        raise ValueError(f"mask_softmax: p={p} (want 0 <= p < 1)")


def mask_softmax(x, mask=None, scale=1.0, mask_kind="none", mask_fill=float("-inf"), p=0.0, seed=0,
                 out=None, block_n=None, dtype=None):
    """y = dropout(softmax(mask(scale * x), dim=-1), p), in ``dtype`` (default: out_dtype(x, mask,
    mask_kind); e.g. torch.float32 for autocast's fp32 softmax). ``block_n`` forces the chunk size."""
    _check(x, mask, mask_kind, p)
    kind = MASK_KINDS[mask_kind]
    sum_dtype = out_dtype(x, mask, mask_kind)  # the type eager rounds x + mask to
    dtype = dtype or sum_dtype
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"mask_softmax: unsupported output dtype {dtype}")
    if out is None:
        out = torch.empty(x.shape, dtype=dtype, device=x.device)
    elif out.shape != x.shape or out.dtype != dtype:
        raise ValueError("mask_softmax: out has the wrong shape or dtype")
    if x.numel() == 0:
        return out
    x4, y4 = _as4d(x), _as4d(out)
    B, H, M, N = x4.shape
    if kind in (1, 2):
        try:
            m4 = _as4d(mask).expand(x4.shape)  # stride 0 on broadcast dims, no copy
        except RuntimeError:
            raise ValueError(f"mask_softmax: mask {tuple(mask.shape)} does not broadcast to {tuple(x.shape)}")
        if kind == 1:
            m4 = m4.view(torch.int8) if m4.element_size() == 1 else m4
    else:
        m4 = x4  # never read
    # a tensor of the sum's dtype: the kernels read only its element type
    tag = next((t for t in (x, out, mask) if t is not None and t.dtype == sum_dtype), None)
    if tag is None:
        tag = torch.empty(1, dtype=sum_dtype, device=x.device)
    block = block_n or min(triton.next_power_of_2(N), MAX_BLOCK_N)
    args = (*x4.stride(), *m4.stride(), *y4.stride(),
            float(scale), fill_value(mask_fill, x.dtype), float(p), 1.0 / (1.0 - p), int(seed))
    R = B * H * M
    if R > 2**31 - 64:  # 32-bit row arithmetic, the last tile's rows included
        raise ValueError(f"mask_softmax: {R} rows (at most 2**31 - 64)")
    if N <= block:
        _mask_softmax_rows[lambda meta: (triton.cdiv(R, meta["ROWS"]),)](
            x4, m4, y4, tag, R, H, M, N, *args, KIND=kind, DROPOUT=p > 0, BLOCK_N=block)
    else:
        _mask_softmax_long[(R,)](x4, m4, y4, tag, H, M, N, *args, KIND=kind, DROPOUT=p > 0, BLOCK_N=block)
    return out


def dropout_mask(shape, p, seed, device):
    """The keep-mask (bool) mask_softmax applies for these scores' shape, p and seed."""
    shape = tuple(shape)
    n = shape[-1]
    rows = 1
    for d in shape[:-1]:
        rows *= d
    k = torch.empty((rows, n), dtype=torch.int8, device=device)
    if k.numel():
        _mask_kernel[(rows,)](k, n, float(p), int(seed), BLOCK_N=min(triton.next_power_of_2(n), MAX_BLOCK_N))
    return k.view(shape).bool()


def _zeroed_positions(y, mask, mask_kind):
    """Where masked_fill's backward zeroes the gradient (bool and causal masks)."""
    if mask_kind == "bool":
        return mask.expand(y.shape) if mask.dim() <= y.dim() else mask
    if mask_kind == "causal":
        sq, sk = y.shape[-2], y.shape[-1]
        return torch.ones(sq, sk, dtype=torch.bool, device=y.device).triu(sk - sq + 1)
    return None


class MaskSoftmaxFunction(torch.autograd.Function):
    """Autograd for mask_softmax: ATen softmax backward on the saved probabilities (p == 0 only)."""

    @staticmethod
    def forward(ctx, x, mask, scale, mask_kind, mask_fill, p, seed, dtype=None):
        y = mask_softmax(x, mask, scale, mask_kind, mask_fill, p, seed, dtype=dtype)
        ctx.save_for_backward(y, mask if mask_kind == "bool" else None)
        ctx.scale, ctx.mask_kind, ctx.p, ctx.xdtype = scale, mask_kind, p, x.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        if ctx.p > 0:
            raise NotImplementedError("mask_softmax: no backward with dropout (p > 0); use p = 0")
        y, mask = ctx.saved_tensors
        g = torch._softmax_backward_data(dy, y, -1, y.dtype)
        z = _zeroed_positions(y, mask, ctx.mask_kind)
        if z is not None:
            g = g.masked_fill(z, 0)
        if ctx.scale != 1.0:
            g = g * ctx.scale
        return g.to(ctx.xdtype), None, None, None, None, None, None, None


class MaskSoftmax(torch.nn.Module):
    """Drop-in for ``dropout(softmax(masked_fill(scores * scale, mask, fill)), p)`` and the
    additive / causal variants: ``MaskSoftmax(scale, mask_kind, mask_fill, p, dtype)(scores, mask)``
    (``dtype=torch.float32`` for ``softmax(..., dtype=torch.float32)`` or autocast's fp32 softmax).
    Dropout runs only in training mode, with a fresh seed per call from torch's CPU generator."""

    def __init__(self, scale=1.0, mask_kind="none", mask_fill=float("-inf"), p=0.0, dtype=None):
        super().__init__()
        if mask_kind not in MASK_KINDS:
            raise ValueError(f"mask_kind={mask_kind!r}")
        self.scale, self.mask_kind, self.mask_fill, self.p, self.dtype = scale, mask_kind, mask_fill, p, dtype

    def forward(self, scores, mask=None):
        p = self.p if self.training else 0.0
        seed = int(torch.randint(0, 2**31 - 1, (1,)).item()) if p > 0 else 0
        return MaskSoftmaxFunction.apply(scores, mask, self.scale, self.mask_kind, self.mask_fill, p, seed, self.dtype)
