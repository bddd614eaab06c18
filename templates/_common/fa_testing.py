"""Shared test helpers for fuseadvise kernel templates and generated kernel folders.

This file is copied verbatim into every generated folder (as ``fa_testing.py``), and beside
the verifier's runner, which compares with its ``compare``; it imports nothing but the
standard library and torch (triton inside the functions that use it).

- ``load_sibling(test_file, name)`` imports ``<name>.py`` from the directory of
  ``test_file`` under a module name unique to that directory, so many template or generated
  folders (each with its own ``kernel.py``) can be collected by one pytest process.
- ``assert_close(got, want, atol, rtol)`` fails where ``|got - want| > atol + rtol * |want|``,
  and on NaN / +-inf mismatches (integers and bools exactly), and reports the count and the
  first mismatches (index, got, want); ``compare`` gives the same judgement as numbers (the
  verifier's), both from ``mismatches``.
- ``TOL`` holds the per-dtype tolerances from the project's kernel conventions.
- ``run_case`` and ``run_grad_case`` check one forward and one gradient trial; gradients
  whose rounding differs from eager's by design are held to the quack check
  (``quack_check``: within twice eager's error against the chain in a higher precision, plus
  reordering noise), which the verifier (``fuseadvise verify``) uses too.
- ``devices()`` gives the pytest parameters ``cpu`` (Triton interpreter) and ``cuda`` (marked
  ``gpu``); each is skipped where it cannot run.
- ``gpu_time_us(fn)`` and ``wall_time_us(fn)`` time a call on the GPU (bench.py and the
  benchmark harness use them): GPU time with L2 emptied of dirty lines before every call, and
  the per-call wall and host time of calls made as an eager model makes them.
"""

import hashlib
import importlib.util
import math
import mmap
import os
import pathlib
import sys
import time

import torch

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _lighter_interpreter():
    """Takes three costs of Triton 3.6's interpreter that change nothing it computes: every call
    of a nested ``@triton.jit`` function patches ``triton.language`` again (``inspect.getmembers``
    over ``tl``, ``tl.tensor`` and ``tl.math``: about a fifth of a test's time) although the
    launch around it has patched it already; ``_get_np_dtype`` builds its dtype table on
    every call; and the front end's type objects are built eagerly (``_lighter_types``). A
    nested call skips the patch only where every language module it sees is patched (the
    patched functions are the same whoever patched them). Other Triton versions are left as
    they are (the replaced code is 3.6's). Applied once a process, on import under
    ``TRITON_INTERPRET=1`` unless ``FUSEADVISE_PLAIN_INTERPRETER=1``; ``interpreter._fa_lighter``
    says it is, ``interpreter._fa_original`` keeps the first two pieces it replaced
    (templates/test_interpreter.py runs both ways, and against a plain process)."""
    import triton

    if not triton.__version__.startswith("3.6."):
        return
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    if getattr(interpreter, "_fa_lighter", False):
        return
    table = {
        tl.int1: np.dtype(bool), tl.float16: np.dtype(np.float16), tl.float32: np.dtype(np.float32),
        tl.float64: np.dtype(np.float64), tl.int8: np.dtype(np.int8), tl.uint8: np.dtype(np.uint8),
        tl.int16: np.dtype(np.int16), tl.uint16: np.dtype(np.uint16), tl.int32: np.dtype(np.int32),
        tl.uint32: np.dtype(np.uint32), tl.int64: np.dtype(np.int64), tl.uint64: np.dtype(np.uint64),
        # bfloat16 is stored as uint16, the float8 types as uint8 (as in 3.6's table)
        tl.bfloat16: np.dtype(np.uint16), tl.float8e5: np.dtype(np.uint8),
        tl.float8e5b16: np.dtype(np.uint8), tl.float8e4nv: np.dtype(np.uint8),
        tl.float8e4b8: np.dtype(np.uint8), tl.float8e4b15: np.dtype(np.uint8),
    }
    pointer = np.dtype(np.uint64)

    def get_np_dtype(tt_dtype):
        if isinstance(tt_dtype, tl.pointer_type):
            return pointer
        if isinstance(tt_dtype, tl.block_type):
            element = tt_dtype.element_ty
            return pointer if isinstance(element, tl.pointer_type) else table[element]
        return table[tt_dtype]

    def patched(lang):
        # _patch_lang replaces every builtin of lang, lang.tensor (and tl.math) at once: one of
        # each tells whether it has run and is not yet restored
        builtin = tl.core.is_builtin
        return not (builtin(lang.load) or builtin(lang.tensor.__add__)
                    or (lang is tl and builtin(tl.math.exp)))

    def call(self, *args, **kwargs):  # InterpretedFunction.__call__, a device function call
        langs = [v for v in self.fn.__globals__.values() if v is tl or v is tl.core]
        if not langs or not all(patched(lang) for lang in langs):
            interpreter._patch_lang(self.fn)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise interpreter.InterpreterError(repr(e)) from e

    interpreter._fa_original = (interpreter._get_np_dtype, interpreter.InterpretedFunction.__call__)
    interpreter._get_np_dtype = get_np_dtype
    interpreter.InterpretedFunction.__call__ = call
    _lighter_types(tl, interpreter)
    interpreter._fa_lighter = True


