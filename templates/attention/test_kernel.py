"""Tests for the attention template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu).

The interpreter runs 16 x 16 tiles, so the shapes here (S of 1..129) span several query and key
blocks, ragged ones and causal diagonals included."""

import os
import pathlib
import sys
import warnings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "_common"))

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import fa_testing as fat  # noqa: E402

kernel = fat.load_sibling(__file__, "kernel")
ref = fat.load_sibling(__file__, "reference")
adapter = fat.load_sibling(__file__, "adapter")

DEVICES = fat.devices()
HERE = pathlib.Path(__file__).resolve().parent
INF = float("-inf")
VARIANTS = {
    "none": {"scale": 1.0},
    "causal": {"mask_kind": "causal", "scale": 0.125},
    "causal-min": {"mask_kind": "causal", "mask_fill": "min", "scale": 0.125},
    "causal-1e4": {"mask_kind": "causal", "mask_fill": -10000.0, "scale": 0.3},
    "bool": {"mask_kind": "bool", "scale": 0.125},
    "bool-min": {"mask_kind": "bool", "mask_fill": "min", "scale": 0.125},
    "additive": {"mask_kind": "additive", "scale": 0.125},
    "additive-fp32": {"mask_kind": "additive", "mask_dtype": "fp32", "scale": 0.125},
    "bias": {"bias_kind": "additive", "scale": 0.125},
    "bias-bool": {"bias_kind": "additive", "mask_kind": "bool", "mask_fill": "min", "scale": 0.125},
    "alibi-causal": {"bias_kind": "alibi", "mask_kind": "causal", "scale": 0.125},
    "alibi": {"bias_kind": "alibi", "scale": 0.125},
    "dropout-causal": {"mask_kind": "causal", "p": 0.2, "scale": 0.125},
}


def _params(name):
    return dict({"mask_kind": "none", "mask_fill": INF, "p": 0.0, "bias_kind": "none"}, **VARIANTS[name])


# every variant in fp32 over the adversarial shapes (ragged S, Sq != Sk both ways, head dims
# 32 / 64 / 80 / 128, offsets past 2**31); the main kinds in fp16 and bf16 too
FORWARD = [(v, "fp32") for v in sorted(VARIANTS)] + [
    (v, d) for v in ("causal", "bool-min", "additive-fp32", "bias", "alibi-causal") for d in ("fp16", "bf16")]



@pytest.fixture(autouse=True)
def _untimed_tiles_on_gpu(request, monkeypatch):
    """On the GPU, each bucket's first candidate tile, untimed: timing a new bucket compiles and
    runs every candidate of the three kernels (some 16 compiles), and every test here brings
    new buckets or constexprs: 4 tests ran in 290 s on the H200. The candidates are checked by
    test_every_tile_candidate_gpu (each forced), the tuner by its own tests (which set _TUNE)."""
    if "cuda" in request.node.name or request.node.get_closest_marker("gpu"):
        monkeypatch.setattr(kernel, "_TUNE", False)


def _forward_shapes(params):
    """adapter.adversarial's shapes, its Sq 129 x Sk 127 case at 65 x 63 in the interpreter:
    in 16 x 16 tiles both are several full blocks and a ragged one each way, Sq - Sk = 2
    (causal: the first two rows masked everywhere), and 65 x 63 runs a quarter of the tiles
    (129 x 127 took half of test_forward's time). The GPU runs the adapter's own."""
    smaller = {129: 65, 127: 63}
    return [[[smaller.get(d, d) for d in s] for s in shapes] for shapes in adapter.adversarial(params)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant,dtype", FORWARD)
def test_forward(device, variant, dtype):
    params = _params(variant)
    shapes_list = adapter.adversarial(params) if device == "cuda" else _forward_shapes(params)
    for i, shapes in enumerate(shapes_list):
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, i)


def _grad_case(shapes, dtype, params, device, seed, train=False):
    """fat.run_grad_case, by default without its second pass through adapter.train: that pass
    calls kernel.attention at the case's p, the call the first pass (adapter.fused(autograd=True),
    the case's p and the other) already checks, again with another dy: the same launches. The
    train pass runs where train=True (once: test_grad's first shape of the bias-bool variant)."""
    if train:
        fat.run_grad_case(kernel, ref, adapter, shapes, dtype, params, device, seed)
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.delattr(adapter, "train")
        fat.run_grad_case(kernel, ref, adapter, shapes, dtype, params, device, seed)


