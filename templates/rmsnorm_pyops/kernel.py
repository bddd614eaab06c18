"""Fused RMSNorm: the HF ``LlamaRMSNorm`` / ``T5LayerNorm`` op chain as one row-wise kernel.

Replaces ``to`` -> ``pow`` -> ``mean`` -> ``add`` (eps) -> ``rsqrt`` -> ``mul`` -> ``to`` -> ``mul``
(weight): eager launches 6-8 kernels and materialises fp32 copies of the row; this kernel
reads x and the weight once per row and writes y (and 4 bytes of rstd per row for backward).
``F.rms_norm`` / ``nn.RMSNorm`` are also worth adopting in the model code.

- One program per row. A row that fits one block (BLOCK_N = next_power_of_2(N), at most 8192
  on a GPU) is read once and kept in registers; longer rows are read in BLOCK_N chunks (two
  passes: sum of squares, then normalise).
- No autotuner: BLOCK_N and num_warps come from the row length (``_plan``: the Triton
  LayerNorm tutorial's ``BLOCK_N // 256`` warps, 1 to 8), so nothing is benchmarked on the
  caller's buffers, a new shape costs no tuning and CUDA-graph capture works at any shape;
  launched through ``_launch`` (the compiled kernel cached per specialization).
- Casting (``casting=``), matching the model code or bf16 results differ:
  ``"llama"`` (LlamaRMSNorm): variance and normalisation in fp32, the normalised row cast back
  to the input dtype, then multiplied by the weight in ``promote_types(x, weight)`` (the
  output dtype). ``"fp32"``: everything in fp32, ``(x * rstd * w)`` cast once to x's dtype.
- ``out_dtype`` (fp16 / bf16, where eager's y is fp32): y written cast to it, the value
  autocast casts for each GEMM that reads y (Llama's q/k/v and gate/up projections read the
  norm's fp32 output and cast it once each); the backward reads dy in that type.
- fp32 / fp16 / bf16; strides are runtime arguments (2-D ``[rows, N]`` view). Row and column
  offsets are 64-bit: ``cols * stride`` passes 2**31 in a transposed ``[600000, 4096]`` view.
- In place: ``out=x`` is allowed (when the output has x's dtype): each program reads each
  chunk of its row before it writes that chunk, and never reads it again. Any other overlap
  of an output with an input is refused (``_check_alias``), as is an output whose elements
  share memory (``_check_dense``).
- Training: ``RMSNormFunction`` has a backward: one Triton pass reads dy and x once, writes
  d_x (the normalised row recomputed from x and the saved rstd) and d_weight's fp32 partial
  sums per group of rows, which one small ATen sum adds up. Rows longer than a block take a
  d_x kernel and a partial-sum kernel that reads dy and x again.

Interpreter-safe: ``tl.sqrt`` and division (no libdevice), no bf16 arithmetic, ``tl.full``.
"""

import functools
import os

import torch
from torch.autograd.function import once_differentiable
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
CASTING = {"llama": 0, "fp32": 1}
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
def _rmsnorm_fwd(X, W, Y, RSTD, N, sxm, sxn, sym, syn, eps,
                 CAST: tl.constexpr, SINGLE: tl.constexpr, STATS: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    X += row * sxm
    Y += row * sym
    if SINGLE:  # the whole row in registers: one read of x
        cols = tl.arange(0, BLOCK_N).to(tl.int64)  # 64-bit: cols * stride may pass 2**31
        m = cols < N
        x = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        n = x * rstd
        if CAST == 0:  # llama: back to the input dtype before the weight multiply
            n = _cast(n, X.dtype.element_ty).to(tl.float32)
        w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + cols * syn, _cast(n * w, Y.dtype.element_ty), mask=m)
    else:  # chunked: sum of squares, then normalise
        offs = tl.arange(0, BLOCK_N).to(tl.int64)  # 64-bit: cols * stride may pass 2**31
        acc = tl.full([BLOCK_N], 0, tl.float32)
        start = 0
        while start < N:  # (while: Triton 3.6's interpreter with numpy 2.4 rejects range(runtime N))
            cols = start + offs
            x = tl.load(X + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
            acc += x * x
            start += BLOCK_N
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        start = 0
        while start < N:
            cols = start + offs
            m = cols < N
            x = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32)
            w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
            n = x * rstd
            if CAST == 0:  # llama: back to the input dtype before the weight multiply
                n = _cast(n, X.dtype.element_ty).to(tl.float32)
            tl.store(Y + cols * syn, _cast(n * w, Y.dtype.element_ty), mask=m)
            start += BLOCK_N
    if STATS:
        tl.store(RSTD + row, rstd)


