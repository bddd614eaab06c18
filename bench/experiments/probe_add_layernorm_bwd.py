"""Probe: which tiles, warps and program counts serve add_layernorm's one-pass backward (GPU).

On the H200 (``fuseadvise bench -modes all``) the one-pass backward (_add_layernorm_bwd, then
the weight's and bias' partial sums added up) ran bf16 4096x768 in 60.6 us against eager's
42.4 and torch.compile's 33.1, 4096x2048 in about the same time for 2.7x the bytes, and
8192x4096 at 1.5x torch.compile where rmsnorm_pyops' backward of the same structure matched
it. Compiled for sm_90 without a GPU (Triton's ptxas), the kernel then held 149 registers a
thread at rows of 4096 (one program of 8 warps an SM), made four calls of a 64-bit division
per row tile on its loads' address path, and was followed by a sum and two casts; an NCHW
gradient's tile (ConvNeXt's LayerNorm2d) took 255 registers. The template now finds a tile's
batch once, in 32 bits, and sums the partial sums in one small kernel (118 registers at rows
of 4096: two programs an SM). What is left to choose is what this probe measures.

For each case, the backward of one forward (torch.autograd.grad of s and y from its saved
state, retain_graph, as bench's "backward" mode calls it) is captured in a CUDA graph and the
replay timed by fa_testing.gpu_time_us, the harness's method: the L2 flushed before each
replay (a 256 MB buffer written, then another read, so no dirty line's write-back lands in
the timed call), CUDA events around the replay, median and p20/p80. Variants, each set on the
template module before its backward is captured (its forward is shared):

  current         the template's choice (BWD_TILE, _bwd_warps, BWD_GROUPS)
  tile=T [warps=W]  tiles of about T elements (BWD_TILE: half, once and twice the current),
                  with their default warps and with 4, 8 and 16
  groups=G        about G programs (BWD_GROUPS: one, two and four per SM, and 1024)
  aten            ATen's native_layer_norm_backward, the sum's gradient added, cast (the
                  path rows longer than a block take)
  eager           the reference chain's backward (x + r, layer_norm), for scale
  compile         torch.compile of the reference chain (with --compile)

Each variant's gradients are checked against the eager chain's (max abs difference in the
table). Two more rows per case time the partial sums' reduction alone, L2-warm (it reads what
the kernel just wrote): _sum_parts against ``part.sum(0)`` and two casts.

Output: a table on stdout (case, variant, median, p20, p80 in us, the variant's config, the
gradients' max difference); with --json one JSON object per row instead.

Usage, from the repository root:
  python bench/experiments/probe_add_layernorm_bwd.py [--only SUBSTRING] [--compile] [--json]
  TRITON_INTERPRET=1 python bench/experiments/probe_add_layernorm_bwd.py --smoke
--smoke runs every variant at a tiny shape of each case on the CPU under the Triton
interpreter (gradients checked, timing by the wall clock): exit status 1 when any is wrong.
"""

import sys

import probekit as kit  # first: --smoke's TRITON_INTERPRET before triton is imported

import torch  # noqa: E402

import harness  # noqa: E402

# (label, x's shape, dtype, dim): the measured cases; dim=1 is LayerNorm2d over the channels,
# x channels_last and the gradients contiguous NCHW (what bench's random gradients are)
CASES = [
    ("bert-4096x768", [4096, 768], torch.bfloat16, -1),
    ("4096x2048", [4096, 2048], torch.bfloat16, -1),
    ("convnext-32x96x56x56", [32, 96, 56, 56], torch.float32, 1),
    ("8192x4096", [8192, 4096], torch.bfloat16, -1),
]
SMOKE_CASES = [
    ("rows-37x70", [37, 70], torch.bfloat16, -1),
    ("nchw-2x40x4x4", [2, 40, 4, 4], torch.float32, 1),
]


