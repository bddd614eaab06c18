"""The one source of the helpers every kernel template carries.

Each generated kernel folder is standalone (one ``kernel.py`` a user can copy beside a model),
so the templates hold copies of these helpers. The copies are generated, not kept by hand:
each block below, from ``# --- fa:shared NAME`` to ``# --- fa:end NAME ---``, appears verbatim
in every template that carries it, and ``go test ./templates`` fails when a copy differs;
``go test ./templates -run TestSharedBlocks -update`` rewrites the copies from this file.
Edit here, never in a template.

This file is importable (tests: templates/test_shared.py); the names it uses from the
template around a block (``INTERPRET``, ``torch``, ``triton``, ``tl``) are defined the same
way here.
"""

import functools
import os

import torch
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


# --- fa:shared gemm ---
# The GEMM templates' tiles (linear_gelu, layernorm_linear) and how one is chosen, without
# @triton.autotune. A tile is (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps). It is tuned
# once per bucket: M rounded up to a power of two (at least 16, so that every decode M of 1-16
# is one bucket), N, K, the dtype, the device and the kernel with its flags. Tuning times the
# candidates' GPU time (_gemm_time_ms: a CUDA-graph replay, as bench times a call) with the
# caller's inputs (read only) and a scratch output, never the caller's output; the winner is
# then launched directly (_gemm_launch, the compiled kernel as _launch launches it). A bucket
# first met while the current stream captures a CUDA graph gets the first candidate untimed
# (timing would synchronize the stream and break the capture); it is tuned at its first call
# outside a capture. Under the interpreter: one small tile.
# Candidates: the winners of the H200 probes (bench/experiments/probe_gemm.py,
# probe_tiles_gemm.py), pruned by shared memory and K; decode-size M takes the small-M list,
# whose narrow BLOCK_N tiles spread a weight-bound GEMM over more programs. The first
# candidate of each list is the untimed choice. A kernel with a library path (the cuBLAS GEMM
# through ATen, then its epilogue as one pointwise pass: where the Triton GEMM loses to
# cuBLAS by more than the pass costs) passes library=True: GEMM_LIBRARY joins the timed
# candidates, and under the interpreter every other bucket takes it (buckets 32, 128, ...),
# so that the verifier's cases run both paths. A bucket whose fastest path on the GPU is of one
# kind (a tile, or the library path) also times the host work a call of it, of the other
# kind's fastest and of the caller's alternatives to the fastest tile (alts: the same tile on
# a kernel that is cheaper to launch; _gemm_host_us); where one of these costs less a call in
# eager use, max(host, GPU) (calls back to back run at the slower of the two), by a tenth at
# least, it is kept for calls made outside a CUDA graph capture and torch.compile
# (_GEMM_EAGER). On the H200 the library path (ATen's dispatch of the GEMM, then a second
# launch) took 45-73 us a call in eager use where a tile's one Triton launch took 28-34
# (bench, 13 generic GEMM heads); a TMA kernel's launch (three or four descriptors) 3.6-4.7
# us more than the pointer kernel's of the same tile, and layernorm_linear's statistics pass
# 17 (bench/experiments/probe_catalog_host.py).
import threading  # noqa: E402
import time  # noqa: E402

import triton.testing  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

GEMM_TILES_LARGE_M = [(128, 128, 64, 3, 4), (128, 256, 64, 3, 8), (128, 64, 64, 4, 4), (64, 128, 32, 4, 4),
                      (64, 64, 64, 4, 4), (128, 64, 32, 4, 4)]
GEMM_TILES_SMALL_M = [(16, 32, 256, 4, 4), (16, 64, 128, 4, 4), (16, 32, 128, 4, 4), (64, 32, 128, 4, 4),
                      (64, 64, 128, 4, 4), (16, 128, 64, 4, 4)]
