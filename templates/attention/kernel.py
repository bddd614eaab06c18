"""Fused attention: ``q @ k^T -> scale -> mask / bias -> softmax -> dropout -> @ v`` in one
flash-style kernel (forward and backward), without the [Sq, Sk] score matrix in memory.

Replaces the eager chain (reference.py) that HF BERT, GPT-2 and Llama-style "eager" attention
run: two GEMMs around a softmax whose scores and probabilities eager writes and reads in full.

- Semantics, exactly the eager chain's (reference.py), for q [B, H, Sq, D], k / v [B, H, Sk, D]
  (any strides: the transposed views of a [B, S, H, D] projection a model passes are read as
  they are), one dtype for q, k and v (fp32, fp16 or bf16):
  ``s = scale * (q @ k^T)``; a mask: ``"causal"`` (computed: key j of query i is masked when
  ``j > i + (Sk - Sq)``, bottom-right aligned as HF slices its tril buffer for a KV cache),
  ``"bool"`` (True = masked, ``masked_fill`` semantics) or ``"additive"`` (a float mask added,
  of any float dtype: the sum takes ``promote_types``); filled with ``mask_fill`` (``-inf``,
  ``"min"`` = q's dtype's finfo.min as HF fills, or a number); then a bias: ``"additive"``
  ([B|1, H|1, Sq|1, Sk]: T5's relative position bias [1, H, Sq, Sk], or a padding mask
  [B, 1, 1, Sk] added after a causal fill as older GPT-2 adds its attention_mask; may require
  grad) or ``"alibi"``
  (``slopes`` [H]: ``s += slopes[h] * (j - i - (Sk - Sq))``, the relative form; HF's BLOOM form
  ``slopes[h] * j`` differs from it by a per-row constant and gives the same softmax except on
  rows a finite fill masks); ``p = softmax(s in fp32)`` rounded to q's dtype; dropout;
  ``out = p @ v`` in q's dtype, [B, H, Sq, D] contiguous.
- Masks and biases are read through their strides broadcast to [B, H, Sq, Sk] (stride 0 on
  broadcast dims: HF's [B, 1, 1, Sk] padding mask and a [1, H, Sq, Sk] bias are never
  expanded). Causal and ALiBi are computed in the kernel.
- Eager's roundings are kept where they change results: ``q @ k^T`` and ``* scale`` are
  rounded to q's dtype, ``+ mask`` / ``+ bias`` to the promoted dtype, as eager's tensors are
  (``EAGER_ROUNDING``; large scores in bf16 round onto a coarse grid and eager's softmax
  sees ties there; fp16 scores past 65504 become inf and the row NaN, as in eager). Where a
  rounding changes nothing it is not done (``_rounding``, the kernels' ROUND): fp32 scores
  (every rounding is to fp32) none; ``* scale`` with scale 1, or a power of two at most 1 on
  bf16 (1/8 for D = 64), is exact. On 16-bit scores the GPU rounds two scores per conversion
  (cvt.rn.{bf16,f16}x2.f32, widened back by a shift and a mask, or cvt.f32.f16): sm_90 SASS of
  the forward's interior key-block loop, bf16 128 x 64 tile, 4 warps, causal, counted by
  bench/experiments/probe_attention_sass.py: 709 instructions per thread without the roundings,
  900 with both (F2FP.PACK_AB; 964 with Triton's one F2F per score), 804 with q @ k^T's alone
  (scale 1/8 on bf16), 738 with the scale folded as well (below); fp16 at 1/8: 890. Not yet
  timed on the GPU (bench/experiments/check_attention.sh times it on and off). Where the
  scale is a positive power of two and its product is not rounded (``_folds``: fp32, or bf16
  at scale <= 1; no mask, or a -inf bool or causal fill; no bias, or ALiBi with its slope
  divided by the scale), the forward leaves the scores unscaled and multiplies the scale into
  exp2's log2(e) (FOLD): scaling by a power of two commutes with rounding, so the bits are
  the same, and the forward saves one multiply per score; its row max is stored scaled. The softmax is fp32 (online: running max and sum
  over key blocks, fp32 accumulation of ``p @ v``); p goes to the second dot in q's dtype,
  unnormalised (eager rounds the normalised p: a difference well inside the gemm tolerances).
- Fully masked rows as eager: with a ``-inf`` fill the row is NaN; with a finite fill every
  key gets the fill and the row is uniform (plus the bias). Causal block skipping: key blocks
  entirely above the diagonal are not visited, which is exact for ``-inf`` fills and, for
  finite fills, whenever a row's largest score exceeds the fill by 104 (exp underflows to 0 in
  fp32: always with ``"min"``); query blocks holding a fully masked row (Sq > Sk) visit every
  key block. Gradients through a row masked everywhere with ``-inf`` are NaN in eager for
  every key of its head; here only for the key blocks that row's programs visit (causal
  skipping leaves the others finite): such a model has NaN gradients either way.
- Dropout (``p > 0``): kept with probability 1 - p (to 2**-33), kept probabilities scaled by
  1/(1-p), as eager's dropout. The keep mask (``_keep``): one Philox4x32-7 call (``_philox``:
  32-bit state, one mul.wide per product) per four scores, counter (4 * (j // 16) + (j % 8) //
  2, i, b * H + h, 0) for key j of query i, lane 2 * ((j // 8) % 2) + j % 2, kept when that
  uint32 is >= round(p * 2**32): the four lanes are the (j, j + 1, j + 8, j + 9) quad an MMA
  accumulator holds in one thread, so the tile is assembled in registers (join, permute,
  reshape; no shared memory in the SASS), and the mapping does not depend on the tile. The
  same mask is regenerated in the backward, never stored; ``dropout_mask`` rebuilds it for a
  seed. Seven rounds as PyTorch's FlashAttention-2 (SDPA's flash backend) draws its dropout;
  it compares 8-bit lanes (16 scores per call, p rounded to 1/256), here 32-bit lanes keep p
  exact. Counted (probe_attention_sass.py, bf16 128 x 64 forward tile, interior loop, per
  thread, every rounding): 4769 instructions with one 64-bit-counter ``tl.rand`` per score
  (Philox4x64-10, the kernel before), 2095 with tl.philox 4x32-10 per four, 1528 with this
  mask, against 964 without dropout; at scale 1/8 (``* scale`` exact, folded) 1290 against
  738.
  The seed as the other templates seed dropout: ``seed=None`` draws a 1-element int64 tensor on
  q's device (``device_seed``, the device's default generator) which the kernels load through
  a pointer: no host read, and each CUDA-graph replay draws a new seed and mask. An int seed
  or a seed tensor may be passed (the same value gives the same mask either way).
- Backward (FlashAttention-2): ``_attn_bwd_delta`` computes D = rowsum(dO * O) (fp32);
  ``_attn_bwd_dkdv`` (one program per key block) recomputes P = exp(s - m) / l from the saved
  row max m and sum l for every query block that sees the key block and accumulates dV = P_drop^T dO
  (as dV^T = dO^T P_drop, dK^T likewise: no dot takes the transpose of another dot's result,
  which Triton 3.4+ miscompiles on Hopper)
  (P_drop: P rounded to q's dtype, then times keep / (1-p) and rounded again, as eager drops its
  rounded probabilities) and
  dK = scale * dS^T Q, with dP = dO V^T (times the keep mask / (1-p)), dS = P (dP - D), zero
  where a bool or causal mask filled the score (``masked_fill``'s backward); for an additive
  bias that requires grad it writes dS (fp32 [B, H, Sq, Sk]) or, for a bias broadcast over Sq
  (a padding bias [B|1, H|1, 1, Sk]), dS summed over the queries in the kernel ([B, H, 1, Sk]:
  O(S) memory); the host sums over the bias's other broadcast dims. ``_attn_bwd_dq`` (one
  program per query block) accumulates dQ = scale * dS K. As in the forward, tiles wholly
  below the causal diagonal skip the causal and edge tests (``_bwd_tile``'s EDGE: the dK/dV
  kernel's query blocks from ``mid`` on, the dQ kernel's key blocks before ``full``).
- Tiles without ``@triton.autotune`` (as the GEMM templates): each kernel's tile (BLOCK_M,
  BLOCK_N, num_stages, num_warps) is timed once per bucket (Sq and Sk rounded up to powers of
  two, at least 16; D; dtypes; flags; device) with the caller's inputs (read only) and scratch
  outputs, and the winner launched directly afterwards through the shared ``_launch`` (the
  compiled kernel). Before the timing every candidate runs once on those inputs and those whose
  outputs disagree with the others' (beyond the rounding of another summation order:
  ``_agreeing``) are dropped with a RuntimeWarning, so a wrong or miscompiled tile is never
  picked because it is fast (an H200 run once got dK wrong by a third, causal bf16 [4, 16,
  512, 64], from the tile the timing picked, while every candidate is right in the
  interpreter, tl.range loops included). A bucket first met during CUDA-graph capture takes
  the first candidate untimed. Decode-size buckets (Sq <= 16) choose among 16- and 32-row
  query tiles (``tile_candidates``). ``tile_config()`` lists the tiles picked (the benchmark
  records it). The interpreter runs 16 x 16 tiles (the tests' S of 17..129 span several
  blocks); ``forced_tiles`` runs any candidate instead: the verifier's tile cases
  (adapter.tile_cases) run every one the GPU could pick, forward and gradients.
- Host side: the checks run once per layout (``_plan``: shapes, strides, dtypes, parameters;
  no tensors kept); a call no gradient reaches (inference) skips ``autograd.Function`` and
  the statistics (no buffer; the forward's STORE_STATS off); launches through ``_launch``.
- 64-bit offsets: the batch and head offsets (``b * stride``), rows and columns times strides
  and the dropout counter; the grid is 1-D (query blocks of one head adjacent, heaviest causal
  blocks first), so B * H is not capped at 65535.

Interpreter-safe: builtins only, ``tl.full``; the block loops are ``tl.range`` loops on the GPU
(pipelined) and ``while`` loops under the interpreter (``_WHILE_LOOPS``).
"""

import functools
import math
import os
import warnings

import torch
from torch.autograd.function import once_differentiable
import triton
import triton.language as tl
import triton.testing

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
MASK_KINDS = {"none": 0, "bool": 1, "additive": 2, "causal": 3}
BIAS_KINDS = {"none": 0, "additive": 1, "alibi": 2}
_TL = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}
# eager's roundings of the scores (q @ k^T, * scale, + mask, + bias) to their dtypes
EAGER_ROUNDING = True
# fp32 operands: tf32x3 on the GPU (about fp32's accuracy); the interpreter multiplies in fp32
_ATTN_F32_DOT = tl.constexpr("ieee" if INTERPRET else "tf32x3")
# the interpreter's dot multiplies bf16 operands wrongly (numpy has no bf16): fp32 operands
# there, the same products (a 16-bit value is exact in fp32, accumulation is fp32 either way)
_DOT_UPCAST = tl.constexpr(INTERPRET)
# key / query block loops: tl.range on the GPU (software-pipelined over num_stages); while
# loops under the interpreter, where a runtime-length range fails (docs/templates.md)
_WHILE_LOOPS = tl.constexpr(INTERPRET)


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
def _load_seed(seed, SEED_PTR: tl.constexpr):
    """The dropout seed: with SEED_PTR a pointer to one int64 drawn on the device, else the int."""
    if SEED_PTR:
        seed = tl.load(seed)
    return seed


