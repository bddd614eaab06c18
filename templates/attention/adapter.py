"""Uniform test/bench interface for the attention template (see docs/templates.md).

SHAPES: q [B, H, Sq, D], k [B, H, Sk, D], v [B, H, Sk, D], then the mask's shape when
mask_kind is "bool" or "additive" (broadcastable to [B, H, Sq, Sk]), then the bias's when
bias_kind is "additive" ([B|1, H|1, Sq|1, Sk]: a padding mask [B, 1, 1, Sk] after a causal
fill too) or "alibi" ([H]). params: mask_kind, mask_fill,
scale, p, bias_kind, mask_dtype (an additive mask's dtype when it differs from the case's:
autocast's fp32 mask on bf16 scores).

Inputs (make_inputs): "q", "k", "v", "mask" (None without one), "bias" (an additive bias, None
otherwise: it gets gradients), "slopes" (ALiBi's, None otherwise: no gradient), "seed". Masks
mask about 30% of positions, never key 0 with a -inf fill (a row masked everywhere with -inf is
NaN in eager, and so are eager's gradients of every key of its head: the verifier's
masked_rows variant covers the forward of such rows); with a finite fill or an additive mask
the first mask row is masked everywhere (finfo.min for additive masks, as HF masks padding):
eager gives it uniform weights; an additive mask's second row is left padding written as -inf
over its first half of the keys (rows whose first key blocks are all -inf: the running max's
guard in the forward, which would otherwise give exp(-inf - -inf)). In test mode (poison=True or autograd=True) with p > 0,
fused() stores the kernel's dropout mask in inputs["keep"] for the reference.

The gradient cases (fused(autograd=True)) check the backward with dropout and without in every
folder, since dropout is the caller's choice (train / eval) wherever the folder is used:
fused() returns the output at the traced p and at the other one (GRAD_P when the traced p is
0, else 0), and tells reference() through inputs["other_p"] (with "keep_other"). Gradients of
16-bit cases are held to the quack bound (QUACK_GRAD: within twice eager's own error against
the fp32 chain): eager rounds the scores, the probabilities and both GEMMs' outputs in the
16-bit type, the kernel keeps them in fp32.

library_ops: F.scaled_dot_product_attention under each backend and FlexAttention, for the
benchmark (see its docstring).
"""

import torch

import fa_testing as fat

KIND = "gemm"
OUTPUTS = ["out"]
GRAD_INPUTS = ["q", "k", "v", "bias"]
QUACK_GRAD = True
# fp32 gradients against eager's (assert_close), not the fp64 chain's: the "min" fill is the
# dtype's finfo.min, and in fp64 a bias added to it overflows to -inf, so a row masked
# everywhere is NaN there where eager gives it uniform weights (test_grad_against_fp64 checks
# fp32 against fp64 with a finite fill)
QUACK_GRAD_FP32 = False
GRAD_P = 0.2  # the gradient cases' dropout where the traced p is 0
FLEX_COMPILE = True  # library_ops' flex op through torch.compile (tests on the CPU turn it off)


def _kinds(params):
    return params.get("mask_kind", "none"), params.get("bias_kind", "none")


def _finite_fill(params):
    f = params.get("mask_fill", float("-inf"))
    return not (f == "-inf" or (isinstance(f, float) and f == float("-inf")))


def _case(q, k, v, kind, bias_kind, mask=None, bias=None):
    """SHAPES for q, k, v [B, H, Sq, D] / [B, H, Sk, D] and the mask / bias shapes asked for."""
    out = [list(q), list(k), list(v)]
    if kind in ("bool", "additive"):
        out.append(list(mask))
    if bias_kind == "additive":
        out.append(list(bias))
    elif bias_kind == "alibi":
        out.append([q[1]])
    return out


