"""Host cost of one kernel launch, per way of launching (GPU-only probe; prints a table).

Per-call wall time of N back-to-back calls with one synchronize at the end (how an eager model
calls a kernel) and the host time of one call (until it returns), for: an ATen add, a plain
@triton.jit kernel launched as kernel[grid](...), the same kernel behind @triton.autotune (one
config, tuned), and the CompiledKernel returned by the first launch, launched directly.

Measured on the H200 (2026-12-01, host us per call; the spread between runs, on machines of
one kind, is 20-40%: compare rows of one run). First run: aten add out= 6.0, aten add 6.9,
jit kernel[grid] 12.6, autotuned 17.8, CompiledKernel[grid] 7.4, the shared _launch of then
(specialization key + CompiledKernel[grid]) 10.5. A later run: aten add 8.9, kernel[grid]
17.2, CompiledKernel[grid] 7.3, the launcher called with the raw stream from torch._C 5.0,
the templates' shared _run (the C launch function called directly) 4.7, the shared _launch
(key + _run) 7.2: adopted. The same without the per-tensor device lookup in the key, another
run: aten add 7.8, kernel[grid] 12.7, _launch 7.6.

Usage: python3 bench/experiments/probe_launch.py
"""
import time

import torch
import triton
import triton.language as tl


@triton.jit
def _add(X, Y, Z, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Z + offs, tl.load(X + offs, mask=m) + tl.load(Y + offs, mask=m), mask=m)


@triton.autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=4)], key=["n"])
@triton.jit
def _add_tuned(X, Y, Z, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Z + offs, tl.load(X + offs, mask=m) + tl.load(Y + offs, mask=m), mask=m)


def _shared():
    """templates/_common/shared.py, the launch path the templates carry."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "templates" / "_common" / "shared.py"
    spec = importlib.util.spec_from_file_location("_fa_shared", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def per_call(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6


def main():
    x = torch.randn(4096, device="cuda")
    y = torch.randn_like(x)
    z = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 1024),)
    ck = _add[grid](x, y, z, n, BLOCK=1024)
    rows = [
        ("aten add out=", lambda: torch.add(x, y, out=z)),
        ("aten add", lambda: x + y),
        ("jit kernel[grid]", lambda: _add[grid](x, y, z, n, BLOCK=1024)),
        ("jit kernel[lambda grid]", lambda: _add[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, z, n, BLOCK=1024)),
        ("autotuned", lambda: _add_tuned[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, z, n)),
        ("empty_like + jit", lambda: _add[grid](x, y, torch.empty_like(x), n, BLOCK=1024)),
    ]
    try:
        launch = ck[(grid[0], 1, 1)]
        rows.append(("CompiledKernel[grid]", lambda: launch(x, y, z, n, 1024)))
        handle, pm, run = ck.function, ck.packed_metadata, ck.run
        lm = ck.launch_metadata
        cs = torch.cuda.current_stream

        def raw():
            run(grid[0], 1, 1, cs().cuda_stream, handle, pm, None, None, None, x, y, z, n, 1024)
        rows.append(("CompiledKernel.run raw", raw))
        raw_stream, device = torch._C._cuda_getCurrentRawStream, torch._C._cuda_getDevice

        def raw_c():
            run(grid[0], 1, 1, raw_stream(device()), handle, pm, None, None, None, x, y, z, n, 1024)
        rows.append(("run, stream from torch._C", raw_c))
    except Exception as e:  # noqa: BLE001
        print("CompiledKernel launch failed:", e)
    sh = _shared()
    entry = sh._compiled(ck, _add)
    rows.append(("shared _run (C launch)", lambda: sh._run(entry, (grid[0], 1, 1), (x, y, z, n, 1024), 0)))
    rows.append(("shared _launch", lambda: sh._launch(_add, grid, (x, y, z, n), BLOCK=1024)))
    print(f"{'way':28s} {'host us/call':>12s} {'wall us/call':>12s}")
    for name, fn in rows:
        try:
            h, w = per_call(fn)
            print(f"{name:28s} {h:12.2f} {w:12.2f}")
        except Exception as e:  # noqa: BLE001
            print(f"{name:28s} failed: {str(e)[:150]}")


if __name__ == "__main__":
    main()
