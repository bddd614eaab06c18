"""LayerNorm folded into the following Linear: ``y = layer_norm(x) @ W^T + b`` without
materialising the normalised activations.

Replaces ``aten::layer_norm`` (``native_layer_norm``) -> ``aten::linear`` (``addmm``/``mm``), the
fusion Inductor cannot do (a LayerNorm needs a whole-row reduction before any GEMM tile of its
output is usable). Two ways to fold it, both here, measured against each other:

- ``variant="fold"`` (the default): gamma and beta folded into the weights, once per weight
  (``fold_weights``): ``W' = W diag(gamma)`` rounded to W's dtype, ``b' = b + W beta`` and
  ``s = rowsum(W')`` in fp32. Per call: a row-statistics kernel (mean and rstd, x read once),
  then a plain GEMM of the *raw* x with W' and a row-wise epilogue
  ``y = rstd_i * (acc_ij - mean_i * s_j) + b'_j``. The GEMM's A operand goes from memory
  to the tensor cores untouched; for fp16/bf16 operands that meet TMA's alignment the GEMM
  loads through TMA tensor descriptors (Hopper's bulk copy engine).
- ``variant="normalize"``: normalise on load: each ``[BLOCK_M, BLOCK_K]`` tile of x is read,
  normalised with the row stats and gamma/beta, rounded to x's dtype (as eager's LayerNorm
  output is) and fed to ``tl.dot``.

Measured on an H200 (bf16, CUDA-graph replays under do_bench; cuBLAS = ``F.linear`` alone on an
already normalised input; bench/experiments/probe_gemm.py): M x K x N = 8192x1024x4096: fold
123 us, normalize 177 us, eager 127 us, cuBLAS 118.5 us; 4096x768x3072 fp16: 43 / 61 / 47 / 36;
16x4096x4096 (decode): 25 / 38 / 30 / 20; 8192x4096x4096: 519 / 643 / 457 / 396. Fold is the
faster variant at every shape (normalising on load puts the A tile through registers on every
K step of every N tile) and beats eager except at the largest GEMM, where the Triton GEMM
itself is 1.16-1.3x cuBLAS. So fold is the default.

Numerics of fold: the GEMM sees raw x, so its rounding error scales with ``|x|`` rather than
with the normalised row: with rows of mean -2.3 and std 0.5 the bf16 error against an fp32
reference is about 2x eager's (max 5.8e-3 of max|y| against eager's 2.9e-3; tolerance 2e-2).
A row with zero variance would amplify the cancellation ``acc - mean * s`` by 1/sqrt(eps):
the stats kernel of the fold path marks such rows (rstd = 0), whose output is then exactly
``b'`` as in eager. Rows of tiny but non-zero variance keep an amplified error; use
``variant="normalize"`` where that matters.

- Tiles BLOCK_M x BLOCK_N x BLOCK_K, grouped program ordering (GROUP_M), autotuned over tiles,
  num_warps and num_stages keyed on (M, N, K), the candidates pruned by M (small-M tiles for
  decode shapes) and by shared memory; one fixed config under ``TRITON_INTERPRET=1``. K is a
  compile-time constant (static K loop, pipelined by Triton; also avoids ``range`` over a
  runtime bound, which Triton 3.6's interpreter with numpy 2.4 rejects).
- fp32 / fp16 / bf16; x read through its strides; W ``[N, K]`` any strides; fp32 operands use
  ``input_precision="ieee"`` (and the pointer-based GEMM: TMA with fp32 operands measured 20-50x
  slower); under the interpreter operands are upcast to fp32 before ``tl.dot`` (its bf16 dot
  is wrong), which is exact.
- Several Linears reading one LayerNorm (Q, K, V) can share one stats pass:
  ``ln_stats(x, eps)`` then ``layernorm_linear(..., stats=(mean, rstd))``.
- Forward only. ``LayerNormLinear`` runs the eager chain when autograd needs a graph and caches
  the folded weights (refolded when a parameter changes).

Interpreter-safe: builtins only, ``tl.full``, no bf16 arithmetic, ``while`` loops for runtime
lengths; TMA descriptors are host-side ``TensorDescriptor`` objects, which the interpreter runs.
"""

import os

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# FUSEADVISE_AUTOTUNE=0: only the first (safe) GPU config, e.g. for quick GPU test runs
AUTOTUNE = os.environ.get("FUSEADVISE_AUTOTUNE", "1") != "0"
MAX_BLOCK_K = 128 if INTERPRET else 4096
VARIANTS = ("fold", "normalize")


# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps), after the Triton matmul tutorials; the
# first of each list is the FUSEADVISE_AUTOTUNE=0 config (it fits shared memory for fp32 too)
# (the large-M list holds the winners of the H200 probe, bench/experiments/probe_gemm.py: few
# candidates keep the autotuning, one compile each, short)
TILES_LARGE_M = [(64, 128, 32, 4, 4), (128, 256, 64, 3, 8), (128, 128, 64, 3, 4), (128, 64, 64, 4, 4),
                 (64, 64, 64, 4, 4), (128, 64, 32, 4, 4)]
TILES_SMALL_M = [(16, 64, 128, 4, 4), (64, 32, 128, 4, 4), (64, 64, 128, 4, 4), (16, 128, 64, 4, 4)]
SMALL_M = 64
SMEM_BYTES = 232448  # H100/H200 opt-in shared memory per block


def _set_block_shapes(nargs):
    """Autotune pre_hook of the TMA kernel: the descriptors' block shapes follow the tiles."""
    if "a_desc" in nargs:
        bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
        nargs["a_desc"].block_shape = [bm, bk]
        nargs["w_desc"].block_shape = [bn, bk]
        nargs["y_desc"].block_shape = [bm, bn]


def _configs():
    if INTERPRET:
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}, num_warps=4, num_stages=1,
                              pre_hook=_set_block_shapes)]
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_stages=s, num_warps=w,
                             pre_hook=_set_block_shapes)
               for m, n, k, s, w in TILES_LARGE_M + TILES_SMALL_M]
    return configs if AUTOTUNE else configs[:1]


def _prune(configs, named_args, **kwargs):
    """The tiles worth trying for this M (decode-size M gets the small-M tiles) whose pipelined
    operand tiles fit shared memory; the first config when none does."""
    if INTERPRET or not AUTOTUNE:
        return configs[:1]
    M, K = named_args["M"], kwargs.get("K", named_args.get("K"))
    es = 4 if kwargs.get("DOT_F32") else 2
    group = TILES_SMALL_M if M <= SMALL_M else TILES_LARGE_M
    kept = []
    for c in configs:
        kw = c.kwargs
        tile = (kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], c.num_stages, c.num_warps)
        smem = (c.num_stages * (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] + kw["BLOCK_M"] * kw["BLOCK_N"]) * es
        if tile in group and smem <= SMEM_BYTES and (K is None or kw["BLOCK_K"] <= max(32, triton.next_power_of_2(K))):
            kept.append(c)
    return kept or configs[:1]


# --- fa:shared cast ---
# Triton 3.6's interpreter casts fp32 -> bf16 by truncation; the GPU rounds to nearest even.
# Under the interpreter, _cast rounds explicitly so both give the same bits.
_RNE_BF16 = tl.constexpr(INTERPRET)


@triton.jit
def _cast(y, dtype: tl.constexpr):
    """y (fp32) -> dtype, rounding to nearest even for bf16 on every backend."""
    if _RNE_BF16 and dtype == tl.bfloat16:
        bits = y.to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        y = tl.where(y != y, y, bits.to(tl.float32, bitcast=True))
    return y.to(dtype)
# --- fa:end cast ---