KERNEL = kit.load_template("add_layernorm", "kernel")
REF = kit.load_template("add_layernorm", "reference")
KNOBS = ("BWD_TILE", "BWD_GROUPS", "MAX_BLOCK_N", "_bwd_warps")


class Knobs:
    """Sets the template module's backward knobs for a with-block, restoring them after."""

    def __init__(self, **values):
        self.values = values

    def __enter__(self):
        self.saved = {k: getattr(KERNEL, k) for k in KNOBS}
        for k, v in self.values.items():
            setattr(KERNEL, k, v)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            setattr(KERNEL, k, v)


def variants(smoke, sms):
    """(label, knob values, provider): provider "fused" (the template with those knobs),
    "eager" or "compile"."""
    tile, groups = KERNEL.BWD_TILE, KERNEL.BWD_GROUPS
    out = [("current", {}, "fused")]
    for t in (tile // 2, tile, tile * 2):  # each tile with its default warps and with W warps
        for w in (None,) + ((4, 8, 16) if not smoke else (1, 2)):
            if t == tile and w is None:
                continue
            knobs = {"BWD_TILE": t}
            if w:
                knobs["_bwd_warps"] = lambda n, batched=False, w=w: w
            out.append((f"tile={t}" + (f" warps={w}" if w else ""), knobs, "fused"))
    for g in sorted({sms, 2 * sms, 4 * sms, 2 * groups} - {groups}):
        out.append((f"groups={g}", {"BWD_GROUPS": g}, "fused"))
    # rows longer than MAX_BLOCK_N take ATen's backward (set after the forward ran)
    out.append(("aten", {"MAX_BLOCK_N": 1}, "fused"))
    out.append(("eager", {}, "eager"))
    return out


def plan(shape, dim):
    """What the template's backward chooses under the current knobs, computed as
    _fused_backward does without launching: (BLOCK_M, BLOCK_N, warps, programs), or None where
    it takes ATen's path."""
    n = shape[1] if dim == 1 else shape[-1]
    m = 1
    for d in shape:
        m *= d
    m //= n
    block, _ = KERNEL._plan(n, KERNEL.MAX_BLOCK_N)
    if n > block:
        return None
    batched = dim == 1 and shape[0] > 1  # NCHW gradients: batches of H * W rows
    bm = max(1, KERNEL.BWD_TILE * (2 if batched else 1) // block)
    if batched:
        bm = KERNEL._tile_rows_for(bm, ((m // shape[0], True),))
    rows = max(KERNEL.BWD_MIN_ROWS, -(-m // KERNEL.BWD_GROUPS))
    rows = -(-rows // bm) * bm
    return bm, block, KERNEL._bwd_warps(bm * block, batched), -(-m // rows)


def config(shape, dim):
    p = plan(shape, dim)
    return "ATen" if p is None else "BLOCK_M={} BLOCK_N={} warps={} programs={}".format(*p)


def make_case(shape, dtype, dim, device, seed=0):
    """x, residual (channels_last for dim=1), weight, bias and the gradients of s and y
    (contiguous: NCHW for dim=1)."""
    g = torch.Generator().manual_seed(seed)
    n = shape[1] if dim == 1 else shape[-1]

    def rnd(s, mean=0.0):
        return (torch.randn(s, generator=g) + mean).to(device, dtype)

    x, r = rnd(shape), rnd(shape)
    if dim == 1:
        x, r = (t.contiguous(memory_format=torch.channels_last) for t in (x, r))
    return x, r, rnd([n], 1.0), rnd([n]), rnd(shape), rnd(shape)


def backward_call(provider, case, dim):
    """A zero-argument call of the backward of one forward of the provider on case: the
    leaves' gradients. The forward runs on the CUDA-graph capture stream, as bench's
    TrainingCall runs it (autograd runs each backward op on its forward op's stream: else the
    backward's kernels would fall outside the capture)."""
    x, r, w, b, ds, dy = case
    leaves = [t.detach().clone().requires_grad_(True) for t in (x, r, w, b)]
    fwd = {"fused": KERNEL.add_layer_norm_train, "eager": REF.add_layer_norm}.get(provider)
    with harness.on_capture_stream(torch, x.device):
        outs = (fwd or torch.compile(REF.add_layer_norm))(*leaves, 1e-5, dim=dim)
    return lambda: torch.autograd.grad(outs, leaves, (ds, dy), retain_graph=True)


def parts_rows(case, dim, timer):
    """The partial sums' reduction alone, L2-warm: _sum_parts against part.sum(0) + casts, on
    the [groups, 2, N] fp32 partial sums the current choice writes: rows of (variant, times,
    config, max difference, wrong)."""
    x, _, w, b, _, _ = case
    n = x.shape[1] if dim == 1 else x.shape[-1]
    groups = plan(list(x.shape), dim)[3]
    part = torch.randn(groups, 2, n, device=x.device)
    dw, db = torch.empty_like(w), torch.empty_like(b)

    def triton_sum():
        KERNEL._part_sums(part, [dw, db])

    def aten_sum():
        sums = part.sum(0)
        return sums[0].to(w.dtype), sums[1].to(b.dtype)

    triton_sum()
    want = aten_sum()
    # the two add in different orders: an ulp of the gradients' type apart at most
    ulp = torch.finfo(w.dtype).eps * (1 + max(t.float().abs().max().item() for t in want))
    bad = not kit.max_diff((dw, db), want) <= ulp
    cfg = f"groups={groups} N={n}, L2-warm"
    return [("parts:_sum_parts", timer(triton_sum, flush=False), cfg, kit.max_diff((dw, db), want), bad),
            ("parts:sum+casts", timer(aten_sum, flush=False), cfg, 0.0, False)]


def run_case(label, shape, dtype, dim, args, table):
    """Every variant of one case; returns the number of wrong results."""
    device = "cpu" if args.smoke else "cuda"
    timer = kit.wall_timer if args.smoke else kit.gpu_timer
    sms = 4 if args.smoke else torch.cuda.get_device_properties(0).multi_processor_count
    case = make_case(shape, dtype, dim, device)
    want = backward_call("eager", case, dim)()
    atol = 1e-3 if dtype == torch.float32 else 6e-2
    wrong = 0
    todo = variants(args.smoke, sms) + ([("compile", {}, "compile")] if args.compile and not args.smoke else [])
    for vlabel, knobs, provider in todo:
        try:
            with Knobs(**{k: v for k, v in knobs.items() if k != "MAX_BLOCK_N"}):
                call = backward_call(provider, case, dim)
                cfg = config(shape, dim) if provider == "fused" else provider
                if "MAX_BLOCK_N" in knobs:  # after the forward: only the backward takes ATen's path
                    KERNEL.MAX_BLOCK_N = knobs["MAX_BLOCK_N"]
                    cfg = "ATen native_layer_norm_backward"
                diff = kit.max_diff(call(), want)
                times = timer(call)
        except Exception as e:  # noqa: BLE001 -- one variant's failure is a row, not the end
            table.error(label, vlabel, e)
            wrong += 1
            continue
        bad = kit.wrong(diff, want, atol)
        wrong += bad
        table.row(label, vlabel, times, cfg, diff, bad)
    for vlabel, times, cfg, diff, bad in parts_rows(case, dim, timer):
        table.row(label, vlabel, times, cfg, diff, bad)
        wrong += bad
    return wrong


def main():
    args = kit.arguments(__doc__)
    if not args.smoke and not torch.cuda.is_available():
        print("probe_add_layernorm_bwd: no CUDA device (--smoke runs on the CPU)", file=sys.stderr)
        return 2
    table = kit.Table(args.json)
    table.header()
    wrong = 0
    for label, shape, dtype, dim in SMOKE_CASES if args.smoke else CASES:
        if args.only in label:
            wrong += run_case(label, shape, dtype, dim, args, table)
    if wrong:
        print(f"probe_add_layernorm_bwd: {wrong} variant(s) wrong or failed", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
