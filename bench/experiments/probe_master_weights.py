"""Probe: a training step with autocast's fp32 weights against bf16 GEMM weights and fp32
masters in the optimizer (templates/_optimizer/master_adamw.py) (GPU; prints JSON lines).

Under autocast every GEMM casts its fp32 weight to bf16 in the forward and the weight's
gradient back to fp32 in the backward (ToCopyBackward0): 7-16% of the memory-bound kernel
time of the shared H200 training traces (docs/patterns.md, "autocast"), which torch.compile
keeps. MasterAdamW keeps the GEMM weights in bf16 and their fp32 masters itself, so neither
cast runs, and updates every parameter in one kernel a group.

Models (transformers, random weights, the shapes of the shared traces' models): BERT
(BertForMaskedLM, 4 layers of 768, vocabulary 8192, 16 x 256 tokens), Llama
(LlamaForCausalLM, 4 layers of 1024, 8 x 256 tokens), GPT-2 (GPT2LMHeadModel, 4 layers of
768, 16 x 256 tokens: its output projection is tied to the embedding and stays fp32). Each
runs these variants from the same initial weights and batches:

  fused        fp32 weights, autocast bf16, torch.optim.AdamW(fused=True): the best torch.optim
  foreach      the same with AdamW's default (foreach), what the traces ran
  master       the GEMM weights bf16 (gemm_parameters), autocast bf16, MasterAdamW
  compile      torch.compile(model) with fused                                   (--compile)
  compile+master  torch.compile(model) with master                               (--compile)

and measures for each:

  wall_ms     a step (forward, backward, optimizer step, zero_grad) as a training loop runs it:
              20 steps back to back, one synchronize, over 20; the variants take turns, 5
              rounds each (the host's pace on a lent machine moves between runs), the median
              round (wall_ms_rounds: all five)
  gpu_ms      the GPU time of one step's kernels added up (torch.profiler)
  kernels     kernels launched a step; casts_ms: the GPU time of the step's copy kernels
              (direct_copy / bfloat16_copy), which the weights' casts are among
  opt_ms      the optimizer step's kernels alone (opt_kernels: how many)
  loss        the losses of 6 steps (the RNG seeded before each: the eager variants draw the
              same dropout masks; compile's are its own); max_loss_diff against fused, and
              rel_l2_params ||p - p_fused|| / ||p_fused|| over all the parameters (masters for
              master) after them (a per-tensor maximum would measure noise: Adam moves a
              parameter whose gradient is rounding noise by lr a step, whatever its sign)

With --opt it also times the optimizer step alone on each model's parameters (CUDA events,
L2 flushed before each by fa_testing.L2Flush, median of 30): fused=True on fp32 weights and
gradients against MasterAdamW on bf16 gradients (its BLOCK/NUM_WARPS and three others), with
the copy ceiling of the fused step's bytes (28 bytes a parameter) measured by copy_ceiling's
method.

Usage, from the repository root:
  python bench/experiments/probe_master_weights.py [--only NAME] [--compile] [--opt] [--json]
  python bench/experiments/probe_master_weights.py --smoke     (CPU, tiny models, nothing timed)
"""

import argparse
import copy
import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "templates" / "_common"))
sys.path.insert(0, str(ROOT / "templates" / "_optimizer"))

import torch  # noqa: E402