@triton.jit
def _rmsnorm_bwd_tile(DY, X, W, RSTD, DX, N, sdym, sdyn, sxm, sxn, r, end, cols, cm, w, acc,
                      CAST: tl.constexpr, HAS_DX: tl.constexpr, HAS_DW: tl.constexpr, BLOCK_M: tl.constexpr):
    """_rmsnorm_bwd's work on the tile of rows [r, r + BLOCK_M) (those below end): dx written,
    dy * n over the rows added to acc, returned."""
    rm = r + tl.arange(0, BLOCK_M).to(tl.int64)
    m = (rm[:, None] < end) & cm[None, :]
    dy = tl.load(DY + rm[:, None] * sdym + cols[None, :] * sdyn, mask=m, other=0.0).to(tl.float32)
    x = tl.load(X + rm[:, None] * sxm + cols[None, :] * sxn, mask=m, other=0.0).to(tl.float32)
    rstd = tl.load(RSTD + rm, mask=rm < end, other=0.0)
    n = x * rstd[:, None]
    if HAS_DX:
        # dx = rstd * (dn - n * mean(dn * n)), dn = dy * w (rounded to x's type: llama)
        dn = dy * w[None, :]
        if CAST == 0:
            dn = _cast(dn, X.dtype.element_ty).to(tl.float32)
        c = tl.sum(dn * x * rstd[:, None], axis=1) / N  # _rmsnorm_bwd_dx's order of operations
        dx = rstd[:, None] * (dn - n * c[:, None])
        tl.store(DX + rm[:, None] * N + cols[None, :], _cast(dx, DX.dtype.element_ty), mask=m)
    if HAS_DW:
        acc += tl.sum(dy * n, axis=0)
    return acc


@triton.jit(do_not_specialize=["M", "rows"])
def _rmsnorm_bwd(DY, X, W, RSTD, DX, PART, M, N, rows, sdym, sdyn, sxm, sxn,
                 CAST: tl.constexpr, HAS_DX: tl.constexpr, HAS_DW: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    """The backward of rows that fit one block, in one pass: program g takes rows
    [g * rows, (g + 1) * rows) (rows a multiple of BLOCK_M) BLOCK_M at a time, reads dy and x
    once, writes dx (HAS_DX; DX contiguous) and adds dy * n over its rows into row g of PART
    [G, N] (HAS_DW), the weight gradient's partial sums (see _rmsnorm_bwd_dw), so that the
    weight gradient reads nothing again."""
    g = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N).to(tl.int64)  # 64-bit: cols * stride may pass 2**31
    cm = cols < N
    w = tl.load(W + cols, mask=cm, other=0.0).to(tl.float32)
    acc = tl.full([BLOCK_N], 0, tl.float32)
    r0 = g * rows
    end = tl.minimum(r0 + rows, M)
    if PIPELINED and STAGES > 1:
        # the next tiles' loads issued while this one is reduced (_bwd_stages): the kernel at
        # bf16 8192x4096 on the H200 64.9 -> 53.2 us, 1.33x -> 1.09x its floor, where a while
        # loop waited for each tile's sums (bench/experiments/probe_bwd_pipeline.py)
        for t in tl.range(0, tl.cdiv(end - r0, BLOCK_M), num_stages=STAGES):
            acc = _rmsnorm_bwd_tile(DY, X, W, RSTD, DX, N, sdym, sdyn, sxm, sxn, r0 + t * BLOCK_M, end, cols, cm, w,
                                    acc, CAST, HAS_DX, HAS_DW, BLOCK_M)
    else:  # the interpreter: the same tiles (its range() takes no tensor bound)
        r = r0
        while r < end:
            acc = _rmsnorm_bwd_tile(DY, X, W, RSTD, DX, N, sdym, sdyn, sxm, sxn, r, end, cols, cm, w,
                                    acc, CAST, HAS_DX, HAS_DW, BLOCK_M)
            r += BLOCK_M
    if HAS_DW:
        tl.store(PART + g * N + cols, acc, mask=cm)


