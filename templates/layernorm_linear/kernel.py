"""LayerNorm folded into the following Linear: ``y = layer_norm(x) @ W^T + b`` without
materialising the normalised activations.

Replaces ``aten::layer_norm`` (``native_layer_norm``) -> ``aten::linear`` (``addmm``/``mm``), the
fusion Inductor cannot do (a LayerNorm needs a whole-row reduction before any GEMM tile of its
output is usable). Two kernels:

1. a row-statistics pass: mean and rstd per row (8 bytes a row), two-pass in fp32, over rows of
   any length (chunked);
2. a tiled GEMM that normalises A on load: each ``[BLOCK_M, BLOCK_K]`` tile of x is read,
   normalised with the row stats and gamma/beta, rounded to x's dtype (as eager's LayerNorm
   output is), and fed to ``tl.dot`` with fp32 accumulation; bias in the epilogue.

This saves writing and re-reading the ``[M, K]`` LayerNorm output; the GEMM still dominates, so
the reachable gain is (eager - GEMM alone), largest for small M (decode) and small K. Several
Linears reading one LayerNorm (Q, K, V) can share one stats pass: ``ln_stats(x, eps)`` then
``layernorm_linear(..., stats=(mean, rstd))``. The gamma/beta-folding variant
(``W' = W diag(gamma)``, plain GEMM, row-wise epilogue) is not implemented here.

- Tiles BLOCK_M x BLOCK_N x BLOCK_K, grouped program ordering (GROUP_M), autotuned over tiles,
  num_warps and num_stages keyed on (M, N, K); one fixed config under ``TRITON_INTERPRET=1``.
  K is a compile-time constant (static K loop, pipelined by Triton; also avoids ``range`` over a
  runtime bound, which Triton 3.6's interpreter with numpy 2.4 rejects).
- fp32 / fp16 / bf16; x read through its strides; W ``[N, K]`` any strides; fp32 operands use
  ``input_precision="ieee"``; under the interpreter operands are upcast to fp32 before
  ``tl.dot`` (its bf16 dot is wrong), which is exact.
- Forward only. ``LayerNormLinear`` runs the eager chain when autograd needs a graph.

Interpreter-safe: builtins only, ``tl.full``, no bf16 arithmetic, ``while`` loops for runtime
lengths.
"""

import os

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# FUSEADVISE_AUTOTUNE=0: only the first (safe) GPU config, e.g. for quick GPU test runs
AUTOTUNE = os.environ.get("FUSEADVISE_AUTOTUNE", "1") != "0"
MAX_BLOCK_K = 128 if INTERPRET else 4096

_RNE_BF16 = tl.constexpr(INTERPRET)


def _configs():
    if INTERPRET:
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}, num_warps=4, num_stages=1)]
    tiles = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps), after the Triton
        # matmul tutorial; the first fits shared memory for fp32 too (FUSEADVISE_AUTOTUNE=0)
        (64, 128, 32, 4, 4), (128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (128, 128, 32, 4, 4),
        (64, 256, 32, 4, 4), (128, 64, 32, 4, 4), (64, 64, 64, 4, 4), (32, 64, 32, 5, 2), (16, 128, 64, 4, 4),
    ]
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_stages=s, num_warps=w)
               for m, n, k, s, w in tiles]
    return configs if AUTOTUNE else configs[:1]


@triton.jit
def _cast(y, dtype: tl.constexpr):
    """y (fp32) -> dtype, rounding to nearest even for bf16 on every backend."""
    if _RNE_BF16 and dtype == tl.bfloat16:
        bits = y.to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        y = tl.where(y != y, y, bits.to(tl.float32, bitcast=True))
    return y.to(dtype)


