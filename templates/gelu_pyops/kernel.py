"""Fused tanh-GELU written as Python ops (HF ``NewGELUActivation``, minGPT), with an optional bias.

Replaces the 6-9 pointwise ATen launches of
``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))`` (``pow``, ``mul``, ``add``, ``mul``,
``tanh``, ``add``, ``mul``, ``mul``; plus the bias ``add`` when present) with one kernel that
reads x once and writes y once. It computes the same function as
``F.gelu(x, approximate="tanh")``, which is also worth adopting in the model code.

- Only the tanh GELU: the chain this pattern matches is that one, so the kernel carries no
  other (no branch that a folder's tests would never run).
- Inputs fp32 / fp16 / bf16, any rank; optional bias of the size of the last dim. Math is
  fp32 (every load is upcast at once); eager rounds after every op in fp16/bf16, this kernel
  rounds once, so it is closer to the fp32 result than eager is.
- ``dtype``: y's dtype when it differs from x's. Under autocast ``torch.pow`` runs in fp32, so
  the traced chain takes bf16/fp16 x and returns fp32 y; ``dtype=torch.float32`` does the same
  in one kernel (x + bias is then kept in fp32; eager rounds it to the inputs' type first).
- Strides are runtime arguments (2-D ``[rows, N]`` view, no copy when one exists); row and
  column offsets in 64 bits.
- Tiles from the row length (``_tiles``, no autotuner), a 1-D grid of tiles (``_grid``:
  CUDA's grid axes 1 and 2 stop at 65535), launched through ``_launch``; M is not specialized
  (a new number of rows needs no compilation, in a CUDA-graph capture too).
- ``out=x`` (in place, when y has x's dtype) is allowed: each program reads its tile of x
  before writing the same tile of y. Any other overlap with an input is refused, and so is
  an ``out`` whose elements share memory (an expanded view).
- Training: ``NewGELUFunction`` has a backward: a fused Triton kernel for the derivative
  (recomputed from x and b, nothing but the inputs saved) that writes the gradient in
  ``x + b``'s type, which is x's gradient (one pass: read dy and x, write dx); with a bias,
  the same pass sums its columns per group of rows (fp32 partial sums, ``DB_PROGRAMS``), and
  one small ATen sum of those is the bias gradient.

Interpreter-safe: builtins only (tanh as ``2/(1+exp(-2x))-1``), no libdevice, no bf16 math.
"""

import functools
import os

