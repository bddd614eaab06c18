"""Shared test helpers for fuseadvise kernel templates and generated kernel folders.

This file is copied verbatim into every generated folder (as ``fa_testing.py``), so it
imports nothing but the standard library and torch.

- ``load_sibling(test_file, name)`` imports ``<name>.py`` from the directory of
  ``test_file`` under a module name unique to that directory, so many template or generated
  folders (each with its own ``kernel.py``) can be collected by one pytest process.
- ``assert_close(got, want, atol, rtol)`` fails where ``|got - want| > atol + rtol * |want|``,
  and on NaN / +-inf mismatches, and reports the count and the first mismatches (index, got,
  want).
- ``TOL`` holds the per-dtype tolerances from the project's kernel conventions.
- ``devices()`` gives the pytest parameters ``cpu`` (Triton interpreter) and ``cuda`` (marked
  ``gpu``); each is skipped where it cannot run.
"""

import hashlib
import importlib.util
import os
import pathlib
import sys

import torch

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

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


def poison(shape, dtype, device):
    """A NaN-filled tensor: an output the kernel must overwrite everywhere."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def assert_close(got, want, atol, rtol, name="output", show=5):
    """Fails where |got-want| > atol + rtol*|want| or where NaN / +-inf differ.

    Compares in float64; reports the number of mismatches and the first ``show`` of them
    with their index, the value got and the value wanted.
    """
    if got.shape != want.shape:
        raise AssertionError(f"{name}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
    g = got.detach().to("cpu", torch.float64)
    w = want.detach().to("cpu", torch.float64)
    gnan, wnan = torch.isnan(g), torch.isnan(w)
    ginf, winf = torch.isinf(g), torch.isinf(w)
    finite = ~(gnan | wnan | ginf | winf)
    bad = (gnan != wnan) | (ginf != winf) | (ginf & winf & (torch.sign(g) != torch.sign(w)))
    diff = torch.zeros_like(g)
    diff[finite] = (g[finite] - w[finite]).abs()
    bad |= finite & (diff > atol + rtol * w.abs())
    n = int(bad.sum())
    if n:
        idx = bad.nonzero()[:show].tolist()
        lines = [f"  at {tuple(i)}: got {g[tuple(i)].item()!r}, want {w[tuple(i)].item()!r}" for i in idx]
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
    atol, rtol = adapter.tolerance(dt, shapes, params)
    names = getattr(adapter, "OUTPUTS", [f"out{i}" for i in range(len(want))])
    for name, g_, w_ in zip(names, got, want):
        if w_.dtype != g_.dtype:
            raise AssertionError(f"{name}: dtype {g_.dtype}, want {w_.dtype}")
        assert_close(g_, w_, atol, rtol, name=f"{name} (shapes={shapes}, {dt}, seed={seed})")
    for k, v in before.items():
        assert_unmodified(v, inputs[k], name=k)


def run_grad_case(kernel, reference, adapter, shapes, dtype, params, device, seed):
    """Gradients of every output (random grad_output) w.r.t. adapter.GRAD_INPUTS, vs eager."""
    dt = DTYPES[dtype] if isinstance(dtype, str) else dtype
    inputs = adapter.make_inputs(shapes, dt, params, device, seed)
    names = [n for n in adapter.GRAD_INPUTS if inputs.get(n) is not None]

    def leaves():
        d = dict(inputs)
        for n in names:
            d[n] = inputs[n].detach().clone().requires_grad_(True)
        return d

    a, b = leaves(), leaves()
    got = adapter.fused(kernel, a, params, autograd=True)
    for k, v in a.items():  # anything fused() left for the reference (e.g. a dropout mask)
        b.setdefault(k, v)
    want = adapter.reference(reference, b, params)
    g = gen(seed + 7)
    dys = [randn(w.shape, w.dtype, device, g) for w in want]
    gg = torch.autograd.grad(got, [a[n] for n in names], dys, allow_unused=True)
    gw = torch.autograd.grad(want, [b[n] for n in names], dys, allow_unused=True)
    atol, rtol = adapter.tolerance(dt, shapes, params, grad=True)
    quack = getattr(adapter, "QUACK_GRAD", False) and dt != torch.float32
    if quack:  # eager's own low-precision error is the yardstick: compare both with fp32
        c = {k: (v.detach().float().requires_grad_(k in names) if isinstance(v, torch.Tensor) else v)
             for k, v in inputs.items()}
        want32 = adapter.reference(reference, c, params)
        g32 = torch.autograd.grad(want32, [c[n] for n in names], [d.float() for d in dys], allow_unused=True)
    for i, (n, x, y) in enumerate(zip(names, gg, gw)):
        if y is None:
            continue
        if x is None:
            raise AssertionError(f"grad {n}: missing")
        label = f"grad {n} (shapes={shapes}, {dt}, seed={seed})"
        if quack:
            assert_quack(x, y, g32[i], name=label)
        else:
            assert_close(x, y, atol, rtol, name=label)


def assert_quack(got, want, want32, name="output", floor=1e-6):
    """Dtype-robust check: max|got - want32| <= 2 * max|want - want32| + floor, where want is
    eager at the low precision and want32 the same chain in fp32."""
    g, w, w32 = (t.detach().to("cpu", torch.float64) for t in (got, want, want32))
    eg = (g - w32).abs().max().item() if g.numel() else 0.0
    ew = (w - w32).abs().max().item() if w.numel() else 0.0
    if not eg <= 2 * ew + floor:
        i = tuple(((g - w32).abs() == eg).nonzero()[0].tolist())
        raise AssertionError(f"{name}: max|got-fp32| = {eg:.3g} > 2*max|eager-fp32| + {floor} = {2 * ew + floor:.3g}; "
                             f"at {i}: got {g[i].item()!r}, fp32 {w32[i].item()!r}, eager {w[i].item()!r}")
