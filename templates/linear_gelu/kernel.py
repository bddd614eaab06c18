"""Linear + bias + GELU as one Triton GEMM with a fused epilogue: ``y = gelu(x @ W^T + b)``.

Replaces ``aten::linear`` (``addmm``) -> ``aten::gelu``: eager writes the GEMM output and reads
it back for the GELU; here the bias and the GELU are applied to the fp32 accumulator tile
before the single store (the Triton matmul tutorial's epilogue). The GEMM itself is a plain
tiled Triton GEMM: it can be slower than cuBLAS, so benchmark: fusing the epilogue saves one
read and one write of the output, which matters when M*N is large relative to the GEMM's
FLOPs (small K) or when the GEMM is memory-bound (small M, decode).

- Two GEMM mainloops, one epilogue: fp16/bf16 operands that meet TMA's alignment (2-D, last
  dim contiguous, 16-byte aligned base and row stride) load their tiles through TMA tensor
  descriptors (Hopper's bulk copy engine; zero-filled past the edges) and store the output
  tile with one TMA store; everything else (fp32, strided or unaligned operands) takes the
  pointer-based kernel. Measured on an H200 (bench/experiments/probe_gemm.py, bf16, CUDA-graph
  replays; cuBLAS = ``F.linear`` alone): 8192x4096x4096 TMA 467 us, pointers 506, cuBLAS 396;
  16x4096x4096 (decode) 23.1 / 30.4 / 20.3; 8192x1024x4096 157 / 155 / 118.5. A persistent
  variant (one program per SM, the persistent-matmul tutorial's loop) measured no better.
- Tiles BLOCK_M x BLOCK_N x BLOCK_K with grouped ("super-grouping") program ordering for L2
  reuse (GROUP_M), fp32 accumulation, one program per output tile on grid axis 0. No
  ``@triton.autotune``: the tile is timed once per bucket of shapes (M rounded up to a power
  of two, N, K, dtype, flags) on a scratch output, then launched directly (``_gemm_tile``,
  ``_gemm_launch``, shared with layernorm_linear: see the ``gemm`` block); a new M in a known
  bucket costs nothing, and a bucket first met during CUDA-graph capture takes an untimed
  tile. One fixed small tile under ``TRITON_INTERPRET=1``.
- A library path competes with the tiles: cuBLAS (ATen's ``addmm``, the bias in its epilogue)
  writes the pre-activation, then one pointwise pass (``_gelu_fwd_kernel``) the GELU, in place
  over it or, in training, from the saved pre-activation into y. Where the Triton GEMM loses
  to cuBLAS by more than the pass costs (small M for N), the bucket's timing picks it; outputs
  that are not contiguous rows keep it out (ATen's ``out=`` would copy). Under the interpreter
  every other bucket of M takes it (``_gemm_tile``), so the verifier's cases run both.
- Offsets are 64-bit wherever a row, column or K offset times a stride can pass 2**31
  elements (a transposed ``x`` of 600000 rows has a column stride of 600000).
- GELU: erf (``approximate="none"``) or tanh, a constexpr; both are the caller's choice in
  every folder, so every folder's checks run both (adapter.py). erf: Abramowitz & Stegun
  7.1.26 (``_erf``, |error| <= 1.5e-7) with ``1 / d`` as ``rsqrt(d) ** 2`` (``d >= 1``),
  cheaper than ``tl.math.erf`` (see templates/bias_gelu).
- x: ``[..., K]`` in fp32 / fp16 / bf16 (a ``[rows, K]`` view read through its strides);
  W: ``[N, K]`` as in ``nn.Linear`` (any strides); bias ``[N]`` optional. fp16/bf16 operands go
  to ``tl.dot`` as they are (fp32 accumulation); fp32 operands use ``input_precision="tf32x3"``
  (about fp32's accuracy at a third of ``"ieee"``'s time; PyTorch does not use plain TF32 for
  fp32 matmuls by default). Under the interpreter operands are upcast to fp32 first (its bf16
  ``tl.dot`` is wrong), which is exact.
- The GEMM result is rounded to the output dtype before the GELU, as eager does.
- ``out=``: any ``[..., N]`` tensor of x's dtype viewable as ``[rows, N]`` that shares no memory
  with x, W or the bias (a GEMM cannot run in place: every output tile reads whole rows of x);
  an overlapping one is refused (``_check_alias``).
- K is a compile-time constant (one compile per K; K is a model dimension): it gives the K loop
  static bounds, which Triton can pipeline, and works around Triton 3.6's interpreter with
  numpy 2.4 rejecting ``range`` over a runtime bound.
- Host side (bench/experiments/probe_wrapper_host_gemm.py: the wrapper on CPU tensors with the
  launch stubbed): the checks run once per layout of the inputs (shapes, strides, dtypes; a
  plan, ``_PLANS``, holding the sizes, x's row strides and whether the TMA kernel fits the
  layout); per call: the plan's lookup, the output's allocation, the 16-byte alignment of the
  TMA operands' addresses, the tile's lookup and the launch. x and the output go to the
  kernels as they are with their row strides (``_gemm_rows``), no ``[rows, N]`` views; an
  ``out=`` is still checked at every call (shape, dtype, device, overlap, row view).
- Training (``LinearGELUFunction``; ``LinearGELU`` uses it when autograd needs a graph): the
  forward's GEMM also stores the pre-activation (``pre=``: a second store of the epilogue,
  what eager's GELU saves, its input); the backward is one pointwise kernel for
  ``dz = dy * gelu'(pre)`` (``_gelu_bwd_kernel``, fp32 math rounded as eager's gelu_backward)
  whose programs also sum the bias gradient ``db = sum dz`` over their rows (per-program
  partial sums, added up by ``_sum_parts``: eager's addmm backward reads dz a second time for
  it), and the gradient GEMMs on cuBLAS (``dx = dz W``, ``dW = dz^T x``). Saved tensors as
  eager's: x, W, the pre-activation, in two autograd nodes as eager's, so that the
  pre-activation is freed before the gradient GEMMs (eager's peak).

Interpreter-safe: builtins only (``tl.math.rsqrt``, ``tl.exp``; tanh as ``2/(1+exp(-2x))-1``),
``tl.full``, no bf16 arithmetic; TMA descriptors are host-side ``TensorDescriptor`` objects,
which the interpreter runs.
"""

