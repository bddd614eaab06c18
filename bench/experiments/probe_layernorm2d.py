"""Probe: which tiles serve add_layernorm's channels-first forward on NCHW inputs (GPU).

ConvNeXt's LayerNorm2d after a residual add, x and the residual contiguous NCHW, measured on
the H200 on 2026-12-02 (docs/benchmarks/h200-traces-2026-12-02.json): fp32 32x96x56x56 took
66.2 us fused (both inputs copied channels-last, then the row kernel) against torch.compile's
38.1 and eager's 182.6, its memory floor ~36 us. The template now reads them in place
(_add_layernorm_cf_fwd): a program takes BLOCK_P positions of one batch and every channel, a
[BLOCK_C, BLOCK_P] tile loaded along the positions, with the tile and warps from _cf_plan
(about 4096 elements, at least 32 bytes of positions per channel, 32 elements per thread).
That choice was made without a GPU; this probe measures it against the alternatives. The
bench's traced ConvNeXt cases are channels_last (adapter.make_inputs): rows of at most
CF_SHORT_N contiguous channels take the tile kernel too (the row kernel ran them one warp a
row: the 66.2 us above had no copy, its peak memory was the outputs alone); the "-cl" cases
measure that against the row kernel.

Each variant's forward (add_layer_norm(x, r, w, b, dim=1)) is captured in a CUDA graph and
the replay timed by fa_testing.gpu_time_us (the harness's method: the L2 flushed before each
replay, CUDA events around it, median and p20/p80). Variants:

  current            the template's _cf_plan
  p=P w=W            BLOCK_P = P positions a program (8-256, tiles up to 16384 elements) with
                     W warps (2, 4, 8, 16)
  copy / rows        the former path: NCHW inputs copied channels-last, then the row kernel
                     (channels_last inputs: the row kernel, no copy)
  eager              the reference chain (x + r, permute, layer_norm, permute back)
  compile            torch.compile of the reference chain (with --compile)

Each variant's s and y are checked against eager's (max abs difference in the table); the
table also gives the achieved bandwidth (x and r read, s and y written).

Output: a table on stdout (case, variant, median, p20, p80 in us, GB/s, max difference,
config); with --json one JSON object per row instead. Exit status 1 when a variant is wrong.

Usage, from the repository root, on a GPU machine (--only -cl: the channels_last cases):
  python bench/experiments/probe_layernorm2d.py [--only SUBSTRING] [--compile] [--json] [--quick]
  python bench/experiments/probe_layernorm2d.py --smoke
--quick sweeps BLOCK_P only at the plan's warps and warps only at the plan's BLOCK_P.
--smoke runs every variant at a tiny shape of each case on the CPU under the Triton
interpreter (outputs checked, timing by the wall clock, not a measurement).
"""

import sys

import probekit as kit  # first: --smoke's TRITON_INTERPRET before triton is imported

import torch  # noqa: E402

# (label, NCHW shape, dtype, channels_last inputs): ConvNeXt-T's LayerNorm2d sizes (stem 96 at
# 56x56, then the downsample norms), a batch of one (inference), 16-bit; NCHW inputs, and the
# bench's traced cases' channels_last ("-cl")
CASES = [
    ("convnext-32x96x56x56", [32, 96, 56, 56], torch.float32, False),
    ("32x192x28x28-bf16", [32, 192, 28, 28], torch.bfloat16, False),
    ("32x384x14x14", [32, 384, 14, 14], torch.float32, False),
    ("32x768x7x7", [32, 768, 7, 7], torch.float32, False),
    ("1x96x56x56", [1, 96, 56, 56], torch.float32, False),
    ("32x96x56x56-bf16", [32, 96, 56, 56], torch.bfloat16, False),
    ("32x96x56x56-cl", [32, 96, 56, 56], torch.float32, True),
    ("32x192x28x28-cl", [32, 192, 28, 28], torch.float32, True),
    ("32x384x14x14-cl", [32, 384, 14, 14], torch.float32, True),
    ("32x768x7x7-cl", [32, 768, 7, 7], torch.float32, True),
]
SMOKE_CASES = [
    ("nchw-2x96x7x7", [2, 96, 7, 7], torch.float32, False),
    ("nchw-2x24x5x3-bf16", [2, 24, 5, 3], torch.bfloat16, False),
    ("cl-2x40x5x3", [2, 40, 5, 3], torch.float32, True),
]


KERNEL = kit.load_template("add_layernorm", "kernel")
REF = kit.load_template("add_layernorm", "reference")