@triton.jit
def _mm(a, b, acc):
    """acc + a @ b, fp32 accumulation; fp32 operands at _ATTN_F32_DOT precision."""
    if _DOT_UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    if a.dtype == tl.float32:
        return tl.dot(a, b, acc, input_precision=_ATTN_F32_DOT)
    return tl.dot(a, b, acc)


# eager's roundings on the GPU: two scores per conversion (cvt.rn.{bf16,f16}x2.f32, one
# F2FP.PACK_AB), widened back with a shift and a mask (bf16) or two cvt.f32.f16, instead of
# one F2F and one widening per score (bench/experiments/probe_attention_sass.py counts them)
_PACKED_ROUND = tl.constexpr(not INTERPRET)


@triton.jit
def _round(x, dtype: tl.constexpr, ROUND: tl.constexpr):
    """x (fp32) rounded to dtype and back, as eager's tensor of that dtype holds it (round to
    nearest even, as x.to(dtype) on the GPU)."""
    if ROUND:
        if _PACKED_ROUND and dtype == tl.bfloat16:
            x = tl.inline_asm_elementwise(
                "{ .reg .b32 t; cvt.rn.bf16x2.f32 t, $3, $2; shl.b32 $0, t, 16; and.b32 $1, t, 0xffff0000; }",
                "=r,=r,r,r", [x], dtype=tl.float32, is_pure=True, pack=2)
        elif _PACKED_ROUND and dtype == tl.float16:
            x = tl.inline_asm_elementwise(
                "{ .reg .b32 t; .reg .b16 lo, hi; cvt.rn.f16x2.f32 t, $3, $2; mov.b32 {lo, hi}, t; "
                "cvt.f32.f16 $0, lo; cvt.f32.f16 $1, hi; }",
                "=r,=r,r,r", [x], dtype=tl.float32, is_pure=True, pack=2)
        else:
            x = _cast(x, dtype).to(tl.float32)
    return x


@triton.jit
def _scores(q, k, rows, cols, Sq, Sk, MASK, BIAS, smm, smn, sbm, sbn, slope, scale, fill,
            DT: tl.constexpr, SDT: tl.constexpr, BDT: tl.constexpr, MASK_KIND: tl.constexpr,
            BIAS_KIND: tl.constexpr, ROUND: tl.constexpr, EDGE: tl.constexpr, FOLD: tl.constexpr):
    """The scores of a [BLOCK_M, BLOCK_N] tile as eager's chain gives them, fp32 (natural
    units; with FOLD divided by scale, which the caller folds into its exp2: the slope too);
    -inf on columns past Sk. rows [BLOCK_M, 1] and cols [1, BLOCK_N] are int64; MASK and BIAS
    point at this (batch, head)'s [Sq, Sk] plane (their strides, 0 on broadcast dims). EDGE:
    the tile may cross Sk, Sq or the causal diagonal (loads and the causal test masked); else
    every position is inside and kept."""
    s = _mm(q, tl.trans(k), tl.full([q.shape[0], k.shape[0]], 0, tl.float32))
    s = _round(s, DT, ROUND)                        # q @ k^T in q's dtype
    if not FOLD:
        s = _round(s * scale, DT, ROUND == 1)       # * scale (exact for ROUND 2)
    inb = (rows < Sq) & (cols < Sk)
    if MASK_KIND == 1:
        mk = tl.load(MASK + rows * smm + cols * smn, mask=inb, other=0)
        s = tl.where(mk != 0, fill, s)
    elif MASK_KIND == 2:
        a = tl.load(MASK + rows * smm + cols * smn, mask=inb, other=0.0).to(tl.float32)
        s = _round(s + a, SDT, ROUND)               # + mask, in promote_types(q, mask)
    elif MASK_KIND == 3:
        if EDGE:
            s = tl.where(cols > rows + (Sk - Sq), fill, s)
    if BIAS_KIND == 1:
        bb = tl.load(BIAS + rows * sbm + cols * sbn, mask=inb, other=0.0).to(tl.float32)
        s = _round(s + bb, BDT, ROUND)              # + bias, in promote_types(s, bias)
    elif BIAS_KIND == 2:
        s = s + slope * (cols - rows - (Sk - Sq)).to(tl.float32)  # fp32, as the eager ALiBi tensor
    if EDGE:
        s = tl.where(cols < Sk, s, float("-inf"))
    return s


@triton.jit
def _filled(rows, cols, Sq, Sk, MASK, smm, smn, MASK_KIND: tl.constexpr):
    """Where a bool or causal mask filled the score (masked_fill's backward zeroes there)."""
    if MASK_KIND == 1:
        inb = (rows < Sq) & (cols < Sk)
        return tl.load(MASK + rows * smm + cols * smn, mask=inb, other=0) != 0
    else:
        return cols > rows + (Sk - Sq)


# Philox4x32 rounds of the dropout mask: 7, as PyTorch's FlashAttention-2 kernels (SDPA's flash
# backend) draw theirs; Philox4x32-7 passes TestU01's BigCrush (Salmon et al., SC'11), 10 is
# Random123's default margin
PHILOX_ROUNDS = tl.constexpr(7)


@triton.jit
def _mulhilo(a, M: tl.constexpr):
    """(hi, lo) 32-bit halves of a * M (a uint32, M a 32-bit constant): one 64-bit product
    (mul.wide.u32 on the GPU) instead of mul.hi and mul.lo apart."""
    w = a.to(tl.uint64) * M
    return (w >> 32).to(tl.uint32), w.to(tl.uint32)


