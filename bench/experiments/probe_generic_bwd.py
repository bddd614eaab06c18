"""Probe: the tiling of a generic chain's fused backward (GPU).

A generic chain's backward (codegen/generic.go: _fused_bwd_kernel, planned by _bwd_plan) sums
the gradients of broadcast inputs per program into column-sum buffers. Llama's fp32 RoPE-style
``x0 * x1 + x2`` (x1 broadcast over batch and heads) ran its backward at 0.47x torch.compile
on the H200 (13.7 vs 6.4 µs, docs/benchmarks/h200.md, 2026-12-02): the plan put 256 programs
of 8 tiles on 132 multiprocessors, a few warps each, and no row splits. This probe times the
backward of each generated folder given (bench's backward mode: harness.TrainingCall over
adapter.train, captured in a CUDA graph, the replay timed by fa_testing.gpu_time_us with the
L2 flushed) for the plan's knobs (BWD_TILE, MIN_SPLIT_ROWS, PROGRAMS_PER_SM, MIN_BLOCK_C) one
at a time and in pairs, beside eager's backward, each variant's gradients checked against
eager's. The config column gives the grid and the partial sums' buffer of each variant.

With --rewrites, the variants are of the kernel's text instead (the plan's knobs as they
are): "acc2d" keeps each per-program sum as a [BLOCK_R, BLOCK_C] tile of running sums, added to
elementwise and reduced once after the row loop (as Inductor's reductions do), where kernels
generated before 2026-12-02's change reduced every tile (a cross-warp sum and a barrier a
tile; the generator now writes the running tile, and this rewrite leaves such a kernel as it is); "pipeN" runs the
row loop as tl.range(num_stages=N), the next tiles' loads issued while one is worked on.

With --rewrites NAMES and --knobs, each rewrite with every knob combination. With --shapes,
the same at other main shapes (the inputs made by the folder's adapter), to tell a layout's
cost from its shape's (ConvNeXt's 196 columns against 256 and 192). With --kernels, no
timing table: the GPU kernels of one backward of eager, fused and torch.compile, each as
torch.profiler records it (the L2 flushed before each call), to see which kernel a gap is in.

Usage, from the repository root, with folders made by ``fuseadvise gen``:
  python bench/experiments/probe_generic_bwd.py FOLDER... [--json] [--rewrites [NAMES]] [--knobs GRID]
      [--shapes SHAPES] [--kernels]
"""
import argparse
import importlib.util
import itertools
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))  # harness

import torch  # noqa: E402

import harness  # noqa: E402

KNOBS = {"BWD_TILE": (1024, 512, 256, 2048), "MIN_SPLIT_ROWS": (16, 8, 4, 2), "PROGRAMS_PER_SM": (8, 16, 32),
         "MIN_BLOCK_C": (128, 64, 256)}


