"""Probe: does a Hopper-style Triton GEMM close the gap to cuBLAS for the GEMM templates?

The linear_gelu and layernorm_linear templates use a pointer-based tiled Triton GEMM (the
matmul tutorial's). On an H200 that GEMM can trail cuBLAS by more than the epilogue fusion
saves. This script measures, per shape, how far a Hopper-style GEMM gets: operands and output
through TMA tensor descriptors (host-side ``TensorDescriptor``, block shapes set per autotune
config by a ``pre_hook``, as in Triton's persistent-matmul tutorial), Hopper-sized tiles, and a
persistent tile loop, with the templates' epilogues.

Variants, for y = epilogue(x[M, K] @ W[N, K]^T + b[N]):

- ``cublas_gemm``: ``F.linear`` alone, the "GEMM alone" ceiling every ratio refers to;
- ``eager_linear_gelu``: ``F.gelu(F.linear(x, W, b))`` (erf GELU);
- ``addmm_act``: ``torch._addmm_activation(b, x, W.t(), use_gelu=True)`` (cuBLASLt GELU
  epilogue); ``gelu_match`` says whether it computes the erf or the tanh GELU;
- ``tpl_linear_gelu``: the current template kernel (templates/linear_gelu/kernel.py);
- ``tma_linear_gelu``: TMA GEMM, one tile per program, grouped ordering, bias + erf GELU
  epilogue (the template's math: rounded to the output dtype before the GELU);
- ``tma_persistent_linear_gelu``: the same with a persistent tile loop (grid = number of SMs,
  ``tl.range(..., flatten=True)``); ``tma_persistent_ws_linear_gelu`` adds
  ``warp_specialize=True`` (documented for Blackwell in Triton 3.6: measured in case it helps);
- ``eager_ln_linear``: ``F.linear(F.layer_norm(x), W, b)``;
- ``tpl_ln_linear``: the current template (templates/layernorm_linear/kernel.py);
- ``tma_ln_fold``: gamma/beta folded into the weight once per weight (untimed, cached):
  ``Wf = W diag(gamma)`` rounded to the dtype, ``bf = b + W beta`` and ``s = rowsum(Wf)`` in
  fp32; per call a row-statistics kernel (mean, rstd; reads x once) and the TMA GEMM on the raw
  x with the epilogue ``y = rstd_i * (acc_ij - mean_i * s_j) + bf_j``;
- ``tma_ln_fold_inloop``: the same without the pre-pass: row sums and sums of squares are
  accumulated from the A tiles inside the GEMM's K loop (var = E[x^2] - mean^2, clamped at 0).

Each variant is warmed up (autotuning happens there), checked against the eager result
(max |error| relative to max |reference|; over 3e-2 for bf16, 1e-2 for fp16, 1e-4 for fp32 it is
reported as wrong and not timed), captured in a CUDA graph and timed with
``triton.testing.do_bench`` (L2 flushed between calls; median and 20/80th percentiles). If the
capture fails the plain call is timed and ``timing`` says so. ``max_rel_err_fp32`` is the error
against the same chain computed in fp32 from the same inputs.

Compilation: the Triton kernels are compiled first in a pool of worker processes (one job per
kernel, dtype and config; they fill Triton's on-disk cache, so the measuring process only loads
them); ``--jobs 0`` skips this. ``--budget-s`` stops starting new shapes once exceeded.

Usage:
    python3 bench/experiments/probe_gemm.py > gemm.jsonl     (needs CUDA; summary on stderr)
    TRITON_INTERPRET=1 python3 bench/experiments/probe_gemm.py --check
        (CPU, tiny shapes, correctness of every variant only; exit status 1 if any is wrong)

Output: one JSON object per line and variant on stdout (variant, shape, dtype, median_us,
p20_us, p80_us, tflops, ratio_vs_gemm = time / cublas_gemm time, max_rel_err, config, error).
"""

import argparse
import importlib.util
import json
import math
import multiprocessing as mp
import os
import sys
import time
import traceback
import types
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
ROOT = Path(__file__).resolve().parents[2]

