"""Probe: layernorm_linear in training (GPU): which forward variant, and what the fold costs.

LayerNormLinearFunction's backward is the same whichever variant ran the forward; the
forward is not: "fold" runs a plain GEMM of raw x with W' = W diag(gamma) and needs the
weights folded again after every optimizer step (one _fold_kernel pass over W), "normalize"
normalizes each A tile on load and needs no fold. This probe times, per traced training shape
(M x K x N, bf16), the chain as a training step runs it (harness.TrainingCall: "full" is one
forward and its backward, "backward" the backward of one forward's saved state; captured in a
CUDA graph, the replay timed by fa_testing.gpu_time_us with the L2 flushed, as bench does):

- eager: F.linear(F.layer_norm(x)) through autograd;
- fold+refold: layernorm_linear_train(variant="fold") folding in the call (what a step pays);
- fold: the weights folded once, outside the timed call (the bound without the refold);
- normalize: layernorm_linear_train(variant="normalize");
- fold_weights alone (the refold's cost), forward mode of each for reference.

Each variant's gradients are checked against eager's (max abs difference printed).

Usage, from the repository root:
  python bench/experiments/probe_layernorm_linear_train.py [--only SUBSTRING] [--json]
  python bench/experiments/probe_layernorm_linear_train.py --smoke   (CPU: plumbing only)
"""
import math

import probekit as kit  # first: --smoke's TRITON_INTERPRET before triton is imported

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import harness  # noqa: E402

# (label, M, K, N): the training traces' layernorm_linear shapes (BERT, GPT-2, the encoder
# and MLP blocks) at their tokens per step
CASES = [("bert-4096x768x768", 4096, 768, 768), ("bert-4096x768x3072", 4096, 768, 3072),
         ("gpt2-4096x768x2304", 4096, 768, 2304), ("enc-4096x1024x4096", 4096, 1024, 4096),
         ("mlp-4096x2048x8192", 4096, 2048, 8192), ("convnext-25088x384x1536", 25088, 384, 1536)]
SMOKE_CASES = [("rows-37x72x48", 37, 72, 48)]
NAMES = ["x", "g", "b", "w", "bias"]

KERNEL = kit.load_template("layernorm_linear", "kernel")


def inputs(M, K, N, dtype, device):
    g = kit.fat.gen(0)
    return {"x": kit.fat.randn([M, K], dtype, device, g, mean=-2.3, std=0.5),
            "g": kit.fat.randn([K], dtype, device, g, mean=1.0, std=0.2),
            "b": kit.fat.randn([K], dtype, device, g, std=0.2),
            "w": kit.fat.randn([N, K], dtype, device, g, std=1.0 / math.sqrt(K)),
            "bias": kit.fat.randn([N], dtype, device, g)}


def main():
    args = kit.arguments(__doc__, compile_=False)
    device = "cpu" if args.smoke else "cuda"
    timer = kit.wall_timer if args.smoke else kit.gpu_timer
    table = kit.Table(args.json)
    table.header()
    dtype = torch.bfloat16
    for label, M, K, N in SMOKE_CASES if args.smoke else CASES:
        if args.only not in label:
            continue
        inp = inputs(M, K, N, dtype, device)
        folded = KERNEL.fold_weights(inp["g"], inp["b"], inp["w"], inp["bias"])
        chains = {
            "eager": lambda d: F.linear(F.layer_norm(d["x"], (K,), d["g"], d["b"], 1e-5), d["w"], d["bias"]),
            "fold+refold": lambda d: KERNEL.layernorm_linear_train(d["x"], d["g"], d["b"], d["w"], d["bias"]),
            "fold": lambda d: KERNEL.layernorm_linear_train(d["x"], d["g"], d["b"], d["w"], d["bias"], folded=folded),
            "normalize": lambda d: KERNEL.layernorm_linear_train(d["x"], d["g"], d["b"], d["w"], d["bias"],
                                                                 variant="normalize"),
        }
        want = harness.TrainingCall(torch, chains["eager"], inp, NAMES, "full")()
        for mode in ("forward", "backward", "full"):
            for name, fwd in chains.items():
                try:
                    if mode == "forward":
                        with torch.no_grad():
                            call = (lambda f: lambda: f(inp))(fwd)
                            diff = None
                    else:
                        call = harness.TrainingCall(torch, fwd, inp, NAMES, mode)
                        diff = kit.max_diff(call(), want)
                    table.row(label, f"{mode}:{name}", timer(call), "", diff,
                              diff is not None and kit.wrong(diff, want, 5e-2))
                except Exception as e:  # noqa: BLE001 - a variant that fails is a row, not the end
                    table.error(label, f"{mode}:{name}", e)
        table.row(label, "fold_weights", timer(lambda: KERNEL.fold_weights(inp["g"], inp["b"], inp["w"], inp["bias"])),
                  "", None)


if __name__ == "__main__":
    main()