import contextlib
import functools
import math
import os

import torch
from torch.autograd.function import once_differentiable
import torch.nn.functional as F
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
APPROXIMATE = {"none": 0, "tanh": 1}


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


@triton.jit
def _erf(x):
    """erf(x), Abramowitz & Stegun 7.1.26: |error| <= 1.5e-7 (plus ~2^-22 relative from rsqrt)."""
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
        y = 0.5 * x * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0))
    else:
        y = 0.5 * x * (1.0 + _erf(x * 0.7071067811865476))
    return y


@triton.jit
def _epilogue(acc, rn, N, BIAS, dtype: tl.constexpr, HAS_BIAS: tl.constexpr, APPROX: tl.constexpr):
    """On the fp32 accumulator: bias, round like eager's addmm output (the GELU's input, which
    training saves for the backward), GELU, round. Returns (pre-activation, output)."""
    if HAS_BIAS:
        acc += tl.load(BIAS + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    pre = _cast(acc, dtype)
    return pre, _cast(_gelu(pre.to(tl.float32), APPROX), dtype)


@triton.jit
def _linear_gelu_tma_kernel(a_desc, w_desc, y_desc, p_desc, BIAS, M, N,
                            K: tl.constexpr, HAS_BIAS: tl.constexpr, APPROX: tl.constexpr, SAVE_PRE: tl.constexpr,
                            DOT_F32: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """x [M, K] and W [N, K] tiles by tensor descriptor (zero-filled past the edges, so nothing
    is masked); y leaves by one clipped TMA store, and with SAVE_PRE the pre-activation by
    another (p_desc; training)."""
    pid_m, pid_n = _tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.full((BLOCK_M, BLOCK_N), 0, tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = a_desc.load([off_m, k0])
        w = w_desc.load([off_n, k0])
        if DOT_F32:  # under the interpreter (its bf16 dot is wrong)
            acc = tl.dot(a.to(tl.float32), w.to(tl.float32).T, acc, input_precision=_F32_DOT)
        else:
            acc = tl.dot(a, w.T, acc)
    rn = off_n + tl.arange(0, BLOCK_N)
    pre, y = _epilogue(acc, rn, N, BIAS, y_desc.dtype, HAS_BIAS, APPROX)
    y_desc.store([off_m, off_n], y)
    if SAVE_PRE:
        p_desc.store([off_m, off_n], pre)


@triton.jit
def _linear_gelu_kernel(A, W, BIAS, Y, P, M, N, sam, sak, swn, swk, sym, syn,
                        K: tl.constexpr, HAS_BIAS: tl.constexpr, APPROX: tl.constexpr, SAVE_PRE: tl.constexpr,
                        DOT_F32: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Pointer-based GEMM: any strides, fp32 operands. SAVE_PRE: the pre-activation also
    stored, into P (training), which has Y's strides."""
    pid_m, pid_n = _tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # rows/cols past M/N wrap around (their results are never stored), so only K needs a mask,
    # and none at all when BLOCK_K divides K (as in the Triton matmul tutorial); offsets are
    # int64, the K steps too (BLOCK_K * a column stride of a transposed x can pass 2**31)
    ra = (rm % M).to(tl.int64)
    rb = (rn % N).to(tl.int64)
    rk64 = rk.to(tl.int64)
    a_ptr = A + ra[:, None] * sam + rk64[None, :] * sak
    w_ptr = W + rb[None, :] * swn + rk64[:, None] * swk  # the [BLOCK_K, BLOCK_N] tile of W^T
    a_step = BLOCK_K * tl.cast(sak, tl.int64)
    w_step = BLOCK_K * tl.cast(swk, tl.int64)
    acc = tl.full((BLOCK_M, BLOCK_N), 0, tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if K % BLOCK_K == 0:
            a = tl.load(a_ptr)
            b = tl.load(w_ptr)
        else:
            kmask = (k0 + rk) < K
            a = tl.load(a_ptr, mask=kmask[None, :], other=0.0)
            b = tl.load(w_ptr, mask=kmask[:, None], other=0.0)
        if DOT_F32:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision=_F32_DOT)
        else:
            acc = tl.dot(a, b, acc)
        a_ptr += a_step
        w_ptr += w_step

    pre, z = _epilogue(acc, rn, N, BIAS, Y.dtype.element_ty, HAS_BIAS, APPROX)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm.to(tl.int64)[:, None] * sym + rn.to(tl.int64)[None, :] * syn
    tl.store(Y + offs, z, mask=mask)
    if SAVE_PRE:
        tl.store(P + offs, pre, mask=mask)


@triton.jit(do_not_specialize=["M"])
def _gelu_fwd_kernel(PRE, Y, M, N, APPROX: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The library path's epilogue: y = gelu(pre) over the [M, N] pre-activation that cuBLAS
    wrote (bias included, rounded to the dtype), one BLOCK_M x BLOCK_N tile a program on the
    pointwise tiling (_tiles, _grid); PRE and Y contiguous, Y may be PRE itself (each element
    read before it is written, by the same thread). What _epilogue does to the accumulator
    after its rounding, so both paths give eager's y from the same pre."""
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rm = (pid // tiles_n).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid % tiles_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * N + rn[None, :]
    pre = tl.load(PRE + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + offs, _cast(_gelu(pre, APPROX), Y.dtype.element_ty), mask=mask)


@triton.jit
def _gelu_grad(z, APPROX: tl.constexpr):
    """gelu'(z) in fp32, as eager's gelu_backward: erf: Phi(z) + z phi(z); tanh: with
    t = tanh(c (z + 0.044715 z^3)), 0.5 (1 + t) + 0.5 z (1 - t^2) c (1 + 3 * 0.044715 z^2)."""
    if APPROX == 1:
        inner = 0.7978845608028654 * (z + 0.044715 * z * z * z)
        t = 2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0
        d = 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * z * z)
    else:
        d = 0.5 * (1.0 + _erf(z * 0.7071067811865476)) + z * 0.3989422804014327 * tl.exp(-0.5 * z * z)
    return d


@triton.jit
def _gelu_bwd_tile(DY, PRE, DZ, rm, rn, M, N, sdym, sdyn, spm, sdzm, APPROX: tl.constexpr):
    """dz = dy * gelu'(pre) on rows rm (< M) and columns rn (int64; pre and dz have contiguous
    rows), in fp32 and rounded to dz's dtype as eager's gelu_backward; returned as stored
    (fp32, 0 outside the tile's bounds): the values eager's bias gradient sums."""
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    dy = tl.load(DY + rm[:, None] * sdym + rn[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
    z = tl.load(PRE + rm[:, None] * spm + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    dz = _cast(dy * _gelu_grad(z, APPROX), DZ.dtype.element_ty)
    tl.store(DZ + rm[:, None] * sdzm + rn[None, :], dz, mask=mask)
    return tl.where(mask, dz.to(tl.float32), 0.0)


@triton.jit(do_not_specialize=["M", "rows"])
def _gelu_bwd_kernel(DY, PRE, DZ, PART, M, N, rows, sdym, sdyn, spm, sdzm,
                     APPROX: tl.constexpr, HAS_DB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # the pointwise tiling (_tiles) and 64-bit offsets; with HAS_DB (the bias gradient) program
    # t takes column block t % tiles_n of rows [g * rows, (g + 1) * rows), g = t // tiles_n
    # (rows a multiple of BLOCK_M), BLOCK_M at a time, adds up its tiles of dz (as stored) in a
    # [BLOCK_M, BLOCK_N] accumulator, reduced once after the loop, and stores the column sums
    # in row g of PART [G, N] fp32: the bias gradient's partial sums, without reading dz again
    # (eager's AddmmBackward0 reads the whole [M, N] dz once more for its sum). The loop is
    # pipelined (DB_STAGES tiles in flight; see DB_PROGRAMS for what was measured)
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rn = (pid % tiles_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    if HAS_DB:
        g = (pid // tiles_n).to(tl.int64)
        r0 = g * rows
        end = tl.minimum(r0 + rows, M)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        if PIPELINED:
            for t in tl.range(0, tl.cdiv(end - r0, BLOCK_M), num_stages=DB_STAGES):
                rm = r0 + t * BLOCK_M + tl.arange(0, BLOCK_M)
                acc += _gelu_bwd_tile(DY, PRE, DZ, rm, rn, end, N, sdym, sdyn, spm, sdzm, APPROX)
        else:  # the interpreter: the same tiles (its range() takes no tensor bound)
            r = r0
            while r < end:
                rm = r + tl.arange(0, BLOCK_M)
                acc += _gelu_bwd_tile(DY, PRE, DZ, rm, rn, end, N, sdym, sdyn, spm, sdzm, APPROX)
                r += BLOCK_M
        tl.store(PART + g * N + rn, tl.sum(acc, axis=0), mask=rn < N)
    else:
        rm = (pid // tiles_n).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        _gelu_bwd_tile(DY, PRE, DZ, rm, rn, M, N, sdym, sdyn, spm, sdzm, APPROX)


# The bias gradient's programs (_gelu_bwd_kernel with HAS_DB): about DB_PROGRAMS of them over
# all column blocks, each over whole row tiles, its loop DB_STAGES tiles deep (the
# interpreter's few programs, so that its tests' rows span several groups). On the H200
# (bench/experiments/probe_gelu_bwd.py, 2026-12-03; bf16, erf, us with the partial sums'
# launch, eager's gelu_backward and sum beside): a tl.sum of each tile inside the loop (the
# first form) 135.6 / 112.5 / 37.4 at ConvNeXt's 32x56x56x384, 32x28x28x768 and BERT's
# 16x256x3072 (eager 140.5 / 73.4 / 42.7); one sum after the loop 98.3 / 63.2 / 35.3; the loop
# pipelined 3 deep 79.4 / 58.8 / 33.5, and with 512 programs instead of 2048 75.6 / 46.1 /
# 30.8 (the derivative alone, no sums: 63.4 / 33.4 / 22.1).
DB_PROGRAMS_GPU = 512
DB_PROGRAMS = 8 if INTERPRET else DB_PROGRAMS_GPU
DB_STAGES = tl.constexpr(3)


# --- fa:shared pipelined ---
# A backward's row loop: pipelined on the GPU (a tl.range loop with tiles in flight), a while
# loop over the same tiles under the interpreter (its range() takes no tensor bound).
PIPELINED = tl.constexpr(not INTERPRET)
# --- fa:end pipelined ---


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


def _check(x, weight, bias, approximate):
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"linear_gelu: unsupported dtype {x.dtype}")
    if weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        raise TypeError("linear_gelu: x, weight and bias must share a dtype (as F.linear requires)")
    if x.dim() == 0 or weight.dim() != 2 or weight.shape[1] != x.shape[-1]:
        raise ValueError(f"linear_gelu: weight {tuple(weight.shape)} does not match x {tuple(x.shape)}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"linear_gelu: bias {tuple(bias.shape)} does not match weight {tuple(weight.shape)}")
    if approximate not in APPROXIMATE:
        raise ValueError(f"linear_gelu: approximate must be one of {sorted(APPROXIMATE)}")


# Per-call host work is cut by a plan per layout of the inputs (shapes, strides, dtypes of x,
# weight and bias, approximate): checked once (_check), then what the call needs (sizes, x's
# rows and strides without a view, whether the TMA kernel fits the layout) is looked up. The
# plan never holds a kernel or a tile (those are looked up per call); bounded.
_PLANS = {}
_PLANS_MAX = 4096


def _plan(x, weight, bias, approximate):
    _check(x, weight, bias, approximate)
    N, K = weight.shape
    lead = tuple(x.shape[:-1])
    rows = _gemm_rows(x.shape, x.stride())
    copy = rows is None  # no [rows, K] view of x: a contiguous copy per call (reshape)
    M, rs, cs = (math.prod(lead), K, 1) if copy else rows
    tma = _tma_layout(x.dtype, (rs, cs), weight.stride())  # and the output's rows: (N, 1) when fresh
    return (N, K, M, lead + (N,), copy, rs, cs, tma, tma and _tma_layout(x.dtype, (N, 1)), APPROXIMATE[approximate],
            bias is not None and bias.stride(0) != 1, INTERPRET or x.dtype == torch.float32)


@_on_their_device
def linear_gelu(x, weight, bias=None, approximate="none", out=None, pre=None):
    """y = gelu(x @ weight^T + bias, approximate) (see LinearGELUFunction for autograd).

    ``pre``: a contiguous ``[..., N]`` buffer of x's dtype that also receives the
    pre-activation ``x @ weight^T + bias`` (rounded as eager's addmm output), which the backward
    needs; ``out`` must then be contiguous too (or None)."""
    return _linear_gelu(x, weight, bias, approximate, out, pre, False)


def _linear_gelu(x, weight, bias, approximate, out, pre, pre_fresh):
    """linear_gelu; pre_fresh: out is None and pre a tensor the caller has just allocated,
    contiguous, of the output's shape, dtype and device (LinearGELUFunction's), so it is not
    checked (its checks were the training forward's largest host cost after the launch: two
    overlap checks over five tensors)."""
    key = (x.shape, x.stride(), x.dtype, weight.shape, weight.stride(), weight.dtype, approximate,
           None if bias is None else (bias.shape, bias.stride(), bias.dtype))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(x, weight, bias, approximate)
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = plan
    N, K, M, shape, copy, rs, cs, tma_xw, tma, approx, bias_copy, dot_f32 = plan
    # the kernels index the bias as contiguous: a strided view is copied (tiny)
    if bias_copy:
        bias = bias.contiguous()
    if out is None:
        out = torch.empty(*shape, dtype=x.dtype, device=x.device)
        ys, ycs = N, 1  # a fresh output: contiguous rows
    else:
        if out.shape != shape or out.dtype != x.dtype or out.device != x.device:
            raise ValueError("linear_gelu: out has the wrong shape, dtype or device")
        _check_alias("linear_gelu", [("out", out)], [("x", x), ("weight", weight), ("bias", bias)])
        rows = _gemm_rows(out.shape, out.stride())
        if rows is None:
            raise ValueError("output must be viewable as [rows, N]")
        _, ys, ycs = rows
        tma = tma_xw and _tma_layout(x.dtype, (ys, ycs))
    save = pre is not None
    if save and not pre_fresh:
        if pre.shape != shape or pre.dtype != x.dtype or pre.device != x.device or not pre.is_contiguous():
            raise ValueError("linear_gelu: pre must be a contiguous tensor of the output's shape and dtype")
        if (ys, ycs) != (N, 1):
            raise ValueError("linear_gelu: with pre, out must be contiguous")
        _check_alias("linear_gelu", [("out", out)], [("pre", pre)])
        _check_alias("linear_gelu", [("pre", pre)], [("x", x), ("weight", weight), ("bias", bias)])
    if M == 0 or N == 0:
        return out
    if K == 0:
        z = torch.zeros(shape, dtype=x.dtype, device=x.device) if bias is None else bias.expand(shape)
        if save:
            pre.copy_(z)
        return out.copy_(F.gelu(z, approximate=approximate))

    a = x.reshape(-1, K) if copy else x  # the kernels read x's rows through rs, cs
    has_bias = bias is not None
    b = bias if has_bias else weight  # a placeholder pointer when there is no bias
    sw0, sw1 = weight.stride()

    def run_pointer(tile, y, p):
        _gemm_launch(_linear_gelu_kernel, _gemm_grid(M, N, tile), (),
                     (a, weight, b, y, p if save else y, M, N, rs, cs, sw0, sw1, ys, ycs), tile[:5],
                     K=K, HAS_BIAS=has_bias, APPROX=approx, SAVE_PRE=save, DOT_F32=dot_f32)

    tma = tma and (a.data_ptr() | weight.data_ptr() | out.data_ptr() | (pre.data_ptr() if save else 0)) % 16 == 0
    if tma:
        ash, ast, wsh, wst, ysh, yst = [M, K], [rs, 1], [N, K], [sw0, 1], [M, N], [ys, 1]

        def run_tma(tile, y, p):
            bm, bn, bk = tile[:3]
            yd = _desc(y, ysh, yst, [bm, bn])
            _gemm_launch(_linear_gelu_tma_kernel, _gemm_grid(M, N, tile),
                         (_desc(a, ash, ast, [bm, bk]), _desc(weight, wsh, wst, [bn, bk]), yd,
                          _desc(p, ysh, yst, [bm, bn]) if save else yd),  # yd: a placeholder, never stored to
                         (b, M, N), tile, K=K, HAS_BIAS=has_bias, APPROX=approx, SAVE_PRE=save, DOT_F32=dot_f32)

    # the library path: cuBLAS (ATen's addmm, the bias in its epilogue) writes the
    # pre-activation into pre, or into y itself, then _gelu_fwd_kernel makes y from it: eager's
    # two kernels but for the GELU's, where the Triton GEMM loses to cuBLAS by more than the
    # pass costs (small M for N: ConvNeXt's 32x7x7x768->3072, 25.9 against eager's 19.9 us on
    # the H200). Open to contiguous outputs only (ATen's out= would copy into others)
    library = (ys, ycs) == (N, 1)

    def run(tile, y, p):
        if tile is not GEMM_LIBRARY:  # a TMA tile, or the pointer kernel's (a sixth element: an alternative)
            return run_tma(tile, y, p) if tma and len(tile) == 5 else run_pointer(tile, y, p)
        dst = p if save else y
        a2 = a.as_strided((M, K), (rs, cs))
        with torch.no_grad():  # ATen's out= refuses operands that require grad (a Linear's weight)
            if has_bias:
                torch.addmm(bias, a2, weight.t(), out=dst.view(M, N))
            else:
                torch.mm(a2, weight.t(), out=dst.view(M, N))
        bm, bn, warps = _tiles(N, x.element_size())
        _launch(_gelu_fwd_kernel, _grid(M, N, bm, bn), (dst, y, M, N), num_warps=warps,
                APPROX=approx, BLOCK_M=bm, BLOCK_N=bn)

    # tuned once per bucket of M, on scratch outputs (the caller's are written once, below)
    def scratch():
        return torch.empty_strided((M, N), (ys, ycs), dtype=x.dtype, device=x.device)

    # in eager use a TMA tile's alternative is the same tile on the pointer kernel, whose launch
    # costs 3.6-4.7 us less host work (no descriptors; probe_catalog_host.py on the H200)
    def whole(t):  # a whole call (the host work a call of t pays), on fresh outputs
        _linear_gelu(x, weight, bias, approximate, None, torch.empty(shape, dtype=x.dtype, device=x.device)
                     if save else None, save)

    tile = _gemm_tile(_linear_gelu_tma_kernel if tma else _linear_gelu_kernel, M, N, K, x,
                      (has_bias, approx, save, library), lambda t: run(t, scratch(), scratch() if save else None),
                      library, (lambda t: [t + (1,)]) if tma else None, whole)
    run(tile, out, pre)
    return out


class _LinearPreFunction(torch.autograd.Function):
    """LinearGELUFunction's first node: x, W, b -> (pre, y) by the fused GEMM, which also
    stores the pre-activation; y is not differentiable here (the GELU's node owns its
    gradient). Backward, from dz: the two gradient GEMMs (cuBLAS); the bias gradient comes
    from the GELU's node, which sums it while it writes dz. Saved: x and W."""

    @staticmethod
    def forward(ctx, x, weight, bias, approximate):
        pre = torch.empty(*x.shape[:-1], weight.shape[0], dtype=x.dtype, device=x.device)
        y = _linear_gelu(x, weight, bias, approximate, None, pre, True)
        ctx.save_for_backward(x, weight)
        ctx.mark_non_differentiable(y)
        ctx.set_materialize_grads(False)  # y's gradient stays None: no [M, N] of zeros
        return pre, y

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, dz, _dy):
        x, weight = ctx.saved_tensors
        N, K = weight.shape
        dx = dw = None
        if dz is None:
            return dx, dw, None, None
        dz2 = dz.reshape(-1, N)
        if ctx.needs_input_grad[0]:
            dx = (dz2 @ weight).reshape(x.shape)
        if ctx.needs_input_grad[1]:
            dw = dz2.t() @ x.reshape(-1, K)
        return dx, dw, None, None


class _GELUNodeFunction(torch.autograd.Function):
    """LinearGELUFunction's second node: (pre, y, b) -> y, the GELU's place in the graph.
    Backward: one pointwise kernel for dz = dy * gelu'(pre) (as eager's gelu_backward) that
    also sums the bias gradient per program (b is an input here for that alone), and one
    launch adding up the partial sums (_sum_parts): eager's gelu_backward and its addmm
    backward's sum, which reads dz again, in one pass over dz. Saved: pre, which autograd
    frees once this node has run, before the gradient GEMMs: eager's peak."""

    @staticmethod
    def forward(ctx, pre, y, bias, approximate):
        ctx.save_for_backward(pre)
        ctx.approx = APPROXIMATE[approximate]
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y  # an input returned: autograd hands out a view of it, y's memory

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, dy):
        (pre,) = ctx.saved_tensors
        has_db = ctx.bias_dtype is not None and ctx.needs_input_grad[2]
        # torch.empty, not empty_like: the verifier poisons and guards what torch.empty returns
        dz = torch.empty(pre.shape, dtype=pre.dtype, device=pre.device)
        db = None
        if pre.numel():
            # pre and dz are contiguous [..., N] (allocated here and by the forward): passed
            # as they are, with N for their row stride (no views: each is an ATen op on the host)
            dy2 = _rows(dy)
            N = pre.shape[-1]
            M = pre.numel() // N
            bm, bn, warps = _tiles(N, max(dy2.element_size(), pre.element_size()))
            grid, rows, part = _grid(M, N, bm, bn), bm, pre  # pre: a dummy PART, never written
            if has_db:
                tiles_n = -(-N // bn)
                rows = -(-M // max(1, DB_PROGRAMS // tiles_n))
                rows = -(-rows // bm) * bm  # whole row tiles
                groups = -(-M // rows)
                grid = (groups * tiles_n,)
                part = torch.empty((groups, N), dtype=torch.float32, device=pre.device)
            _launch(_gelu_bwd_kernel, grid,
                    (dy2, pre, dz, part, M, N, rows, dy2.stride(0), dy2.stride(1), N, N),
                    num_warps=warps, APPROX=ctx.approx, HAS_DB=has_db, BLOCK_M=bm, BLOCK_N=bn)
            if has_db:  # the partial sums added up in the bias' type
                db = torch.empty(N, dtype=ctx.bias_dtype, device=pre.device)
                _part_sums(part, [db])
        elif has_db:
            db = torch.zeros(pre.shape[-1], dtype=ctx.bias_dtype, device=pre.device)
        return dz, None, db, None


class LinearGELUFunction:
    """Autograd for linear_gelu, as eager's graph has it: two nodes. The first
    (_LinearPreFunction) runs the fused GEMM, which also stores the pre-activation (what eager's
    GELU saves: its input), and owns the gradient GEMMs; the second (_GELUNodeFunction) owns
    dz = dy * gelu'(pre) and the bias gradient, summed in the same pass. Autograd frees the
    pre-activation after the second has run, before the GEMMs, as it frees eager's GELU input:
    one node holding it through the GEMMs peaked one [M, N] above eager (390 against 313 MB at
    ConvNeXt's 32x56x56x96x384, H200, 2026-12-02). Saved tensors as eager's: x, W, the
    pre-activation. ``apply(x, weight, bias, approximate)`` as a torch.autograd.Function's."""

    @staticmethod
    def apply(x, weight, bias, approximate):
        pre, y = _LinearPreFunction.apply(x, weight, bias, approximate)
        return _GELUNodeFunction.apply(pre, y, bias, approximate)


class LinearGELU(torch.nn.Linear):
    """Drop-in for ``F.gelu(linear(x), approximate)``: an ``nn.Linear`` whose forward is fused;
    when autograd needs a graph, through LinearGELUFunction."""

    def __init__(self, in_features, out_features, bias=True, approximate="none", device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        if approximate not in APPROXIMATE:
            raise ValueError(f"approximate must be one of {sorted(APPROXIMATE)}")
        self.approximate = approximate

    @classmethod
    def from_linear(cls, linear, approximate="none"):
        """Shares the parameters of an existing ``nn.Linear``."""
        if approximate not in APPROXIMATE:
            raise ValueError(f"approximate must be one of {sorted(APPROXIMATE)}")
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight, new.bias = linear.weight, linear.bias
        new.approximate = approximate
        return new

    def forward(self, x):
        """Under autocast (x's device type) as autocast runs ``F.linear`` and the GELU after it:
        x, the weight and the bias cast to autocast's dtype (differentiably: the gradients
        reach them in their own types), the fused kernel and y in that dtype."""
        w, b = self.weight, self.bias
        dev = x.device.type
        dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None
        if dtype is not None:
            x, w, b = (t if t is None or t.dtype == dtype else t.to(dtype) for t in (x, w, b))
        with torch.autocast(dev, enabled=False) if dtype is not None else contextlib.nullcontext():
            needs_graph = torch.is_grad_enabled() and (
                x.requires_grad or w.requires_grad or (b is not None and b.requires_grad))
            if needs_graph:
                return LinearGELUFunction.apply(x, w, b, self.approximate)
            return linear_gelu(x, w, b, self.approximate)
