"""Probe: ConvNeXt's per-channel chain at 14x14 and 7x7, where the generic kernels trail
torch.compile (GPU).

ConvNeXt's layer scale and residual, ``x0 * x1 + x2`` with x1 one value per channel of an NCHW
tensor, ran on the H200 at 0.81x (14x14) and 0.84x (7x7) torch.compile forward and 0.70x /
0.63x backward (docs/benchmarks/h200.md, 2026-12-02, "ConvNeXt's per-channel chains"). The backward's rows of
196 and 49 elements are not 16-byte aligned (every access scalar) and a 7x7 tile masks a
quarter of its lanes; Inductor walks a channel's N*H*W elements as one flat reduction index.

This probe, on each folder given (``fuseadvise gen`` output of such a chain):

- writes Inductor's generated code for the chain's forward and backward to --out (what
  compile's kernels do: their tiles, warps, index math);
- times the forward (CUDA-graph replay, L2 flushed: fa_testing.gpu_time_us): eager, compile,
  the folder's kernel, and the folder's kernel with BLOCK and num_warps rewritten;
- times the backward kernels alone, outputs allocated as each does: the folder's
  fused_backward, and ``flat_bwd`` below, a program per channel walking the channel's N*H*W
  elements as one flat index (the row and column by a division by H*W: a constexpr, or the
  host's magic numbers), with RBLOCK, warps and SPLIT (programs per channel, their partial
  sums added by torch) as knobs; each variant's gradients checked against the folder's.

With --hints, the backward alone, flat_bwd also with the magic divisor and Triton's alignment
hints: H*W a multiple of ALIGN (a power of two up to 16), the walk's bounds and each offset's runs
of ALIGN elements declared so (tl.multiple_of, tl.max_contiguous), so that masked accesses may
be vectorized as with a constexpr divisor.

  python bench/experiments/probe_generic_flat.py FOLDER... [--out DIR] [--hints]
"""
import argparse
import importlib.util
import itertools
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))  # harness

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import harness  # noqa: E402


def load(folder, name, text=None):
    path = folder / f"{name}.py"
    if text is not None:
        path = folder / f"{name}_probe.py"
        path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"{folder.name}_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def magic(d):
    if d == 1:
        return 0, 0
    p = 31 + (d - 1).bit_length()
    return ((1 << p) + d - 1) // d, p - 32


@triton.jit
def flat_bwd(x0, x1, dy, gx0, gx1, gx2, NHW, HW, CHW, MAG, SH, PER,
             RBLOCK: tl.constexpr, SPLIT: tl.constexpr, HWC: tl.constexpr, G2: tl.constexpr, ALIGN: tl.constexpr):
    """x0 * x1 + x2's input gradients, x1 one value per channel: a program per (channel,
    split) walks its share of the channel's N*H*W elements as one flat index k (n = k // HW:
    HWC > 0 a constexpr divisor, else the host's magic numbers)."""
    c = tl.program_id(0)
    s = tl.program_id(1)
    scale = tl.load(x1 + c).to(tl.float32)
    acc = tl.zeros([RBLOCK], tl.float32)
    lo = s * PER
    hi = tl.minimum(lo + PER, NHW)
    if ALIGN > 1:  # H*W a multiple of ALIGN: runs of ALIGN elements contiguous (vector access)
        lo = tl.multiple_of(lo, ALIGN)
        hi = tl.multiple_of(hi, ALIGN)
    k = lo
    while k < hi:  # a while loop: the interpreter cannot range() over a runtime int
        idx = k + tl.arange(0, RBLOCK)
        k += RBLOCK
        m = idx < hi
        if HWC > 0:
            n = idx // HWC
            hw = idx - n * HWC
            off = n * (CHW) + c * HWC + hw
        else:
            n = (tl.umulhi(idx.to(tl.uint32), MAG.to(tl.uint32)) >> SH).to(tl.int32)
            hw = idx - n * HW
            off = n * CHW + c * HW + hw
            if ALIGN > 1:
                off = tl.max_contiguous(tl.multiple_of(off, ALIGN), ALIGN)
        a = tl.load(x0 + off, mask=m, other=0).to(tl.float32)
        d = tl.load(dy + off, mask=m, other=0).to(tl.float32)
        tl.store(gx0 + off, (d * scale).to(gx0.dtype.element_ty), mask=m)
        if G2:
            tl.store(gx2 + off, d.to(gx2.dtype.element_ty), mask=m)
        acc += tl.where(m, d * a, 0.0)
    tl.store(gx1 + c * SPLIT + s, tl.sum(acc, axis=0))


