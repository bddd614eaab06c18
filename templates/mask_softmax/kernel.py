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
- Rows that fit one block (BLOCK_N = next_power_of_2(sk), at most 8192 on a GPU) are loaded
  once, 1 to 32 of them per program (a [ROWS, BLOCK_N] tile), with 32-bit row index
  arithmetic (the wrapper refuses 2**31 - 64 rows or more, so the row index, the last tile's
  included, stays below 2**31): one short row per program with 64-bit index math (four
  divisions per row) left sk = 129..512 at 20-50% of copy bandwidth on an H200. Longer rows,
  one per program: an online (running max / running sum) first pass, then a normalising
  pass. Column offsets are 64-bit (``cols * stride`` passes 2**31 in a transposed view of a
  tall tensor), and so is everything multiplied by a stride. fp32 math; ``scale * x`` (and
  ``+ mask``) is rounded to the dtype before the softmax, as eager does.
- No autotuner: the layout comes from the row length (``_plan``): tiles of about 1024
  elements (ROWS = 1024 // BLOCK_N, 1 to 32) with 2 warps for rows up to 512, one row per
  program and BLOCK_N // 1024 warps from 1024 (the configurations the autotuner chose on the
  H200 for the benchmark matrix, docs/benchmarks/h200.md), 16 warps for chunked rows. Nothing
  is benchmarked on the caller's buffers, a new shape costs no tuning and CUDA-graph capture
  works at any shape; launched through ``_launch`` (the compiled kernel cached per
  specialization).
