"""Probe: what a generic chain's pointwise forward loses to its index math (GPU).

The generated forward (codegen/generic.go: _fused_kernel) walks the main shape by flat index
and, for every element, turns it into one index per dim with a div and a mod by the runtime
sizes, then each input's offset from its strides. Inductor bakes the sizes into the kernel (a
division by a constant: a multiply and a shift). At ConvNeXt's 32x384x14x14 layer scale the
forward ran at 1.9x its floor (8.5 against 4.5 µs; compile 4.0, docs/benchmarks/h200.md,
2026-12-02). This probe times the folder's forward (CUDA-graph replay, L2
flushed: fa_testing.gpu_time_us) as generated and with its kernel text rewritten:

- "dense": inputs of the main shape read at the flat offset (no index math for them);
- "dense+const": also the broadcast inputs' indices from sizes written into the text as
  constants (what shape specialization or a host-computed magic divisor would give);
- "dense+magic": the broadcast inputs' indices by multiply-high and shift with the magic
  numbers computed on the host (CUTLASS's FastDivmod), the sizes left runtime.

Each variant's outputs are checked against the generated kernel's (exactly equal). The rewrites
read the index math of kernels generated before the change they led to (2026-12-02:
magic division, dense inputs at the flat offset); on a kernel generated since, the
"dense+const" and "dense+magic" rewrites stop at their assert. Its one run (on the kernels of
that time) used the uncoalesced sizes for the constants, so its "dense+const" and
"dense+magic" outputs differed and only their times are of use: an estimate of what the
index math costs, which bench then measured on the generated kernel.

  python bench/experiments/probe_generic_fwd.py FOLDER...
"""
import importlib.util
import pathlib
import re
import sys

import torch


def load(folder, name):
    spec = importlib.util.spec_from_file_location(f"{folder.name}_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def magic(d):
    """(multiplier, shift) with q = umulhi(n, multiplier) >> shift == n // d for 0 <= n < 2**31."""
    if d == 1:
        return 0, 0
    l = (d - 1).bit_length()  # ceil(log2 d)
    p = 31 + l
    return ((1 << p) + d - 1) // d, p - 32


def rewrite(src, kind, dims, dense):
    """The forward kernel's text with dense inputs read at offs and, for kind "const" or "magic",
    the per-dim indices from the sizes dims (outer to inner) as constants or magic numbers."""
    for i in dense:
        src = re.sub(rf"tl\.load\(in{i} \+ \(i0 \* s{i}_0[^)]*\)", f"tl.load(in{i} + offs", src, count=1)
    if kind == "plain":
        return src
    rank = len(dims)
    old = "    r = offs\n" + "".join(f"    i{d} = r % D{d}\n    r = r // D{d}\n" for d in range(rank - 1, 0, -1)) + "    i0 = r\n"
    assert old in src, "the index math's text changed"
    new = "    r = offs\n"
    for d in range(rank - 1, 0, -1):
        if kind == "const":
            new += f"    q = r // {dims[d]}\n"
        else:
            m, s = magic(dims[d])
            new += (f"    q = (tl.umulhi(r.to(tl.uint32), tl.full(r.shape, {m}, tl.uint32)) >> {s}).to(tl.int32)\n"
                    if m else "    q = r\n")
        new += f"    i{d} = r - q * {dims[d]}\n    r = q\n"
    new += "    i0 = r\n"
    return src.replace(old, new)


def main():
    for f in map(pathlib.Path, sys.argv[1:]):
        sys.path.insert(0, str(f))
        fat = load(f, "fa_testing")
        sys.modules["fa_testing"] = fat
        case, adapter, kernel = (load(f, n) for n in ("case", "adapter", "kernel"))
        inputs = adapter.make_inputs(case.SHAPES, fat.DTYPES[case.DTYPE], case.PARAMS, "cuda", 0)
        xs = [inputs[n] for n in adapter.NAMES]
        dims = kernel._main_shape(xs)
        dense = [i for i, x in enumerate(xs) if list(x.shape) == list(dims) and x.is_contiguous()]
        text = (f / "kernel.py").read_text()
        want = None
        for kind in ("generated", "plain", "const", "magic"):
            if kind == "generated":
                mod = kernel
            else:
                (f / "kernel_probe.py").write_text(rewrite(text, kind, dims, dense))
                mod = load(f, "kernel_probe")
            call = lambda: mod.fused(*xs)  # noqa: E731
            got = call()
            if want is None:
                want = got
            same = all(torch.equal(a, b) for a, b in zip(got, want))
            us = fat.gpu_time_us(fat.graph_replay(call) or call)
            name = {"generated": "generated", "plain": "dense", "const": "dense+const", "magic": "dense+magic"}[kind]
            print(f"{f.name[:44]:44s} {name:12s} {us[0]:7.1f} {us[1]:7.1f} {us[2]:7.1f}  {'same' if same else 'DIFFERS'}"
                  f"  dims {dims} dense {dense}", flush=True)
        sys.path.remove(str(f))


if __name__ == "__main__":
    main()
