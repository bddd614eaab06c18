"""Probe: a generic row program's rows a program and warps (GPU only).

A generic chain ending in a reduction over the last dim (sum, mean, amax/amin, logsumexp,
softmax, log_softmax) runs as one row kernel: BLOCK_R rows a program, each row in tiles of
BLOCK_N columns. Until 2026-12-03 a program took one row with four warps, and such chains
ran at 0.62-0.70x torch.compile at 4096 rows of 1024 (docs/benchmarks/h200.md), where
Inductor's persistent reductions take several rows a program. The host now picks
(BLOCK_R, num_warps) by _row_tile. For each folder (and, with -shape RxN, the folder's chain
at a main shape of R rows of N instead of its traced one) this times the kept choice and
every BLOCK_R in 1..32 (tiles up to 16384 elements) with 2 to 16 warps, each as bench times
a call (fa_testing.gpu_time_us of its CUDA-graph replay, L2 flushed), and torch.compile of
the traced chain beside them. A config's outputs are compared with the kept one's: rows
summed in another order differ in their last bits, so the largest difference is printed,
relative to the output's largest magnitude (a wrong kernel differs by far more).

-kernels: the kept config's kernels and compile's under torch.profiler (device µs a call,
back to back) and Inductor's generated kernel. -variants: the kept config with kernel.py
edited: the row index in 32 bits instead of 64, no _round of the 16-bit steps (the
roundings eager's stores make, which Inductor does not), _round on the bits (ten-odd integer
operations; until 2026-12-03 its only form) instead of the PTX conversion there and back (the
run of 2026-12-03 timed the other way round: the bit form kept, PTX the variant). Where the rows
are one tile and fill every program (EVEN: no masks), the kept config with its masks too.

Usage: python3 bench/experiments/probe_row_tiles.py [-kernels] [-variants] [-shape RxN]... FOLDER...
"""
import importlib.util
import pathlib
import re
import sys
import tempfile

import torch

import probekit  # beside this file

VARIANTS = {
    "row index in 32 bits": [("tl.program_id(0).to(tl.int64) * BLOCK_R", "tl.program_id(0) * BLOCK_R")],
    "no _round": [(re.compile(r"\n *v\d+ = _round\(v\d+, tl\.\w+\)"), "")],
    "_round on the bits": [(re.compile(r"^_ROUND_PTX = .*$", re.M), "_ROUND_PTX = tl.constexpr(False)")],
}