GEMM_SMALL_M = 64
GEMM_INTERP_TILE = (16, 32, 32, 1, 4)
GEMM_LIBRARY = (0, 0, 0, 0, 0)  # not a tile: the caller's library path
_GEMM_GROUP_M = 4 if INTERPRET else 8
_GEMM_SMEM = 232448  # H100/H200 opt-in shared memory per block
# _GEMM_TUNE: time a new bucket's candidates (the GPU); False: its first candidate, untimed
# (GPU test runs: one compile per kernel instead of one per candidate); the interpreter runs
# GEMM_INTERP_TILE unless a test turns tuning on
_GEMM_TUNE = not INTERPRET
_GEMM_TUNED = {}
# _GEMM_HOST: tuning also times host work a call (the GPU; a test may turn it on with its own
# _gemm_host_us); _GEMM_EAGER: the buckets whose eager-use path differs from _GEMM_TUNED's
_GEMM_HOST = not INTERPRET
_GEMM_EAGER = {}
# (host code here avoids triton.cdiv and triton.next_power_of_2, constexpr functions in
# Triton 3.6 that cost microseconds per call, and keys on id(kernel): hashing a JITFunction
# hashes its source)
# fp32 operands on the GPU: tf32x3 (three TF32 products, about fp32's accuracy: 2.8e-6 against
# fp64 at 4096x2048x8192 where eager cuBLAS gives 1.2e-5, in a third of ieee's time on the
# H200); the interpreter multiplies in fp32 whatever it is told
_F32_DOT = tl.constexpr("ieee" if INTERPRET else "tf32x3")


def _gemm_candidates(bucket, K, elem_bytes):
    """The tiles worth timing for an M bucket: those whose pipelined operand tiles fit shared
    memory and whose BLOCK_K does not exceed K rounded up to a power of two (at least 32)."""
    tiles = GEMM_TILES_SMALL_M if bucket <= GEMM_SMALL_M else GEMM_TILES_LARGE_M
    kmax = max(32, 1 << (K - 1).bit_length())
    kept = [t for t in tiles
            if t[2] <= kmax and (t[3] * (t[0] + t[1]) * t[2] + t[0] * t[1]) * elem_bytes <= _GEMM_SMEM]
    return kept or [(64, 64, 32, 2, 4)]


