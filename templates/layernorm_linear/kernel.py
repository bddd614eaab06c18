"""LayerNorm folded into the following Linear: ``y = layer_norm(x) @ W^T + b`` without
materialising the normalised activations.

Replaces ``aten::layer_norm`` (``native_layer_norm``) -> ``aten::linear`` (``addmm``/``mm``), the
fusion Inductor cannot do (a LayerNorm needs a whole-row reduction before any GEMM tile of its
output is usable). Two ways to fold it, both here, measured against each other:

- ``variant="fold"`` (the default): gamma and beta folded into the weights, once per weight
  (``fold_weights``): ``W' = W diag(gamma)`` rounded to W's dtype, ``b' = b + W beta`` and
  ``s = rowsum(W')`` in fp32. Per call: a row-statistics kernel (mean and rstd, x read once),
  then a plain GEMM of the *raw* x with W' and a row-wise epilogue
  ``y = rstd_i * (acc_ij - mean_i * s_j) + b'_j``. The GEMM's A operand goes from memory
  to the tensor cores untouched; for fp16/bf16 operands that meet TMA's alignment the GEMM
  loads through TMA tensor descriptors (Hopper's bulk copy engine).
- ``variant="normalize"``: normalise on load: each ``[BLOCK_M, BLOCK_K]`` tile of x is read,
  normalised with the row stats and gamma/beta, rounded to x's dtype (as eager's LayerNorm
  output is) and fed to ``tl.dot``.

Both are the caller's choice in every folder, so every folder's checks run both (adapter.py).

Measured on an H200 (bf16, CUDA-graph replays under do_bench; cuBLAS = ``F.linear`` alone on an
already normalised input; bench/experiments/probe_gemm.py): M x K x N = 8192x1024x4096: fold
123 us, normalize 177 us, eager 127 us, cuBLAS 118.5 us; 4096x768x3072 fp16: 43 / 61 / 47 / 36;
16x4096x4096 (decode): 25 / 38 / 30 / 20; 8192x4096x4096: 519 / 643 / 457 / 396. Fold is the
faster variant at every shape (normalising on load puts the A tile through registers on every
K step of every N tile) and beats eager except at the largest GEMM, where the Triton GEMM
itself is 1.16-1.3x cuBLAS. So fold is the default.

Numerics of fold: the GEMM sees raw x, so its rounding error scales with ``|x|`` rather than
with the normalised row: with rows of mean -2.3 and std 0.5 the bf16 error against an fp32
reference is about 2x eager's (max 5.8e-3 of max|y| against eager's 2.9e-3; tolerance 2e-2).
A row with zero variance would amplify the cancellation ``acc - mean * s`` by 1/sqrt(eps):
the stats kernel shifts each row by its first element, so a row of equal values has a variance
of exactly 0 and a mean of exactly that value, and it stores rstd = 0 for it; the output is
then exactly ``b'``, as in eager. The shared statistics of ``ln_stats`` are the same. Rows of
tiny but non-zero variance keep an amplified error; use ``variant="normalize"`` where that
matters.

- Row statistics: ROWS rows per program as one ``[ROWS, BLOCK_K]`` tile (rows of up to 4096
  columns in one block; longer rows one per program, in chunks), the tile chosen from K
  (``_stats_config``, no autotuner), launched through ``_launch``: for ConvNeXt's K = 96 a
  tile of 16 rows took the statistics from 62.2 to 7.1 us (one row per program) on the H200.
- One launch a call in eager use (the fold): the GEMM kernel gathers its rows' statistics
  from the A tiles its K loop loads (``_stats_step``: each row shifted by its first element,
  the K chunks merged by Chan's formula; ``STATS``), no statistics pass. A bucket keeps it for
  calls outside a CUDA graph capture and torch.compile where a call of it, host work and GPU
  time together, costs a tenth less than the GPU-fastest path (``_gemm_tile``'s eager-use
  alternatives): the statistics pass's launch took 17 us of host work a call on the H200, as
  much as eager's LayerNorm. Not where the caller gives the statistics (``stats=``) or asks
  for them (``return_stats``: the training forward).
- A library path competes with the tiles (either variant): the normalized input written once
  from the statistics (the backward's normalizing pass, ``_ln_bwd_kernel`` with ``HAS_XN``),
  then cuBLAS (ATen's ``addmm``) with the unfolded weight and bias. Where the Triton GEMM
  loses to cuBLAS by more than that round trip of the input costs (N large for K), the
  bucket's timing picks it; outputs that are not contiguous rows keep it out. Under the
  interpreter every other bucket of M takes it (``_gemm_tile``).
- GEMM tiles BLOCK_M x BLOCK_N x BLOCK_K, grouped program ordering (GROUP_M), one program per
  output tile on grid axis 0. No ``@triton.autotune``: the tile is timed once per bucket of
  shapes (M rounded up to a power of two, N, K, dtype, flags) on a scratch output, then
  launched directly (``_gemm_tile``, ``_gemm_launch``: the ``gemm`` block, shared with
  linear_gelu); a bucket first met during CUDA-graph capture takes an untimed tile. One fixed
  small tile under ``TRITON_INTERPRET=1``. K is a compile-time constant (static K loop,
  pipelined by Triton; also avoids ``range`` over a runtime bound, which Triton 3.6's
  interpreter with numpy 2.4 rejects).
- Offsets are 64-bit wherever a row, column or K offset times a stride can pass 2**31
  elements (a transposed bf16 ``[600000, 4096]`` x has a column stride of 600000).
- fp32 / fp16 / bf16; x read through its strides; W ``[N, K]`` any strides; fp32 operands use
  ``input_precision="tf32x3"`` (about fp32's accuracy at a third of ``"ieee"``'s time) and the
  pointer-based GEMM (TMA with fp32 operands measured 20-50x slower); under the interpreter
  operands are upcast to fp32 before ``tl.dot`` (its bf16 dot is wrong), which is exact.
- ``out=``: any ``[..., N]`` tensor of x's dtype viewable as ``[rows, N]`` that shares no memory
  with an input (x, the weights, the folded weights, the statistics); an overlapping one is
  refused (``_check_alias``).
- Several Linears reading one LayerNorm (Q, K, V) can share one stats pass:
  ``ln_stats(x, eps)`` then ``layernorm_linear(..., stats=(mean, rstd))``.
- Host side (bench/experiments/probe_wrapper_host_gemm.py: the wrapper on CPU tensors with the
  launch stubbed): the checks run once per layout of the inputs (shapes, strides, dtypes; a
  plan, ``_PLANS``, holding the sizes, x's row strides and whether the TMA kernel fits the
  layout); per call: the plan's lookup, the output's allocation, the 16-byte alignment of the
  TMA operands' addresses, the tile's lookup and the launch. x and the output go to the
  kernels as they are with their row strides (``_gemm_rows``), no ``[rows, N]`` views; an
  ``out=`` is still checked at every call (shape, dtype, device, overlap, row view).
- Training (``LayerNormLinearFunction``; ``LayerNormLinear`` uses it when autograd needs a
  graph, and refolds the weights once per optimizer step, one launch of ``_fold_kernel``):
  the forward saves x and the fp32 row statistics, not the normalized input eager's Linear
  saves (M x K elements fewer held for the backward). The backward: dxn = dy W (cuBLAS); one
  pass (``_ln_bwd_kernel``) reading x and dxn once, writing the LayerNorm's d_input, the
  normalized input (rounded as eager's, for the weight gradient) and per-program partial
  sums of dgamma and dbeta; dW = dy^T xn (cuBLAS); db by ``_col_sums`` (fp32 partial sums
  of row blocks, then ``_sum_parts``: at 4096x768 bf16 10.0 us where eager's row sum took
  15.6 on an H100); ``_sum_parts``.
  Rows longer than ``MAX_BWD_K`` take ATen's LayerNorm backward. A row of equal values, whose
  stored rstd is 0 (the fold's guard), gets the true 1/sqrt(eps) in the backward.
- A bias added to x before the norm (``pre_bias``, a ``[K]`` vector: the bias of the
  convolution before a channels-last LayerNorm, ConvNeXt's ``dwconv -> permute -> norm ->
  pwconv1``, which cuDNN adds in a kernel of its own and whose gradient ATen sums over
  N, H and W from the permuted output gradient, at about a quarter of a copy's bandwidth):
  the convolution runs without it, and the call adds it, in x's type as the convolution did
  (a bias of another type cast to it first, as autocast casts the convolution's), writing
  the sum with contiguous rows (``_pre_add``): one pass where eager's add and its LayerNorm's
  copy of the permuted rows are two; the rest runs on that sum, which training saves in
  x's place. Its gradient is the column sum of the LayerNorm's d_input (``_col_sums``).

Interpreter-safe: builtins only, ``tl.full``, no bf16 arithmetic, ``while`` loops for runtime
lengths; TMA descriptors are host-side ``TensorDescriptor`` objects, which the interpreter runs.
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
VARIANTS = ("fold", "normalize")
# row statistics: a row of up to MAX_BLOCK_K columns is one block; a program's tile holds
# about STATS_TILE elements (several short rows); the interpreter keeps them small
MAX_BLOCK_K = 128 if INTERPRET else 4096
STATS_TILE = 256 if INTERPRET else 2048


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
def _shifted(X, x0, rmask, cols, K, sxk):
    """The [ROWS, BLOCK_K] tile of x - x0 at these columns (x0: each row's first element), 0
    outside the rows and columns; X points at the rows' starts. Column offsets int64:
    cols * stride passes 2**31 in a transposed [600000, 4096] x."""
    m = rmask[:, None] & (cols < K)[None, :]
    x = tl.load(X + cols.to(tl.int64)[None, :] * sxk, mask=m, other=0.0).to(tl.float32)
    return tl.where(m, x - x0, 0.0)


@triton.jit
def _row_stats(X, rmask, K, sxk, eps, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, SINGLE: tl.constexpr):
    """mean and rstd in fp32 of the rows X points at (a [ROWS, 1] block of row starts; rmask:
    the rows that exist), two-pass (the mean, then the variance of x - mean) on each row
    shifted by its first element: a row of equal values has a variance of exactly 0 and gets
    rstd = 0 (the fold's epilogue then returns b'). SINGLE: the row in one BLOCK_K block, x
    read once; else in chunks of BLOCK_K, read twice."""
    x0 = tl.load(X, mask=rmask[:, None], other=0.0).to(tl.float32)
    if SINGLE:  # the whole row in registers: x read once
        cols = tl.arange(0, BLOCK_K)
        xs = _shifted(X, x0, rmask, cols, K, sxk)
        mean = tl.sum(xs, axis=1) / K
        d = tl.where((cols < K)[None, :], xs - mean[:, None], 0.0)
        var = tl.sum(d * d, axis=1) / K
    else:
        acc = tl.full([ROWS, BLOCK_K], 0, tl.float32)
        start = 0
        while start < K:
            acc += _shifted(X, x0, rmask, start + tl.arange(0, BLOCK_K), K, sxk)
            start += BLOCK_K
        mean = tl.sum(acc, axis=1) / K
        acc = tl.full([ROWS, BLOCK_K], 0, tl.float32)
        start = 0
        while start < K:
            cols = start + tl.arange(0, BLOCK_K)
            d = tl.where((cols < K)[None, :], _shifted(X, x0, rmask, cols, K, sxk) - mean[:, None], 0.0)
            acc += d * d
            start += BLOCK_K
        var = tl.sum(acc, axis=1) / K
    return tl.sum(x0, axis=1) + mean, _rstd(var, eps)


@triton.jit
def _rstd(var, eps):
    """1 / sqrt(var + eps), and 0 where var is exactly 0: a row of equal values (x - mean is 0
    exactly: eager's rstd multiplies zeros), whose fold epilogue must not amplify
    acc - mean * s by 1/sqrt(eps)."""
    rstd = 1.0 / tl.sqrt(var + eps)
    rstd = tl.where(var == 0.0, 0.0, rstd)
    return rstd


@triton.jit
def _stats_step(a, x0, mean, m2, k0, kmask, K: tl.constexpr, BLOCK_K: tl.constexpr):
    """The one-launch GEMM's statistics: the K chunk at k0 of its A tile (raw x, [BLOCK_M,
    BLOCK_K]; kmask: the chunk's columns < K) merged into its rows' running mean and sum of
    squared deviations m2 of x - x0 over the k0 columns before it (x0: each row's first
    element, so a row of equal values gives exactly 0), by Chan's formula: the chunk's own
    mean and deviations first, then delta = chunk mean - mean, mean += delta * kc / n,
    m2 += chunk m2 + delta**2 * k0 * kc / n (n = k0 + kc). Stable like the statistics
    kernel's two passes, in one pass over the tiles the GEMM loads anyway."""
    d = a.to(tl.float32) - x0[:, None]
    if K % BLOCK_K != 0:
        d = tl.where(kmask[None, :], d, 0.0)
    kc = tl.minimum(K - k0, BLOCK_K) * 1.0
    c_mean = tl.sum(d, axis=1) / kc
    e = d - c_mean[:, None]
    if K % BLOCK_K != 0:
        e = tl.where(kmask[None, :], e, 0.0)
    n = k0 * 1.0
    tot = n + kc
    delta = c_mean - mean
    mean = mean + delta * (kc / tot)
    m2 = m2 + tl.sum(e * e, axis=1) + delta * delta * (n * kc / tot)
    return mean, m2


@triton.jit
def _ln_stats_kernel(X, MEAN, RSTD, M, K, sxm, sxk, eps,
                     ROWS: tl.constexpr, BLOCK_K: tl.constexpr, SINGLE: tl.constexpr):
    """mean and rstd (_row_stats) of ROWS rows per program, stored in fp32."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = rows < M
    # [ROWS, 1] row starts (int64: row * stride)
    mean, rstd = _row_stats(X + rows.to(tl.int64)[:, None] * sxm, rmask, K, sxk, eps, ROWS, BLOCK_K, SINGLE)
    tl.store(MEAN + rows, mean, mask=rmask)
    tl.store(RSTD + rows, rstd, mask=rmask)


@triton.jit
def _fold_epilogue(acc, mean, rstd, rn, N, S, BF, HAS_BIAS: tl.constexpr):
    """sum_k LN(x)_ik W_jk + b_j = rstd_i * (sum_k x_ik W'_jk - mean_i * s_j) + b'_j (fp32);
    mean, rstd: the tile's rows'."""
    s = tl.load(S + rn, mask=rn < N, other=0.0)
    y = rstd[:, None] * (acc - mean[:, None] * s[None, :])
    if HAS_BIAS:
        y += tl.load(BF + rn, mask=rn < N, other=0.0)[None, :]
    return y


@triton.jit
def _fold_tma_kernel(a_desc, w_desc, y_desc, MEAN, RSTD, S, BF, M, N,
                     K: tl.constexpr, HAS_BIAS: tl.constexpr, DOT_F32: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr):
    """variant="fold" through TMA: x [M, K] and W' [N, K] tiles arrive by tensor descriptor
    (zero-filled past the edges, so nothing is masked), y leaves by one clipped TMA store."""
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
    rm = off_m + tl.arange(0, BLOCK_M)
    rn = off_n + tl.arange(0, BLOCK_N)
    mean = tl.load(MEAN + rm, mask=rm < M, other=0.0)
    rstd = tl.load(RSTD + rm, mask=rm < M, other=0.0)
    y = _fold_epilogue(acc, mean, rstd, rn, N, S, BF, HAS_BIAS)
    y_desc.store([off_m, off_n], _cast(y, y_desc.dtype))


@triton.jit
def _ln_linear_kernel(A, MEAN, RSTD, G, BETA, W, BIAS, Y, M, N, sam, sak, swn, swk, sym, syn, eps,
                      K: tl.constexpr, FOLD: tl.constexpr, HAS_G: tl.constexpr, HAS_BETA: tl.constexpr,
                      HAS_BIAS: tl.constexpr, STATS: tl.constexpr, DOT_F32: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    """Pointer-based GEMM for both variants (any strides, fp32 operands). FOLD: W is W', the
    A tiles go to tl.dot as loaded and the fold epilogue applies (G = s, BIAS = b'); else the
    A tiles are normalised on load. STATS (FOLD only): the tile's rows' statistics gathered
    from the A tiles the K loop loads (_stats_step, eps) instead of read from MEAN and RSTD:
    one launch a call, no statistics pass."""
    tl.static_assert(FOLD or not STATS)
    pid_m, pid_n = _tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # rows/cols past M/N wrap around (their results are never stored), so only K needs a mask,
    # and none at all when BLOCK_K divides K (as in the Triton matmul tutorial); offsets are
    # int64, the K steps too (BLOCK_K * a column stride of a transposed x can pass 2**31)
    ra = (rm % M).to(tl.int64)
    rb = (rn % N).to(tl.int64)
    if STATS:
        x0 = tl.load(A + ra * sam).to(tl.float32)  # each row's first element
        mean = tl.zeros([BLOCK_M], tl.float32)
        m2 = tl.zeros([BLOCK_M], tl.float32)
    else:
        mean = tl.load(MEAN + rm % M)
        rstd = tl.load(RSTD + rm % M)
    rk64 = rk.to(tl.int64)
    a_ptr = A + ra[:, None] * sam + rk64[None, :] * sak
    w_ptr = W + rb[None, :] * swn + rk64[:, None] * swk  # the [BLOCK_K, BLOCK_N] tile of W^T
    a_step = BLOCK_K * tl.cast(sak, tl.int64)
    w_step = BLOCK_K * tl.cast(swk, tl.int64)
    acc = tl.full((BLOCK_M, BLOCK_N), 0, tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        kmask = kk < K
        if K % BLOCK_K == 0:
            a = tl.load(a_ptr)
            b = tl.load(w_ptr)
        else:
            a = tl.load(a_ptr, mask=kmask[None, :], other=0.0)
            b = tl.load(w_ptr, mask=kmask[:, None], other=0.0)
        if STATS:
            mean, m2 = _stats_step(a, x0, mean, m2, k0, kmask, K, BLOCK_K)
        if not FOLD:
            # normalise on load: (x - mean) * rstd * gamma + beta, rounded like eager's LN output
            a = (a.to(tl.float32) - mean[:, None]) * rstd[:, None]
            if HAS_G:
                a = a * tl.load(G + kk, mask=kmask, other=0.0).to(tl.float32)[None, :]
            if HAS_BETA:
                a = a + tl.load(BETA + kk, mask=kmask, other=0.0).to(tl.float32)[None, :]
            if K % BLOCK_K != 0:
                a = tl.where(kmask[None, :], a, 0.0)
            a = _cast(a, A.dtype.element_ty)
        if DOT_F32:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision=_F32_DOT)
        else:
            acc = tl.dot(a.to(W.dtype.element_ty), b, acc)
        a_ptr += a_step
        w_ptr += w_step

    if STATS:
        rstd = _rstd(m2 / K, eps)
        mean = x0 + mean
    if FOLD:
        acc = _fold_epilogue(acc, mean, rstd, rn, N, G, BIAS, HAS_BIAS)
    elif HAS_BIAS:
        acc += tl.load(BIAS + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    y = _cast(acc, Y.dtype.element_ty)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(Y + rm.to(tl.int64)[:, None] * sym + rn.to(tl.int64)[None, :] * syn, y, mask=mask)


@triton.jit
def _fold_kernel(W, G, BETA, BIAS, WF, S, BF, N, K, swn, swk,
                 HAS_G: tl.constexpr, HAS_BETA: tl.constexpr, HAS_BF: tl.constexpr, HAS_BIAS: tl.constexpr,
                 ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """fold_weights in one pass over W: ROWS rows of W per program, BLOCK_K columns at a
    time; W' = W * gamma rounded to W's type into WF (contiguous; HAS_G), s = the row sums of
    the rounded W' in fp32, b' = b + W beta in fp32 (HAS_BF: a Linear bias or a LayerNorm bias)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = rows < N
    r64 = rows.to(tl.int64)
    sacc = tl.full([ROWS, BLOCK_K], 0, tl.float32)
    bacc = tl.full([ROWS, BLOCK_K], 0, tl.float32)
    start = 0
    while start < K:
        cols = start + tl.arange(0, BLOCK_K)
        cm = cols < K
        m = rmask[:, None] & cm[None, :]
        w = tl.load(W + r64[:, None] * swn + cols.to(tl.int64)[None, :] * swk, mask=m, other=0.0).to(tl.float32)
        wf = w
        if HAS_G:
            wf = _cast(w * tl.load(G + cols, mask=cm, other=0.0).to(tl.float32)[None, :], WF.dtype.element_ty)
            tl.store(WF + r64[:, None] * K + cols[None, :], wf, mask=m)
        sacc += wf.to(tl.float32)
        if HAS_BETA:
            bacc += w * tl.load(BETA + cols, mask=cm, other=0.0).to(tl.float32)[None, :]
        start += BLOCK_K
    tl.store(S + rows, tl.sum(sacc, axis=1), mask=rmask)
    if HAS_BF:
        b = tl.sum(bacc, axis=1)
        if HAS_BIAS:
            b += tl.load(BIAS + rows, mask=rmask, other=0.0).to(tl.float32)
        tl.store(BF + rows, b, mask=rmask)


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


# M and rows unspecialized: a new number of rows compiles nothing new (CUDA-graph capture)
@triton.jit(do_not_specialize=["M", "rows"])
def _ln_bwd_kernel(DXN, X, G, BETA, MEAN, RSTD, DX, XN, PART, M, K, rows, sxm, sxk, eps,
                   HAS_G: tl.constexpr, HAS_BETA: tl.constexpr, HAS_DX: tl.constexpr, HAS_XN: tl.constexpr,
                   HAS_DGB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr):
    """The LayerNorm's backward and the Linear's input, in one pass over rows that fit one
    block: program g takes rows [g * rows, (g + 1) * rows) (rows a multiple of BLOCK_M)
    BLOCK_M at a time, reads x (its strides) and dxn = dy W (the gradient of the normalized
    input, contiguous) once, and writes (DX may be DXN: each element is read before the same
    program writes it)
    - DX (HAS_DX): LayerNorm's d_input, rstd * (g dxn - xhat mean(xhat g dxn) - mean(g dxn))
      in fp32 as ATen's, in x's type, contiguous;
    - XN (HAS_XN): the normalized input xhat * g + beta rounded to x's type as eager's
      LayerNorm output is (the weight gradient's GEMM reads it: the fused forward never wrote it);
    - PART [G, 2, K] fp32 (HAS_DGB): row (g, 0) the sum of dxn * xhat over its rows, (g, 1) of
      dxn, which _sum_parts adds up into the LayerNorm's weight and bias gradients.
    A row of equal values has rstd 0 from the statistics kernel (the fold's guard); its
    gradient needs the true 1/sqrt(eps), which is what var = 0 gives."""
    g = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_K).to(tl.int64)  # 64-bit: cols * stride may pass 2**31
    cm = cols < K
    gamma = cols  # dummies without the parameters, never read
    beta = cols
    if HAS_G:
        gamma = tl.load(G + cols, mask=cm, other=0.0).to(tl.float32)
    if HAS_BETA:
        beta = tl.load(BETA + cols, mask=cm, other=0.0).to(tl.float32)
    dg = tl.full([BLOCK_K], 0, tl.float32)
    db = tl.full([BLOCK_K], 0, tl.float32)
    r0 = g * rows
    end = tl.minimum(r0 + rows, M)
    if PIPELINED and STAGES > 1:
        # the next tiles' loads issued while this one is reduced (_bwd_stages); they
        # read rows this program has not written yet, so DX over DXN stays safe
        for t in tl.range(0, tl.cdiv(end - r0, BLOCK_M), num_stages=STAGES):
            dg, db = _ln_bwd_tile(DXN, X, MEAN, RSTD, DX, XN, K, r0 + t * BLOCK_M, end, sxm, sxk, eps, cols, cm,
                                  gamma, beta, dg, db, HAS_G, HAS_BETA, HAS_DX, HAS_XN, HAS_DGB, BLOCK_M)
    else:  # the interpreter: the same tiles (its range() takes no tensor bound)
        r = r0
        while r < end:
            dg, db = _ln_bwd_tile(DXN, X, MEAN, RSTD, DX, XN, K, r, end, sxm, sxk, eps, cols, cm,
                                  gamma, beta, dg, db, HAS_G, HAS_BETA, HAS_DX, HAS_XN, HAS_DGB, BLOCK_M)
            r += BLOCK_M
    if HAS_DGB:
        tl.store(PART + 2 * g * K + cols, dg, mask=cm)
        tl.store(PART + (2 * g + 1) * K + cols, db, mask=cm)


@triton.jit
def _ln_bwd_tile(DXN, X, MEAN, RSTD, DX, XN, K, r, end, sxm, sxk, eps, cols, cm, gamma, beta, dg, db,
                 HAS_G: tl.constexpr, HAS_BETA: tl.constexpr, HAS_DX: tl.constexpr, HAS_XN: tl.constexpr,
                 HAS_DGB: tl.constexpr, BLOCK_M: tl.constexpr):
    """_ln_bwd_kernel's work on the tile of rows [r, r + BLOCK_M) (those below end): XN and DX
    written, the rows' sums added to dg and db, returned."""
    rm = r + tl.arange(0, BLOCK_M).to(tl.int64)
    rmask = rm < end
    m = rmask[:, None] & cm[None, :]
    x = tl.load(X + rm[:, None] * sxm + cols[None, :] * sxk, mask=m, other=0.0).to(tl.float32)
    mean = tl.load(MEAN + rm, mask=rmask, other=0.0)
    rstd = tl.load(RSTD + rm, mask=rmask, other=0.0)
    flat = 1.0 / tl.sqrt(tl.full([BLOCK_M], 0, tl.float32) + eps)
    rstd = tl.where(rstd == 0.0, flat, rstd)
    xhat = tl.where(m, (x - mean[:, None]) * rstd[:, None], 0.0)
    off = rm[:, None] * K + cols[None, :]
    if HAS_XN:
        xn = xhat
        if HAS_G:
            xn = xn * gamma[None, :]
        if HAS_BETA:
            xn = xn + beta[None, :]
        tl.store(XN + off, _cast(xn, XN.dtype.element_ty), mask=m)
    if HAS_DX or HAS_DGB:
        dxn = tl.load(DXN + off, mask=m, other=0.0).to(tl.float32)
        if HAS_DX:
            wdy = dxn
            if HAS_G:
                wdy = dxn * gamma[None, :]
            # both row sums in one reduction (one exchange between the warps of a row)
            c1, c2 = tl.reduce((xhat * wdy, wdy), 1, _add_pairs)
            d = (wdy - (xhat * (c1 / K)[:, None] + (c2 / K)[:, None])) * rstd[:, None]
            tl.store(DX + off, _cast(d, DX.dtype.element_ty), mask=m)
        if HAS_DGB:
            dg += tl.sum(dxn * xhat, axis=0)
            db += tl.sum(dxn, axis=0)
    return dg, db


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


def _stats_config(M, K):
    """(ROWS, BLOCK_K, num_warps) of the statistics kernel: the row in one block of
    next_power_of_2(K) columns up to MAX_BLOCK_K (longer rows in chunks of MAX_BLOCK_K), as
    many rows per program as make a tile of about STATS_TILE elements (at most M rounded up),
    4 warps, 8 from 4096 elements."""
    block = min(1 << (K - 1).bit_length(), MAX_BLOCK_K)
    rows = max(1, min(STATS_TILE // block, 1 << (M - 1).bit_length()))
    return rows, block, 8 if rows * block >= 4096 else 4


def _stats(x, eps, M, K, rs, cs, cfg):
    """mean and rstd (fp32, [M]) of x's M rows of K elements (row stride rs, column stride
    cs); cfg: _stats_config(M, K), None when M or K is 0. Two allocations: on the host one
    [2, M] buffer unpacked into its rows costs twice as much."""
    mean = torch.empty(M, dtype=torch.float32, device=x.device)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    if cfg is not None:
        rows, block, warps = cfg
        _launch(_ln_stats_kernel, ((M + rows - 1) // rows,), (x, mean, rstd, M, K, rs, cs, float(eps)),
                num_warps=warps, ROWS=rows, BLOCK_K=block, SINGLE=K <= block)
    return mean, rstd


@_on_their_device
def ln_stats(x, eps=1e-5):
    """(mean, rstd) of each row of x over the last dim, fp32, shape [rows], for
    ``layernorm_linear(..., stats=...)``. A row of equal values gets rstd = 0 (its normalised
    values are 0 whatever rstd is; eager's would be 1/sqrt(eps))."""
    a = _rows(x)
    M, K = a.shape
    return _stats(a, eps, M, K, a.stride(0), a.stride(1), _stats_config(M, K) if M and K else None)


@_on_their_device
def fold_weights(ln_weight, ln_bias, weight, bias=None):
    """The weights of variant="fold", computed once per weight (in training, once per
    optimizer step): ``(W', b', s)`` with ``W' = W diag(gamma)`` in W's dtype, ``b' = b + W
    beta`` and ``s = rowsum(W')`` in fp32 (``b'`` is None when there is neither a Linear bias
    nor a LayerNorm bias). One launch of _fold_kernel (W read once); W' is W itself (made
    contiguous) without a LayerNorm weight."""
    N, K = weight.shape
    dev = weight.device
    wf = torch.empty((N, K), dtype=weight.dtype, device=dev) if ln_weight is not None else weight.contiguous()
    s = torch.empty(N, dtype=torch.float32, device=dev)
    has_bf = bias is not None or ln_bias is not None
    bf = torch.empty(N, dtype=torch.float32, device=dev) if has_bf else None
    if N == 0:
        return wf, bf, s
    if K == 0:
        s.zero_()
        if has_bf:
            bf.copy_(bias.float() if bias is not None else torch.zeros_like(bf))
        return wf, bf, s
    block = min(1 << (K - 1).bit_length(), MAX_BLOCK_K)
    rows = max(1, min(STATS_TILE // block, 1 << (N - 1).bit_length()))
    g, b, lb = _vector(ln_weight), _vector(bias), _vector(ln_bias)
    _launch(_fold_kernel, ((N + rows - 1) // rows,),
            (weight, s if g is None else g, s if lb is None else lb, s if b is None else b, wf, s,
             s if bf is None else bf, N, K, weight.stride(0), weight.stride(1)),
            num_warps=8 if rows * block >= 4096 else 4, HAS_G=g is not None, HAS_BETA=lb is not None,
            HAS_BF=has_bf, HAS_BIAS=b is not None, ROWS=rows, BLOCK_K=block)
    return wf, bf, s


def _check(x, ln_weight, ln_bias, weight, bias):
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"layernorm_linear: unsupported dtype {x.dtype}")
    if x.dim() == 0 or weight.dim() != 2 or weight.shape[1] != x.shape[-1]:
        raise ValueError(f"layernorm_linear: weight {tuple(weight.shape)} does not match x {tuple(x.shape)}")
    if weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        raise TypeError("layernorm_linear: x, weight and bias must share a dtype (as F.linear requires)")
    k = x.shape[-1]
    for name, t in (("ln_weight", ln_weight), ("ln_bias", ln_bias)):
        if t is not None and t.shape != (k,):
            raise ValueError(f"layernorm_linear: {name} {tuple(t.shape)} does not match K={k}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"layernorm_linear: bias {tuple(bias.shape)} does not match weight {tuple(weight.shape)}")


def _vector(t):
    """The kernels index vectors (norm weights, biases) as contiguous: a strided view is
    copied (tiny)."""
    return t if t is None or t.stride(0) == 1 else t.contiguous()


# Per-call host work is cut by a plan per layout of the inputs (shapes, strides, dtypes of x,
# the weights, the folded weights; the variant): checked once (_check and the folded weights'
# and variant's checks), then what the call needs (sizes, x's rows and strides without a view,
# the statistics' tile, whether the TMA kernel fits the layout, which vectors need a copy) is
# looked up. The plan never holds a kernel or a tile (those are looked up per call); bounded.
_PLANS = {}
_PLANS_MAX = 4096


def _plan(x, ln_weight, ln_bias, weight, bias, variant, folded):
    _check(x, ln_weight, ln_bias, weight, bias)
    if variant not in VARIANTS:
        raise ValueError(f"layernorm_linear: variant must be one of {VARIANTS}")
    N, K = weight.shape
    if K == 0:
        raise ValueError("layernorm_linear: K = 0")
    lead = tuple(x.shape[:-1])
    rows = _gemm_rows(x.shape, x.stride())
    copy = rows is None  # no [rows, K] view of x: a contiguous copy per call (reshape)
    M, rs, cs = (math.prod(lead), K, 1) if copy else rows
    fold = variant == "fold"
    tma = False
    if fold:
        wf, bf, s = folded
        if wf.shape != (N, K) or wf.dtype != weight.dtype or s.shape != (N,) or (bf is not None and bf.shape != (N,)):
            raise ValueError("layernorm_linear: folded weights do not match weight")
        vectors = (bf, s)
        tma = _tma_layout(x.dtype, (rs, cs), wf.stride())  # and the output's rows: (N, 1) when fresh
    else:
        vectors = (ln_weight, ln_bias, bias)
    strided = any(t is not None and t.stride(0) != 1 for t in vectors)
    return (N, K, M, lead + (N,), copy, rs, cs, fold, strided, tma, tma and _tma_layout(x.dtype, (N, 1)),
            INTERPRET or x.dtype == torch.float32, _stats_config(M, K) if M else None)


def _pre_add(x, pre_bias):
    """x + pre_bias (a [K] vector along x's last dim), as the traced convolution added its bias:
    in x's type (a bias of another type cast to it first, as autocast casts the
    convolution's), into a fresh tensor of x's shape with contiguous rows, one pass whatever
    x's strides (a permuted NCHW output too)."""
    if pre_bias.dim() != 1 or pre_bias.shape[0] != x.shape[-1]:
        raise ValueError(f"layernorm_linear: pre_bias must be a vector of x's last dim ({x.shape[-1]}), "
                         f"not {tuple(pre_bias.shape)}")
    if pre_bias.device != x.device:
        raise ValueError("layernorm_linear: pre_bias is on another device than x")
    if pre_bias.dtype != x.dtype:
        pre_bias = pre_bias.to(x.dtype)
    return torch.add(x, pre_bias, out=torch.empty(x.shape, dtype=x.dtype, device=x.device))


@_on_their_device
def layernorm_linear(x, ln_weight, ln_bias, weight, bias=None, eps=1e-5, stats=None, out=None,
                     variant="fold", folded=None, return_stats=False, pre_bias=None):
    """y = linear(layer_norm(x, (K,), ln_weight, ln_bias, eps), weight, bias), no autograd
    (layernorm_linear_train and LayerNormLinear train through LayerNormLinearFunction).

    ``variant``: "fold" (default) or "normalize" (see the module docstring). ``folded`` =
    ``fold_weights(ln_weight, ln_bias, weight, bias)`` computed once and reused (without it the
    fold is computed on every call, a full pass over the weight). ``stats`` = (mean, rstd) from
    ``ln_stats`` to share one stats pass between Linears; ``return_stats=True`` returns
    ``(y, (mean, rstd))``, the statistics used (LayerNormLinearFunction saves them).
    ``pre_bias``: a [K] vector added to x before the norm (``_pre_add``: the bias of the
    convolution before it, which then runs without it)."""
    if pre_bias is not None:
        x = _pre_add(x, pre_bias)
    fkey = None
    if variant == "fold":
        if folded is None:
            _check(x, ln_weight, ln_bias, weight, bias)  # its errors before the fold's
            folded = fold_weights(ln_weight, ln_bias, weight, bias)
        wf, bf, s = folded
        fkey = (wf.shape, wf.stride(), wf.dtype, s.shape, s.stride(), None if bf is None else (bf.shape, bf.stride()))
    key = (x.shape, x.stride(), x.dtype, weight.shape, weight.stride(), weight.dtype, variant, fkey,
           None if bias is None else (bias.shape, bias.stride(), bias.dtype),
           None if ln_weight is None else (ln_weight.shape, ln_weight.stride()),
           None if ln_bias is None else (ln_bias.shape, ln_bias.stride()))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(x, ln_weight, ln_bias, weight, bias, variant, folded)
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = plan
    N, K, M, shape, copy, rs, cs, fold, strided, tma_xw, tma, dot_f32, stats_cfg = plan
    if strided:
        if fold:
            bf, s = _vector(bf), _vector(s)
        else:
            ln_weight, ln_bias, bias = _vector(ln_weight), _vector(ln_bias), _vector(bias)
    if stats is not None:
        mean, rstd = stats
        for t in (mean, rstd):
            if t.shape != (M,) or t.dtype != torch.float32 or t.stride(0) != 1 or t.device != x.device:
                raise ValueError(f"layernorm_linear: stats must be two contiguous fp32 vectors of {M} rows (ln_stats)")
    if out is None:
        out = torch.empty(*shape, dtype=x.dtype, device=x.device)
        ys, ycs = N, 1  # a fresh output: contiguous rows
    else:
        if out.shape != shape or out.dtype != x.dtype or out.device != x.device:
            raise ValueError("layernorm_linear: out has the wrong shape, dtype or device")
        ins = [("x", x), ("ln_weight", ln_weight), ("ln_bias", ln_bias), ("weight", weight), ("bias", bias)]
        if fold:
            ins += [("folded weight", wf), ("folded bias", bf), ("folded sums", s)]
        if stats is not None:
            ins += [("mean", mean), ("rstd", rstd)]
        _check_alias("layernorm_linear", [("out", out)], ins)
        rows = _gemm_rows(out.shape, out.stride())
        if rows is None:
            raise ValueError("output must be viewable as [rows, N]")
        _, ys, ycs = rows
        tma = tma_xw and _tma_layout(x.dtype, (ys, ycs))
    a = x.reshape(-1, K) if copy else x  # the kernels read x's rows through rs, cs
    if M == 0 or N == 0:
        if not return_stats:
            return out
        return out, (stats if stats is not None else _stats(a, eps, M, K, rs, cs, stats_cfg))
    got = [] if stats is None else [mean, rstd]

    def stats_of():  # the statistics pass, run at most once a call, where a path reads it
        if not got:
            got.extend(_stats(a, eps, M, K, rs, cs, stats_cfg))
        return got

    # the pointer kernel, for both variants; in_kernel: the rows' statistics computed in the
    # GEMM kernel itself (one launch a call: eager use, where the statistics pass's launch, 17
    # us of host work on the H200, costs more than the GPU time of reading the rows again)
    if fold:
        flags = (True, bf is not None)
        sw0, sw1 = wf.stride()
        vectors = (s, s, wf, bf if flags[1] else s)
    else:
        flags = (False, ln_weight is not None, ln_bias is not None, bias is not None)
        sw0, sw1 = weight.stride()
        vectors = (ln_weight if flags[1] else a, ln_bias if flags[2] else a, weight, bias if flags[3] else weight)

    def run_pointer(tile, y, in_kernel):
        mean, rstd = (a, a) if in_kernel else stats_of()  # (a: a placeholder, never read)
        _gemm_launch(_ln_linear_kernel, _gemm_grid(M, N, tile), (),
                     (a, mean, rstd, *vectors, y, M, N, rs, cs, sw0, sw1, ys, ycs, float(eps)), tile[:5], K=K,
                     FOLD=fold, HAS_G=not fold and flags[1], HAS_BETA=not fold and flags[2], HAS_BIAS=flags[-1],
                     STATS=in_kernel, DOT_F32=dot_f32)

    tma = fold and tma and (a.data_ptr() | wf.data_ptr() | out.data_ptr()) % 16 == 0
    if tma:
        ash, ast, wsh, wst, ysh, yst = [M, K], [rs, 1], [N, K], [wf.stride(0), 1], [M, N], [ys, 1]

        def run_tma(tile, y):
            bm, bn, bk = tile[:3]
            mean, rstd = stats_of()
            _gemm_launch(_fold_tma_kernel, _gemm_grid(M, N, tile),
                         (_desc(a, ash, ast, [bm, bk]), _desc(wf, wsh, wst, [bn, bk]), _desc(y, ysh, yst, [bm, bn])),
                         (mean, rstd, s, bf if flags[1] else s, M, N), tile, K=K, HAS_BIAS=flags[1], DOT_F32=dot_f32)

    # the library path: the normalized input written once (the backward's normalizing pass,
    # _ln_bwd_kernel with HAS_XN alone, from the statistics above), then cuBLAS (ATen's addmm)
    # with the unfolded weight: eager's LayerNorm and Linear with our statistics, where the
    # Triton GEMM loses to cuBLAS by more than the normalized input's round trip costs (N
    # large for K: the MLP blocks' 16x256x2048->8192, 212.8 against eager's 207.7 us on the
    # H200). Open to contiguous outputs only (ATen's out= would copy into others)
    library = (ys, ycs) == (N, 1)

    def run(tile, y):
        if tile is not GEMM_LIBRARY:  # a sixth element: an eager-use alternative (below)
            if len(tile) == 6:
                return run_pointer(tile, y, tile[5] == 2)
            return run_tma(tile, y) if tma else run_pointer(tile, y, False)
        mean, rstd = stats_of()
        a2 = a.as_strided((M, K), (rs, cs))
        xn = _ln_backward(a2, a2, _vector(ln_weight), _vector(ln_bias), mean, rstd, eps, (False, True, False, False))[1]
        with torch.no_grad():  # ATen's out= refuses operands that require grad (a Linear's weight)
            if bias is None:
                torch.mm(xn, weight.t(), out=y.view(M, N))
            else:
                torch.addmm(bias, xn, weight.t(), out=y.view(M, N))

    # eager-use alternatives to a tile (_gemm_tile's alts): the fold with the statistics in the
    # GEMM kernel, one launch (code 2; not where the caller gives or wants the statistics),
    # and for a TMA tile the same tile on the pointer kernel (code 1: 3.6-4.7 us less host
    # work a launch)
    one = fold and stats is None and not return_stats
    codes = ((2,) if one else ()) + ((1,) if tma else ())
    def tuning(t):  # a timed run: a scratch output, and the statistics pass again where the
        if stats is None:  # path reads it (its host work and GPU time are the path's)
            got.clear()
        run(t, torch.empty_strided((M, N), (ys, ycs), dtype=x.dtype, device=x.device))

    # tuned once per bucket of M (the caller's out is written once, below)
    def whole(t):  # a whole call (the host work a call of t pays), fresh output, no out=
        layernorm_linear(x, ln_weight, ln_bias, weight, bias, eps, stats=stats, variant=variant, folded=folded,
                         return_stats=return_stats)

    tile = _gemm_tile(_fold_tma_kernel if tma else _ln_linear_kernel, M, N, K, x, flags + (library, one), tuning,
                      library, (lambda t: [t + (c,) for c in codes]) if codes else None, whole)
    if stats is None:  # (after a tuning call: statistics of this call's own, not a timed run's)
        got.clear()
    run(tile, out)
    if not return_stats:
        return out
    return out, tuple(stats_of())


# The backward's row groups (_ln_bwd_kernel): about BWD_GROUPS programs of at least
# BWD_MIN_ROWS rows each, so that the LayerNorm weight's and bias' partial sums are a few
# hundred fp32 rows whatever M is; each program's tile is BLOCK_M rows of BLOCK_K, about
# BWD_TILE elements, at _bwd_warps. Rows longer than MAX_BWD_K take ATen's LayerNorm backward.
# The same plan as add_layernorm's one-pass backward (measured there on the H200: tiles of
# 2048 at 4 warps, 512 groups).
BWD_GROUPS = 8 if INTERPRET else 512
BWD_MIN_ROWS = 1 if INTERPRET else 4
BWD_TILE = 256 if INTERPRET else 2048
MAX_BWD_K = 256 if INTERPRET else 8192


def _ln_backward(a, dxn, gamma, beta, mean, rstd, eps, need):
    """(dx [M, K] or None, xn [M, K] or None, dgamma, dbeta) for rows a [M, K] (any strides)
    and dxn [M, K] (contiguous, of a's dtype, the gradient of the normalized input, which dx
    overwrites), need = (dx, xn, dgamma, dbeta). Rows that fit MAX_BWD_K: one _ln_bwd_kernel pass and one _sum_parts;
    longer rows: ATen's LayerNorm backward and the normalized input in torch ops."""
    M, K = a.shape
    need_dx, need_xn, need_g, need_b = need
    need_g, need_b = need_g and gamma is not None, need_b and beta is not None
    dev = a.device
    xn = torch.empty((M, K), dtype=a.dtype, device=dev) if need_xn else None
    dg = torch.empty(K, dtype=gamma.dtype, device=dev) if need_g else None
    db = torch.empty(K, dtype=beta.dtype, device=dev) if need_b else None
    if M == 0:
        for t in (dg, db):
            if t is not None:
                t.zero_()
        return (dxn if need_dx else None), xn, dg, db
    if K > MAX_BWD_K:
        true_rstd = torch.where(rstd == 0, torch.full_like(rstd, 1.0 / math.sqrt(eps)), rstd)
        if need_xn:
            xh = (a.float() - mean[:, None]) * true_rstd[:, None]
            xn.copy_(torch.addcmul(beta.float() if beta is not None else torch.zeros_like(xh[0]), xh,
                                   gamma.float() if gamma is not None else torch.ones_like(xh[0])))
        if need_dx or need_g or need_b:
            # CUDA's native_layer_norm keeps fp32 stats; the CPU kernels want the input dtype
            sd = torch.float32 if a.is_cuda else a.dtype
            dx, g_, b_ = torch.ops.aten.native_layer_norm_backward(
                dxn, a.contiguous(), [K], mean.view(M, 1).to(sd), true_rstd.view(M, 1).to(sd), gamma, beta,
                [need_dx, need_g, need_b])
            for out, t in ((dg, g_), (db, b_)):
                if out is not None:
                    out.copy_(t)
            return dx, xn, dg, db
        return None, xn, dg, db
    block = min(1 << (K - 1).bit_length(), MAX_BWD_K)
    bm = max(1, BWD_TILE // block)
    rows = max(BWD_MIN_ROWS, -(-M // BWD_GROUPS))
    rows = -(-rows // bm) * bm  # whole tiles per program
    groups = -(-M // rows)
    part = torch.empty((groups, 2, K), dtype=torch.float32, device=dev) if need_g or need_b else mean
    # d_input over dxn, in place (each element read, then written, by one program): one
    # [M, K] buffer fewer at the backward's peak, which is then eager's
    _launch(_ln_bwd_kernel, (groups,),
            (dxn, a, mean if gamma is None else gamma, mean if beta is None else beta, mean, rstd,
             dxn, mean if xn is None else xn, part, M, K, rows, a.stride(0), a.stride(1), float(eps)),
            num_warps=_bwd_warps(bm * block), HAS_G=gamma is not None, HAS_BETA=beta is not None,
            HAS_DX=need_dx, HAS_XN=need_xn, HAS_DGB=need_g or need_b, BLOCK_M=bm, BLOCK_K=block,
            STAGES=_bwd_stages(bm))
    if need_g or need_b:  # part [groups, 2, K]: row 0 the weight's sums, row 1 the bias'
        _part_sums(part, [t for t in (dg, db) if t is not None], 0 if need_g else 1)
    return (dxn if need_dx else None), xn, dg, db


class LayerNormLinearFunction(torch.autograd.Function):
    """Autograd for layernorm_linear (either variant). Forward: the statistics kernel, then
    the fused GEMM; saved: x, the parameters and the fp32 mean and rstd, not the normalized
    input eager's Linear saves (M x K fewer elements held from forward to backward). Backward:
    dxn = dy W (cuBLAS), one pass (_ln_bwd_kernel) writing the LayerNorm's d_input, the
    normalized input for the weight gradient and the per-program sums of dgamma and dbeta,
    then dW = dy^T xn (cuBLAS), the bias gradient as eager's row sum, and _sum_parts."""

    @staticmethod
    def forward(ctx, x, ln_weight, ln_bias, weight, bias, eps, variant, folded, pre_bias=None):
        if pre_bias is not None:  # the sum the LayerNorm reads, saved in x's place
            x = _pre_add(x, pre_bias)
        y, (mean, rstd) = layernorm_linear(x, ln_weight, ln_bias, weight, bias, eps, variant=variant, folded=folded,
                                           return_stats=True)
        ctx.save_for_backward(x, ln_weight, ln_bias, weight, mean, rstd)
        ctx.eps = eps
        ctx.has_bias = bias is not None
        ctx.pre = None if pre_bias is None else pre_bias.dtype
        return y

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, dy):
        x, gamma, beta, weight, mean, rstd = ctx.saved_tensors
        N, K = weight.shape
        need_x, need_g, need_b, need_w, need_bias = ctx.needs_input_grad[:5]
        need_pre = ctx.pre is not None and ctx.needs_input_grad[8]
        dy2 = dy.reshape(-1, N)
        a = _rows(x)  # the forward's rows (a copy only when x has no [rows, K] view)
        dxn = dy2 @ weight if need_x or need_pre or need_g or need_b else None
        dx, xn, dg, db = _ln_backward(a, dxn, gamma, beta, mean, rstd, ctx.eps,
                                      (need_x or need_pre, need_w, need_g, need_b))
        dw = dy2.t() @ xn if need_w else None
        dbias = _col_sums(dy2, torch.empty(N, dtype=dy.dtype, device=dy.device)) if ctx.has_bias and need_bias else None
        grads = ((dx.view(x.shape) if need_x else None), dg, db, dw, dbias, None, None, None)
        if ctx.pre is None:
            return grads
        # the bias before the norm: its gradient sums the norm's d_input over the rows
        dpre = _col_sums(dx, torch.empty(K, dtype=ctx.pre, device=dx.device)) if need_pre else None
        return grads + (dpre,)


@_on_their_device
def layernorm_linear_train(x, ln_weight, ln_bias, weight, bias=None, eps=1e-5, variant="fold", folded=None,
                           pre_bias=None):
    """y = linear(layer_norm(x [+ pre_bias])) through LayerNormLinearFunction (autograd). For
    variant="fold" without ``folded`` the weights are folded in this call (as a training step
    must after every optimizer step: LayerNormLinear caches the fold per parameter version)."""
    if variant == "fold" and folded is None:
        _check(x, ln_weight, ln_bias, weight, bias)
        with torch.no_grad():
            folded = fold_weights(ln_weight, ln_bias, weight, bias)
    if pre_bias is None:
        return LayerNormLinearFunction.apply(x, ln_weight, ln_bias, weight, bias, eps, variant, folded)
    return LayerNormLinearFunction.apply(x, ln_weight, ln_bias, weight, bias, eps, variant, folded, pre_bias)


class LayerNormLinear(torch.nn.Module):
    """Drop-in for ``linear(layer_norm(x))``: ``LayerNormLinear.from_modules(ln, linear)(x)``.

    Shares the two modules' parameters and keeps the folded weights of variant="fold",
    recomputed when a parameter is changed or replaced (in training: once per optimizer
    step). When autograd needs a graph it runs LayerNormLinearFunction.

    ``pre_bias``: the bias of the convolution before the norm (ConvNeXt's depthwise conv,
    then a permute to channels-last): ``from_modules(ln, linear, pre_bias=conv.bias)`` after
    which the convolution must run without it (``conv.register_parameter("bias", None)``);
    the module holds it as its parameter ``pre_bias`` and adds it to x before the norm."""

    def __init__(self, ln, linear, variant="fold", pre_bias=None):
        super().__init__()
        if len(ln.normalized_shape) != 1 or ln.normalized_shape[0] != linear.in_features:
            raise ValueError("LayerNorm must be over the last dim, of the Linear's in_features")
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}")
        if pre_bias is not None and (pre_bias.dim() != 1 or pre_bias.shape[0] != linear.in_features):
            raise ValueError("pre_bias must be a vector of the Linear's in_features")
        self.ln, self.linear, self.variant = ln, linear, variant
        self.pre_bias = pre_bias if pre_bias is None or isinstance(pre_bias, torch.nn.Parameter) else \
            torch.nn.Parameter(pre_bias.detach().clone())
        self._folded, self._folded_key = None, None

    @classmethod
    def from_modules(cls, ln, linear, variant="fold", pre_bias=None):
        return cls(ln, linear, variant, pre_bias)

    def _params(self):
        return (self.ln.weight, self.ln.bias, self.linear.weight, self.linear.bias)

    def folded(self, dtype=None):
        """The folded weights of the parameters (cast to dtype first: autocast's), recomputed
        when a parameter is changed or replaced, or the dtype changes."""
        key = (dtype,) + tuple((p.data_ptr(), p._version, p.dtype) if p is not None else None for p in self._params())
        if key != self._folded_key:
            with torch.no_grad():
                params = self._params() if dtype is None else [None if p is None else p.to(dtype) for p in self._params()]
                self._folded = fold_weights(*params)
            self._folded_key = key
        return self._folded

    def forward(self, x):
        """Under autocast (x's device type) the chain runs as autocast runs the Linear: x and
        the parameters cast to autocast's dtype (differentiably: the gradients reach them in
        their own types), the fused kernel in that dtype, y in it; the fold is kept per dtype.
        (Eager autocast normalizes in fp32 and rounds the normalized x; here x is rounded
        before it is normalized, as in a bf16 model.)"""
        params = self._params()
        pre = self.pre_bias
        dev = x.device.type
        dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None
        if dtype is not None and dtype != x.dtype:
            x = x.to(dtype)
        if dtype is not None:
            params = tuple(p if p is None or p.dtype == dtype else p.to(dtype) for p in params)
            if pre is not None and pre.dtype != dtype:
                pre = pre.to(dtype)
        folded = self.folded(dtype) if self.variant == "fold" else None
        with torch.autocast(dev, enabled=False) if dtype is not None else contextlib.nullcontext():
            grads = x.requires_grad or any(p is not None and p.requires_grad for p in params + (pre,))
            if torch.is_grad_enabled() and grads:
                if pre is None:
                    return LayerNormLinearFunction.apply(x, *params, self.ln.eps, self.variant, folded)
                return LayerNormLinearFunction.apply(x, *params, self.ln.eps, self.variant, folded, pre)
            return layernorm_linear(x, *params, self.ln.eps, variant=self.variant, folded=folded, pre_bias=pre)