# gradients against eager (16-bit: within twice eager's own error against the fp32 chain), for
# q, k, v and an additive bias, with dropout and without (the adapter checks both p's)
GRADS = [(v, "fp32") for v in ("none", "causal-1e4", "bool", "additive", "bias-bool", "alibi-causal")] + [
    ("bias", "bf16"), ("causal", "fp16")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant,dtype", GRADS)
def test_grad(device, variant, dtype):
    params = _params(variant)
    cases = [adapter.adversarial(params)[0]] + adapter.grad_shapes(params)
    if variant == "bias-bool" and device == "cpu":
        # its two further shapes run elsewhere here: the padding bias [B, 1, 1, Sk] in bias-bf16
        # (with dropout) and test_bias_broadcast_every_dim (against float64), Sq > Sk with a
        # finite fill in causal-1e4 (where causal skips key blocks) and test_grad_against_fp64
        # (with a bias); its rows masked everywhere are in its first shape already
        cases = cases[:2]
    for i, shapes in enumerate(cases):
        _grad_case(shapes, dtype, params, device, 100 + i, train=i == 0 and variant == "bias-bool")


@pytest.mark.parametrize("device", DEVICES)
def test_grad_against_fp64(device):
    """fp32 gradients (dq, dk, dv, dbias summed over the bias's broadcast batch dim) within 1e-5
    of the float64 eager chain's, causal with Sq > Sk and a finite fill (uniform rows)."""
    g = fat.gen(5)
    q, k, v = (fat.randn(s, torch.float32, device, g) for s in ([2, 2, 40, 64], [2, 2, 17, 64], [2, 2, 17, 64]))
    bias = fat.randn([1, 2, 40, 17], torch.float32, device, g)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v, bias)]
    kw = dict(scale=0.125, mask_kind="causal", mask_fill=-1e4, bias_kind="additive")
    out = kernel.attention(*leaves[:3], None, leaves[3], **kw)
    dy = fat.randn(out.shape, torch.float32, device, g)
    got = torch.autograd.grad(out, leaves, dy)
    leaves64 = [t.double().requires_grad_(True) for t in (q, k, v, bias)]
    want_out = ref.attention(*leaves64[:3], None, leaves64[3], **kw)
    want = torch.autograd.grad(want_out, leaves64, dy.double())
    fat.assert_close(out, want_out, 1e-5, 1e-5, name="out")
    for name, a, b in zip(("dq", "dk", "dv", "dbias"), got, want):
        fat.assert_close(a, b, 1e-5, 1e-5, name=name)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_seed_none_draws_new_masks(device):
    """seed=None draws a seed per call on the device: two calls apply different keep masks, each
    the one dropout_mask rebuilds from that call's seed, at rate 1 - p."""
    g = fat.gen(1)
    q, k, v = (fat.randn([1, 2, 33, 32], torch.float32, device, g) for _ in range(3))
    p = 0.25
    torch.manual_seed(123)
    a = kernel.attention(q, k, v, scale=0.2, p=p)
    b = kernel.attention(q, k, v, scale=0.2, p=p)
    torch.manual_seed(123)  # the same draws: the seeds the two calls used
    seeds = [kernel.device_seed(q.device), kernel.device_seed(q.device)]
    keeps = [kernel.dropout_mask((1, 2, 33, 33), p, s, q.device) for s in seeds]
    assert not torch.equal(keeps[0], keeps[1])
    for out, keep in zip((a, b), keeps):
        fat.assert_close(out, ref.attention(q, k, v, scale=0.2, p=p, keep=keep), 1e-5, 1e-5)
        rate = keep.float().mean().item()
        assert abs(rate - (1 - p)) < 0.05, rate
    # an int seed and a seed tensor of the same value draw the same mask
    t = torch.tensor([99], dtype=torch.int64, device=q.device)
    assert torch.equal(kernel.dropout_mask((1, 2, 33, 33), p, 99, q.device),
                       kernel.dropout_mask((1, 2, 33, 33), p, t, q.device))
    fat.assert_close(kernel.attention(q, k, v, p=p, seed=99), kernel.attention(q, k, v, p=p, seed=t), 0, 0)


@pytest.mark.parametrize("device", DEVICES)
def test_module_dropout_only_in_training(device):
    g = fat.gen(2)
    q, k, v = (fat.randn([1, 1, 17, 32], torch.float32, device, g) for _ in range(3))
    m = kernel.Attention(scale=0.1, mask_kind="causal", p=0.5)
    m.eval()
    fat.assert_close(m(q, k, v), ref.attention(q, k, v, scale=0.1, mask_kind="causal"), 1e-5, 1e-5)
    m.train()
    assert not torch.allclose(m(q, k, v), m(q, k, v))