def load(folder, name):
    spec = importlib.util.spec_from_file_location(f"{folder.name}_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def kernel_list(call, calls=20):
    """The GPU kernels of one call, as torch.profiler (CUPTI) records them: (name, median us)
    in launch order, the L2 flushed before each call (a fill of 256 MB of int8, whose kernels
    are left out by their element type)."""
    from torch.profiler import ProfilerActivity, profile
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.fill_(1)
            call()
        torch.cuda.synchronize()
    evs = [e for e in prof.events() if e.device_type.name == "CUDA" and "signed char" not in e.name]
    per = len(evs) // calls
    return [(evs[i].name, sorted(evs[i + k * per].time_range.elapsed_us() for k in range(calls))[calls // 2])
            for i in range(per)]


def variants(grid=None):
    """The plan's defaults, each knob alone, then the pairs of the first three knobs; with
    grid (a JSON object of knob: [values]), the defaults then every combination of those."""
    yield {}
    if grid:
        keys = list(grid)
        for vals in itertools.product(*(grid[k] for k in keys)):
            yield dict(zip(keys, vals))
        return
    for k, vals in KNOBS.items():
        for v in vals[1:]:
            yield {k: v}
    for (a, av), (b, bv) in itertools.combinations([(k, v[1:]) for k, v in KNOBS.items() if k != "MIN_BLOCK_C"], 2):
        for x, y in itertools.product(av, bv):
            yield {a: x, b: y}


def acc2d(src):
    """The per-program sums as [BLOCK_R, BLOCK_C] running sums, reduced after the loop."""
    src = re.sub(r"acc_c(\d+) = tl.zeros\(\[BLOCK_C\], tl.float32\)", r"acc_c\1 = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)", src)
    src = re.sub(r"acc_r(\d+) = tl.zeros\(\[BLOCK_R\], tl.float32\)", r"acc_r\1 = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)", src)
    src = re.sub(r"acc_([cr])(\d+) \+= tl.sum\(tl.where\(mask, gx(\d+), 0.0\), axis=[01]\)",
                 r"acc_\1\2 += tl.where(mask, gx\3, 0.0)", src)
    src = re.sub(r"\(pg \* C \+ cols\), acc_c(\d+), mask=cmask\)", r"(pg * C + cols), tl.sum(acc_c\1, axis=0), mask=cmask)", src)
    src = re.sub(r"tl.sum\(acc_r(\d+), axis=0\)", r"tl.sum(tl.sum(acc_r\1, axis=1), axis=0)", src)
    return src


def pipe(n):
    """The row loop as tl.range(num_stages=n) (the GPU only)."""
    def rewrite(src):
        old = ("    r0 = row_start\n    while r0 < row_end:  # a while loop: the interpreter cannot range() over a runtime int\n"
               "        rows = r0 + tl.arange(0, BLOCK_R)\n        rmask = rows < row_end\n        r0 += BLOCK_R\n")
        assert old in src, "the row loop's text changed"
        new = (f"    for t in tl.range(0, tl.cdiv(row_end - row_start, BLOCK_R), num_stages={n}):\n"
               "        rows = row_start + t * BLOCK_R + tl.arange(0, BLOCK_R)\n        rmask = rows < row_end\n")
        return src.replace(old, new)
    return rewrite


def kept_first(src):
    """Rows ordered with every broadcast input's kept rows first (not only the column-keeping
    inputs'), and blocks as small as a column-reducing input's reduced rows: a per-channel
    scale on NCHW then sums per program (kind 2, rows C-major, N inner) where it summed per row
    (kind 3, a [column blocks, N*C] buffer). The generator writes this since 2026-12-02; a
    kernel generated since is left as it is."""
    a = "rows = sorted(groups[:-1], key=lambda gr: -sum(k[gr[0]] for k in colkeep))"
    b = "block = min([t for t, kd in zip(tails, kinds) if kd == 1], default=len(rows))"
    if a not in src or b not in src:
        return src
    src = src.replace(a, "rows = sorted(groups[:-1], key=lambda gr: (-sum(k[gr[0]] for k in colkeep), "
                      "-sum(k[gr[0]] for k in keeps)))")
    return src.replace(b, "block = min([t for t, kd in zip(tails, kinds) if kd in (1, 2)], default=len(rows))")


def wide(src):
    """Column blocks kept at the next power of two up to half of them masked (an eighth). The
    generator writes this for per-program sums alone since 2026-12-02 (MAX_WIDE_BLOCK_C); a
    kernel generated since has its rule and gets this one too: every layout widened."""
    a = "while not wide and block_c > MIN_BLOCK_C and (-(-n_cols // block_c) * block_c - n_cols) * 8 > n_cols:"
    if a not in src:
        a = a.replace("not wide and ", "")
    return src.replace(a, a.replace("* 8 >", "* 2 >"))


REWRITES = {"acc2d": [acc2d], "pipe2": [pipe(2)], "pipe3": [pipe(3)], "acc2d+pipe2": [acc2d, pipe(2)],
            "acc2d+pipe3": [acc2d, pipe(3)], "kept_first": [kept_first], "wide": [wide],
            "kept_first+wide": [kept_first, wide]}


def rewrite_variants(names, grid=None):
    """The kernel as generated, then each rewrite named; with grid, each of those with every
    combination of its knob values too."""
    base = [{}] + [{"rewrite": r} for r in names]
    yield from base
    if grid:
        keys = list(grid)
        for b in base:
            for vals in itertools.product(*(grid[k] for k in keys)):
                yield {**b, **dict(zip(keys, vals))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rewrites", nargs="?", const=",".join(REWRITES),
                    help="variants of the kernel's text (see above): all, or those named (a comma list); "
                         "with --knobs, each with every combination of the grid too")
    ap.add_argument("--knobs", type=json.loads, help='a grid of knob values, e.g. {"MIN_BLOCK_C": [32, 64]}')
    ap.add_argument("--shapes", type=json.loads,
                    help="time at these main shapes instead of the traced one, e.g. [[32, 384, 16, 16]]")
    ap.add_argument("--kernels", action="store_true",
                    help="instead: the GPU kernels of one backward (torch.profiler) of eager, fused and torch.compile")
    args = ap.parse_args()
    for f in map(pathlib.Path, args.folders):
        sys.path.insert(0, str(f))  # the folder's fa_testing and case
        fat = load(f, "fa_testing")
        sys.modules["fa_testing"] = fat
        case, kernel, ref, adapter = (load(f, n) for n in ("case", "kernel", "reference", "adapter"))
        params = case.PARAMS
        for shape in args.shapes or [None]:
            probe(args, f, fat, case, kernel, ref, adapter, params, [shape] if shape else case.SHAPES)
        sys.path.remove(str(f))


def probe(args, f, fat, case, kernel, ref, adapter, params, shapes):
    inputs = adapter.make_inputs(shapes, fat.DTYPES[case.DTYPE], params, "cuda", 0)
    label = f.name[:44] if shapes == case.SHAPES else "x".join(map(str, shapes[0]))
    names = [n for n in adapter.GRAD_INPUTS if inputs.get(n) is not None]
    if not getattr(case, "BACKWARD", False) or not names:
        print(f"{f.name}: no fused backward (forward only)", flush=True)
        return

    def timed(fwd):
        call = harness.TrainingCall(torch, fwd, inputs, names, "backward")
        got = call()
        return fat.gpu_time_us(fat.graph_replay(call) or call), got

    if args.kernels:
        comp = torch.compile(lambda d: adapter.reference(ref, d, params))
        provs = [("eager", lambda d: adapter.reference(ref, d, params)),
                 ("fused", lambda d: adapter.train(kernel, d, params)), ("compile", comp)]
        if hasattr(adapter, "eager"):  # the chain as the model ran it (bench's eager and compile)
            torch._dynamo.reset()
            traced = torch.compile(lambda d: adapter.eager(ref, d, params))
            provs += [("eager-tr", lambda d: adapter.eager(ref, d, params)), ("compile-tr", traced)]
        for who, fwd in provs:
            for name, us in kernel_list(harness.TrainingCall(torch, fwd, inputs, names, "backward")):
                print(f"{label:44s} {who:8s} {us:8.2f}  {name[:90]}", flush=True)
        return
    eager_us, want = timed(lambda d: adapter.reference(ref, d, params))
    defaults = {k: getattr(kernel, k) for k in (*KNOBS, *(args.knobs or {}))}
    rows = [("eager", eager_us, None, "")]
    text, generated = (f / "kernel.py").read_text(), kernel
    for v in rewrite_variants(args.rewrites.split(","), args.knobs) if args.rewrites else variants(args.knobs):
        if "rewrite" in v:
            src = text
            for rw in REWRITES[v["rewrite"]]:
                src = rw(src)
            (f / "kernel_probe.py").write_text(src)
            kernel = load(f, "kernel_probe")
        else:
            kernel = generated
        for k, val in {**defaults, **v}.items():
            if k != "rewrite":
                setattr(kernel, k, val)
        kernel._PLANS.clear()  # the plans are cached per layout: planned again with the knobs
        try:
            # (a number input as the 0-dim tensor the wrapper keeps for it)
            xs = [inputs[n] if isinstance(inputs[n], torch.Tensor) else
                  torch.tensor(inputs[n], dtype=kernel.IN_DTYPES[j], device="cuda") for j, n in enumerate(adapter.NAMES)]
            plan = kernel._bwd_plan(xs, [None] * len(kernel.OUT_DTYPES), [True] * len(xs))
            launch = plan[-1]
            cfg = "" if launch is None else f"grid {launch[0].grid[0]} {launch[0].constexprs} parts {[s[0] for s in launch[1]]}"
            us, got = timed(lambda d: adapter.train(kernel, d, params))
            diff = max(((a.float() - b.float()).abs().max().item() for a, b in zip(got, want)
                        if a is not None and b is not None), default=0.0)
            rows.append((json.dumps(v) if v else "plan", us, diff, cfg))
        except Exception as e:  # noqa: BLE001 - a variant that fails is a row
            rows.append((json.dumps(v), None, None, f"error: {str(e).splitlines()[0][:100]}"))
    for name, us, diff, cfg in rows:
        if args.json:
            print(json.dumps({"folder": f.name, "shapes": shapes, "variant": name, "us": us, "max_abs_diff": diff, "config": cfg}))
        else:
            t = " ".join(f"{x:8.1f}" for x in us) if us else "       -" * 3
            d = "-" if diff is None else f"{diff:.1e}"
            print(f"{label:44s} {name:48s} {t}  {d:>8s}  {cfg}", flush=True)


if __name__ == "__main__":
    main()
