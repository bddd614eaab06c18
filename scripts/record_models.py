"""Records profiler traces of models the project has never analyzed, and times each one's step
eager vs torch.compile(model) (issue 15, item 2).

Every model is built from a small config (transformers' config classes, or a module written
here), with random weights: nothing is downloaded. Two phases, run separately so that the
traces land even when the compile timings run out of time:

  traces  one warm-up step, then STEPS profiled steps (tracerec.record: Kineto trace with
          record_shapes, no stacks, and the execution trace beside it, both gzip'd) into
          OUT/NAME.json.gz and OUT/NAME.et.json.gz; OUT/manifest.json gets one entry per model
          (model, family, mode, dtype, steps, attention, sizes, versions).
  timing  the same step outside the profiler, eager and then torch.compile(model) on a fresh
          copy of the model (same seed), CUDA events around each step, warm-up calls first
          (the compile happens in them), median of N; into OUT/timing.json, with compile's
          saving in percent of the eager step. A model whose compile fails records the error.

  python3 scripts/record_models.py traces -o OUT [-models a,b] [-tiny] [-device cpu]
  python3 scripts/record_models.py timing -o OUT -batch 1 [-deadline-s 480] [-no-compile]
  python3 scripts/record_models.py list

-tiny shrinks every config to a few units (the CPU checks); -batch N picks a timing batch
(TIMING_BATCHES, each sized to finish in one 9-minute device call); -deadline-s stops
starting models' compile timings once that many seconds have passed (the rest are marked
"skipped: deadline"). Progress goes to stderr; manifest.json and timing.json are rewritten
after every model, so a run stopped by its time limit keeps what it finished.
"""

import argparse
import copy
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracerec  # noqa: E402


@dataclass
class Spec:
    name: str  # the trace's file name, without .json.gz
    model: str  # what ran (a class name, or "custom ...")
    family: str  # what the project had not seen before
    mode: str  # train, infer or decode
    dtype: str  # fp32, fp16 / bf16 (weights cast), autocast_fp16 / autocast_bf16
    steps: int  # profiled steps
    build: object  # build(tiny) -> (model, batch(device) -> dict of inputs)
    attn: str = ""  # attention implementation asked for ("" when the model has no choice)
    new_tokens: int = 0  # decode: tokens generated after the prompt
    sizes: dict = field(default_factory=dict)  # filled in by build, for the manifest


# ---- inputs ---------------------------------------------------------------------------------


def tokens(vocab, batch, seq, device):
    return torch.randint(0, vocab, (batch, seq), device=device)


def lm_batch(vocab, batch, seq):
    """A causal LM's batch: input ids, the same ids as labels."""

    def make(device):
        ids = tokens(vocab, batch, seq, device)
        return {"input_ids": ids, "labels": ids}

    return make


def image_batch(batch, size, labels=1000):
    def make(device):
        return {
            "pixel_values": torch.randn(batch, 3, size, size, device=device),
            "labels": torch.randint(0, labels, (batch,), device=device),
        }

    return make