- In place: ``out=x`` is allowed (when the probabilities have the scores' dtype): a program
  reads a whole row (or a whole chunk, for long rows, in the normalising pass) before it
  writes it, and never reads it again. Any other overlap of ``out`` with the scores or the
  mask is refused (``_check_alias``), as is an output whose elements share memory
  (``_check_dense``).
- ``dtype`` (a case's ``out_dtype``): the probabilities' dtype when it differs from the
  default (autocast runs ``softmax`` in fp32, and ``softmax(..., dtype=torch.float32)`` does
  too: bf16/fp16 scores in, fp32 probabilities out).
- Optional dropout on the probabilities (``p``, ``seed``): Philox ``tl.rand(seed, row * sk +
  col)``, keep where ``rand >= p``, scaled by 1/(1-p), as eager's ``native_dropout``; the mask
  is a function of (seed, row, column) only, and ``dropout_mask`` returns it. The seed, as
  Inductor seeds its dropout: ``seed=None`` (the default) draws a fresh one on the scores'
  device at every call (``device_seed``: a 1-element int64 tensor from ``torch.randint`` on
  the device's default generator), which the kernels load through a pointer (``SEED_PTR``):
  nothing is read back to the host, and under CUDA-graph capture (``torch.cuda.graph``,
  ``torch.compile(mode="reduce-overhead")``) every replay draws a new seed and mask. A seed
  tensor may be passed in too, or an int (passed by value, unspecialized: deterministic
  tests, the verifier's cases); the same value gives the same mask either way.
- Training: ``MaskSoftmaxFunction``. For p == 0 the backward is ATen's
  (``_softmax_backward_data`` on the saved probabilities, masked positions zeroed as
  ``masked_fill``'s backward does, times ``scale``). With dropout (p > 0) the forward also
  writes the probabilities before dropout (P, saved in place of eager's softmax output; no
  mask is stored) and the backward is one Triton kernel (``_softmax_dropout_bwd``) that
  regenerates the keep mask from the forward's seed (the tensor saved for backward, or the
  int): ``dP = dy * keep / (1-p)`` (``native_dropout_backward``), ``ds = P * (dP - sum(dP *
  P))`` (softmax's backward), zero where a bool or causal mask filled the score, times
  ``scale``; fp32 math, dx in the scores' dtype. No gradient flows to the mask.

Interpreter-safe: builtins only (``tl.exp``, ``tl.rand``), ``tl.full``, no bf16 arithmetic;
runtime-length loops are ``while`` loops.
"""

import functools
import os

import torch
from torch.autograd.function import once_differentiable
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# the longest row held in registers; longer rows go in chunks of this size (the interpreter
# keeps blocks small so that the tests' rows of 129, 300 and 1500 take the chunked path)
MAX_BLOCK_N = 128 if INTERPRET else 8192
MASK_KINDS = {"none": 0, "bool": 1, "additive": 2, "causal": 3}
_TL = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


@functools.lru_cache(maxsize=1024)
def _plan(N, block, max_block):
    """(BLOCK_N, ROWS, num_warps) for rows of N elements; ``block`` forces BLOCK_N, else the
    row in one block up to max_block (MAX_BLOCK_N). Rows that fit one block go ROWS to a
    program in [ROWS, BLOCK_N] tiles of about 1024 elements, with 2 warps (1 for tiles under
    512 elements); from 1024 columns one row per program and BLOCK_N // 1024 warps (32
    elements per thread). Longer rows (N > BLOCK_N): one per program, in chunks of BLOCK_N,
    16 warps for chunks of 8192."""
    block = block or min(triton.next_power_of_2(N), max_block)
    if N > block:
        return block, 1, max(1, min(block // 512, 16))
    if block >= 1024:
        return block, 1, min(block // 1024, 8)
    rows = min(32, 1024 // block)
    return block, rows, max(1, rows * block // 512)


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
def _load_seed(seed, SEED_PTR: tl.constexpr):
    """The dropout seed: with SEED_PTR, ``seed`` points at one int64 drawn on the device for
    this call (``device_seed``), loaded here so that the host never reads it and a CUDA-graph
    replay uses the value drawn by that replay; otherwise ``seed`` is the int itself."""
    if SEED_PTR:
        seed = tl.load(seed)
    return seed


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


# The row counts and the seed unspecialized: a new batch, head count, query length or seed
# (1, a multiple of 16, other) compiles nothing new, nor during CUDA-graph capture
@triton.jit(do_not_specialize=["R", "H", "M", "seed"])
def _mask_softmax_rows(X, MASK, Y, P, R, H, M, N,
                       sxb, sxh, sxm, sxn, smb, smh, smm, smn, syb, syh, sym, syn,
                       scale, fill, p, pscale, seed,
                       KIND: tl.constexpr, SDT: tl.constexpr, DROPOUT: tl.constexpr, SEED_PTR: tl.constexpr,
                       STORE_P: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """Rows that fit one block: ROWS of them per program, each loaded once. With STORE_P (the
    autograd path with dropout) the probabilities before dropout also go to P, contiguous
    [R, N], for the backward."""
    # flat index of (b, h, m); int32 (R <= 2**31 - 64): 64-bit division costs more than a short row
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    qrow = row % M
    bh = row // M
    h = (bh % H).to(tl.int64)
    b = (bh // H).to(tl.int64)
    qrow = qrow.to(tl.int64)
    row = row.to(tl.int64)
    cols = tl.arange(0, BLOCK_N).to(tl.int64)[None, :]  # 64-bit: cols * stride may pass 2**31
    inb = (row < R)[:, None] & (cols < N)
    xp = X + (b * sxb + h * sxh + qrow * sxm)[:, None]
    mp = MASK + (b * smb + h * smh + qrow * smm)[:, None]
    s = _scores(xp, mp, cols, qrow[:, None], inb, M, N, sxn, smn, scale, fill, KIND, SDT)
    mx = tl.max(s, axis=1)
    safe = tl.where(mx == float("-inf"), 0.0, mx)  # all -inf: 0/0 = NaN below, as eager
    e = tl.exp(s - safe[:, None])
    y = e / tl.sum(e, axis=1)[:, None]
    if DROPOUT:
        if STORE_P:
            tl.store(P + row[:, None] * N + cols, _cast(y, P.dtype.element_ty), mask=inb)
        seed = _load_seed(seed, SEED_PTR)
        y = y * tl.where(tl.rand(seed, row[:, None] * N + cols) >= p, pscale, 0.0)  # NaN * 0 = NaN, as eager
    yp = Y + (b * syb + h * syh + qrow * sym)[:, None]
    tl.store(yp + cols * syn, _cast(y, Y.dtype.element_ty), mask=inb)


@triton.jit(do_not_specialize=["R", "H", "M", "seed"])
def _mask_softmax_long(X, MASK, Y, P, R, H, M, N,
                       sxb, sxh, sxm, sxn, smb, smh, smm, smn, syb, syh, sym, syn,
                       scale, fill, p, pscale, seed,
                       KIND: tl.constexpr, SDT: tl.constexpr, DROPOUT: tl.constexpr, SEED_PTR: tl.constexpr,
                       STORE_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """Rows longer than one block, one per program: an online pass, then a normalising pass
    (P and STORE_P as for _mask_softmax_rows)."""
    row = tl.program_id(0)  # flat index of (b, h, m), int32 (R <= 2**31 - 64)
    qrow = row % M
    bh = row // M
    h = (bh % H).to(tl.int64)
    b = (bh // H).to(tl.int64)
    qrow = qrow.to(tl.int64)
    row = row.to(tl.int64)
    X += b * sxb + h * sxh + qrow * sxm
    MASK += b * smb + h * smh + qrow * smm
    Y += b * syb + h * syh + qrow * sym
    offs = tl.arange(0, BLOCK_N).to(tl.int64)  # 64-bit: cols * stride may pass 2**31
    # pass 1: per-lane running max and running sum of exp
    m_run = tl.full([BLOCK_N], float("-inf"), tl.float32)
    l_run = tl.full([BLOCK_N], 0, tl.float32)
    start = 0
    while start < N:
        cols = start + offs
        s = _scores(X, MASK, cols, qrow, cols < N, M, N, sxn, smn, scale, fill, KIND, SDT)
        m_new = tl.maximum(m_run, s)
        safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        l_run = l_run * tl.exp(m_run - safe) + tl.exp(s - safe)
        m_run = m_new
        start += BLOCK_N
    mx = tl.max(m_run, axis=0)
    safe = tl.where(mx == float("-inf"), 0.0, mx)
    total = tl.sum(tl.where(m_run == float("-inf"), 0.0, l_run * tl.exp(m_run - safe)), axis=0)
    # pass 2: normalise
    if DROPOUT:
        seed = _load_seed(seed, SEED_PTR)
    start = 0
    while start < N:
        cols = start + offs
        s = _scores(X, MASK, cols, qrow, cols < N, M, N, sxn, smn, scale, fill, KIND, SDT)
        y = tl.exp(s - safe) / total
        if DROPOUT:
            if STORE_P:
                tl.store(P + row * N + cols, _cast(y, P.dtype.element_ty), mask=cols < N)
            y = y * tl.where(tl.rand(seed, row * N + cols) >= p, pscale, 0.0)  # NaN * 0 = NaN, as eager
        tl.store(Y + cols * syn, _cast(y, Y.dtype.element_ty), mask=cols < N)
        start += BLOCK_N


@triton.jit(do_not_specialize=["seed"])
def _mask_kernel(K, N, p, seed, SEED_PTR: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    seed = _load_seed(seed, SEED_PTR)
    start = 0
    while start < N:
        cols = start + tl.arange(0, BLOCK_N)
        keep = tl.rand(seed, row * N + cols) >= p
        tl.store(K + row * N + cols, keep.to(tl.int8), mask=cols < N)
        start += BLOCK_N


@triton.jit(do_not_specialize=["R", "H", "M", "seed"])
def _softmax_dropout_bwd(P, DY, MASK, DX, R, H, M, N, sdb, sdh, sdm, sdn, smb, smh, smm, smn,
                         scale, p, pscale, seed,
                         KIND: tl.constexpr, SEED_PTR: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """dx of y = dropout(softmax(s), p), s = mask(scale * x), for ROWS rows per program, from
    the saved probabilities before dropout P and dy (P and DX contiguous [R, N]; dy and the
    mask through their strides as [B, H, M, N]):

        dP = dy * keep / (1 - p)         keep regenerated from (seed, row, column): the forward's
        ds = P * (dP - sum(dP * P))      softmax's backward, the sum over the row
        dx = scale * ds, 0 where a bool or causal mask filled the score (masked_fill's backward)

    Two passes over the row in chunks of BLOCK_N: the row sum, then dx (a row that fits one
    chunk is read twice, the second time from cache)."""
    seed = _load_seed(seed, SEED_PTR)
    # flat index of (b, h, m), int32 as in the forward (R <= 2**31 - 64); offsets in 64 bits
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    qrow = row % M
    bh = row // M
    h = (bh % H).to(tl.int64)
    b = (bh // H).to(tl.int64)
    qrow = qrow[:, None].to(tl.int64)
    row = row[:, None].to(tl.int64)
    live = row < R
    pp = P + row * N
    dyp = DY + (b * sdb + h * sdh)[:, None] + qrow * sdm
    offs = tl.arange(0, BLOCK_N).to(tl.int64)[None, :]
    # pass 1: the row sums of dP * P, accumulated per lane
    acc = tl.full([ROWS, BLOCK_N], 0, tl.float32)
    start = 0
    while start < N:
        cols = start + offs
        inb = live & (cols < N)
        prob = tl.load(pp + cols, mask=inb, other=0.0).to(tl.float32)
        dy = tl.load(dyp + cols * sdn, mask=inb, other=0.0).to(tl.float32)
        dp = dy * tl.where(tl.rand(seed, row * N + cols) >= p, pscale, 0.0)
        acc += dp * prob
        start += BLOCK_N
    dot = tl.sum(acc, axis=1)[:, None]
    # pass 2: dx
    mp = MASK + (b * smb + h * smh)[:, None] + qrow * smm
    start = 0
    while start < N:
        cols = start + offs
        inb = live & (cols < N)
        prob = tl.load(pp + cols, mask=inb, other=0.0).to(tl.float32)
        dy = tl.load(dyp + cols * sdn, mask=inb, other=0.0).to(tl.float32)
        dp = dy * tl.where(tl.rand(seed, row * N + cols) >= p, pscale, 0.0)
        ds = prob * (dp - dot)
        if KIND == 1:
            mk = tl.load(mp + cols * smn, mask=inb, other=0).to(tl.int1)
            ds = tl.where(mk, 0.0, ds)
        elif KIND == 3:
            ds = tl.where(cols > qrow + (N - M), 0.0, ds)
        tl.store(DX + row * N + cols, _cast(ds * scale, DX.dtype.element_ty), mask=inb)
        start += BLOCK_N


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
    if mask_kind == "additive" and mask is not None and mask.dtype != x.dtype:
        return torch.promote_types(x.dtype, mask.dtype)
    return x.dtype


def _broadcast_strides(t, shape):
    """t's strides when broadcast to the 4-D ``shape`` (0 on broadcast dims: no expanded copy
    is made), or None when it does not broadcast to it."""
    pad = 4 - t.dim()
    if pad < 0:
        return None
    out = [0, 0, 0, 0]
    for i, (n, st) in enumerate(zip(t.shape, t.stride())):
        if n == shape[pad + i]:
            out[pad + i] = st if n != 1 else 0
        elif n != 1:
            return None
    return out


def _check(x, mask, mask_kind, p):
    if x.dtype not in _TL:
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
        if mask.device != x.device:
            raise ValueError("mask_softmax: scores and mask on different devices")
    if not (0.0 <= p < 1.0):
        raise ValueError(f"mask_softmax: p={p} (want 0 <= p < 1)")
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if rows > 2**31 - 64:  # 32-bit row arithmetic, the last tile's rows included
        raise ValueError(f"mask_softmax: {rows} rows (at most 2**31 - 64)")


# --- fa:shared seeds ---
_DEVICE_SEEDS = 2**63 - 1  # device_seed's range: any int64 >= 0, as Inductor draws its seeds


def device_seed(device):
    """A fresh dropout seed as a 1-element int64 tensor on device, drawn by torch.randint from
    the device's default generator (reproducible under torch.manual_seed). Nothing is read back
    to the host; under CUDA-graph capture the generator's Philox offset advances at every
    replay, so each replay draws a new seed (how Inductor seeds its dropout)."""
    return torch.randint(0, _DEVICE_SEEDS, (1,), dtype=torch.int64, device=device)


def _seed_arg(fn, seed, device):
    """(the kernels' seed argument, SEED_PTR) for a seed: a 1-element int64 tensor on device is
    passed as a pointer (the kernel loads it), an int by value."""
    if isinstance(seed, torch.Tensor):
        if seed.dtype != torch.int64 or seed.numel() != 1 or seed.device != device:
            raise ValueError(f"{fn}: a seed tensor must hold one int64 on {device} "
                             f"(got {seed.numel()} x {seed.dtype} on {seed.device})")
        return seed, True
    return int(seed), False
# --- fa:end seeds ---


def _mask_arg(mask, kind, shape):
    """(the mask as the kernels read it, its strides broadcast to the 4-D ``shape``): a bool
    mask viewed as int8; for the kinds without a mask tensor, None (the caller passes a dummy
    pointer, never read) and zero strides."""
    if kind not in (1, 2):
        return None, [0, 0, 0, 0]
    sm = _broadcast_strides(mask, shape)
    if sm is None:
        raise ValueError(f"mask_softmax: mask {tuple(mask.shape)} does not broadcast to {tuple(shape)}")
    return (mask.view(torch.int8) if kind == 1 else mask), sm


@_on_their_device
def mask_softmax(x, mask=None, scale=1.0, mask_kind="none", mask_fill=float("-inf"), p=0.0, seed=None,
                 out=None, block_n=None, dtype=None, probs=None):
    """y = dropout(softmax(mask(scale * x), dim=-1), p), in ``dtype`` (default: out_dtype(x, mask,
    mask_kind); e.g. torch.float32 for autocast's fp32 softmax). ``out`` may be x itself (in
    place, when it has x's dtype). ``block_n`` forces the chunk size. ``seed`` (p > 0): None
    draws a fresh one on x's device (device_seed), else an int or a 1-element int64 tensor on
    x's device; the same value gives the same mask. ``probs`` (p > 0): a contiguous tensor of
    y's shape and dtype that also receives the probabilities before dropout (what
    MaskSoftmaxFunction saves for its backward)."""
    return _mask_softmax(x, mask, scale, mask_kind, mask_fill, p, seed, out, block_n, dtype, probs, False)


def _mask_softmax(x, mask, scale, mask_kind, mask_fill, p, seed, out, block_n, dtype, probs, probs_fresh):
    """mask_softmax; probs_fresh: out is None and probs a tensor the caller has just allocated,
    contiguous, of the output's shape, dtype and device, with p > 0 (MaskSoftmaxFunction's),
    so it is not checked (an overlap check over four tensors at every training call)."""
    _check(x, mask, mask_kind, p)
    kind = MASK_KINDS[mask_kind]
    sum_dtype = out_dtype(x, mask, mask_kind)  # the type eager rounds x + mask to
    dtype = dtype or sum_dtype
    if dtype not in _TL:
        raise TypeError(f"mask_softmax: unsupported output dtype {dtype}")
    if p == 0:
        seed = 0  # never read
    elif seed is None:
        seed = device_seed(x.device)
    seed, seed_ptr = _seed_arg("mask_softmax", seed, x.device)
    if out is None:
        # empty_like: a third of torch.empty(shape, ...)'s host time; contiguous like it
        out = torch.empty_like(x, dtype=dtype, memory_format=torch.contiguous_format)
    else:
        if out.shape != x.shape or out.dtype != dtype or out.device != x.device:
            raise ValueError("mask_softmax: out has the wrong shape, dtype or device")
        _check_alias("mask_softmax", [("out", out)], [("x", x), ("mask", mask)], in_place=("x",))
        _check_dense("mask_softmax", [("out", out)])
    if probs is not None and not probs_fresh:
        if p == 0 or probs.shape != x.shape or probs.dtype != dtype or probs.device != x.device \
                or not probs.is_contiguous():
            raise ValueError("mask_softmax: probs must be contiguous, of the output's shape, dtype and device, "
                             "and p > 0")
        _check_alias("mask_softmax", [("probs", probs)], [("x", x), ("mask", mask), ("out", out)])
    if x.numel() == 0:
        return out
    # x, the mask and out are read through their own strides as [B, H, M, N]: no 4-D views
    pad = [0] * (4 - x.dim())
    B, H, M, N = shape = [1] * len(pad) + list(x.shape)
    kmask, sm = _mask_arg(mask, kind, shape)
    block, rows, warps = _plan(N, block_n, MAX_BLOCK_N)
    R = B * H * M
    args = (x, x if kmask is None else kmask, out, out if probs is None else probs,  # x, out: dummies, never read
            R, H, M, N, *pad, *x.stride(), *sm, *pad, *out.stride(),
            float(scale), fill_value(mask_fill, x.dtype), float(p), 1.0 / (1.0 - p), seed)
    flags = dict(KIND=kind, SDT=_TL[sum_dtype], DROPOUT=p > 0, SEED_PTR=seed_ptr, STORE_P=probs is not None)
    if N <= block:
        _launch(_mask_softmax_rows, (-(-R // rows),), args, num_warps=warps,  # cdiv (triton.cdiv: us per call)
                **flags, BLOCK_N=block, ROWS=rows)
    else:
        _launch(_mask_softmax_long, (R,), args, num_warps=warps, **flags, BLOCK_N=block)
    return out


@_on_their_device
def dropout_mask(shape, p, seed, device):
    """The keep-mask (bool) mask_softmax applies for these scores' shape, p and seed (an int,
    or the seed tensor a call used: read on the device, as the kernels read it)."""
    shape = tuple(shape)
    n = shape[-1]
    rows = 1
    for d in shape[:-1]:
        rows *= d
    k = torch.empty((rows, n), dtype=torch.int8, device=device)
    if k.numel():
        seed, seed_ptr = _seed_arg("dropout_mask", seed, k.device)
        _launch(_mask_kernel, (rows,), (k, n, float(p), seed),
                SEED_PTR=seed_ptr, BLOCK_N=min(triton.next_power_of_2(n), MAX_BLOCK_N))
    return k.view(shape).bool()


def _zeroed_positions(y, mask, mask_kind):
    """Where masked_fill's backward zeroes the gradient (bool and causal masks)."""
    if mask_kind == "bool":
        return mask.expand(y.shape) if mask.dim() <= y.dim() else mask
    if mask_kind == "causal":
        sq, sk = y.shape[-2], y.shape[-1]
        return torch.ones(sq, sk, dtype=torch.bool, device=y.device).triu(sk - sq + 1)
    return None


def _softmax_dropout_grad(dy, probs, mask, mask_kind, scale, p, seed, xdtype):
    """dx of mask_softmax with dropout (p > 0), in xdtype: _softmax_dropout_bwd on the saved
    probabilities before dropout and dy, the keep mask regenerated from the forward's seed."""
    dx = torch.empty(probs.shape, dtype=xdtype, device=probs.device)
    if dx.numel() == 0:
        return dx
    pad = [0] * (4 - dy.dim())
    B, H, M, N = shape = [1] * len(pad) + list(dy.shape)
    kind = MASK_KINDS[mask_kind]
    kmask, sm = _mask_arg(mask, kind, shape) if kind == 1 else (None, [0, 0, 0, 0])  # only bool masks are read
    seed, seed_ptr = _seed_arg("mask_softmax", seed, dy.device)
    block, rows, warps = _plan(N, None, MAX_BLOCK_N)
    R = B * H * M
    _launch(_softmax_dropout_bwd, (-(-R // rows),),
            (probs, dy, probs if kmask is None else kmask, dx, R, H, M, N,  # probs: a dummy mask, never read
             *pad, *dy.stride(), *sm, float(scale), float(p), 1.0 / (1.0 - p), seed),
            num_warps=warps, KIND=kind, SEED_PTR=seed_ptr, BLOCK_N=block, ROWS=rows)
    return dx


class MaskSoftmaxFunction(torch.autograd.Function):
    """Autograd for mask_softmax. p == 0: ATen softmax backward on the saved probabilities.
    p > 0: the forward also writes the probabilities before dropout, saved for the backward
    (no mask is stored), and the backward is _softmax_dropout_bwd, which regenerates the keep
    mask from the forward's seed. ``seed`` as for mask_softmax (None: drawn on x's device
    here, one per call)."""

    @staticmethod
    @_on_their_device
    def forward(ctx, x, mask, scale, mask_kind, mask_fill, p, seed, dtype=None):
        ctx.scale, ctx.mask_kind, ctx.p, ctx.xdtype = scale, mask_kind, p, x.dtype
        fill_mask = mask if mask_kind == "bool" else None  # what masked_fill's backward needs
        if p == 0:
            y = mask_softmax(x, mask, scale, mask_kind, mask_fill, p, 0, dtype=dtype)
            ctx.save_for_backward(y, fill_mask)
            return y
        if seed is None:
            seed = device_seed(x.device)
        # torch.empty, not empty_like: the verifier poisons and guards what torch.empty returns
        probs = torch.empty(x.shape, dtype=dtype or out_dtype(x, mask, mask_kind), device=x.device)
        y = _mask_softmax(x, mask, scale, mask_kind, mask_fill, p, seed, None, None, dtype, probs, True)
        # a seed tensor is saved for backward (autograd refuses the backward if it was
        # modified in between: the mask would not be the forward's); an int is kept as it is
        tensor_seed = isinstance(seed, torch.Tensor)
        ctx.save_for_backward(probs, fill_mask, seed if tensor_seed else None)
        ctx.seed = None if tensor_seed else int(seed)
        return y

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, dy):
        if ctx.p > 0:
            probs, mask, tensor_seed = ctx.saved_tensors
            dx = _softmax_dropout_grad(dy, probs, mask, ctx.mask_kind, ctx.scale, ctx.p,
                                       tensor_seed if ctx.seed is None else ctx.seed, ctx.xdtype)
            return dx, None, None, None, None, None, None, None
        y, mask = ctx.saved_tensors
        g = torch._softmax_backward_data(dy, y, -1, y.dtype)
        z = _zeroed_positions(y, mask, ctx.mask_kind)
        if z is not None:
            g = g.masked_fill(z, 0)
        if ctx.scale != 1.0:
            g = g * ctx.scale
        return g.to(ctx.xdtype), None, None, None, None, None, None, None


# The device types whose autocast runs softmax in fp32 (PyTorch's autocast op reference: CUDA's
# "ops that can autocast to float32" list has softmax; on the CPU it runs in its input's type):
# there eager's probabilities are fp32 whatever the scores' type.
_AUTOCAST_FP32_SOFTMAX = {"cuda"}


def _autocast_dtype(scores):
    """fp32 where autocast is on for the scores' device and runs softmax in fp32 and the scores
    are 16-bit, else None (the scores' type)."""
    dev = scores.device.type
    fp32 = dev in _AUTOCAST_FP32_SOFTMAX and torch.is_autocast_enabled(dev)
    return torch.float32 if fp32 and scores.dtype in (torch.float16, torch.bfloat16) else None


class MaskSoftmax(torch.nn.Module):
    """Drop-in for ``dropout(softmax(masked_fill(scores * scale, mask, fill)), p)`` and the
    additive / causal variants: ``MaskSoftmax(scale, mask_kind, mask_fill, p, dtype)(scores, mask)``
    (``dtype=torch.float32`` for ``softmax(..., dtype=torch.float32)`` or autocast's fp32 softmax).
    Dropout runs only in training mode, with a fresh seed per call drawn on the scores' device
    (device_seed): no host read, and a new mask at every CUDA-graph replay."""

    def __init__(self, scale=1.0, mask_kind="none", mask_fill=float("-inf"), p=0.0, dtype=None):
        super().__init__()
        if mask_kind not in MASK_KINDS:
            raise ValueError(f"mask_kind={mask_kind!r}")
        self.scale, self.mask_kind, self.mask_fill, self.p, self.dtype = scale, mask_kind, mask_fill, p, dtype

    def forward(self, scores, mask=None):
        """The probabilities as eager's chain returns them, under autocast too: in ``dtype``
        when given, else in fp32 where autocast runs softmax in fp32 (CUDA) and in the scores'
        type elsewhere."""
        p = self.p if self.training else 0.0
        dtype = self.dtype if self.dtype is not None else _autocast_dtype(scores)
        return MaskSoftmaxFunction.apply(scores, mask, self.scale, self.mask_kind, self.mask_fill, p, None, dtype)