def load(path, name):
    spec = importlib.util.spec_from_file_location(f"_r_{abs(hash(str(path)))}_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def variant(folder, edits):
    """kernel.py of folder with edits applied, loaded as a module of its own."""
    src = (folder / "kernel.py").read_text()
    for a, b in edits:
        src = a.sub(b, src) if isinstance(a, re.Pattern) else src.replace(a, b)
    tmp = pathlib.Path(tempfile.mkdtemp()) / "kernel.py"
    tmp.write_text(src)
    return load(tmp, "variant")


def rel_diff(got, want):
    d = max((g.float() - w.float()).abs().max().item() for g, w in zip(got, want))
    scale = max(w.float().abs().max().item() for w in want)
    return d / scale if scale > 0 else d


def probe(folder, fat, kernel, adapter, ref, shapes, dt, params, show_kernels, variants):
    inputs = adapter.make_inputs(shapes, dt, params, "cuda", 0)
    xs = [inputs[n] for n in adapter.NAMES]
    out_shapes, launch = kernel._fwd_plan(xs)
    grid, args, consts, warps = launch.grid, launch.ints, launch.constexprs, launch.num_warps
    rows = args[0]
    want = [t.clone() for t in kernel.fused(*xs)]
    print(f"{folder.name} at {shapes}: rows {rows} of {args[1]}, kept BLOCK_R {consts['BLOCK_R']} "
          f"BLOCK_N {consts['BLOCK_N']} warps {warps}")
    compiled = torch.compile(ref.chain)
    compiled(*xs)
    replay = fat.graph_replay(lambda: compiled(*xs))
    print(f"  torch.compile                 {fat.gpu_time_us(replay)[0]:7.2f} µs")
    out = kernel.empty_outputs(*xs)
    for block_r in (1, 2, 4, 8, 16, 32):
        if block_r * consts["BLOCK_N"] > 16384 or (block_r > 1 and not consts["ONE_TILE"]):
            continue
        for w in (2, 4, 8, 16):
            c = dict(consts, BLOCK_R=block_r)
            if "EVEN" in c:  # no masks where the rows are one tile and fill every program
                c["EVEN"] = args[1] == c["BLOCK_N"] and rows % block_r == 0
            plan = kernel._Planned(launch.kernel, (-(-rows // block_r),), args, w, launch.num_stages, **c)
            try:
                got = kernel._fused_run(plan, xs, out)
                torch.cuda.synchronize()
                diff = rel_diff(got, want)
                replay = fat.graph_replay(lambda: kernel._fused_run(plan, xs, out))
                us = fat.gpu_time_us(replay)[0]
            except Exception as e:  # noqa: BLE001 - a tile that does not compile here
                print(f"  BLOCK_R {block_r:3d} warps {w:2d}  failed: {type(e).__name__}")
                continue
            mark = " <- kept" if (block_r, w) == (consts["BLOCK_R"], warps) else ""
            note = f"  differs by {diff:.1e}" if diff else ""
            print(f"  BLOCK_R {block_r:3d} warps {w:2d}  {us:7.2f} µs{note}{mark}")
    if consts.get("EVEN"):  # the kept config with its masks
        plan = kernel._Planned(launch.kernel, grid, args, warps, launch.num_stages, **dict(consts, EVEN=False))
        kernel._fused_run(plan, xs, out)
        replay = fat.graph_replay(lambda: kernel._fused_run(plan, xs, out))
        print(f"  kept, with masks (EVEN off)    {fat.gpu_time_us(replay)[0]:7.2f} µs")
    for name in variants:
        k = variant(folder, VARIANTS[name])
        kl = k._fwd_plan(xs)[1]  # the variant's own kernel, planned as the kept one
        got = k._fused_run(kl, xs, out)
        torch.cuda.synchronize()
        diff = rel_diff(got, want)
        replay = fat.graph_replay(lambda: k._fused_run(kl, xs, out))
        note = f"  differs by {diff:.1e}" if diff else ""
        print(f"  kept, {name:22s} {fat.gpu_time_us(replay)[0]:7.2f} µs{note}")
    if show_kernels:
        from torch._inductor.utils import run_and_get_code

        for label, fn in (("fused (kept)", lambda: kernel._fused_run(launch, xs, out)),
                          ("torch.compile", lambda: compiled(*xs))):
            us = probekit.device_times(fn)
            print(f"  {label}: {sum(us.values()):.2f} µs in {len(us)} kernels")
            for name, t in us.most_common():
                print(f"    {t:7.2f}  {name[:100]}")
        torch._dynamo.reset()
        _, codes = run_and_get_code(torch.compile(ref.chain), *xs)
        for code in codes:
            for m in re.finditer(r"(@triton_heuristics.*?)'''", code, re.S):
                print("    | " + m.group(1).strip().replace("\n", "\n    | "))


def main():
    argv = sys.argv[1:]
    show_kernels = "-kernels" in argv
    variants = list(VARIANTS) if "-variants" in argv else []
    shapes, folders = [], []
    it = iter(a for a in argv if a not in ("-kernels", "-variants"))
    for a in it:
        if a == "-shape":
            shapes.append([int(x) for x in next(it).split("x")])
        else:
            folders.append(a)
    for arg in folders:
        folder = pathlib.Path(arg).resolve()
        sys.path.insert(0, str(folder))
        fat = load(folder / "fa_testing.py", "fa_testing")
        case = load(folder / "case.py", "case")
        kernel = load(folder / "kernel.py", "kernel")
        adapter = load(folder / "adapter.py", "adapter")
        ref = load(folder / "reference.py", "reference")
        dt = fat.DTYPES[case.DTYPE]
        for sh in [case.SHAPES] + [[s] for s in shapes]:
            probe(folder, fat, kernel, adapter, ref, sh, dt, case.PARAMS, show_kernels, variants)
        sys.path.remove(str(folder))


if __name__ == "__main__":
    main()