@pytest.mark.parametrize("device", DEVICES)
def test_fully_masked_rows_match_eager(device):
    """A row masked everywhere: NaN with a -inf fill (that row only), uniform with a finite one."""
    g = fat.gen(3)
    q, k, v = (fat.randn([2, 1, 5, 32], torch.float32, device, g) for _ in range(3))
    mask = torch.zeros(2, 1, 1, 5, dtype=torch.bool, device=device)
    mask[1] = True  # batch 1 masked everywhere
    y = kernel.attention(q, k, v, mask, mask_kind="bool")
    assert torch.isnan(y[1]).all() and not torch.isnan(y[0]).any()
    fat.assert_close(y, ref.attention(q, k, v, mask, mask_kind="bool"), 1e-6, 1e-6)
    for fill in (-10000.0, "min"):
        y = kernel.attention(q, k, v, mask, mask_kind="bool", mask_fill=fill)
        fat.assert_close(y[1], v[1].mean(dim=-2, keepdim=True).expand_as(y[1]), 1e-6, 1e-6)
    # causal with Sq > Sk: the first Sq - Sk rows see no key
    q = fat.randn([1, 2, 40, 32], torch.float32, device, g)
    k, v = (fat.randn([1, 2, 7, 32], torch.float32, device, g) for _ in range(2))
    for fill in (INF, -10000.0, "min"):
        y = kernel.attention(q, k, v, mask_kind="causal", mask_fill=fill, scale=0.3)
        fat.assert_close(y, ref.attention(q, k, v, mask_kind="causal", mask_fill=fill, scale=0.3), 1e-5, 1e-5)
        assert torch.isnan(y[:, :, :33]).all() == (fill == INF)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_projection_views(device):
    """q, k, v as the transposed [B, S, H, D] views of one fused QKV projection, as models pass
    them, with an HF padding mask [B, 1, 1, S]; gradients land in the views' shape."""
    B, S, H, D = 2, 37, 3, 64
    g = fat.gen(4)
    qkv = fat.randn([B, S, 3, H, D], torch.bfloat16, device, g)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # [B, H, S, D], strides (S*3*H*D, D, 3*H*D, 1)
    assert not q.is_contiguous()
    mask = torch.rand(B, 1, 1, S, generator=g).lt(0.3).to(device)
    mask[..., 0] = False
    out = kernel.attention(q, k, v, mask, scale=D ** -0.5, mask_kind="bool", mask_fill="min")
    want = ref.attention(q, k, v, mask, scale=D ** -0.5, mask_kind="bool", mask_fill="min")
    fat.assert_close(out, want, *fat.tol("gemm", torch.bfloat16))
    leaf = qkv.detach().float().requires_grad_(True)
    q, k, v = (leaf[:, :, i].transpose(1, 2) for i in range(3))
    out = kernel.attention(q, k, v, mask, scale=D ** -0.5, mask_kind="bool")
    (g1,) = torch.autograd.grad(out.sum(), leaf)
    leaf2 = qkv.detach().float().requires_grad_(True)
    q, k, v = (leaf2[:, :, i].transpose(1, 2) for i in range(3))
    (g2,) = torch.autograd.grad(ref.attention(q, k, v, mask, scale=D ** -0.5, mask_kind="bool").sum(), leaf2)
    fat.assert_close(g1, g2, 1e-4, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("D", [32, 64, 80, 128])
def test_head_dims(device, D):
    g = fat.gen(D)
    q = fat.randn([1, 2, 9 if D == 128 else 33, D], torch.float16, device, g)
    k, v = (fat.randn([1, 2, 9 if D == 128 else 20, D], torch.float16, device, g) for _ in range(2))
    fat.assert_close(kernel.attention(q, k, v, scale=D ** -0.5, mask_kind="causal"),
                     ref.attention(q, k, v, scale=D ** -0.5, mask_kind="causal"), *fat.tol("gemm", torch.float16))


@pytest.mark.parametrize("device", DEVICES)
def test_lse_and_eager_rounding(device):
    """The saved statistics give eager's logsumexp, with the scale folded into exp2 (a power
    of two) and not; bf16 scores that eager rounds onto ties (large q and k: the score grid is
    2**16 wide) give eager's tied weights."""
    g = fat.gen(6)
    q, k, v = (fat.randn([1, 1, 20, 32], torch.float32, device, g) for _ in range(3))
    for scale in (0.3, 0.25):
        assert kernel._folds(scale, 0, 3, INF, 0) == (scale == 0.25)
        _, lse = kernel.attention_lse(q, k, v, scale=scale, mask_kind="causal")
        s = (q @ k.transpose(-1, -2) * scale).masked_fill(
            torch.ones(20, 20, dtype=torch.bool, device=device).triu(1), INF)
        fat.assert_close(lse, torch.logsumexp(s, -1), 1e-5, 1e-5)
    q, k, v = ((t.float() * 64 + 1024).to(torch.bfloat16) for t in (q, k, v))
    fat.assert_close(kernel.attention(q, k, v, scale=0.125), ref.attention(q, k, v, scale=0.125),
                     *fat.tol("gemm", torch.bfloat16))



def _philox_ref(key, c0, c1, c2, rounds):
    """Philox4x32 (Random123) in int64 torch arithmetic: four uint32 lanes as int64 tensors."""
    M = 0xFFFFFFFF
    k0, k1 = key & M, (key >> 32) & M
    c3 = torch.zeros_like(c0)
    for _ in range(rounds):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2  # int64 wraps: the low 32 bits are right
        hi0, lo0 = _hi(c0, 0xD2511F53), p0 & M
        hi1, lo1 = _hi(c2, 0xCD9E8D57), p1 & M
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + 0x9E3779B9) & M, (k1 + 0xBB67AE85) & M
    return c0, c1, c2, c3


def _hi(a, m):
    """(a * m) >> 32 for uint32 a (int64 tensor) and a 32-bit constant m, without overflow."""
    lo16 = m & 0xFFFF
    hi16 = m >> 16
    t = a * lo16  # < 2**48
    u = a * hi16 + (t >> 16)  # < 2**49
    return u >> 16