@triton.jit
def _rmsnorm_bwd_dx(DY, X, W, RSTD, DX, N, sdym, sdyn, sxm, sxn,
                    CAST: tl.constexpr, BLOCK_N: tl.constexpr):
    # dx = rstd * (dn - xhat * mean(dn * xhat)), dn = dy * w, xhat = x * rstd; DX contiguous
    row = tl.program_id(0).to(tl.int64)
    DY += row * sdym
    X += row * sxm
    DX += row * N
    rstd = tl.load(RSTD + row)
    offs = tl.arange(0, BLOCK_N).to(tl.int64)  # 64-bit: cols * stride may pass 2**31
    acc = tl.full([BLOCK_N], 0, tl.float32)
    start = 0
    while start < N:
        cols = start + offs
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
        cols = start + offs
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


@triton.jit(do_not_specialize=["M", "rows"])
def _rmsnorm_bwd_dw(DY, X, RSTD, PART, M, N, rows, sdym, sdyn, sxm, sxn, BLOCK_N: tl.constexpr):
    """The weight gradient's partial sums: program (g, j) adds dy * n over rows
    [g * rows, (g + 1) * rows) for columns [j * BLOCK_N, (j + 1) * BLOCK_N) and stores them in
    fp32 as row g of PART [G, N]; the caller sums PART's rows (dw = sum_rows dy * n, n = x *
    rstd in fp32 for both castings: llama's eager rounds n to x's dtype first, an error of
    2^-8 relative per term that the fp32 sum does not repeat). One 1-D grid: the column blocks
    of one group of rows are neighbours."""
    nb = tl.cdiv(N, BLOCK_N)
    g = tl.program_id(0) // nb
    cols = (tl.program_id(0) % nb) * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
    m = cols < N
    acc = tl.full([BLOCK_N], 0, tl.float32)
    r = g.to(tl.int64) * rows
    end = tl.minimum(r + rows, M)
    while r < end:
        dy = tl.load(DY + r * sdym + cols * sdyn, mask=m, other=0.0).to(tl.float32)
        x = tl.load(X + r * sxm + cols * sxn, mask=m, other=0.0).to(tl.float32)
        acc += dy * (x * tl.load(RSTD + r))
        r += 1
    tl.store(PART + g.to(tl.int64) * N + cols, acc, mask=m)


# The weight gradient's row groups: about DW_GROUPS of them (at least DW_MIN_ROWS rows each),
# so that PART holds a few hundred fp32 rows whatever M is.
DW_GROUPS = 8 if INTERPRET else 512
DW_MIN_ROWS = 1 if INTERPRET else 4
# _rmsnorm_bwd's tile: BLOCK_M rows of BLOCK_N, about ROW_TILE elements (short rows go several
# at a time, as the pointwise kernels' tiles do). 2048 at 4 warps, as add_layernorm's backward
# of the same structure measured best on the H200 (19.1 against 36.8 us for 4096 at 8 warps at
# rows of 768; bench/experiments/probe_rmsnorm_bwd.py times rmsnorm's own choice).
ROW_TILE = 256 if INTERPRET else 2048


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