SHAPES = [  # (M, K, N, dtype), in order of priority (--budget-s drops the tail)
    (8192, 4096, 4096, "bf16"), (8192, 1024, 4096, "bf16"), (4096, 768, 3072, "fp16"),
    (16, 4096, 4096, "bf16"), (4096, 768, 768, "bf16"), (6272, 384, 1536, "bf16"),
    (4096, 2048, 8192, "fp32"), (4096, 768, 3072, "fp32"),
]
CHECK_SHAPES = [(33, 64, 48), (16, 32, 32), (40, 72, 56)]  # the last: K tail (72 = 2*32 + 8)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOLERANCE = {"bf16": 3e-2, "fp16": 1e-2, "fp32": 1e-4}  # max |error| / max |reference|
DT_CODE = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}  # part of the autotune key
EPS = 1e-5


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


# --- the current templates (the baseline), loaded by path -------------------------------------

def _load_template(name):
    path = ROOT / "templates" / name / "kernel.py"
    spec = importlib.util.spec_from_file_location(f"tpl_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TEMPLATES, TEMPLATE_ERRORS = {}, {}
for _name in ("linear_gelu", "layernorm_linear"):
    try:
        TEMPLATES[_name] = _load_template(_name)
    except Exception as e:  # reported by the variants that need it
        TEMPLATE_ERRORS[_name] = f"loading templates/{_name}/kernel.py: {e!r}"


# --- interpreter shim ------------------------------------------------------------------------
# Triton 3.6's interpreter turns a runtime scalar into a loop bound with int() of a 1-element
# 1-d numpy array, which numpy 2.x rejects; the GPU kernels need runtime loop bounds (the
# persistent tile loop, the K loop), so under the interpreter only, index with .item().

if INTERPRET:
    try:
        import triton.runtime.interpreter as _interp

        _patch_lang_tensor = _interp._patch_lang_tensor

        def _patch_lang_tensor_item(tensor, scope):
            _patch_lang_tensor(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

        _interp._patch_lang_tensor = _patch_lang_tensor_item
    except Exception as e:
        log(f"interpreter shim not applied: {e!r}")


# --- TMA GEMM kernels ------------------------------------------------------------------------

_RNE_BF16 = tl.constexpr(INTERPRET)

# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps) and the M range / dtypes each group is for
TILES_LARGE_M = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (128, 128, 64, 3, 4),
                 (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4)]
TILES_SMALL_M = [(64, 32, 128, 4, 4), (64, 64, 128, 4, 4), (64, 128, 128, 3, 4), (16, 64, 128, 4, 4)]
TILES_FP32 = [(128, 128, 32, 3, 8), (64, 128, 32, 4, 4)]  # fp32 operands need 2x the shared memory
SMEM_BYTES = 232448  # H100/H200 opt-in shared memory per block
SMALL_M = 64


def _set_block_shapes(nargs):
    """Autotune pre_hook: the descriptors' block shapes follow the config's tiles."""
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["w_desc"].block_shape = [bn, bk]
    nargs["y_desc"].block_shape = [bm, bn]


def _tma_configs():
    """All configs; ``_prune_configs`` picks the group for the shape and dtype at autotune time."""
    if INTERPRET:
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4},
                              num_warps=4, num_stages=1, pre_hook=_set_block_shapes)]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8},
                          num_stages=s, num_warps=w, pre_hook=_set_block_shapes)
            for m, n, k, s, w in TILES_LARGE_M + TILES_SMALL_M + TILES_FP32]


def _config_fits(cfg, M, elem_bytes):
    """Whether a config is one to try for (M, dtype): its M group, and its pipelined operand
    tiles plus the TMA store tile within shared memory."""
    if INTERPRET:
        return True
    kw = cfg.kwargs
    tile = (kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], cfg.num_stages, cfg.num_warps)
    if M <= SMALL_M:
        group = tile in TILES_SMALL_M
    else:
        group = tile in TILES_LARGE_M or (elem_bytes == 4 and tile in TILES_FP32)
    smem = (cfg.num_stages * (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] + kw["BLOCK_M"] * kw["BLOCK_N"]) * elem_bytes
    return group and smem <= SMEM_BYTES


def _prune_configs(configs, named_args, **kwargs):
    M, elem_bytes = named_args["M"], named_args["a_desc"].base.element_size()
    kept = [c for c in configs if _config_fits(c, M, elem_bytes)]
    return kept or configs[:1]


@triton.jit
def _cast(y, dtype: tl.constexpr):
    """y (fp32) -> dtype, rounding to nearest even for bf16 on every backend (the templates')."""
    if _RNE_BF16 and dtype == tl.bfloat16:
        bits = y.to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        y = tl.where(y != y, y, bits.to(tl.float32, bitcast=True))
    return y.to(dtype)