def test_dropout_mask_is_the_documented_philox():
    """dropout_mask (and so the kernels, which share _keep) keeps key j of query i of (batch,
    head) bh when lane 2 * ((j // 8) % 2) + j % 2 of Philox4x32-7(seed; 4 * (j // 16) +
    (j % 8) // 2, i, bh, 0) is >= round(p * 2**32): checked against Philox written in torch,
    with Random123's known answer for 10 rounds of a zero key and counter."""
    z = torch.zeros(1, dtype=torch.int64)
    assert [int(x) for x in _philox_ref(0, z, z, z, 10)] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    B, H, Sq, Sk, p, seed = 2, 3, 5, 40, 0.3, 0x1234_5678_9ABC
    got = kernel.dropout_mask((B, H, Sq, Sk), p, seed, "cpu")
    bh = torch.arange(B * H).view(B, H, 1, 1)
    i = torch.arange(Sq).view(1, 1, Sq, 1)
    j = torch.arange(Sk).view(1, 1, 1, Sk)
    shape = (B, H, Sq, Sk)
    lanes = _philox_ref(seed, (4 * (j // 16) + (j % 8) // 2).expand(shape), i.expand(shape), bh.expand(shape), 7)
    lane = (2 * ((j // 8) % 2) + j % 2).expand(shape)
    r = torch.stack(lanes).gather(0, lane[None]).squeeze(0)
    assert torch.equal(got, r >= round(p * 2 ** 32))
    assert kernel._threshold(0.0) == 0 and kernel._threshold(0.5) == -(2 ** 31)  # 2**31 as int32 bits
    assert kernel._threshold(1 - 2 ** -40) == -1  # 2**32 - 1: clamped


def test_scale_folded_only_where_exact():
    """FOLD: a positive power-of-two scale, its rounding not needed (ROUND 0 or 2), nothing
    added or filled after the scaling but -inf fills and ALiBi."""
    f = kernel._folds
    assert f(0.125, 2, 3, INF, 0) and f(1.0, 0, 0, INF, 2) and f(2.0, 0, 1, INF, 0)
    assert not f(0.0884, 2, 3, INF, 0) and not f(-0.125, 0, 0, INF, 0) and not f(0.0, 0, 0, INF, 0)
    assert not f(0.125, 1, 3, INF, 0)  # fp16: * scale rounds
    assert not f(0.125, 2, 3, -1e4, 0) and not f(0.125, 2, 1, float(torch.finfo(torch.bfloat16).min), 0)
    assert not f(0.125, 2, 2, INF, 0) and not f(0.125, 2, 0, INF, 1)  # additive mask, additive bias


def _same_bits(a, b, what):
    """The same bits under the interpreter (numpy rounds each step as written). On a GPU the
    compiler may contract the exponent's multiply and subtract into one FMA in one form and not
    the other (one rounding instead of two), so there the two may differ by an ulp of the
    exponent's argument: within 2 units of the result's dtype relative to the largest value."""
    if a.device.type == "cpu":
        assert torch.equal(a, b), what
        return
    tol = 2 * torch.finfo(a.dtype).eps * max(1.0, b.abs().max().item())
    diff = (a.float() - b.float()).abs().max().item()
    assert diff <= tol, (what, diff, tol)


@pytest.mark.parametrize("device", DEVICES)
def test_folded_scale_same_bits(device, monkeypatch):
    """The kernels with the scale folded into exp2 give the unfolded kernels' bits (output,
    statistics; gradients), causal and with ALiBi, fp32 and bf16."""
    g = fat.gen(12)
    for dt in (torch.float32, torch.bfloat16):
        q, k, v = (fat.randn([1, 2, 33, 32], dt, device, g) for _ in range(3))
        slopes = torch.tensor([0.5, 0.0625], device=device)
        for kw in (dict(mask_kind="causal"), dict(mask_kind="causal", bias_kind="alibi")):
            bias = slopes if kw.get("bias_kind") == "alibi" else None
            kernel._PLANS.clear()
            assert kernel._plan(q, k, v, None, bias, 0.125, kw["mask_kind"], INF, kw.get("bias_kind", "none"),
                                0.0).fold
            folded = kernel.attention_lse(q, k, v, None, bias, scale=0.125, **kw)
            monkeypatch.setattr(kernel, "_folds", lambda *a: False)
            kernel._PLANS.clear()
            plain = kernel.attention_lse(q, k, v, None, bias, scale=0.125, **kw)
            monkeypatch.undo()
            kernel._PLANS.clear()
            for a, b in zip(folded, plain):
                _same_bits(a, b, (dt, kw))
    q, k, v = (fat.randn([1, 2, 33, 32], torch.float32, device, g).requires_grad_(True) for _ in range(3))
    grads = []
    for fold in (True, False):
        if not fold:
            monkeypatch.setattr(kernel, "_folds", lambda *a: False)
        kernel._PLANS.clear()
        out = kernel.attention(q, k, v, scale=0.125, mask_kind="causal", bias_kind="alibi", bias=slopes, p=0.2, seed=5)
        grads.append(torch.autograd.grad(out.sum(), (q, k, v)))
    monkeypatch.undo()
    kernel._PLANS.clear()
    for a, b in zip(*grads):
        _same_bits(a, b, "gradients")


def test_rounding_levels():
    """ROUND: none for fp32 scores; every rounding but ``* scale``'s where that one is exact
    (scale 1, or a power of two at most 1 on bf16); every rounding otherwise."""
    bf, fp = torch.bfloat16, torch.float16
    assert kernel._rounding(torch.float32, 0.3) == 0
    assert [kernel._rounding(bf, s) for s in (1.0, 0.125, 2 ** -7, 0.0884, 2.0, 0.0)] == [2, 2, 2, 1, 1, 1]
    assert [kernel._rounding(fp, s) for s in (1.0, 0.125, 0.0884)] == [2, 1, 1]
    saved = kernel.EAGER_ROUNDING
    try:
        kernel.EAGER_ROUNDING = False
        assert kernel._rounding(bf, 0.3) == 0
    finally:
        kernel.EAGER_ROUNDING = saved



@triton.jit
def _round_kernel(X, Y, N, DT: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(X + i, mask=i < N, other=0.0)
    tl.store(Y + i, kernel._round(x, DT, 1), mask=i < N)


@pytest.mark.parametrize("device", DEVICES)
def test_round_matches_torch(device):
    """_round (EAGER_ROUNDING's conversion: two scores per cvt on the GPU, round to nearest
    even emulated under the interpreter) gives torch's x.to(dtype).float() bit for bit: ties,
    values past fp16's range, fp16 subnormals, infinities and NaN (not bf16 subnormals, below
    2**-126: the interpreter flushes them; a score that small is 0 to the softmax)."""
    g = fat.gen(11)
    x = torch.cat([torch.randn(2000, generator=g) * 10.0 ** torch.randint(-9, 6, (2000,), generator=g),
                   torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 65519.0, 65520.0,
                                 1e6, -1e6, 2 ** -20, 3 * 2 ** -25, float("inf"), float("-inf"), float("nan")])])
    n = x.numel()
    x = x.to(device)
    for dt, tdt in ((tl.bfloat16, torch.bfloat16), (tl.float16, torch.float16)):
        y = torch.empty_like(x)
        _round_kernel[(1,)](x, y, n, DT=dt, BLOCK=triton.next_power_of_2(n))
        want = x.to(tdt).float()
        same = (y == want) | (torch.isnan(y) & torch.isnan(want))
        assert bool(same.all()), (tdt, x[~same][:5].tolist(), y[~same][:5].tolist(), want[~same][:5].tolist())


@pytest.mark.parametrize("device", DEVICES)
def test_inference_stores_no_statistics(device, monkeypatch):
    """A call no gradient reaches launches the forward without the statistics (STORE_STATS
    off, no buffer) and returns a tensor with no autograd history; a training call stores them."""
    seen = []
    real = kernel._launch

    def spy(k, grid, args, **kw):
        if k is kernel._attn_fwd:
            seen.append((kw["STORE_STATS"], args[6] is args[5]))  # STATS: O itself when absent
        return real(k, grid, args, **kw)

    monkeypatch.setattr(kernel, "_launch", spy)
    g = fat.gen(9)
    q, k, v = (fat.randn([1, 2, 20, 32], torch.float32, device, g) for _ in range(3))
    y = kernel.attention(q, k, v, scale=0.2, mask_kind="causal")
    assert y.grad_fn is None and seen == [(False, True)]
    fat.assert_close(y, ref.attention(q, k, v, scale=0.2, mask_kind="causal"), 1e-5, 1e-5)
    leaf = q.clone().requires_grad_(True)
    y2 = kernel.attention(leaf, k, v, scale=0.2, mask_kind="causal")
    assert y2.grad_fn is not None and seen[-1] == (True, False)
    fat.assert_close(y2, y, 0, 0)


# an additive bias broadcast on every dim but Sk: HF's padding mask [B, 1, 1, Sk] as the bias
# after a causal fill (older GPT-2: where(causal, w, masked_bias) + attention_mask), one row
# [Sk] for every batch and head, per-query [B, 1, Sq, Sk] (the full [B, H, Sq, Sk] and
# [1, H, Sq, Sk] are the adapter's gradient cases)
BIAS_SHAPES = [[2, 1, 1, 37], [37], [2, 1, 20, 37]]


@pytest.mark.parametrize("device", DEVICES)
def test_bias_grad_over_broadcast_batch(device):
    """A bias broadcast over the batch ([1, H, Sq, Sk], T5's): its gradient summed over the
    batch in the kernel (fp32 atomics into one [1, H, Sq, Sk] plane), the same under
    torch.use_deterministic_algorithms (the full dS and a sum); and the same bias expanded
    to [B, H, Sq, Sk] (a view of stride 0 on the batch: expand's backward sums the per-batch
    gradients, which the kernel must then give one by one) gives the same leaf gradient."""
    g = fat.gen(12)
    q = fat.randn([3, 2, 20, 32], torch.float32, device, g)
    k, v = (fat.randn([3, 2, 37, 32], torch.float32, device, g) for _ in range(2))
    bias = fat.randn([1, 2, 20, 37], torch.float32, device, g)
    dy = fat.randn([3, 2, 20, 32], torch.float32, device, g)
    kw = dict(scale=0.2, mask_kind="causal", mask_fill=-1e4, bias_kind="additive")
    b64 = bias.double().requires_grad_(True)
    want = torch.autograd.grad(ref.attention(q.double(), k.double(), v.double(), None, b64, **kw), b64, dy.double())[0]

    def dbias(expand=False, deterministic=False):
        leaf = bias.clone().requires_grad_(True)
        b = leaf.expand(3, 2, 20, 37) if expand else leaf
        before = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(deterministic)
        try:
            out = kernel.attention(q, k, v, None, b, **kw)
            return torch.autograd.grad(out, leaf, dy)[0]
        finally:
            torch.use_deterministic_algorithms(before)

    for how in ({}, {"expand": True}, {"deterministic": True}):
        got = dbias(**how)
        assert got.shape == bias.shape
        fat.assert_close(got, want, 1e-5, 1e-5, name=f"dbias {how}")


@pytest.mark.parametrize("device", DEVICES)
def test_bias_broadcast_every_dim(device):
    """Forward and gradients (dq, dk, dv, dbias summed over the bias's broadcast dims: over Sq
    in the kernel, O(S) memory) against the float64 chain, causal (Sq < Sk) with dropout off
    and a padding bias holding finfo.min on padded keys."""
    g = fat.gen(10)
    q = fat.randn([2, 2, 20, 32], torch.float32, device, g)
    k, v = (fat.randn([2, 2, 37, 32], torch.float32, device, g) for _ in range(2))
    kw = dict(scale=0.2, mask_kind="causal", mask_fill=-1e4, bias_kind="additive")
    for shape in BIAS_SHAPES:
        bias = fat.randn(shape, torch.float32, device, g)
        if shape[-2:-1] == [1] or len(shape) == 1:  # a padding bias: the last keys padded
            bias[..., 30:] = torch.finfo(torch.float32).min
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v, bias)]
        out = kernel.attention(*leaves[:3], None, leaves[3], **kw)
        dy = fat.randn(out.shape, torch.float32, device, g)
        got = torch.autograd.grad(out, leaves, dy)
        leaves64 = [t.double().requires_grad_(True) for t in (q, k, v, bias)]
        want_out = ref.attention(*leaves64[:3], None, leaves64[3], **kw)
        want = torch.autograd.grad(want_out, leaves64, dy.double())
        fat.assert_close(out, want_out, 1e-5, 1e-5, name=f"out {shape}")
        for name, a, b in zip(("dq", "dk", "dv", "dbias"), got, want):
            assert a.shape == b.shape
            fat.assert_close(a, b, 1e-5, 1e-5, name=f"{name} {shape}")
        if shape != BIAS_SHAPES[0]:
            continue
        # the padding bias as a mask (no gradient): the inference path, in bf16
        y = kernel.attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), None, bias.bfloat16(), **kw)
        fat.assert_close(y, ref.attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), None, bias.bfloat16(), **kw),
                         *fat.tol("gemm", torch.bfloat16), name=f"bf16 {shape}")


