"""Fused cross-entropy: ``F.cross_entropy(logits, target)`` over class indices as one row-wise
kernel forward and one backward, reading 16-bit logits where the model upcasts them first.

Replaces, in a training step (HF ``ForCausalLMLoss``: ``logits.float()``, then
``F.cross_entropy``):

- forward: the fp32 copy of the logits (``aten::to``), ``log_softmax`` (the log-probabilities
  written, [M, V] fp32) and ``nll_loss`` (a gather and a mean);
- backward: ``nll_loss_backward`` (an [M, V] tensor of zeros with one -1/n a row),
  ``_log_softmax_backward_data`` (reads it and the saved log-probabilities) and the gradient's
  copy back to the logits' type (``ToCopyBackward0``).

Eager moves about 36 bytes an element of the logits for bf16 ones; this kernel 6: the forward
reads the logits once (an online max and sum of exponentials over the row, the log-sum-exp
kept, 4 bytes a row), the backward reads them again and writes their gradient,
``(softmax(x) - onehot(t)) * g``, in their own type. Nothing of [M, V] is saved: the memory a
training step's loss allocates falls from eager's 12 bytes an element of bf16 logits (the fp32
copy, the fp32 log-probabilities and their gradients) to the gradient's 2 (H200, 4096x8192:
384 against 64 MiB).

- One program per row, the row in chunks of BLOCK_V (``_plan``: up to 2048 forward and 4096
  backward on a GPU, 128 under the interpreter so that the tests' rows take the loop); no autotuner, so a new
  shape costs no tuning and CUDA-graph capture works at any shape.
- ``label_smoothing`` e: eager's ``(1 - e) * nll + e * mean over the classes of -log p``, a
  running sum of the row beside the log-sum-exp; the gradient subtracts ``(1 - e)`` at the
  target and ``e / V`` everywhere.
- ``reduction``: "mean" (over the rows whose target is not ``ignore_index``: eager's; NaN when
  there are none, as eager), "sum" or "none" (a loss a row). The mean's count and sum are made
  on the device by one small kernel (one program, rows in order: the same bits on every run),
  never read by the host: no synchronization, graph capture works.
- ``upcast``: "float", the model's ``logits.float()`` before the loss (the loss fp32, the
  gradient rounded once to the logits' type, as ToCopyBackward0 rounds eager's); "autocast",
  the loss of 16-bit logits under CUDA autocast (eager's log_softmax rounds to the logits'
  type and nll_loss upcasts; the loss fp32); "none", the loss in the logits' type. The kernel
  computes in fp32 in every case.
- A target outside [0, V) that is not ``ignore_index`` makes its row's loss (and so the
  mean) and its gradient NaN where eager stops with a device-side assert: never a read out of
  bounds, never a silently finite loss.
- Strides are runtime arguments; row and column offsets are 64-bit (a transposed view whose
  ``col * stride`` passes 2**31).
- Training: ``CrossEntropyFunction`` saves the logits (not a copy), the target and the
  log-sum-exp; its backward is ``@once_differentiable``.

Interpreter-safe: ``tl.exp``/``tl.log`` (no libdevice), no bf16 arithmetic, ``tl.full``.
"""

import functools
import os

import torch
from torch.autograd.function import once_differentiable
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
REDUCTION = {"none": 0, "mean": 1, "sum": 2}
UPCAST = ("float", "autocast", "none")
# the longest chunk of a row a program holds; longer rows loop (the interpreter keeps chunks
# small so that the tests' rows of 300 and 1500 classes loop)
MAX_BLOCK_V = 128 if INTERPRET else 4096
# the mean's and sum's reduction over the rows: one program, rows in chunks of this many
SUM_BLOCK = 64 if INTERPRET else 1024


# the forward's longest chunk: chunks of 2048 at 4 warps (16 elements a thread) ran 0.5-6% faster
# than 4096 at 8 on an H100 at all five probed shapes (bench/experiments/probe_ce_fwd.py,
# 2026-12-05: 4096x8192 bf16 28.7 against 30.2 us, 4096x30522 111.8 against 118.6, 8192x50257
# 340.5 against 361.1, 8192x128256 693.2 against 696.7; a per-lane running max and sum, and 16
# warps, slower)
MAX_FWD_BLOCK_V = 2048