def models(tiny):
    import transformers as tf

    s = 4 if tiny else 1
    out = {}
    out["bert"] = (lambda: tf.BertForMaskedLM(tf.BertConfig(
        vocab_size=8192 // s, hidden_size=768 // s, num_hidden_layers=4 if not tiny else 1,
        num_attention_heads=12 // s, intermediate_size=3072 // s, attn_implementation="eager")),
        16 // s, 256 // s, 8192 // s)
    out["llama"] = (lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=8192 // s, hidden_size=1024 // s, num_hidden_layers=4 if not tiny else 1,
        num_attention_heads=16 // s, num_key_value_heads=16 // s, intermediate_size=2816 // s,
        attn_implementation="eager")), 8 // s, 256 // s, 8192 // s)
    out["gpt2"] = (lambda: tf.GPT2LMHeadModel(tf.GPT2Config(
        vocab_size=8192 // s, n_embd=768 // s, n_layer=4 if not tiny else 1, n_head=12 // s,
        n_positions=1024, attn_implementation="eager")), 16 // s, 256 // s, 8192 // s)
    return out


def batches(n, b, t, vocab, device):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (b, t), generator=g)
        out.append({"input_ids": ids.to(device), "labels": ids.to(device)})
    return out


def build(variant, base, device):
    import master_adamw as ma

    model = copy.deepcopy(base).to(device)
    kw = dict(lr=1e-4, weight_decay=0.01)
    if variant in ("master", "compile+master"):
        opt = ma.MasterAdamW(model.parameters(), low_precision=ma.gemm_parameters(model), **kw)
    elif variant == "foreach":
        opt = torch.optim.AdamW(model.parameters(), foreach=True, **kw)
    else:
        opt = torch.optim.AdamW(model.parameters(), fused=device == "cuda", **kw)
    run = torch.compile(model) if variant.startswith("compile") else model
    return model, run, opt


def make_step(run, opt, device):
    def step(batch):
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = run(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def params_of(model, opt):
    out = []
    for p in model.parameters():
        st = opt.state.get(p, {})
        out.append((st.get("master", p)).detach().float())
    return out


def prepare(name, variant, base, spec, device):
    """The variant's model, its step and its losses over the 6 batches (the RNG seeded before
    each), with its parameters (masters for master) after them."""
    _, b, t, vocab = spec
    model, run, opt = build(variant, base, device)
    step = make_step(run, opt, device)
    data = batches(6, b, t, vocab, device)
    losses = []
    for i, x in enumerate(data):  # the same 6 batches and dropout draws for every eager variant
        torch.manual_seed(100 + i)
        losses.append(step(x).item())
    res = {"model": name, "variant": variant, "losses": losses}
    return res, params_of(model, opt), (run, opt, step, data[0])


def kernels_of(fn, device):
    """The CUDA kernels fn() runs (torch.profiler): their count and GPU time in ms, and those
    of the copy kernels (direct_copy / bfloat16_copy: the casts among them)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        fn()
        torch.cuda.synchronize()
    kern = [e for e in prof.events() if e.device_type.name == "CUDA"
            and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    casts = [e for e in kern if "copy_kernel" in e.name]
    return len(kern), sum(e.device_time for e in kern) / 1e3, len(casts), sum(e.device_time for e in casts) / 1e3


def measure_all(name, variants, base, spec, device, smoke):
    """Every variant's losses; then, on a GPU, their step times: 5 rounds of 20 steps for
    each variant in turn (interleaved: the host's pace on a lent machine moves between runs),
    the median round; and one step's kernels under the profiler, the optimizer step's alone."""
    out, runs = [], []
    for v in variants:
        res, params, r = prepare(name, v, base, spec, device)
        out.append((res, params))
        runs.append(r)
    if smoke:
        return out
    for run, opt, step, x in runs:
        for _ in range(5):
            step(x)
    torch.cuda.synchronize()
    walls = [[] for _ in runs]
    for _ in range(5):
        for k, (run, opt, step, x) in enumerate(runs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                step(x)
            torch.cuda.synchronize()
            walls[k].append((time.perf_counter() - t0) / 20 * 1e3)
    for k, (run, opt, step, x) in enumerate(runs):
        res = out[k][0]
        res["wall_ms"] = round(statistics.median(walls[k]), 3)
        res["wall_ms_rounds"] = [round(w, 3) for w in walls[k]]
        n, ms, nc, cms = kernels_of(lambda: step(x), device)
        res.update(kernels=n, gpu_ms=round(ms, 3), cast_kernels=nc, casts_ms=round(cms, 3))
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = run(**x).loss
        loss.backward()
        n, ms, _, _ = kernels_of(opt.step, device)
        opt.zero_grad(set_to_none=True)
        res.update(opt_kernels=n, opt_ms=round(ms, 3))
    return out


def opt_alone(name, base, device):
    """The optimizer step alone: fused=True on fp32 weights and gradients against MasterAdamW."""
    import fa_testing as fat
    import master_adamw as ma

    out = {"model": name, "probe": "optimizer step"}
    default = (ma.BLOCK, ma.NUM_WARPS)
    for variant in ("fused", "master", "master 2048/8", "master 512/4", "master 4096/16"):
        model = copy.deepcopy(base).to(device)
        if variant.startswith("master"):
            ma.BLOCK, ma.NUM_WARPS = default if variant == "master" else map(int, variant.split()[1].split("/"))
            opt = ma.MasterAdamW(model.parameters(), lr=1e-4, weight_decay=0.01, low_precision=ma.gemm_parameters(model))
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
        for p in model.parameters():
            p.grad = torch.randn_like(p) * 1e-2
        for _ in range(3):
            opt.step()
        flush = fat.l2_flush()
        times = []
        for _ in range(30):
            flush()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            opt.step()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1e3)
        out[f"{variant}_us"] = round(statistics.median(times), 1)
        ma.BLOCK, ma.NUM_WARPS = default
        n = sum(p.numel() for p in model.parameters())
        out["params"] = n
        low = sum(p.numel() for p in ma.gemm_parameters(model))
        out["low_precision_params"] = low
    # the copy ceiling of fused's bytes: 28 bytes a parameter, as an fp32 elementwise copy
    n = out["params"] * 28 // 8
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    flush = fat.l2_flush()
    times = []
    for _ in range(30):
        flush()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.mul(src, 1.0, out=dst)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    out["copy_28B_us"] = round(statistics.median(times), 1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--opt", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    device = "cpu" if a.smoke else "cuda"
    if not a.smoke and not torch.cuda.is_available():
        print("probe_master_weights: no CUDA device (use --smoke on the CPU)", file=sys.stderr)
        sys.exit(2)
    if not a.smoke:
        print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}", file=sys.stderr)
    variants = ["fused", "foreach", "master"] + (["compile", "compile+master"] if a.compile else [])
    for name, spec in models(a.smoke).items():
        if a.only and a.only not in name:
            continue
        torch.manual_seed(0)
        base = spec[0]()
        ref = None
        for r, params in measure_all(name, variants, base, spec, device, a.smoke):
            if ref is None:
                ref = r["losses"], params
            r["max_loss_diff"] = max(abs(x - y) for x, y in zip(r["losses"], ref[0]))
            num = sum(((p - q).double() ** 2).sum().item() for p, q in zip(params, ref[1]))
            den = sum((q.double() ** 2).sum().item() for q in ref[1])
            r["rel_l2_params"] = (num / max(den, 1e-300)) ** 0.5
            print(json.dumps(r) if a.json else r, flush=True)
        if a.opt and not a.smoke:
            print(json.dumps(opt_alone(name, base, device)), flush=True)


if __name__ == "__main__":
    main()