import torch
from torch.autograd.function import once_differentiable
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


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
def _gelu(x):
    """The tanh GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + _tanh(inner))


@triton.jit
def _gelu_grad(x):
    """d/dx of the tanh GELU."""
    x2 = x * x
    t = _tanh(0.7978845608028654 * (x + 0.044715 * x2 * x))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * x2)


@triton.jit(do_not_specialize=["M"])
def _new_gelu_fwd(X, B, Y, M, N, sxm, sxn, sym, syn,
                  HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # tile t of a 1-D grid: row block t // tiles_n, column block t % tiles_n; rows and columns
    # in 64 bits, since row * stride and column * stride can pass 2**31
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rm = (pid // tiles_n).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid % tiles_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(X + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b = tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)
        # eager rounds x + b to its dtype before the GELU (here: y's; with dtype=fp32 the sum
        # stays fp32 where eager rounds it to the inputs' type first, see the module docstring)
        x = _cast(x + b[None, :], Y.dtype.element_ty).to(tl.float32)
    y = _gelu(x)
    tl.store(Y + rm[:, None] * sym + rn[None, :] * syn, _cast(y, Y.dtype.element_ty), mask=mask)


@triton.jit
def _new_gelu_bwd_tile(DY, X, B, DZ, rm, rn, M, N, sdym, sdyn, sxm, sxn, sdzm, sdzn, HAS_BIAS: tl.constexpr):
    """dz = dy * gelu'(x + b) on rows rm (< M) and columns rn (int64), stored in DZ's type;
    returned as stored (fp32, 0 outside the tile's bounds)."""
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(X + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b = tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)
        x = _cast(x + b[None, :], DZ.dtype.element_ty).to(tl.float32)
    dy = tl.load(DY + rm[:, None] * sdym + rn[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
    dz = dy * _gelu_grad(x)
    dz = _cast(dz, DZ.dtype.element_ty)
    tl.store(DZ + rm[:, None] * sdzm + rn[None, :] * sdzn, dz, mask=mask)
    return tl.where(mask, dz.to(tl.float32), 0.0)


@triton.jit(do_not_specialize=["M", "rows"])
def _new_gelu_bwd(DY, X, B, DZ, PART, M, N, rows, sdym, sdyn, sxm, sxn, sdzm, sdzn,
                  HAS_BIAS: tl.constexpr, HAS_DB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # the forward's tiling and 64-bit offsets; with HAS_DB (the bias gradient) program t takes
    # column block t % tiles_n of rows [g * rows, (g + 1) * rows), g = t // tiles_n (rows a
    # multiple of BLOCK_M), BLOCK_M at a time, DB_STAGES tiles in flight, and stores its column
    # sums of dz (as stored, the values eager sums) in row g of PART [G, N] fp32: the bias
    # gradient's partial sums, without reading dz again
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rn = (pid % tiles_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    if HAS_DB:
        g = (pid // tiles_n).to(tl.int64)
        r0 = g * rows
        end = tl.minimum(r0 + rows, M)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)  # reduced once, after the loop
        if PIPELINED:
            for t in tl.range(0, tl.cdiv(end - r0, BLOCK_M), num_stages=DB_STAGES):
                rm = r0 + t * BLOCK_M + tl.arange(0, BLOCK_M)
                acc += _new_gelu_bwd_tile(DY, X, B, DZ, rm, rn, end, N, sdym, sdyn, sxm, sxn, sdzm, sdzn, HAS_BIAS)
        else:  # the interpreter: the same tiles (its range() takes no tensor bound)
            r = r0
            while r < end:
                rm = r + tl.arange(0, BLOCK_M)
                acc += _new_gelu_bwd_tile(DY, X, B, DZ, rm, rn, end, N, sdym, sdyn, sxm, sxn, sdzm, sdzn, HAS_BIAS)
                r += BLOCK_M
        tl.store(PART + g * N + rn, tl.sum(acc, axis=0), mask=rn < N)
    else:
        rm = (pid // tiles_n).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        _new_gelu_bwd_tile(DY, X, B, DZ, rm, rn, M, N, sdym, sdyn, sxm, sxn, sdzm, sdzn, HAS_BIAS)


# The bias gradient's programs (_new_gelu_bwd with HAS_DB): about DB_PROGRAMS of them over all
# column blocks, each over whole row tiles, its loop DB_STAGES tiles deep, so that the partial
# sums are a few hundred rows of fp32 whatever M is (the interpreter's few, so that its tests'
# rows span several groups). linear_gelu's derivative pass has the same walk; measured there
# (bench/experiments/probe_gelu_bwd.py, 2026-12-03, H200): a sum after the loop, the loop 3
# deep and 512 programs took bf16 16x256x3072 from 37.4 to 30.8 us (eager 42.7).
DB_PROGRAMS = 8 if INTERPRET else 512
DB_STAGES = tl.constexpr(3)


# --- fa:shared pipelined ---
# A backward's row loop: pipelined on the GPU (a tl.range loop with tiles in flight), a while
# loop over the same tiles under the interpreter (its range() takes no tensor bound).
PIPELINED = tl.constexpr(not INTERPRET)
# --- fa:end pipelined ---


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


# --- fa:shared tiles ---
# Tiles of the pointwise kernels, from the row length (no autotuner). A kernel covers an
# [M, N] view with BLOCK_M x BLOCK_N tiles on a 1-D grid (CUDA caps grid axes 1 and 2 at 65535
# programs, axis 0 at 2**31 - 1), as the Triton tutorials' and Inductor's pointwise kernels do:
# - a tile moves _TILE_BYTES of each operand (2048 16-bit or 1024 fp32 elements with 4 warps:
#   two 16-byte loads per thread and operand);
# - the column block is the widest power of two whose masked tail wastes at most 1/16 of a
#   row, but at least 128 columns (whole 128-byte lines) where the row has them; the tile's
#   other rows are the row block;
# - the number of rows M never enters (nor, with do_not_specialize, the kernels' own M): a
#   new batch or sequence length runs the kernel compiled for another, so that a CUDA graph
#   captured at an M never run before needs no compilation (loading a module is not allowed
#   while a stream captures);
# - under the interpreter, tiles of 1024 elements and at most 64 columns, so that the tests'
#   small shapes still span several row and column blocks.
_TILE_BYTES = 4096


@functools.lru_cache(maxsize=1024)
def _tiles(N, elem_bytes, min_bn=1):
    """(BLOCK_M, BLOCK_N, num_warps) for a pointwise pass over rows of N elements whose widest
    operand has elem_bytes bytes per element; BLOCK_N >= min_bn (a power of two)."""
    if INTERPRET:
        bn = max(min_bn, min(64, triton.next_power_of_2(N)))
        return max(1, 1024 // bn), bn, 4
    tile = _TILE_BYTES // elem_bytes
    bn = min(tile, triton.next_power_of_2(N))
    narrowest = max(min_bn, min(bn, 128))
    best_pad, best_bn = None, bn
    while bn >= narrowest:
        pad = -(-N // bn) * bn
        if best_pad is None or pad < best_pad:
            best_pad, best_bn = pad, bn
        if pad * 16 <= N * 17:
            break
        bn //= 2
    bn = max(best_bn, min_bn)
    return max(1, tile // bn), bn, 4


def _grid(M, N, BLOCK_M, BLOCK_N):
    """The 1-D grid of an [M, N] pass: tile t covers row block t // cdiv(N, BLOCK_N), column
    block t % cdiv(N, BLOCK_N). (Integer arithmetic: triton.cdiv is a JIT-dispatched function,
    several microseconds a call on the host.)"""
    return (-(-M // BLOCK_M) * -(-N // BLOCK_N),)
# --- fa:end tiles ---


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


_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _check(x, bias):
    if x.dtype not in _FLOATS:
        raise TypeError(f"gelu_pyops: unsupported dtype {x.dtype}")
    if bias is not None:
        if bias.dim() != 1 or bias.shape[0] != (x.shape[-1] if x.dim() else 1):
            raise ValueError(f"gelu_pyops: bias shape {tuple(bias.shape)} does not match x {tuple(x.shape)}")
        if bias.device != x.device:
            raise ValueError("gelu_pyops: x and bias on different devices")
        if bias.dtype not in _FLOATS:
            raise TypeError(f"gelu_pyops: unsupported bias dtype {bias.dtype}")


@_on_their_device
def new_gelu(x, bias=None, out=None, dtype=None):
    """y = NewGELU(x + bias) (tanh GELU) in ``dtype`` (default: x's, promoted with the bias');
    forward only (see NewGELUFunction for autograd). ``out`` may be x itself (in place)."""
    _check(x, bias)
    # the kernels index vectors (bias, norm weights) as contiguous: a strided view is copied (tiny)
    if bias is not None and bias.stride(0) != 1:
        bias = bias.contiguous()
    if dtype is None:
        dtype = x.dtype
        if bias is not None and bias.dtype != dtype:
            dtype = torch.promote_types(dtype, bias.dtype)
    elif dtype not in _FLOATS:
        raise TypeError(f"gelu_pyops: unsupported output dtype {dtype}")
    n = x.numel()
    if out is None:
        # empty_like: a third of torch.empty(shape, ...)'s host time; contiguous like it
        out = torch.empty_like(x, dtype=dtype, memory_format=torch.contiguous_format)
        if n and x.is_contiguous():
            # the common case: x and the fresh out are contiguous [rows, N], no views needed
            N = x.shape[-1] if x.dim() else 1
            M = n // N
            bm, bn, warps = _tiles(N, max(x.element_size(), out.element_size()))
            _launch(_new_gelu_fwd, _grid(M, N, bm, bn),
                    (x, x if bias is None else bias, out, M, N, N, 1, N, 1),  # x: a dummy bias pointer
                    num_warps=warps, HAS_BIAS=bias is not None, BLOCK_M=bm, BLOCK_N=bn)
            return out
    elif out.shape != x.shape or out.dtype != dtype or out.device != x.device:
        raise ValueError("gelu_pyops: out has the wrong shape, dtype or device")
    else:
        _check_dense("gelu_pyops", [("out", out)])
        _check_alias("gelu_pyops", [("out", out)], [("x", x), ("bias", bias)], in_place=("x",))
    if n == 0:
        return out
    x2, y2 = _rows(x), _rows(out, view_only=True)
    M, N = x2.shape
    bm, bn, warps = _tiles(N, max(x2.element_size(), y2.element_size()))
    sx, sy = x2.stride(), y2.stride()
    _launch(_new_gelu_fwd, _grid(M, N, bm, bn),
            (x2, x2 if bias is None else bias, y2, M, N,  # x2: a dummy bias pointer, never read
             sx[0], sx[1], sy[0], sy[1]),
            num_warps=warps, HAS_BIAS=bias is not None, BLOCK_M=bm, BLOCK_N=bn)
    return out


class NewGELUFunction(torch.autograd.Function):
    """Autograd for new_gelu: fused Triton derivative kernel, which also sums the bias
    gradient's per-program partial sums; an ATen sum of those."""

    @staticmethod
    def forward(ctx, x, bias=None, dtype=None):
        y = new_gelu(x, bias, dtype=dtype)
        ctx.save_for_backward(x, bias)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, dy):
        x, bias = ctx.saved_tensors
        # the gradient of z = x + bias in z's type (x's, promoted with the bias'), as eager's
        # chain rounds it (under autocast the fp32 pow's gradient is cast back to z's type);
        # never y's type: an fp32 y of a bf16 x took an fp32 [M, N] temporary and a second
        # pass to cast it to x's type (16 bytes moved per element where one pass moves 8)
        zdtype = x.dtype if bias is None else torch.promote_types(x.dtype, bias.dtype)
        dz = torch.empty(x.shape, dtype=zdtype, device=x.device)
        db = None
        if x.numel():
            x2, dy2, dz2 = _rows(x), _rows(dy), _rows(dz)
            if bias is not None and bias.stride(0) != 1:
                bias = bias.contiguous()
            M, N = x2.shape
            bm, bn, warps = _tiles(N, max(x2.element_size(), dz2.element_size(), dy2.element_size()))
            has_db = ctx.has_bias and ctx.needs_input_grad[1]
            grid, rows, part = _grid(M, N, bm, bn), bm, x2  # x2: a dummy PART, never written
            if has_db:
                tiles_n = -(-N // bn)
                rows = -(-M // max(1, DB_PROGRAMS // tiles_n))
                rows = -(-rows // bm) * bm  # whole row tiles
                groups = -(-M // rows)
                grid = (groups * tiles_n,)
                part = torch.empty((groups, N), dtype=torch.float32, device=x.device)
            _launch(_new_gelu_bwd, grid,
                    (dy2, x2, x2 if bias is None else bias, dz2, part, M, N, rows, dy2.stride(0), dy2.stride(1),
                     x2.stride(0), x2.stride(1), dz2.stride(0), dz2.stride(1)),
                    num_warps=warps, HAS_BIAS=ctx.has_bias, HAS_DB=has_db, BLOCK_M=bm, BLOCK_N=bn)
            db = None
            if has_db:  # the partial sums added up in the bias' type
                db = torch.empty(N, dtype=bias.dtype, device=x.device)
                _part_sums(part, [db])
        elif ctx.has_bias and ctx.needs_input_grad[1]:
            db = torch.zeros_like(bias)
        dx = dz.to(x.dtype) if ctx.needs_input_grad[0] else None
        return dx, db, None


# The device types whose autocast runs torch.pow in fp32 (PyTorch's autocast op reference:
# CUDA's "ops that can autocast to float32" list has pow): there eager's chain returns fp32 y
# for a 16-bit x, every op after the pow promoting to it.
_AUTOCAST_FP32_POW = {"cuda"}


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


def _autocast_out_dtype(x):
    """fp32 where autocast is on for x's device, runs pow in fp32 and x is 16-bit, else None."""
    dev = x.device.type
    if dev in _AUTOCAST_FP32_POW and torch.is_autocast_enabled(dev) and x.dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return None


class NewGELU(torch.nn.Module):
    """Drop-in for HF ``NewGELUActivation`` (``NewGELU()(x)``), with an optional bias argument.

    y has eager's type: x's, or under CUDA autocast fp32 for a 16-bit x (autocast runs the
    chain's pow in fp32). ``out_dtype`` sets it instead: ``NewGELU(torch.bfloat16)`` where y's
    one reader is a GEMM that autocast casts it back for (GPT-2's ``c_proj``), the cast then
    written by this kernel and made by nobody; a 16-bit out_dtype holds only while autocast
    runs in that type on x's device (outside it y is eager's)."""

    def __init__(self, out_dtype=None):
        super().__init__()
        self.out_dtype = out_dtype

    def forward(self, x, bias=None):
        dtype = _autocast_cast(x, self.out_dtype)  # a 16-bit out_dtype only under autocast to it
        if dtype is None:
            dtype = _autocast_out_dtype(x)
        return NewGELUFunction.apply(x, bias, dtype)