def padded_mask(batch, seq, device):
    """An attention mask with each row's tail padded (a quarter of the rows full)."""
    lengths = torch.randint(seq // 2, seq + 1, (batch,), device=device)
    lengths[: max(batch // 4, 1)] = seq
    return (torch.arange(seq, device=device)[None, :] < lengths[:, None]).long()


def hf(cls_name, config_name, attn="", **cfg):
    """Builds transformers' model class from its config class, random weights."""
    import transformers

    config = getattr(transformers, config_name)(**cfg)
    if attn:
        config._attn_implementation = attn
    torch.manual_seed(0)
    return getattr(transformers, cls_name)(config)


# ---- the models -----------------------------------------------------------------------------
# Each build(tiny) returns (model, batch maker). Full sizes are small models that keep the
# traces at a few hundred KB (two layers) while giving the GPU real work; -tiny keeps the
# structure with a few units everywhere.


def t5(tiny):
    d, ff, heads, layers, vocab = (32, 64, 2, 1, 128) if tiny else (512, 1376, 8, 2, 8192)
    b, src, tgt = (2, 16, 8) if tiny else (8, 256, 128)
    m = hf("T5ForConditionalGeneration", "T5Config", attn="eager", vocab_size=vocab, d_model=d,
           d_kv=d // heads, d_ff=ff, num_layers=layers, num_decoder_layers=layers, num_heads=heads,
           feed_forward_proj="gated-gelu", decoder_start_token_id=0, pad_token_id=0)

    def make(device):
        return {
            "input_ids": tokens(vocab, b, src, device),
            "attention_mask": padded_mask(b, src, device),
            "labels": tokens(vocab, b, tgt, device),
        }

    return m, make, {"batch": b, "src": src, "tgt": tgt, "d_model": d, "layers": layers}


def bart(tiny):
    d, ff, heads, layers, vocab = (32, 64, 2, 1, 128) if tiny else (512, 2048, 8, 2, 8192)
    b, src, tgt = (2, 16, 8) if tiny else (4, 256, 64)
    m = hf("BartForConditionalGeneration", "BartConfig", attn="eager", vocab_size=vocab, d_model=d,
           encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
           decoder_attention_heads=heads, encoder_ffn_dim=ff, decoder_ffn_dim=ff,
           max_position_embeddings=512)

    def make(device):
        return {
            "input_ids": tokens(vocab, b, src, device),
            "attention_mask": padded_mask(b, src, device),
            "decoder_input_ids": tokens(vocab, b, tgt, device),
        }

    return m, make, {"batch": b, "src": src, "tgt": tgt, "d_model": d, "layers": layers}


def pythia(tiny):
    d, heads, layers, vocab = (32, 2, 1, 128) if tiny else (768, 12, 2, 8192)
    b, s = (2, 16) if tiny else (8, 512)
    m = hf("GPTNeoXForCausalLM", "GPTNeoXConfig", attn="eager", vocab_size=vocab, hidden_size=d,
           num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=4 * d,
           rotary_pct=0.25, use_parallel_residual=True, max_position_embeddings=1024)
    return m, lm_batch(vocab, b, s), {"batch": b, "seq": s, "hidden": d, "layers": layers}


def gptj(tiny):
    d, heads, layers, vocab = (32, 2, 1, 128) if tiny else (1024, 16, 2, 8192)
    b, s = (2, 16) if tiny else (4, 256)
    m = hf("GPTJForCausalLM", "GPTJConfig", attn="eager", vocab_size=vocab, n_embd=d, n_layer=layers,
           n_head=heads, rotary_dim=min(64, d // heads), n_positions=1024, bos_token_id=0,
           eos_token_id=0)
    return m, lm_batch(vocab, b, s), {"batch": b, "seq": s, "hidden": d, "layers": layers}


def phi(tiny):
    d, heads, layers, vocab = (32, 2, 1, 128) if tiny else (1024, 16, 2, 8192)
    b, s = (2, 16) if tiny else (4, 256)
    m = hf("PhiForCausalLM", "PhiConfig", attn="eager", vocab_size=vocab, hidden_size=d,
           intermediate_size=4 * d, num_hidden_layers=layers, num_attention_heads=heads,
           partial_rotary_factor=0.5, max_position_embeddings=1024)
    return m, lm_batch(vocab, b, s), {"batch": b, "seq": s, "hidden": d, "layers": layers}


def falcon(tiny):
    d, heads, layers, vocab = (32, 2, 1, 128) if tiny else (1024, 16, 2, 8192)
    b, s = (2, 16) if tiny else (4, 512)
    m = hf("FalconForCausalLM", "FalconConfig", attn="eager", vocab_size=vocab, hidden_size=d,
           num_hidden_layers=layers, num_attention_heads=heads, multi_query=True,
           parallel_attn=True, new_decoder_architecture=False, bias=False)
    return m, lm_batch(vocab, b, s), {"batch": b, "seq": s, "hidden": d, "layers": layers}


def gemma(tiny):
    d, heads, hd, layers, vocab = (32, 2, 16, 1, 128) if tiny else (1024, 8, 128, 2, 8192)
    b, s = (2, 16) if tiny else (4, 512)
    m = hf("GemmaForCausalLM", "GemmaConfig", attn="eager", vocab_size=vocab, hidden_size=d,
           intermediate_size=4 * d, num_hidden_layers=layers, num_attention_heads=heads,
           num_key_value_heads=1, head_dim=hd, hidden_activation="gelu_pytorch_tanh")
    return m, lm_batch(vocab, b, s), {"batch": b, "seq": s, "hidden": d, "layers": layers}


def distilbert(tiny):
    d, heads, layers, vocab = (32, 2, 1, 128) if tiny else (768, 12, 2, 8192)
    b, s = (2, 16) if tiny else (16, 256)
    m = hf("DistilBertForMaskedLM", "DistilBertConfig", attn="eager", vocab_size=vocab, dim=d,
           n_layers=layers, n_heads=heads, hidden_dim=4 * d)

    def make(device):
        ids = tokens(vocab, b, s, device)
        labels = torch.where(torch.rand(b, s, device=device) < 0.15, ids, torch.full_like(ids, -100))
        return {"input_ids": ids, "attention_mask": padded_mask(b, s, device), "labels": labels}

    return m, make, {"batch": b, "seq": s, "hidden": d, "layers": layers}


def opt(tiny):
    d, heads, layers, vocab = (32, 2, 1, 128) if tiny else (768, 12, 2, 8192)
    b, s = (2, 8) if tiny else (4, 128)
    m = hf("OPTForCausalLM", "OPTConfig", attn="eager", vocab_size=vocab, hidden_size=d,
           num_hidden_layers=layers, num_attention_heads=heads, ffn_dim=4 * d, word_embed_proj_dim=d,
           max_position_embeddings=2048)
    return m, prompt_batch(vocab, b, s), {"batch": b, "prompt": s, "hidden": d, "layers": layers}


def qwen2(tiny):
    d, heads, kv, layers, vocab = (32, 2, 1, 1, 128) if tiny else (896, 14, 2, 2, 8192)
    b, s = (2, 8) if tiny else (2, 256)
    m = hf("Qwen2ForCausalLM", "Qwen2Config", attn="sdpa", vocab_size=vocab, hidden_size=d,
           intermediate_size=64 if tiny else 4864, num_hidden_layers=layers, num_attention_heads=heads,
           num_key_value_heads=kv, max_position_embeddings=2048)
    return m, prompt_batch(vocab, b, s), {"batch": b, "prompt": s, "hidden": d, "layers": layers}


def prompt_batch(vocab, batch, seq):
    def make(device):
        return {"input_ids": tokens(vocab, batch, seq, device)}

    return make


def vit(tiny):
    d, heads, layers, img, patch = (32, 2, 1, 32, 8) if tiny else (384, 6, 2, 224, 16)
    b = 2 if tiny else 32
    m = hf("ViTForImageClassification", "ViTConfig", attn="eager", hidden_size=d,
           num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=4 * d,
           image_size=img, patch_size=patch, num_labels=1000)
    return m, image_batch(b, img), {"batch": b, "image": img, "hidden": d, "layers": layers}


def deit(tiny):
    d, heads, layers, img, patch = (32, 2, 1, 32, 8) if tiny else (192, 3, 2, 224, 16)
    b = 2 if tiny else 32
    m = hf("DeiTForImageClassification", "DeiTConfig", attn="eager", hidden_size=d,
           num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=4 * d,
           image_size=img, patch_size=patch, num_labels=1000)
    return m, image_batch(b, img), {"batch": b, "image": img, "hidden": d, "layers": layers}


def swin(tiny):
    dim, img, window = (16, 32, 4) if tiny else (96, 224, 7)
    b = 2 if tiny else 16
    m = hf("SwinForImageClassification", "SwinConfig", attn="eager", image_size=img, patch_size=4,
           embed_dim=dim, depths=[2, 2], num_heads=[2, 4] if tiny else [3, 6], window_size=window,
           num_labels=1000)
    return m, image_batch(b, img), {"batch": b, "image": img, "embed_dim": dim, "depths": [2, 2]}


def convnextv2(tiny):
    widths, img = ([16, 32], 32) if tiny else ([96, 192], 224)
    b = 2 if tiny else 32
    m = hf("ConvNextV2ForImageClassification", "ConvNextV2Config", num_stages=2, hidden_sizes=widths,
           depths=[2, 2], image_size=img, num_labels=1000)
    return m, image_batch(b, img), {"batch": b, "image": img, "widths": widths, "depths": [2, 2]}


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of an NCHW tensor (dim 1), written as ConvNeXt's reference
    code writes it: mean and variance over dim 1, then a per-channel scale and shift."""

    def __init__(self, c, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.bias = nn.Parameter(torch.zeros(c))
        self.eps = eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class ConvBlock(nn.Module):
    """A ConvNeXt block kept channels-first: depthwise 7x7, LayerNorm2d, 1x1 conv up, GELU,
    1x1 conv down, layer scale, residual."""

    def __init__(self, c):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = LayerNorm2d(c)
        self.up = nn.Conv2d(c, 4 * c, 1)
        self.down = nn.Conv2d(4 * c, c, 1)
        self.gamma = nn.Parameter(torch.full((c,), 1e-6))

    def forward(self, x):
        y = self.down(F.gelu(self.up(self.norm(self.dw(x)))))
        return x + self.gamma[:, None, None] * y


class ConvNet(nn.Module):
    def __init__(self, c, blocks, classes=1000):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 4, stride=4)
        self.stem_norm = LayerNorm2d(c)
        self.blocks = nn.Sequential(*[ConvBlock(c) for _ in range(blocks)])
        self.head_norm = nn.LayerNorm(c)
        self.head = nn.Linear(c, classes)

    def forward(self, pixel_values, labels):
        x = self.blocks(self.stem_norm(self.stem(pixel_values)))
        logits = self.head(self.head_norm(x.mean((2, 3))))
        return F.cross_entropy(logits.float(), labels)


def convnet_ln2d(tiny):
    c, img = (16, 32) if tiny else (128, 224)
    b = 2 if tiny else 32
    torch.manual_seed(0)
    return ConvNet(c, 2), image_batch(b, img), {"batch": b, "image": img, "channels": c, "blocks": 2}


SPECS = [
    Spec("t5_train_bf16", "T5ForConditionalGeneration", "encoder-decoder, gated GELU, T5 RMSNorm",
         "train", "autocast_bf16", 1, t5, attn="eager"),
    Spec("bart_infer_autocast_fp16", "BartForConditionalGeneration", "encoder-decoder, post-norm",
         "infer", "autocast_fp16", 1, bart, attn="eager"),
    Spec("pythia_train_bf16", "GPTNeoXForCausalLM", "parallel residual, partial rotary",
         "train", "autocast_bf16", 1, pythia, attn="eager"),
    Spec("gptj_infer_fp16", "GPTJForCausalLM", "parallel residual, one LayerNorm per layer",
         "infer", "fp16", 1, gptj, attn="eager"),
    Spec("phi_infer_fp16", "PhiForCausalLM", "parallel residual, gelu_new, partial rotary",
         "infer", "fp16", 1, phi, attn="eager"),
    Spec("falcon_train_bf16", "FalconForCausalLM", "parallel attention, multi-query",
         "train", "autocast_bf16", 1, falcon, attn="eager"),
    Spec("gemma_train_bf16", "GemmaForCausalLM", "RMSNorm (1 + w), GeGLU (tanh GELU), one KV head",
         "train", "autocast_bf16", 1, gemma, attn="eager"),
    Spec("distilbert_train_fp32", "DistilBertForMaskedLM", "encoder, padding mask, fp32 training",
         "train", "fp32", 1, distilbert, attn="eager"),
    Spec("opt_decode_fp16", "OPTForCausalLM", "greedy decoding with a KV cache",
         "decode", "fp16", 1, opt, attn="eager", new_tokens=8),
    Spec("qwen2_decode_bf16", "Qwen2ForCausalLM", "greedy decoding with a KV cache, GQA, SDPA",
         "decode", "bf16", 1, qwen2, attn="sdpa", new_tokens=8),
    Spec("vit_train_bf16", "ViTForImageClassification", "vision transformer",
         "train", "autocast_bf16", 1, vit, attn="eager"),
    Spec("deit_train_fp32", "DeiTForImageClassification", "vision transformer, fp32 training",
         "train", "fp32", 1, deit, attn="eager"),
    Spec("swin_infer_fp32", "SwinForImageClassification", "windowed attention, patch merging",
         "infer", "fp32", 1, swin, attn="eager"),
    Spec("convnextv2_train_bf16", "ConvNextV2ForImageClassification",
         "conv net, channels-first LayerNorm in the downsampling, GRN",
         "train", "autocast_bf16", 1, convnextv2),
    Spec("convnet_ln2d_train_fp16", "custom ConvNet (LayerNorm2d blocks)",
         "conv net, channels-first LayerNorm (dim 1) in every block, GradScaler",
         "train", "autocast_fp16", 1, convnet_ln2d),
]

# The timing phase in batches that each fit one 9-minute device call: compiling a training
# step (forward and backward graphs) costs about a minute, a decode loop recompiles as its
# cache grows.
TIMING_BATCHES = [
    ["t5_train_bf16", "pythia_train_bf16", "falcon_train_bf16", "gemma_train_bf16",
     "distilbert_train_fp32"],
    ["bart_infer_autocast_fp16", "gptj_infer_fp16", "phi_infer_fp16", "opt_decode_fp16",
     "qwen2_decode_bf16"],
    ["vit_train_bf16", "deit_train_fp32", "swin_infer_fp32", "convnextv2_train_bf16",
     "convnet_ln2d_train_fp16"],
]


# ---- steps ----------------------------------------------------------------------------------


def place(model, spec, device):
    """The model on device in the spec's weight dtype (autocast and fp32 keep fp32 weights)."""
    model = model.to(device)
    if spec.dtype == "fp16":
        model = model.half()
    elif spec.dtype == "bf16":
        model = model.to(torch.bfloat16)
    return model.train(spec.mode == "train")


def autocast(spec, device):
    if spec.dtype.startswith("autocast_"):
        dt = torch.float16 if spec.dtype.endswith("fp16") else torch.bfloat16
        return torch.autocast(device.type, dtype=dt)
    return torch.autocast(device.type, enabled=False)


def loss_of(out):
    return out if torch.is_tensor(out) else out.loss


def make_step(spec, model, runner, batch, device):
    """step() for the spec's mode: model is what owns the parameters, runner what is called
    (the model itself, or torch.compile(model))."""
    if spec.mode == "train":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        scaler = torch.amp.GradScaler(device.type, enabled=spec.dtype == "autocast_fp16")

        def step():
            with autocast(spec, device):
                loss = loss_of(runner(**batch))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)

        return step
    if spec.mode == "infer":

        def step():
            with torch.no_grad(), autocast(spec, device):
                runner(**batch)

        return step

    def step():  # decode: the prompt, then new_tokens greedy tokens through the KV cache
        with torch.no_grad(), autocast(spec, device):
            out = runner(input_ids=batch["input_ids"], use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
            for _ in range(spec.new_tokens):
                out = runner(input_ids=tok, past_key_values=past, use_cache=True)
                past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)

    return step


def build(spec, tiny, device):
    model, make_batch, sizes = spec.build(tiny)
    spec.sizes = sizes
    model = place(model, spec, device)
    torch.manual_seed(1)
    return model, make_batch(device)


# ---- phases ---------------------------------------------------------------------------------


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def load_json(path, default):
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return default


def record_traces(specs, out, tiny, device):
    """Phase 1. Returns the number of models that failed."""
    path = os.path.join(out, "manifest.json")
    manifest = load_json(path, {"traces": []})
    manifest.update(tracerec.environment(device))
    failed = 0
    for spec in specs:
        t0 = time.time()
        manifest["traces"] = [e for e in manifest["traces"] if e.get("name") != spec.name]
        entry = {"name": spec.name, "model": spec.model, "family": spec.family, "mode": spec.mode,
                 "dtype": spec.dtype, "attn": spec.attn, "tiny": tiny}
        try:
            model, batch = build(spec, tiny, device)
            step = make_step(spec, model, model, batch, device)
            step()  # warm-up: cuBLAS handles, the optimizer's state, autotuned kernels
            entry.update(tracerec.record(step, spec.steps, out, spec.name, device))
            entry["sizes"] = spec.sizes
            if spec.new_tokens:
                entry["new_tokens"] = spec.new_tokens
            del model, batch, step
        except Exception as e:  # one model's failure must not lose the others' traces
            failed += 1
            entry["error"] = f"{type(e).__name__}: {e}"
            log(traceback.format_exc())
        manifest["traces"].append(entry)
        manifest["traces"].sort(key=lambda e: e["name"])
        write_json(path, manifest)
        what = entry.get("error") or f"{entry['gz_bytes'] + entry['et_gz_bytes']} bytes gz'd"
        log(f"traces: {spec.name}: {what} ({time.time() - t0:.1f} s)")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return failed


def time_models(specs, out, tiny, device, deadline_s, iters, compile_too):
    """Phase 2. Returns the number of models that failed."""
    start = time.time()
    path = os.path.join(out, "timing.json")
    timing = load_json(path, {"models": {}})
    timing.update(tracerec.environment(device))
    timing["method"] = (f"step outside the profiler; CUDA events around each step (perf_counter on "
                        f"the CPU); {iters} timed steps after warm-up; median")
    failed = 0
    for spec in specs:
        t0 = time.time()
        r = {"mode": spec.mode, "dtype": spec.dtype, "tiny": tiny}
        try:
            model, batch = build(spec, tiny, device)
            fresh = copy.deepcopy(model)  # the same weights for the compiled run
            r["eager"] = tracerec.time_steps(make_step(spec, model, model, batch, device),
                                             device, warmup=3, iters=iters)
            del model
            left = deadline_s - (time.time() - start)
            if not compile_too:
                r["compiled"] = "skipped: -no-compile"
            elif left < 90:
                r["compiled"] = f"skipped: deadline ({left:.0f} s left of {deadline_s} s)"
            else:
                torch._dynamo.reset()
                runner = torch.compile(fresh)
                step = make_step(spec, fresh, runner, batch, device)
                c0 = time.time()
                step()  # compiles
                tracerec.sync(device)
                r["compile_s"] = round(time.time() - c0, 1)
                r["compiled"] = tracerec.time_steps(step, device, warmup=3, iters=iters)
                e, c = r["eager"]["median_ms"], r["compiled"]["median_ms"]
                r["compile_saving_pct"] = round(100 * (e - c) / e, 1)
            del fresh, batch
        except Exception as e:
            failed += 1
            r["error"] = f"{type(e).__name__}: {e}"
            log(traceback.format_exc())
        timing["models"][spec.name] = r
        write_json(path, timing)
        log(f"timing: {spec.name}: eager {ms(r.get('eager'))}, compiled {ms(r.get('compiled'))}"
            f"{', ' + r['error'] if 'error' in r else ''} ({time.time() - t0:.1f} s)")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return failed


def ms(t):
    """A measurement for the log: its median, or the reason there is none."""
    if isinstance(t, dict):
        return f"{t['median_ms']} ms"
    return t or "-"


def select(models, batch):
    by_name = {s.name: s for s in SPECS}
    if models:
        names = models.split(",")
    elif batch:
        if not 1 <= batch <= len(TIMING_BATCHES):
            raise SystemExit(f"record_models: -batch {batch}: there are {len(TIMING_BATCHES)} batches")
        names = TIMING_BATCHES[batch - 1]
    else:
        names = list(by_name)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"record_models: unknown model {', '.join(unknown)} (see: record_models.py list)")
    return [by_name[n] for n in names]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phase", choices=["traces", "timing", "list"])
    p.add_argument("-o", dest="out", help="output folder")
    p.add_argument("-models", default="", help="comma-separated names (default: all, or the batch)")
    p.add_argument("-batch", type=int, default=0, help="timing batch 1..%d" % len(TIMING_BATCHES))
    p.add_argument("-tiny", action="store_true", help="a few units per config (CPU checks)")
    p.add_argument("-device", default="auto", help="cuda, cpu or auto")
    p.add_argument("-deadline-s", dest="deadline_s", type=float, default=480)
    p.add_argument("-iters", type=int, default=20, help="timed steps per measurement")
    p.add_argument("-no-compile", dest="no_compile", action="store_true")
    a = p.parse_args(argv)
    if a.phase == "list":
        for s in SPECS:
            print(f"{s.name:28} {s.mode:6} {s.dtype:14} {s.model}: {s.family}")
        for i, b in enumerate(TIMING_BATCHES, 1):
            print(f"timing batch {i}: {' '.join(b)}")
        return 0
    if not a.out:
        p.error("-o OUT is required")
    os.makedirs(a.out, exist_ok=True)
    device = tracerec.pick_device(a.device)
    specs = select(a.models, a.batch)
    if a.phase == "traces":
        failed = record_traces(specs, a.out, a.tiny, device)
    else:
        failed = time_models(specs, a.out, a.tiny, device, a.deadline_s, a.iters, not a.no_compile)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
