"""A generic folder's forward kernel compiled for sm_90 without a GPU: what its index math costs.

Compiles the launch fused() makes at the folder's traced shape (templates/_common/sm90.py:
Triton's compiler and ptxas from the installed triton, the launch captured, not run) and
counts in the PTX: vector loads (ld.global .v4/.v2), scalar loads, 32-bit divisions and
remainders by a runtime size, and multiply-highs (the magic-number division); ptxas's
registers and spill bytes a thread. Static counts, not time: used on 2026-12-02 to check that the final index math keeps the former kernel's vector loads where
the innermost size is a multiple of 16, when no GPU was left to time it.

With --backward, the launch fused_backward makes (_fused_bwd_kernel) instead: on 2026-12-03 the
flat walk's alignment hints were checked this way before the H200 timed them. For a folder
with a GEMM head: its pointwise kernel (the library path's pass) on the GEMM's output.

  python bench/experiments/probe_generic_ptx.py [--backward] FOLDER...
"""
import importlib.util
import os
import pathlib
import re
import sys

os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "templates" / "_common"))

import torch  # noqa: E402

import sm90  # noqa: E402

DTYPES = {"bool": torch.bool, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def counts(ptx):
    """The PTX's vector loads, scalar loads, divisions and remainders, and multiply-highs."""
    return {"v4": len(re.findall(r"ld\.global[^\n]*\.v4", ptx)), "v2": len(re.findall(r"ld\.global[^\n]*\.v2", ptx)),
            "scalar": len(re.findall(r"ld\.global\.[a-z0-9.]*b(16|32) ", ptx)),
            "div_rem": len(re.findall(r"\b(div|rem)\.[su]32", ptx)), "mul_hi": len(re.findall(r"mul\.hi", ptx))}


def main():
    for i, folder in enumerate(map(pathlib.Path, [a for a in sys.argv[1:] if a != "--backward"])):
        sys.path.insert(0, str(folder))
        load(folder / "fa_testing.py", "fa_testing")
        case = load(folder / "case.py", f"case{i}")
        kernel = load(folder / "kernel.py", f"kernel{i}")
        main_shape = case.SHAPES[0]
        xs = []
        if getattr(case, "GEMM", None):  # a GEMM head: its pointwise kernel (the library path's
            xs.append(torch.empty(main_shape, dtype=DTYPES[case.GEMM["dtype"]]))  # pass), on the GEMM's output
        for _, dt, keep in case.INPUTS:  # CPU tensors: only dtypes, shapes and alignment matter
            shape = [n if k else 1 for n, k in zip(main_shape[len(main_shape) - len(keep):], keep)]
            xs.append(torch.empty(shape, dtype=DTYPES[dt]))
        if "--backward" in sys.argv:  # the backward's launch, one gradient of the main shape per output
            douts = [torch.empty(main_shape, dtype=dt) for dt in kernel.OUT_DTYPES]
            call = lambda: kernel.fused_backward(xs, douts)  # noqa: E731
        else:
            call = lambda: kernel.fused(*xs)  # noqa: E731
        for launch in sm90.capture(kernel, call):
            ck = sm90.compile_sm90(launch)
            regs, spills = sm90.ptxas_usage(ck.asm["ptx"])
            print(folder.name, launch.constexprs, f"registers {regs} spills {spills}", counts(ck.asm["ptx"]), flush=True)
        sys.path.remove(str(folder))


if __name__ == "__main__":
    main()