@triton.jit
def _ln_stats_kernel(X, MEAN, RSTD, K, sxm, sxk, eps, BLOCK_K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    X += row * sxm
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
    tl.store(MEAN + row, mean)
    tl.store(RSTD + row, 1.0 / tl.sqrt(tl.sum(acc, axis=0) / K + eps))


@triton.autotune(configs=_configs(), key=["M", "N", "K"])
@triton.jit
def _ln_linear_kernel(A, MEAN, RSTD, G, BETA, W, BIAS, Y, M, N, K: tl.constexpr,
                      sam, sak, swn, swk, sym, syn,
                      HAS_G: tl.constexpr, HAS_BETA: tl.constexpr, HAS_BIAS: tl.constexpr,
                      DOT_F32: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    # grouped ordering: consecutive programs share the same A rows (L2 reuse)
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_n
    first_m = (pid // in_group) * GROUP_M
    group_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m

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
            a = tl.load(a_ptr).to(tl.float32)
        else:
            a = tl.load(a_ptr, mask=kmask[None, :], other=0.0).to(tl.float32)
        # normalise on load: (x - mean) * rstd * gamma + beta, rounded like eager's LN output
        a = (a - mean[:, None]) * rstd[:, None]
        if HAS_G:
            a = a * tl.load(G + kk, mask=kmask, other=0.0).to(tl.float32)[None, :]
        if HAS_BETA:
            a = a + tl.load(BETA + kk, mask=kmask, other=0.0).to(tl.float32)[None, :]
        if K % BLOCK_K == 0:
            a = _cast(a, A.dtype.element_ty)
            b = tl.load(w_ptr)
        else:
            a = _cast(tl.where(kmask[None, :], a, 0.0), A.dtype.element_ty)
            b = tl.load(w_ptr, mask=kmask[:, None], other=0.0)
        if DOT_F32:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a.to(W.dtype.element_ty), b, acc)
        a_ptr += BLOCK_K * sak
        w_ptr += BLOCK_K * swk

    if HAS_BIAS:
        acc += tl.load(BIAS + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(Y + rm.to(tl.int64)[:, None] * sym + rn[None, :] * syn, _cast(acc, Y.dtype.element_ty), mask=mask)


def _rows(t):
    if t.dim() == 2:
        return t
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return t.reshape(-1, t.shape[-1])


def ln_stats(x, eps=1e-5):
    """(mean, rstd) of each row of x over the last dim, fp32, shape [rows]."""
    a = _rows(x)
    M, K = a.shape
    mean = torch.empty(M, dtype=torch.float32, device=x.device)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    if M and K:
        _ln_stats_kernel[(M,)](a, mean, rstd, K, a.stride(0), a.stride(1), float(eps),
                               BLOCK_K=min(triton.next_power_of_2(K), MAX_BLOCK_K))
    return mean, rstd


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


def layernorm_linear(x, ln_weight, ln_bias, weight, bias=None, eps=1e-5, stats=None, out=None):
    """y = linear(layer_norm(x, (K,), ln_weight, ln_bias, eps), weight, bias); forward only.

    ``stats`` = (mean, rstd) from ``ln_stats`` to share one stats pass between Linears."""
    _check(x, ln_weight, ln_bias, weight, bias)
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
    mean, rstd = stats if stats is not None else ln_stats(a, eps)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    _ln_linear_kernel[grid](
        a, mean, rstd, ln_weight if ln_weight is not None else a, ln_bias if ln_bias is not None else a,
        weight, bias if bias is not None else weight, y, M, N, K,
        a.stride(0), a.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
        HAS_G=ln_weight is not None, HAS_BETA=ln_bias is not None, HAS_BIAS=bias is not None,
        DOT_F32=INTERPRET or x.dtype == torch.float32)
    return out


class LayerNormLinear(torch.nn.Module):
    """Drop-in for ``linear(layer_norm(x))``: ``LayerNormLinear.from_modules(ln, linear)(x)``.

    Shares the two modules' parameters. Forward only: when autograd needs a graph it runs the
    eager chain instead."""

    def __init__(self, ln, linear):
        super().__init__()
        if len(ln.normalized_shape) != 1 or ln.normalized_shape[0] != linear.in_features:
            raise ValueError("LayerNorm must be over the last dim, of the Linear's in_features")
        self.ln, self.linear = ln, linear

    @classmethod
    def from_modules(cls, ln, linear):
        return cls(ln, linear)

    def forward(self, x):
        params = [p for p in (self.ln.weight, self.ln.bias, self.linear.weight, self.linear.bias) if p is not None]
        if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in params)):
            return self.linear(self.ln(x))
        return layernorm_linear(x, self.ln.weight, self.ln.bias, self.linear.weight, self.linear.bias, self.ln.eps)