def _shapes(B, H, Sq, Sk, D, params, mask="pad", bias="head"):
    """A SHAPES list: mask "pad" ([B, 1, 1, Sk], HF's padding mask), "full" ([B, 1, Sq, Sk]) or
    "2d" ([Sq, Sk]); bias "head" ([1, H, Sq, Sk]), "full" ([B, H, Sq, Sk]) or "pad" ([B, 1, 1, Sk]:
    a bias broadcast over the heads and the queries)."""
    kind, bias_kind = _kinds(params)
    m = {"pad": [B, 1, 1, Sk], "full": [B, 1, Sq, Sk], "2d": [Sq, Sk]}[mask]
    b = {"head": [1, H, Sq, Sk], "full": [B, H, Sq, Sk], "pad": [B, 1, 1, Sk]}[bias]
    return _case([B, H, Sq, D], [B, H, Sk, D], [B, H, Sk, D], kind, bias_kind, mask=m, bias=b)


FAR_B = 3  # batches of the FAR case: batch 2 starts 2 * WIDE_STRIDE = 2**31 + 128 elements in


def _far_shapes(params):
    return _shapes(FAR_B, 1, 17, 17, 32, params)


def adversarial(params):
    # ragged Sq and Sk (1, primes, one past a 16-block, 127 / 129), Sq != Sk both ways (a KV
    # cache; Sq > Sk fully masks rows under causal), head dims 32 / 64 / 80 (padded to 128) /
    # 128, broadcast masks and biases of several shapes. The first one (also a gradient case)
    # has Sq <= Sk: no row masked everywhere.
    return [
        _shapes(2, 2, 17, 33, 64, params),
        _shapes(1, 1, 1, 1, 32, params),
        _shapes(1, 2, 1, 37, 64, params, mask="full"),
        _shapes(2, 1, 33, 17, 80, params, mask="2d", bias="full"),
        _shapes(1, 1, 129, 127, 32, params, mask="full"),
        _shapes(1, 1, 9, 9, 128, params),
        _far_shapes(params),  # FAR: q, k and v with batch offsets past 2**31 (make_inputs)
    ]


def has_backward(params):
    return True


def grad_shapes(params):
    """Gradient cases beyond the traced shape and the first adversarial one: ragged Sq = Sk
    past two blocks, head dim 80 (padded loads), a full-size bias (no broadcast dim to sum);
    a bias broadcast over the heads and queries (summed over the queries in the kernel, over
    the heads after it: the traced [1, H, Sq, Sk] bias is summed over the batch by the kernel
    alone); with a finite fill also Sq > Sk (rows masked everywhere: uniform, their key blocks
    visited although causal skips them for other rows)."""
    out = [_shapes(1, 2, 33, 33, 80, params, mask="full", bias="full")]
    if _kinds(params)[1] == "additive":
        out.append(_shapes(2, 2, 20, 37, 32, params, bias="pad"))
    if _finite_fill(params) and params.get("mask_kind") in ("bool", "causal"):
        out.append(_shapes(1, 1, 40, 17, 32, params, mask="full"))
    return out


TILE_S = 168  # the tile cases' sequence length: past the largest candidate's 128-block, ragged against every block size (16, 32, 64, 128; as TILE_S - 17 is), at about 70% of the cost of 200


def tile_bytes(dtype, params):
    """The element sizes of the [Sq, Sk] tiles the kernels load for this case (the mask's, a
    bool one as int8, and an additive bias's, as make_inputs makes them): _Plan.tile_bytes,
    by which kernel.tile_candidates prunes the tiles."""
    kind, bias_kind = _kinds(params)
    dt = dtype if isinstance(dtype, str) else fat.name(dtype)
    n = {"bool": 1, "additive": fat.DTYPES[params.get("mask_dtype") or dt].itemsize}.get(kind, 0)
    return n + (fat.DTYPES[dt].itemsize if bias_kind == "additive" else 0)


