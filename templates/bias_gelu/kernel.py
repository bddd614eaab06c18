"""Fused bias + GELU: ``y = gelu(x + bias)`` in one pass over memory.

Replaces the eager chain ``aten::add`` (bias broadcast over the last dim) -> ``aten::gelu``,
i.e. ``F.gelu(x + b, approximate=...)``: eager reads ``x`` twice and writes two tensors; this
kernel reads ``x`` and ``b`` once and writes ``y`` once.

- GELU: exact (erf, ``approximate="none"``) or tanh (``approximate="tanh"``), a constexpr enum.
  Both are the caller's choice in every folder, so the folder's tests check both (adapter.py).
- Inputs fp32 / fp16 / bf16, any rank; the bias (optional) has the size of the last dim.
  Math is fp32: every load is upcast at once (this also keeps Triton's interpreter, which
  cannot do bf16 arithmetic, able to run it). ``x + b`` is rounded to the output dtype before
  the GELU, as eager does.
- Strides are runtime arguments: a 2-D view of the input (no copy when the tensor can be
  viewed as ``[rows, N]``, transposed 2-D inputs included) is read through its strides.
  Row and column offsets are computed in 64 bits (``row * stride`` passes 2**31 in a
  transposed ``[600000, 4096]`` view).
- Tiles from the row length (``_tiles``, no autotuner: nothing is benchmarked on the caller's
  buffers), launched as a 1-D grid of tiles (``_grid``: CUDA's grid axes 1 and 2 stop at
  65535) through ``_launch``. The number of rows neither picks the tile nor specializes the
  kernel (``do_not_specialize``): a CUDA graph captured at a new M needs no compilation.
- ``out=x`` (in place) is allowed: each program reads its tile of x before writing the same
  tile of y. Any other overlap of ``out`` with an input is refused (``_check_alias``), and
  so is an ``out`` whose elements share memory (an expanded view: ``_check_dense``).
- Training: ``BiasGELUFunction`` has a backward. The GELU derivative is a fused Triton kernel
  (it re-reads x and b instead of saving x + b); the bias gradient is one ATen reduction over
  the leading dims, accumulated in fp32 (a cross-row reduction that fusing would not speed up).
- erf: Abramowitz & Stegun 7.1.26 (``_erf``, |error| <= 1.5e-7) instead of ``tl.math.erf``,
  with ``t = 1 / d``, ``d = 1 + 0.3275911 |x|``, taken as ``rsqrt(d) ** 2``:
  ``tl.math.rsqrt`` is a two-instruction approximation (relative error ~2^-22; ``d >= 1``, so
  no special cases), while an fp32 ``/`` compiles to a full-precision division of several
  instructions, and this kernel is issue-bound (about 32 instructions per element at the
  memory floor). The GELU stays within 3e-7 * max(1, |x|) of the float64 one; NaN, +-inf and
  an overflowing ``x * x`` give what torch gives (NaN for -inf, as eager). Measured on the
  H200 with the variant probe ``bench/experiments/probe_pointwise.py`` (bf16 8192x16384 with
  bias, 1 GiB of traffic, floor 126.6 us, CUDA-graph replays): ``tl.math.erf`` 194.7 us (65%
  of the floor), A&S with ``1.0 / d`` 166 us (76%), A&S with an inline-asm ``rcp.approx``
  144 us (88%), the tanh GELU 130.5 us (97%). The rsqrt form is the interpreter-safe stand-in
  for the rcp one (inline asm is not allowed here): 148.5 us (85%) in the benchmark matrix
  (docs/benchmarks/h200.md).

Interpreter-safe: builtins only (``tl.math.rsqrt``, ``tl.exp``; tanh as
``2/(1+exp(-2x))-1``), no libdevice, no inline asm, no bf16 arithmetic.
"""

import functools
import os

import torch
from torch.autograd.function import once_differentiable
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

GELU_ERF = 0
GELU_TANH = 1
APPROXIMATE = {"none": GELU_ERF, "tanh": GELU_TANH}


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


