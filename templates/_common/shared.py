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
# The launch path. A kernel's compiled form is cached per specialization and launched
# directly: on the H200 (bench/experiments/probe_launch.py, per call) kernel[grid](...) took
# 12-15 us of host time, the compiled kernel launched directly 7.4 us, a kernel behind
# @triton.autotune 17-25 us, an ATen add 6 us. Tiles come from each template's heuristics
# (no autotuner: it would re-tune every new shape, run configs on the caller's buffers and
# break CUDA-graph capture at an unseen shape).
_COMPILED = {}


def _spec(a):
    """What Triton specializes a launch argument on: a tensor's dtype, 16-byte alignment and
    device; an int's being 1, divisible by 16, and its width; a float nothing; anything else
    (constexpr flags, None) its value."""
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.data_ptr() % 16 == 0, a.device.index)
    if type(a) is int:
        return (a == 1, a % 16 == 0, -0x80000000 <= a <= 0x7FFFFFFF)
    if type(a) is float:
        return float
    return a


def _launch(kernel, grid, args, num_warps=4, num_stages=1, **constexprs):
    """``kernel[grid](*args, **constexprs)``; the constexprs are the kernel's last parameters,
    passed in its order. After the first call of a specialization its compiled kernel is
    launched directly. Under the interpreter: the plain call."""
    grid = tuple(grid) + (1,) * (3 - len(grid))
    if INTERPRET:
        names = kernel.arg_names[len(args):]
        if list(constexprs) != names:
            raise TypeError(f"_launch: constexprs {list(constexprs)}, want {names}")
        kernel[grid](*args, num_warps=num_warps, num_stages=num_stages, **constexprs)
        return
    key = (kernel, num_warps, num_stages, tuple(constexprs.values()), tuple(map(_spec, args)))
    ck = _COMPILED.get(key)
    if ck is not None:
        ck[grid](*args, *constexprs.values())
        return
    names = kernel.arg_names[len(args):]
    if list(constexprs) != names:
        raise TypeError(f"_launch: constexprs {list(constexprs)}, want {names}")
    _COMPILED[key] = kernel[grid](*args, num_warps=num_warps, num_stages=num_stages, **constexprs)
# --- fa:end launch ---


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