@triton.jit
def _tile_coords(tile_id, num_m, num_n, GROUP_M: tl.constexpr):
    # grouped ordering: consecutive tiles share the same A rows (L2 reuse)
    in_group = GROUP_M * num_n
    first_m = (tile_id // in_group) * GROUP_M
    group_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % in_group) % group_m
    pid_n = (tile_id % in_group) // group_m
    return pid_m, pid_n


@triton.jit
def _mainloop(a_desc, w_desc, off_m, off_n, k_tiles, STATS: tl.constexpr, DOT_F32: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc = A[off_m:, :] @ W[off_n:, :]^T over k_tiles tiles of BLOCK_K (TMA zero-fills past
    the edges); with STATS also the row sums and sums of squares of the A tiles (fp32)."""
    acc = tl.full((BLOCK_M, BLOCK_N), 0, tl.float32)
    s1 = tl.full((BLOCK_M,), 0, tl.float32)
    s2 = tl.full((BLOCK_M,), 0, tl.float32)
    for ki in range(k_tiles):
        a = a_desc.load([off_m, ki * BLOCK_K])
        w = w_desc.load([off_n, ki * BLOCK_K])
        if STATS:
            af = a.to(tl.float32)
            s1 += tl.sum(af, axis=1)
            s2 += tl.sum(af * af, axis=1)
        if DOT_F32:  # fp32 operands (and everything under the interpreter: its bf16 dot is wrong)
            acc = tl.dot(a.to(tl.float32), w.to(tl.float32).T, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, w.T, acc)
    return acc, s1, s2


@triton.jit
def _epilogue(acc, s1, s2, off_m, off_n, M, N, K, eps, y_desc, BIAS, MEAN, RSTD, S,
              EPI: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """EPI 0: bias + erf GELU (the linear_gelu template's: round to the output dtype, then the
    GELU in fp32); 1: LayerNorm fold with precomputed row stats; 2: the fold with the stats from
    the K loop. One TMA store (clipped at the edges)."""
    rm = off_m + tl.arange(0, BLOCK_M)
    rn = off_n + tl.arange(0, BLOCK_N)
    nmask = rn < N
    bias = tl.load(BIAS + rn, mask=nmask, other=0.0).to(tl.float32)
    if EPI == 0:
        z = _cast(acc + bias[None, :], y_desc.dtype).to(tl.float32)
        z = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))
    else:
        if EPI == 1:
            mean = tl.load(MEAN + rm, mask=rm < M, other=0.0)
            rstd = tl.load(RSTD + rm, mask=rm < M, other=0.0)
        else:
            mean = s1 / K
            var = tl.maximum(s2 / K - mean * mean, 0.0)
            rstd = 1.0 / tl.sqrt(var + eps)
        s = tl.load(S + rn, mask=nmask, other=0.0)
        # sum_k LN(x)_ik W_jk = rstd_i * (sum_k x_ik Wf_jk - mean_i * s_j) + (W beta)_j
        z = rstd[:, None] * (acc - mean[:, None] * s[None, :]) + bias[None, :]
    y_desc.store([off_m, off_n], _cast(z, y_desc.dtype))


@triton.autotune(configs=_tma_configs(), key=["M", "N", "K", "DT", "EPI"],
                 prune_configs_by={"early_config_prune": _prune_configs})
@triton.jit
def _tma_gemm_kernel(a_desc, w_desc, y_desc, BIAS, MEAN, RSTD, S, M, N, K, eps,
                     DT: tl.constexpr, EPI: tl.constexpr, DOT_F32: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr):
    """One output tile per program."""
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = _tile_coords(tl.program_id(0), num_m, num_n, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc, s1, s2 = _mainloop(a_desc, w_desc, off_m, off_n, tl.cdiv(K, BLOCK_K), EPI == 2, DOT_F32,
                            BLOCK_M, BLOCK_N, BLOCK_K)
    _epilogue(acc, s1, s2, off_m, off_n, M, N, K, eps, y_desc, BIAS, MEAN, RSTD, S, EPI, BLOCK_M, BLOCK_N)


@triton.autotune(configs=_tma_configs(), key=["M", "N", "K", "DT", "EPI", "WS"],
                 prune_configs_by={"early_config_prune": _prune_configs})
@triton.jit
def _tma_persistent_kernel(a_desc, w_desc, y_desc, BIAS, MEAN, RSTD, S, M, N, K, eps,
                           DT: tl.constexpr, EPI: tl.constexpr, DOT_F32: tl.constexpr,
                           NUM_SMS: tl.constexpr, WS: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr):
    """One program per SM looping over the output tiles (the persistent-matmul tutorial's loop;
    flatten=True lets Triton pipeline across tiles)."""
    start = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    # the epilogue recomputes its tile from its own counter (the tutorial's workaround for a
    # value used in both the prologue and the epilogue of the flattened loop)
    tile_c = start - NUM_SMS
    for tile in tl.range(start, num_m * num_n, NUM_SMS, flatten=True, warp_specialize=WS):
        pid_m, pid_n = _tile_coords(tile, num_m, num_n, GROUP_M)
        acc, s1, s2 = _mainloop(a_desc, w_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, k_tiles, EPI == 2, DOT_F32,
                                BLOCK_M, BLOCK_N, BLOCK_K)
        tile_c += NUM_SMS
        pid_m, pid_n = _tile_coords(tile_c, num_m, num_n, GROUP_M)
        _epilogue(acc, s1, s2, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, K, eps, y_desc, BIAS, MEAN, RSTD, S,
                  EPI, BLOCK_M, BLOCK_N)


@triton.jit
def _row_stats_kernel(X, MEAN, RSTD, K, sxm, eps, BLOCK_K: tl.constexpr):
    """mean and rstd of one row (fp32, two-pass over the row held in registers: x read once)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_K)
    mask = cols < K
    x = tl.load(X + row * sxm + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / K
    d = tl.where(mask, x - mean, 0.0)
    tl.store(MEAN + row, mean)
    tl.store(RSTD + row, 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / K + eps))