def tile_cases(kernel, shapes, dtype, params):
    """The verifier's tile cases: every tile the GPU could pick for this case's bucket
    (kernel.tile_candidates; the decode lists where the traced Sq <= 16) run in the interpreter
    under kernel.forced_tiles, as a list of (name, shapes, tiles, grad). Gradient case i forces
    the i-th dK/dV, dQ and forward candidate (cycling the shorter lists: max(len) of the
    backward's lists cover both backward kernels' and the training forward's candidates), and
    one forward case per forward candidate covers the inference path (no statistics). Shapes:
    B = H = 1 (the grid's batch and head arithmetic is the adversarial cases'), the traced head
    dim (the candidates are pruned by it), Sq = Sk = TILE_S (ragged against every block size,
    past the largest candidate's 128 rows and keys; causal diagonals crossing blocks of every
    size) or, for a decode bucket, the traced Sq against Sk = TILE_S; a traced Sq > Sk or
    Sq < Sk kept as Sk or Sq = TILE_S - 17."""
    q, k = shapes[0], shapes[1]
    sq, sk, d = q[2], k[2], q[3]
    elem = torch.tensor([], dtype=fat.DTYPES[dtype] if isinstance(dtype, str) else dtype).element_size()
    if sq <= 16:
        Sq, Sk = sq, TILE_S
    else:
        Sq, Sk = TILE_S - 17 * (sq < sk), TILE_S - 17 * (sq > sk)
    kind, _ = _kinds(params)
    case = _shapes(1, 1, Sq, Sk, d, params, mask="full" if kind in ("bool", "additive") else "pad")
    lists = {kd: kernel.tile_candidates(kd, Sq, d, elem, tile_bytes(dtype, params)) for kd in ("fwd", "dkdv", "dq")}
    n = max(len(lists["dkdv"]), len(lists["dq"]))
    out = []
    for i in range(n):
        tiles = {kd: v[i % len(v)] for kd, v in lists.items()}
        name = "tiles-" + "-".join(f"{kd}{t[0]}x{t[1]}" for kd, t in tiles.items())
        out.append((name, case, tiles, True))
    for i, t in enumerate(lists["fwd"]):
        out.append((f"tiles-fwd{t[0]}x{t[1]}s{t[2]}w{t[3]}", case, {"fwd": t}, False))
    return out


def interp_shapes(shapes):
    """The traced shapes at interpreter size: B and H at most 2, Sq and Sk at most 45 (ragged
    against the interpreter's 16-blocks), D as traced; mask and bias dims follow."""
    q, k = shapes[0], shapes[1]
    B, H = min(q[0], 2), min(q[1], 2)
    Sq, Sk = min(q[2], 45), min(k[2], 45)
    full = [B, H, Sq, Sk]
    out = [[B, H, Sq, q[3]], [B, H, Sk, k[3]], [B, H, Sk, k[3]]]
    for s in shapes[3:]:
        if len(s) == 1:  # ALiBi slopes
            out.append([H])
        else:
            out.append([1 if d == 1 else f for d, f in zip(s, full[4 - len(s):])])
    return out


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    kind, bias_kind = _kinds(params)
    q = fat.randn(shapes[0], dtype, device, g)
    k = fat.randn(shapes[1], dtype, device, g)
    v = fat.randn(shapes[2], dtype, device, g)
    # every head's first query zero: its scores are 0 (uniform where no mask or bias), and its
    # row max exactly 0 where key 0 is open: a backward that read one row past a head's
    # statistics would take the next head's first row max as a row sum, and 1 / 0 shows
    q[:, :, 0] = 0
    rest = list(shapes[3:])
    mask = bias = slopes = None
    if kind in ("bool", "additive"):
        mshape = rest.pop(0)
        masked = torch.rand(list(mshape), generator=g) < 0.3
        masked[..., 0] = False  # key 0 open: no row masked everywhere by chance
        if kind == "bool":
            if _finite_fill(params) and masked.numel():
                masked.view(-1, mshape[-1])[0] = True  # uniform in eager
            mask = masked.to(device)
        else:
            mdt = fat.DTYPES[params.get("mask_dtype") or fat.name(dtype)]
            add = (torch.randn(list(mshape), generator=g) * 0.5).masked_fill(masked, torch.finfo(mdt).min)
            rows = add.view(-1, mshape[-1])
            if len(rows):  # (none in an empty batch)
                rows[0] = torch.finfo(mdt).min  # a padding row: uniform in eager
            if len(rows) > 1:  # left padding written as -inf: the first keys' blocks all -inf
                rows[1, :mshape[-1] // 2] = float("-inf")
            mask = add.to(device=device, dtype=mdt)
    if bias_kind == "additive":
        bias = fat.randn(rest.pop(0), dtype, device, g)
    elif bias_kind == "alibi":
        H = shapes[0][1]
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], dtype=torch.float32, device=device)
    if shapes == _far_shapes(params):
        q, k, v = far_views([q, k, v])
    return {"q": q, "k": k, "v": v, "mask": mask, "bias": bias, "slopes": slopes, "seed": 77 + int(seed)}


