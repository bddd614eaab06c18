"""Probe: which tiles and warps serve rmsnorm_pyops' one-pass backward (GPU).

add_layernorm's backward, of the same structure, ran 1.9x faster at rows of 768 with tiles
of 2048 elements at 4 warps than with 4096 at 8 (probe_add_layernorm_bwd.py, H200,
2026-12-02), and as fast at rows of 4096; rmsnorm took the same rule unmeasured (it had 4096
at 8 warps). This probe times rmsnorm's backward (the
backward of one forward, torch.autograd.grad of y from its saved state, as bench's backward
mode calls it; captured in a CUDA graph, the replay timed by fa_testing.gpu_time_us with the
L2 flushed) for ROW_TILE in (2048, 4096) and warps in (4, 8, 16), beside the template's
current choice and the eager chain, each variant's gradients checked against eager's.

Output: a table (case, variant, median, p20, p80 in us, max abs difference, config); with
--json one JSON object per row instead.

Usage, from the repository root:
  python bench/experiments/probe_rmsnorm_bwd.py [--only SUBSTRING] [--json]
  python bench/experiments/probe_rmsnorm_bwd.py --smoke   (CPU: plumbing only)
"""
import sys

import probekit as kit  # first: --smoke's TRITON_INTERPRET before triton is imported

import torch  # noqa: E402

import harness  # noqa: E402

CASES = [("llama-fp32-2048x1024", [2048, 1024], torch.float32), ("bf16-4096x768", [4096, 768], torch.bfloat16),
         ("bf16-4096x2048", [4096, 2048], torch.bfloat16), ("bf16-8192x4096", [8192, 4096], torch.bfloat16)]
SMOKE_CASES = [("rows-37x70", [37, 70], torch.bfloat16)]


KERNEL = kit.load_template("rmsnorm_pyops", "kernel")
REF = kit.load_template("rmsnorm_pyops", "reference")


def backward_call(fused, x, w, dy):
    leaves = [t.detach().clone().requires_grad_(True) for t in (x, w)]
    with harness.on_capture_stream(torch, x.device):
        y = (KERNEL.RMSNormFunction.apply if fused else REF.rms_norm)(*leaves, 1e-6, "llama")
    return lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True)


def main():
    args = kit.arguments(__doc__, compile_=False)
    device = "cpu" if args.smoke else "cuda"
    timer = kit.wall_timer if args.smoke else kit.gpu_timer
    table = kit.Table(args.json)
    table.header()
    saved = KERNEL.ROW_TILE, KERNEL._bwd_warps
    wrong = 0
    for label, shape, dtype in SMOKE_CASES if args.smoke else CASES:
        if args.only not in label:
            continue
        g = torch.Generator().manual_seed(0)
        x, w, dy = (torch.randn(s, generator=g).to(device, dtype) for s in (shape, shape[-1:], shape))
        want = backward_call(False, x, w, dy)()
        variants = [("current", None, None)] + [(f"tile={t} warps={n}", t, n) for t in (2048, 4096) for n in (4, 8, 16)]
        variants.append(("eager", None, None))
        for vlabel, tile, warps in variants:
            KERNEL.ROW_TILE, KERNEL._bwd_warps = saved
            if tile:
                KERNEL.ROW_TILE = tile if not args.smoke else 256
                KERNEL._bwd_warps = lambda n, w=warps: w
            try:
                call = backward_call(vlabel != "eager", x, w, dy)
                diff = kit.max_diff(call(), want)
                times = timer(call)
            except Exception as e:  # noqa: BLE001 -- a row, not the end
                table.error(label, vlabel, e)
                wrong += 1
                continue
            bad = kit.wrong(diff, want, 1e-3 if dtype == torch.float32 else 6e-2)
            wrong += bad
            block, _ = KERNEL._plan(shape[-1], KERNEL.MAX_BLOCK_N)
            bm = max(1, KERNEL.ROW_TILE // block)
            cfg = "eager" if vlabel == "eager" else f"BLOCK_M={bm} BLOCK_N={block} warps={KERNEL._bwd_warps(bm * block)}"
            table.row(label, vlabel, times, cfg, diff, bad)
    KERNEL.ROW_TILE, KERNEL._bwd_warps = saved
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
