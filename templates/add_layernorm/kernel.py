"""Fused residual add + LayerNorm: ``s = x + residual; y = layer_norm(s)``, both written.

Replaces ``aten::add`` -> ``aten::layer_norm`` (``native_layer_norm``) in pre-/post-LN
transformer blocks. The sum ``s`` is still needed (it is the next residual), so the kernel
writes it: eager reads x and r, writes s, reads s, writes y; this kernel reads x and r and
writes s and y (rows longer than one block read s back, see below).

- One program per row, LayerNorm over the last dim with optional weight and bias, two-pass
  statistics (mean, then variance of ``s - mean``) in fp32. ``s`` is rounded to its dtype
  before the statistics, as eager does. When the row fits one block (BLOCK_N =
  next_power_of_2(N), at most 8192 on a GPU) it stays in registers. Longer rows go in
  chunks: the first pass reads x and r and writes s, the variance and the normalisation read
  s back (the sum as stored, which is what eager normalises; fewer bytes than x and r).
- No autotuner: BLOCK_N and num_warps come from the row length (``_plan``: the Triton
  LayerNorm tutorial's ``BLOCK_N // 256`` warps, 1 to 8), so nothing is benchmarked on the
  caller's buffers, a new shape costs no tuning and CUDA-graph capture works at any shape.
  The kernel is launched through ``_launch`` (its compiled form cached per specialization).
- fp32 / fp16 / bf16; strides are runtime arguments (2-D ``[rows, N]`` views). Row and column
  offsets are 64-bit: ``cols * stride`` passes 2**31 in a transposed ``[600000, 4096]`` view.
  The residual may broadcast along x's leading dims (BERT's position embeddings ``[1, S, H]``
  added to ``[B, S, H]``): its rows repeat every ``S`` rows of x and are read, not expanded;
  its gradient sums over the repeats. A residual that is one vector of the normalized dim (a
  convolution's bias ``[1, C, 1, 1]`` before ConvNeXt's stem LayerNorm2d) is read with zero
  strides on every path, the channels-first tile kernel's too.
- In place: ``out=(x, y)`` or ``out=(residual, y)`` writes the sum over x (or over a residual
  of x's shape): each program reads its row of x and r before it writes that row of s, and
  never reads x or r again. y may not overlap x, the residual or s, and any other overlap of
  an output with an input is refused (``_check_alias``), as is an output whose elements share
  memory (``_check_dense``).
- Channels-first (``dim=1``, timm's LayerNorm2d: permute -> layer_norm over C -> permute back):
  x [B, C, ...] is normalized over C at each position. The wrapper moves C last (a view,
  ``movedim``) and normalizes the [B, ..., C] view's last dim, reading it through its strides:
  a channels_last tensor (what the convolutions around a LayerNorm2d leave) is a plain
  [rows, C] matrix; a contiguous NCHW one has no [rows, C] view, and is read in place by
  ``_add_layernorm_cf_fwd``: a program takes BLOCK_P positions of one batch and every channel
  (up to 1024), a [BLOCK_C, BLOCK_P] tile loaded along the positions (their unit stride),
  reduced over the channels (``_batch_layout``, ``_cf_plan``). Past 1024 channels it is copied
  first, as ATen's layer_norm copies it. Rows of at most CF_SHORT_N contiguous channels
  (channels_last, or a [B, S, N] x of short rows) go through the same tile kernel, BLOCK_P rows
  a program, rather than one warp a row. Fresh outputs are channels_last, the layout eager's
  LayerNorm2d returns (its output is the permuted-back view of a [B, H, W, C] tensor), on
  either path, with the same per-row mean and rstd for the backward.
- Training: ``AddLayerNormFunction`` has a backward. Rows that fit one block (a residual of
  x's shape, or one vector of the columns) take one Triton pass (``_add_layernorm_bwd``) with the mean/rstd the forward
  saved: it reads dy, the sum's own gradient and s once, writes d_x (= d_residual, written
  once more only when the residual has another type) and the weight's and bias' gradients as
  fp32 partial sums per group of rows, which one small kernel (``_sum_parts``) adds up and
  writes in their types; a vector residual's gradient, d_s summed over the rows, is a third
  partial sum of the same pass. An NCHW gradient (LayerNorm2d's) is read as batches of H * W
  rows, each row tile inside one batch (no copy). Longer rows and a residual broadcast
  otherwise go through ATen's ``native_layer_norm_backward``, then the sum's gradient added
  and cast: d_x = d_residual = that sum.

Interpreter-safe: builtins only, ``tl.full``, no bf16 arithmetic; runtime-length loops are
``while`` loops (Triton 3.6's interpreter with numpy 2.4 rejects ``range(runtime N)``).
"""

import functools
import math
import os

import torch
from torch.autograd.function import once_differentiable
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# the longest row held in registers; longer rows go in chunks of this size (the interpreter
# keeps blocks small so that the tests' rows of 300 and 1500 take the chunked path)
MAX_BLOCK_N = 128 if INTERPRET else 8192