def far_views(ts):
    """q, k, v ([B, H, S, D], one shape), same values, as views into one storage whose batch
    stride is fat.WIDE_STRIDE (2**30 + 64 elements): batch 2's elements lie past 2**31 from
    the views' first element, so a batch offset computed in 32 bits wraps. The views start
    WIDE_BASE elements in, where a wrapped offset lands on NaN (the storage's start); the
    storage is reserved, not committed, on the CPU (fat.far_storage), real memory on a GPU."""
    t = ts[0]
    B, H, S, D = t.shape
    n = H * S * D
    buf = fat.far_storage(fat.WIDE_BASE + (B - 1) * fat.WIDE_STRIDE + len(ts) * n, t.dtype, t.device)
    buf[:4096] = float("nan")
    out = []
    for i, x in enumerate(ts):
        view = buf.as_strided(tuple(x.shape), (fat.WIDE_STRIDE, S * D, D, 1), fat.WIDE_BASE + i * n)
        view.copy_(x)
        out.append(view)
    return out


def _bias(inputs):
    return inputs["bias"] if inputs.get("bias") is not None else inputs.get("slopes")


def _kw(params):
    return dict(scale=params.get("scale", 1.0), mask_kind=params.get("mask_kind", "none"),
                mask_fill=params.get("mask_fill", float("-inf")), bias_kind=params.get("bias_kind", "none"))


def _keep(kernel, inputs, p):
    q, k = inputs["q"], inputs["k"]
    return kernel.dropout_mask((q.shape[0], q.shape[1], q.shape[2], k.shape[2]), p, inputs["seed"], q.device)


def fused(kernel, inputs, params, poison=False, autograd=False):
    q, k, v, mask, seed = inputs["q"], inputs["k"], inputs["v"], inputs["mask"], inputs["seed"]
    p = params.get("p", 0.0)
    if (poison or autograd) and p > 0:
        inputs["keep"] = _keep(kernel, inputs, p)
    if autograd:
        other = inputs["other_p"] = 0.0 if p > 0 else GRAD_P
        if other > 0:
            inputs["keep_other"] = _keep(kernel, inputs, other)
        return tuple(kernel.attention(q, k, v, mask, _bias(inputs), **_kw(params), p=x, seed=seed) for x in (p, other))
    return (kernel.attention(q, k, v, mask, _bias(inputs), **_kw(params), p=p, seed=seed),)


