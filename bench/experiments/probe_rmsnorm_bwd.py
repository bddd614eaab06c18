"""Probe: which tiles and warps serve rmsnorm_pyops' one-pass backward (GPU).

add_layernorm's backward, of the same structure, ran 1.9x faster at rows of 768 with tiles
of 2048 elements at 4 warps than with 4096 at 8 (probe_add_layernorm_bwd.py, H200,
2026-12-02), and as fast at rows of 4096; rmsnorm took the same rule unmeasured (it had 4096
at 8 warps). This probe times rmsnorm's backward (the
backward of one forward, torch.autograd.grad of y from its saved state, as bench's backward
mode calls it; captured in a CUDA graph, the replay timed by fa_testing.gpu_time_us with the
L2 flushed) for ROW_TILE in (2048, 4096) and warps in (4, 8, 16), beside the template's
current choice and the eager chain, each variant's gradients checked against eager's.

Output: a table (case, variant, median, p20, p80 in us, max abs difference, config).

Usage, from the repository root:
  python bench/experiments/probe_rmsnorm_bwd.py
  TRITON_INTERPRET=1 python bench/experiments/probe_rmsnorm_bwd.py --smoke   (CPU: plumbing only)
"""
import argparse
import importlib.util
import os
import pathlib
import sys
import time

if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "templates" / "_common"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

import fa_testing as fat  # noqa: E402
import harness  # noqa: E402

CASES = [("llama-fp32-2048x1024", [2048, 1024], torch.float32), ("bf16-4096x768", [4096, 768], torch.bfloat16),
         ("bf16-4096x2048", [4096, 2048], torch.bfloat16), ("bf16-8192x4096", [8192, 4096], torch.bfloat16)]
SMOKE_CASES = [("rows-37x70", [37, 70], torch.bfloat16)]


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


KERNEL = load("rmsnorm_kernel", ROOT / "templates" / "rmsnorm_pyops" / "kernel.py")
REF = load("rmsnorm_reference", ROOT / "templates" / "rmsnorm_pyops" / "reference.py")


def backward_call(fused, x, w, dy):
    leaves = [t.detach().clone().requires_grad_(True) for t in (x, w)]
    with harness.on_capture_stream(torch, x.device):
        y = (KERNEL.RMSNormFunction.apply if fused else REF.rms_norm)(*leaves, 1e-6, "llama")
    return lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    device = "cpu" if args.smoke else "cuda"
    print(f"{'case':22s} {'variant':18s} {'median':>9s} {'p20':>9s} {'p80':>9s}  {'maxdiff':>8s}  config")
    saved = KERNEL.ROW_TILE, KERNEL._bwd_warps
    wrong = 0
    for label, shape, dtype in SMOKE_CASES if args.smoke else CASES:
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
                got = call()
                diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(got, want))
                if args.smoke:
                    t0 = time.perf_counter()
                    call()
                    times = [(time.perf_counter() - t0) * 1e6] * 3
                else:
                    times = fat.gpu_time_us(fat.graph_replay(call) or call)
            except Exception as e:  # noqa: BLE001 -- a row, not the end
                print(f"{label:22s} {vlabel:18s} error: {str(e).splitlines()[0][:120]}")
                wrong += 1
                continue
            bad = not diff <= (1e-3 if dtype == torch.float32 else 6e-2) * (1 + max(t.float().abs().max().item() for t in want))
            wrong += bad
            block, _ = KERNEL._plan(shape[-1], KERNEL.MAX_BLOCK_N)
            bm = max(1, KERNEL.ROW_TILE // block)
            cfg = "eager" if vlabel == "eager" else f"BLOCK_M={bm} BLOCK_N={block} warps={KERNEL._bwd_warps(bm * block)}"
            print(f"{label:22s} {vlabel:18s}" + "".join(f" {v:9.1f}" for v in times) + f"  {diff:8.1e}{' WRONG' if bad else ''}  {cfg}",
                  flush=True)
    KERNEL.ROW_TILE, KERNEL._bwd_warps = saved
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