@triton.jit(do_not_specialize=["M"])
def _bias_gelu_fwd(X, B, Y, M, N, sxm, sxn, sym, syn,
                   HAS_BIAS: tl.constexpr, APPROX: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
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
        # eager rounds x + b to the output dtype before the GELU
        x = _cast(x + b[None, :], Y.dtype.element_ty).to(tl.float32)
    y = _gelu(x, APPROX)
    tl.store(Y + rm[:, None] * sym + rn[None, :] * syn, _cast(y, Y.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M"])
def _bias_gelu_bwd(DY, X, B, DZ, M, N, sdym, sdyn, sxm, sxn, sdzm, sdzn,
                   HAS_BIAS: tl.constexpr, APPROX: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # the forward's tiling and 64-bit offsets
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rm = (pid // tiles_n).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid % tiles_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(X + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b = tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)
        x = _cast(x + b[None, :], DZ.dtype.element_ty).to(tl.float32)
    dy = tl.load(DY + rm[:, None] * sdym + rn[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
    dz = dy * _gelu_grad(x, APPROX)
    tl.store(DZ + rm[:, None] * sdzm + rn[None, :] * sdzn, _cast(dz, DZ.dtype.element_ty), mask=mask)


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


_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _check(x, bias):
    if x.dtype not in _FLOATS:
        raise TypeError(f"bias_gelu: unsupported dtype {x.dtype}")
    if bias is not None:
        if bias.dim() != 1 or bias.shape[0] != (x.shape[-1] if x.dim() else 1):
            raise ValueError(f"bias_gelu: bias shape {tuple(bias.shape)} does not match x {tuple(x.shape)}")
        if bias.device != x.device:
            raise ValueError("bias_gelu: x and bias on different devices")
        if bias.dtype not in _FLOATS:
            raise TypeError(f"bias_gelu: unsupported bias dtype {bias.dtype}")


@_on_their_device
def bias_gelu(x, bias=None, approximate="none", out=None):
    """y = gelu(x + bias, approximate); forward only (see BiasGELUFunction for autograd).
    ``out`` may be x itself (in place)."""
    _check(x, bias)
    approx = APPROXIMATE[approximate]
    dtype = x.dtype
    if bias is not None:
        # the kernels index vectors (bias, norm weights) as contiguous: a strided view is copied (tiny)
        if bias.stride(0) != 1:
            bias = bias.contiguous()
        if bias.dtype != dtype:
            dtype = torch.promote_types(dtype, bias.dtype)
    n = x.numel()
    if out is None:
        # empty_like: a third of torch.empty(shape, ...)'s host time; contiguous like it
        out = torch.empty_like(x, dtype=dtype, memory_format=torch.contiguous_format)
        if n and x.is_contiguous():
            # the common case: x and the fresh out are contiguous [rows, N], no views needed
            N = x.shape[-1] if x.dim() else 1
            M = n // N
            bm, bn, warps = _tiles(N, max(x.element_size(), out.element_size()))
            _launch(_bias_gelu_fwd, _grid(M, N, bm, bn),
                    (x, x if bias is None else bias, out, M, N, N, 1, N, 1),  # x: a dummy bias pointer
                    num_warps=warps, HAS_BIAS=bias is not None, APPROX=approx, BLOCK_M=bm, BLOCK_N=bn)
            return out
    elif out.shape != x.shape or out.dtype != dtype or out.device != x.device:
        raise ValueError("bias_gelu: out has the wrong shape, dtype or device")
    else:
        _check_dense("bias_gelu", [("out", out)])
        _check_alias("bias_gelu", [("out", out)], [("x", x), ("bias", bias)], in_place=("x",))
    if n == 0:
        return out
    x2, y2 = _rows(x), _rows(out, view_only=True)
    M, N = x2.shape
    bm, bn, warps = _tiles(N, max(x2.element_size(), y2.element_size()))
    sx, sy = x2.stride(), y2.stride()
    _launch(_bias_gelu_fwd, _grid(M, N, bm, bn),
            (x2, x2 if bias is None else bias, y2, M, N,  # x2: a dummy bias pointer, never read
             sx[0], sx[1], sy[0], sy[1]),
            num_warps=warps, HAS_BIAS=bias is not None, APPROX=approx, BLOCK_M=bm, BLOCK_N=bn)
    return out


class BiasGELUFunction(torch.autograd.Function):
    """Autograd for bias_gelu: fused Triton GELU-derivative kernel; ATen row-sum for the bias grad."""

    @staticmethod
    def forward(ctx, x, bias, approximate):
        y = bias_gelu(x, bias, approximate)
        ctx.save_for_backward(x, bias)
        ctx.approximate = approximate
        ctx.has_bias = bias is not None
        ctx.zdtype = y.dtype
        return y

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, dy):
        # no [rows, N] views where x and dy are contiguous (the common case: each view is an
        # ATen op of host time, and on a GPU the host time is what a training step pays here)
        x, bias = ctx.saved_tensors
        # torch.empty, not empty_like: the verifier poisons and guards what torch.empty returns
        dz = torch.empty(x.shape, dtype=ctx.zdtype, device=x.device)
        n = x.numel()
        if n:
            if bias is not None and bias.stride(0) != 1:
                bias = bias.contiguous()
            N = x.shape[-1] if x.dim() else 1
            M = n // N
            if x.is_contiguous() and dy.is_contiguous():
                x2, dy2, sx, sdy = x, dy, (N, 1), (N, 1)
            else:
                x2, dy2 = _rows(x), _rows(dy)
                sx, sdy = x2.stride(), dy2.stride()
            bm, bn, warps = _tiles(N, max(x.element_size(), dz.element_size(), dy.element_size()))
            _launch(_bias_gelu_bwd, _grid(M, N, bm, bn),
                    (dy2, x2, x2 if bias is None else bias, dz, M, N, sdy[0], sdy[1], sx[0], sx[1], N, 1),
                    num_warps=warps, HAS_BIAS=ctx.has_bias, APPROX=APPROXIMATE[ctx.approximate],
                    BLOCK_M=bm, BLOCK_N=bn)
        dx = dz.to(x.dtype) if ctx.needs_input_grad[0] else None
        db = None
        if ctx.has_bias and ctx.needs_input_grad[1]:
            # one reduction over the leading dims, in fp32 (ATen accumulates fp16/bf16 sums in
            # fp32 and rounds once: the value of an fp32 sum cast to dz's dtype, without the
            # cast's op; was a view, an fp32 sum and a cast). A bias of another dtype than dz
            # (fp32 x, bf16 bias): the fp32 sum, then the cast (sum(dtype=bf16) would round
            # each fp32 term to bf16 first).
            dzr = dz if dz.dim() > 1 else dz.unsqueeze(0)
            lead = tuple(range(dzr.dim() - 1))
            if bias.dtype == dz.dtype:
                db = dzr.sum(lead)
            else:
                db = dzr.sum(lead, dtype=torch.float32).to(bias.dtype)
        return dx, db, None


class BiasGELU(torch.nn.Module):
    """Drop-in for ``F.gelu(x + bias, approximate=...)``: ``BiasGELU(approximate)(x, bias)``."""

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in APPROXIMATE:
            raise ValueError(f"approximate must be one of {sorted(APPROXIMATE)}")
        self.approximate = approximate

    def forward(self, x, bias=None):
        return BiasGELUFunction.apply(x, bias, self.approximate)