class Plan:
    """Sets the template's channels-first plan for a with-block (a fixed (BLOCK_C, BLOCK_P,
    warps), or None: the copy and the row kernel), restoring _cf_plan after."""

    def __init__(self, fixed=...):
        self.fixed = fixed

    def __enter__(self):
        self.saved = KERNEL._cf_plan
        if self.fixed is not ...:
            KERNEL._cf_plan = lambda n, p, size: self.fixed

    def __exit__(self, *exc):
        KERNEL._cf_plan = self.saved


def variants(shape, dtype, cl, quick, smoke):
    """(label, plan for Plan, provider): provider "fused", "eager" or "compile"."""
    c, p = shape[1], 1
    for d in shape[2:]:
        p *= d
    block_c, block_p, warps = KERNEL._cf_plan(c, p, dtype.itemsize)
    if cl and c > KERNEL.CF_SHORT_N:  # the row kernel's now: the tile kernel only as a variant
        block_p, warps = None, None
    out = [("current", ..., "fused")]
    ps = (2, 4) if smoke else (8, 16, 32, 64, 128, 256)
    ws = (1, 2) if smoke else (2, 4, 8, 16)
    for bp in ps:
        if block_c * bp > (1024 if smoke else 16384):
            continue
        for w in ws:
            if (bp, w) == (block_p, warps) or (quick and bp != block_p and w != warps):
                continue
            out.append((f"p={bp} w={w}", (block_c, bp, w), "fused"))
    out.append(("rows" if cl else "copy", None, "fused"))
    out.append(("eager", ..., "eager"))
    return out


def make_case(shape, dtype, cl, device, seed=0):
    g = torch.Generator().manual_seed(seed)

    def rnd(s, mean=0.0):
        return (torch.randn(s, generator=g) + mean).to(device, dtype)

    x, r = rnd(shape, -2.3), rnd(shape)
    if cl:  # C laid out last, as the bench's adapter makes the traced cases' inputs
        x, r = (t.movedim(1, -1).contiguous().movedim(-1, 1) for t in (x, r))
    return x, r, rnd(shape[1:2], 1.0), rnd(shape[1:2])


def forward_call(provider, case):
    x, r, w, b = case
    if provider == "fused":
        return lambda: KERNEL.add_layer_norm(x, r, w, b, 1e-6, dim=1)
    fn = REF.add_layer_norm if provider == "eager" else torch.compile(REF.add_layer_norm)
    return lambda: fn(x, r, w, b, 1e-6, dim=1)


def run_case(label, shape, dtype, cl, args, table):
    """Every variant of one case; returns the number of wrong results."""
    device = "cpu" if args.smoke else "cuda"
    timer = kit.wall_timer if args.smoke else kit.gpu_timer
    case = make_case(shape, dtype, cl, device)
    want = forward_call("eager", case)()
    nbytes = 4 * case[0].numel() * dtype.itemsize  # x and r read, s and y written
    atol = 1e-4 if dtype == torch.float32 else 3e-2
    wrong = 0
    todo = variants(shape, dtype, cl, args.quick, args.smoke)
    if args.compile and not args.smoke:
        todo.append(("compile", ..., "compile"))
    for vlabel, plan, provider in todo:
        try:
            with Plan(plan):
                call = forward_call(provider, case)
                got = call()
                if provider == "fused":
                    p = 1
                    for d in shape[2:]:
                        p *= d
                    used = KERNEL._cf_plan(shape[1], p, dtype.itemsize)
                    if cl and plan is ... and shape[1] > KERNEL.CF_SHORT_N:
                        used = None
                    rows = "row kernel" if cl else "copy + row kernel"
                    cfg = rows if used is None else "BLOCK_C={} BLOCK_P={} warps={}".format(*used)
                else:
                    cfg = provider
                times = timer(call)
        except Exception as e:  # noqa: BLE001 -- one variant's failure is a row, not the end
            table.error(label, vlabel, e)
            wrong += 1
            continue
        diff = kit.max_diff(got, want)
        bad = kit.wrong(diff, want, atol)
        wrong += bad
        table.row(label, vlabel, times, cfg, diff, bad, gbs=nbytes / (times[0] * 1e3))
    return wrong


def main():
    args = kit.arguments(__doc__, quick=True)
    if not args.smoke and not torch.cuda.is_available():
        print("probe_layernorm2d: no CUDA device (--smoke runs on the CPU)", file=sys.stderr)
        return 2
    table = kit.Table(args.json, variant_width=10, bandwidth=True)
    table.header()
    wrong = 0
    for label, shape, dtype, cl in SMOKE_CASES if args.smoke else CASES:
        if args.only in label:
            wrong += run_case(label, shape, dtype, cl, args, table)
    if wrong:
        print(f"probe_layernorm2d: {wrong} variant(s) wrong or failed", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