# --- host wrappers ---------------------------------------------------------------------------

NUM_SMS = 3 if INTERPRET else None  # several tiles per program under the interpreter too


def _num_sms():
    global NUM_SMS
    if NUM_SMS is None:
        NUM_SMS = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return NUM_SMS


def _descriptor(t, name):
    """A TMA descriptor over a 2-D tensor; TMA needs a 16-byte aligned base and row stride and
    a contiguous last dim (the block shape is set per config by the pre_hook)."""
    size = t.element_size()
    if t.dim() != 2 or t.stride(1) != 1 or (t.stride(0) * size) % 16 or t.data_ptr() % 16:
        raise ValueError(f"TMA needs {name} 2-D, last stride 1, 16-byte aligned base and row stride: "
                         f"shape {tuple(t.shape)} strides {t.stride()} dtype {t.dtype}")
    return TensorDescriptor.from_tensor(t, [1, 1])


def tma_gemm(x, w, bias, epi, persistent=False, ws=False, mean=None, rstd=None, s=None, eps=EPS):
    """y = epilogue(x @ w^T) with the TMA kernels; returns (y, the autotuner's best config)."""
    M, K = x.shape
    N = w.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    descs = (_descriptor(x, "x"), _descriptor(w, "W"), _descriptor(y, "y"))
    vecs = (bias, bias if mean is None else mean, bias if rstd is None else rstd, bias if s is None else s)
    meta = dict(DT=DT_CODE[x.dtype], EPI=epi, DOT_F32=INTERPRET or x.dtype == torch.float32)
    tiles = lambda m: triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"])  # noqa: E731
    if persistent:
        n_sms = _num_sms()
        kernel = _tma_persistent_kernel
        kernel[lambda m: (min(n_sms, tiles(m)),)](*descs, *vecs, M, N, K, eps, NUM_SMS=n_sms, WS=ws, **meta)
    else:
        kernel = _tma_gemm_kernel
        kernel[lambda m: (tiles(m),)](*descs, *vecs, M, N, K, eps, **meta)
    return y, kernel.best_config


def row_stats(x, eps=EPS):
    M, K = x.shape
    if x.stride(1) != 1 or K > 32768:
        raise ValueError("row_stats: needs a contiguous last dim and K <= 32768")
    mean = torch.empty(M, dtype=torch.float32, device=x.device)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    block = triton.next_power_of_2(K)
    _row_stats_kernel[(M,)](x, mean, rstd, K, x.stride(0), eps, BLOCK_K=block,
                            num_warps=4 if block <= 1024 else 8)
    return mean, rstd


def fold_weights(w, b, gamma, beta):
    """Once per weight: Wf = W diag(gamma) (dtype), bf = b + W beta and s = rowsum(Wf) (fp32)."""
    wf = (w.float() * gamma.float()[None, :]).to(w.dtype)
    bf = (b.float() + w.float() @ beta.float()).contiguous()
    s = wf.float().sum(1).contiguous()
    return wf.contiguous(), bf, s