def test_bad_inputs_refused():
    q = torch.zeros(1, 1, 4, 32)
    with pytest.raises(ValueError, match="mask_kind"):
        kernel.attention(q, q, q, mask_kind="nope")
    with pytest.raises(ValueError, match="needs a mask"):
        kernel.attention(q, q, q, mask_kind="bool")
    with pytest.raises(ValueError, match="does not broadcast"):
        kernel.attention(q, q, q, torch.zeros(3, 4, dtype=torch.bool), mask_kind="bool")
    with pytest.raises(TypeError, match="share a dtype"):
        kernel.attention(q, q.half(), q)
    with pytest.raises(ValueError, match="alibi"):
        kernel.attention(q, q, q, torch.zeros(2), bias_kind="alibi")
    with pytest.raises(ValueError, match="p="):
        kernel.attention(q, q, q, p=1.0)


# library_ops: the SDPA calls' arguments checked with the math backend on the CPU, FlexAttention
# run uncompiled (its semantics; the benchmark compiles it)
LIBRARY = ["none", "causal", "causal-min", "bool", "bool-min", "additive-fp32", "bias", "bias-bool",
           "alibi-causal", "alibi"]


@pytest.mark.parametrize("variant", LIBRARY)
@pytest.mark.parametrize("sq,sk", [(33, 33), (17, 40), (20, 9)])
def test_library_ops_compute_the_reference(variant, sq, sk, monkeypatch):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    monkeypatch.setattr(adapter, "FLEX_COMPILE", False)
    params = _params(variant)
    shapes = adapter._shapes(2, 2, sq, sk, 32, params, mask="full")
    inputs = adapter.make_inputs(shapes, torch.float32, params, "cpu", 1)
    want = adapter.reference(ref, inputs, params)[0]
    ops, refused = adapter.library_ops(inputs, params)
    assert set(ops) | set(refused) == {"sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "flex"}
    assert not set(ops) & set(refused)
    if sq > sk and params["mask_kind"] == "causal":
        assert "sdpa_efficient" in refused
    call = adapter._sdpa_call(inputs, params)
    if not isinstance(call, str):
        with sdpa_kernel([SDPBackend.MATH]):
            fat.assert_close(call(inputs), want, 1e-5, 1e-5, name="sdpa (math)")
    if "flex" in ops:
        fat.assert_close(ops["flex"](inputs), want, 1e-5, 1e-5, name="flex")
    if params["bias_kind"] == "additive" and "sdpa_efficient" in ops:  # the bias trains through the op
        leaf = inputs["bias"].clone().requires_grad_(True)
        with sdpa_kernel([SDPBackend.MATH]):
            out = call(dict(inputs, bias=leaf))
        assert torch.autograd.grad(out.sum(), leaf)[0].abs().sum() > 0


def test_library_ops_dropout():
    params = _params("dropout-causal")
    inputs = adapter.make_inputs(adapter._shapes(1, 2, 16, 16, 32, params), torch.float32, params, "cpu", 0)
    ops, refused = adapter.library_ops(inputs, params)
    assert "flex" in refused and "dropout" in refused["flex"]
    assert "sdpa_flash" in ops  # is_causal with Sq == Sk


# --- tile candidates: every tile the GPU could pick, forced in the interpreter ---


@pytest.mark.parametrize("sq,sk,D,dtype", [(512, 512, 64, "bf16"), (1, 1024, 128, "fp16"), (40, 17, 80, "fp32")])
def test_tile_cases_cover_every_candidate(sq, sk, D, dtype):
    """adapter.tile_cases forces every candidate of every kernel: each dK/dV and dQ tile in a
    gradient case, each forward tile in a forward case; the shapes keep the bucket (decode or
    not) and the traced Sq-vs-Sk order, and span more than the largest candidate's block."""
    params = _params("causal-min")
    cases = adapter.tile_cases(kernel, adapter._shapes(2, 4, sq, sk, D, params), dtype, params)
    elem = fat.DTYPES[dtype].itemsize
    Sq, Sk = cases[0][1][0][2], cases[0][1][1][2]
    assert (Sq <= 16) == (sq <= 16) and (Sq > Sk) == (sq > sk) and (Sq < Sk) == (sq < sk)
    for kind in ("fwd", "dkdv", "dq"):
        want = kernel.tile_candidates(kind, Sq, D, elem)
        assert want
        grad = {c[2][kind] for c in cases if c[3] and kind in c[2]}
        fwd = {c[2][kind] for c in cases if not c[3] and kind in c[2]}
        assert set(want) <= (grad | fwd if kind == "fwd" else grad), kind
        if kind == "fwd":
            assert fwd == set(want)
        big = max(max(t[0], t[1]) for t in want)
        if Sq > 16:
            assert Sq > big and Sq % 16 and Sk > big
    assert len({c[0] for c in cases}) == len(cases)


def test_forced_tiles_and_tile_config(monkeypatch):
    """forced_tiles overrides the tile per kind and restores the previous choice on exit;
    tile_config describes the tuned tiles for the benchmark's record."""
    q = torch.zeros(1, 1, 1, 64)
    pick = lambda kind: kernel._tile_for(None, kind, 512, 512, 64, q, (), None)  # noqa: E731
    with kernel.forced_tiles({"dkdv": (32, 128, 3, 4)}):
        assert pick("dkdv") == (32, 128, 3, 4)
        with kernel.forced_tiles({"dkdv": (16, 64, 4, 4), "dq": (64, 16, 4, 4)}):
            assert pick("dkdv") == (16, 64, 4, 4) and pick("dq") == (64, 16, 4, 4)
        assert pick("dkdv") == (32, 128, 3, 4) and pick("dq") == kernel.INTERP_TILE
    assert pick("dkdv") == kernel.INTERP_TILE
    with pytest.raises(ValueError, match="unknown kinds"):
        kernel.forced_tiles({"bwd": (16, 16, 1, 4)})
    monkeypatch.setattr(kernel, "_TUNED", {})
    assert kernel.tile_config() == ""
    flags = (3, 0, torch.bfloat16, torch.bfloat16, True, False, 2, False, 64, False)
    kernel._TUNED[(id(kernel._attn_fwd), 512, 512, 64, torch.bfloat16, 0, flags + (True,))] = (128, 64, 3, 4)
    kernel._TUNED[(id(kernel._attn_bwd_dkdv), 512, 512, 64, torch.bfloat16, 0, flags + (0,))] = (32, 128, 3, 4)
    assert kernel.tile_config() == "fwd+stats 512x512: 128x64 s3 w4; dkdv 512x512: 32x128 s3 w4"


def test_disagreeing_tiles_never_picked(monkeypatch):
    """The first call of a bucket runs every candidate on the caller's inputs before timing
    them: one whose outputs disagree with the others' (a miscompiled or wrong tile) is dropped
    with a warning even when it is the fastest, the first candidate included; candidates that
    agree within rounding, with NaN in the same places, are all timed."""
    good = torch.tensor([1.0, -0.5, float("nan"), 0.25])
    wrong = {(32, 64, 3, 4): good * 1.3, (32, 128, 3, 4): good.clone(), (64, 128, 2, 8): good.nan_to_num()}

    def run(t):
        return (wrong.get(t, good + 2.0 ** -12 * (t[0] == 64)), None)

    monkeypatch.setattr(kernel, "_TUNE", True)
    monkeypatch.setattr(kernel, "_TUNED", {})
    monkeypatch.setattr(kernel, "DKDV_TILES", [(32, 128, 3, 4), (64, 64, 3, 4), (32, 64, 3, 4), (64, 128, 2, 8),
                                               (16, 64, 4, 4)])  # five candidates, whatever the list is now
    monkeypatch.setattr(kernel.torch.cuda, "is_current_stream_capturing", lambda: False)
    timed = []

    def bench(fn, **kw):
        fn()
        timed.append(kw)
        return 1.0 if len(timed) > 1 else 2.0  # every one but the first equally fast

    monkeypatch.setattr(kernel.triton.testing, "do_bench", bench)
    q = torch.zeros(1, 1, 1, 64, dtype=torch.bfloat16)
    with pytest.warns(RuntimeWarning, match=r"dkdv tiles \[\(32, 64, 3, 4\), \(64, 128, 2, 8\)\] disagree"):
        tile = kernel._tile_for(kernel._attn_bwd_dkdv, "dkdv", 512, 512, 64, q, (), run)
    assert tile == (64, 64, 3, 4) and len(timed) == 3  # 32x128, 64x64, 16x64 timed

    wrong = {(32, 128, 3, 4): good * 2}  # the first candidate wrong: the others' consensus kept
    monkeypatch.setattr(kernel, "_TUNED", {})
    timed.clear()
    with pytest.warns(RuntimeWarning, match=r"dkdv tiles \[\(32, 128, 3, 4\)\] disagree"):
        tile = kernel._tile_for(kernel._attn_bwd_dkdv, "dkdv", 512, 512, 64, q, (), run)
    assert tile == (32, 64, 3, 4) and len(timed) == 4


@pytest.mark.parametrize("device", DEVICES)
def test_tuning_agrees_on_real_candidates(device, monkeypatch):
    """The tuning path with the kernels' own trial launches (scratch outputs returned to
    _agreeing): every forward, dK/dV and dQ candidate run on the call's inputs (causal bf16 with a
    finite fill and dropout, S past a 128-block), none reported as disagreeing, every one timed,
    and the gradients right with the tiles it kept. (The stand-in for do_bench times without
    running: each candidate's trial launch is _agreeing's, and a launch that raised there would
    not be timed, so the count below fails.)"""
    monkeypatch.setattr(kernel, "_TUNE", True)
    monkeypatch.setattr(kernel, "_TUNED", {})
    monkeypatch.setattr(kernel.torch.cuda, "is_current_stream_capturing", lambda: False)
    timed = []

    def bench(fn, **kw):
        timed.append(fn)
        return float(len(timed))  # the first candidate of each kernel the fastest

    monkeypatch.setattr(kernel.triton.testing, "do_bench", bench)
    params = _params("dropout-causal")
    params["mask_fill"] = "min"
    S = 129 if device == "cpu" else 140  # past a 128-block (the interpreter: by one row)
    shapes = adapter._shapes(1, 1, S, S, 64, params)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _grad_case(shapes, "bf16", params, device, 4)
    assert not [w for w in caught if "disagree" in str(w.message)]
    kinds = kernel.tile_config()
    assert "fwd+stats+dropout" in kinds and "dkdv+dropout" in kinds and "dq " in kinds, kinds
    # each kernel tuned at p and at the other p (0: the adapter's gradient cases run both)
    assert len(timed) == 2 * sum(len(kernel.tile_candidates(k, S, 64, 2)) for k in ("fwd", "dkdv", "dq"))


@pytest.mark.parametrize("device", DEVICES)
def test_asymmetric_tiles(device):
    """The backward with query and key blocks of different sizes (dK/dV 32 x 128, dQ 128 x 32,
    forward 128 x 64: the GPU's first candidates) at S past two 128-blocks, causal with a
    finite fill and dropout: the interpreter's own 16 x 16 tile never runs this."""
    params = _params("causal-min")
    shapes = adapter._shapes(1, 1, 150, 150, 64, params)
    tiles = {"fwd": kernel.FWD_TILES[0], "dkdv": kernel.DKDV_TILES[0], "dq": kernel.DQ_TILES[0]}
    with kernel.forced_tiles(tiles):
        _grad_case(shapes, "bf16", params, device, 3)


# --- GPU only: graph capture with dropout, big shapes, tuned tiles ---


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_graph_capture_dropout_draws_new_masks():
    g = fat.gen(7)
    q, k, v = (fat.randn([2, 4, 256, 64], torch.bfloat16, "cuda", g) for _ in range(3))
    m = kernel.Attention(scale=0.125, mask_kind="causal", p=0.1).train()
    m(q, k, v)  # compile and tune outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = m(q, k, v)
    graph.replay()
    a = out.clone()
    graph.replay()
    assert not torch.equal(a, out)


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
@pytest.mark.parametrize("variant", ["causal", "bool-min", "bias", "alibi-causal", "dropout-causal"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_big_shapes_gpu(variant, dtype):
    params = _params(variant)
    for B, H, Sq, Sk, D in ((4, 16, 1024, 1024, 64), (2, 8, 2047, 2049, 128), (8, 12, 1, 4096, 80)):
        shapes = adapter._shapes(B, H, Sq, Sk, D, params)
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, "cuda", 0)
    fat.run_grad_case(kernel, ref, adapter, adapter._shapes(2, 4, 512, 512, 64, params), dtype, params, "cuda", 1)


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_offsets_past_2_31_gpu():
    """q, k, v of 2**31 + elements each (real memory): heads past 2**31 elements from the start."""
    B, H, S, D = 1, 2 ** 31 // (4096 * 64) + 2, 4096, 64
    g = torch.Generator(device="cuda").manual_seed(8)  # on the device: 2**31 elements each
    q, k, v = (torch.randn([B, H, S, D], generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = kernel.attention(q, k, v, scale=0.125, mask_kind="causal")
    last = slice(H - 1, H)
    fat.assert_close(out[:, last], ref.attention(q[:, last], k[:, last], v[:, last], scale=0.125, mask_kind="causal"),
                     *fat.tol("gemm", torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
@pytest.mark.parametrize("kind", ["fwd", "dkdv", "dq"])
def test_every_tile_candidate_gpu(kind):
    """Each candidate tile of each kernel, forced, on the H200 case whose gradient check failed
    with the tile the timing picked (causal bf16 [4, 16, 512, 64], fill finfo.min, scale 1/8):
    a failure names the tile."""
    params = _params("causal-min")
    shapes = adapter._shapes(4, 16, 512, 512, 64, params)
    failed = []
    for tile in kernel.tile_candidates(kind, 512, 64, 2):
        with kernel.forced_tiles({kind: tile}):
            try:
                fat.run_case(kernel, ref, adapter, shapes, "bf16", params, "cuda", 0)
                fat.run_grad_case(kernel, ref, adapter, shapes, "bf16", params, "cuda", 0)
            except AssertionError as e:
                failed.append(f"{kind} {tile}: {str(e).splitlines()[0][:300]}")
    assert not failed, "\n".join(failed)


# The tiles the sm_90 check forces on each kernel: (BLOCK_M, BLOCK_N, num_stages, num_warps)
_SM90_TILES = ((32, 128, 3, 4), (64, 64, 3, 4), (16, 64, 4, 4))
_SM90_KERNELS = ("_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq")


def _sm90_mma_transposes():
    """The launches of a training call (forward and backward, causal bf16 [4, 16, 512, 64], fill
    finfo.min, scale 1/8: the H200 case of the wrong dK) at each tile of _SM90_TILES
    (sm90.capture), their three kernels compiled for sm_90 with their own specialization:
    {"compiled": [kernel, tile] of each, "trans": each tt.trans of their TTGIR whose operand is
    in an MMA layout}. Run by sm90.run_isolated (without TRITON_INTERPRET: under it Triton's own
    tl helpers are interpreted functions, which do not compile)."""
    import sm90

    q, k, v = (torch.empty((4, 16, 512, 64), dtype=torch.bfloat16) for _ in range(3))

    def train():  # AttentionFunction's forward and backward (autograd's own first call imports sympy: 0.6 s)
        plan = kernel._plan(q, k, v, None, None, 0.125, "causal", "min", "none", 0.0)
        o, lse = kernel._forward(q, k, v, None, None, plan, 0)
        kernel._backward(torch.empty_like(o), q, k, v, o, lse, None, None, plan, 0, False)

    compiled, trans = [], []
    for tile in _SM90_TILES:
        with kernel.forced_tiles({"fwd": tile, "dkdv": tile, "dq": tile}):
            launches = sm90.capture(kernel, train)
        for launch in launches:
            if launch.name not in _SM90_KERNELS:
                continue
            compiled.append([launch.name, list(tile)])
            for line in sm90.compile_sm90(launch).asm["ttgir"].splitlines():
                if "tt.trans" in line and "#mma" in line.split("->")[0]:
                    trans.append(f"{launch.name} {tile}: {line.strip()[:160]}")
    return {"compiled": compiled, "trans": trans}


def test_no_dot_takes_a_transposed_dot_result_sm90():
    """Compiled for the H200 (sm_90) on the CPU, no kernel transposes a dot's result (a tensor in
    an MMA layout): Triton 3.4+ on Hopper miscompiles a dot whose operand is such a transpose
    (wrong dK on the H200 from tl.dot(tl.trans(ds), q); FlashLinearAttention's issue 640). The
    backward accumulates dK^T and dV^T instead, transposing only loaded tiles."""
    import sm90

    r = sm90.run_isolated(_sm90_mma_transposes, HERE)
    assert r["compiled"] == [[name, list(tile)] for tile in _SM90_TILES for name in _SM90_KERNELS]
    assert not r["trans"], "\n".join(r["trans"])