def reference(ref, inputs, params):
    args = (inputs["q"], inputs["k"], inputs["v"], inputs["mask"], _bias(inputs))
    ys = [ref.attention(*args, **_kw(params), p=params.get("p", 0.0), keep=inputs.get("keep"))]
    if "other_p" in inputs:  # the gradient cases: the other p too
        ys.append(ref.attention(*args, **_kw(params), p=inputs["other_p"], keep=inputs.get("keep_other")))
    return tuple(ys)


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes), at the
    traced p; under the gradient checks (inputs["_test"]) it leaves the dropout mask for the
    reference."""
    p = params.get("p", 0.0)
    if inputs.get("_test") and p > 0:
        inputs["keep"] = _keep(kernel, inputs, p)
    return kernel.attention(inputs["q"], inputs["k"], inputs["v"], inputs["mask"], _bias(inputs), **_kw(params),
                            p=p, seed=inputs["seed"])


def tolerance(dtype, shapes, params, grad=False):
    return fat.tol(KIND, dtype)


def nbytes(shapes, dtype, params):
    """q, k, v and the output once each, plus the mask and bias as stored (broadcast dims once)."""
    def numel(s):
        n = 1
        for d in s:
            n *= d
        return n

    es = torch.tensor([], dtype=dtype).element_size()
    total = (numel(shapes[0]) * 2 + numel(shapes[1]) + numel(shapes[2])) * es
    kind, bias_kind = _kinds(params)
    rest = list(shapes[3:])
    if kind in ("bool", "additive") and rest:
        mdt = fat.DTYPES[params.get("mask_dtype") or fat.name(dtype)]
        total += numel(rest.pop(0)) * (1 if kind == "bool" else torch.tensor([], dtype=mdt).element_size())
    if bias_kind == "additive" and rest:
        total += numel(rest.pop(0)) * es
    elif bias_kind == "alibi" and rest:
        total += numel(rest.pop(0)) * 4
    return total


def bwd_nbytes(shapes, dtype, params):
    """Fewest bytes the fused backward must move: read q, k, v, the output and its gradient
    and the forward's row statistics (the log-sum-exp, fp32, one a query row), the mask as
    stored and the bias (ALiBi: its slopes); write dq, dk, dv and an additive bias' gradient
    (at its stored shape). Dropout's mask is regenerated from the seed."""
    def numel(s):
        n = 1
        for d in s:
            n *= d
        return n

    es = torch.tensor([], dtype=dtype).element_size()
    q, k, v = shapes[0], shapes[1], shapes[2]
    nq, nk, nv = numel(q), numel(k), numel(v)
    no = numel(q[:-1]) * v[-1]  # the output: q's rows, v's head dim
    total = (2 * (nq + nk + nv) + 2 * no) * es + 4 * numel(q[:-1])
    kind, bias_kind = _kinds(params)
    rest = list(shapes[3:])
    if kind in ("bool", "additive") and rest:
        mdt = fat.DTYPES[params.get("mask_dtype") or fat.name(dtype)]
        total += numel(rest.pop(0)) * (1 if kind == "bool" else torch.tensor([], dtype=mdt).element_size())
    if bias_kind == "additive" and rest:
        total += 2 * numel(rest.pop(0)) * es
    elif bias_kind == "alibi" and rest:
        total += numel(rest.pop(0)) * 4
    return total


def _kept_pairs(sq, sk, causal):
    """The (query, key) pairs a kernel computes: all, or under causal those at or below the
    diagonal through the last query and key (Sq > Sk masks the first Sq - Sk rows everywhere),
    as the cost model counts them (patterns.keptPairs)."""
    if not causal:
        return sq * sk
    return sum(min(sk, max(0, i + 1 + sk - sq)) for i in range(sq))


def flops(shapes, dtype, params):
    """The forward's two products over the kept pairs (q k^T and P v): at long sequences its
    floor is these FLOPs at the GEMM rate, not its bytes."""
    B, H, Sq, D = shapes[0]
    Sk, Dv = shapes[1][2], shapes[2][3]
    pairs = _kept_pairs(Sq, Sk, params.get("mask_kind") == "causal")
    return 2 * B * H * pairs * (D + Dv)


def bwd_flops(shapes, dtype, params):
    """The backward's five products over the kept pairs, FlashAttention-2's: the scores again
    (q k^T) and dP = dO v^T, dV = P^T dO, dQ = dS k, dK = dS^T q; with one head dim for q, k
    and v, 2.5x the forward's two."""
    B, H, Sq, D = shapes[0]
    Sk, Dv = shapes[1][2], shapes[2][3]
    pairs = _kept_pairs(Sq, Sk, params.get("mask_kind") == "causal")
    return 2 * B * H * pairs * (3 * D + 2 * Dv)

# ---------------------------------------------------------------------------------------------
# Library calls for the benchmark


ROWS_MASKED = ("causal with Sq > Sk masks the first Sq - Sk rows everywhere: eager gives them NaN (-inf fill) "
               "or uniform weights (finite fill), the library 0")