# --- inputs and variants ---------------------------------------------------------------------

def make_inputs(M, K, N, dtype, device, family):
    g = torch.Generator(device=device).manual_seed(1234 + M + 7 * K + 13 * N)

    def randn(*shape, mean=0.0, std=1.0):
        return (torch.randn(*shape, generator=g, device=device, dtype=torch.float32) * std + mean).to(dtype)

    inp = {"w": randn(N, K, std=1.0 / math.sqrt(K)), "b": randn(N, std=0.2)}
    if family == "gelu":
        inp["x"] = randn(M, K)
    else:  # a non-zero mean: the fold's cancellation (acc - mean * s) matters
        inp["x"] = randn(M, K, mean=-2.3, std=0.5)
        inp["gamma"] = randn(K, mean=1.0, std=0.2)
        inp["beta"] = randn(K, std=0.2)
    return inp


def reference_fp32(inp, family, approximate="none"):
    """The chain computed in fp32 from the same (rounded) inputs."""
    x, w, b = inp["x"].float(), inp["w"].float(), inp["b"].float()
    if family == "gelu":
        return F.gelu(F.linear(x, w, b), approximate=approximate)
    return F.linear(F.layer_norm(x, (x.shape[1],), inp["gamma"].float(), inp["beta"].float(), EPS), w, b)


def _tuned_config(tpl):
    """The tile the template tuned last (its gemm block's cache), shaped like a triton.Config
    for config_str: the templates no longer use @triton.autotune."""
    if not tpl._GEMM_TUNED:
        return None
    bm, bn, bk, stages, warps = list(tpl._GEMM_TUNED.values())[-1]
    return types.SimpleNamespace(kwargs={"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_stages=stages,
                                 num_warps=warps)


def _template(name):
    if name not in TEMPLATES:
        raise RuntimeError(TEMPLATE_ERRORS.get(name, f"template {name} not loaded"))
    return TEMPLATES[name]


def build_variant(variant, inp):
    """(fn, best-config getter, autotuned kernel or None): fn() runs the variant once."""
    x, w, b = inp["x"], inp["w"], inp["b"]
    cfg = {}

    def remember(out):
        y, cfg["best"] = out
        return y

    if variant == "cublas_gemm":
        return (lambda: F.linear(x, w, b)), None, None
    if variant == "eager_linear_gelu":
        return (lambda: F.gelu(F.linear(x, w, b))), None, None
    if variant == "addmm_act":
        if not hasattr(torch, "_addmm_activation"):
            raise RuntimeError("torch._addmm_activation does not exist")
        return (lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True)), None, None
    if variant == "tpl_linear_gelu":
        tpl = _template("linear_gelu")
        return (lambda: tpl.linear_gelu(x, w, b)), lambda: _tuned_config(tpl), None
    if variant in ("tma_linear_gelu", "tma_persistent_linear_gelu", "tma_persistent_ws_linear_gelu"):
        persistent = variant != "tma_linear_gelu"
        ws = variant == "tma_persistent_ws_linear_gelu"
        fn = lambda: remember(tma_gemm(x, w, b, 0, persistent=persistent, ws=ws))  # noqa: E731
        return fn, lambda: cfg.get("best"), _tma_persistent_kernel if persistent else _tma_gemm_kernel

    gamma, beta = inp["gamma"], inp["beta"]
    if variant == "eager_ln_linear":
        return (lambda: F.linear(F.layer_norm(x, (x.shape[1],), gamma, beta, EPS), w, b)), None, None
    if variant == "tpl_ln_linear":
        tpl = _template("layernorm_linear")
        return (lambda: tpl.layernorm_linear(x, gamma, beta, w, b, EPS)), lambda: _tuned_config(tpl), None
    if variant in ("tma_ln_fold", "tma_ln_fold_inloop"):
        if "fold" not in inp:  # once per weight, outside the timed region
            inp["fold"] = fold_weights(w, b, gamma, beta)
        wf, bf, s = inp["fold"]
        if variant == "tma_ln_fold":
            def fn():
                mean, rstd = row_stats(x)
                return remember(tma_gemm(x, wf, bf, 1, mean=mean, rstd=rstd, s=s))
        else:
            def fn():
                return remember(tma_gemm(x, wf, bf, 2, s=s))
        return fn, lambda: cfg.get("best"), _tma_gemm_kernel
    raise ValueError(f"unknown variant {variant}")


