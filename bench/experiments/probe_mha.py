"""Probe: nn.MultiheadAttention against the drop-in MultiheadAttention (templates/_mha) in a
training step (GPU; prints JSON lines).

nn.MultiheadAttention's self-attention splits its packed q/k/v projection with a copy in the
forward and, in the backward, three zero-filled select gradients, their sum and a copy back;
with batch_first its projection's GEMM copies the transposed input and adds the bias apart
(docs/patterns.md, "nn.MultiheadAttention"). The drop-in views q, k and v in the projection
and stacks their gradients once.

The model is the shared trace torchnn_encoder_train_bf16's: nn.TransformerEncoder of 4
nn.TransformerEncoderLayer(1024, 16 heads, 4096, dropout 0.1, batch_first=True), a batch of
8 x 512 under autocast bf16, torch.optim.AdamW(fused=True). Variants, from the same weights:

  eager            nn.MultiheadAttention
  dropin           swap_multihead_attention(model)
  compile          torch.compile(model)                                  (--compile)
  compile+dropin   torch.compile of the swapped model                    (--compile)

For each: wall_ms a step (20 steps back to back, one synchronize; the variants take turns, 5
rounds each, the median round; wall_ms_rounds all five), gpu_ms and kernels of one step
(torch.profiler), copy_ms and copies (the step's copy and fill kernels: elementwise copies,
zero fills, cat/stack), and the losses of 6 steps (the RNG seeded before each), with
max_loss_diff against eager. Then the attention module alone (one layer's self_attn on the
batch, forward and backward, need_weights=False): its kernels, their GPU time and names.

With --model decoder: nn.TransformerDecoder of 4 nn.TransformerDecoderLayer of the same sizes,
a causal target of 8 x 512 attending to a memory of 8 x 512 (a parameter): each layer's
self-attention and its attention to the memory (key is value).

Usage, from the repository root:
  python bench/experiments/probe_mha.py [--compile] [--json] [--model encoder|decoder]
  python bench/experiments/probe_mha.py --smoke      (CPU, a tiny model, nothing timed)
"""

import argparse
import collections
import copy
import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "templates" / "_mha"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from multihead_attention import swap_multihead_attention  # noqa: E402

COPY_KERNELS = ("copy", "fill", "Cat", "cat", "zero")


class Decoder(nn.Module):
    """nn.TransformerDecoder with its memory as a parameter: the step's input is the target,
    each layer attends to itself (causal) and to the memory (key is value)."""

    def __init__(self, e, h, f, layers, src):
        super().__init__()
        layer = nn.TransformerDecoderLayer(e, h, f, dropout=0.1, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, layers)
        self.memory = nn.Parameter(torch.randn(8 if src > 16 else 2, src, e))

    def forward(self, x):
        causal = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        return self.decoder(x, self.memory, tgt_mask=causal, tgt_is_causal=True)


def base_model(tiny, kind="encoder"):
    e, h, f, layers = (32, 4, 64, 2) if tiny else (1024, 16, 4096, 4)
    torch.manual_seed(0)
    if kind == "decoder":
        return Decoder(e, h, f, layers, 8 if tiny else 512), e
    layer = nn.TransformerEncoderLayer(e, h, f, dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False), e


def build(variant, base, device):
    model = copy.deepcopy(base).to(device)
    if "dropin" in variant:
        assert swap_multihead_attention(model) > 0
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    run = torch.compile(model) if variant.startswith("compile") else model
    return model, run, opt


def make_step(run, opt, device):
    def step(x):
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = run(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def kernels_of(fn):
    """The CUDA kernels fn() runs: (count, GPU ms, copies count, copies ms, {name: count})."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        fn()
        torch.cuda.synchronize()
    kern = [e for e in prof.events() if e.device_type.name == "CUDA"
            and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    copies = [e for e in kern if any(k in e.name for k in COPY_KERNELS)]
    names = collections.Counter(e.name[:60] for e in kern)
    return (len(kern), sum(e.device_time for e in kern) / 1e3, len(copies),
            sum(e.device_time for e in copies) / 1e3, dict(names))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--model", choices=["encoder", "decoder"], default="encoder")
    args = ap.parse_args()
    device = "cpu" if args.smoke else "cuda"
    if not args.smoke and not torch.cuda.is_available():
        sys.exit("probe_mha: needs a CUDA GPU (--smoke runs on the CPU)")
    emit = (lambda r: print(json.dumps(r), flush=True)) if args.json else (lambda r: print(r, flush=True))
    base, e = base_model(args.smoke, args.model)
    b, t = (2, 8) if args.smoke else (8, 512)
    variants = ["eager", "dropin"] + (["compile", "compile+dropin"] if args.compile else [])
    xs = [torch.randn(b, t, e, device=device) for _ in range(6)]
    runs, results = [], []
    for v in variants:
        model, run, opt = build(v, base, device)
        step = make_step(run, opt, device)
        losses = []
        for i, x in enumerate(xs):
            torch.manual_seed(100 + i)
            losses.append(step(x).item())
        results.append({"model": args.model, "variant": v, "losses": losses})
        runs.append((model, step))
    for r in results:
        r["max_loss_diff"] = max(abs(a - c) for a, c in zip(r["losses"], results[0]["losses"]))
    if args.smoke:
        for r in results:
            emit(r)
        return
    x = xs[0]
    for _, step in runs:
        for _ in range(5):
            step(x)
    torch.cuda.synchronize()
    walls = [[] for _ in runs]
    for _ in range(5):
        for k, (_, step) in enumerate(runs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                step(x)
            torch.cuda.synchronize()
            walls[k].append((time.perf_counter() - t0) / 20 * 1e3)
    for k, (_, step) in enumerate(runs):
        r = results[k]
        r["wall_ms"] = round(statistics.median(walls[k]), 3)
        r["wall_ms_rounds"] = [round(w, 3) for w in walls[k]]
        n, ms, nc, cms, _ = kernels_of(lambda: step(x))
        r.update(kernels=n, gpu_ms=round(ms, 3), copies=nc, copy_ms=round(cms, 3))
        emit(r)
    # the attention module alone: one layer's self_attn, forward and backward
    for v, (model, _) in zip(variants[:2], runs[:2]):
        if args.model == "decoder":
            continue  # (the step's figures; the attention alone is the encoder's)
        attn = model.layers[0].self_attn
        xa = x.detach().clone().requires_grad_(True)

        def call():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = attn(xa, xa, xa, need_weights=False)[0]
            out.float().sum().backward()

        for _ in range(3):
            call()
        n, ms, nc, cms, names = kernels_of(call)
        emit({"variant": v, "probe": "self_attn forward+backward", "kernels": n, "gpu_ms": round(ms, 3),
              "copies": nc, "copy_ms": round(cms, 3), "names": names})


if __name__ == "__main__":
    main()
