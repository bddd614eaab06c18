"""CPU-side host cost of a generic folder's calls, its launches stubbed out (no GPU).

For each folder (any directory with a generated kernel.py and its case.py: a generic folder,
or a golden example under codegen/testdata/golden/generic), microseconds per call of
kernel.fused (the forward) and kernel.fused_backward (the backward, called directly, without
autograd) and of a training step (kernel.fused_autograd and torch.autograd.grad: both, with
autograd's own work on the CPU), on tensors of the case's main shape (or --shape: the host
path depends on the layout, not the size) on CPU. A GEMM head's: gemm_fused by the library
path (the GEMM in PyTorch, then the pointwise kernel) and by a Triton tile, and a training
step through gemm_autograd; its GEMMs run on the CPU (keep --shape small: 16,64 say).
Launches are stubbed where the kernel's launch path hands them to the GPU: the compiled
kernel's entry is looked up as on a GPU (the specialization key computed, every launch
found compiled) and its launch call does nothing (``_run``); older kernels: ``_launch``, or
``_fused_kernel[grid](...)`` and ``_fused_bwd_kernel[grid](...)``. What remains is the
wrapper's own Python and ATen work; a GPU adds the launch itself (the C launch function,
and the CUDA allocator where a CPU one is timed). Min over repeats of the mean over N calls.

  python templates/_generic/bench_host.py [--shape 4,16,512,64] [-n 2000] FOLDER...
"""

import argparse
import importlib.util
import pathlib
import time

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "bool": torch.bool}


def load(folder, name):
    spec = importlib.util.spec_from_file_location(f"_bh_{abs(hash(str(folder)))}_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Stub:
    """kernel[grid](...) that does nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


class _Compiled(dict):
    """kernel._COMPILED where every launch is compiled already: each key gives an entry whose
    launch does nothing (the key itself is computed by the caller, as on a GPU)."""

    ENTRY = (lambda *args: None, (), None, None)

    def get(self, key, default=None):
        return self.ENTRY

    def __getitem__(self, key):
        return self.ENTRY


def stub_launches(kernel):
    if hasattr(kernel, "_run") and hasattr(kernel, "_COMPILED"):
        kernel._run = lambda *args: None
        kernel._COMPILED = _Compiled()
        torch._C._cuda_getDevice = lambda: 0  # (CPU: no device to ask)
        return
    if hasattr(kernel, "_launch"):
        kernel._launch = lambda *args, **kwargs: None
    for name in ("_fused_kernel", "_fused_bwd_kernel"):
        if hasattr(kernel, name):
            setattr(kernel, name, _Stub())


def per_call_us(fn, n, repeats):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", help="the main shape, comma-separated (default: the case's)")
    ap.add_argument("--device", default="cpu",
                    help="where the tensors live (cpu: keep --shape small, its buffers are allocated "
                         "each call; meta dispatches ops through Python meta functions, far slower)")
    ap.add_argument("-n", type=int, default=2000, help="calls per repeat")
    ap.add_argument("-r", "--repeats", type=int, default=5)
    ap.add_argument("folders", nargs="+", type=pathlib.Path)
    a = ap.parse_args()
    for folder in a.folders:
        kernel, case = load(folder, "kernel"), load(folder, "case")
        stub_launches(kernel)
        if getattr(case, "GEMM", None):
            print(gemm_head(folder, kernel, case, a))
            continue
        main = [int(x) for x in a.shape.split(",")] if a.shape else case.SHAPES[0]
        g = torch.Generator().manual_seed(0)
        xs = []
        for _, dt, keep in case.INPUTS:
            off = len(main) - len(keep)
            shape = [main[off + j] if k else 1 for j, k in enumerate(keep)]
            if dt in ("number", "number_int64"):  # a Python number the caller passes
                xs.append(1 if dt == "number_int64" else 0.75)
            elif dt == "int64":
                xs.append(torch.randint(-8, 9, shape, generator=g).to(a.device))
            else:
                xs.append(torch.randn(shape, generator=g).to(DTYPES[dt]).to(a.device))
        outs = kernel.fused(*xs)
        fwd = per_call_us(lambda: kernel.fused(*xs), a.n, a.repeats)
        line = f"{folder.name} {'x'.join(map(str, main))} ({a.device}): forward {fwd:.1f} us"
        if hasattr(kernel, "fused_backward"):
            douts = [torch.ones_like(o) if gr else None for o, gr in zip(outs, kernel.GRAD_OUTPUTS)]
            bwd = per_call_us(lambda: kernel.fused_backward(xs, douts), a.n, a.repeats)
            line += f", backward {bwd:.1f} us"
            leaves = [x.detach().requires_grad_(x.dtype.is_floating_point) for x in xs]
            grad_in = [x for x in leaves if x.requires_grad]

            def train():
                ys = [y for y, gr in zip(kernel.fused_autograd(*leaves), kernel.GRAD_OUTPUTS) if gr]
                torch.autograd.grad(ys, grad_in, [torch.ones_like(y) for y in ys])

            line += f", training step (forward and backward under autograd) {per_call_us(train, a.n, a.repeats):.1f} us"
        print(line)


def gemm_head(folder, kernel, case, a):
    """A GEMM head's line: gemm_fused by the library path and by the first Triton tile, and a
    training step (gemm_autograd and torch.autograd.grad)."""
    g = case.GEMM
    dt = DTYPES[g["dtype"]]
    main = [int(x) for x in a.shape.split(",")] if a.shape else case.SHAPES[0]
    k = g["k"] if not a.shape else min(g["k"], 64)
    w_shape = {"linear": [main[-1], k], "bmm": [main[0], k, main[-1]]}.get(g["op"], [k, main[-1]])
    gen = torch.Generator().manual_seed(0)

    def rand(shape, d):
        return torch.randn(shape, generator=gen).to(d).to(a.device)

    ops = [rand(main[:-1] + [k], dt), rand(w_shape, dt), rand([main[-1]], dt) if g["bias"] else None]
    xs = []
    for _, d, keep in case.INPUTS:
        off = len(main) - len(keep)
        xs.append(rand([main[off + j] if kp else 1 for j, kp in enumerate(keep)], DTYPES[d]))
    line = f"{folder.name} {'x'.join(map(str, main))}x{k} ({a.device}):"
    first = kernel._gemm_candidates(16, k, ops[0].element_size())[0]
    for label, tile in (("library path", kernel.GEMM_LIBRARY), ("Triton tile", first)):
        kernel._GEMM_TUNED = _Always(tile)
        line += f" forward ({label}) {per_call_us(lambda: kernel.gemm_fused(*ops, *xs), a.n, a.repeats):.1f} us,"
        if hasattr(kernel, "gemm_autograd"):
            leaves = [t.detach().requires_grad_(True) if t is not None and t.dtype.is_floating_point else t
                      for t in (*ops, *xs)]
            grad_in = [t for t in leaves if t is not None and t.requires_grad]

            def train():
                ys = [y for y, gr in zip(kernel.gemm_autograd(*leaves), kernel.GRAD_OUTPUTS) if gr]
                torch.autograd.grad(ys, grad_in, [torch.ones_like(y) for y in ys])

            line += f" training step ({label}) {per_call_us(train, a.n, a.repeats):.1f} us,"
    return line.rstrip(",")


class _Always(dict):
    """kernel._GEMM_TUNED that gives one tile for every key."""

    def __init__(self, tile):
        super().__init__()
        self.tile = tile

    def get(self, key, default=None):
        return self.tile


if __name__ == "__main__":
    main()