def _fused_backward(dy2, sdym, sdyn, x2, sxm, sxn, weight, rstd, dx, M, N, block, casting, has_dx, has_dw):
    """_rmsnorm_bwd over rows that fit one block: dx (has_dx) and, with has_dw, the weight
    gradient as the sum of its per-program partial sums (fp32 [groups, N])."""
    bm = max(1, ROW_TILE // block)
    rows = max(DW_MIN_ROWS, -(-M // DW_GROUPS))
    rows = -(-rows // bm) * bm  # whole tiles per program
    groups = -(-M // rows)
    part = torch.empty((groups, N), dtype=torch.float32, device=x2.device) if has_dw else rstd  # rstd: a dummy
    _launch(_rmsnorm_bwd, (groups,), (dy2, x2, weight, rstd, dx, part, M, N, rows, sdym, sdyn, sxm, sxn),
            num_warps=_bwd_warps(bm * block), CAST=CASTING[casting], HAS_DX=has_dx, HAS_DW=has_dw,
            BLOCK_M=bm, BLOCK_N=block, STAGES=_bwd_stages(bm))
    if not has_dw:
        return None
    dw = torch.empty(N, dtype=weight.dtype, device=x2.device)
    _part_sums(part, [dw])
    return dw


def _weight_grad(dy2, sdym, sdyn, x2, sxm, sxn, rstd, M, N, dtype):
    """dw = sum over rows of dy * n as _rmsnorm_bwd_dw's partial sums of row groups, then
    their sum: fp32 [groups, N] instead of fp32 [M, N] temporaries."""
    rows = max(DW_MIN_ROWS, -(-M // DW_GROUPS))
    groups = -(-M // rows)
    block = min(1 << max(N - 1, 0).bit_length(), 128 if INTERPRET else 1024)
    part = torch.empty((groups, N), dtype=torch.float32, device=x2.device)
    _launch(_rmsnorm_bwd_dw, (groups * (-(-N // block)),),
            (dy2, x2, rstd, part, M, N, rows, sdym, sdyn, sxm, sxn),
            num_warps=4, BLOCK_N=block)
    dw = torch.empty(N, dtype=dtype, device=x2.device)
    _part_sums(part, [dw])
    return dw


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


def out_dtype(x, weight, casting):
    """y's type in eager's chain."""
    if casting == "llama" and weight.dtype != x.dtype:
        return torch.promote_types(x.dtype, weight.dtype)
    return x.dtype


def _y_dtype(x, weight, casting, dtype):
    """y's type: eager's (out_dtype), or dtype where given: eager's fp32 y cast once to fp16
    or bf16, as autocast casts it for each GEMM that reads it (the kernel writes that cast)."""
    natural = out_dtype(x, weight, casting)
    if dtype is None or dtype == natural:
        return natural
    if natural != torch.float32 or dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"rmsnorm: y_dtype={dtype} where eager's y is {natural} "
                         "(only an fp32 y is written cast, to fp16 or bf16)")
    return dtype


def _check(x, weight, casting):
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"rmsnorm: unsupported dtype {x.dtype}")
    if casting not in CASTING:
        raise ValueError(f"rmsnorm: casting={casting!r} (want one of {sorted(CASTING)})")
    if x.dim() == 0 or weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"rmsnorm: weight {tuple(weight.shape)} does not match x {tuple(x.shape)}")
    if weight.device != x.device:
        raise ValueError("rmsnorm: x and weight on different devices")
    n = x.shape[-1]
    if n and x.numel() // n >= 2**31:
        raise ValueError(f"rmsnorm: {x.numel() // n} rows (one program each: at most 2**31 - 1)")


@_on_their_device
def rms_norm(x, weight, eps=1e-6, casting="llama", out=None, rstd=None, block_n=None, y_dtype=None):
    """y = RMSNorm(x) * weight over the last dim; forward only (see RMSNormFunction).

    ``out`` may be x itself (in place, when it has x's dtype). ``rstd``, if given, receives
    1/sqrt(mean(x^2)+eps) per row (fp32). ``block_n`` forces the chunk size (tests use it to
    exercise rows longer than a block). ``y_dtype`` (fp16 or bf16, where eager's y is fp32)
    writes y cast to it: the value autocast casts for the GEMMs that read y."""
    _check(x, weight, casting)
    # the kernels index vectors (bias, norm weights) as contiguous: a strided view is copied (tiny)
    if weight.stride(0) != 1:
        weight = weight.contiguous()
    dtype = _y_dtype(x, weight, casting, y_dtype)
    fresh = out is None
    if fresh:
        # empty_like: a third of torch.empty(shape, ...)'s host time; contiguous like it
        out = torch.empty_like(x, dtype=dtype, memory_format=torch.contiguous_format)
    else:
        if out.shape != x.shape or out.dtype != dtype or out.device != x.device:
            raise ValueError("rmsnorm: out has the wrong shape, dtype or device")
        _check_alias("rmsnorm", [("out", out), ("rstd", rstd)], [("x", x), ("weight", weight)], in_place=("x",))
        _check_dense("rmsnorm", [("out", out)])
    if x.numel() == 0:
        return out
    N = x.shape[-1]
    # [rows, N] strides, no views made (a copy of x when it has no such view)
    # (a contiguous tensor's are (N, 1), found without _row_strides' loop; the row stride of
    # a tensor of one row is never used)
    if x.is_contiguous():
        sxm, sxn = N, 1
    else:
        x, sxm, sxn = _row_strides(x)
    if fresh:
        y2, sym, syn = out, N, 1
    else:
        y2, sym, syn = _row_strides(out, out=True)
    block, warps = _plan(N, MAX_BLOCK_N)
    if block_n:
        block = block_n
    _launch(_rmsnorm_fwd, (x.numel() // N,),
            (x, weight, y2, x if rstd is None else rstd, N, sxm, sxn, sym, syn, float(eps)),
            num_warps=warps, CAST=CASTING[casting], SINGLE=N <= block, STATS=rstd is not None, BLOCK_N=block)
    return out


class RMSNormFunction(torch.autograd.Function):
    """Autograd for rms_norm: one Triton pass for d_x and d_weight's per-program partial sums
    (rows longer than a block: a d_x kernel and a partial-sum kernel), then their sum."""

    @staticmethod
    def forward(ctx, x, weight, eps, casting, y_dtype=None):
        M = x.numel() // x.shape[-1] if x.dim() and x.shape[-1] else 0
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
        y = rms_norm(x, weight, eps, casting, rstd=rstd, y_dtype=y_dtype)
        ctx.save_for_backward(x, weight, rstd)
        ctx.casting = casting
        return y

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        N = x.shape[-1]
        M = x.numel() // N if N else 0
        dx = torch.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
        dw = None
        if M and N and (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
            x2, sxm, sxn = _row_strides(x)
            dy2, sdym, sdyn = _row_strides(dy)
            if weight.stride(0) != 1:  # the kernels read it as contiguous (its gradient keeps its dtype)
                weight = weight.contiguous()
            block, warps = _plan(N, MAX_BLOCK_N)
            if N <= block:  # the row in registers: dx and dweight's partial sums in one pass
                dw = _fused_backward(dy2, sdym, sdyn, x2, sxm, sxn, weight, rstd, dx, M, N, block, ctx.casting,
                                     ctx.needs_input_grad[0], ctx.needs_input_grad[1])
            else:  # rows in chunks: dx row by row, then dweight's partial sums reading dy and x again
                if ctx.needs_input_grad[0]:
                    _launch(_rmsnorm_bwd_dx, (M,), (dy2, x2, weight, rstd, dx, N, sdym, sdyn, sxm, sxn),
                            num_warps=warps, CAST=CASTING[ctx.casting], BLOCK_N=block)
                if ctx.needs_input_grad[1]:
                    dw = _weight_grad(dy2, sdym, sdyn, x2, sxm, sxn, rstd, M, N, weight.dtype)
        elif ctx.needs_input_grad[1]:
            dw = torch.zeros_like(weight)
        return dx, dw, None, None, None


class RMSNorm(torch.nn.Module):
    """Drop-in for ``LlamaRMSNorm`` (casting="llama") or an all-fp32 RMSNorm (casting="fp32").

    ``out_dtype`` (e.g. torch.bfloat16) writes y in that type where eager's y is fp32: under
    autocast, where y's readers are all GEMMs that autocast casts it for (Llama's q/k/v and
    gate/up projections), the kernel writes the cast value once and the GEMMs cast nothing.
    Only while autocast runs in that type on x's device: outside it y is eager's.
    y's gradients from those GEMMs then reach the norm summed in that type by the autograd
    engine (eager sums them in fp32 after each cast's backward): a rounding of the sum, as a
    model run in bf16 throughout has it."""

    def __init__(self, hidden_size, eps=1e-6, casting="llama", device=None, dtype=None, out_dtype=None):
        super().__init__()
        if casting not in CASTING:
            raise ValueError(f"casting={casting!r} (want one of {sorted(CASTING)})")
        if out_dtype not in (None, torch.float16, torch.bfloat16):
            raise ValueError(f"out_dtype={out_dtype} (want None, torch.float16 or torch.bfloat16)")
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.variance_epsilon = eps
        self.casting = casting
        self.out_dtype = out_dtype

    @classmethod
    def from_module(cls, m, casting="llama", out_dtype=None):
        """From an HF LlamaRMSNorm-like module (``weight``, ``variance_epsilon`` or ``eps``)."""
        eps = getattr(m, "variance_epsilon", getattr(m, "eps", 1e-6))
        new = cls(m.weight.shape[0], eps, casting, device=m.weight.device, dtype=m.weight.dtype, out_dtype=out_dtype)
        with torch.no_grad():
            new.weight.copy_(m.weight)
        return new

    def forward(self, x):
        # y cast only under autocast to that type (outside it eager's y, which an fp32 Linear reads)
        cast = _autocast_cast(x, self.out_dtype)
        return RMSNormFunction.apply(x, self.weight, self.variance_epsilon, self.casting, cast)