def flat_call(x0, x1, x2, dy, rblock, warps, split, const, hint=False):
    n, c, h, w = x0.shape
    hw = h * w
    per = -(-(n * hw) // split)
    per = -(-per // rblock) * rblock
    mag, sh = magic(hw)
    g2 = x2.dtype != dy.dtype

    def call():
        gx0 = torch.empty_like(x0)
        gx2 = torch.empty_like(x2) if g2 else dy
        part = torch.empty((c, split), dtype=torch.float32, device=x0.device)
        flat_bwd[(c, split)](x0, x1, dy, gx0, part, gx2, n * hw, hw, c * hw, mag, sh, per,
                             RBLOCK=rblock, SPLIT=split, HWC=hw if const else 0, G2=g2, num_warps=warps,
                             ALIGN=math.gcd(hw, 16) if hint else 1)
        gx1 = (part[:, 0] if split == 1 else part.sum(1)).to(x1.dtype).view(x1.shape)
        return gx0, gx1, gx2
    return call


def show(label, name, us, extra=""):
    t = " ".join(f"{x:7.2f}" for x in us)
    print(f"{label:28s} {name:44s} {t}  {extra}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--out", default="", help="write Inductor's code here")
    ap.add_argument("--hints", action="store_true",
                    help="the backward alone, flat_bwd also with the magic divisor and alignment hints (ALIGN)")
    args = ap.parse_args()
    for f in map(pathlib.Path, args.folders):
        sys.path.insert(0, str(f))
        fat = load(f, "fa_testing")
        sys.modules["fa_testing"] = fat
        case, kernel, ref, adapter = (load(f, n) for n in ("case", "kernel", "reference", "adapter"))
        params = case.PARAMS
        inputs = adapter.make_inputs(case.SHAPES, fat.DTYPES[case.DTYPE], params, "cuda", 0)
        xs = [inputs[n] for n in adapter.NAMES]
        label = "x".join(map(str, case.SHAPES[0])) + " " + f.name[-8:]
        names = [n for n in adapter.GRAD_INPUTS if inputs.get(n) is not None]
        timed = lambda fn: fat.gpu_time_us(fat.graph_replay(fn) or fn)  # noqa: E731

        # Inductor's code, forward and backward
        comp = torch.compile(lambda d: adapter.reference(ref, d, params))
        if args.out:
            from torch._inductor.utils import run_and_get_code
            torch._dynamo.reset()
            comp = torch.compile(lambda d: adapter.reference(ref, d, params))
            _, codes = run_and_get_code(harness.TrainingCall(torch, comp, inputs, names, "full"))
            out = pathlib.Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / f"inductor-{f.name}.py").write_text("\n\n# ----- next module -----\n\n".join(codes))

        if not args.hints:  # the forward
            show(label, "fwd eager", timed(lambda: adapter.reference(ref, inputs, params)))
            show(label, "fwd compile", timed(lambda: comp(inputs)))
            want = kernel.fused(*xs)
            show(label, "fwd generated", timed(lambda: kernel.fused(*xs)))
            text = (f / "kernel.py").read_text()
            assert "\nBLOCK = 1024\n" in text and "num_warps=4, num_stages=3, **consts)" in text, "forward text changed"
            for block, warps in itertools.product((512, 1024, 2048, 4096), (2, 4, 8)):
                src = text.replace("\nBLOCK = 1024\n", f"\nBLOCK = {block}\n").replace(
                    "num_warps=4, num_stages=3, **consts)", f"num_warps={warps}, num_stages=3, **consts)")
                mod = load(f, "kernel", src)
                got = mod.fused(*xs)
                same = all(torch.equal(a, b) for a, b in zip(got, want))
                show(label, f"fwd BLOCK {block} warps {warps}", timed(lambda: mod.fused(*xs)), "same" if same else "DIFFERS")

        # backward kernels alone
        for mode in ("backward", "full"):
            for who, fwd in (("eager", lambda d: adapter.reference(ref, d, params)), ("compile", comp),
                             ("fused", lambda d: adapter.train(kernel, d, params))):
                if args.hints and who == "eager":
                    continue
                show(label, f"{mode} {who} (TrainingCall)", timed(harness.TrainingCall(torch, fwd, inputs, names, mode)))
        x0, x1, x2 = xs
        g = torch.Generator(device="cuda").manual_seed(1)
        dy = torch.randn(x0.shape, dtype=torch.float32, device="cuda", generator=g)
        bwant = kernel.fused_backward(xs, [dy])
        show(label, "bwd generated fused_backward", timed(lambda: kernel.fused_backward(xs, [dy])))
        for rblock, warps, split, const, hint in itertools.product((1024, 2048, 4096), (4, 8), (1, 2) if args.hints else (1, 2, 4),
                                                                   (True, False), (False, True) if args.hints else (False,)):
            if rblock // (32 * warps) > 32 or const and hint:
                continue
            call = flat_call(x0, x1, x2, dy, rblock, warps, split, const, hint)
            got = call()
            diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(got, bwant) if a is not None and b is not None)
            show(label, f"bwd flat RBLOCK {rblock} warps {warps} split {split} {'const' if const else 'magic+hint' if hint else 'magic'}",
                 timed(call), f"diff {diff:.1e}")
        sys.path.remove(str(f))


if __name__ == "__main__":
    main()
