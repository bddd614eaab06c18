"""Fused SwiGLU: ``y = silu(gate) * up`` in one pass over memory.

Replaces ``aten::silu`` -> ``aten::mul`` (LLaMA-style MLPs: ``down(silu(gate(x)) * up(x))``):
eager writes ``silu(gate)`` and reads it back; this kernel reads gate and up once and writes y.
gate and up are often the two halves of one projection (``chunk``/``split``): they are read
through their own strides, so those non-contiguous views need no copy.

- fp32 / fp16 / bf16 in and out (the output dtype is ``promote_types(gate, up)``), fp32 math;
  ``silu(gate)`` is rounded to gate's dtype before the multiply, as eager does. Row and column
  offsets in 64 bits.
- Tiles from the row length (``_tiles``, no autotuner), a 1-D grid of tiles (``_grid``:
  CUDA's grid axes 1 and 2 stop at 65535: ``[1, n]`` with n = 2**26 is 65536 column blocks
  of 1024), launched through ``_launch``; M is not specialized (a new number of rows needs
  no compilation, in a CUDA-graph capture too).
- ``out=gate`` or ``out=up`` (in place) is allowed: each program reads its tile of gate and
  up before writing the same tile of y. gate and up may be the two halves of one buffer
  (``chunk``): their rows interleave without sharing an element, which ``_disjoint`` tells
  from a real overlap. Any other overlap is refused, and so is an ``out`` whose elements
  share memory (an expanded view).
- Training: ``SwiGLUFunction`` has a fused Triton backward that recomputes ``sigmoid(gate)``
  (only gate and up are saved) and writes d_gate and d_up in one pass.

Interpreter-safe: sigmoid as ``1/(1+exp(-x))``, builtins only, no bf16 arithmetic.
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


@triton.jit(do_not_specialize=["M"])
def _swiglu_fwd(G, U, Y, M, N, sgm, sgn, sum_, sun, sym, syn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # tile t of a 1-D grid: row block t // tiles_n, column block t % tiles_n; rows and columns
    # in 64 bits, since row * stride and column * stride can pass 2**31
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rm = (pid // tiles_n).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid % tiles_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    g = tl.load(G + rm[:, None] * sgm + rn[None, :] * sgn, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + rm[:, None] * sum_ + rn[None, :] * sun, mask=mask, other=0.0).to(tl.float32)
    s = _cast(g / (1.0 + tl.exp(-g)), G.dtype.element_ty).to(tl.float32)  # eager rounds silu(g)
    tl.store(Y + rm[:, None] * sym + rn[None, :] * syn, _cast(s * u, Y.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M"])
def _swiglu_bwd(DY, G, U, DG, DU, M, N, sdym, sdyn, sgm, sgn, sum_, sun,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # the forward's tiling and 64-bit offsets; DG and DU are contiguous [M, N]
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rm = (pid // tiles_n).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid % tiles_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    dy = tl.load(DY + rm[:, None] * sdym + rn[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + rm[:, None] * sgm + rn[None, :] * sgn, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + rm[:, None] * sum_ + rn[None, :] * sun, mask=mask, other=0.0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-g))
    silu = _cast(g * sig, G.dtype.element_ty).to(tl.float32)
    du = dy * silu
    dg = dy * u * sig * (1.0 + g * (1.0 - sig))
    off = rm[:, None] * N + rn[None, :]
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


def _check(gate, up):
    for t in (gate, up):
        if t.dtype not in _FLOATS:
            raise TypeError(f"swiglu: unsupported dtype {t.dtype}")
    if gate.shape != up.shape:
        raise ValueError(f"swiglu: gate {tuple(gate.shape)} and up {tuple(up.shape)} differ in shape")
    if gate.device != up.device:
        raise ValueError("swiglu: gate and up on different devices")


def _disjoint(a, b):
    """True when the 2-D views a and b provably share no element: same dtype and strides,
    rows of unit-stride columns that do not overlap each other (row stride >= N), and b's
    offset from a not within N - 1 elements of a multiple of the row stride below M rows. The
    two halves of ``proj.chunk(2, -1)`` are such a pair; anything else answers False (the
    alias check then decides)."""
    if a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride() or a.device != b.device:
        return False
    (M, N), (sm, sn) = a.shape, a.stride()
    if sn != 1 or (M > 1 and sm < N):
        return False
    d, r = divmod(b.data_ptr() - a.data_ptr(), a.element_size())
    if r:
        return False
    if M == 1 or sm == 0:
        return abs(d) >= N
    # a element (i, j) and b element (k, l) coincide when (i - k) * sm + (j - l) == -d, with
    # |i - k| < M and |j - l| < N: only the two row differences nearest d / sm can
    q = -d // sm
    return all(not (abs(k) < M and abs(-d - k * sm) < N) for k in (q, q + 1))


@_on_their_device
def swiglu(gate, up, out=None):
    """y = silu(gate) * up; forward only (see SwiGLUFunction for autograd). ``out`` may be gate
    or up itself (in place)."""
    _check(gate, up)
    dtype = gate.dtype
    if up.dtype != dtype:
        dtype = torch.promote_types(dtype, up.dtype)
    if out is None:
        # empty_like: a third of torch.empty(shape, ...)'s host time; contiguous like it
        out = torch.empty_like(gate, dtype=dtype, memory_format=torch.contiguous_format)
        n = out.numel()
        sg = None
        if n and gate.dim() == 2:
            # the common cases, no views needed: 2-D gate and up (the halves of a chunked
            # projection or not), their strides the kernel's; contiguous ones of any rank
            M, N = gate.shape
            sg, su = gate.stride(), up.stride()
        elif n and gate.is_contiguous() and up.is_contiguous():
            N = gate.shape[-1] if gate.dim() else 1
            M = n // N
            sg = su = (N, 1)
        if sg is not None:
            bm, bn, warps = _tiles(N, max(gate.element_size(), up.element_size(), out.element_size()))
            _launch(_swiglu_fwd, _grid(M, N, bm, bn),
                    (gate, up, out, M, N, sg[0], sg[1], su[0], su[1], N, 1),
                    num_warps=warps, BLOCK_M=bm, BLOCK_N=bn)
            return out
        g2, u2 = _rows(gate), _rows(up)
        y2 = _rows(out)
    elif out.shape != gate.shape or out.dtype != dtype or out.device != gate.device:
        raise ValueError("swiglu: out has the wrong shape, dtype or device")
    else:
        _check_dense("swiglu", [("out", out)])
        g2, u2 = _rows(gate), _rows(up)
        y2 = _rows(out, view_only=True)
        # in place on one half of a chunked projection: the other half interleaves with it
        # row by row without sharing an element; the alias check's byte ranges cannot tell
        ins = [(n, t) for n, t, t2 in (("gate", gate, g2), ("up", up, u2))
               if not (out.numel() and _disjoint(y2, t2))]
        _check_alias("swiglu", [("out", out)], ins, in_place=("gate", "up"))
    if gate.numel() == 0:
        return out
    M, N = g2.shape
    bm, bn, warps = _tiles(N, max(g2.element_size(), u2.element_size(), y2.element_size()))
    sg, su, sy = g2.stride(), u2.stride(), y2.stride()
    _launch(_swiglu_fwd, _grid(M, N, bm, bn),
            (g2, u2, y2, M, N, sg[0], sg[1], su[0], su[1], sy[0], sy[1]),
            num_warps=warps, BLOCK_M=bm, BLOCK_N=bn)
    return out


class SwiGLUFunction(torch.autograd.Function):
    """Autograd for swiglu: fused Triton backward (d_gate and d_up in one pass)."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return swiglu(gate, up)

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        dg = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
        du = torch.empty(up.shape, dtype=up.dtype, device=up.device)
        if gate.numel():
            g2, u2, dy2 = _rows(gate), _rows(up), _rows(dy)
            M, N = g2.shape
            bm, bn, warps = _tiles(N, max(g2.element_size(), u2.element_size(), dy2.element_size()))
            _launch(_swiglu_bwd, _grid(M, N, bm, bn),
                    (dy2, g2, u2, dg, du, M, N, dy2.stride(0), dy2.stride(1), g2.stride(0), g2.stride(1),
                     u2.stride(0), u2.stride(1)),
                    num_warps=warps, BLOCK_M=bm, BLOCK_N=bn)
        return dg, du


class SwiGLU(torch.nn.Module):
    """Drop-in for ``F.silu(gate) * up``: ``SwiGLU()(gate, up)``."""

    def forward(self, gate, up):
        return SwiGLUFunction.apply(gate, up)
