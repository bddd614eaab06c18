"""Probe: which mask_softmax kernel layout serves short rows (sk = 129..1024) on the GPU?

On the H200 the one-row-per-program kernel ran 8x12x129x129 fp16 at 9.7 us against a 2.2 us
copy of its bytes, and 16x12x256x256 bf16 at 2.5x its copy; a [ROWS, BLOCK_N] tile per
program (ROWS rows, int64 index math) measured slower still at sk >= 512 (191 vs 151 us at
8x16x1024x1024). Variants, each a kernel.py given on the command line (label=path):

  A  one row per program, int64 row index math (the template before the change)
  B  ROWS rows per program, tiles of 2K-16K elements, int64 index math
  C  ROWS rows per program including ROWS = 1 (tiles of 256-16K elements), int32 index math

Each case is checked against torch (softmax of the masked, scaled scores) on the GPU and
timed as the harness times it: the call captured in a CUDA graph, the replay timed by
``triton.testing.do_bench`` (L2 flushed before each replay), median and p20/p80. An SM copy
of the same bytes (``dst = src * 1`` over fp32) is timed the same way as the ceiling.

Output: one JSON object per line (case, variant, median_us, p20_us, p80_us, copy_us,
max_abs_err, config) on stdout, a table on stderr.

Usage: python probe_softmax.py A=old/kernel.py B=... C=templates/mask_softmax/kernel.py
(needs templates/_common on the path for fa_testing: run from the repository root).
"""

import importlib.util
import json
import sys

import torch

sys.path.insert(0, "templates/_common")
import fa_testing as fat  # noqa: E402

CASES = [  # (label, shape, dtype, mask kind, mask shape)
    ("bool-8x12x129x129", [8, 12, 129, 129], torch.float16, "bool", [8, 1, 129, 129]),
    ("add-8x12x129x129", [8, 12, 129, 129], torch.float16, "additive", [8, 1, 129, 129]),
    ("causal-2x16x256x256", [2, 16, 256, 256], torch.float16, "causal", None),
    ("add-16x12x256x256", [16, 12, 256, 256], torch.bfloat16, "additive", [16, 1, 256, 256]),
    ("bool-1x32x512x512", [1, 32, 512, 512], torch.bfloat16, "bool", [1, 1, 512, 512]),
    ("causal-8x12x512x512", [8, 12, 512, 512], torch.bfloat16, "causal", None),
    ("bool-8x16x1024x1024", [8, 16, 1024, 1024], torch.bfloat16, "bool", [8, 1, 1024, 1024]),
    ("add-4x32x2048x2048", [4, 32, 2048, 2048], torch.float16, "additive", [4, 1, 2048, 2048]),
]


def load(label, path):
    spec = importlib.util.spec_from_file_location(f"probe_{label}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def inputs(shape, dtype, kind, mshape):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(shape, generator=g) * 3).to("cuda", dtype)
    mask = None
    if kind == "bool":
        mask = (torch.rand(mshape, generator=g) < 0.3).cuda()
    elif kind == "additive":
        mask = torch.randn(mshape, generator=g).masked_fill(torch.rand(mshape, generator=g) < 0.3, -1e4)
        mask = mask.to("cuda", dtype)
    return x, mask


def reference(x, mask, kind, scale):
    s = x * scale
    if kind == "bool":
        s = s.masked_fill(mask, float("-inf"))
    elif kind == "additive":
        s = s + mask
    elif kind == "causal":
        sq, sk = x.shape[-2], x.shape[-1]
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device=x.device).triu(sk - sq + 1), float("-inf"))
    return torch.softmax(s.float(), -1)


def timed(fn):
    from triton.testing import do_bench
    replay = fat.graph_replay(fn)
    med, p20, p80 = do_bench(replay, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
    return med * 1e3, p20 * 1e3, p80 * 1e3


def main():
    variants = [a.split("=", 1) for a in sys.argv[1:]]
    mods = [(label, load(label, path)) for label, path in variants]
    print(f"{'case':24s} {'variant':8s} {'median':>8s} {'p20':>8s} {'p80':>8s} {'copy':>7s}  config",
          file=sys.stderr)
    for name, shape, dtype, kind, mshape in CASES:
        x, mask = inputs(shape, dtype, kind, mshape)
        want = reference(x, mask, kind, 0.125)
        nbytes = 2 * x.numel() * x.element_size() + (0 if mask is None else mask.numel() * mask.element_size())
        src = torch.empty(nbytes // 8, dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        copy = timed(lambda: torch.mul(src, 1, out=dst))[0]
        for label, k in mods:
            out = torch.empty(x.shape, dtype=x.dtype, device="cuda")

            def fn(k=k, out=out):
                k.mask_softmax(x, mask, 0.125, kind, float("-inf"), out=out)

            fn()
            torch.cuda.synchronize()
            err = (out.float() - want).abs().nan_to_num(0.0).max().item()
            med, p20, p80 = timed(fn)
            cfg = ""
            for kname in ("_mask_softmax_rows", "_mask_softmax_fwd"):
                kk = getattr(k, kname, None)
                if kk is not None and getattr(kk, "best_config", None) is not None:
                    cfg = str(kk.best_config)
            print(json.dumps({"case": name, "variant": label, "median_us": med, "p20_us": p20, "p80_us": p80,
                              "copy_us": copy, "max_abs_err": err, "config": cfg}), flush=True)
            print(f"{name:24s} {label:8s} {med:8.1f} {p20:8.1f} {p80:8.1f} {copy:7.1f}  {cfg[:60]} err={err:.1e}",
                  file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