def _base_mask(inputs, params):
    """The case's mask as SDPA takes it, built once: (attn_mask or None, is_causal), or a
    string saying why SDPA cannot express it. A bool attn_mask is True = keep (the inverse of
    masked_fill's); a float one is added to the scores."""
    q, k = inputs["q"], inputs["k"]
    Sq, Sk = q.shape[2], k.shape[2]
    kind = params.get("mask_kind", "none")
    finite = _finite_fill(params)
    fill = params.get("mask_fill", float("-inf"))
    fill = torch.finfo(q.dtype).min if fill == "min" else float(fill)
    if kind == "none":
        return None, False
    if kind == "causal":
        if Sq > Sk:
            return ROWS_MASKED, False
        if Sq == Sk:
            return None, True
        keep = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device).tril(Sk - Sq)
        return keep, False  # SDPA's is_causal is top-left aligned: the bottom-right one as a mask
    if kind == "bool":
        if finite:
            # masked scores set to the fill: as s + fill where s is negligible next to it
            # (finfo.min absorbs s exactly); other finite fills differ on rows masked everywhere
            return torch.zeros(inputs["mask"].shape, dtype=q.dtype, device=q.device).masked_fill(
                inputs["mask"], fill), False
        return ~inputs["mask"], False
    m = inputs["mask"]
    if m.dtype != q.dtype:  # SDPA takes a float mask of q's dtype: clamp finfo.min into range
        m = m.clamp_min(torch.finfo(q.dtype).min).to(q.dtype)
    return m, False


def _alibi(slopes, Sq, Sk, dtype):
    i = torch.arange(Sq, device=slopes.device, dtype=torch.float32)[:, None]
    j = torch.arange(Sk, device=slopes.device, dtype=torch.float32)[None, :]
    return (slopes.float()[:, None, None] * (j - i - float(Sk - Sq))).to(dtype)


def _sdpa_call(inputs, params):
    """fn(inputs) -> out computing the case with F.scaled_dot_product_attention (the backend
    left to the caller), or a string saying why SDPA cannot express the case. The mask and an
    ALiBi bias are built once here; an additive bias is added to the mask inside the call (so
    that it trains, as eager's does)."""
    import torch.nn.functional as F

    base, causal = _base_mask(inputs, params)
    if isinstance(base, str):
        return base
    q, k = inputs["q"], inputs["k"]
    Sq, Sk = q.shape[2], k.shape[2]
    bias_kind = params.get("bias_kind", "none")
    scale, p = float(params.get("scale", 1.0)), float(params.get("p", 0.0))
    if bias_kind != "none" and (base is not None and base.dtype == torch.bool):
        base = torch.zeros(base.shape, dtype=q.dtype, device=q.device).masked_fill(~base, float("-inf"))
    if bias_kind == "alibi":
        ali = _alibi(inputs["slopes"], Sq, Sk, q.dtype)
        base = ali if base is None else base + ali
    if causal and bias_kind != "none":  # is_causal takes no mask beside it
        keep = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device).tril(Sk - Sq)
        base = torch.zeros((Sq, Sk), dtype=q.dtype, device=q.device).masked_fill(~keep, float("-inf")) + (
            0 if base is None else base)
        causal = False

    def fn(inp):
        m = base
        if bias_kind == "additive":
            m = inp["bias"] if m is None else m + inp["bias"]
        return F.scaled_dot_product_attention(inp["q"], inp["k"], inp["v"], attn_mask=m, dropout_p=p,
                                              is_causal=causal, scale=scale)

    fn.attn_mask, fn.is_causal = base, causal  # for the tests and the advice
    fn.has_mask = base is not None or bias_kind == "additive"
    return fn


_FLEX = {}