@functools.lru_cache(maxsize=1024)
def _plan(V, max_block, backward=False):
    """(BLOCK_V, num_warps) for rows of V classes: the forward's row in chunks of up to
    MAX_FWD_BLOCK_V (and max_block), BLOCK_V // 512 warps (16 elements a thread), 1 to 4 of
    them; the backward's in one chunk up to max_block, 1 to 16 warps (BLOCK_V // 256, at least
    512 at the most: at 8 warps ptxas kept its 4096-wide chunk in 80 registers and spilled, at
    16 it needs 40; test_compiles_for_the_h200_without_spills)."""
    if backward:
        block = min(triton.next_power_of_2(max(V, 1)), max_block)
        return block, min(max(block // 256, 1), 16)
    block = min(triton.next_power_of_2(max(V, 1)), max_block, MAX_FWD_BLOCK_V)
    return block, min(max(block // 512, 1), 4)


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
def _ce_fwd(X, T, LOSS, LSE, V, sxm, sxv, st, ignore_index, smoothing,
            SMOOTH: tl.constexpr, BLOCK_V: tl.constexpr):
    """Row t's log-sum-exp (into LSE, fp32) and loss lse - x[t] (into LOSS in its type; 0 where
    the target is ignore_index, NaN where it is outside [0, V)); with label smoothing e,
    (1 - e) * (lse - x[t]) + e * (lse - mean(x))."""
    row = tl.program_id(0).to(tl.int64)
    X += row * sxm
    offs = tl.arange(0, BLOCK_V).to(tl.int64)  # 64-bit: cols * stride may pass 2**31
    m = tl.full([], float("-inf"), tl.float32)  # the running maximum
    s = tl.full([], 0.0, tl.float32)  # the running sum of exp(x - m)
    sx = tl.full([], 0.0, tl.float32)  # the row's sum (label smoothing)
    start = 0
    while start < V:  # (while: Triton 3.6's interpreter with numpy 2.4 rejects range(runtime V))
        cols = start + offs
        x = tl.load(X + cols * sxv, mask=cols < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # while the row so far is -inf, shift by 0: exp(-inf - -inf) would be NaN
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
        if SMOOTH:
            sx += tl.sum(tl.where(cols < V, x, 0.0), axis=0)
        start += BLOCK_V
    lse = m + tl.log(s)
    t = tl.load(T + row * st)
    ignored = t == ignore_index
    inside = (t >= 0) & (t < V)
    xt = tl.load(X + t.to(tl.int64) * sxv, mask=inside & (t != ignore_index), other=0.0).to(tl.float32)
    nll = lse - xt
    if SMOOTH:  # eager's (1 - e) * nll + (e / V) * -(sum of the log-probabilities)
        nll = (1.0 - smoothing) * nll + smoothing * (lse - sx / V)
    loss = tl.where(ignored, 0.0, tl.where(inside, nll, float("nan")))
    tl.store(LOSS + row, _cast(loss, LOSS.dtype.element_ty))
    tl.store(LSE + row, lse)


@triton.jit
def _ce_reduce(LOSS, T, OUT, COUNT, M, st, ignore_index, MEAN: tl.constexpr, BLOCK: tl.constexpr):
    """OUT = the rows' losses summed (divided by the count of rows not ignored for the mean,
    which goes to COUNT, fp32, for the backward); one program, rows in order."""
    offs = tl.arange(0, BLOCK).to(tl.int64)
    acc = tl.full([BLOCK], 0.0, tl.float32)
    cnt = tl.full([BLOCK], 0.0, tl.float32)
    start = 0
    while start < M:
        rows = start + offs
        m = rows < M
        acc += tl.load(LOSS + rows, mask=m, other=0.0)
        t = tl.load(T + rows * st, mask=m, other=ignore_index)
        cnt += tl.where(m & (t != ignore_index), 1.0, 0.0)
        start += BLOCK
    total = tl.sum(acc, axis=0)
    if MEAN:
        n = tl.sum(cnt, axis=0)
        tl.store(COUNT, n)
        total = total / n
    tl.store(OUT, _cast(total, OUT.dtype.element_ty))


@triton.jit
def _ce_bwd(X, T, LSE, DLOSS, COUNT, DX, V, sxm, sxv, st, sdl, sdm, sdv, ignore_index, smoothing,
            REDUCTION: tl.constexpr, BLOCK_V: tl.constexpr):
    """Row t's gradient (softmax(x) - (1 - e) * onehot(t) - e / V) * g into DX in its type, e
    the label smoothing: g the loss gradient (a row's for "none", the scalar's, divided by the
    count for "mean"); 0 where the target is ignore_index, NaN where it is outside [0, V)."""
    row = tl.program_id(0).to(tl.int64)
    X += row * sxm
    DX += row * sdm
    t = tl.load(T + row * st)
    lse = tl.load(LSE + row)
    if REDUCTION == 0:
        g = tl.load(DLOSS + row * sdl).to(tl.float32)
    else:
        g = tl.load(DLOSS).to(tl.float32)
        if REDUCTION == 1:
            g = g / tl.load(COUNT)
    inside = (t >= 0) & (t < V)
    g = tl.where(t == ignore_index, 0.0, tl.where(inside, g, float("nan")))
    spread = smoothing / V  # label smoothing's share of every class
    hit = 1.0 - smoothing  # and the target's
    offs = tl.arange(0, BLOCK_V).to(tl.int64)  # 64-bit: cols * stride may pass 2**31
    start = 0
    while start < V:
        cols = start + offs
        m = cols < V
        x = tl.load(X + cols * sxv, mask=m, other=0.0).to(tl.float32)
        p = tl.exp(x - lse) - spread
        d = tl.where(cols == t, p - hit, p) * g
        tl.store(DX + cols * sdv, _cast(d, DX.dtype.element_ty), mask=m)
        start += BLOCK_V


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


def loss_dtype(x, upcast):
    """The loss's type: fp32 when the logits are upcast (by the model or by autocast), else
    the logits' own."""
    return torch.float32 if upcast in ("float", "autocast") else x.dtype


def _check(x, target, reduction, upcast, label_smoothing):
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"cross_entropy: unsupported logits dtype {x.dtype}")
    if target.dtype != torch.int64:
        raise TypeError(f"cross_entropy: target must hold class indices (int64), got {target.dtype}; "
                        "class probabilities are not supported")
    if x.dim() != 2 or target.dim() != 1 or target.shape[0] != x.shape[0]:
        raise ValueError(f"cross_entropy: want logits [M, V] and target [M], got {tuple(x.shape)} and "
                         f"{tuple(target.shape)} (view [..., V] logits as [-1, V] first)")
    if target.device != x.device:
        raise ValueError("cross_entropy: logits and target on different devices")
    if reduction not in REDUCTION:
        raise ValueError(f"cross_entropy: reduction={reduction!r} (want one of {sorted(REDUCTION)})")
    if upcast not in UPCAST:
        raise ValueError(f"cross_entropy: upcast={upcast!r} (want one of {list(UPCAST)})")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing={label_smoothing!r} (want 0 <= e <= 1)")
    if x.shape[0] >= 2**31:
        raise ValueError(f"cross_entropy: {x.shape[0]} rows (one program each: at most 2**31 - 1)")


@_on_their_device
def _forward(x, target, ignore_index, reduction, upcast, label_smoothing=0.0, block_v=None):
    """(loss, lse, count): the loss as reduction asks, each row's log-sum-exp (fp32) and, for
    the mean, the count of rows not ignored (fp32, 0-dim; else None)."""
    label_smoothing = float(label_smoothing)
    _check(x, target, reduction, upcast, label_smoothing)
    M, V = x.shape
    dtype = loss_dtype(x, upcast)
    lse = torch.empty(M, dtype=torch.float32, device=x.device)
    red = REDUCTION[reduction]
    rows = torch.empty(M, dtype=dtype if red == 0 else torch.float32, device=x.device)
    count = torch.empty((), dtype=torch.float32, device=x.device) if red == 1 else None
    if M and V:
        block, warps = _plan(V, MAX_BLOCK_V)
        if block_v:
            block = block_v
        _launch(_ce_fwd, (M,), (x, target, rows, lse, V, x.stride(0), x.stride(1), target.stride(0),
                                int(ignore_index), label_smoothing),
                num_warps=warps, SMOOTH=label_smoothing != 0.0, BLOCK_V=block)
    elif M:  # no classes: eager's log_softmax of an empty row is -inf, every loss NaN (or 0 ignored)
        lse.fill_(float("-inf"))
        rows.copy_(torch.where(target == ignore_index, 0.0, float("nan")))
    if red == 0:
        return rows, lse, None
    out = torch.empty((), dtype=dtype, device=x.device)
    _launch(_ce_reduce, (1,), (rows, target, out, out if count is None else count, M, target.stride(0),
                               int(ignore_index)), num_warps=4, MEAN=red == 1, BLOCK=SUM_BLOCK)
    return out, lse, count


def cross_entropy(x, target, ignore_index=-100, reduction="mean", upcast="float", label_smoothing=0.0,
                  block_v=None):
    """``F.cross_entropy(x.float() if upcast == "float" else x, target, ignore_index=...,
    reduction=..., label_smoothing=...)`` for logits x [M, V] and class indices target [M];
    forward only (see CrossEntropyFunction). ``block_v`` forces the chunk of a row (tests use it)."""
    return _forward(x, target, ignore_index, reduction, upcast, label_smoothing, block_v)[0]


class CrossEntropyFunction(torch.autograd.Function):
    """Autograd for cross_entropy: the forward keeps each row's log-sum-exp; the backward reads
    the logits once more and writes their gradient in their type, in one pass."""

    @staticmethod
    def forward(ctx, x, target, ignore_index=-100, reduction="mean", upcast="float", label_smoothing=0.0):
        loss, lse, count = _forward(x, target, ignore_index, reduction, upcast, label_smoothing)
        ctx.save_for_backward(x, target, lse, count)
        ctx.ignore_index, ctx.reduction, ctx.smoothing = int(ignore_index), reduction, float(label_smoothing)
        return loss

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, dloss):
        x, target, lse, count = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None, None
        M, V = x.shape
        dx = torch.empty((M, V), dtype=x.dtype, device=x.device)
        if M and V:
            red = REDUCTION[ctx.reduction]
            block, warps = _plan(V, MAX_BLOCK_V, backward=True)
            sdl = dloss.stride(0) if red == 0 else 0
            _launch(_ce_bwd, (M,), (x, target, lse, dloss, lse if count is None else count, dx, V, x.stride(0),
                                    x.stride(1), target.stride(0), sdl, dx.stride(0), dx.stride(1), ctx.ignore_index,
                                    ctx.smoothing),
                    num_warps=warps, REDUCTION=red, BLOCK_V=block)
        return dx, None, None, None, None, None


class CrossEntropy(torch.nn.Module):
    """Drop-in for ``F.cross_entropy(logits.float(), target)`` (upcast="float", HF's causal-LM
    loss), for the loss of 16-bit logits under autocast (upcast="autocast") or in their own type
    (upcast="none"). Logits [M, V] (view [..., V] ones as [-1, V]), class indices [M]."""

    def __init__(self, ignore_index=-100, reduction="mean", upcast="float", label_smoothing=0.0):
        super().__init__()
        if reduction not in REDUCTION:
            raise ValueError(f"reduction={reduction!r} (want one of {sorted(REDUCTION)})")
        if upcast not in UPCAST:
            raise ValueError(f"upcast={upcast!r} (want one of {list(UPCAST)})")
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing={label_smoothing!r} (want 0 <= e <= 1)")
        self.ignore_index, self.reduction, self.upcast = ignore_index, reduction, upcast
        self.label_smoothing = label_smoothing

    def forward(self, logits, target):
        return CrossEntropyFunction.apply(logits, target, self.ignore_index, self.reduction, self.upcast,
                                          self.label_smoothing)