@functools.lru_cache(maxsize=1024)
def _plan(N, max_block):
    """(BLOCK_N, num_warps) for rows of N elements: the row in one block up to max_block
    (MAX_BLOCK_N), BLOCK_N // 256 warps (at least 8 elements per thread, as the Triton
    LayerNorm tutorial chooses), 1 to 8 of them."""
    block = min(triton.next_power_of_2(N), max_block)
    return block, min(max(block // 256, 1), 8)


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
def _sum_chunk(X, R, S, cols, N, sxn, srn, ssn):
    """s = x + r at cols (int64), rounded to S's type and stored; returned in fp32, 0 past N."""
    m = cols < N
    x = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32)
    r = tl.load(R + cols * srn, mask=m, other=0.0).to(tl.float32)
    s = _cast(x + r, S.dtype.element_ty)
    tl.store(S + cols * ssn, s, mask=m)
    return tl.where(m, s.to(tl.float32), 0.0)


# RR (the residual's row count: x's for a residual of x's shape) unspecialized: a new number
# of rows (1, a multiple of 16, other) compiles nothing new, nor during CUDA-graph capture
@triton.jit(do_not_specialize=["RR"])
def _add_layernorm_fwd(X, R, W, B, S, Y, MEAN, RSTD, N, RR,
                       sxm, sxn, srm, srn, ssm, ssn, sym, syn, eps,
                       HAS_W: tl.constexpr, HAS_B: tl.constexpr, SINGLE: tl.constexpr, STATS: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    X += row * sxm
    R += (tl.program_id(0) % RR).to(tl.int64) * srm  # a broadcast residual repeats every RR rows
    S += row * ssm
    Y += row * sym
    if SINGLE:  # the whole row in registers
        cols = tl.arange(0, BLOCK_N).to(tl.int64)  # 64-bit: cols * stride may pass 2**31
        m = cols < N
        s = _sum_chunk(X, R, S, cols, N, sxn, srn, ssn)
        mean = tl.sum(s, axis=0) / N
        d = tl.where(m, s - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
        y = d * rstd
        if HAS_W:
            y = y * tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(B + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + cols * syn, _cast(y, Y.dtype.element_ty), mask=m)
    else:  # chunked: the sum (written), then its variance and the normalisation, reading s back
        offs = tl.arange(0, BLOCK_N).to(tl.int64)  # 64-bit: cols * stride may pass 2**31
        acc = tl.full([BLOCK_N], 0, tl.float32)
        start = 0
        while start < N:
            acc += _sum_chunk(X, R, S, start + offs, N, sxn, srn, ssn)
            start += BLOCK_N
        mean = tl.sum(acc, axis=0) / N
        tl.debug_barrier()  # s as written above, seen by every thread of the program
        acc = tl.full([BLOCK_N], 0, tl.float32)
        start = 0
        while start < N:
            cols = start + offs
            s = tl.load(S + cols * ssn, mask=cols < N, other=0.0).to(tl.float32)
            d = tl.where(cols < N, s - mean, 0.0)
            acc += d * d
            start += BLOCK_N
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        start = 0
        while start < N:
            cols = start + offs
            m = cols < N
            s = tl.load(S + cols * ssn, mask=m, other=0.0).to(tl.float32)
            y = (s - mean) * rstd
            if HAS_W:
                y = y * tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
            if HAS_B:
                y = y + tl.load(B + cols, mask=m, other=0.0).to(tl.float32)
            tl.store(Y + cols * syn, _cast(y, Y.dtype.element_ty), mask=m)
            start += BLOCK_N
    if STATS:
        tl.store(MEAN + row, mean)
        tl.store(RSTD + row, rstd)


# Channels-first tiles (_add_layernorm_cf_fwd): a program takes BLOCK_P positions of one batch
# and every channel (BLOCK_N = next_power_of_2(N), at most CF_MAX_BLOCK_N), about CF_TILE
# elements, at least 32 bytes of each channel's run of positions (one memory sector) and at
# most CF_MAX_P positions; 32 elements per thread of each tile array, 4 to 16 warps. Under the
# interpreter the tiles are small, so that the tests' few positions span several programs.
# Not measured yet: bench/experiments/probe_layernorm2d.py probes BLOCK_P and the warps.
CF_MAX_BLOCK_N = 256 if INTERPRET else 1024
CF_TILE = 256 if INTERPRET else 4096
CF_MAX_P = 4 if INTERPRET else 256
# Rows whose columns are contiguous (channels_last) take the tile kernel up to this many: the
# row kernel runs them one warp a row (BLOCK_N // 256 warps, at least 1), a program per row of a
# few hundred bytes (ConvNeXt's channels_last LayerNorm2d, fp32 32x96x56x56: 66.2 us against
# torch.compile's 38.1 on the H200, 2026-12-02); the tile kernel takes BLOCK_P rows a program.
# Not measured yet (bench/experiments/probe_layernorm2d.py, its "-cl" cases). 128 under the
# interpreter: the traced ConvNeXt folders' 96 channels take the tile kernel there too.
CF_SHORT_N = 128 if INTERPRET else 512


@functools.lru_cache(maxsize=1024)
def _cf_plan(N, P, elem_size):
    """(BLOCK_N, BLOCK_P, num_warps) of the channels-first kernel for N channels at P positions
    of elem_size-byte inputs, or None when the channels do not fit one block (or the positions
    pass the kernel's 32-bit position arithmetic)."""
    block_n = triton.next_power_of_2(N)
    if block_n > CF_MAX_BLOCK_N or P + CF_MAX_P >= 2**31:
        return None
    min_p = 2 if INTERPRET else max(32 // elem_size, 1)
    block_p = min(max(CF_TILE // block_n, min_p), CF_MAX_P, max(triton.next_power_of_2(P), 2 if INTERPRET else 1))
    return block_n, block_p, min(max(block_n * block_p // 1024, 4), 16)


@triton.jit
def _add_layernorm_cf_fwd(X, R, W, B, S, Y, MEAN, RSTD, N, P, NPB,
                          sxb, sxp, sxn, srb, srp, srn, ssb, ssp, ssn, syb, syp, syn, eps,
                          HAS_W: tl.constexpr, HAS_B: tl.constexpr, STATS: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr):
    """The rows of x [batches, P, N] read in place whatever their layout: element (b, p, n)
    of X at b * sxb + p * sxp + n * sxn (a contiguous NCHW x seen channels-last: positions at
    stride 1, channels at stride P), likewise R, S and Y. Program i takes the BLOCK_P positions
    (i % NPB) * BLOCK_P... of batch i // NPB: a [BLOCK_N, BLOCK_P] tile of every channel, loaded
    along the positions (an NCHW input's unit stride), normalized over axis 0, the channels;
    mean and rstd stored per row, b * P + p."""
    pid = tl.program_id(0)
    b = (pid // NPB).to(tl.int64)
    # 32-bit position arithmetic (_cf_plan: P + BLOCK_P < 2**31), 64-bit offsets
    p = ((pid % NPB) * BLOCK_P + tl.arange(0, BLOCK_P)).to(tl.int64)
    c = tl.arange(0, BLOCK_N).to(tl.int64)  # 64-bit: c * stride passes 2**31 in large batches
    cm = c < N
    m = cm[:, None] & (p < P)[None, :]
    x = tl.load(X + b * sxb + c[:, None] * sxn + p[None, :] * sxp, mask=m, other=0.0).to(tl.float32)
    r = tl.load(R + b * srb + c[:, None] * srn + p[None, :] * srp, mask=m, other=0.0).to(tl.float32)
    s = _cast(x + r, S.dtype.element_ty)  # rounded to its type before the statistics, as eager
    sf = tl.where(m, s.to(tl.float32), 0.0)
    # the mean of the channels' differences from channel 0: a sum over the tile's channel axis
    # (partly sequential in a thread, wholly under the interpreter) keeps its precision where
    # the values sit far from 0 (a bias of 1024 on x ~ 1024 lost 1e-5 of y before)
    pm = p < P
    s0 = _cast(tl.load(X + b * sxb + p * sxp, mask=pm, other=0.0).to(tl.float32) +
               tl.load(R + b * srb + p * srp, mask=pm, other=0.0).to(tl.float32), S.dtype.element_ty).to(tl.float32)
    mean = s0 + tl.sum(tl.where(m, sf - s0[None, :], 0.0), axis=0) / N
    d = tl.where(m, sf - mean[None, :], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    y = d * rstd[None, :]
    if HAS_W:
        y = y * tl.load(W + c, mask=cm, other=0.0).to(tl.float32)[:, None]
    if HAS_B:
        y = y + tl.load(B + c, mask=cm, other=0.0).to(tl.float32)[:, None]
    # in place (s exactly x or the residual): a program stores only the positions it loaded,
    # after its loads, and no other program reads them
    tl.store(S + b * ssb + c[:, None] * ssn + p[None, :] * ssp, s, mask=m)
    tl.store(Y + b * syb + c[:, None] * syn + p[None, :] * syp, _cast(y, Y.dtype.element_ty), mask=m)
    if STATS:
        row = b * P + p
        tl.store(MEAN + row, mean, mask=pm)
        tl.store(RSTD + row, rstd, mask=pm)


@triton.jit
def _tile_rows(r, i, p, sb, sm, BATCHED: tl.constexpr, BLOCK_M: tl.constexpr):
    """The offsets of rows r + i (i: a tile's row arange, int64) of a gradient read in batches
    of p rows (row q at (q // p) * sb + (q % p) * sm, _row_batches). BATCHED: the tile lies in
    one batch (BLOCK_M divides p, and r is a multiple of BLOCK_M), so its batch is found once
    per tile in 32 bits (rows < 2**31) and its rows stay one run of stride sm starting at a
    multiple of BLOCK_M, which the compiler sees (a unit row stride, an NCHW gradient's, is
    read along the rows in 16-byte vectors); else every row in one batch, at r * sm."""
    if BATCHED:
        q = r.to(tl.int32)
        first = tl.multiple_of(q % p, BLOCK_M)
        return (q // p).to(tl.int64) * sb + (first.to(tl.int64) + i) * sm
    return (r + i) * sm


# --- fa:shared pipelined ---
# A backward's row loop: pipelined on the GPU (a tl.range loop with tiles in flight), a while
# loop over the same tiles under the interpreter (its range() takes no tensor bound).
PIPELINED = tl.constexpr(not INTERPRET)
# --- fa:end pipelined ---


# --- fa:shared normbwd ---
# The one-pass norm backwards' helpers (add_layernorm, rmsnorm_pyops, layernorm_linear): both
# row sums of d_input in one reduction, the warps for a tile, and the row loop's pipelining.
@triton.jit
def _add_pairs(a, b, c, d):
    return a + c, b + d


def _bwd_warps(tile, batched=False):
    """The one-pass backward's warps for a tile of this many elements: 16 elements per thread
    of each row array (32 for gradients read in batches), at least 4 and up to 16 warps. On
    the H200 (bench/experiments/probe_add_layernorm_bwd.py, 2026-12-02) 4 warps beat 8 at
    tiles of 2048 (19.1 vs 56.9 us at 4096x768), and at LayerNorm2d's batched fp32 tiles of
    4096 (86 vs 135 us, 159 with 16), though there an SM holds fewer warps; 8 beat 4 and 16
    at a row of 4096 (95.6 vs 100.5 and 134.5 us). The backward holds about twice the
    forward's arrays (dy, the row, its products with the weight, the weight, the partial
    sums): a row of 8192 with 8 warps would take some 7 x 32 = 224 registers a thread, near
    the 255 a thread can have, hence 16 there."""
    return min(max(tile // (1024 if batched else 512), 4), 16)


def _bwd_stages(block_m):
    """The tiles the one-pass backward's row loop keeps in flight for tiles of block_m rows:
    3 (the next tiles' loads issued while one is reduced) for rows of one or two a tile, 1 (no
    pipelining) for more. On the H200 (2026-12-02; bench/experiments/probe_bwd_pipeline.py and
    probe_add_layernorm_bwd.py) 3 took rmsnorm's backward at bf16 8192x4096 from 75.0 to 61.9
    us and add_layernorm's from 98.6 to 82.1, and LayerNorm2d's batched fp32 tiles of 32 rows
    of 96 from 87.8 to 176.3 us: those tiles' registers leave no room for a second one."""
    return 3 if block_m <= 2 else 1
# --- fa:end normbwd ---


# M, rows and the batches' row counts (M for a plain [rows, N] view) unspecialized: a new
# number of rows compiles nothing new (CUDA-graph capture)
@triton.jit(do_not_specialize=["M", "rows", "pdy", "pds"])
def _add_layernorm_bwd(DY, DS, S, W, MEAN, RSTD, DX, DR, PART, M, N, rows,
                       pdy, sdyb, sdym, sdyn, pds, sdsb, sdsm, sdsn, ssm, ssn,
                       HAS_DS: tl.constexpr, HAS_W: tl.constexpr, HAS_DR: tl.constexpr, HAS_DWB: tl.constexpr,
                       HAS_DRSUM: tl.constexpr, PARTS: tl.constexpr, DY_BATCHED: tl.constexpr,
                       DS_BATCHED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    """The backward of rows that fit one block, in one pass: program g takes rows
    [g * rows, (g + 1) * rows) (rows a multiple of BLOCK_M) BLOCK_M at a time, reads dy, ds (the
    sum's own gradient, HAS_DS) and s once, writes d_s = LayerNorm's d_input + ds into DX
    (x's type) and, when the residual has another type, DR (HAS_DR; both contiguous), and adds
    the weight's and bias' gradients over its rows into PART [G, PARTS, N] fp32 (HAS_DWB: row
    (g, 0) sum dy * xhat, (g, 1) sum dy), and with HAS_DRSUM (a residual that is one vector of
    the columns: its gradient is d_s summed over the rows; PARTS 3) row (g, 2) sum d_s, which
    _sum_parts adds up. dy's rows come in batches
    of pdy rows (_row_batches): row r at (r // pdy) * sdyb + (r % pdy) * sdym, a tile never
    across two batches (DY_BATCHED; else one batch); ds's likewise."""
    g = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N).to(tl.int64)  # 64-bit: cols * stride may pass 2**31
    cm = cols < N
    w = cols  # a dummy without weights, never read
    if HAS_W:
        w = tl.load(W + cols, mask=cm, other=0.0).to(tl.float32)
    dw = tl.full([BLOCK_N], 0, tl.float32)
    db = tl.full([BLOCK_N], 0, tl.float32)
    drs = tl.full([BLOCK_N], 0, tl.float32)
    r0 = g * rows
    end = tl.minimum(r0 + rows, M)
    if PIPELINED and STAGES > 1:
        # the next tiles' loads issued while this one is reduced (_bwd_stages)
        for t in tl.range(0, tl.cdiv(end - r0, BLOCK_M), num_stages=STAGES):
            dw, db, drs = _add_layernorm_bwd_tile(DY, DS, S, MEAN, RSTD, DX, DR, N, r0 + t * BLOCK_M, end, cols, cm, w,
                                                  dw, db, drs, pdy, sdyb, sdym, sdyn, pds, sdsb, sdsm, sdsn, ssm, ssn,
                                                  HAS_DS, HAS_W, HAS_DR, HAS_DWB, HAS_DRSUM, DY_BATCHED, DS_BATCHED,
                                                  BLOCK_M, BLOCK_N)
    else:  # the interpreter: the same tiles (its range() takes no tensor bound)
        r = r0
        while r < end:
            dw, db, drs = _add_layernorm_bwd_tile(DY, DS, S, MEAN, RSTD, DX, DR, N, r, end, cols, cm, w,
                                                  dw, db, drs, pdy, sdyb, sdym, sdyn, pds, sdsb, sdsm, sdsn, ssm, ssn,
                                                  HAS_DS, HAS_W, HAS_DR, HAS_DWB, HAS_DRSUM, DY_BATCHED, DS_BATCHED,
                                                  BLOCK_M, BLOCK_N)
            r += BLOCK_M
    if HAS_DWB:
        tl.store(PART + PARTS * g * N + cols, dw, mask=cm)
        tl.store(PART + (PARTS * g + 1) * N + cols, db, mask=cm)
    if HAS_DRSUM:
        tl.store(PART + (PARTS * g + 2) * N + cols, drs, mask=cm)


@triton.jit
def _add_layernorm_bwd_tile(DY, DS, S, MEAN, RSTD, DX, DR, N, r, end, cols, cm, w, dw, db, drs,
                            pdy, sdyb, sdym, sdyn, pds, sdsb, sdsm, sdsn, ssm, ssn,
                            HAS_DS: tl.constexpr, HAS_W: tl.constexpr, HAS_DR: tl.constexpr, HAS_DWB: tl.constexpr,
                            HAS_DRSUM: tl.constexpr, DY_BATCHED: tl.constexpr, DS_BATCHED: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """_add_layernorm_bwd's work on the tile of rows [r, r + BLOCK_M) (those below end): d_s
    written, the rows' weight and bias gradients added to dw and db and d_s to drs (a vector
    residual's gradient), returned."""
    i = tl.arange(0, BLOCK_M).to(tl.int64)
    rm = r + i
    rmask = rm < end
    if DY_BATCHED or DS_BATCHED:  # every tile whole: M is batches * P, BLOCK_M divides P
        m = tl.broadcast_to(cm[None, :], (BLOCK_M, BLOCK_N))  # (a row mask would stop vectors)
    else:
        m = rmask[:, None] & cm[None, :]
    dy_rows = _tile_rows(r, i, pdy, sdyb, sdym, DY_BATCHED, BLOCK_M)
    dy = tl.load(DY + dy_rows[:, None] + cols[None, :] * sdyn, mask=m, other=0.0).to(tl.float32)
    s = tl.load(S + rm[:, None] * ssm + cols[None, :] * ssn, mask=m, other=0.0).to(tl.float32)
    mean = tl.load(MEAN + rm, mask=rmask, other=0.0)
    rstd = tl.load(RSTD + rm, mask=rmask, other=0.0)
    xhat = tl.where(m, (s - mean[:, None]) * rstd[:, None], 0.0)
    wdy = dy
    if HAS_W:
        wdy = dy * w[None, :]
    # d_input = rstd * (wdy - xhat * mean(xhat * wdy) - mean(wdy)), fp32 as ATen's; both
    # row sums in one reduction (one exchange between the warps of a row, not two)
    c1, c2 = tl.reduce((xhat * wdy, wdy), 1, _add_pairs)
    c1 = c1 / N
    c2 = c2 / N
    d = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
    if HAS_DS:
        ds_rows = _tile_rows(r, i, pds, sdsb, sdsm, DS_BATCHED, BLOCK_M)
        d += tl.load(DS + ds_rows[:, None] + cols[None, :] * sdsn, mask=m, other=0.0).to(tl.float32)
    off = rm[:, None] * N + cols[None, :]
    tl.store(DX + off, _cast(d, DX.dtype.element_ty), mask=m)
    if HAS_DR:
        tl.store(DR + off, _cast(d, DR.dtype.element_ty), mask=m)
    if HAS_DWB:
        dw += tl.sum(dy * xhat, axis=0)
        db += tl.sum(dy, axis=0)
    if HAS_DRSUM:  # d is 0 in rows past the end (rstd loads 0); columns past N are never stored
        drs += tl.sum(d, axis=0)
    return dw, db, drs


# --- fa:shared sumparts ---
# Weight and bias gradients from per-program partial sums: a backward's programs each add up
# their rows into one fp32 row per gradient, PART [G, K, N] ([G, N] for K = 1), and
# _sum_parts adds up each gradient's G rows and writes it in the gradient's type: one launch
# where part.sum(0) and a cast took two or three (4.2 vs 11.1 us for 512 x 2 x 768, L2-warm,
# on the H200: bench/experiments/probe_add_layernorm_bwd.py). Eight columns a program (one
# 32-byte sector of each row, N / 8 programs): faster than 16, 32 and 64 at every G and N
# of bench/experiments/probe_sum_parts.py on the H200 (2026-12-03; G = 1024, N = 512: 9.9 us
# against 21.0 with 32, G = 512: 7.2 against 12.5)
SUM_BLOCK_G = 128
SUM_BLOCK_N = 16 if INTERPRET else 8


# G (the number of groups) unspecialized: it follows the rows, which vary from call to call
@triton.jit(do_not_specialize=["G"])
def _sum_parts(PART, OUT0, OUT1, G, N, SG, SK, K0, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program (j, i) adds up gradient K0 + i of PART [G, K, N] (fp32; group and gradient
    strides SG and SK, columns contiguous) over the G groups, BLOCK_G at a time, for columns
    [j * BLOCK_N, (j + 1) * BLOCK_N), into OUT0 (i = 0) or OUT1 (i = 1) in its type."""
    i = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cm = cols < N
    gs = tl.arange(0, BLOCK_G)
    acc = tl.full([BLOCK_G, BLOCK_N], 0, tl.float32)
    g = 0
    while g < G:
        grp = g + gs
        acc += tl.load(PART + (grp * SG + (K0 + i) * SK)[:, None] + cols[None, :],
                       mask=(grp < G)[:, None] & cm[None, :], other=0.0)
        g += BLOCK_G
    total = tl.sum(acc, axis=0)
    if i == 0:
        tl.store(OUT0 + cols, _cast(total, OUT0.dtype.element_ty), mask=cm)
    else:
        tl.store(OUT1 + cols, _cast(total, OUT1.dtype.element_ty), mask=cm)


def _part_sums(part, outs, k0=0):
    """outs[i] = part[:, k0 + i].sum(0) written in outs[i]'s type, for one or two contiguous
    1-D outs of N: part is fp32 [G, K, N] (or [G, N]), its last dim contiguous (a backward
    whose partial sums lie gradient by gradient passes a transposed view). One launch of
    _sum_parts."""
    G, N = part.shape[0], part.shape[-1]
    if part.stride(-1) != 1:
        raise ValueError("_part_sums: part's last dim must be contiguous")
    if G * N == 0:
        for o in outs:
            o.zero_()
        return
    block_g = SUM_BLOCK_G
    if INTERPRET:  # the group loop runs in Python: two blocks of groups whatever G is (and a
        block_g = max(2, 1 << (-(-G // 2) - 1).bit_length())  # skipped block still shows)
    _launch(_sum_parts, (-(-N // SUM_BLOCK_N), len(outs)),
            (part, outs[0], outs[-1], G, N, part.stride(0), part.stride(1) if part.dim() == 3 else 0, k0),
            num_warps=4, BLOCK_G=block_g, BLOCK_N=SUM_BLOCK_N)
# --- fa:end sumparts ---


# The backward's row groups (_add_layernorm_bwd): about BWD_GROUPS programs of at least
# BWD_MIN_ROWS rows each, so that the weight and bias gradients' partial sums are a few hundred
# fp32 rows whatever M is; each program's tile is BLOCK_M rows of BLOCK_N, about BWD_TILE
# elements, twice that for gradients read in batches (short rows go several at a time:
# LayerNorm2d's 96 channels 32 rows at a time). Measured on the H200 (probe_add_layernorm_bwd.py,
# 2026-12-02): tiles of 2048 at 4 warps took BERT's 4096x768 backward from 36.8 to 19.1 us
# (4096 at 8 warps before), LayerNorm2d's 32x96x56x56 fp32 4096 at 4 warps from 159 to 86 us.
BWD_GROUPS = 8 if INTERPRET else 512
BWD_MIN_ROWS = 1 if INTERPRET else 4
BWD_TILE = 256 if INTERPRET else 2048



# --- fa:shared rowstrides ---
def _row_strides(t, out=False):
    """(t, row stride, column stride) for t seen as [rows, N] over its last dim: the strides
    of the view ``t.view(-1, N)`` computed without making it (a view costs about a
    microsecond of host time per call). When no such view exists: a contiguous copy of t and
    its strides, or for an output (``out=True``) a ValueError."""
    shape, strides = t.shape, t.stride()
    if len(shape) == 2:
        return t, strides[0], strides[1]
    row, span = 0, None  # the innermost leading dim's stride; the stride the next one must have
    for n, s in zip(shape[-2::-1], strides[-2::-1]):
        if n == 1:
            continue
        if span is None:
            row = s
        elif s != span:
            break
        span = s * n
    else:
        return t, row, strides[-1] if shape else 1
    if out:
        raise ValueError("output must be viewable as [rows, N]")
    t = t.reshape(-1, shape[-1])
    return t, t.stride(0), t.stride(1)
# --- fa:end rowstrides ---


# --- fa:shared alias ---
def _span(t):
    """[lo, hi): the bytes t's elements occupy (lo == hi for an empty tensor)."""
    es = t.element_size()
    lo = hi = t.data_ptr()
    for n, s in zip(t.shape, t.stride()):
        if n == 0:
            return lo, lo
        if s >= 0:
            hi += (n - 1) * s * es
        else:
            lo += (n - 1) * s * es
    return lo, hi + es


def _check_alias(fn, outs, ins, in_place=()):
    """Refuses an output that shares memory with an input or with another output, unless it
    is exactly an input named in ``in_place`` (same address, shape, strides and dtype): the
    kernels that allow that read each element (or row) before they write it, in one program.
    ``outs`` and ``ins`` are (name, tensor) pairs; None tensors are skipped."""
    seen = [(n, t, _span(t)) for n, t in ins if t is not None]
    for name, o in outs:
        if o is None:
            continue
        lo, hi = _span(o)
        for n, t, (a, b) in seen:
            if a < hi and lo < b and t.device == o.device:
                exact = (n in in_place and t.data_ptr() == o.data_ptr() and t.shape == o.shape
                         and t.stride() == o.stride() and t.dtype == o.dtype)
                if not exact:
                    raise ValueError(f"{fn}: output {name} shares memory with {n}"
                                     + (" (in place it must be exactly that tensor)" if n in in_place else "")
                                     + "; pass a separate output tensor")
        seen.append((name, o, (lo, hi)))
# --- fa:end alias ---


# --- fa:shared overlap ---
def _check_dense(fn, outs):
    """Refuses an output some of whose elements share memory (an expanded view: stride 0 on a
    dim of size > 1): several programs would write one element, and written in place over an
    input, a program would overwrite what another still reads. ``outs`` are (name, tensor)
    pairs; None tensors are skipped."""
    for name, o in outs:
        if o is not None and torch._debug_has_internal_overlap(o) == 1:
            raise ValueError(f"{fn}: output {name} has elements that share memory (an expanded view); "
                             "pass a tensor whose elements are distinct")
# --- fa:end overlap ---


# --- fa:shared launch ---
# The launch path. A kernel's compiled form is cached per specialization and its launcher
# called directly: on the H200 (bench/experiments/probe_launch.py, host time per call)
# kernel[grid](...) took 12-19 us, CompiledKernel[grid] 7.4-12, a kernel behind
# @triton.autotune 17-29 us, an ATen add 6-10. Tiles come from each template's heuristics
# (no autotuner: it would re-tune every new shape, run configs on the caller's buffers and
# break CUDA-graph capture at an unseen shape).
_COMPILED = {}

try:  # Triton's launch hooks (a profiler such as proton sets them); direct launches skip them
    from triton import knobs as _knobs
    _HOOKS = (_knobs.runtime.launch_enter_hook, _knobs.runtime.launch_exit_hook)
    _HOOKS[0].calls, _HOOKS[1].calls  # noqa: B018 -- this Triton's hook chains, or the fallback
except Exception:  # noqa: BLE001 -- another Triton: always launch through CompiledKernel[grid]
    _HOOKS = None
# The CUDA launcher's inner C function is called directly on the Triton whose launcher this
# code was written against (3.6: CudaLauncher.__call__ adds the cooperative-grid and PDL
# flags and scratch buffers, none when their sizes are 0); on another, the launcher object.
_TRITON_3_6 = triton.__version__.split(".")[:2] == ["3", "6"]


def _compiled(ck, kernel):
    """The _COMPILED entry of kernel's compiled form ck: (launch, head, ck, kernel), launched
    as launch(grid_x, grid_y, grid_z, stream, *head, *args). launch is the C launch function
    where that is safe (Triton 3.6, no scratch buffers), else ck's launcher; ck itself is
    for launches that must go through ck[grid] (a launch hook is set, or this Triton's hooks
    are unknown); the entry keeps kernel alive: entries are keyed on id(kernel), and the id
    of a kernel object that was freed (a wrapper a test made) could be given to a new one."""
    ck._init_handles()
    run = ck.run
    tail = (ck.packed_metadata, None, None, None)  # metadata, launch metadata, enter/exit hooks
    if (_TRITON_3_6 and type(run).__name__ == "CudaLauncher" and not run.global_scratch_size
            and not run.profile_scratch_size):
        return (run.launch, (ck.function, run.launch_cooperative_grid, run.launch_pdl, None, None)
                + tail, ck, kernel)
    return (run, (ck.function,) + tail, ck, kernel)


def _run(entry, grid, args, device):
    """Launch a _compiled entry on grid (3 ints) on the current CUDA stream of device (the
    current device), as CompiledKernel[grid](*args) does without its per-call closure, device
    and stream lookups through Triton's driver, launch-metadata dict and launcher wrapper
    (~4 us of host time). While a launch hook is set, through CompiledKernel[grid] so the
    hook sees it."""
    launch, head, ck, _ = entry
    if _HOOKS is None or _HOOKS[0].calls or _HOOKS[1].calls:
        ck[grid](*args)
        return
    launch(grid[0], grid[1], grid[2], torch._C._cuda_getCurrentRawStream(device), *head, *args)


def _spec_key(args):
    """What Triton specializes launch arguments on, as a cache key: a tensor's dtype and 16-byte
    alignment; an int's being 1, divisible by 16, and its width (codes 10-14, never equal to a
    bool's key); a float nothing; anything else (flags, None) its value. The device is the
    current one (Triton launches there), keyed once per launch. One loop without a call per
    argument: this runs on every launch."""
    key = []
    add = key.append
    for a in args:
        t = type(a)
        if t is int:
            if a == 1:
                add(14)
            else:
                add(10 + (a % 16 == 0) + 2 * (a > 0x7FFFFFFF or a < -0x80000000))
        elif t is float:
            add(0.5)
        elif t is torch.Tensor or isinstance(a, torch.Tensor):
            add((a.dtype, a.data_ptr() % 16 == 0))
        else:
            add(a)
    return tuple(key)


def _spec(a):
    """_spec_key of one argument."""
    return _spec_key((a,))[0]


def _launch(kernel, grid, args, num_warps=4, num_stages=1, fp_fusion=True, **constexprs):
    """``kernel[grid](*args, **constexprs)``; args a tuple, the constexprs the kernel's last
    parameters, passed in its order; fp_fusion=False compiles it without contracting a product
    and a sum into one rounding (Triton's enable_fp_fusion), so that each step is rounded as
    eager's kernels round it. After the first call of a specialization its compiled
    kernel is launched directly. Under the interpreter: the plain call. Under torch.compile:
    launched outside the graph, as without it (Dynamo would trace ``kernel[grid](...)`` into
    its graph and give None for the compiled kernel cached below, and cannot trace the rest).
    Returns the _COMPILED entry it launched through (None under the interpreter or torch.compile)."""
    if torch.compiler.is_compiling():
        torch.compiler.disable(_launch)(kernel, grid, args, num_warps, num_stages, fp_fusion, **constexprs)
        return None
    grid = tuple(grid) + (1,) * (3 - len(grid))
    options = {} if fp_fusion else {"enable_fp_fusion": False}
    if INTERPRET:
        names = kernel.arg_names[len(args):]
        if list(constexprs) != names:
            raise TypeError(f"_launch: constexprs {list(constexprs)}, want {names}")
        kernel[grid](*args, num_warps=num_warps, num_stages=num_stages, **options, **constexprs)
        return None
    consts = tuple(constexprs.values())
    device = torch._C._cuda_getDevice()
    # id(kernel): hashing a JITFunction costs ~2 us of host time per call
    key = (id(kernel), num_warps, num_stages, fp_fusion, consts, device, _spec_key(args))
    entry = _COMPILED.get(key)
    if entry is not None:
        _run(entry, grid, args + consts, device)
        return entry
    names = kernel.arg_names[len(args):]
    if list(constexprs) != names:
        raise TypeError(f"_launch: constexprs {list(constexprs)}, want {names}")
    entry = _COMPILED[key] = _compiled(
        kernel[grid](*args, num_warps=num_warps, num_stages=num_stages, **options, **constexprs), kernel)
    return entry


class _Planned:
    """A launch planned once for a wrapper's call key (kept in its plan): the kernel, grid, the
    arguments after the tensors (``ints``: ints, floats, flags) and the constexprs fixed;
    ``launch(tensors)`` launches it with a call's tensors (a tuple), as ``_launch(kernel, grid,
    tensors + ints, ...)`` would, the compiled kernel looked up in the plan itself by the
    device and the tensors' specialization alone: the constant arguments are the plan's, never
    keyed per call (_launch's key of a GEMM head's 19 arguments took 3.6 us of host time a call
    on a CPU core, its 6 tensors' 2.0). A miss goes through _launch, which gives its entry."""

    __slots__ = ("kernel", "grid", "ints", "num_warps", "num_stages", "fp_fusion", "constexprs", "tail", "entries")

    def __init__(self, kernel, grid, ints, num_warps=4, num_stages=1, fp_fusion=True, **constexprs):
        self.kernel, self.num_warps, self.num_stages, self.constexprs = kernel, num_warps, num_stages, constexprs
        self.fp_fusion = fp_fusion
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.ints = tuple(ints)
        self.tail = self.ints + tuple(constexprs.values())  # what follows the tensors in a launch
        self.entries = {}  # (device, the tensors' _spec_key) -> the _COMPILED entry

    def launch(self, tensors):
        if INTERPRET or torch.compiler.is_compiling():
            _launch(self.kernel, self.grid, tensors + self.ints, self.num_warps, self.num_stages,
                    self.fp_fusion, **self.constexprs)
            return
        device = torch._C._cuda_getDevice()
        spec = _spec_key(tensors)
        entry = self.entries.get((device, spec))
        if entry is None:  # _launch compiles (or finds) it, launches and gives its entry
            self.entries[device, spec] = _launch(self.kernel, self.grid, tensors + self.ints, self.num_warps,
                                                 self.num_stages, self.fp_fusion, **self.constexprs)
            return
        _run(entry, self.grid, tensors + self.tail, device)


def _their_device(args, kwargs):
    """The CUDA device index of a call's arguments (-1: none): the first tensor's (also the
    first inside a tuple or list argument), else a CUDA device argument's."""
    for a in (*args, *kwargs.values()):
        if type(a) in (tuple, list):
            a = next((t for t in a if isinstance(t, torch.Tensor)), None)
        if isinstance(a, torch.Tensor):
            return a.get_device()
        if isinstance(a, (torch.device, str)) and str(a).startswith("cuda"):
            d = torch.device(a).index
            return -1 if d is None else d
    return -1


def _on_their_device(fn):
    """fn, called with the CUDA device of its arguments current (_their_device). Kernels launch,
    and the GEMM tiles are timed, on the current device and its stream, as Triton launches; a
    model split over GPUs (Hugging Face's device_map="auto") calls a layer on cuda:1 while
    cuda:0 is current, where a launch would run another device's code on memory it does not
    own. Where the devices agree, on the CPU, or under torch.compile (which places the kernels
    itself), the call as it is: a first tensor argument's device looked up, and on a GPU the
    current one."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        a = args[0] if args else None
        if type(a) is tuple or type(a) is list:  # fused_backward's inputs
            a = a[0] if a else None
        d = a.get_device() if type(a) is torch.Tensor else _their_device(args, kwargs)
        if d < 0 or torch.compiler.is_compiling() or d == torch._C._cuda_getDevice():
            return fn(*args, **kwargs)
        with torch.cuda.device(d):
            return fn(*args, **kwargs)

    return call
# --- fa:end launch ---


_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _residual_rows(x, residual):
    """How many rows the residual has when it is x's shape or broadcasts along x's leading
    dims only (position embeddings [1, S, H] added to [B, S, H]): its rows then repeat every
    that many rows of x. None when it broadcasts otherwise."""
    if residual.shape == x.shape:
        return x.numel() // x.shape[-1] if x.shape[-1] else 0
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
    """The residual's row count (see _residual_rows), after checking the arguments."""
    if x.dtype not in _FLOATS or residual.dtype not in _FLOATS:
        raise TypeError(f"add_layernorm: unsupported dtype {x.dtype} / {residual.dtype}")
    rr = _residual_rows(x, residual) if x.dim() else None
    if rr is None:
        raise ValueError(f"add_layernorm: residual {tuple(residual.shape)} does not match x {tuple(x.shape)} "
                         "(x's shape, or its trailing dims with leading 1s)")
    n = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dim() != 1 or t.shape[0] != n):
            raise ValueError(f"add_layernorm: {name} {tuple(t.shape)} does not match x {tuple(x.shape)}")
    dev = x.device
    for t in (residual, weight, bias):
        if t is not None and t.device != dev:
            raise ValueError("add_layernorm: the inputs are on different devices")
    if n and x.numel() // n >= 2**31:
        raise ValueError(f"add_layernorm: {x.numel() // n} rows (one program each: at most 2**31 - 1)")
    return rr


def _vector_residual(x, residual):
    """Whether the residual is one vector of x's columns broadcast over every other dim (a
    convolution's bias [1, C, 1, 1] on a channels-first x, seen with C moved last)."""
    return residual.shape != x.shape and residual.numel() == x.shape[-1] and residual.shape[-1] == x.shape[-1]


def _batch_layout(x, residual):
    """(B, P, x's and the residual's (batch, position, column) strides) when x and a residual of
    its shape, or a vector of its columns (_vector_residual: strides 0, 0 and its own), are
    read by _add_layernorm_cf_fwd as B batches of P positions (rows) rather than by rows: x of
    3 or more dims, and either x or the residual with its columns not at unit stride (a
    contiguous NCHW tensor with C moved last: positions at stride 1, C at stride H * W; the row
    kernel would copy it when it has no [rows, N] view, and read each row's elements a memory
    sector apart when it has one, as an NCHW tensor of one batch has), or rows of at most
    CF_SHORT_N (channels_last: the row kernel would run one warp a row). Both with a [rows, N]
    view: one batch of every row; else each with its dims between the first and the last one
    evenly strided run. None otherwise."""
    vector = _vector_residual(x, residual)
    if x.dim() < 3 or residual.shape != x.shape and not vector:
        return None
    n = x.shape[-1]
    tensors = (x,) if vector else (x, residual)
    tail = [0, 0, residual.stride(-1)] if vector else []  # the vector's strides: the same columns everywhere
    if x.stride(-1) == 1 and residual.stride(-1) == 1:
        if n > CF_SHORT_N:
            return None
        if all(t.is_contiguous() for t in tensors):
            return 1, x.numel() // n, [0, n, 1] * len(tensors) + tail
    rows = [_one_stride(t.shape[:-1], t.stride()[:-1]) for t in tensors]
    if None not in rows:
        strides = []
        for t, row in zip(tensors, rows):
            strides += [0, row, t.stride(-1)]
        return 1, x.numel() // n, strides + tail
    strides = []
    for t in tensors:
        sp = _one_stride(t.shape[1:-1], t.stride()[1:-1])
        if sp is None:
            return None
        strides += [t.stride(0), sp, t.stride(-1)]
    return x.shape[0], x.numel() // (x.shape[0] * n), strides + tail


def _channels_last_view(t, dim):
    """t with dim moved last (a view), or None for None."""
    return None if t is None else t.movedim(dim, -1)


def _norm_dim(x, residual, dim):
    """dim as -1 (the last) or 1 (channels-first), after checking it fits x and the residual."""
    if dim in (-1, x.dim() - 1):
        return -1
    if dim != 1 or x.dim() < 3:
        raise ValueError(f"add_layernorm: dim={dim} (want -1, or 1 for a channels-first [B, C, ...] x of 3 or more dims)")
    if residual.dim() != x.dim():
        raise ValueError(f"add_layernorm: a channels-first residual {tuple(residual.shape)} must have x's dims {tuple(x.shape)}")
    return 1


@_on_their_device
def add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5, out=None, block_n=None, stats=False, dim=-1,
                   y_dtype=None):
    """Returns (s, y): s = x + residual, y = layer_norm(s, (N,), weight, bias, eps).

    ``dim`` is the normalized dim: -1 (the last, N = x.shape[-1]) or 1 (channels-first, N =
    x.shape[1]: timm's LayerNorm2d; s and y are channels_last, mean and rstd per position in
    [B, ...] order). ``out`` = (s, y) buffers to write into; s may be x itself, or the residual
    when it has x's shape (in place); with dim=1 they must be channels_last (their C moved last
    must be a [rows, C] view; an NCHW x or residual is read in place, not copied, up to 1024
    channels). ``stats=True`` also returns fp32 (mean, rstd) per row; ``y_dtype`` is y's
    type (default: the sum's; fp32 as CUDA autocast's layer_norm returns it: AddLayerNorm);
    ``block_n`` forces the chunk size (tests use it for rows longer than a block)."""
    if _norm_dim(x, residual, dim) == 1:
        got = add_layer_norm(x.movedim(1, -1), residual.movedim(1, -1), weight, bias, eps,
                             out=None if out is None else tuple(_channels_last_view(t, 1) for t in out),
                             block_n=block_n, stats=stats, y_dtype=y_dtype)
        return (got[0].movedim(-1, 1), got[1].movedim(-1, 1)) + tuple(got[2:])
    rr = _check(x, residual, weight, bias)
    # the kernels index vectors (bias, norm weights) as contiguous: a strided view is copied (tiny)
    if weight is not None and weight.stride(0) != 1:
        weight = weight.contiguous()
    if bias is not None and bias.stride(0) != 1:
        bias = bias.contiguous()
    dtype = x.dtype if residual.dtype == x.dtype else torch.promote_types(x.dtype, residual.dtype)
    fresh = out is None
    if fresh:
        # empty_like: a third of torch.empty(shape, ...)'s host time; contiguous like it
        s = torch.empty_like(x, dtype=dtype, memory_format=torch.contiguous_format)
        y = torch.empty_like(x, dtype=y_dtype or dtype, memory_format=torch.contiguous_format)
    else:
        s, y = out
        for t, want in ((s, dtype), (y, y_dtype or dtype)):
            if t.shape != x.shape or t.dtype != want or t.device != x.device:
                raise ValueError("add_layernorm: out has the wrong shape, dtype or device")
        ins = [("x", x), ("residual", residual), ("weight", weight), ("bias", bias)]
        _check_alias("add_layernorm", [("s", s)], ins, in_place=("x", "residual"))
        _check_alias("add_layernorm", [("y", y)], ins + [("s", s)])
        _check_dense("add_layernorm", [("s", s), ("y", y)])
    N = x.shape[-1]
    M = x.numel() // N if N else 0
    mean = rstd = s  # dummies, never written without stats
    if stats:
        mean = torch.empty(M, dtype=torch.float32, device=x.device)
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    batched = None if block_n or not (M and N) else _batch_layout(x, residual)
    plan = batched and _cf_plan(N, batched[1], min(x.element_size(), residual.element_size()))
    if plan:
        # x or the residual has no [rows, N] view (a contiguous NCHW tensor with C moved last):
        # read in place in tiles of positions, not copied first
        _channels_first_forward(x, residual, weight, bias, eps, s, y, mean, rstd, stats, fresh, batched, plan)
    elif M and N:
        # [rows, N] strides, no views made (a copy of an input that has no such view); a
        # contiguous tensor's are (N, 1) (the residual's row stride is never used when it
        # has one row, nor x's when it has one), found without _row_strides' loop
        if x.is_contiguous():
            sxm, sxn = N, 1
        else:
            x, sxm, sxn = _row_strides(x)
        if residual.is_contiguous():
            srm, srn = N, 1
        else:
            residual, srm, srn = _row_strides(residual)
        if fresh:
            s2, ssm, ssn, y2, sym, syn = s, N, 1, y, N, 1
        else:
            s2, ssm, ssn = _row_strides(s, out=True)
            y2, sym, syn = _row_strides(y, out=True)
        block, warps = _plan(N, MAX_BLOCK_N)
        if block_n:
            block = block_n
        _launch(_add_layernorm_fwd, (M,),
                (x, residual, x if weight is None else weight, x if bias is None else bias,  # x: dummies, never read
                 s2, y2, mean, rstd, N, rr, sxm, sxn, srm, srn, ssm, ssn, sym, syn, float(eps)),
                num_warps=warps, HAS_W=weight is not None, HAS_B=bias is not None, SINGLE=N <= block,
                STATS=stats, BLOCK_N=block)
    return (s, y, mean, rstd) if stats else (s, y)


def _channels_first_forward(x, residual, weight, bias, eps, s, y, mean, rstd, stats, fresh, batched, plan):
    """add_layer_norm's launch of _add_layernorm_cf_fwd: x and the residual read as B batches of
    P positions (batched: _batch_layout), s and y written as [rows, N] views (fresh:
    contiguous), in tiles of plan (_cf_plan)."""
    N = x.shape[-1]
    B, P, (sxb, sxp, sxn, srb, srp, srn) = batched
    block, block_p, warps = plan
    outs = []
    for t in (s, y):  # row r = b * P + p of a [rows, N] view: batch stride P * row stride
        t, sm, sn = (t, N, 1) if fresh else _row_strides(t, out=True)
        outs += [P * sm, sm, sn]
    npb = -(-P // block_p)
    _launch(_add_layernorm_cf_fwd, (B * npb,),
            (x, residual, x if weight is None else weight, x if bias is None else bias,  # x: dummies, never read
             s, y, mean, rstd, N, P, npb, sxb, sxp, sxn, srb, srp, srn, *outs, float(eps)),
            num_warps=warps, HAS_W=weight is not None, HAS_B=bias is not None, STATS=stats,
            BLOCK_N=block, BLOCK_P=block_p)


class AddLayerNormFunction(torch.autograd.Function):
    """Autograd for add_layer_norm: one Triton pass for d_x, d_residual (or, for a residual that
    is one vector of the columns, its per-program partial sums) and the weight's and bias'
    per-program partial sums with the saved mean/rstd, then their sum (rows longer than a
    block, or a residual broadcast otherwise, position embeddings: ATen
    native_layer_norm_backward)."""

    @staticmethod
    def forward(ctx, x, residual, weight, bias, eps, y_dtype=None):
        s, y, mean, rstd = add_layer_norm(x, residual, weight, bias, eps, stats=True, y_dtype=y_dtype)
        ctx.save_for_backward(s, weight, bias, mean, rstd)
        ctx.dtypes = (x.dtype, residual.dtype)
        ctx.rshape = residual.shape
        return s, y

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, ds, dy):
        s, weight, bias, mean, rstd = ctx.saved_tensors
        n = s.shape[-1]
        vector = ctx.rshape != s.shape and math.prod(ctx.rshape) == n and ctx.rshape[-1] == n
        if n and s.numel() and n <= _plan(n, MAX_BLOCK_N)[0] and (ctx.rshape == s.shape or vector):
            return _fused_backward(ctx, ds, dy, s, weight, bias, mean, rstd, vector)
        # rows longer than a block, or a broadcast residual: ATen's LayerNorm backward (which
        # reads dy and s again for the weight's and bias' gradients), then the sum's gradient
        # added and cast to x's and the residual's types
        # CUDA's native_layer_norm keeps fp32 stats; the CPU kernels want the input dtype
        sd = torch.float32 if s.is_cuda else s.dtype
        shp = s.shape[:-1] + (1,)
        mask = [True, weight is not None and ctx.needs_input_grad[2], bias is not None and ctx.needs_input_grad[3]]
        if dy is None:
            dy = torch.zeros_like(s)
        w, b = weight, bias
        if dy.dtype != s.dtype or not s.is_cuda and any(t is not None and t.dtype != s.dtype for t in (weight, bias)):
            # mixed types ATen's kernel does not take (y in fp32 over a 16-bit sum: autocast's
            # layer_norm; on the CPU, fp32 parameters over 16-bit activations): in fp32, the
            # parameters' gradients cast back
            dy, s, sd = dy.float(), s.float(), torch.float32
            w = None if weight is None else weight.float()
            b = None if bias is None else bias.float()
        dsn, dw, db = torch.ops.aten.native_layer_norm_backward(
            dy.contiguous(), s, [n], mean.view(shp).to(sd), rstd.view(shp).to(sd), w, b, mask)
        dw = dw if dw is None or weight is None else dw.to(weight.dtype)
        db = db if db is None or bias is None else db.to(bias.dtype)
        total = dsn if ds is None else dsn + ds
        dr = total
        if ctx.rshape != total.shape:  # a broadcast residual: its gradient sums the repeats
            dr = total.float().sum_to_size(ctx.rshape)
        return total.to(ctx.dtypes[0]), dr.to(ctx.dtypes[1]), dw, db, None, None


def _one_stride(shape, strides):
    """The stride of dims (shape, strides) seen as one dim (0 when all have size 1), or None
    when they are not one evenly strided run."""
    row, span = 0, None
    for n, st in zip(reversed(shape), reversed(strides)):
        if n == 1:
            continue
        if span is None:
            row = st
        elif st != span:
            return None
        span = st * n
    return row


def _row_batches(t):
    """(t, P, batch stride, row stride, column stride): the rows of t (every dim but the last)
    read in batches of P rows, row r at (r // P) * batch stride + (r % P) * row stride, with no
    copy where t has that form: a [rows, N] view (one batch of every row), or a channels-first
    gradient's [B, H, W, C] view of a contiguous NCHW tensor (B batches of H * W rows, at
    stride 1, C at stride H * W: _row_strides would copy it). Otherwise a contiguous copy."""
    shape, strides = t.shape, t.stride()
    M = t.numel() // shape[-1]
    row = _one_stride(shape[:-1], strides[:-1])
    if row is not None:
        return t, max(M, 1), 0, row, strides[-1]
    row = _one_stride(shape[1:-1], strides[1:-1])
    if row is not None:
        return t, max(M // shape[0], 1), strides[0], row, strides[-1]
    t = t.reshape(-1, shape[-1])
    return t, max(M, 1), 0, t.stride(0), t.stride(1)


def _tile_rows_for(bm, batches):
    """BLOCK_M for tiles of bm rows read from gradients in batches of P rows (each a
    (P, batched) pair): bm, or for a batched gradient the largest power of two up to bm that
    divides P, so that no tile crosses a batch (_tile_rows)."""
    for p, batched in batches:
        if batched:
            bm = min(bm, p & -p)
    return bm


def _fused_backward(ctx, ds, dy, s, weight, bias, mean, rstd, vector=False):
    """AddLayerNormFunction's backward in _add_layernorm_bwd's one pass (rows that fit one
    block, a residual of x's shape or, with vector, one vector of the columns), then _sum_parts
    for the weight's and bias' gradients (and the vector residual's): (d_x, d_residual,
    d_weight, d_bias, None)."""
    xd, rd = ctx.dtypes
    n = s.shape[-1]
    M = s.numel() // n
    if dy is None:
        dy = torch.zeros_like(s)
    dx = torch.empty(s.shape, dtype=xd, device=s.device)
    need_w = weight is not None and ctx.needs_input_grad[2]
    need_b = bias is not None and ctx.needs_input_grad[3]
    need_r = vector and ctx.needs_input_grad[1]  # the vector's gradient: d_s summed over the rows
    dr = dx if rd == xd or vector else torch.empty(s.shape, dtype=rd, device=s.device)
    w = weight if weight is None or weight.stride(0) == 1 else weight.contiguous()  # read as contiguous
    has_ds = ds is not None
    dy = _row_batches(dy)
    ds = _row_batches(ds) if has_ds else (dy[0], M, 0, 0, 0)  # dy: a dummy, never read
    dy_batched, ds_batched = dy[1] < M, ds[1] < M
    s2, ssm, ssn = _row_strides(s)
    block, _ = _plan(n, MAX_BLOCK_N)
    tile = BWD_TILE * (2 if dy_batched or ds_batched else 1)
    bm = _tile_rows_for(max(1, tile // block), ((dy[1], dy_batched), (ds[1], ds_batched)))
    rows = max(BWD_MIN_ROWS, -(-M // BWD_GROUPS))
    rows = -(-rows // bm) * bm  # whole tiles per program
    groups = -(-M // rows)
    k = 3 if need_r else 2
    part = torch.empty((groups, k, n), dtype=torch.float32, device=s.device) if need_w or need_b or need_r else mean
    _launch(_add_layernorm_bwd, (groups,),
            (dy[0], ds[0], s2, s2 if w is None else w, mean, rstd, dx, dr, part, M, n, rows,  # s2: a dummy
             *dy[1:], *ds[1:], ssm, ssn),
            num_warps=_bwd_warps(bm * block, dy_batched or ds_batched), HAS_DS=has_ds, HAS_W=weight is not None,
            HAS_DR=dr is not dx, HAS_DWB=need_w or need_b, HAS_DRSUM=need_r, PARTS=k, DY_BATCHED=dy_batched,
            DS_BATCHED=ds_batched, BLOCK_M=bm, BLOCK_N=block, STAGES=_bwd_stages(bm))
    dw = torch.empty(n, dtype=weight.dtype, device=s.device) if need_w else None
    db = torch.empty(n, dtype=bias.dtype, device=s.device) if need_b else None
    if need_w or need_b:  # part [groups, k, n]: row 0 the weight's sums, row 1 the bias'
        _part_sums(part, [g for g in (dw, db) if g is not None], 0 if need_w else 1)
    if vector:  # row 2 the vector residual's
        dr = None
        if need_r:
            dr = torch.empty(n, dtype=rd, device=s.device)
            _part_sums(part, [dr], 2)
            dr = dr.view(ctx.rshape)
    return dx, dr, dw, db, None, None


@_on_their_device
def add_layer_norm_train(x, residual, weight=None, bias=None, eps=1e-5, dim=-1, y_dtype=None):
    """(s, y) through AddLayerNormFunction (autograd); dim and y_dtype as in add_layer_norm:
    with dim=1 the function runs on the views with C moved last, and autograd moves the
    gradients back."""
    if _norm_dim(x, residual, dim) == 1:
        s, y = AddLayerNormFunction.apply(x.movedim(1, -1), residual.movedim(1, -1), weight, bias, eps, y_dtype)
        return s.movedim(-1, 1), y.movedim(-1, 1)
    return AddLayerNormFunction.apply(x, residual, weight, bias, eps, y_dtype)


# The device types whose autocast runs layer_norm in fp32 (PyTorch's autocast op reference:
# CUDA's "ops that can autocast to float32" list has layer_norm; on the CPU it runs in its
# input's type): there eager's y is fp32 whatever the sum's type, and in a post-norm model
# (BERT) y is the next block's residual stream, kept in fp32.
_AUTOCAST_FP32_NORM = {"cuda"}


# --- fa:shared autocastcast ---
def _autocast_cast(x, dtype):
    """dtype where it is the 16-bit type autocast runs in on x's device now: a module that
    writes its output as autocast casts it for the GEMMs that read it does so only under that
    autocast; outside it None (the caller gives eager's type, which an fp32 GEMM reads). A
    type other than fp16 and bf16 is returned as it is."""
    if dtype not in (torch.float16, torch.bfloat16):
        return dtype
    dev = x.device.type
    return dtype if torch.is_autocast_enabled(dev) and torch.get_autocast_dtype(dev) == dtype else None
# --- fa:end autocastcast ---


def _autocast_y_dtype(x):
    """fp32 where autocast is on for x's device and runs layer_norm in fp32, else None."""
    dev = x.device.type
    return torch.float32 if dev in _AUTOCAST_FP32_NORM and torch.is_autocast_enabled(dev) else None


class AddLayerNorm(torch.nn.Module):
    """Drop-in for ``s = x + residual; y = layer_norm(s)``: ``s, y = AddLayerNorm(N)(x, residual)``;
    ``dim=1`` for a channels-first norm (timm's LayerNorm2d). ``y_dtype`` (e.g. torch.bfloat16)
    writes y in that type: where y's one reader is a GEMM that autocast casts it for (a Linear
    or a convolution under autocast), the kernel writes the cast value and the GEMM casts
    nothing; y's gradient then comes back in that type and is read as it is. A 16-bit y_dtype
    holds only while autocast runs in that type on x's device: outside it y is eager's."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None, dim=-1,
                 y_dtype=None):
        super().__init__()
        n = normalized_shape if isinstance(normalized_shape, int) else normalized_shape[-1]
        self.eps = eps
        self.dim = dim
        self.y_dtype = y_dtype
        self.weight = torch.nn.Parameter(torch.ones(n, device=device, dtype=dtype)) if elementwise_affine else None
        self.bias = torch.nn.Parameter(torch.zeros(n, device=device, dtype=dtype)) if elementwise_affine and bias else None

    @classmethod
    def from_layer_norm(cls, ln, dim=None, y_dtype=None):
        """From an ``nn.LayerNorm`` over one dim (shares its parameters): the last, or with
        dim=1 (the default for timm's ``LayerNorm2d``, which is one) the channels."""
        if len(ln.normalized_shape) != 1:
            raise ValueError("only LayerNorm over one dim")
        if dim is None:
            dim = 1 if type(ln).__name__ == "LayerNorm2d" else -1
        new = cls(ln.normalized_shape[0], ln.eps, elementwise_affine=False, dim=dim, y_dtype=y_dtype)
        new.weight, new.bias = ln.weight, ln.bias
        return new

    def forward(self, x, residual):
        """(s, y) as eager's ``s = x + residual; y = layer_norm(s)``, under autocast too: the
        sum in the inputs' promoted type, y in fp32 where autocast runs layer_norm in fp32
        (CUDA), else in the sum's type; in y_dtype where one was given (eager's y cast to it,
        as autocast casts it for the GEMM that reads it; a 16-bit one under that autocast)."""
        y_dtype = _autocast_cast(x, self.y_dtype)  # a 16-bit y_dtype only under autocast to it
        if y_dtype is None:
            y_dtype = _autocast_y_dtype(x)
        return add_layer_norm_train(x, residual, self.weight, self.bias, self.eps, self.dim, y_dtype)