def _flex_call(inputs, params):
    """fn(inputs) -> out computing the case with FlexAttention, or why it cannot: masks with a
    -inf fill as a mask_mod (a block mask built once: causal blocks skipped), finite fills,
    additive masks and biases as a score_mod (flex applies the scale before score_mod)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if float(params.get("p", 0.0)) > 0:
        return "FlexAttention has no dropout"
    q, k = inputs["q"], inputs["k"]
    B, H, Sq, _ = q.shape
    Sk = k.shape[2]
    kind, bias_kind = _kinds(params)
    finite = _finite_fill(params)
    if kind == "causal" and Sq > Sk and not finite:
        return ROWS_MASKED
    fill = params.get("mask_fill", float("-inf"))
    fill = torch.finfo(q.dtype).min if fill == "min" else float(fill)
    off = Sk - Sq
    mask = inputs["mask"]
    if mask is not None:
        mask = mask.expand(B, H, Sq, Sk)  # a view: flex indexes it per (b, h, q, kv)

    def masked(b, h, qi, kv):
        if kind == "causal":
            return kv > qi + off
        return mask[b, h, qi, kv]

    mask_mod = None
    if kind in ("causal", "bool") and not finite:
        def mask_mod(b, h, qi, kv):
            return ~masked(b, h, qi, kv)

    slopes = inputs.get("slopes")

    def score_mod(score, b, h, qi, kv):
        if kind in ("causal", "bool") and finite:
            score = torch.where(masked(b, h, qi, kv), fill, score)
        elif kind == "additive":
            score = score + mask[b, h, qi, kv]
        if bias_kind == "additive":
            score = score + bias_t[0][b, h, qi, kv]
        elif bias_kind == "alibi":
            score = score + slopes[h] * (kv - qi - off)
        return score

    bias_t = [None]  # the call's bias, expanded to [B, H, Sq, Sk] (a view)
    block_mask = None
    if mask_mod is not None:
        block_mask = create_block_mask(mask_mod, B if kind == "bool" else None, H if kind == "bool" else None,
                                       Sq, Sk, device=q.device)
    plain = not ((kind in ("causal", "bool") and finite) or kind == "additive" or bias_kind != "none")
    if FLEX_COMPILE:
        run = _FLEX.get("fn")
        if run is None:
            run = _FLEX["fn"] = torch.compile(flex_attention)
    else:
        run = flex_attention
    scale = float(params.get("scale", 1.0))

    def fn(inp):
        if bias_kind == "additive":  # the call's bias (a leaf that trains, in the training modes)
            bias_t[0] = inp["bias"].expand(B, H, Sq, Sk)
        return run(inp["q"], inp["k"], inp["v"], score_mod=None if plain else score_mod, block_mask=block_mask,
                   scale=scale)

    return fn


def library_ops(inputs, params):
    """Library calls computing this case's forward (the same output as reference.forward from
    the same inputs), keyed by name, and the reason each library call that cannot express the
    case is left out. Each op takes the inputs dict (as reference does) and trains through
    autograd like the eager chain.

    sdpa_flash / sdpa_efficient / sdpa_cudnn: F.scaled_dot_product_attention under
    sdpa_kernel([that backend]) (a backend may still refuse at run time). The mask: none;
    causal with Sq == Sk as is_causal=True (SDPA's is_causal is top-left aligned), otherwise as
    a bottom-right bool mask; bool as its inverse (SDPA's True = keep), or with a finite fill
    as an additive fill mask (exact for "min", which absorbs the score; other fills differ on
    rows masked everywhere); additive as is (cast to q's dtype, finfo.min clamped); a bias
    added to the mask (ALiBi's built once). The flash backend takes no explicit mask. Rows
    masked everywhere differ (eager: NaN with -inf, uniform with a finite fill; SDPA: 0): the
    causal case with Sq > Sk, which has such rows by construction, is refused.

    flex: torch.compile'd flex_attention, masks with a -inf fill as a block mask (built once),
    finite fills (exactly eager's masked_fill), additive masks and biases as a score_mod;
    refused with dropout, and for causal masks with Sq > Sk and a -inf fill.

    With dropout (p > 0) each op draws its own mask: outputs differ from eager's (timing only).
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    ops, refused = {}, {}
    call = _sdpa_call(inputs, params)
    backends = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
                "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}
    for name, be in backends.items():
        if isinstance(call, str):
            refused[name] = call
        elif name == "sdpa_flash" and call.has_mask:
            refused[name] = "SDPA's flash backend takes no attn_mask (only is_causal with Sq == Sk)"
        else:
            def op(inp, call=call, be=be):
                with sdpa_kernel([be]):
                    return call(inp)
            ops[name] = op
    try:
        flex = _flex_call(inputs, params)
    except Exception as e:  # noqa: BLE001 - this torch has no FlexAttention, or not for this case
        flex = f"FlexAttention unavailable: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    if isinstance(flex, str):
        refused["flex"] = flex
    else:
        ops["flex"] = flex
    return ops, refused