@triton.jit
def _ln_stats_kernel(X, MEAN, RSTD, K, sxm, sxk, eps, FLAT_ZERO: tl.constexpr, SINGLE: tl.constexpr,
                     BLOCK_K: tl.constexpr):
    """mean and rstd of one row in fp32, two-pass (mean, then the variance of x - mean). With
    FLAT_ZERO a row of zero variance stores rstd = 0 (the fold's epilogue then returns b')."""
    row = tl.program_id(0).to(tl.int64)
    X += row * sxm
    if SINGLE:  # the whole row in registers: x read once
        cols = tl.arange(0, BLOCK_K)
        x = tl.load(X + cols * sxk, mask=cols < K, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / K
        d = tl.where(cols < K, x - mean, 0.0)
        var = tl.sum(d * d, axis=0) / K
    else:
        acc = tl.full([BLOCK_K], 0, tl.float32)
        start = 0
        while start < K:
            cols = start + tl.arange(0, BLOCK_K)
            acc += tl.load(X + cols * sxk, mask=cols < K, other=0.0).to(tl.float32)
            start += BLOCK_K
        mean = tl.sum(acc, axis=0) / K
        acc = tl.full([BLOCK_K], 0, tl.float32)
        start = 0
        while start < K:
            cols = start + tl.arange(0, BLOCK_K)
            x = tl.load(X + cols * sxk, mask=cols < K, other=0.0).to(tl.float32)
            d = tl.where(cols < K, x - mean, 0.0)
            acc += d * d
            start += BLOCK_K
        var = tl.sum(acc, axis=0) / K
    rstd = 1.0 / tl.sqrt(var + eps)
    if FLAT_ZERO:
        rstd = tl.where(var == 0.0, 0.0, rstd)
    tl.store(MEAN + row, mean)
    tl.store(RSTD + row, rstd)


@triton.jit
def _tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's output tile, in grouped order: consecutive programs share A rows (L2)."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_n
    first_m = (pid // in_group) * GROUP_M
    group_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m
    return pid_m, pid_n


@triton.jit
def _fold_epilogue(acc, rm, rn, M, N, MEAN, RSTD, S, BF, HAS_BIAS: tl.constexpr):
    """sum_k LN(x)_ik W_jk + b_j = rstd_i * (sum_k x_ik W'_jk - mean_i * s_j) + b'_j (fp32)."""
    mean = tl.load(MEAN + rm, mask=rm < M, other=0.0)
    rstd = tl.load(RSTD + rm, mask=rm < M, other=0.0)
    s = tl.load(S + rn, mask=rn < N, other=0.0)
    y = rstd[:, None] * (acc - mean[:, None] * s[None, :])
    if HAS_BIAS:
        y += tl.load(BF + rn, mask=rn < N, other=0.0)[None, :]
    return y


@triton.autotune(configs=_configs(), key=["M", "N", "K"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _fold_tma_kernel(a_desc, w_desc, y_desc, MEAN, RSTD, S, BF, M, N, K: tl.constexpr,
                     HAS_BIAS: tl.constexpr, DOT_F32: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr):
    """variant="fold" through TMA: x [M, K] and W' [N, K] tiles arrive by tensor descriptor
    (zero-filled past the edges, so nothing is masked), y leaves by one clipped TMA store."""
    pid_m, pid_n = _tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.full((BLOCK_M, BLOCK_N), 0, tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = a_desc.load([off_m, k0])
        w = w_desc.load([off_n, k0])
        if DOT_F32:  # under the interpreter (its bf16 dot is wrong)
            acc = tl.dot(a.to(tl.float32), w.to(tl.float32).T, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, w.T, acc)
    rm = off_m + tl.arange(0, BLOCK_M)
    rn = off_n + tl.arange(0, BLOCK_N)
    y = _fold_epilogue(acc, rm, rn, M, N, MEAN, RSTD, S, BF, HAS_BIAS)
    y_desc.store([off_m, off_n], _cast(y, y_desc.dtype))


@triton.autotune(configs=_configs(), key=["M", "N", "K"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _ln_linear_kernel(A, MEAN, RSTD, G, BETA, W, BIAS, Y, M, N, K: tl.constexpr,
                      sam, sak, swn, swk, sym, syn,
                      FOLD: tl.constexpr, HAS_G: tl.constexpr, HAS_BETA: tl.constexpr, HAS_BIAS: tl.constexpr,
                      DOT_F32: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    """Pointer-based GEMM for both variants (any strides, fp32 operands). FOLD: W is W', the
    A tiles go to tl.dot as loaded and the fold epilogue applies (G = s, BIAS = b'); else the
    A tiles are normalised on load."""
    pid_m, pid_n = _tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    mean = tl.load(MEAN + rm % M)
    rstd = tl.load(RSTD + rm % M)
    # rows/cols past M/N wrap around (their results are never stored), so only K needs a mask,
    # and none at all when BLOCK_K divides K (as in the Triton matmul tutorial)
    ra = (rm % M).to(tl.int64)
    rb = (rn % N).to(tl.int64)
    a_ptr = A + ra[:, None] * sam + rk[None, :] * sak
    w_ptr = W + rb[None, :] * swn + rk[:, None] * swk  # the [BLOCK_K, BLOCK_N] tile of W^T
    acc = tl.full((BLOCK_M, BLOCK_N), 0, tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        kmask = kk < K
        if K % BLOCK_K == 0:
            a = tl.load(a_ptr)
            b = tl.load(w_ptr)
        else:
            a = tl.load(a_ptr, mask=kmask[None, :], other=0.0)
            b = tl.load(w_ptr, mask=kmask[:, None], other=0.0)
        if not FOLD:
            # normalise on load: (x - mean) * rstd * gamma + beta, rounded like eager's LN output
            a = (a.to(tl.float32) - mean[:, None]) * rstd[:, None]
            if HAS_G:
                a = a * tl.load(G + kk, mask=kmask, other=0.0).to(tl.float32)[None, :]
            if HAS_BETA:
                a = a + tl.load(BETA + kk, mask=kmask, other=0.0).to(tl.float32)[None, :]
            if K % BLOCK_K != 0:
                a = tl.where(kmask[None, :], a, 0.0)
            a = _cast(a, A.dtype.element_ty)
        if DOT_F32:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a.to(W.dtype.element_ty), b, acc)
        a_ptr += BLOCK_K * sak
        w_ptr += BLOCK_K * swk

    if FOLD:
        acc = _fold_epilogue(acc, rm, rn, M, N, MEAN, RSTD, G, BIAS, HAS_BIAS)
    elif HAS_BIAS:
        acc += tl.load(BIAS + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(Y + rm.to(tl.int64)[:, None] * sym + rn[None, :] * syn, _cast(acc, Y.dtype.element_ty), mask=mask)


# --- fa:shared rows ---
def _rows(t, view_only=False):
    """A 2-D [rows, N] view of t; a copy only when no such view exists (never for outputs)."""
    if t.dim() == 2:
        return t
    n = t.shape[-1] if t.dim() > 0 else 1
    try:
        return t.view(-1, n)
    except RuntimeError:
        if view_only:
            raise ValueError("output must be viewable as [rows, N]")
        return t.reshape(-1, n)
# --- fa:end rows ---


def _stats(a, eps, flat_zero):
    M, K = a.shape
    mean = torch.empty(M, dtype=torch.float32, device=a.device)
    rstd = torch.empty(M, dtype=torch.float32, device=a.device)
    if M and K:
        block = min(triton.next_power_of_2(K), MAX_BLOCK_K)
        _ln_stats_kernel[(M,)](a, mean, rstd, K, a.stride(0), a.stride(1), float(eps),
                               FLAT_ZERO=flat_zero, SINGLE=K <= block, BLOCK_K=block,
                               num_warps=4 if block <= 1024 else 8)
    return mean, rstd


def ln_stats(x, eps=1e-5):
    """(mean, rstd) of each row of x over the last dim, fp32, shape [rows]."""
    return _stats(_rows(x), eps, False)


def fold_weights(ln_weight, ln_bias, weight, bias=None):
    """The weights of variant="fold", computed once per weight: ``(W', b', s)`` with
    ``W' = W diag(gamma)`` in W's dtype, ``b' = b + W beta`` and ``s = rowsum(W')`` in fp32
    (``b'`` is None when there is neither a Linear bias nor a LayerNorm bias)."""
    w32 = weight.float()
    wf = (w32 * ln_weight.float()[None, :]).to(weight.dtype) if ln_weight is not None else weight
    bf = None
    if bias is not None or ln_bias is not None:
        bf = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device)
        if bias is not None:
            bf += bias.float()
        if ln_bias is not None:
            bf += w32 @ ln_bias.float()
    return wf.contiguous(), bf, wf.float().sum(1).contiguous()


def _tma_ok(*ts):
    """TMA descriptors need 2-D tensors with a contiguous last dim and 16-byte aligned base and
    row stride; fp16/bf16 only (fp32 operands take the pointer kernel)."""
    for t in ts:
        es = t.element_size()
        if t.dtype not in (torch.float16, torch.bfloat16) or t.dim() != 2 or t.stride(1) != 1:
            return False
        if (t.stride(0) * es) % 16 or t.data_ptr() % 16 or t.shape[0] == 0:
            return False
    return True


def _check(x, ln_weight, ln_bias, weight, bias):
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"layernorm_linear: unsupported dtype {x.dtype}")
    if x.dim() == 0 or weight.dim() != 2 or weight.shape[1] != x.shape[-1]:
        raise ValueError(f"layernorm_linear: weight {tuple(weight.shape)} does not match x {tuple(x.shape)}")
    if weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        raise TypeError("layernorm_linear: x, weight and bias must share a dtype (as F.linear requires)")
    k = x.shape[-1]
    for name, t in (("ln_weight", ln_weight), ("ln_bias", ln_bias)):
        if t is not None and t.shape != (k,):
            raise ValueError(f"layernorm_linear: {name} {tuple(t.shape)} does not match K={k}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"layernorm_linear: bias {tuple(bias.shape)} does not match weight {tuple(weight.shape)}")


def layernorm_linear(x, ln_weight, ln_bias, weight, bias=None, eps=1e-5, stats=None, out=None,
                     variant="fold", folded=None):
    """y = linear(layer_norm(x, (K,), ln_weight, ln_bias, eps), weight, bias); forward only.

    ``variant``: "fold" (default) or "normalize" (see the module docstring). ``folded`` =
    ``fold_weights(ln_weight, ln_bias, weight, bias)`` computed once and reused (without it the
    fold is computed on every call, a full pass over the weight). ``stats`` = (mean, rstd) from
    ``ln_stats`` to share one stats pass between Linears."""
    _check(x, ln_weight, ln_bias, weight, bias)
    if variant not in VARIANTS:
        raise ValueError(f"layernorm_linear: variant must be one of {VARIANTS}")
    # the kernels index vectors (bias, norm weights) as contiguous: a strided view is copied (tiny)
    ln_weight = None if ln_weight is None else ln_weight.contiguous()
    ln_bias = None if ln_bias is None else ln_bias.contiguous()
    bias = None if bias is None else bias.contiguous()
    N, K = weight.shape
    shape = tuple(x.shape[:-1]) + (N,)
    if out is None:
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
    elif tuple(out.shape) != shape or out.dtype != x.dtype:
        raise ValueError("layernorm_linear: out has the wrong shape or dtype")
    a = _rows(x)
    y = out.view(-1, N) if out.dim() != 2 else out
    M = a.shape[0]
    if M == 0 or N == 0:
        return out
    if K == 0:
        raise ValueError("layernorm_linear: K = 0")
    fold = variant == "fold"
    mean, rstd = stats if stats is not None else _stats(a, eps, fold)
    dot_f32 = INTERPRET or x.dtype == torch.float32

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    if not fold:
        _ln_linear_kernel[grid](
            a, mean, rstd, ln_weight if ln_weight is not None else a, ln_bias if ln_bias is not None else a,
            weight, bias if bias is not None else weight, y, M, N, K,
            a.stride(0), a.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
            FOLD=False, HAS_G=ln_weight is not None, HAS_BETA=ln_bias is not None, HAS_BIAS=bias is not None,
            DOT_F32=dot_f32)
        return out
    wf, bf, s = folded if folded is not None else fold_weights(ln_weight, ln_bias, weight, bias)
    if tuple(wf.shape) != (N, K) or wf.dtype != weight.dtype or s.shape != (N,):
        raise ValueError("layernorm_linear: folded weights do not match weight")
    if _tma_ok(a, wf, y):
        descs = [TensorDescriptor.from_tensor(t, [1, 1]) for t in (a, wf, y)]  # blocks set per config
        _fold_tma_kernel[grid](*descs, mean, rstd, s, bf if bf is not None else s, M, N, K,
                               HAS_BIAS=bf is not None, DOT_F32=dot_f32)
    else:
        _ln_linear_kernel[grid](
            a, mean, rstd, s, s, wf, bf if bf is not None else s, y, M, N, K,
            a.stride(0), a.stride(1), wf.stride(0), wf.stride(1), y.stride(0), y.stride(1),
            FOLD=True, HAS_G=False, HAS_BETA=False, HAS_BIAS=bf is not None, DOT_F32=dot_f32)
    return out


class LayerNormLinear(torch.nn.Module):
    """Drop-in for ``linear(layer_norm(x))``: ``LayerNormLinear.from_modules(ln, linear)(x)``.

    Shares the two modules' parameters and keeps the folded weights of variant="fold",
    recomputed when a parameter is changed or replaced. Forward only: when autograd needs a
    graph it runs the eager chain instead."""

    def __init__(self, ln, linear, variant="fold"):
        super().__init__()
        if len(ln.normalized_shape) != 1 or ln.normalized_shape[0] != linear.in_features:
            raise ValueError("LayerNorm must be over the last dim, of the Linear's in_features")
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}")
        self.ln, self.linear, self.variant = ln, linear, variant
        self._folded, self._folded_key = None, None

    @classmethod
    def from_modules(cls, ln, linear, variant="fold"):
        return cls(ln, linear, variant)

    def _params(self):
        return (self.ln.weight, self.ln.bias, self.linear.weight, self.linear.bias)

    def folded(self):
        key = tuple((p.data_ptr(), p._version, p.dtype) if p is not None else None for p in self._params())
        if key != self._folded_key:
            with torch.no_grad():
                self._folded = fold_weights(*self._params())
            self._folded_key = key
        return self._folded

    def forward(self, x):
        params = [p for p in self._params() if p is not None]
        if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in params)):
            return self.linear(self.ln(x))
        folded = self.folded() if self.variant == "fold" else None
        return layernorm_linear(x, self.ln.weight, self.ln.bias, self.linear.weight, self.linear.bias, self.ln.eps,
                                variant=self.variant, folded=folded)