def _lighter_types(tl, interpreter):
    """The interpreter runs each ``tl`` operation through Triton's front end, which builds
    type objects eagerly: every ``tl.tuple`` its type (a string of its members' types), every
    ``tl.tensor`` its shape as a tuple of constexprs, every ``tl.block_type`` its name, and
    the same block types again and again (``get_block_ty``, ``with_element_ty``) — about 40% of
    an interpreted kernel's time. These are computed here when first read (from the same
    values, so what is read is what 3.6 stores: a tuple's values change only through its
    ``_setitem``, which sets the type again), and the builder's and ``with_element_ty``'s block
    types are kept per (element type, shape) object (block types are never changed after
    construction). Nothing the kernels compute changes (templates/test_interpreter.py compares
    bits against a process that runs without it: ``FUSEADVISE_PLAIN_INTERPRETER=1``)."""
    import builtins
    import math

    from triton._utils import validate_block_shape

    core = tl.core
    constexpr, tup, tuple_type = core.constexpr, core.tuple, core.tuple_type
    type_of, unwrap_shape = core._type_for_tuple_values, core._unwrap_shape

    # tl.tuple: its type when first read
    def tuple_init(self, args, type=None):
        self.values = [i for i in args]
        if isinstance(type, tuple_type):
            self._fa_type = type
        elif type is not None:
            self._fa_type = tuple_type(type)
        else:
            self._fa_type = None

    def tuple_type_get(self):
        t = self.__dict__.get("_fa_type")
        if t is None:
            t = self._fa_type = type_of(self.values)
        return t

    def tuple_type_set(self, t):
        self._fa_type = t

    # tl.tensor: its shape and numel when first read
    def tensor_init(self, handle, type):
        self.handle = handle
        self.type = type
        self.dtype = type.scalar

    def dims(t):
        return t.type.shape if t.type.is_block() else ()

    def tensor_shape_get(self):
        s = self.__dict__.get("_fa_shape")
        if s is None:
            s = self._fa_shape = tup([constexpr(d) for d in dims(self)])
        return s

    def tensor_shape_set(self, s):
        self._fa_shape = s

    def tensor_numel_get(self):
        n = self.__dict__.get("_fa_numel")
        if n is None:
            n = self._fa_numel = constexpr(math.prod(dims(self)))
        return n

    def tensor_numel_set(self, n):
        self._fa_numel = n

    # tl.block_type: a list of ints taken as it is, the name when first read
    def block_init(self, element_ty, shape):
        self.element_ty = element_ty
        assert isinstance(shape, (list, tup))
        if not (builtins.type(shape) is list and all(builtins.type(d) is int for d in shape)):
            shape = unwrap_shape(shape)
        self.shape = tup(shape)
        if not shape:
            raise TypeError("0d block_type is forbidden")
        self.numel = validate_block_shape(shape)

    def block_name_get(self):
        n = self.__dict__.get("_fa_name")
        if n is None:
            n = self._fa_name = f"<{self.shape}, {self.element_ty}>"
        return n

    def block_name_set(self, n):
        self._fa_name = n

    # the same block type per (element type object, shape): kept with the element type, so that
    # an id is never reused for another
    blocks = {}

    def get_block_ty(self, dtype, shape):
        key = (id(dtype), builtins.tuple(shape))
        hit = blocks.get(key)
        if hit is None or hit[0] is not dtype:
            hit = blocks[key] = (dtype, tl.block_type(dtype, shape))
        return hit[1]

    with_element_ty = core.block_type.with_element_ty

    def with_element_ty_kept(self, scalar_ty):
        kept = self.__dict__.get("_fa_with")
        if kept is None:
            kept = self._fa_with = {}
        hit = kept.get(id(scalar_ty))
        if hit is None or hit[0] is not scalar_ty:
            hit = kept[id(scalar_ty)] = (scalar_ty, with_element_ty(self, scalar_ty))
        return hit[1]

    core.tuple.__init__ = tuple_init
    core.tuple.type = property(tuple_type_get, tuple_type_set)
    core.tensor.__init__ = tensor_init
    core.tensor.shape = property(tensor_shape_get, tensor_shape_set)
    core.tensor.numel = property(tensor_numel_get, tensor_numel_set)
    core.block_type.__init__ = block_init
    core.block_type.name = property(block_name_get, block_name_set)
    core.block_type.with_element_ty = with_element_ty_kept
    interpreter.InterpreterBuilder.get_block_ty = get_block_ty


if INTERPRET and os.environ.get("FUSEADVISE_PLAIN_INTERPRETER") != "1":
    _lighter_interpreter()


def programs_reversed(on):
    """Runs the interpreter's programs of every launch in reverse launch order (the last
    program id first) while ``on`` is true; returns the previous setting. A GPU runs a launch's
    programs in no set order, and the interpreter runs them one after another from program 0:
    a kernel whose result depends on which of two programs writes a location last (a store
    past a tile's rows that lands in a row another program owns) gives the right answer in one
    order only. The verifier alternates the order over a case's trials. Every program still
    runs once (the grid is walked in reverse through ``set_grid_idx``). The setting lives on
    the interpreter (one per process, whichever folder's copy of this file set it).
    Interpreter only: False and a no-op without ``TRITON_INTERPRET=1`` or on a Triton whose
    interpreter has no ``InterpreterBuilder``."""
    if not INTERPRET:
        return False
    from triton.runtime import interpreter

    b = getattr(interpreter, "InterpreterBuilder", None)
    if b is None:
        return False
    if not getattr(b, "_fa_order", False):
        set_idx = b.set_grid_idx

        def set_grid_idx(self, x, y, z):
            if type(self)._fa_reversed:
                nx, ny, nz = self.grid_dim
                x, y, z = nx - 1 - x, ny - 1 - y, nz - 1 - z
            set_idx(self, x, y, z)

        b.set_grid_idx = set_grid_idx
        b._fa_reversed = False
        b._fa_order = True
    was = b._fa_reversed
    b._fa_reversed = bool(on)
    return was

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# (atol, rtol) per kind of kernel and dtype, from the kernel conventions: elementwise / norm /
# softmax fp32 1e-5, fp16/bf16 1e-2 (LN bf16 2e-2, softmax bf16 5e-2); with a GEMM fp32 1e-4.
TOL = {
    "pointwise": {torch.float32: (1e-5, 1e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (1e-2, 1e-2)},
    "norm": {torch.float32: (1e-5, 1e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)},
    "softmax": {torch.float32: (1e-5, 1e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2)},
    "gemm": {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)},
}


def name(dtype):
    """The DTYPES key of a torch dtype ("fp32", "fp16", "bf16")."""
    return next(k for k, v in DTYPES.items() if v == dtype)


def tol(kind, dtype):
    return TOL[kind][dtype]