@triton.jit
def _philox(seed, c0, c1, c2, ROUNDS: tl.constexpr):
    """Philox4x32 (Random123's, as tl.philox computes it) of the counter (c0, c1, c2, 0), uint32
    tensors that broadcast together, under the 64-bit key seed: four uint32 tensors."""
    seed = seed.to(tl.uint64)
    k0 = (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = (seed >> 32).to(tl.uint32)
    c3 = tl.zeros_like(c0)
    for _ in tl.static_range(ROUNDS):
        hi0, lo0 = _mulhilo(c0, 0xD2511F53)
        hi1, lo1 = _mulhilo(c2, 0xCD9E8D57)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 += 0x9E3779B9
        k1 += 0xBB67AE85
    return c0, c1, c2, c3


@triton.jit
def _keep(seed, bh, rows, n0, thresh, BLOCK_N: tl.constexpr):
    """The dropout keep mask of the tile (rows [BLOCK_M, 1], keys n0 .. n0 + BLOCK_N, n0 a
    multiple of 16) of (batch, head) bh: one Philox4x32-7 call (32-bit state) per four scores.
    Key j of query i takes lane 2 * ((j // 8) % 2) + j % 2 of the call whose counter is
    (4 * (j // 16) + (j % 8) // 2, i, bh, 0), kept when that uint32 is >= thresh (round(p *
    2**32): kept with probability 1 - p to 2**-33). The four lanes land on the (j, j + 1, j + 8,
    j + 9) quad an MMA accumulator gives one thread (no data moves to assemble the tile), and
    the mapping does not depend on the tile: the backward's tiles regenerate the forward's mask."""
    tl.static_assert(BLOCK_N % 16 == 0, "the keep mask's key tiles are multiples of 16")
    g = (n0 // 4 + tl.arange(0, BLOCK_N // 4))[None, :].to(tl.uint32)
    r0, r1, r2, r3 = _philox(seed, g, rows.to(tl.uint32), bh.to(tl.uint32), PHILOX_ROUNDS)
    t = thresh.to(tl.uint32, bitcast=True)
    k = tl.join(tl.join(r0 >= t, r1 >= t), tl.join(r2 >= t, r3 >= t))  # [BLOCK_M, BLOCK_N / 4, e, h]
    k = tl.reshape(k, [rows.shape[0], BLOCK_N // 16, 4, 2, 2])  # the counter 4 * a + c
    k = tl.permute(k, (0, 1, 4, 2, 3))  # [BLOCK_M, BLOCK_N / 16, h, c, e]: key 16 a + 8 h + 2 c + e
    return tl.reshape(k, [rows.shape[0], BLOCK_N])


@triton.jit
def _causal_hi(m0, Sq, Sk, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr, FINITE_FILL: tl.constexpr):
    """The end of the key range query block m0 visits: Sk, or for causal masks the end of its
    last row's keys (0 when every row is fully masked; Sk when a finite fill makes a fully
    masked row uniform over every key)."""
    hi = Sk
    if CAUSAL:
        hi = tl.minimum(Sk, tl.maximum(m0 + BLOCK_M + (Sk - Sq), 0))
        if FINITE_FILL:
            hi = tl.where(m0 < Sq - Sk, Sk, hi)
    return hi


@triton.jit
def _causal_full(m0, Sq, Sk, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """The end of the key blocks query block m0 visits without edge tests: blocks inside Sk
    and, for causal masks, wholly below every row's diagonal."""
    full = Sk // BLOCK_N * BLOCK_N
    if CAUSAL:
        full = tl.minimum(full, tl.maximum(m0 + (Sk - Sq) + 1, 0) // BLOCK_N * BLOCK_N)
    return full


@triton.jit
def _fwd_block(acc, m_i, l_i, q, K, V, MASK, BIAS, rows, n0, Sq, Sk, skn, skd, svn, svd,
               smm, smn, sbm, sbn, slope, scale, fill, thresh, seed, bh, dcols,
               DT: tl.constexpr, SDT: tl.constexpr, BDT: tl.constexpr, MASK_KIND: tl.constexpr,
               BIAS_KIND: tl.constexpr, ROUND: tl.constexpr, DROPOUT: tl.constexpr, EDGE: tl.constexpr,
               FOLD: tl.constexpr, HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr):
    """One key block of the online softmax (running max m_i, running sum l_i; exp as exp2).
    FOLD: the scores come unscaled and the scale (a power of two) joins exp2's log2(e): the
    same bits as scaling each score first, one multiply per score fewer."""
    kcols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)[:, None]  # the keys as rows of k and v
    kv_mask = dcols < HEAD_D
    if EDGE:
        kv_mask = kv_mask & (kcols < Sk)
    k = tl.load(K + kcols * skn + dcols * skd, mask=kv_mask, other=0.0)
    v = tl.load(V + kcols * svn + dcols * svd, mask=kv_mask, other=0.0)
    cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)[None, :]  # the keys as columns of s
    s = _scores(q, k, rows, cols, Sq, Sk, MASK, BIAS, smm, smn, sbm, sbn, slope, scale, fill,
                DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, EDGE, FOLD)
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row all -inf so far: p = 0, not NaN
    # natural units until after the subtraction: s * log2(e) overflows for fills near finfo.min
    if FOLD:
        c = scale * 1.4426950408889634
    else:
        c = 1.4426950408889634
    alpha = tl.exp2((m_i - m_safe) * c)
    pr = tl.exp2((s - m_safe[:, None]) * c)
    l_i = l_i * alpha + tl.sum(pr, axis=1)
    if DROPOUT:
        pr = tl.where(_keep(seed, bh, rows, n0, thresh, BLOCK_N), pr, 0.0)
    acc = _mm(_cast(pr, DT), v, acc * alpha[:, None])
    return acc, m_new, l_i


# Sq and Sk (and the seed) unspecialized: a new sequence length compiles nothing new, nor
# during CUDA-graph capture; the head dim is a constexpr (HEAD_D)
@triton.jit(do_not_specialize=["Sq", "Sk", "H", "thresh", "seed"])
def _attn_fwd(Q, K, V, MASK, BIAS, O, STATS, Sq, Sk, H,
              sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
              smb, smh, smm, smn, sbb, sbh, sbm, sbn, sob, soh, som, sod,
              scale, fill, thresh, pscale, seed,
              DT: tl.constexpr, SDT: tl.constexpr, BDT: tl.constexpr, MASK_KIND: tl.constexpr,
              BIAS_KIND: tl.constexpr, FINITE_FILL: tl.constexpr, ROUND: tl.constexpr,
              DROPOUT: tl.constexpr, SEED_PTR: tl.constexpr, STORE_STATS: tl.constexpr, FOLD: tl.constexpr,
              HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per (batch, head, query block): O = softmax(s) V over the key blocks, and
    with STORE_STATS the rows' max and sum of exp (fp32) in STATS [B * H, 2, Sq] for the
    backward (an inference call stores none)."""
    nm = tl.cdiv(Sq, BLOCK_M)
    pid = tl.program_id(0)
    bh = pid // nm
    m0 = (nm - 1 - pid % nm) * BLOCK_M  # the heaviest causal blocks first
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    bh = bh.to(tl.int64)
    Q += b * sqb + h * sqh
    K += b * skb + h * skh
    V += b * svb + h * svh
    MASK += b * smb + h * smh
    BIAS += b * sbb + h * sbh
    O += b * sob + h * soh
    rows = m0 + tl.arange(0, BLOCK_M).to(tl.int64)[:, None]  # [BLOCK_M, 1]
    dcols = tl.arange(0, BLOCK_D).to(tl.int64)[None, :]
    io_mask = (rows < Sq) & (dcols < HEAD_D)
    q = tl.load(Q + rows * sqm + dcols * sqd, mask=io_mask, other=0.0)
    slope = 0.0
    if BIAS_KIND == 2:
        slope = tl.load(BIAS).to(tl.float32)  # BIAS: the slopes, offset to head h (sbh)
        if FOLD:
            slope = slope / scale  # exact: scale is a power of two
    if DROPOUT:
        seed = _load_seed(seed, SEED_PTR)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_M], 0, tl.float32)
    acc = tl.full([BLOCK_M, BLOCK_D], 0, tl.float32)
    hi = _causal_hi(m0, Sq, Sk, BLOCK_M, MASK_KIND == 3, FINITE_FILL)
    full = _causal_full(m0, Sq, Sk, BLOCK_N, MASK_KIND == 3)
    if _WHILE_LOOPS:
        n0 = 0
        while n0 < full:
            acc, m_i, l_i = _fwd_block(acc, m_i, l_i, q, K, V, MASK, BIAS, rows, n0, Sq, Sk, skn, skd, svn, svd,
                                       smm, smn, sbm, sbn, slope, scale, fill, thresh, seed, bh, dcols,
                                       DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT, False, FOLD,
                                       HEAD_D, BLOCK_D, BLOCK_N)
            n0 += BLOCK_N
        while n0 < hi:
            acc, m_i, l_i = _fwd_block(acc, m_i, l_i, q, K, V, MASK, BIAS, rows, n0, Sq, Sk, skn, skd, svn, svd,
                                       smm, smn, sbm, sbn, slope, scale, fill, thresh, seed, bh, dcols,
                                       DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT, True, FOLD,
                                       HEAD_D, BLOCK_D, BLOCK_N)
            n0 += BLOCK_N
    else:
        for n0 in tl.range(0, full, BLOCK_N):
            acc, m_i, l_i = _fwd_block(acc, m_i, l_i, q, K, V, MASK, BIAS, rows, n0, Sq, Sk, skn, skd, svn, svd,
                                       smm, smn, sbm, sbn, slope, scale, fill, thresh, seed, bh, dcols,
                                       DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT, False, FOLD,
                                       HEAD_D, BLOCK_D, BLOCK_N)
        for n0 in tl.range(full, hi, BLOCK_N):
            acc, m_i, l_i = _fwd_block(acc, m_i, l_i, q, K, V, MASK, BIAS, rows, n0, Sq, Sk, skn, skd, svn, svd,
                                       smm, smn, sbm, sbn, slope, scale, fill, thresh, seed, bh, dcols,
                                       DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT, True, FOLD,
                                       HEAD_D, BLOCK_D, BLOCK_N)
    # l_i == 0: a row masked everywhere with -inf: 0 / 0 = NaN, as eager's softmax
    out = acc / l_i[:, None]
    if DROPOUT:
        out = out * pscale
    tl.store(O + rows * som + dcols * sod, _cast(out, DT), mask=io_mask)
    # the row statistics for the backward: max and sum apart (m + log(l) would lose log(l)
    # next to a finite fill such as finfo.min, and its rounding at large |m| costs P accuracy)
    if STORE_STATS:
        r = tl.arange(0, BLOCK_M).to(tl.int64) + m0
        if FOLD:
            m_i = m_i * scale  # natural units, as the backward reads them
        tl.store(STATS + 2 * bh * Sq + r, m_i, mask=r < Sq)
        tl.store(STATS + (2 * bh + 1) * Sq + r, l_i, mask=r < Sq)


@triton.jit(do_not_specialize=["Sq", "H"])
def _attn_bwd_delta(O, DO, DELTA, Sq, H, sob, soh, som, sod, sdb, sdh, sdm, sdd,
                    HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    """D = rowsum(dO * O) in fp32, [B * H, Sq]."""
    nm = tl.cdiv(Sq, BLOCK_M)
    pid = tl.program_id(0)
    bh = pid // nm
    m0 = pid % nm * BLOCK_M
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    rows = m0 + tl.arange(0, BLOCK_M).to(tl.int64)
    dcols = tl.arange(0, BLOCK_D).to(tl.int64)[None, :]
    msk = (rows[:, None] < Sq) & (dcols < HEAD_D)
    o = tl.load(O + b * sob + h * soh + rows[:, None] * som + dcols * sod, mask=msk, other=0.0).to(tl.float32)
    do = tl.load(DO + b * sdb + h * sdh + rows[:, None] * sdm + dcols * sdd, mask=msk, other=0.0).to(tl.float32)
    tl.store(DELTA + bh.to(tl.int64) * Sq + rows, tl.sum(o * do, axis=1), mask=rows < Sq)


@triton.jit
def _bwd_tile(q, k, v, do, m, inv_l, delta, rows, n0, cols, Sq, Sk, MASK, BIAS, smm, smn, sbm, sbn, slope,
              scale, fill, thresh, pscale, seed, bh,
              DT: tl.constexpr, SDT: tl.constexpr, BDT: tl.constexpr, MASK_KIND: tl.constexpr,
              BIAS_KIND: tl.constexpr, ROUND: tl.constexpr, DROPOUT: tl.constexpr, EDGE: tl.constexpr):
    """For one [BLOCK_M, BLOCK_N] tile: (P after dropout, in DT; dS, the gradient of the scores
    after the bias, fp32; dS with masked_fill's zeros, times scale: the gradient of q @ k^T).
    EDGE as for _scores: an interior tile has no causally masked score. Rows past Sq need no
    test in either: their q, dO, m, D load as 0 and 1 / l as 1, so P is finite and dS = 0
    (and their dQ is not stored); keys past Sk need none in the dK/dV kernel (v = 0 and their
    dK, dV are not stored), but their -inf in the dQ kernel's edge tiles (a row whose max is a
    finite fill would get P = inf there)."""
    s = _scores(q, k, rows, cols, Sq, Sk, MASK, BIAS, smm, smn, sbm, sbn, slope, scale, fill,
                DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, EDGE, False)
    pr = tl.exp2((s - m) * 1.4426950408889634) * inv_l  # P from the forward's row max and sum
    dp = _mm(do, tl.trans(v), tl.full([q.shape[0], k.shape[0]], 0, tl.float32))
    pd = pr
    if DROPOUT:
        keep = _keep(seed, bh, rows, n0, thresh, k.shape[0])
        # eager drops the probabilities it rounded to q's dtype: P rounded, then scaled and
        # rounded again (dV as eager's to the last bit where P agrees)
        pd = tl.where(keep, _round(pr, DT, ROUND) * pscale, 0.0)
        dp = tl.where(keep, dp * pscale, 0.0)
    ds = pr * (dp - delta)
    dsq = ds
    if MASK_KIND == 1 or (MASK_KIND == 3 and EDGE):
        dsq = tl.where(_filled(rows, cols, Sq, Sk, MASK, smm, smn, MASK_KIND), 0.0, dsq)
    return _cast(pd, DT), ds, dsq * scale


@triton.jit
def _dkdv_block(dk, dv, db, k, v, m0, n0, cols, dcols, Q, DO, MASK, BIAS, STATS, DELTA, DS, Sq, Sk,
                sqm, sqd, sdm, sdd, smm, smn, sbm, sbn, slope, scale, fill, thresh, pscale, seed, bh,
                DT: tl.constexpr, SDT: tl.constexpr, BDT: tl.constexpr, MASK_KIND: tl.constexpr,
                BIAS_KIND: tl.constexpr, ROUND: tl.constexpr, DROPOUT: tl.constexpr, STORE_DS: tl.constexpr,
                EDGE: tl.constexpr, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr):
    """One query block's contribution to a key block's dK and dV, and to the bias gradient:
    its dS tile stored (STORE_DS 1) or summed over its rows into db (STORE_DS 2)."""
    rows = m0 + tl.arange(0, BLOCK_M).to(tl.int64)[:, None]
    io_mask = (rows < Sq) & (dcols < HEAD_D)
    q = tl.load(Q + rows * sqm + dcols * sqd, mask=io_mask, other=0.0)
    do = tl.load(DO + rows * sdm + dcols * sdd, mask=io_mask, other=0.0)
    m = tl.load(STATS + rows, mask=rows < Sq, other=0.0)
    inv_l = 1.0 / tl.load(STATS + Sq + rows, mask=rows < Sq, other=1.0)
    delta = tl.load(DELTA + rows, mask=rows < Sq, other=0.0)
    pd, ds, dsq = _bwd_tile(q, k, v, do, m, inv_l, delta, rows, n0, cols, Sq, Sk, MASK, BIAS, smm, smn, sbm, sbn,
                            slope, scale, fill, thresh, pscale, seed, bh,
                            DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT, EDGE)
    # dV^T += dO^T P_drop and dK^T += Q^T dS: only loaded tiles are transposed. Triton 3.4+
    # on Hopper miscompiles a dot whose operand is the transpose of a dot's result (P, dS:
    # wrong dK from tl.dot(tl.trans(ds), q), as FlashLinearAttention's issue 640 found)
    dv = _mm(tl.trans(do), pd, dv)
    dk = _mm(tl.trans(q), _cast(dsq, DT), dk)
    if STORE_DS == 1:
        tl.store(DS + rows * Sk + cols, ds, mask=(rows < Sq) & (cols < Sk))
    elif STORE_DS == 3:  # a plane shared by the batches (or heads) the bias broadcasts over
        tl.atomic_add(DS + rows * Sk + cols, ds, mask=(rows < Sq) & (cols < Sk))
    elif STORE_DS == 2:
        db += tl.sum(ds, axis=0)  # rows past Sq have dS = 0
    return dk, dv, db


@triton.jit
def _dq_block(dq, q, do, m, inv_l, delta, rows, n0, dcols, K, V, MASK, BIAS, Sq, Sk, skn, skd, svn, svd,
              smm, smn, sbm, sbn, slope, scale, fill, thresh, pscale, seed, bh,
              DT: tl.constexpr, SDT: tl.constexpr, BDT: tl.constexpr, MASK_KIND: tl.constexpr,
              BIAS_KIND: tl.constexpr, ROUND: tl.constexpr, DROPOUT: tl.constexpr, EDGE: tl.constexpr,
              HEAD_D: tl.constexpr, BLOCK_N: tl.constexpr):
    """One key block's contribution to a query block's dQ."""
    ncols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)[:, None]
    kv_mask = dcols < HEAD_D
    if EDGE:
        kv_mask = kv_mask & (ncols < Sk)
    k = tl.load(K + ncols * skn + dcols * skd, mask=kv_mask, other=0.0)
    v = tl.load(V + ncols * svn + dcols * svd, mask=kv_mask, other=0.0)
    cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)[None, :]
    pd, ds, dsq = _bwd_tile(q, k, v, do, m, inv_l, delta, rows, n0, cols, Sq, Sk, MASK, BIAS,
                            smm, smn, sbm, sbn, slope, scale, fill, thresh, pscale, seed, bh,
                            DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT, EDGE)
    return _mm(_cast(dsq, DT), k, dq)


@triton.jit(do_not_specialize=["Sq", "Sk", "H", "thresh", "seed"])
def _attn_bwd_dkdv(Q, K, V, DO, MASK, BIAS, STATS, DELTA, DK, DV, DS, Sq, Sk, H,
                   sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdm, sdd,
                   smb, smh, smm, smn, sbb, sbh, sbm, sbn,
                   scale, fill, thresh, pscale, seed,
                   DT: tl.constexpr, SDT: tl.constexpr, BDT: tl.constexpr, MASK_KIND: tl.constexpr,
                   BIAS_KIND: tl.constexpr, FINITE_FILL: tl.constexpr, ROUND: tl.constexpr,
                   DROPOUT: tl.constexpr, SEED_PTR: tl.constexpr, STORE_DS: tl.constexpr,
                   HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per (batch, head, key block): dK and dV over the query blocks that see it
    (DK, DV contiguous [B, H, Sk, D]); the bias gradient dS into DS: STORE_DS 1, every tile
    (fp32 [B, H, Sq, Sk]); STORE_DS 3 (a bias broadcast over the batch or the heads: sbb or
    sbh 0), every tile added atomically into its plane of fp32 [B|1, H|1, Sq, Sk]; STORE_DS 2
    (a bias broadcast over Sq), summed over the queries (fp32 [B, H, 1, Sk])."""
    nn = tl.cdiv(Sk, BLOCK_N)
    pid = tl.program_id(0)
    bh = pid // nn
    n0 = pid % nn * BLOCK_N
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    bh = bh.to(tl.int64)
    Q += b * sqb + h * sqh
    K += b * skb + h * skh
    V += b * svb + h * svh
    DO += b * sdb + h * sdh
    MASK += b * smb + h * smh
    BIAS += b * sbb + h * sbh
    STATS += 2 * bh * Sq
    DELTA += bh * Sq
    if STORE_DS == 1:
        DS += bh * Sq * Sk
    elif STORE_DS == 3:  # DS [B or 1, H or 1, Sq, Sk]: the bias's own batch and head dims
        DS += (tl.where(sbb == 0, 0, b) * tl.where(sbh == 0, 1, H) + tl.where(sbh == 0, 0, h)) * Sq * Sk
    else:
        DS += bh * Sk
    ncols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)[:, None]  # [BLOCK_N, 1]
    dcols = tl.arange(0, BLOCK_D).to(tl.int64)[None, :]
    kv_mask = (ncols < Sk) & (dcols < HEAD_D)
    k = tl.load(K + ncols * skn + dcols * skd, mask=kv_mask, other=0.0)
    v = tl.load(V + ncols * svn + dcols * svd, mask=kv_mask, other=0.0)
    cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)[None, :]
    slope = 0.0
    if BIAS_KIND == 2:
        slope = tl.load(BIAS).to(tl.float32)
    if DROPOUT:
        seed = _load_seed(seed, SEED_PTR)
    dk = tl.full([BLOCK_D, BLOCK_N], 0, tl.float32)  # transposed: [D, keys]
    dv = tl.full([BLOCK_D, BLOCK_N], 0, tl.float32)
    db = tl.full([BLOCK_N], 0, tl.float32)
    # causal: the first query row that sees key n0 (every row when a finite fill makes fully
    # masked rows uniform over all keys), and the first query block below the diagonal for
    # every key of the block (mid): the blocks from there on are interior (_bwd_tile)
    lo = 0
    mid = 0
    if MASK_KIND == 3:
        lo = tl.maximum(n0 - (Sk - Sq), 0) // BLOCK_M * BLOCK_M
        if FINITE_FILL:
            lo = tl.where(Sq > Sk, 0, lo)
        mid = tl.maximum(lo, tl.cdiv(tl.maximum(n0 + BLOCK_N - 1 - (Sk - Sq), 0), BLOCK_M) * BLOCK_M)
        mid = tl.minimum(mid, tl.cdiv(Sq, BLOCK_M) * BLOCK_M)
    if _WHILE_LOOPS:
        m0 = lo
        while m0 < mid:
            dk, dv, db = _dkdv_block(dk, dv, db, k, v, m0, n0, cols, dcols, Q, DO, MASK, BIAS, STATS, DELTA, DS,
                                     Sq, Sk, sqm, sqd, sdm, sdd, smm, smn, sbm, sbn, slope, scale, fill, thresh,
                                     pscale, seed, bh, DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT,
                                     STORE_DS, True, HEAD_D, BLOCK_M)
            m0 += BLOCK_M
        while m0 < Sq:
            dk, dv, db = _dkdv_block(dk, dv, db, k, v, m0, n0, cols, dcols, Q, DO, MASK, BIAS, STATS, DELTA, DS,
                                     Sq, Sk, sqm, sqd, sdm, sdd, smm, smn, sbm, sbn, slope, scale, fill, thresh,
                                     pscale, seed, bh, DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT,
                                     STORE_DS, False, HEAD_D, BLOCK_M)
            m0 += BLOCK_M
    else:
        for m0 in tl.range(lo, mid, BLOCK_M):
            dk, dv, db = _dkdv_block(dk, dv, db, k, v, m0, n0, cols, dcols, Q, DO, MASK, BIAS, STATS, DELTA, DS,
                                     Sq, Sk, sqm, sqd, sdm, sdd, smm, smn, sbm, sbn, slope, scale, fill, thresh,
                                     pscale, seed, bh, DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT,
                                     STORE_DS, True, HEAD_D, BLOCK_M)
        for m0 in tl.range(tl.maximum(lo, mid), Sq, BLOCK_M):
            dk, dv, db = _dkdv_block(dk, dv, db, k, v, m0, n0, cols, dcols, Q, DO, MASK, BIAS, STATS, DELTA, DS,
                                     Sq, Sk, sqm, sqd, sdm, sdd, smm, smn, sbm, sbn, slope, scale, fill, thresh,
                                     pscale, seed, bh, DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT,
                                     STORE_DS, False, HEAD_D, BLOCK_M)
    keys = n0 + tl.arange(0, BLOCK_N).to(tl.int64)[None, :]  # dK^T, dV^T [BLOCK_D, BLOCK_N]
    dd = tl.arange(0, BLOCK_D).to(tl.int64)[:, None]
    out = bh * Sk * HEAD_D + keys * HEAD_D + dd
    out_mask = (keys < Sk) & (dd < HEAD_D)
    tl.store(DK + out, _cast(dk, DT), mask=out_mask)
    tl.store(DV + out, _cast(dv, DT), mask=out_mask)
    if STORE_DS == 2:
        c = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
        tl.store(DS + c, db, mask=c < Sk)


@triton.jit(do_not_specialize=["Sq", "Sk", "H", "thresh", "seed"])
def _attn_bwd_dq(Q, K, V, DO, MASK, BIAS, STATS, DELTA, DQ, Sq, Sk, H,
                 sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdm, sdd,
                 smb, smh, smm, smn, sbb, sbh, sbm, sbn,
                 scale, fill, thresh, pscale, seed,
                 DT: tl.constexpr, SDT: tl.constexpr, BDT: tl.constexpr, MASK_KIND: tl.constexpr,
                 BIAS_KIND: tl.constexpr, FINITE_FILL: tl.constexpr, ROUND: tl.constexpr,
                 DROPOUT: tl.constexpr, SEED_PTR: tl.constexpr,
                 HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per (batch, head, query block): dQ over the key blocks it sees (DQ
    contiguous [B, H, Sq, D]); key blocks inside Sk and wholly below the causal diagonal are
    interior (_bwd_tile), as in the forward."""
    nm = tl.cdiv(Sq, BLOCK_M)
    pid = tl.program_id(0)
    bh = pid // nm
    m0 = (nm - 1 - pid % nm) * BLOCK_M
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    bh = bh.to(tl.int64)
    Q += b * sqb + h * sqh
    K += b * skb + h * skh
    V += b * svb + h * svh
    DO += b * sdb + h * sdh
    MASK += b * smb + h * smh
    BIAS += b * sbb + h * sbh
    rows = m0 + tl.arange(0, BLOCK_M).to(tl.int64)[:, None]
    dcols = tl.arange(0, BLOCK_D).to(tl.int64)[None, :]
    io_mask = (rows < Sq) & (dcols < HEAD_D)
    q = tl.load(Q + rows * sqm + dcols * sqd, mask=io_mask, other=0.0)
    do = tl.load(DO + rows * sdm + dcols * sdd, mask=io_mask, other=0.0)
    m = tl.load(STATS + 2 * bh * Sq + rows, mask=rows < Sq, other=0.0)
    inv_l = 1.0 / tl.load(STATS + (2 * bh + 1) * Sq + rows, mask=rows < Sq, other=1.0)
    delta = tl.load(DELTA + bh * Sq + rows, mask=rows < Sq, other=0.0)
    slope = 0.0
    if BIAS_KIND == 2:
        slope = tl.load(BIAS).to(tl.float32)
    if DROPOUT:
        seed = _load_seed(seed, SEED_PTR)
    dq = tl.full([BLOCK_M, BLOCK_D], 0, tl.float32)
    hi = _causal_hi(m0, Sq, Sk, BLOCK_M, MASK_KIND == 3, FINITE_FILL)
    full = _causal_full(m0, Sq, Sk, BLOCK_N, MASK_KIND == 3)
    if _WHILE_LOOPS:
        n0 = 0
        while n0 < full:
            dq = _dq_block(dq, q, do, m, inv_l, delta, rows, n0, dcols, K, V, MASK, BIAS, Sq, Sk, skn, skd, svn, svd,
                           smm, smn, sbm, sbn, slope, scale, fill, thresh, pscale, seed, bh,
                           DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT, False, HEAD_D, BLOCK_N)
            n0 += BLOCK_N
        while n0 < hi:
            dq = _dq_block(dq, q, do, m, inv_l, delta, rows, n0, dcols, K, V, MASK, BIAS, Sq, Sk, skn, skd, svn, svd,
                           smm, smn, sbm, sbn, slope, scale, fill, thresh, pscale, seed, bh,
                           DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT, True, HEAD_D, BLOCK_N)
            n0 += BLOCK_N
    else:
        for n0 in tl.range(0, full, BLOCK_N):
            dq = _dq_block(dq, q, do, m, inv_l, delta, rows, n0, dcols, K, V, MASK, BIAS, Sq, Sk, skn, skd, svn, svd,
                           smm, smn, sbm, sbn, slope, scale, fill, thresh, pscale, seed, bh,
                           DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT, False, HEAD_D, BLOCK_N)
        for n0 in tl.range(full, hi, BLOCK_N):
            dq = _dq_block(dq, q, do, m, inv_l, delta, rows, n0, dcols, K, V, MASK, BIAS, Sq, Sk, skn, skd, svn, svd,
                           smm, smn, sbm, sbn, slope, scale, fill, thresh, pscale, seed, bh,
                           DT, SDT, BDT, MASK_KIND, BIAS_KIND, ROUND, DROPOUT, True, HEAD_D, BLOCK_N)
    tl.store(DQ + bh * Sq * HEAD_D + rows * HEAD_D + dcols, _cast(dq, DT), mask=io_mask)


@triton.jit(do_not_specialize=["Sq", "Sk", "thresh", "seed"])
def _keep_kernel(KEEP, Sq, Sk, thresh, seed, SEED_PTR: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr):
    """The keep masks of BLOCK_M query rows of one (batch, head) as the attention kernels draw
    them (_keep): KEEP [B * H, Sq, Sk] int8."""
    nm = tl.cdiv(Sq, BLOCK_M)
    pid = tl.program_id(0)
    bh = (pid // nm).to(tl.int64)
    rows = (pid % nm * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)[:, None]
    seed = _load_seed(seed, SEED_PTR)
    n0 = 0
    while n0 < Sk:
        cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)[None, :]
        keep = _keep(seed, bh, rows, n0, thresh, BLOCK_N)
        tl.store(KEEP + (bh * Sq + rows) * Sk + cols, keep.to(tl.int8), mask=(rows < Sq) & (cols < Sk))
        n0 += BLOCK_N


# --- fa:shared launch ---
# The launch path. A kernel's compiled form is cached per specialization and its launcher
# called directly: on the H200 (bench/experiments/probe_launch.py, host time per call)
# kernel[grid](...) took 12-19 us, CompiledKernel[grid] 7.4-12, a kernel behind
# @triton.autotune 17-29 us, an ATen add 6-10. Tiles come from each template's heuristics
# (no autotuner: it would re-tune every new shape, run configs on the caller's buffers and
# break CUDA-graph capture at an unseen shape).
_COMPILED = {}

try:  # Triton's launch hooks (a profiler such as proton sets them); direct launches skip them
    from triton import knobs as _knobs
    _HOOKS = (_knobs.runtime.launch_enter_hook, _knobs.runtime.launch_exit_hook)
    _HOOKS[0].calls, _HOOKS[1].calls  # noqa: B018 -- this Triton's hook chains, or the fallback
except Exception:  # noqa: BLE001 -- another Triton: always launch through CompiledKernel[grid]
    _HOOKS = None
# The CUDA launcher's inner C function is called directly on the Triton whose launcher this
# code was written against (3.6: CudaLauncher.__call__ adds the cooperative-grid and PDL
# flags and scratch buffers, none when their sizes are 0); on another, the launcher object.
_TRITON_3_6 = triton.__version__.split(".")[:2] == ["3", "6"]


def _compiled(ck, kernel):
    """The _COMPILED entry of kernel's compiled form ck: (launch, head, ck, kernel), launched
    as launch(grid_x, grid_y, grid_z, stream, *head, *args). launch is the C launch function
    where that is safe (Triton 3.6, no scratch buffers), else ck's launcher; ck itself is
    for launches that must go through ck[grid] (a launch hook is set, or this Triton's hooks
    are unknown); the entry keeps kernel alive: entries are keyed on id(kernel), and the id
    of a kernel object that was freed (a wrapper a test made) could be given to a new one."""
    ck._init_handles()
    run = ck.run
    tail = (ck.packed_metadata, None, None, None)  # metadata, launch metadata, enter/exit hooks
    if (_TRITON_3_6 and type(run).__name__ == "CudaLauncher" and not run.global_scratch_size
            and not run.profile_scratch_size):
        return (run.launch, (ck.function, run.launch_cooperative_grid, run.launch_pdl, None, None)
                + tail, ck, kernel)
    return (run, (ck.function,) + tail, ck, kernel)


def _run(entry, grid, args, device):
    """Launch a _compiled entry on grid (3 ints) on the current CUDA stream of device (the
    current device), as CompiledKernel[grid](*args) does without its per-call closure, device
    and stream lookups through Triton's driver, launch-metadata dict and launcher wrapper
    (~4 us of host time). While a launch hook is set, through CompiledKernel[grid] so the
    hook sees it."""
    launch, head, ck, _ = entry
    if _HOOKS is None or _HOOKS[0].calls or _HOOKS[1].calls:
        ck[grid](*args)
        return
    launch(grid[0], grid[1], grid[2], torch._C._cuda_getCurrentRawStream(device), *head, *args)


def _spec_key(args):
    """What Triton specializes launch arguments on, as a cache key: a tensor's dtype and 16-byte
    alignment; an int's being 1, divisible by 16, and its width (codes 10-14, never equal to a
    bool's key); a float nothing; anything else (flags, None) its value. The device is the
    current one (Triton launches there), keyed once per launch. One loop without a call per
    argument: this runs on every launch."""
    key = []
    add = key.append
    for a in args:
        t = type(a)
        if t is int:
            if a == 1:
                add(14)
            else:
                add(10 + (a % 16 == 0) + 2 * (a > 0x7FFFFFFF or a < -0x80000000))
        elif t is float:
            add(0.5)
        elif t is torch.Tensor or isinstance(a, torch.Tensor):
            add((a.dtype, a.data_ptr() % 16 == 0))
        else:
            add(a)
    return tuple(key)


def _spec(a):
    """_spec_key of one argument."""
    return _spec_key((a,))[0]


def _launch(kernel, grid, args, num_warps=4, num_stages=1, fp_fusion=True, **constexprs):
    """``kernel[grid](*args, **constexprs)``; args a tuple, the constexprs the kernel's last
    parameters, passed in its order; fp_fusion=False compiles it without contracting a product
    and a sum into one rounding (Triton's enable_fp_fusion), so that each step is rounded as
    eager's kernels round it. After the first call of a specialization its compiled
    kernel is launched directly. Under the interpreter: the plain call. Under torch.compile:
    launched outside the graph, as without it (Dynamo would trace ``kernel[grid](...)`` into
    its graph and give None for the compiled kernel cached below, and cannot trace the rest).
    Returns the _COMPILED entry it launched through (None under the interpreter or torch.compile)."""
    if torch.compiler.is_compiling():
        torch.compiler.disable(_launch)(kernel, grid, args, num_warps, num_stages, fp_fusion, **constexprs)
        return None
    grid = tuple(grid) + (1,) * (3 - len(grid))
    options = {} if fp_fusion else {"enable_fp_fusion": False}
    if INTERPRET:
        names = kernel.arg_names[len(args):]
        if list(constexprs) != names:
            raise TypeError(f"_launch: constexprs {list(constexprs)}, want {names}")
        kernel[grid](*args, num_warps=num_warps, num_stages=num_stages, **options, **constexprs)
        return None
    consts = tuple(constexprs.values())
    device = torch._C._cuda_getDevice()
    # id(kernel): hashing a JITFunction costs ~2 us of host time per call
    key = (id(kernel), num_warps, num_stages, fp_fusion, consts, device, _spec_key(args))
    entry = _COMPILED.get(key)
    if entry is not None:
        _run(entry, grid, args + consts, device)
        return entry
    names = kernel.arg_names[len(args):]
    if list(constexprs) != names:
        raise TypeError(f"_launch: constexprs {list(constexprs)}, want {names}")
    entry = _COMPILED[key] = _compiled(
        kernel[grid](*args, num_warps=num_warps, num_stages=num_stages, **options, **constexprs), kernel)
    return entry


class _Planned:
    """A launch planned once for a wrapper's call key (kept in its plan): the kernel, grid, the
    arguments after the tensors (``ints``: ints, floats, flags) and the constexprs fixed;
    ``launch(tensors)`` launches it with a call's tensors (a tuple), as ``_launch(kernel, grid,
    tensors + ints, ...)`` would, the compiled kernel looked up in the plan itself by the
    device and the tensors' specialization alone: the constant arguments are the plan's, never
    keyed per call (_launch's key of a GEMM head's 19 arguments took 3.6 us of host time a call
    on a CPU core, its 6 tensors' 2.0). A miss goes through _launch, which gives its entry."""

    __slots__ = ("kernel", "grid", "ints", "num_warps", "num_stages", "fp_fusion", "constexprs", "tail", "entries")

    def __init__(self, kernel, grid, ints, num_warps=4, num_stages=1, fp_fusion=True, **constexprs):
        self.kernel, self.num_warps, self.num_stages, self.constexprs = kernel, num_warps, num_stages, constexprs
        self.fp_fusion = fp_fusion
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.ints = tuple(ints)
        self.tail = self.ints + tuple(constexprs.values())  # what follows the tensors in a launch
        self.entries = {}  # (device, the tensors' _spec_key) -> the _COMPILED entry

    def launch(self, tensors):
        if INTERPRET or torch.compiler.is_compiling():
            _launch(self.kernel, self.grid, tensors + self.ints, self.num_warps, self.num_stages,
                    self.fp_fusion, **self.constexprs)
            return
        device = torch._C._cuda_getDevice()
        spec = _spec_key(tensors)
        entry = self.entries.get((device, spec))
        if entry is None:  # _launch compiles (or finds) it, launches and gives its entry
            self.entries[device, spec] = _launch(self.kernel, self.grid, tensors + self.ints, self.num_warps,
                                                 self.num_stages, self.fp_fusion, **self.constexprs)
            return
        _run(entry, self.grid, tensors + self.tail, device)


def _their_device(args, kwargs):
    """The CUDA device index of a call's arguments (-1: none): the first tensor's (also the
    first inside a tuple or list argument), else a CUDA device argument's."""
    for a in (*args, *kwargs.values()):
        if type(a) in (tuple, list):
            a = next((t for t in a if isinstance(t, torch.Tensor)), None)
        if isinstance(a, torch.Tensor):
            return a.get_device()
        if isinstance(a, (torch.device, str)) and str(a).startswith("cuda"):
            d = torch.device(a).index
            return -1 if d is None else d
    return -1


def _on_their_device(fn):
    """fn, called with the CUDA device of its arguments current (_their_device). Kernels launch,
    and the GEMM tiles are timed, on the current device and its stream, as Triton launches; a
    model split over GPUs (Hugging Face's device_map="auto") calls a layer on cuda:1 while
    cuda:0 is current, where a launch would run another device's code on memory it does not
    own. Where the devices agree, on the CPU, or under torch.compile (which places the kernels
    itself), the call as it is: a first tensor argument's device looked up, and on a GPU the
    current one."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        a = args[0] if args else None
        if type(a) is tuple or type(a) is list:  # fused_backward's inputs
            a = a[0] if a else None
        d = a.get_device() if type(a) is torch.Tensor else _their_device(args, kwargs)
        if d < 0 or torch.compiler.is_compiling() or d == torch._C._cuda_getDevice():
            return fn(*args, **kwargs)
        with torch.cuda.device(d):
            return fn(*args, **kwargs)

    return call
# --- fa:end launch ---


# Tiles: (BLOCK_M, BLOCK_N, num_stages, num_warps), the first of each list the untimed choice.
# From the Triton flash-attention tutorial's H100 configurations (fwd 128 x 64/128, bwd dK/dV
# 32 x 128 and dQ 128 x 32 at 4 warps); pruned by shared memory for the head dim and dtype.
FWD_TILES = [(128, 64, 3, 4), (128, 128, 3, 8), (64, 64, 3, 4), (128, 32, 4, 4), (64, 32, 4, 4), (64, 128, 3, 4)]
DKDV_TILES = [(64, 64, 3, 4), (32, 64, 3, 4), (64, 128, 2, 8), (32, 128, 3, 4), (16, 64, 4, 4)]
# The last two gave a wrong dK on the H200 (Triton 3.6) while dK^T and dV^T were accumulated from
# transposed MMA results (tl.trans of P and dS: the Hopper miscompile of FlashLinearAttention
# issue 640); right since the kernel accumulates dK^T = Q^T dS and dV^T = dO^T P from loaded
# tiles (test_every_tile_candidate_gpu, H200, 2026-12-02; test_no_dot_takes_a_transposed_dot_result_sm90
# keeps the pattern out).
DQ_TILES = [(128, 32, 3, 4), (64, 64, 3, 4), (64, 32, 3, 4), (128, 64, 2, 8), (64, 16, 4, 4)]
# decode-size query buckets (Sq <= 16): 16-row query tiles, wide key tiles (a program per head
# and query block; Sk is not split across programs, as flash-decoding would)
FWD_TILES_DECODE = [(16, 128, 3, 4), (16, 64, 3, 4), (32, 128, 3, 4), (16, 256, 2, 8)]
DKDV_TILES_DECODE = [(16, 128, 3, 4), (16, 64, 3, 4), (32, 64, 3, 4)]
DQ_TILES_DECODE = [(16, 128, 3, 4), (16, 64, 3, 4), (32, 64, 3, 4)]
# where no candidate fits (fp32 at head dims past 128): the first of these that does
_FALLBACK_TILES = [(32, 32, 2, 4), (16, 32, 2, 4), (16, 16, 1, 4)]
INTERP_TILE = (16, 16, 1, 4)
_SMEM = 232448  # H100/H200 opt-in shared memory per block
# _TUNE: time a new bucket's candidates (the GPU); False: the first candidate, untimed
_TUNE = not INTERPRET
_TUNED = {}
_FORCED = {}  # kind -> tile: forced_tiles' (the verifier runs every candidate this way)
_KIND_NAMES = {"fwd": "_attn_fwd", "dkdv": "_attn_bwd_dkdv", "dq": "_attn_bwd_dq"}


def _fits(tile, block_d, elem_bytes, kind, tile_bytes=0):
    """Whether a launch of kind at tile fits in a block's shared memory: an upper bound of what
    Triton 3.6 allocates for sm_90, from the kernels compiled at every tile, head dims 64 and 128,
    fp32 and bf16, each mask and bias kind and dropout, the decode lists too
    (bench/experiments/probe_attention_smem.py; test_smem.py checks the bound against its
    recorded output and compiles the untimed tiles):
    - the forward: the q tile resident (twice in fp32, whose dots take a tf32 copy), the k and
      v tiles pipelined over the stages;
    - the backward's two kernels: one side resident (q and dO in dQ, k and v in dK/dV; two
      copies each in fp32), the other two pipelined; a [BLOCK_M, BLOCK_N] staging tile of P or
      dS and the stages' row statistics (fp32 vectors);
    - a [BLOCK_M, BLOCK_N] tile loaded from memory (an additive or bool mask, an additive bias:
      tile_bytes, their element sizes added) buffered in all stages but the last;
    - 2 KiB of scratch (reductions, layout conversions: the recorded compiles needed at most 512
      bytes past the terms above)."""
    bm, bn, stages, _ = tile
    resident = 2 if elem_bytes == 4 else 1  # copies of each resident tile
    if kind == "fwd":  # q resident, k and v pipelined
        b = (resident * bm * block_d + stages * 2 * bn * block_d) * elem_bytes
    else:  # dK/dV: k and v resident, q and dO pipelined (BLOCK_M rows); dQ: q and dO resident
        side, piped = (bn, bm) if kind == "dkdv" else (bm, bn)
        b = (2 * resident * side * block_d + stages * 2 * piped * block_d) * elem_bytes
        b += bm * bn * elem_bytes + stages * 2 * max(bm, bn) * 4
    b += (stages - 1) * bm * bn * tile_bytes
    return b + 2048 <= _SMEM


def _bucket(n):
    """A sequence length's tile bucket: rounded up to a power of two, at least 16."""
    return 16 if n <= 16 else 1 << (n - 1).bit_length()


def tile_candidates(kind, Sq, head_dim, elem_bytes, tile_bytes=0):
    """The tiles the GPU may pick for a launch of kind ("fwd", "dkdv" or "dq") at Sq queries
    (decode-size buckets, Sq <= 16, have their own lists), head dim head_dim, q's element size
    and the element sizes of the [Sq, Sk] tiles it loads (tile_bytes: the mask's and the
    bias's, _Plan.tile_bytes): the kind's list pruned by shared memory (_fits), first the
    untimed choice. Every one of them must give the same result: the verifier runs each in the
    interpreter (forced_tiles)."""
    block_d = max(16, 1 << (head_dim - 1).bit_length())
    if _bucket(Sq) <= 16:
        tiles = {"fwd": FWD_TILES_DECODE, "dkdv": DKDV_TILES_DECODE, "dq": DQ_TILES_DECODE}[kind]
    else:
        tiles = {"fwd": FWD_TILES, "dkdv": DKDV_TILES, "dq": DQ_TILES}[kind]
    return [t for t in tiles if _fits(t, block_d, elem_bytes, kind, tile_bytes)] or \
        [next(t for t in _FALLBACK_TILES if _fits(t, block_d, elem_bytes, kind, tile_bytes))]


class forced_tiles:
    """``with forced_tiles({"fwd": tile, "dkdv": tile, "dq": tile}):`` launches with these
    tiles (any kinds left out as they would be) instead of the tuned or the interpreter's one:
    how the verifier runs, in the interpreter, each tile the GPU could pick."""

    def __init__(self, tiles):
        bad = sorted(set(tiles) - set(_KIND_NAMES))
        if bad:
            raise ValueError(f"forced_tiles: unknown kinds {bad} (want {sorted(_KIND_NAMES)})")
        self.tiles = {k: tuple(int(x) for x in t) for k, t in tiles.items()}

    def __enter__(self):
        self.saved = dict(_FORCED)
        _FORCED.update(self.tiles)
        return self

    def __exit__(self, *exc):
        _FORCED.clear()
        _FORCED.update(self.saved)


def tile_config():
    """The tiles this process picked, for the benchmark's record: "kind SqxSk: BLOCK_M x
    BLOCK_N, stages, warps" per kernel and bucket (Sq and Sk rounded up to powers of two), the
    forward marked "+stats" where it stores the backward's statistics (a training call) and
    every kernel "+dropout" with p > 0; "; "-separated, "" when none was tuned."""
    names = {id(globals()[n]): k for k, n in _KIND_NAMES.items()}
    out = []
    for key, (bm, bn, stages, warps) in _TUNED.items():
        kind, flags = names.get(key[0], "?"), key[6]
        tags = ("+stats" if kind == "fwd" and flags[-1] is True else "") + ("+dropout" if flags[5] else "")
        out.append(f"{kind}{tags} {key[1]}x{key[2]}: {bm}x{bn} s{stages} w{warps}")
    return "; ".join(out)


def _tile_for(kernel, kind, Sq, Sk, block_d, q, flags, run, tile_bytes=0):
    """The (BLOCK_M, BLOCK_N, num_stages, num_warps) for a launch of kernel: a forced tile
    (forced_tiles); the bucket's tuned tile; on the bucket's first call the candidates
    (tile_candidates) timed with ``run(tile)`` (scratch outputs) and the fastest kept; during
    CUDA-graph capture the first candidate, not kept; the interpreter's INTERP_TILE."""
    tile = _FORCED.get(kind)
    if tile is not None:
        return tile
    if INTERPRET and not _TUNE:
        return INTERP_TILE
    bq, bk = _bucket(Sq), _bucket(Sk)
    key = (id(kernel), bq, bk, block_d, q.dtype, q.get_device(), flags)
    tile = _TUNED.get(key)
    if tile is not None:
        return tile
    cands = tile_candidates(kind, Sq, block_d, q.element_size(), tile_bytes)
    if not _TUNE or torch.cuda.is_current_stream_capturing():
        return cands[0]
    best, best_ms = cands[0], float("inf")
    if len(cands) > 1:
        for t in _agreeing(kind, cands, run):
            try:
                ms = triton.testing.do_bench(lambda: run(t), warmup=5, rep=20, return_mode="median")
            except Exception:  # noqa: BLE001 - a tile that does not compile here (resources) is skipped
                continue
            if ms < best_ms:
                best, best_ms = t, ms
    _TUNED[key] = best
    return best


# how far two tiles' outputs may differ, relative to the largest magnitude: their sums run in
# another order (fp32), then round to the output's dtype (half an ulp each way)
_AGREE_RTOL = {torch.float32: 2.0 ** -12, torch.float16: 2.0 ** -7, torch.bfloat16: 2.0 ** -5}


def _differ(a, b):
    """max |a - b| / max |b| over the positions finite in both (0 when equal), inf where their
    NaN or infinite positions differ."""
    if not torch.equal(torch.isfinite(a), torch.isfinite(b)) or not torch.equal(torch.isnan(a), torch.isnan(b)):
        return float("inf")
    fin = torch.isfinite(b)
    if not bool(fin.any()):
        return 0.0
    a, b = a[fin].float(), b[fin].float()
    scale = float(b.abs().max())
    d = float((a - b).abs().max())
    return d / scale if scale > 0 else d


def _agreeing(kind, cands, run):
    """The candidates whose outputs (``run(tile)``: fresh scratch tensors, on the caller's
    inputs; the first two kept for reference, no more) agree with the first's (_AGREE_RTOL):
    every candidate computes the same sums, so one that disagrees is wrong and is neither timed
    nor picked; a warning names it. When most disagree with the first, the first is the suspect
    one: those agreeing with the second are kept instead. Candidates that do not run here are
    left to the timing (which skips them too)."""
    def agree(o, ref):
        return all(_differ(x, y) <= _AGREE_RTOL.get(y.dtype, 2.0 ** -5) for x, y in zip(o, ref))

    refs, votes, failed = [], [], []  # votes: (tile, agrees with the first, with the second)
    for t in cands:
        try:
            o = [x for x in run(t) if x is not None]
        except Exception:  # noqa: BLE001 - does not compile or launch here (resources)
            failed.append(t)
            continue
        a = [agree(o, r) for r in refs]
        if len(refs) < 2:
            refs.append(o)
            a.append(True)
        if len(votes) == 1 and len(a) == 2:  # the first's agreement with the second, by symmetry
            votes[0] = (votes[0][0], True, a[0])
        votes.append((t, a[0], a[1] if len(a) > 1 else None))
    if len(votes) < 2:
        return cands
    keep = [t for t, a0, _ in votes if a0]
    if 2 * len(keep) <= len(votes):
        alt = [t for t, _, a1 in votes if a1]
        keep = alt if len(alt) > len(keep) else keep
    bad = [t for t, _, _ in votes if t not in keep]
    if bad:
        warnings.warn(f"attention: {kind} tiles {bad} disagree with {keep} on this call's inputs "
                      "and are not used (a miscompiled or wrong tile); please report it", RuntimeWarning)
    return keep + failed


# ---------------------------------------------------------------------------------------------
# Host side


def fill_value(mask_fill, dtype):
    """The masked_fill value: a number, float('-inf') / "-inf", or "min" (dtype's finfo.min)."""
    if isinstance(mask_fill, str):
        if mask_fill == "min":
            return float(torch.finfo(dtype).min)
        if mask_fill == "-inf":
            return float("-inf")
        raise ValueError(f"attention: mask_fill={mask_fill!r}")
    return float(mask_fill)


def _broadcast_strides(t, shape):
    """t's strides when broadcast to the 4-D ``shape`` (0 on broadcast dims: no expanded copy
    is made), or None when it does not broadcast to it."""
    pad = 4 - t.dim()
    if pad < 0:
        return None
    out = [0, 0, 0, 0]
    for i, (n, st) in enumerate(zip(t.shape, t.stride())):
        if n == shape[pad + i]:
            out[pad + i] = st if n != 1 else 0
        elif n != 1:
            return None
    return out


def _rounding(dtype, scale):
    """The kernels' ROUND: 0 without EAGER_ROUNDING or for fp32 scores (every rounding is to
    fp32: nothing to do; q fp32 makes the mask's and bias's promoted types fp32 too); 2 where
    ``* scale`` needs no rounding: scale 1, or a power of two at most 1 on bf16 scores (a bf16
    value times 2**-k is a bf16 value down to 2**-126: a score that small is 0 to the softmax);
    else 1, every rounding."""
    if not EAGER_ROUNDING or dtype == torch.float32:
        return 0
    m, e = math.frexp(scale)
    if scale == 1.0 or (dtype == torch.bfloat16 and m == 0.5 and e <= 1):
        return 2
    return 1


def _folds(scale, rnd, mask_kind, fill, bias_kind):
    """Whether the forward folds the scale into its exp2 (FOLD): scale a positive power of two
    (scaling is exact, so the bits are eager's), ``* scale`` not rounded (ROUND 0 or 2), and
    nothing added or filled after the scaling that would have to be divided by it: no mask, a
    bool or causal mask filled with -inf, no bias or ALiBi (its slope divided, exactly)."""
    m, _ = math.frexp(scale)
    return (scale > 0 and m == 0.5 and rnd != 1 and bias_kind in (0, 2)
            and (mask_kind == 0 or (mask_kind in (1, 3) and fill == float("-inf"))))


def _threshold(p):
    """The kernels' dropout threshold: round(p * 2**32) (a Philox uint32 at or above it keeps
    the score), as the int32 of the same bits (one kernel signature for every p)."""
    t = min(int(round(float(p) * 2.0 ** 32)), 2 ** 32 - 1)
    return t - 2 ** 32 if t >= 2 ** 31 else t


# --- fa:shared seeds ---
_DEVICE_SEEDS = 2**63 - 1  # device_seed's range: any int64 >= 0, as Inductor draws its seeds


def device_seed(device):
    """A fresh dropout seed as a 1-element int64 tensor on device, drawn by torch.randint from
    the device's default generator (reproducible under torch.manual_seed). Nothing is read back
    to the host; under CUDA-graph capture the generator's Philox offset advances at every
    replay, so each replay draws a new seed (how Inductor seeds its dropout)."""
    return torch.randint(0, _DEVICE_SEEDS, (1,), dtype=torch.int64, device=device)


def _seed_arg(fn, seed, device):
    """(the kernels' seed argument, SEED_PTR) for a seed: a 1-element int64 tensor on device is
    passed as a pointer (the kernel loads it), an int by value."""
    if isinstance(seed, torch.Tensor):
        if seed.dtype != torch.int64 or seed.numel() != 1 or seed.device != device:
            raise ValueError(f"{fn}: a seed tensor must hold one int64 on {device} "
                             f"(got {seed.numel()} x {seed.dtype} on {seed.device})")
        return seed, True
    return int(seed), False
# --- fa:end seeds ---


class _Plan:
    """What one call's launches need, checked once per layout (_plan): sizes, the mask's and
    bias's broadcast strides, dtypes and flags; no tensors."""

    def __init__(self, q, k, v, mask, bias, scale, mask_kind, mask_fill, bias_kind, p):
        if q.dtype not in _TL:
            raise TypeError(f"attention: unsupported dtype {q.dtype}")
        if k.dtype != q.dtype or v.dtype != q.dtype:
            raise TypeError(f"attention: q, k and v must share a dtype (got {q.dtype}, {k.dtype}, {v.dtype})")
        if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
            raise ValueError("attention: q, k and v must be [B, H, S, D]")
        B, H, Sq, D = q.shape
        Sk = k.shape[2]
        if k.shape != (B, H, Sk, D) or v.shape != (B, H, Sk, D):
            raise ValueError(f"attention: k {tuple(k.shape)} and v {tuple(v.shape)} do not match q {tuple(q.shape)}")
        if not (k.device == v.device == q.device):
            raise ValueError("attention: q, k and v on different devices")
        if mask_kind not in MASK_KINDS:
            raise ValueError(f"attention: mask_kind={mask_kind!r} (want one of {sorted(MASK_KINDS)})")
        if bias_kind not in BIAS_KINDS:
            raise ValueError(f"attention: bias_kind={bias_kind!r} (want one of {sorted(BIAS_KINDS)})")
        if not (0.0 <= p < 1.0):
            raise ValueError(f"attention: p={p} (want 0 <= p < 1)")
        if not 1 <= D <= 256:
            raise ValueError(f"attention: head dim {D} (want 1..256)")
        shape = [B, H, Sq, Sk]
        self.B, self.H, self.Sq, self.Sk, self.D = B, H, Sq, Sk, D
        self.mask_kind, self.bias_kind = MASK_KINDS[mask_kind], BIAS_KINDS[bias_kind]
        sdt = q.dtype
        self.sm = [0, 0, 0, 0]
        if self.mask_kind in (1, 2):
            if mask is None:
                raise ValueError(f"attention: mask_kind={mask_kind!r} needs a mask")
            if self.mask_kind == 1 and mask.dtype != torch.bool:
                raise TypeError("attention: a bool mask must have dtype torch.bool")
            if self.mask_kind == 2 and not mask.dtype.is_floating_point:
                raise TypeError("attention: an additive mask must be floating point")
            if mask.device != q.device:
                raise ValueError("attention: q and mask on different devices")
            self.sm = _broadcast_strides(mask, shape)
            if self.sm is None:
                raise ValueError(f"attention: mask {tuple(mask.shape)} does not broadcast to {tuple(shape)}")
            if self.mask_kind == 2:
                sdt = torch.promote_types(sdt, mask.dtype)
                if sdt not in _TL:
                    raise TypeError(f"attention: unsupported mask dtype {mask.dtype}")
        bdt = sdt
        self.sb = [0, 0, 0, 0]
        if self.bias_kind == 1:
            if bias is None or not bias.dtype.is_floating_point or bias.device != q.device:
                raise ValueError("attention: bias_kind='additive' needs a floating-point bias on q's device")
            self.sb = _broadcast_strides(bias, shape)
            if self.sb is None:
                raise ValueError(f"attention: bias {tuple(bias.shape)} does not broadcast to {tuple(shape)}")
            bdt = torch.promote_types(sdt, bias.dtype)
            if bdt not in _TL:
                raise TypeError(f"attention: unsupported bias dtype {bias.dtype}")
        elif self.bias_kind == 2:
            if bias is None or bias.shape != (H,) or not bias.dtype.is_floating_point or bias.device != q.device:
                raise ValueError(f"attention: bias_kind='alibi' needs slopes of shape [{H}] on q's device")
            self.sb = [0, bias.stride(0), 0, 0]
            bdt = torch.float32
        # the [Sq, Sk] tiles the kernels load: their element sizes (a bool mask as int8)
        self.tile_bytes = (mask.element_size() if self.mask_kind in (1, 2) else 0) + \
            (bias.element_size() if self.bias_kind == 1 else 0)
        self.fill = fill_value(mask_fill, q.dtype)
        finite = self.mask_kind in (1, 3) and self.fill != float("-inf")
        self.scale, self.p = float(scale), float(p)
        self.block_d = max(16, 1 << (D - 1).bit_length())
        rnd = _rounding(q.dtype, self.scale)
        self.consts = dict(DT=_TL[q.dtype], SDT=_TL[sdt], BDT=_TL[bdt], MASK_KIND=self.mask_kind,
                           BIAS_KIND=self.bias_kind, FINITE_FILL=finite, ROUND=rnd)
        self.fold = _folds(self.scale, rnd, self.mask_kind, self.fill, self.bias_kind)
        self.flags = (self.mask_kind, self.bias_kind, sdt, bdt, finite, p > 0, rnd, self.fold)

    def masks(self, q, mask, bias):
        """(mask, bias) arguments: a bool mask viewed as int8; a dummy pointer (q, never read)
        where absent."""
        if self.mask_kind == 1:
            mask = mask.view(torch.int8)
        elif self.mask_kind != 2:
            mask = q
        return mask, (q if self.bias_kind == 0 else bias)

    def scalars(self, seed):
        return (self.scale, self.fill, _threshold(self.p), 1.0 / (1.0 - self.p), seed)


_PLANS = {}


def _plan(q, k, v, mask, bias, scale, mask_kind, mask_fill, bias_kind, p):
    """The _Plan of this layout (shapes, strides, dtypes, devices, parameters), made once."""
    key = (q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, q.device, k.device, v.device,
           None if mask is None else (mask.shape, mask.stride(), mask.dtype, mask.device),
           None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.device),
           scale, mask_kind, mask_fill, bias_kind, p)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= 1024:
            _PLANS.clear()
        plan = _PLANS[key] = _Plan(q, k, v, mask, bias, scale, mask_kind, mask_fill, bias_kind, p)
    return plan


def _forward(q, k, v, mask, bias, plan, seed, stats=True):
    """o [B, H, Sq, D] (q's dtype) and the row statistics [B * H, 2, Sq] (fp32: max, sum of exp;
    None without ``stats``: an inference call allocates and stores none)."""
    B, H, Sq, Sk, D = plan.B, plan.H, plan.Sq, plan.Sk, plan.D
    o = torch.empty((B, H, Sq, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B * H, 2, Sq), dtype=torch.float32, device=q.device) if stats else None
    if o.numel() == 0:
        return o, lse
    if Sk == 0:
        raise ValueError("attention: Sk = 0 (softmax over no keys)")
    seed, seed_ptr = _seed_arg("attention", seed, q.device)
    mk, bs = plan.masks(q, mask, bias)
    strides = (*q.stride(), *k.stride(), *v.stride(), *plan.sm, *plan.sb)

    def launch(tile, out, lse_):
        bm, bn, stages, warps = tile
        _launch(_attn_fwd, (B * H * -(-Sq // bm),),  # cdiv (triton.cdiv: microseconds per call)
                (q, k, v, mk, bs, out, out if lse_ is None else lse_, Sq, Sk, H, *strides, *out.stride(),
                 *plan.scalars(seed)),
                num_warps=warps, num_stages=stages, **plan.consts, DROPOUT=plan.p > 0, SEED_PTR=seed_ptr,
                STORE_STATS=lse_ is not None, FOLD=plan.fold, HEAD_D=D, BLOCK_D=plan.block_d, BLOCK_M=bm, BLOCK_N=bn)

    def trial(tile):  # scratch outputs, returned for _agreeing
        out, stats = torch.empty_like(o), None if lse is None else torch.empty_like(lse)
        launch(tile, out, stats)
        return out, stats

    tile = _tile_for(_attn_fwd, "fwd", Sq, Sk, plan.block_d, q, plan.flags + (D, seed_ptr, stats), trial,
                     plan.tile_bytes)
    launch(tile, o, lse)
    return o, lse


def _backward(do, q, k, v, o, lse, mask, bias, plan, seed, want_ds):
    """(dq, dk, dv, ds): ds the gradient of the scores after the bias when want_ds, else None:
    fp32 [B, H, 1, Sk] summed over the queries when the bias broadcasts over them (a padding
    bias [B|1, H|1, 1, Sk]: O(S) memory); [B|1, H|1, Sq, Sk] for a bias of full rows broadcast
    over the batch or the heads (a T5 or relative-position bias [1, H, Sq, Sk]), the batches'
    or heads' dS added by fp32 atomics in the kernel (B times less memory than the [B, H, Sq,
    Sk] dS and no sum after it; under torch.use_deterministic_algorithms the full dS and a sum,
    whose order is fixed); else fp32 [B, H, Sq, Sk]."""
    B, H, Sq, Sk, D = plan.B, plan.H, plan.Sq, plan.Sk, plan.D
    dev = q.device
    dq = torch.empty((B, H, Sq, D), dtype=q.dtype, device=dev)
    dk = torch.empty((B, H, Sk, D), dtype=q.dtype, device=dev)
    dv = torch.empty((B, H, Sk, D), dtype=q.dtype, device=dev)
    ds_mode = 0
    ds = None
    if want_ds:  # every [B, H, 1, Sk] column is stored; causal skipping leaves full tiles unwritten
        # the bias's own batch and head sizes; an expanded view (stride 0 on a full-size dim)
        # needs its own gradient per batch / head (expand's backward sums them), so not mode 3
        shape4 = (1,) * (4 - bias.dim()) + tuple(bias.shape)
        bb, hb = (1 if shape4[0] == 1 else B), (1 if shape4[1] == 1 else H)
        expanded = (bb == B > 1 and plan.sb[0] == 0) or (hb == H > 1 and plan.sb[1] == 0)
        if plan.sb[2] == 0:
            ds_mode, shape = 2, (B, H, 1, Sk)
        elif (bb, hb) != (B, H) and not expanded and not torch.are_deterministic_algorithms_enabled():
            ds_mode, shape = 3, (bb, hb, Sq, Sk)  # summed over the broadcast batches / heads by atomics
        else:
            ds_mode, shape = 1, (B, H, Sq, Sk)
        ds = (torch.empty if ds_mode == 2 else torch.zeros)(shape, dtype=torch.float32, device=dev)
    if dq.numel() == 0 or dk.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_(), None if ds is None else ds.zero_()
    seed, seed_ptr = _seed_arg("attention", seed, dev)
    mk, bs = plan.masks(q, mask, bias)
    delta = torch.empty((B * H, Sq), dtype=torch.float32, device=dev)
    bm = 16 if INTERPRET else 64
    _launch(_attn_bwd_delta, (B * H * -(-Sq // bm),), (o, do, delta, Sq, H, *o.stride(), *do.stride()),
            HEAD_D=D, BLOCK_D=plan.block_d, BLOCK_M=bm)
    common = (*q.stride(), *k.stride(), *v.stride(), *do.stride(), *plan.sm, *plan.sb, *plan.scalars(seed))
    consts = dict(plan.consts, DROPOUT=plan.p > 0, SEED_PTR=seed_ptr)

    def dkdv(tile, dk_, dv_, ds_):
        bm_, bn, stages, warps = tile
        _launch(_attn_bwd_dkdv, (B * H * -(-Sk // bn),),
                (q, k, v, do, mk, bs, lse, delta, dk_, dv_, q if ds_ is None else ds_, Sq, Sk, H, *common),
                num_warps=warps, num_stages=stages, **consts, STORE_DS=0 if ds_ is None else ds_mode,
                HEAD_D=D, BLOCK_D=plan.block_d, BLOCK_M=bm_, BLOCK_N=bn)

    def dqk(tile, dq_):
        bm_, bn, stages, warps = tile
        _launch(_attn_bwd_dq, (B * H * -(-Sq // bm_),),
                (q, k, v, do, mk, bs, lse, delta, dq_, Sq, Sk, H, *common),
                num_warps=warps, num_stages=stages, **consts,
                HEAD_D=D, BLOCK_D=plan.block_d, BLOCK_M=bm_, BLOCK_N=bn)

    flags = plan.flags + (D, seed_ptr)
    def dkdv_trial(tile):  # scratch outputs; dK and dV returned for _agreeing (dS, up to Sq * Sk, not)
        out = (torch.empty_like(dk), torch.empty_like(dv))
        dkdv(tile, *out, None if ds is None else torch.empty_like(ds))
        return out

    def dq_trial(tile):
        out = torch.empty_like(dq)
        dqk(tile, out)
        return (out,)

    t = _tile_for(_attn_bwd_dkdv, "dkdv", Sq, Sk, plan.block_d, q, flags + (ds_mode,), dkdv_trial, plan.tile_bytes)
    dkdv(t, dk, dv, ds)
    t = _tile_for(_attn_bwd_dq, "dq", Sq, Sk, plan.block_d, q, flags, dq_trial, plan.tile_bytes)
    dqk(t, dq)
    return dq, dk, dv, ds


def _sum_to(g, shape):
    """g [B, H, Sq, Sk] summed over the dims a tensor of ``shape`` broadcasts along."""
    lead = g.dim() - len(shape)
    dims = list(range(lead)) + [lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1]
    return (g.sum(dims, keepdim=True) if dims else g).view(shape)


class AttentionFunction(torch.autograd.Function):
    """Autograd for attention: gradients for q, k, v and an additive bias (none for masks or
    ALiBi slopes). The forward saves q, k, v, O and the logsumexp (no probabilities, no
    dropout mask: the backward regenerates both). ``seed`` as for attention()."""

    @staticmethod
    @_on_their_device
    def forward(ctx, q, k, v, mask, bias, scale, mask_kind, mask_fill, bias_kind, p, seed):
        plan = _plan(q, k, v, mask, bias, scale, mask_kind, mask_fill, bias_kind, p)
        if p > 0 and seed is None:
            seed = device_seed(q.device)
        if p == 0:
            seed = 0
        o, lse = _forward(q, k, v, mask, bias, plan, seed, stats=True)
        tensor_seed = isinstance(seed, torch.Tensor)
        ctx.save_for_backward(q, k, v, o, lse, mask, bias, seed if tensor_seed else None)
        ctx.plan, ctx.seed = plan, (None if tensor_seed else int(seed))
        return o

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, do):
        q, k, v, o, lse, mask, bias, tseed = ctx.saved_tensors
        plan = ctx.plan
        want_ds = plan.bias_kind == 1 and ctx.needs_input_grad[4]
        dq, dk, dv, ds = _backward(do, q, k, v, o, lse, mask, bias, plan,
                                   tseed if ctx.seed is None else ctx.seed, want_ds)
        db = _sum_to(ds, bias.shape).to(bias.dtype) if want_ds else None
        return dq, dk, dv, None, db, None, None, None, None, None, None


@_on_their_device
def attention(q, k, v, mask=None, bias=None, *, scale=1.0, mask_kind="none", mask_fill=float("-inf"),
              bias_kind="none", p=0.0, seed=None):
    """The eager chain of reference.py in one kernel (see the module docstring). ``seed`` (p > 0):
    None draws a fresh one on q's device (device_seed), else an int or a 1-element int64 tensor
    on q's device. Differentiable (AttentionFunction) in q, k, v and an additive bias; a call
    that no gradient reaches (inference) skips autograd's bookkeeping."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        return AttentionFunction.apply(q, k, v, mask, bias, scale, mask_kind, mask_fill, bias_kind, p, seed)
    plan = _plan(q, k, v, mask, bias, scale, mask_kind, mask_fill, bias_kind, p)
    if p == 0:
        seed = 0
    elif seed is None:
        seed = device_seed(q.device)
    return _forward(q, k, v, mask, bias, plan, seed, stats=False)[0]


@_on_their_device
def attention_lse(q, k, v, mask=None, bias=None, *, scale=1.0, mask_kind="none", mask_fill=float("-inf"),
                  bias_kind="none", p=0.0, seed=0):
    """(out, logsumexp [B, H, Sq] fp32, natural log) without autograd: for tests and callers
    that keep the statistics."""
    plan = _plan(q, k, v, mask, bias, scale, mask_kind, mask_fill, bias_kind, p)
    o, stats = _forward(q, k, v, mask, bias, plan, seed)
    m, l = stats[:, 0], stats[:, 1]
    return o, (torch.where(m == float("-inf"), 0.0, m) + torch.log(l)).view(plan.B, plan.H, plan.Sq)


@_on_their_device
def dropout_mask(shape, p, seed, device):
    """The keep mask (bool [B, H, Sq, Sk]) attention applies for these sizes, p and seed (an int,
    or the seed tensor a call used: read on the device, as the kernels read it)."""
    B, H, Sq, Sk = (int(d) for d in shape)
    keep = torch.empty((B * H, Sq, Sk), dtype=torch.int8, device=device)
    if keep.numel():
        seed, seed_ptr = _seed_arg("attention", seed, keep.device)
        bm = 16
        _launch(_keep_kernel, (B * H * -(-Sq // bm),), (keep, Sq, Sk, _threshold(p), seed),
                SEED_PTR=seed_ptr, BLOCK_M=bm, BLOCK_N=64 if INTERPRET else 128)
    return keep.view(B, H, Sq, Sk).bool()


class Attention(torch.nn.Module):
    """Drop-in for the eager chain: ``Attention(scale=..., mask_kind=..., mask_fill=...,
    bias_kind=..., p=...)(q, k, v, mask, bias)``. Dropout only in training mode, a fresh seed
    per call drawn on q's device."""

    def __init__(self, *, scale=1.0, mask_kind="none", mask_fill=float("-inf"), bias_kind="none", p=0.0):
        super().__init__()
        if mask_kind not in MASK_KINDS:
            raise ValueError(f"mask_kind={mask_kind!r}")
        if bias_kind not in BIAS_KINDS:
            raise ValueError(f"bias_kind={bias_kind!r}")
        self.scale, self.mask_kind, self.mask_fill, self.bias_kind, self.p = scale, mask_kind, mask_fill, bias_kind, p

    def forward(self, q, k, v, mask=None, bias=None):
        p = self.p if self.training else 0.0
        return attention(q, k, v, mask, bias, scale=self.scale, mask_kind=self.mask_kind, mask_fill=self.mask_fill,
                         bias_kind=self.bias_kind, p=p)
