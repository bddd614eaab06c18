"""Probe: a generic chain's pointwise forward at launch-bound sizes, by block and warps (GPU).

At 1K-64K elements the generated forward ran 0.1-0.5 µs over torch.compile's kernel, which ran
at a plain copy's time (docs/benchmarks/h200.md, "int64 values in generic chains"): the
forward takes BLOCK = 1024 elements a program with 4 warps whatever the size, so 1 to 64
programs there, on 132 SMs. This probe times each folder's forward as generated and with
BLOCK in 128..2048 and num_warps in 1..8 (the plan's launch rewritten; outputs checked equal
to the generated kernel's), beside torch.compile of the reference chain and a copy of the
same bytes, each as bench times microsecond cases: CUDA-graph replays back to back
(triton.testing.do_bench_cudagraph, L2 warm). With --shape the main shape is another
(e.g. 4096,1024 for a large case).

  python bench/experiments/probe_generic_small.py [--shape D0,D1,...] FOLDER...
"""
import argparse
import importlib.util
import itertools
import pathlib
import sys

import torch
import triton


def load(folder, name):
    spec = importlib.util.spec_from_file_location(f"{folder.name}_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def bench_us(fn):
    return 1e3 * triton.testing.do_bench_cudagraph(fn, rep=200)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="")
    ap.add_argument("folders", nargs="+", type=pathlib.Path)
    a = ap.parse_args()
    for folder in a.folders:
        sys.path.insert(0, str(folder))
        case, adapter, kernel, ref = (load(folder, n) for n in ("case", "adapter", "kernel", "reference"))
        sys.path.pop(0)
        main_shape = [int(x) for x in a.shape.split(",")] if a.shape else case.SHAPES[0]
        inputs = adapter.make_inputs([main_shape], None, {}, "cuda", 0)
        xs = [inputs[n] for n in adapter.NAMES]
        want = kernel.fused(*xs)
        numel = 1
        for d in main_shape:
            numel *= d
        out_bytes = sum(o.numel() * o.element_size() for o in want)
        in_bytes = sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))
        src = torch.empty(max(in_bytes, 1), dtype=torch.uint8, device="cuda")
        dst = torch.empty(max(out_bytes, 1), dtype=torch.uint8, device="cuda")
        copy_us = bench_us(lambda: dst.copy_(src[:dst.numel()]) if dst.numel() <= src.numel() else dst[:src.numel()].copy_(src))
        compiled = torch.compile(ref.chain)
        compiled(*xs)
        compile_us = bench_us(lambda: compiled(*xs))
        eager_us = bench_us(lambda: ref.chain(*xs))
        print(f"{folder.name} {'x'.join(map(str, main_shape))} ({numel} elements): eager {eager_us:.2f} compile "
              f"{compile_us:.2f} copy {copy_us:.2f} us")
        base = kernel.BLOCK
        rows = []
        for block, warps in itertools.product((128, 256, 512, 1024, 2048), (1, 2, 4, 8)):
            if warps * 32 > block:
                continue
            kernel.BLOCK = block
            kernel._PLANS.clear()
            kernel.fused(*xs)  # plans it
            for plan in kernel._PLANS.values():
                launch = plan[1]
                if launch is not None:
                    launch.num_warps, launch.entries = warps, {}
            got = kernel.fused(*xs)
            same = all(torch.equal(g, w) or (g.is_floating_point() and torch.allclose(g, w, equal_nan=True, atol=0, rtol=0))
                       for g, w in zip(got, want))
            us = bench_us(lambda: kernel.fused(*xs))
            rows.append((us, block, warps, same))
            print(f"  BLOCK {block:5d} warps {warps}: {us:6.2f} us  programs {-(-numel // block):6d}"
                  f"{'' if same else '  OUTPUTS DIFFER'}{'  (generated)' if block == base and warps == 4 else ''}")
        kernel.BLOCK = base
        kernel._PLANS.clear()
        best = min(rows)
        print(f"  best: BLOCK {best[1]} warps {best[2]} {best[0]:.2f} us (compile {compile_us:.2f})")


if __name__ == "__main__":
    main()