def load_sibling(test_file, name):
    """Imports ``<name>.py`` next to ``test_file`` as a module unique to that folder."""
    here = pathlib.Path(test_file).resolve().parent
    tag = hashlib.sha1(str(here).encode()).hexdigest()[:12]
    modname = f"_fa_{tag}_{name}"
    if modname in sys.modules:
        return sys.modules[modname]
    spec = importlib.util.spec_from_file_location(modname, here / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return mod


def cuda_ok():
    return torch.cuda.is_available() and not INTERPRET


def devices():
    """pytest params: 'cpu' runs under TRITON_INTERPRET=1, 'cuda' (mark gpu) on a GPU."""
    import pytest

    return [
        pytest.param("cpu", marks=pytest.mark.skipif(not INTERPRET, reason="needs TRITON_INTERPRET=1")),
        pytest.param("cuda", marks=[pytest.mark.gpu,
                                    pytest.mark.skipif(not cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")]),
    ]


def graph_replay(fn):
    """fn captured in a CUDA graph, returned as the graph's replay; None when fn cannot be
    captured (a host synchronisation, a CPU tensor). Timing the replay measures the GPU's
    time only: timing the Python call measures the host instead whenever the call's CPU time
    (checks, allocations, the autotuner's dispatch) exceeds the GPU time between calls.
    Warm up (autotune, compile) before capturing; the warm-up here runs on a side stream, as
    PyTorch's CUDA-graph notes require."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        g.replay()
        torch.cuda.synchronize()
        return g.replay
    except Exception as e:
        print(f"CUDA-graph capture failed ({str(e)[:200]}); timing the plain call", file=sys.stderr)
        torch.cuda.synchronize()
        return None


# Timing. bench.py and the benchmark harness time every provider with these two functions:
#
# - gpu_time_us: GPU time of one call, L2 emptied before every call (no dirty lines left whose
#   write-back would land in the timed window), CUDA events around the call only; median, p20
#   and p80 in microseconds.
# - wall_time_us: per-call wall time of calls made as an eager model makes them (no CUDA
#   graph, back to back, one synchronize at the end), and the host time of one call.

QUANTILES = (0.5, 0.2, 0.8)  # median, p20, p80: triton.testing.do_bench's quantiles=[0.5, 0.2, 0.8]
FLUSH_BYTES = 256 << 20  # each L2 flush buffer: over 4x the H200's 60 MB L2
WALL_TARGET_MS = 20.0  # a per-call loop runs about this long
WALL_MIN_CALLS, WALL_MAX_CALLS = 10, 10_000  # ... within these bounds
HOST_BURST = 16  # calls per host-time burst: too few to fill the launch queue


def quantiles(xs, qs=QUANTILES):
    """The qs quantiles of xs, interpolated linearly between order statistics (as
    triton.testing.do_bench computes its quantiles)."""
    a = sorted(xs)
    if not a:
        raise ValueError("quantiles of no samples")
    out = []
    for q in qs:
        if not 0 <= q <= 1:
            raise ValueError(f"quantile {q} outside [0, 1]")
        point = q * (len(a) - 1)
        lo, hi = math.floor(point), math.ceil(point)
        out.append(a[lo] + (a[hi] - a[lo]) * (point - lo))
    return out


def require_cuda(what):
    """Raises RuntimeError, saying why, when timing cannot run here (no CUDA device, or the
    Triton interpreter is on)."""
    if not cuda_ok():
        why = "TRITON_INTERPRET=1 is set" if INTERPRET else "torch.cuda.is_available() is False"
        raise RuntimeError(f"{what} needs a CUDA GPU ({why})")


class L2Flush:
    """Empties the L2 cache and leaves no dirty line in it: writes one buffer larger than L2
    (evicting whatever the previous call left, its outputs' write-back happening now), then
    reads another (evicting the first buffer's dirty lines in turn). After it, L2 holds only
    clean lines of the read buffer, which cost nothing to evict.

    triton.testing.do_bench only writes (``cache.zero_()``): the write-back of the dirty lines
    it leaves lands inside the next timed call. On the H200 that added 4.5 us to RMSNorm bf16
    8192x4096 (38.4 -> 33.9 us with a read sweep after the write), 5 us to add+LayerNorm and
    6 us to the fp32 copy of the same bytes."""

    def __init__(self, device="cuda", nbytes=FLUSH_BYTES):
        n = max(1, int(nbytes) // 4)
        self.nbytes = 4 * n
        self.written = torch.empty(n, dtype=torch.float32, device=device)
        self.read = torch.ones(n, dtype=torch.float32, device=device)
        self.sink = torch.empty((), dtype=torch.float32, device=device)

    def __call__(self):
        self.written.zero_()
        torch.sum(self.read, 0, out=self.sink)


_flushes = {}


def l2_flush():
    """The L2Flush of the current CUDA device, allocated once (2 x FLUSH_BYTES)."""
    dev = torch.cuda.current_device()
    if dev not in _flushes:
        _flushes[dev] = L2Flush(f"cuda:{dev}")
    return _flushes[dev]


def rep_counts(estimate_ms, warmup_ms, rep_ms):
    """Warm-up calls and timed calls for a call that takes estimate_ms (its flush included):
    warmup_ms and rep_ms worth of them, at least one each, as triton.testing.do_bench counts."""
    est = max(float(estimate_ms), 1e-6)
    return max(1, int(warmup_ms / est)), max(1, int(rep_ms / est))


def gpu_time_us(fn, warmup_ms=25.0, rep_ms=100.0, flush=None):
    """GPU time of fn() in microseconds: [median, p20, p80] over rep_ms worth of calls, each
    after an L2 flush (L2Flush: no dirty lines left), timed by CUDA events recorded around the
    call only. Time a CUDA-graph replay (graph_replay) to leave the host's launch overhead
    out: the GPU runs the flush while the host launches the call, so the start event is
    reached with the call already queued. Raises RuntimeError without CUDA."""
    require_cuda("gpu_time_us")
    return _event_times_us(fn, flush or l2_flush(), lambda: torch.cuda.Event(enable_timing=True),
                           torch.cuda.synchronize, warmup_ms, rep_ms)


def _event_times_us(fn, flush, event, sync, warmup_ms, rep_ms):
    """gpu_time_us's loop, given the flush, an event factory and the synchronize call."""
    fn()
    sync()
    # the per-call estimate includes the flush, as do_bench's does: rep_ms bounds the loop
    start, end = event(), event()
    start.record()
    for _ in range(5):
        flush()
        fn()
    end.record()
    sync()
    n_warmup, n_rep = rep_counts(start.elapsed_time(end) / 5, warmup_ms, rep_ms)
    for _ in range(n_warmup):
        fn()
    starts = [event() for _ in range(n_rep)]
    ends = [event() for _ in range(n_rep)]
    for s, e in zip(starts, ends):
        flush()
        s.record()
        fn()
        e.record()
    sync()
    return quantiles([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])


def loop_calls(per_call_us, target_ms=WALL_TARGET_MS, lo=WALL_MIN_CALLS, hi=WALL_MAX_CALLS):
    """How many back-to-back calls of per_call_us each make a loop of about target_ms:
    rounded up, within [lo, hi] (hi when the estimate is zero, lo when it is not a number)."""
    if not math.isfinite(per_call_us) or per_call_us < 0:
        return lo
    if per_call_us == 0:
        return hi
    return int(min(hi, max(lo, math.ceil(target_ms * 1e3 / per_call_us))))


def wall_time_us(fn, target_ms=WALL_TARGET_MS, burst=HOST_BURST):
    """Per-call wall time and host time of fn() called as an eager model calls it: no CUDA
    graph, no L2 flush. Returns {"wall_us", "host_us", "calls"}:

    - wall_us: after a warm-up, ``calls`` calls back to back (loop_calls: about target_ms)
      and one synchronize at the end, over ``calls``: what the call costs in a model step,
      the host's launch overhead and the gaps between kernels included.
    - host_us: the time for a call to return (Python, argument checks, allocations,
      launches), the median over bursts of ``burst`` calls, each burst started on an idle GPU.
      Not from the wall loop itself: there a GPU-bound provider fills the launch queue and
      every call then waits for the GPU, which would report GPU time as host time.

    Raises RuntimeError without CUDA."""
    require_cuda("wall_time_us")
    return _wall_times_us(fn, torch.cuda.synchronize, time.perf_counter, target_ms, burst)


def _wall_times_us(fn, sync, clock, target_ms=WALL_TARGET_MS, burst=HOST_BURST):
    """wall_time_us's loops, given the synchronize call and a clock in seconds."""
    for _ in range(3):
        fn()
    sync()
    t0 = clock()
    for _ in range(5):
        fn()
    sync()
    calls = loop_calls((clock() - t0) / 5 * 1e6, target_ms)
    t0 = clock()
    for _ in range(calls):
        fn()
    sync()
    wall = (clock() - t0) / calls * 1e6
    k = max(1, min(burst, calls))
    host = []
    for _ in range(max(3, min(50, calls // k))):
        sync()
        t0 = clock()
        for _ in range(k):
            fn()
        host.append((clock() - t0) / k * 1e6)
    sync()
    return {"wall_us": wall, "host_us": quantiles(host, (0.5,))[0], "calls": calls}


FAR_BASE = 2**31  # elements before each far_view on the CPU


def far_view(t):
    """t ([rows, N], N > 1) copied into a transposed view whose last column lies past 2**31
    elements from its first; only the viewed elements are written, one page per column. On
    the CPU the storage is an anonymous mapping with MAP_NORESERVE (reserved, not committed)
    and the view starts FAR_BASE elements into it, so that an offset wrapped in 32 bits still
    lands inside: wrong values, not a fault. On a GPU the storage is real memory (2**31
    elements, no FAR_BASE), and t is returned as it is when the GPU lacks room for it twice."""
    rows, n = t.shape
    stride = 2**31 // (n - 1) + 1
    start = FAR_BASE if t.device.type == "cpu" else 0
    numel = start + (n - 1) * stride + rows
    if t.device.type == "cpu" and hasattr(mmap, "MAP_ANONYMOUS"):
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(
            mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)
        base = torch.frombuffer(mmap.mmap(-1, numel * t.element_size(), flags=flags), dtype=t.dtype)
    elif t.device.type == "cpu" or torch.cuda.mem_get_info(t.device)[0] > 2 * numel * t.element_size():
        base = torch.empty_strided((numel,), (1,), dtype=t.dtype, device=t.device)
    else:
        return t
    v = base.as_strided((rows, n), (1, stride), start)
    v.copy_(t)
    return v


def poison(shape, dtype, device):
    """A NaN-filled tensor: an output the kernel must overwrite everywhere."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def mismatches(got, want, atol, rtol, band=None):
    """Where got differs from want: (bad, diff, g, w), bad a bool mask and diff |got - want|
    (0 where either is NaN or +-inf), g and w on the CPU in float64. Floats: |got - want| >
    atol + rtol*|want|, or NaN / +-inf not in the same places (an inf's sign included).
    Integers and bools (neither a float): exactly, whatever the tolerance (an int64 position
    off by one is wrong; float64 would not even hold every int64 apart), diff their distance.
    band: None, or (lo, hi), the range the output takes over the results its inputs do not
    decide (output_bands: a GEMM head's rounding); an element in [lo, hi] widened by the
    tolerance at each end (integers and bools: in [lo, hi]) is not a mismatch."""
    bad, diff, g, w = _mismatches(got, want, atol, rtol)
    if band is not None and bool(bad.any()):
        lo, hi = (t.detach().to("cpu", torch.float64) for t in band)
        exact = not (got.dtype.is_floating_point or want.dtype.is_floating_point)
        slack = (0.0, 0.0) if exact else (atol + rtol * lo.abs(), atol + rtol * hi.abs())
        inside = (g >= lo - slack[0]) & (g <= hi + slack[1])  # False where any of them is NaN
        bad &= ~inside
    return bad, diff, g, w


def _mismatches(got, want, atol, rtol):
    if not (got.dtype.is_floating_point or want.dtype.is_floating_point):
        gi, wi = got.detach().cpu(), want.detach().cpu()
        bad = gi != wi
        g, w = gi.to(torch.float64), wi.to(torch.float64)
        return bad, torch.where(bad, (g - w).abs(), torch.zeros_like(g)), g, w
    g = got.detach().to("cpu", torch.float64)
    w = want.detach().to("cpu", torch.float64)
    gnan, wnan = torch.isnan(g), torch.isnan(w)
    ginf, winf = torch.isinf(g), torch.isinf(w)
    finite = ~(gnan | wnan | ginf | winf)
    bad = (gnan != wnan) | (ginf != winf) | (ginf & winf & (torch.sign(g) != torch.sign(w)))
    diff = torch.zeros_like(g)
    diff[finite] = (g[finite] - w[finite]).abs()
    bad |= finite & (diff > atol + rtol * w.abs())
    return bad, diff, g, w


def compare(got, want, atol, rtol, band=None):
    """The verifier's comparison (its runner takes it from here): (max_abs, max_rel, n_bad,
    first), first (index, got, want) of the first mismatching element or None (mismatches,
    with its band). A NaN where a number is wanted (or none where one is) makes max_abs NaN, an inf where a
    finite value is wanted (or the other way) inf; max_rel over the finite elements with
    |want| > atol; integers and bools: max_abs their largest distance where they differ, max_rel 0."""
    bad, diff, g, w = mismatches(got, want, atol, rtol, band)
    exact = not (got.dtype.is_floating_point or want.dtype.is_floating_point)
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = 0.0
    if not exact:
        gnan, wnan = torch.isnan(g), torch.isnan(w)
        finite = ~(gnan | wnan | torch.isinf(g) | torch.isinf(w))
        relmask = finite & (w.abs() > atol)
        max_rel = float((diff[relmask] / w[relmask].abs()).max()) if bool(relmask.any()) else 0.0
        if bool((gnan != wnan).any()):
            max_abs = float("nan")
        elif bool((bad & ~finite).any()):
            max_abs = float("inf")
    n = int(bad.sum())
    first = None
    if n:
        idx = tuple(int(i) for i in bad.nonzero()[0].tolist())
        first = (list(idx), float(g[idx]), float(w[idx]))
    return max_abs, max_rel, n, first


def assert_close(got, want, atol, rtol, name="output", show=5, band=None):
    """Fails where mismatches finds a difference (|got-want| > atol + rtol*|want|, NaN / +-inf
    not in the same places; integers and bools exactly; outside band where one is given):
    reports the number of mismatches and the first ``show`` of them with their index, the
    value got and the value wanted."""
    if got.shape != want.shape:
        raise AssertionError(f"{name}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
    bad, diff, g, w = mismatches(got, want, atol, rtol, band)
    n = int(bad.sum())
    if not n:
        return
    idx = bad.nonzero()[:show].tolist()
    if not (got.dtype.is_floating_point or want.dtype.is_floating_point):
        lines = [f"  at {tuple(i)}: got {got[tuple(i)].item()!r}, want {want[tuple(i)].item()!r}" for i in idx]
        raise AssertionError(f"{name}: {n} of {got.numel()} elements differ (exact); first:\n" + "\n".join(lines))
    lines = [f"  at {tuple(i)}: got {g[tuple(i)].item()!r}, want {w[tuple(i)].item()!r}" for i in idx]
    finite = torch.isfinite(g) & torch.isfinite(w)
    worst = diff[finite].max().item() if finite.any() else float("nan")
    raise AssertionError(
        f"{name}: {n} of {g.numel()} elements differ (atol={atol}, rtol={rtol}, "
        f"max finite |diff|={worst:.3g}); first:\n" + "\n".join(lines))


def assert_unmodified(before, after, name="input"):
    """Inputs must not be written by the kernel (bitwise, NaN-aware)."""
    if before.dtype.is_floating_point:
        same = (before == after) | (torch.isnan(before) & torch.isnan(after))
    else:
        same = before == after
    if not bool(same.all()):
        raise AssertionError(f"{name} was modified by the kernel")


def seeds(n=3, base=0):
    """Derived seeds for fresh random inputs per trial."""
    return [base * 1000 + i for i in range(n)]


def shrink(shape, max_last=257, max_rows=48):
    """Scales a trace shape down to interpreter size: last dim <= max_last, the product of the
    leading dims <= max_rows (taken from the innermost leading dims outwards)."""
    shape = [int(d) for d in shape]
    if not shape:
        return shape
    out = [min(shape[-1], max_last)]
    budget = max_rows
    for d in reversed(shape[:-1]):
        k = max(1, min(d, budget))
        out.insert(0, k)
        budget = max(1, budget // k)
    return out


def gen(seed):
    return torch.Generator(device="cpu").manual_seed(int(seed))


def randn(shape, dtype, device, g, mean=0.0, std=1.0):
    """randn on the CPU from generator g (reproducible everywhere), then moved and cast."""
    t = torch.randn(list(shape), generator=g, dtype=torch.float32) * std + mean
    return t.to(device=device, dtype=dtype)


def run_case(kernel, reference, adapter, shapes, dtype, params, device, seed):
    """One forward trial: fresh inputs, poisoned outputs, reference comparison, inputs unmodified."""
    dt = DTYPES[dtype] if isinstance(dtype, str) else dtype
    inputs = adapter.make_inputs(shapes, dt, params, device, seed)
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    got = adapter.fused(kernel, inputs, params, poison=True)
    want = adapter.reference(reference, inputs, params)
    bands = output_bands(adapter, kernel, reference, inputs, params, want)
    tols = output_tolerances(adapter, dt, shapes, params, len(want))
    biased = bias_reference(adapter, reference, inputs, params)
    names = getattr(adapter, "OUTPUTS", [f"out{i}" for i in range(len(want))])
    for i, (name, g_, w_, b_, (atol, rtol)) in enumerate(zip(names, got, want, bands, tols)):
        if w_.dtype != g_.dtype:
            raise AssertionError(f"{name}: dtype {g_.dtype}, want {w_.dtype}")
        assert_close(g_, w_, atol, rtol, name=f"{name} (shapes={shapes}, {dt}, seed={seed})", band=b_)
        bad = eager_rounding(adapter, i, name, g_, w_) or bias_check(name, g_, w_, biased[i] if biased else None)
        if bad:
            raise AssertionError(f"{bad} (shapes={shapes}, {dt}, seed={seed})")
    for k, v in before.items():
        assert_unmodified(v, inputs[k], name=k)


# The share of a 16-bit output's elements that may differ from eager's where the kernel rounds
# each step as eager computes it (an adapter's EAGER_ROUNDING): the last bits of a
# transcendental function (the GPU's approximate exp and division, a few units of fp32's last
# place, cross a 16-bit rounding boundary at about one element in 2**13) and a reduction's
# order; a step computed otherwise (a constant 0.1% off moves a bfloat16 value across a
# boundary at about one element in eight) differs in far more, though inside the tolerance.
EAGER_SHARE = 0.01


def eager_rounding(adapter, i, name, got, want):
    """Where the adapter says its kernel computes output i as eager does, rounded the same
    way (EAGER_ROUNDING[i]), an error message when more than EAGER_SHARE of that output's
    elements (at least one) differ from eager's, bit for bit (NaN-aware), for a 16-bit
    output; else None."""
    exact = getattr(adapter, "EAGER_ROUNDING", None) or []
    if i >= len(exact) or not exact[i] or got.dtype not in (torch.float16, torch.bfloat16):
        return None
    if got.shape != want.shape or got.dtype != want.dtype or got.numel() == 0:
        return None
    differ = ~((got == want) | (torch.isnan(got) & torch.isnan(want)))
    n = int(differ.sum())
    if n <= max(1, int(EAGER_SHARE * got.numel())):
        return None
    at = tuple(differ.nonzero()[0].tolist())
    return (f"{name}: {n} of {got.numel()} elements differ from eager's, where a kernel that rounds "
            f"each step as eager does may differ in {EAGER_SHARE:.0%} of them; first at {list(at)}: "
            f"got {float(got[at])!r}, eager {float(want[at])!r}")


# The bias check: a 16-bit output's error against the chain in fp32, summed with the sign of
# the reference and over the reference's magnitude (B = sum((got - ref) * sign(ref)) /
# sum|ref|), is rounding noise about 0 for a kernel that computes the chain; a constant 0.1%
# off (GELU's 0.5, an ELU's scale, a hardswish's 6.0) moves every element it touches by a
# quarter of a bfloat16 unit, inside the tolerance and inside its rounding, but all the same
# way, so that B is about 1e-3 times the share of the output it touches, tens of standard
# deviations of the noise over a few thousand elements. A kernel fails where its |B| exceeds
# eager's by more than BIAS_SIGMAS times its own noise's standard deviation
# (sqrt(sum((e - mean(e))**2)) / sum|ref|, e the signed errors (got - ref) * sign(ref), taken
# as independent: about their mean, so that a bias does not widen its own bound) plus
# BIAS_FLOOR units of the output's type (its eps); over the examples' cases on the CPU a right
# kernel's excess stayed within 2.1 standard deviations. Outputs of fewer than BIAS_MIN_ELEMS
# finite elements are not judged. The noise is taken per element: where errors are shared
# (a row's statistic rounded once, in eager or a kernel) they are not independent, and the
# bias of a few rows is noise; adapters ask for the check (BIAS_CHECK) where no value is
# shared by a row (the generic pointwise and GEMM-headed programs, not the row programs).
BIAS_SIGMAS = 6.0
BIAS_FLOOR = 1.0 / 128
BIAS_MIN_ELEMS = 64


def _bias(got, ref):
    g, r = got.detach().to("cpu", torch.float64).flatten(), ref.detach().to("cpu", torch.float64).flatten()
    finite = torch.isfinite(g) & torch.isfinite(r)
    g, r = g[finite], r[finite]
    den = float(r.abs().sum())
    if g.numel() < BIAS_MIN_ELEMS or den == 0.0:
        return None
    e = (g - r) * torch.sign(r)
    # the noise about the mean: a bias does not widen its own bound
    return float(e.sum()) / den, float((e - e.mean()).pow(2).sum().sqrt()) / den


def bias_reference(adapter, reference, inputs, params):
    """The chain in fp32 on the inputs (16-bit ones upcast), for the bias check of an adapter
    that asks for it (BIAS_CHECK); None otherwise."""
    if not getattr(adapter, "BIAS_CHECK", False):
        return None
    up = {k: (v.detach().to(torch.float32) if isinstance(v, torch.Tensor) and v.dtype in (torch.float16, torch.bfloat16) else v)
          for k, v in inputs.items()}
    outs = adapter.reference(reference, up, params)
    return tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)


def bias_check(name, got, want, ref):
    """Where got is a 16-bit output and ref (bias_reference) its chain in fp32 (an output
    whose dtype follows its inputs'): an error message when got's signed error is biased past
    eager's (above), else None. Not for an output the chain computes in 16 bits whatever its
    inputs: its fp32 chain is then eager's, rounding for rounding (log_softmax(x,
    dtype=torch.bfloat16) of a row of near-equal values: eager's results all one bfloat16
    value, a kernel's rounded each to its nearest)."""
    if ref is None or got.dtype not in (torch.float16, torch.bfloat16) or tuple(got.shape) != tuple(ref.shape):
        return None
    if ref.dtype != torch.float32:  # the chain names the output's dtype itself (log_softmax(...,
        return None                 # dtype=torch.bfloat16), so the fp32 inputs do not make it fp32
    k, e = _bias(got, ref), _bias(want, ref)
    if k is None or e is None:
        return None
    bound = abs(e[0]) + BIAS_SIGMAS * k[1] + BIAS_FLOOR * torch.finfo(got.dtype).eps
    if abs(k[0]) <= bound:
        return None
    return (f"{name}: its error against the chain in fp32 is biased: {k[0]:+.3g} of the reference's "
            f"magnitude (eager's {e[0]:+.3g}; bound {bound:.3g}: eager's, {BIAS_SIGMAS:g} standard "
            f"deviations of the kernel's rounding noise {k[1]:.2g}, and {BIAS_FLOOR:g} of {name}'s eps): "
            f"a constant or a step computed otherwise than the chain")


def output_tolerances(adapter, dtype, shapes, params, n):
    """(atol, rtol) for each of n outputs: an adapter's output_tolerances (a generic chain's,
    per output from the steps it is computed from), else its tolerance for all of them."""
    fn = getattr(adapter, "output_tolerances", None)
    tols = list(fn(dtype, shapes, params)) if callable(fn) else []
    if len(tols) != n:
        tols = [adapter.tolerance(dtype, shapes, params)] * n
    return tols


def output_bands(adapter, kernel, reference, inputs, params, want):
    """Per output, None or (lo, hi): the smallest and largest value it takes over the results
    an adapter's ``band_outputs`` gives (the chain on the values its inputs do not decide: a
    GEMM head's, anywhere within its rounding) and over want, eager's own. A comparison of a
    GEMM's output with a number it lies within the GEMM's rounding of is decided either way
    by any two summation orders (eager's cuBLAS and the kernel's tiles: an fp32 ``x > 0.1``
    that the H200 decided differently for 1 of 4M elements), and a sum that cancels to far
    less than its terms (an offset of 1024 in a: an output of 0.95 from terms of 7344) is
    known to a few of the terms' units, not the output's: outside [lo, hi] an output is
    held to the tolerance (mismatches)."""
    fn = getattr(adapter, "band_outputs", None)
    runs = fn(kernel, reference, inputs, params) if callable(fn) else None
    if not runs:
        return [None] * len(want)
    out = []
    for i, w in enumerate(want):
        vals = [w] + [r[i] for r in runs]
        if not all(v.shape == w.shape for v in vals):
            out.append(None)
            continue
        stack = torch.stack([v.detach().to(torch.float64) for v in vals])
        out.append((stack.amin(0), stack.amax(0)))
    return out


def grad_bands(adapter, kernel, reference, inputs, names, dys, params, want):
    """Per gradient of inputs[names], None or (lo, hi): the range it takes over the results
    its inputs do not decide (an adapter's ``band_grads``: a GEMM head's rounding, where the
    product may sit on either side of a point at which the chain's derivative jumps) and
    eager's own gradient (want, in names' order); the quack check holds the fused gradient
    to its bound from that range instead of from the reference alone."""
    fn = getattr(adapter, "band_grads", None)
    bands = fn(kernel, reference, inputs, names, dys, params) if callable(fn) else None
    if not bands:
        return [None] * len(names)
    out = []
    for b, w in zip(bands, want):
        if b is None or w is None or tuple(b[0].shape) != tuple(w.shape):
            out.append(None)
            continue
        w64 = w.detach().to(b[0].device, torch.float64)
        out.append((torch.minimum(b[0], w64), torch.maximum(b[1], w64)))
    return out


def run_grad_case(kernel, reference, adapter, shapes, dtype, params, device, seed):
    """Gradients of every output (random grad_output) w.r.t. adapter.GRAD_INPUTS, vs eager:
    through adapter.fused(..., autograd=True) (its test mode), and, where the adapter has one,
    through adapter.train (the call bench's training modes time, as a training step makes it)."""
    dt = DTYPES[dtype] if isinstance(dtype, str) else dtype
    inputs = adapter.make_inputs(shapes, dt, params, device, seed)
    _check_grads(lambda leaves: adapter.fused(kernel, leaves, params, autograd=True),
                 kernel, reference, adapter, inputs, shapes, dt, params, device, seed, "")
    if hasattr(adapter, "train"):
        # "_test": train() may leave what the reference needs (a dropout mask), as fused() does
        _check_grads(lambda leaves: adapter.train(kernel, leaves, params),
                     kernel, reference, adapter, dict(inputs, _test=True), shapes, dt, params, device, seed + 1, " (train)")


def _check_grads(call, kernel, reference, adapter, inputs, shapes, dt, params, device, seed, what):
    names = [n for n in adapter.GRAD_INPUTS if inputs.get(n) is not None]

    def leaves():
        d = dict(inputs)
        for n in names:
            d[n] = inputs[n].detach().clone().requires_grad_(True)
        return d

    def outputs(o):
        return tuple(o) if isinstance(o, (tuple, list)) else (o,)

    a, b = leaves(), leaves()
    got = outputs(call(a))
    for k, v in a.items():  # anything fused() left for the reference (e.g. a dropout mask)
        b.setdefault(k, v)
    want = outputs(adapter.reference(reference, b, params))
    if len(got) != len(want):
        raise AssertionError(f"grad{what}: {len(got)} outputs, the reference {len(want)}")
    g = gen(seed + 7)
    dys = [randn(w.shape, w.dtype, device, g) for w in want]
    gg = torch.autograd.grad(got, [a[n] for n in names], dys, allow_unused=True)
    gw = torch.autograd.grad(want, [b[n] for n in names], dys, allow_unused=True)
    atol, rtol = adapter.tolerance(dt, shapes, params, grad=True)
    gref = quack_grads(adapter, reference, b, names, dys, params, dt)
    scales = quack_scales(adapter, reference, b, names, dys, params, dt)
    bands = grad_bands(adapter, kernel, reference, b, names, dys, params, gw)
    for i, (n, x, y) in enumerate(zip(names, gg, gw)):
        if y is None:
            continue
        if x is None:
            raise AssertionError(f"grad{what} {n}: missing")
        label = f"grad{what} {n} (shapes={shapes}, {dt}, seed={seed})"
        if gref is not None:
            assert_quack(x, y, gref[i], name=label, terms=quack_terms(x, list(b.values()) + list(want)),
                         term_scale=scales[i], rounding=getattr(adapter, "QUACK_ROUNDING", None), band=bands[i])
            bad = bias_check(label, x, y, gref[i]) if getattr(adapter, "BIAS_CHECK", False) else None
            if bad:
                raise AssertionError(bad)
        else:
            assert_close(x, y, atol, rtol, name=label, band=bands[i])


# The quack check (kernels.md (b)1), for gradients whose rounding differs from eager's by
# design (a fused backward that keeps fp32 where eager rounds every step, and sums in its own
# order): the result is compared with the same chain in a higher precision, the reference
# (fp32 for 16-bit folders, fp64 for fp32 ones), and may be at most twice as far from it as
# eager is, plus a floor for the noise eager may happen not to make, relative to the
# reference's largest magnitude: one unit of the gradient's dtype (its final rounding), and
# in fp32 units (the fused computation's) QUACK_ULPS (other formulas, other association) and
# QUACK_SUM_ULPS per square root of the terms summed into each gradient element (partial
# sums and atomics in a sequential order). At a 1M-term bias gradient that is 2e-4 of the
# largest value, where a missing term, a wrong sign or a wrong scale is off by a term's
# magnitude or more (a sum of n random terms is about sqrt(n) of them): those fail, and
# reordering noise passes. Where the terms are larger than the result (a sum that nearly
# cancels: quack_scales' term_scale, the root of their sum of squares), one unit of the
# gradient's dtype of that size too: eager rounds each term to that dtype before it sums
# them (the verifier's bf16 GEMM bias of one output column, six rows: a gradient of 2.8e-3
# from terms of 0.3, eager 1.3e-4 and the fused backward 3.2e-4 from the fp32 chain).

QUACK_ULPS = 16.0
QUACK_SUM_ULPS = 2.0


def quack_dtype(adapter, dtype, inputs=None):
    """The dtype of the quack check's reference for the adapter's gradients at dtype, or None
    where they are held to assert_close (adapters without QUACK_GRAD): fp32 for fp16/bf16
    folders, fp64 for fp32 ones. In fp32 eager would be its own reference (its error 0, the
    bound the floor alone), and an elementwise tolerance is wrong for a gradient summed over
    many elements (a weight's or a bias's, over every row) in another order than eager's:
    at ConvNeXt's 32x192x28x28 fp32 LayerNorm2d (25088 terms an element) two weight-gradient
    elements of about 0.25, sums that nearly cancel, were 2.8e-4 from eager's on the H200
    while both were right to the sums' rounding. An adapter whose chain means something else
    in fp64 sets QUACK_GRAD_FP32 = False (attention: a "min" mask fill is the dtype's
    finfo.min, which an fp64 bias pushes to -inf, so a row masked everywhere turns NaN). An
    adapter whose cases need fp64 at every dtype has ``quack_fp64(inputs)`` say which (inputs:
    the case's): layernorm_linear's rows of equal values at BERT's eps of 1e-12, whose
    gradient, 1/sqrt(eps) = 1e6 times a difference of O(1), fp32's chain on the CPU gave as 0
    (its LayerNorm backward cancels there) where fp64 gives 4.5e6."""
    if not getattr(adapter, "QUACK_GRAD", False):
        return None
    wants64 = getattr(adapter, "quack_fp64", None)
    if inputs is not None and wants64 is not None and wants64(inputs):
        return torch.float64
    if dtype == torch.float32:
        return torch.float64 if getattr(adapter, "QUACK_GRAD_FP32", True) else None
    return torch.float32


def quack_grads(adapter, reference, inputs, names, dys, params, dtype):
    """The gradients of the reference chain w.r.t. inputs[names] for the upstream gradients
    dys, every floating input and dy upcast to quack_dtype (None where the adapter's
    gradients are held to assert_close). inputs: the eager leaves (only their values are read)."""
    hp = quack_dtype(adapter, dtype, inputs)
    if hp is None:
        return None
    c = {k: (v.detach().to(hp).requires_grad_(k in names) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
         for k, v in inputs.items()}
    outs = adapter.reference(reference, c, params)
    outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
    pairs = [(o, d) for o, d in zip(outs, dys) if d is not None]  # None: an output no loss reaches
    return list(torch.autograd.grad([o for o, _ in pairs], [c[n] for n in names], [d.to(hp) for _, d in pairs],
                                    allow_unused=True))


def quack_terms(grad, tensors):
    """How many terms are summed into each element of grad: the largest of tensors (the
    chain's inputs and outputs) over grad's size, at least 1 (a broadcast input's gradient
    is reduced over the dims it broadcasts along)."""
    most = max([t.numel() for t in tensors if isinstance(t, torch.Tensor)] + [1])
    return max(1, most // max(1, grad.numel()))


def quack_scales(adapter, reference, inputs, names, dys, params, dtype):
    """Per gradient of inputs[names]: the size of the terms summed into one of its elements,
    as the largest root of their sum of squares, or 0.0 where nothing is summed (an input of
    the inputs' common shape) or the reference does not take the input broadcast to that
    shape (a norm's weight, say). The terms are the reference's gradient, in quack_dtype,
    w.r.t. the input broadcast and materialized. A sum that nearly cancels is far smaller than
    its terms, and its rounding noise is the terms' size: at a scaled test shape of ConvNeXt's
    32x192x28x28 per-channel scale (one channel, 784 terms), the fused backward's fp32 sum was
    8.0e-6 from the fp64 one and eager's 3.5e-6, both right to the sum's rounding, against a
    bound of 7.6e-6 taken from the result (0.075) alone (H200, 2026-12-02). None where the
    gradients are held to assert_close."""
    hp = quack_dtype(adapter, dtype, inputs)
    if hp is None:
        return None
    floats = {k for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    try:  # the shape the terms live at: an adapter's quack_shape (a GEMM head's output), or the inputs'
        shape = adapter.quack_shape(inputs) if hasattr(adapter, "quack_shape") else \
            torch.broadcast_shapes(*(inputs[k].shape for k in floats))
    except RuntimeError:  # inputs that do not broadcast together (a GEMM's)
        return [0.0] * len(names)
    out = []
    for n in names:
        v = inputs.get(n)
        if n not in floats or tuple(v.shape) == tuple(shape) or v.numel() == 0:
            out.append(0.0)
            continue
        c = {k: (w.detach().to(hp) if k in floats else w) for k, w in inputs.items()}
        try:
            c[n] = v.detach().to(hp).expand(shape).clone().requires_grad_(True)
        except RuntimeError:  # an operand that does not broadcast to it (a GEMM's x and w)
            out.append(0.0)
            continue
        try:
            outs = adapter.reference(reference, c, params)
            outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
            # only the outputs computed from the input (autograd refuses one that is not: an
            # input reaching the second output alone had its terms' size taken as 0)
            pairs = [(o, d) for o, d in zip(outs, dys) if o.requires_grad and d is not None]
            t = torch.autograd.grad([o for o, _ in pairs], [c[n]], [d.to(hp) for _, d in pairs],
                                    allow_unused=True)[0] if pairs else None
        except (RuntimeError, ValueError, TypeError, IndexError):  # the input's shape is the op's
            t = None
        s = 0.0 if t is None else float(t.pow(2).sum_to_size(v.shape).sqrt().max())
        out.append(s if math.isfinite(s) else 0.0)  # a NaN in the reference's terms: the result's size alone
    return out


def quack_bound(got_dtype, ref_abs_max, eager_err, terms=1, term_scale=0.0, rounding=None):
    """The largest max|got - ref| the quack check passes (see above): the summation noise
    scales with the larger of max|ref| and term_scale (quack_scales). rounding: a dtype less
    precise than got's that the chain rounds to on the way (an fp32 chain's cast to bfloat16:
    eager and the reference round the gradient there as well, the fused backward keeps fp32),
    whose rounding the result may then differ by (an adapter's QUACK_ROUNDING)."""
    eps = torch.finfo(got_dtype).eps
    if rounding is not None:
        eps = max(eps, torch.finfo(rounding).eps)
    eps32 = torch.finfo(torch.float32).eps
    return (2 * eager_err + ref_abs_max * (eps + eps32 * QUACK_ULPS) + term_scale * (eps if eps > eps32 else 0.0)
            + max(ref_abs_max, term_scale) * eps32 * QUACK_SUM_ULPS * math.sqrt(terms))


def quack_check(got, want, ref, terms=1, term_scale=0.0, rounding=None, band=None):
    """The quack check: max|got - ref| <= quack_bound(got.dtype, max|ref|, max|want - ref|,
    terms, term_scale, rounding), where want is eager and ref the chain in a higher precision. A NaN where ref has
    none (or none where ref has one) fails. band: None, or (lo, hi) (grad_bands): an
    element's distance is then to the range [lo, hi] widened to ref. Returns (ok, note,
    first): first = (index, got, ref) at the largest distance (None for an empty tensor)."""
    g, w, r = (t.detach().to("cpu", torch.float64) for t in (got, want, ref))
    if g.numel() == 0:
        return True, "", None
    dg = (g - r).abs()
    if band is not None:  # the distance to [lo, hi] widened to ref, where that is nearer
        lo = torch.minimum(band[0].detach().to("cpu", torch.float64), r)
        hi = torch.maximum(band[1].detach().to("cpu", torch.float64), r)
        dg = torch.minimum(dg, torch.clamp(torch.maximum(lo - g, g - hi), min=0.0))
    dg = torch.where(torch.isnan(g) != torch.isnan(r), torch.full_like(dg, float("inf")), dg)
    dg = torch.nan_to_num(dg, nan=0.0)
    eg = float(dg.max())
    ew = float(torch.nan_to_num((w - r).abs(), nan=0.0).max())
    rmax = float(torch.nan_to_num(r.abs(), nan=0.0, posinf=0.0).max())
    bound = quack_bound(got.dtype, rmax, ew, terms, term_scale, rounding)
    ok = eg <= bound
    scale = f", terms' size {term_scale:.3g}" if term_scale > rmax else ""
    note = (f"quack check vs the chain in {name(ref.dtype) if ref.dtype in DTYPES.values() else 'fp64'}: "
            f"max|got-ref| = {eg:.3g} {'<=' if ok else '>'} bound {bound:.3g} "
            f"(2*max|eager-ref| = {2 * ew:.3g}, {terms} terms, max|ref| = {rmax:.3g}{scale})")
    idx = tuple(int(i) for i in (dg == eg).nonzero()[0].tolist())
    return ok, note, (list(idx), float(g[idx]), float(r[idx]))


def assert_quack(got, want, ref, name="output", terms=1, term_scale=0.0, rounding=None, band=None):
    """Fails where quack_check does, with the index and the values at the worst element."""
    ok, note, first = quack_check(got, want, ref, terms, term_scale, rounding, band)
    if not ok:
        i = tuple(first[0])
        w = want.detach().to("cpu", torch.float64)[i].item()
        raise AssertionError(f"{name}: {note}; at {i}: got {first[1]!r}, reference {first[2]!r}, eager {w!r}")


# --- the adapters' memory cases: offsets past 2**31 (views over address space committed
# only where written), outputs overlapping an input, expanded outputs ---

WIDE_STRIDE = 2**30 + 64  # row (or column) 2 starts 2**31 + 128 elements in
WIDE_BASE = 2**31  # elements before the views: an offset that wrapped in 32 bits lands inside


def far_storage(numel, dtype, device):
    """numel elements of address space, committed only where written: on the CPU an anonymous
    mapping with MAP_NORESERVE (not counted against the overcommit limit), on a GPU torch.empty."""
    if torch.device(device).type != "cpu":
        return torch.empty(numel, dtype=dtype, device=device)
    es = torch.tensor([], dtype=dtype).element_size()
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (0x4000 if sys.platform.startswith("linux") else 0)
    return torch.frombuffer(mmap.mmap(-1, numel * es, flags=flags), dtype=dtype)


def wide_views(ts, cols=False):
    """The 2-D tensors ts (one dtype), same values, as views side by side in one storage of
    about 2**32 elements of which only the viewed ones and a NaN decoy are written: row i at
    WIDE_BASE + i * WIDE_STRIDE (column i with ``cols``), so that offsets pass 2**31 and an
    offset computed in 32 bits wraps onto the NaN decoy at the storage's start."""
    t0 = ts[0]
    side = 0 if cols else 1  # the dim laid out contiguously
    inner = sum(t.shape[side] for t in ts)
    buf = far_storage(WIDE_BASE + (t0.shape[1 - side] - 1) * WIDE_STRIDE + inner, t0.dtype, t0.device)
    buf[:4096] = float("nan")
    out, at = [], WIDE_BASE
    for t in ts:
        v = buf.as_strided(t.shape, (1, WIDE_STRIDE) if cols else (WIDE_STRIDE, 1), at)
        v.copy_(t)
        out.append(v)
        at += t.shape[side]
    return out


def wide_outer(t):
    """t's values (any rank) in a view whose outermost dim strides WIDE_STRIDE from WIDE_BASE, the
    other dims contiguous, in a storage of some 2**32 elements of which only the view and a NaN
    decoy at its start are written: with two or more outer rows, offsets pass 2**31 (a 32-bit
    offset wraps onto the decoy), as wide_views does for 2-D tensors side by side."""
    inner = [1] * t.dim()
    for d in range(t.dim() - 2, -1, -1):
        inner[d] = inner[d + 1] * t.shape[d + 1]
    size = t[0].numel() if t.dim() else 1
    buf = far_storage(WIDE_BASE + (t.shape[0] - 1) * WIDE_STRIDE + size, t.dtype, t.device)
    buf[:4096] = float("nan")
    v = buf.as_strided(t.shape, [WIDE_STRIDE] + inner[1:], WIDE_BASE)
    v.copy_(t)
    return v


def shifted_copy(t):
    """(a copy of t one element into a fresh buffer, a view of t's shape at the buffer's start):
    two tensors that overlap in all but one element (None, None when t has fewer than 2)."""
    if t.numel() < 2:
        return None, None
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    a, o = buf[1:].view(t.shape), buf[:-1].view(t.shape)
    a.copy_(t)
    return a, o


def assert_refused(fn, what):
    """fn() must raise the wrappers' ValueError for an output that shares memory."""
    try:
        fn()
    except ValueError as e:
        if "memory" in str(e):
            return
        raise
    raise AssertionError(f"{what} was not refused")


def expanded_like(t):
    """A tensor of t's shape and dtype whose rows are one row of memory (stride 0)."""
    return torch.empty(t.shape[-1:], dtype=t.dtype, device=t.device).expand(t.shape)