GELU_VARIANTS = ["cublas_gemm", "eager_linear_gelu", "addmm_act", "tpl_linear_gelu", "tma_linear_gelu",
                 "tma_persistent_linear_gelu", "tma_persistent_ws_linear_gelu"]
LN_VARIANTS = ["eager_ln_linear", "tpl_ln_linear", "tma_ln_fold", "tma_ln_fold_inloop"]
EAGER_REFERENCE = {"gelu": "eager_linear_gelu", "ln": "eager_ln_linear"}
TRITON_VARIANTS = {"tpl_linear_gelu", "tma_linear_gelu", "tma_persistent_linear_gelu",
                   "tma_persistent_ws_linear_gelu", "tpl_ln_linear", "tma_ln_fold", "tma_ln_fold_inloop"}


def family_of(variant):
    return "gelu" if variant in GELU_VARIANTS else "ln"


def config_str(cfg):
    if cfg is None:
        return None
    kw = ",".join(f"{k}={v}" for k, v in cfg.kwargs.items())
    return f"{kw},stages={cfg.num_stages},warps={cfg.num_warps}"


def errors(y, ref):
    d = (y.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    return d, d / max(scale, 1e-30)


# --- compiling ahead in worker processes -----------------------------------------------------

_WORKER_INPUTS = {}


def _precompile_job(job):
    """Run one variant once with its autotuner reduced to one config: compiles it into
    Triton's on-disk cache. Returns (job, error or None); never raises."""
    shape, variant, cfg_index = job
    try:
        M, K, N, dt = shape
        key = (shape, family_of(variant))
        if key not in _WORKER_INPUTS:
            _WORKER_INPUTS.clear()
            device = "cpu" if INTERPRET else "cuda"
            _WORKER_INPUTS[key] = make_inputs(M, K, N, DTYPES[dt], device, family_of(variant))
        fn, _, kernel = build_variant(variant, _WORKER_INPUTS[key])
        if kernel is not None and cfg_index is not None:
            if not hasattr(kernel, "all_configs"):  # this process's kernels only
                kernel.all_configs = list(kernel.configs)
            kernel.configs = [kernel.all_configs[cfg_index]]
        fn()
        if not INTERPRET:
            torch.cuda.synchronize()
        return job, None
    except BaseException as e:  # noqa: BLE001 (a worker must always answer)
        return job, repr(e)


def plan_precompile(shapes, variants):
    """One job per distinct compiled kernel: (variant, dtype, config) for the TMA kernels (M, N
    and K are runtime arguments), (variant, dtype, K, config) for the templates (K is constexpr)."""
    jobs, seen = [], set()
    for shape in shapes:
        M, K, N, dt = shape
        elem = DTYPES[dt].itemsize
        for variant in variants:
            if variant not in TRITON_VARIANTS:
                continue
            try:
                _, _, kernel = build_variant(variant, _fake_inputs(variant))
            except Exception:
                continue
            if kernel is None:  # the templates tune and compile in the measuring process
                continue
            for i, cfg in enumerate(kernel.configs):
                if variant.startswith("tma_"):
                    if not _config_fits(cfg, M, elem):
                        continue
                    key = (variant, dt, i)
                else:
                    key = (variant, dt, K, i)
                if key not in seen:
                    seen.add(key)
                    jobs.append((shape, variant, i))
    return jobs


def _fake_inputs(variant):
    # build_variant only needs the tensors to exist when planning (nothing is run)
    t = torch.zeros(1)
    return {"x": t, "w": t, "b": t, "gamma": t, "beta": t, "fold": (t, t, t)}


def precompile(shapes, variants, jobs, deadline_s, stall_s=60.0):
    """Runs the plan in a process pool until done, past deadline_s, or no job has finished for
    stall_s (a crashed worker's job never answers); then the pool is terminated."""
    plan = plan_precompile(shapes, variants)
    if not plan or jobs <= 0:
        return
    t0 = time.time()
    log(f"precompiling {len(plan)} kernel configs in {jobs} processes (at most {deadline_s:.0f} s)")
    done, failed, last = set(), 0, time.time()
    pool = None
    try:
        pool = mp.get_context("spawn").Pool(jobs)
        pending = [pool.apply_async(_precompile_job, (job,)) for job in plan]
        while len(done) < len(pending):
            now = time.time()
            if now - t0 > deadline_s or now - last > stall_s:
                log(f"precompile: stopped after {now - t0:.0f} s with {len(pending) - len(done)} jobs left; "
                    "those compile when first used")
                break
            for i, r in enumerate(pending):
                if i in done or not r.ready():
                    continue
                done.add(i)
                last = now
                job, err = r.get()
                if err is not None:  # e.g. a config out of shared memory: the autotuner skips it later
                    failed += 1
                    if failed <= 5:
                        log(f"precompile {job[1]} {job[0]} config {job[2]}: {err[:300]}")
            time.sleep(0.2)
    except Exception as e:
        log(f"precompile failed: {e!r}")
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    log(f"precompile done in {time.time() - t0:.1f} s ({len(done)} jobs, {failed} failed)")


# --- measuring -------------------------------------------------------------------------------

def time_graph(fn):
    """Median/p20/p80 in us of fn replayed from a CUDA graph, and how it was timed."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        ms = triton.testing.do_bench(graph.replay, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
        del graph
        return [v * 1e3 for v in ms], "graph", None
    except Exception as e:
        torch.cuda.synchronize()
        ms = triton.testing.do_bench(fn, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
        return [v * 1e3 for v in ms], "plain", f"graph capture failed: {e!r}"[:300]


def run_shape(shape, variants, device, check, results):
    """All variants of one shape; one JSON line each. Returns the number of wrong variants."""
    M, K, N, dt = shape
    dtype = DTYPES[dt]
    tol = TOLERANCE[dt]
    wrong = 0
    gemm_us = None
    for family, names in (("gelu", GELU_VARIANTS), ("ln", LN_VARIANTS)):
        names = [v for v in names if v in variants]
        if not names:
            continue
        inp = make_inputs(M, K, N, dtype, device, family)
        ref, ref32, ref_tanh = None, None, None
        try:
            ref32 = reference_fp32(inp, family)
            if family == "gelu":
                ref_tanh = reference_fp32(inp, family, "tanh")
            eager_fn, _, _ = build_variant(EAGER_REFERENCE[family], inp)
            ref = eager_fn()
        except Exception as e:
            log(f"{shape} {family}: reference failed: {e!r}")
        for variant in names:
            rec = {"variant": variant, "shape": f"{M}x{K}x{N}", "M": M, "K": K, "N": N, "dtype": dt,
                   "median_us": None, "p20_us": None, "p80_us": None, "tflops": None, "ratio_vs_gemm": None,
                   "max_abs_err": None, "max_rel_err": None, "max_rel_err_fp32": None, "config": None,
                   "timing": None, "error": None}
            try:
                fn, best, _ = build_variant(variant, inp)
                y = fn()  # warm-up: autotuning happens here
                y = fn()
                if device == "cuda":
                    torch.cuda.synchronize()
                rec["config"] = config_str(best()) if best else None
                if ref is None:
                    raise RuntimeError("no eager reference")
                target, target32 = ref, ref32
                if variant == "cublas_gemm":  # the plain linear: its own references
                    target = F.linear(inp["x"], inp["w"], inp["b"])
                    target32 = F.linear(inp["x"].float(), inp["w"].float(), inp["b"].float())
                if variant == "addmm_act":
                    # the cuBLASLt epilogue may be the tanh GELU: judge it against the GELU it computes
                    e_erf = errors(y, ref32)[1]
                    e_tanh = errors(y, ref_tanh)[1]
                    # (decisive only where rounding does not hide the difference: the fp32 shapes)
                    rec["gelu_match"] = ("tanh" if e_tanh < 0.5 * e_erf else
                                         "erf" if e_erf < 0.5 * e_tanh else "unclear")
                    rec["rel_err_vs_erf_fp32"], rec["rel_err_vs_tanh_fp32"] = e_erf, e_tanh
                    if rec["gelu_match"] == "tanh":
                        target = ref_tanh
                rec["max_abs_err"], rec["max_rel_err"] = errors(y, target)
                rec["max_rel_err_fp32"] = errors(y, target32)[1] if variant != "addmm_act" else min(e_erf, e_tanh)
                if not rec["max_rel_err"] <= tol:
                    rec["error"] = f"wrong: max_rel_err {rec['max_rel_err']:.3g} > {tol:g}"
                    wrong += 1
                elif not check:
                    (med, p20, p80), rec["timing"], note = time_graph(fn)
                    if note:
                        rec["note"] = note
                    rec.update(median_us=med, p20_us=p20, p80_us=p80, tflops=2.0 * M * N * K / (med * 1e-6) / 1e12)
                    if variant == "cublas_gemm":
                        gemm_us = med
                    if gemm_us:
                        rec["ratio_vs_gemm"] = med / gemm_us
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {e}"[:1000]
                log(f"{variant} {shape}: {rec['error']}")
                if os.environ.get("PROBE_TRACEBACK"):
                    traceback.print_exc()
                wrong += 1
            print(json.dumps(rec), flush=True)
            results.append(rec)
        del inp, ref, ref32, ref_tanh
        if device == "cuda":
            torch.cuda.empty_cache()
    return wrong


def summary(results, check):
    log("")
    head = f"{'variant':32} {'shape':>16} {'dt':>4} {'median_us':>10} {'TFLOP/s':>8} {'x gemm':>7} {'rel_err':>9}  config / error"
    log(head)
    log("-" * len(head))
    for r in results:
        fmt = lambda v, f: (f % v) if v is not None else "-"  # noqa: E731
        tail = r["error"] or r.get("config") or ""
        if r.get("gelu_match"):
            tail = f"gelu={r['gelu_match']} " + tail
        log(f"{r['variant']:32} {r['shape']:>16} {r['dtype']:>4} {fmt(r['median_us'], '%.1f'):>10} "
            f"{fmt(r['tflops'], '%.1f'):>8} {fmt(r['ratio_vs_gemm'], '%.3f'):>7} {fmt(r['max_rel_err'], '%.2e'):>9}  {tail}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true",
                   help="correctness only on tiny shapes (run with TRITON_INTERPRET=1 on the CPU)")
    p.add_argument("--shapes", default="",
                   help="comma-separated MxKxN[:dtype] filters, e.g. 8192x4096x4096:bf16,16x4096x4096")
    p.add_argument("--variants", default="", help="comma-separated variant names (default: all)")
    p.add_argument("--budget-s", type=float, default=240.0, help="stop starting new shapes after this many seconds")
    p.add_argument("--jobs", type=int, default=None,
                   help="precompile processes (default: min(8, cores/2) on the GPU, 0 with --check)")
    args = p.parse_args()
    t0 = time.time()

    if args.check:
        shapes = [(m, k, n, dt) for m, k, n in CHECK_SHAPES for dt in DTYPES]
        device = "cuda" if (torch.cuda.is_available() and not INTERPRET) else "cpu"
    else:
        shapes = list(SHAPES)
        device = "cuda"
        if not torch.cuda.is_available():
            log("no CUDA device: run with --check under TRITON_INTERPRET=1 instead")
            return 2
    if args.shapes:
        wanted = [s.strip() for s in args.shapes.split(",") if s.strip()]
        shapes = [s for s in shapes if any(
            w.split(":")[0] == f"{s[0]}x{s[1]}x{s[2]}" and (":" not in w or w.split(":")[1] == s[3]) for w in wanted)]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()] or GELU_VARIANTS + LN_VARIANTS
    unknown = [v for v in variants if v not in GELU_VARIANTS + LN_VARIANTS]
    if unknown:
        log(f"unknown variants: {unknown}")
        return 2

    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        log(f"device {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, triton {triton.__version__}")
    jobs = args.jobs if args.jobs is not None else (0 if args.check else min(8, max(1, (os.cpu_count() or 2) // 2)))
    precompile(shapes, variants, jobs, deadline_s=0.5 * args.budget_s)

    results, wrong = [], 0
    for i, shape in enumerate(shapes):
        elapsed = time.time() - t0
        if elapsed > args.budget_s:
            skipped = shapes[i:]
            log(f"budget of {args.budget_s:.0f} s exceeded after {elapsed:.0f} s; skipped shapes: {skipped}")
            for M, K, N, dt in skipped:
                print(json.dumps({"variant": None, "shape": f"{M}x{K}x{N}", "M": M, "K": K, "N": N, "dtype": dt,
                                  "error": "skipped: time budget"}), flush=True)
            break
        log(f"shape M={shape[0]} K={shape[1]} N={shape[2]} {shape[3]} ({elapsed:.0f} s elapsed)")
        wrong += run_shape(shape, variants, device, args.check, results)

    summary(results, args.check)
    log(f"done in {time.time() - t0:.0f} s; {wrong} variant runs wrong or failed")
    if args.check and wrong:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