def _gemm_tile(kernel, M, N, K, x, flags, run, library=False, alts=None, call=None):
    """The tile for a launch of kernel on an [M, K] x [K, N] product of x's dtype and device,
    with the kernel's flags (a tuple): the bucket's tuned tile; on the bucket's first call, the
    candidates timed with ``run(tile)`` (one launch on a scratch output) and the fastest kept;
    while the stream captures a CUDA graph, the first candidate, not kept. library: the
    caller has a library path, ``run(GEMM_LIBRARY)``, which competes with the tiles (and may
    be returned); flags must then say whether it is open to the call. alts: the caller's
    eager-use alternatives to a tile, ``alts(tile)`` -> candidates that compute what the tile
    computes at a lower host cost a call (a tile tuple with a sixth element the caller's code
    for how it runs: another kernel of the same tile), timed with the tile's kind's fastest
    for eager use only (never chosen for GPU time). Under the interpreter (untuned), buckets
    take GEMM_INTERP_TILE or the library path, and an M of M % 5 == 4 outside the library's
    buckets the tile's first alternative (the verifier's 4-, 9- and 14-row cases among them),
    so that the verifier's shapes run every path. call: ``call(t)``, a whole call of the
    caller's public function with candidate t (on fresh outputs, the caller's inputs): where
    given, the host work a call is timed on it, so that the wrapper's own work (its checks,
    plan and allocations, the same for every path) counts as a call pays it: the GPU time of
    a path weighs against the host work of a whole call, not of its launches alone. Inside
    ``call``, _GEMM_FORCED gives t (this thread's calls only)."""
    forced = _GEMM_FORCED.__dict__.get("t")
    if forced:
        return forced[-1]
    bucket = 16 if M <= 16 else 1 << (M - 1).bit_length()
    key = (id(kernel), bucket, N, K, x.dtype, x.get_device(), flags)  # id: hashing a JITFunction costs more
    tile = _GEMM_TUNED.get(key)
    if tile is not None:
        if key in _GEMM_EAGER and not (torch.cuda.is_current_stream_capturing() or torch.compiler.is_compiling()):
            return _GEMM_EAGER[key]
        return tile
    if not _GEMM_TUNE and INTERPRET:
        if library and bucket.bit_length() % 2 == 0:
            return GEMM_LIBRARY
        if alts is not None and M % 5 == 4:
            return (alts(GEMM_INTERP_TILE) or [GEMM_INTERP_TILE])[0]
        return GEMM_INTERP_TILE
    cands = _gemm_candidates(bucket, K, x.element_size()) + ([GEMM_LIBRARY] if library else [])
    if not _GEMM_TUNE or torch.cuda.is_current_stream_capturing():
        return cands[0]
    best, best_ms, times = cands[0], float("inf"), {}

    def timed(t):
        try:
            times[t] = _gemm_time_ms(lambda: run(t))
        except Exception:  # noqa: BLE001 - a tile that does not compile here (resources) is skipped
            return None
        return times[t]

    if len(cands) > 1:
        for t in cands:
            ms = timed(t)
            if ms is not None and ms < best_ms:
                best, best_ms = t, ms
    if best_ms == float("inf"):
        times[best] = 0.0  # one candidate, untimed: its cost a call is its host work
    _GEMM_TUNED[key] = best
    # eager use: the fastest of the other kind and the tiles' alternatives, where a call of one
    # costs less, host and GPU together
    if not _GEMM_HOST:
        return best
    other = [t for t in times if (t is GEMM_LIBRARY) != (best is GEMM_LIBRARY)]
    contenders = [min(other, key=times.get)] if library and other else []
    tiles = [t for t in times if t is not GEMM_LIBRARY]
    if alts is not None and tiles:
        contenders += [t for t in alts(min(tiles, key=times.get)) if timed(t) is not None]
    if not contenders:
        return best
    try:
        host = _gemm_host_us({t: (lambda t=t: _gemm_forced(call, t)) if call is not None else (lambda t=t: run(t))
                              for t in [best] + contenders})
    except Exception:  # noqa: BLE001 - the GPU's choice stands (this is the caller's call)
        return best

    def cost(t):  # calls back to back run at the slower of the host and the GPU
        return max(host[t], 1e3 * times[t])

    alt = min(contenders, key=cost)
    # (by a tenth at least: host figures are noisy, and the GPU's choice is the default)
    if cost(alt) < 0.9 * cost(best):
        _GEMM_EAGER[key] = alt
        return alt  # this call is one (tuning waits for no capture)
    return best


# the candidate a whole call timed by _gemm_tile's call runs: a stack per thread (another
# thread's calls meanwhile keep their own paths: a forced library path would not fit a call
# whose output is not contiguous rows)
_GEMM_FORCED = threading.local()


def _gemm_forced(call, t):
    """call(t) with every _gemm_tile lookup inside it, in this thread, giving t."""
    stack = _GEMM_FORCED.__dict__.setdefault("t", [])
    stack.append(t)
    try:
        call(t)
    finally:
        stack.pop()


_GEMM_HOST_ROUNDS = 5


def _gemm_host_us(fns):
    """Host work a call of each of fns (a dict: candidate -> call), in us: bursts of 10 calls
    started on an idle GPU (the calls queued, never waited for), the candidates interleaved
    round by round (the host's speed drifts by tens of percent over seconds); the medians."""
    got = {t: [] for t in fns}
    for fn in fns.values():
        fn()
    for _ in range(_GEMM_HOST_ROUNDS):
        for t, fn in fns.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(10):
                fn()
            got[t].append((time.perf_counter() - start) * 1e5)  # / 10 calls, in us
    torch.cuda.synchronize()
    return {t: sorted(v)[len(v) // 2] for t, v in got.items()}


_GEMM_SWEEP_BYTES = 256 << 20  # the L2 sweep before each timed replay: over 4x the H200's L2
_GEMM_REPLAYS = 20


def _gemm_time_ms(fn):
    """fn's GPU time in ms, as bench times a call: fn captured in a CUDA graph, the graph
    replayed _GEMM_REPLAYS times, each after a read sweep of a buffer larger than L2 (L2 cold,
    and no dirty line left whose write-back would land in the call), CUDA events around the
    replay alone; the median. The host's work for fn stays out of the window: triton's
    do_bench times the call itself, and the library path's host work (ATen's dispatch, two
    launches) then counted as GPU time: 75-98 us for a chain whose graph replay took 17.2
    (bench/experiments/probe_gemm_tuner.py on the H200), so the tuner kept Triton tiles 2-9 us
    slower. Where fn cannot be captured (the capture raises), do_bench times it instead."""
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):  # the warm-up (a first launch compiles) off the capture
        fn()
    cur.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            fn()
    except Exception:  # noqa: BLE001 - not capturable here: the call itself, timed
        torch.cuda.synchronize()
        return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")
    sweep = torch.empty(_GEMM_SWEEP_BYTES // 4, dtype=torch.float32, device=cur.device)
    sink = torch.empty((), dtype=torch.float32, device=cur.device)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(_GEMM_REPLAYS)]
    graph.replay()  # the replay's own first run (uploads the graph)
    for start, end in events:
        torch.sum(sweep, 0, out=sink)
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    ms = sorted(start.elapsed_time(end) for start, end in events)
    return ms[len(ms) // 2]


def _gemm_grid(M, N, tile):
    """One program per output tile, all on grid axis 0 (up to 2**31 - 1 programs); 3-D, as
    _gemm_launch takes it."""
    return ((M + tile[0] - 1) // tile[0] * ((N + tile[1] - 1) // tile[1]), 1, 1)


def _gemm_rows(shape, strides):
    """(rows, row stride, column stride) of a tensor of this shape and strides seen as
    [rows, shape[-1]]: the strides ``t.view(-1, shape[-1])`` would have, computed without
    making the view (about a microsecond of host time), or None where no such view exists
    (leading dims that do not merge). The kernels take the tensor itself with these strides;
    its data_ptr is row 0's. With no leading dim of size > 1, the row stride is one row's
    extent (any value is right for one row)."""
    rows, row, span = 1, None, None  # span: the stride the next outer dim must have to merge
    for n, s in zip(shape[-2::-1], strides[-2::-1]):
        if n == 0:
            return 0, 0, strides[-1]
        rows *= n
        if n == 1:
            continue
        if span is None:
            row = s
        elif s != span:
            return None
        span = s * n
    cs = strides[-1] if strides else 1
    return rows, (shape[-1] * cs if row is None else row), cs


_TMA_DTYPES = (torch.float16, torch.bfloat16)


def _tma_layout(dtype, *rows):
    """Whether [rows, cols] operands of dtype with these (row stride, column stride) pairs can
    be TMA descriptors: fp16/bf16 only (fp32 operands take the pointer kernel: TMA with fp32
    operands measured 20-50x slower on the H200), a contiguous last dim and a 16-byte aligned
    row stride. Also needed, checked per call by the caller: 16-byte aligned base addresses
    and rows > 0 (the callers return before launching for M = 0 or N = 0)."""
    if dtype not in _TMA_DTYPES:
        return False
    for rs, cs in rows:
        if cs != 1 or (rs * 2) % 16:
            return False
    return True


def _desc(t, shape, strides, block_shape):
    """A TMA tensor descriptor of t's [rows, cols] (shape and strides as lists: t's own dims
    may be more, _gemm_rows) with the tile's block shape, built without TensorDescriptor's
    per-call validation (_tma_layout and the caller's alignment check did it)."""
    d = object.__new__(TensorDescriptor)
    d.base, d.shape, d.strides, d.block_shape, d.padding = t, shape, strides, block_shape, "zero"
    return d


def _gemm_launch(kernel, grid, descs, args, tile, **constexprs):
    """``kernel[grid](*descs, *args, **constexprs)`` with the tile's BLOCK_M, BLOCK_N, BLOCK_K,
    GROUP_M, num_stages and num_warps (BLOCK_M, BLOCK_N, BLOCK_K and GROUP_M are the kernel's
    last parameters, after constexprs); descs: the leading TMA tensor descriptors, keyed on
    what Triton specializes them on (dtype, block shape; their base, shape and strides are
    read at every launch); grid: 3-D (_gemm_grid). After the first call of a specialization
    its compiled kernel is launched directly."""
    bm, bn, bk, stages, warps = tile
    if INTERPRET:
        kernel[grid](*descs, *args, num_warps=warps, num_stages=stages, **constexprs,
                     BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=_GEMM_GROUP_M)
        return
    consts = tuple(constexprs.values())
    device = torch._C._cuda_getDevice()
    key = (id(kernel), tile, consts, device, _spec_key(args),
           *[(d.base.dtype, *d.block_shape) for d in descs])
    entry = _COMPILED.get(key)
    if entry is not None:
        direct = _TMA_LAUNCH.get(key) if descs else None
        if direct is None or _HOOKS is None or _HOOKS[0].calls or _HOOKS[1].calls:
            _run(entry, grid, (*descs, *args, *consts, bm, bn, bk, _GEMM_GROUP_M), device)
            return
        launch, metas = direct
        maps = []
        for d, meta in zip(descs, metas):
            maps += _tma_map(d, meta)
        launch(grid[0], grid[1], grid[2], torch._C._cuda_getCurrentRawStream(device), *entry[1], *maps,
               *args, *consts, bm, bn, bk, _GEMM_GROUP_M)
        return
    consts = dict(constexprs, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=_GEMM_GROUP_M)
    names = kernel.arg_names[len(descs) + len(args):]
    if list(consts) != names:
        raise TypeError(f"_gemm_launch: constexprs {list(consts)}, want {names}")
    entry = _COMPILED[key] = _compiled(
        kernel[grid](*descs, *args, num_warps=warps, num_stages=stages, **consts), kernel)
    direct = _tma_direct(entry, len(descs)) if descs else None
    if direct is not None:
        _TMA_LAUNCH[key] = direct


# Host TMA descriptors, launched without Triton's per-launch encoding. Triton 3.6 wraps the C
# launch function of a kernel that takes descriptors in a Python loop over every argument
# that encodes each descriptor (cuTensorMapEncodeTiled through fill_tma_descriptor) at every
# launch. _gemm_launch calls the C function itself with the encoded descriptors (each a
# CUtensorMap and the shape and strides that follow it), which _tma_map keeps per base
# address, shape, strides and the kernel's descriptor metadata: a pure function of these, so
# a kept one is the encoding a new one would be (activations from PyTorch's caching allocator
# come back at the same addresses call after call).
_TMA_LAUNCH = {}  # _gemm_launch's _COMPILED key -> _tma_direct's (C launch, metadata)
_TMA_MAPS = {}
_TMA_MAPS_MAX = 4096
_TMA_ENCODE = []  # (fill_tma_descriptor, Triton's device-to-host dtype codes), found once


def _tma_direct(entry, ndesc):
    """(C launch function, per descriptor its metadata as a tuple) of a _compiled entry whose
    launcher is Triton 3.6's descriptor-encoding wrapper around the C function, its
    descriptors the kernel's first ndesc arguments; None where the launcher is anything else
    (another Triton: the entry's own launch encodes them)."""
    inner = entry[0]
    if not _TRITON_3_6 or getattr(inner, "__name__", None) != "inner" or not inner.__closure__:
        return None
    cells = dict(zip(inner.__code__.co_freevars, (c.cell_contents for c in inner.__closure__)))
    metas, where, launch = cells.get("tensordesc_meta"), cells.get("tensordesc_indices"), cells.get("launcher")
    if launch is None or where != set(range(ndesc)) or not metas or len(metas) != ndesc or None in metas:
        return None
    if not _TMA_ENCODE:
        from triton.backends.nvidia import driver as nvidia
        _TMA_ENCODE.extend((triton.runtime.driver.active.utils.fill_tma_descriptor,
                            nvidia.TMA_DTYPE_DEVICE_TO_HOST))
    return launch, tuple((m["swizzle"], m["elem_size"], m["elem_type"], tuple(m["block_size"]), m["fp4_padded"])
                         for m in metas)


def _tma_map(d, meta):
    """The launch arguments of descriptor d for a kernel whose metadata for it is meta (a
    tuple, _tma_direct's): its CUtensorMap, shape and strides, as Triton 3.6's launcher makes
    them (make_tensordesc_arg), encoded once per base address, shape, strides and meta."""
    ptr = d.base.data_ptr()
    key = (ptr, *d.shape, *d.strides, d.padding, meta)
    got = _TMA_MAPS.get(key)
    if got is None:
        swizzle, elem_size, elem_type, block, fp4 = meta
        shape = list(d.shape)
        if fp4:
            shape[-1] *= 2
        fill, codes = _TMA_ENCODE
        got = (fill(ptr, swizzle, elem_size, codes[elem_type], list(block), shape, list(d.strides),
                    1 if d.padding == "nan" else 0), *shape, *d.strides)
        if len(_TMA_MAPS) >= _TMA_MAPS_MAX:
            _TMA_MAPS.clear()
        _TMA_MAPS[key] = got
    return got


@triton.jit
def _tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's output tile, in grouped order: consecutive programs share A rows (L2)."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_n
    first_m = (pid // in_group) * GROUP_M
    group_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m
    return pid_m, pid_n
# --- fa:end gemm ---


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

# --- fa:shared colsum ---
# A bias gradient, the sum of an [M, N] output gradient's rows, in two launches: programs of
# COLSUM_ROWS rows x COLSUM_BLOCK_N columns write fp32 partial sums [ceil(M / COLSUM_ROWS), N]
# (a [COLSUM_BLOCK_M, COLSUM_BLOCK_N] accumulator over their rows, reduced once), which
# _part_sums adds up in the gradient's type. Where ATen's dy.sum(0) runs its reduce_kernel at a
# fraction of the bandwidth (an H100, bench/experiments/probe_colsum.py, 2026-12-05, us:
# 4096x768 bf16 15.6 -> 10.0, 4096x2304 19.7 -> 15.4, 16384x1024 37.2 -> 20.0; torch.compile
# 10.0, 13.8, 27.0). The row count is not specialized (it follows the batch).
COLSUM_ROWS = 32 if INTERPRET else 128
COLSUM_BLOCK_M = 8 if INTERPRET else 32
COLSUM_BLOCK_N = 16 if INTERPRET else 64


@triton.jit(do_not_specialize=["M"])
def _col_partials(DY, PART, M, N, sm, sn, ROWS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program (g, j): rows [g * ROWS, (g + 1) * ROWS) of DY's columns [j * BLOCK_N, ...)
    added up into PART[g, cols] (fp32)."""
    g = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    cm = cols < N
    acc = tl.full([BLOCK_M, BLOCK_N], 0, tl.float32)
    for i in tl.static_range(0, ROWS, BLOCK_M):
        rows = g * ROWS + i + tl.arange(0, BLOCK_M)
        acc += tl.load(DY + rows[:, None] * sm + cols[None, :] * sn, mask=(rows < M)[:, None] & cm[None, :],
                       other=0.0).to(tl.float32)
    tl.store(PART + g * N + cols, tl.sum(acc, axis=0), mask=cm)


def _col_sums(dy, out):
    """out = dy.sum(0) in out's type: dy [M, N] with any strides, out a contiguous [N]. Two
    launches (_col_partials, then _part_sums); out zeroed where M is 0."""
    M, N = dy.shape
    if M == 0 or N == 0:
        return out.zero_()
    G = -(-M // COLSUM_ROWS)
    part = torch.empty(G, N, dtype=torch.float32, device=dy.device)
    _launch(_col_partials, (G, -(-N // COLSUM_BLOCK_N)), (dy, part, M, N, dy.stride(0), dy.stride(1)),
            num_warps=4, ROWS=COLSUM_ROWS, BLOCK_M=COLSUM_BLOCK_M, BLOCK_N=COLSUM_BLOCK_N)
    _part_sums(part, [out])
    return out
# --- fa:end colsum ---
