"""Tests for the layernorm_linear template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "_common"))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

import fa_testing as fat  # noqa: E402

kernel = fat.load_sibling(__file__, "kernel")
ref = fat.load_sibling(__file__, "reference")
adapter = fat.load_sibling(__file__, "adapter")

DEVICES = fat.devices()


@pytest.fixture(autouse=True)
def _untimed_tiles(request, monkeypatch):
    """Every bucket takes its first candidate tile, untimed (on the GPU: one compile per
    kernel, not one per candidate); the tests about tuning (named so) leave tuning as it is."""
    if "tuning" not in request.node.name:
        monkeypatch.setattr(kernel, "_GEMM_TUNE", False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,has_bias", [("fp32", True), ("fp32", False), ("fp16", True), ("bf16", True),
                                            ("bf16", False)])
def test_forward(device, dtype, has_bias):
    """Every adversarial case, each with both variants (the adapter's test mode), the offsets
    past 2**31, the refused outputs and the constant rows included. Without a Linear bias in
    fp32 and bf16 (the TMA kernel's 16-bit cases): fp16 without it would run bf16's kernels
    and fp16's own loads and casts, which its case with the bias runs."""
    params = {"eps": 1e-5, "has_bias": has_bias}
    for i, shapes in enumerate(adapter.adversarial(params)):
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, i)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_forward_one_launch(device, dtype, monkeypatch):
    """Every adversarial case with the fold's one-launch path wherever a call offers it (the
    statistics gathered in the GEMM kernel; eager use picks it where it is cheaper a call):
    the offsets past 2**31, rows of magnitude 1e-3 (variance under eps), the refused outputs;
    the calls that give or want the statistics keep the statistics pass."""
    tile = kernel.GEMM_INTERP_TILE if kernel.INTERPRET else (64, 64, 32, 2, 4)

    def pick(*args):
        alts = args[8] if len(args) > 8 else None
        return next((t for t in (alts(tile) if alts else []) if t[5] == 2), tile)

    monkeypatch.setattr(kernel, "_gemm_tile", pick)
    params = {"eps": 1e-5, "has_bias": True}
    for i, shapes in enumerate(adapter.adversarial(params)):
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, i)


class Spy:
    """Records the kernels launched (by name) and forwards to the real one."""

    def __init__(self, real, name, calls):
        self.real, self.name, self.calls = real, name, calls
        self.arg_names = real.arg_names

    def __getitem__(self, grid):
        self.calls.append(self.name)
        return self.real[grid]


@pytest.mark.parametrize("device", DEVICES)
def test_statistics_in_the_gemm_kernel(device, monkeypatch):
    """The one-launch path of the fold (eager use: _gemm_tile's alternative code 2): the GEMM
    kernel gathers its rows' statistics from the A tiles it loads, no statistics pass; right
    for rows of one chunk and of several (K below and above BLOCK_K, ragged and whole),
    rows past M in the last tile, constant rows (rstd 0, y = b' exactly as eager's), a large
    mean, fp32 and bf16, with and without a bias. Under the interpreter the untuned tile of
    an M of M % 5 == 4 is this path; a call that asks for the statistics (return_stats: the
    training forward) keeps the statistics pass."""
    calls = []
    for name in ("_fold_tma_kernel", "_ln_linear_kernel", "_ln_stats_kernel"):
        monkeypatch.setattr(kernel, name, Spy(getattr(kernel, name), name, calls))
    if device == "cuda":  # the GPU's untuned choice is a tile: the first alternative instead
        monkeypatch.setattr(kernel, "_gemm_tile", lambda *args: (args[8] or (lambda t: [t]))((64, 64, 32, 2, 4))[0])
    g = fat.gen(21)
    for dtype in (torch.float32, torch.bfloat16):
        for m, k, has_bias in ((9, 24, True), (9, 72, False), (4, 100, True), (14, 64, True), (9, 96, False)):
            x = fat.randn([m, k], dtype, device, g, mean=-40.0, std=0.5)
            x[1] = 1000.0  # a constant row
            lw, lb = fat.randn([k], dtype, device, g, mean=1.0, std=0.2), fat.randn([k], dtype, device, g)
            w = fat.randn([24, k], dtype, device, g, std=k ** -0.5)
            b = fat.randn([24], dtype, device, g) if has_bias else None
            folded = kernel.fold_weights(lw, lb, w, b)
            calls.clear()
            kernel._COMPILED.clear()  # a cached launch bypasses kernel[grid], and so the spy
            got = kernel.layernorm_linear(x, lw, lb, w, b, folded=folded)
            assert calls == ["_ln_linear_kernel"], (dtype, m, k, calls)
            # eager's chain on the CPU: CUDA's LayerNorm gives a row of equal values a variance
            # above 0 at some K (adapter.reference), the CPU's and the kernels' are exact
            want = ref.layernorm_linear(*[None if t is None else t.cpu() for t in (x, lw, lb, w, b)], 1e-5)
            fat.assert_close(got, want.to(device), *fat.tol("gemm", dtype), name=f"{dtype} {m}x{k}")
            bf = folded[1]  # the constant row: b' (or 0), exactly
            torch.testing.assert_close(got[1].float(), (torch.zeros(24, device=device) if bf is None else bf)
                                       .to(dtype).float(), rtol=0, atol=0)
            calls.clear()
            kernel._COMPILED.clear()
            _, stats = kernel.layernorm_linear(x, lw, lb, w, b, folded=folded, return_stats=True)
            assert calls[0] == "_ln_stats_kernel" and stats[0].shape == (m,), calls


@pytest.mark.parametrize("device", DEVICES)
def test_fold_takes_tma_when_aligned(device, monkeypatch):
    """The fold's TMA kernel runs for aligned fp16/bf16 operands, the pointer kernel otherwise
    (a kernel that is never launched by the tests would go unchecked)."""
    calls = []
    for name in ("_fold_tma_kernel", "_ln_linear_kernel", "_ln_stats_kernel"):
        monkeypatch.setattr(kernel, name, Spy(getattr(kernel, name), name, calls))
    for shapes, dtype, want in (([[33, 72], [48, 72]], torch.bfloat16, "_fold_tma_kernel"),
                                ([[33, 70], [48, 70]], torch.bfloat16, "_ln_linear_kernel"),
                                ([[33, 72], [48, 72]], torch.float32, "_ln_linear_kernel")):
        calls.clear()
        kernel._COMPILED.clear()  # a cached launch bypasses kernel[grid], and so the spy
        inputs = adapter.make_inputs(shapes, dtype, {"has_bias": True}, device, 0)
        x, g, b, w, bias = (inputs[k] for k in ("x", "ln_weight", "ln_bias", "weight", "bias"))
        got = kernel.layernorm_linear(x, g, b, w, bias, folded=kernel.fold_weights(g, b, w, bias))
        assert calls == ["_ln_stats_kernel", want], (shapes, dtype, calls)
        fat.assert_close(got, adapter.reference(ref, inputs, {"eps": 1e-5})[0], *fat.tol("gemm", dtype))


@pytest.mark.parametrize("device", DEVICES)
def test_layouts_through_the_plan(device, monkeypatch):
    """The per-layout plans (checked once, then looked up), both variants: x of 1, 2 and 3
    dims, leading dims of 1, a 3-D x with no [rows, K] view (copied), 3-D and row-padded
    outputs, a misaligned x of a layout first met aligned (the TMA kernel is chosen per call:
    the pointer kernel then), shared statistics, strided vectors; each layout called twice
    (the second call takes the plan)."""
    calls = []
    for name in ("_fold_tma_kernel", "_ln_linear_kernel", "_ln_stats_kernel"):
        monkeypatch.setattr(kernel, name, Spy(getattr(kernel, name), name, calls))
    monkeypatch.setattr(kernel, "_PLANS", {})
    g = fat.gen(15)
    bf = torch.bfloat16
    w = fat.randn([40, 64], bf, device, g, std=0.1)
    b = fat.randn([40], bf, device, g)
    gamma = fat.randn([128], bf, device, g, mean=1.0, std=0.2)[::2]  # strided
    beta = fat.randn([64], bf, device, g)
    folded = kernel.fold_weights(gamma, beta, w, b)
    folded_strided = (folded[0], torch.stack([folded[1], folded[1]], 1)[:, 0], folded[2])
    flat = fat.randn([3 * 5 * 64 + 8], bf, device, g)
    tma, ptr, st = "_fold_tma_kernel", "_ln_linear_kernel", "_ln_stats_kernel"
    cases = [  # (x, out or None, the GEMM kernel wanted; None: the out is refused)
        (fat.randn([3, 5, 64], bf, device, g), None, tma),
        (fat.randn([1, 1, 7, 64], bf, device, g), None, tma),
        (fat.randn([64], bf, device, g), None, tma),
        (fat.randn([5, 64, 3], bf, device, g).permute(2, 0, 1), None, tma),    # no row view: a contiguous copy
        (fat.randn([64, 3, 5], bf, device, g).permute(1, 2, 0), None, ptr),    # rows of stride 1, columns 15
        (flat[:960].view(3, 5, 64), fat.poison((3, 5, 40), bf, device), tma),
        (flat[1:961].view(3, 5, 64), fat.poison((3, 5, 40), bf, device), ptr),  # misaligned x
        (flat[:960].view(3, 5, 64), fat.poison((3, 5, 48), bf, device)[..., :40], tma),  # padded out rows
        (flat[:960].view(3, 5, 64), fat.poison((3, 5, 41), bf, device)[..., :40], ptr),  # unaligned out rows
        (flat[:960].view(3, 5, 64), fat.poison((5, 3, 40), bf, device).transpose(0, 1), None),  # refused
    ]
    for variant in ("fold", "normalize"):
        for x, out, want in cases:
            want = ptr if variant == "normalize" and want else want
            for fold, shared in ((folded, False), (folded_strided, True)):
                calls.clear()
                o = None if out is None else out.fill_(float("nan"))
                kw = dict(out=o, variant=variant, folded=fold if variant == "fold" else None,
                          stats=kernel.ln_stats(x) if shared else None)
                if want is None:
                    with pytest.raises(ValueError, match="viewable"):
                        kernel.layernorm_linear(x, gamma, beta, w, b, **kw)
                    continue
                calls.clear()
                kernel._COMPILED.clear()  # a cached launch bypasses kernel[grid], and so the spy
                got = kernel.layernorm_linear(x, gamma, beta, w, b, **kw)
                assert got is o or o is None
                assert calls == ([] if shared else [st]) + [want], (variant, tuple(x.shape), x.stride(), calls)
                fat.assert_close(got, ref.layernorm_linear(x, gamma, beta, w, b), *fat.tol("gemm", bf))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fold_constant_row_is_exact(device, dtype):
    """A row of zero variance: eager gives exactly b + W beta; the fold must not amplify the
    cancellation acc - mean * s by 1/sqrt(eps)."""
    g = fat.gen(7)
    x = fat.randn([4, 64], dtype, device, g)
    x[2, :] = 7.0
    lw, lb = fat.randn([64], dtype, device, g, mean=1.0), fat.randn([64], dtype, device, g)
    w, bias = fat.randn([24, 64], dtype, device, g, std=0.2), fat.randn([24], dtype, device, g)
    got = kernel.layernorm_linear(x, lw, lb, w, bias)
    want = ref.layernorm_linear(x, lw, lb, w, bias)
    fat.assert_close(got, want, *fat.tol("gemm", dtype))
    fat.assert_close(got[2], want[2], 1e-6 if dtype == torch.float32 else 1e-2, 1e-5, name="constant row")


@pytest.mark.parametrize("device", DEVICES)
def test_fold_weights(device):
    g = fat.gen(8)
    w, bias = fat.randn([6, 16], torch.float32, device, g), fat.randn([6], torch.float32, device, g)
    lw, lb = fat.randn([16], torch.float32, device, g), fat.randn([16], torch.float32, device, g)
    wf, bf, s = kernel.fold_weights(lw, lb, w, bias)
    fat.assert_close(wf, w * lw, 1e-6, 1e-6, name="W'")
    fat.assert_close(bf, bias + w @ lb, 1e-5, 1e-5, name="b'")
    fat.assert_close(s, (w * lw).sum(1), 1e-5, 1e-5, name="s")
    assert kernel.fold_weights(None, None, w)[1] is None


@pytest.mark.parametrize("device", DEVICES)
def test_stats_match_eager(device):
    """mean and rstd against eager for rows in one block (several per program: [ROWS,
    BLOCK_K] tiles with a ragged last tile of rows) and rows in chunks, strided rows included;
    rows of equal values get their value as the mean, exactly, and rstd = 0."""
    g = fat.gen(6)
    for m, k in ((7, 300), (33, 96), (1, 1), (5, 2), (19, 129), (3, 128), (40, 33)):
        x = fat.randn([m, 2 * k], torch.float32, device, g, mean=5.0, std=3.0)[:, ::2]
        x[m // 2] = 0.1  # equal values (0.1 is not a sum of K equal halves' exact multiple)
        mean, rstd = kernel.ln_stats(x, 1e-5)
        want_rstd = torch.rsqrt(x.var(-1, unbiased=False) + 1e-5)
        want_rstd[m // 2] = 0.0
        fat.assert_close(mean, x.mean(-1), 1e-5, 1e-5, name=f"mean {m}x{k}")
        fat.assert_close(rstd, want_rstd, 1e-5, 1e-5, name=f"rstd {m}x{k}")
        assert mean[m // 2].item() == x[m // 2, 0].item()


def test_stats_config():
    """The statistics tile: the row in one block up to MAX_BLOCK_K columns, several rows per
    program for short rows (a tile of about STATS_TILE elements, never more rows than M
    rounded up); on the GPU, ConvNeXt's K = 96 takes 16 rows per program."""
    for m, k in ((1, 1), (1, 96), (100352, 96), (25088, 192), (8192, 768), (16, 4096), (4, 5000), (3, 300)):
        rows, block, warps = kernel._stats_config(m, k)
        assert block == min(triton.next_power_of_2(k), kernel.MAX_BLOCK_K)
        assert rows == max(1, min(kernel.STATS_TILE // block, triton.next_power_of_2(m)))
        assert warps in (4, 8)
    saved = kernel.MAX_BLOCK_K, kernel.STATS_TILE
    kernel.MAX_BLOCK_K, kernel.STATS_TILE = 4096, 2048  # the GPU's plan
    try:
        assert kernel._stats_config(100352, 96) == (16, 128, 4)
        assert kernel._stats_config(25088, 192) == (8, 256, 4)
        assert kernel._stats_config(8192, 4096) == (1, 4096, 8)
        assert kernel._stats_config(8192, 5000) == (1, 4096, 8)
        assert kernel._stats_config(1, 96) == (1, 128, 4)
    finally:
        kernel.MAX_BLOCK_K, kernel.STATS_TILE = saved


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shared_stats_constant_rows(device, dtype):
    """The review's repro: rows of x = 1000 (K = 1024) with the statistics shared through
    ln_stats (what the default fold variant uses for Q/K/V). Shared stats lost the zero
    variance guard: the fold amplified the GEMM's rounding by 1/sqrt(eps) (fp32 error 0.116,
    bf16 0.082 against eager's 0.016 on the H200). Now such a row's output is b' exactly."""
    g = fat.gen(7)
    x = fat.randn([4, 1024], dtype, device, g, mean=-2.3, std=0.5)
    x[1] = 1000.0
    x[3] = 1000.0
    lw, lb = fat.randn([1024], dtype, device, g, mean=1.0, std=0.2), fat.randn([1024], dtype, device, g, std=0.2)
    w, bias = fat.randn([48, 1024], dtype, device, g, std=1024 ** -0.5), fat.randn([48], dtype, device, g)
    stats = kernel.ln_stats(x, 1e-5)
    want64 = ref.layernorm_linear(*(t.double() for t in (x, lw, lb, w, bias)))
    eager = (ref.layernorm_linear(x, lw, lb, w, bias).double() - want64).abs().max().item()
    for variant in ("fold", "normalize"):
        got = kernel.layernorm_linear(x, lw, lb, w, bias, stats=stats, variant=variant)
        err = (got.double() - want64)[[1, 3]].abs().max().item()
        if dtype == torch.float32:
            assert err <= 1e-5, (variant, err)
        else:
            assert err <= max(eager, 1e-2), (variant, err, eager)
        fat.assert_close(got, ref.layernorm_linear(x, lw, lb, w, bias), *fat.tol("gemm", dtype), name=variant)


@pytest.mark.parametrize("device", DEVICES)
def test_stats_must_fit(device):
    x = torch.randn(6, 32, device=device)
    w = torch.randn(8, 32, device=device)
    mean, rstd = kernel.ln_stats(x)
    for bad in ((mean[:5], rstd[:5]), (mean.double(), rstd.double()), (torch.stack([mean, mean], 1)[:, 0], rstd)):
        with pytest.raises(ValueError, match="stats"):
            kernel.layernorm_linear(x, None, None, w, stats=bad)


@pytest.mark.parametrize("device", DEVICES)
def test_out_overlapping_an_input_is_refused(device):
    """A GEMM cannot run in place: every out that shares memory with x, a weight, the folded
    weights or the shared statistics is refused; an out right next to x is accepted."""
    g = fat.gen(4)
    buf = fat.randn([160 + 96], torch.float32, device, g, mean=1.0)
    x = buf[:160].view(4, 40)
    lwbuf = fat.randn([96], torch.float32, device, g, mean=1.0)
    lw, lb = lwbuf[:40], fat.randn([40], torch.float32, device, g)
    wbuf = fat.randn([960 + 96], torch.float32, device, g, std=0.15)
    w = wbuf[:960].view(24, 40)
    bbuf = fat.randn([96], torch.float32, device, g)
    bias = bbuf[:24]
    folded = kernel.fold_weights(lw, lb, w, bias)
    mean, rstd = kernel.ln_stats(x)
    sbuf = torch.cat([mean, rstd, torch.zeros(96, device=device)])
    stats = (sbuf[:4], sbuf[4:8])
    sq = fat.randn([4, 24], torch.float32, device, g)
    refused = {
        "x in place": dict(x=sq, w=w[:, :24]),
        "x's last element": dict(out=buf[159:255].view(4, 24)),
        "x's columns": dict(out=x[:, :24]),
        "inside the weight": dict(out=wbuf[:96].view(4, 24)),
        "over the bias": dict(out=bbuf.view(4, 24)),
        "over the folded weight": dict(out=folded[0].view(-1)[:96].view(4, 24)),
        "over the statistics": dict(out=sbuf[:96].view(4, 24), stats=stats),
        "over the LN weight": dict(out=lwbuf.view(4, 24)),
    }
    for what, kw in refused.items():
        xi, wi = kw.get("x", x), kw.get("w", w)
        out = kw.get("out", xi if "x" in kw else None)
        lwi, lbi = (lw, lb) if xi.shape[1] == 40 else (None, None)
        fo = folded if wi is w else None
        with pytest.raises(ValueError, match="layernorm_linear: output out shares memory"):
            kernel.layernorm_linear(xi, lwi, lbi, wi, bias, out=out, folded=fo, stats=kw.get("stats"))
            pytest.fail(f"{what}: not refused")
    for variant in ("fold", "normalize"):
        out = buf[160:].view(4, 24)  # right after x
        fat.assert_close(kernel.layernorm_linear(x, lw, lb, w, bias, out=out, variant=variant),
                         ref.layernorm_linear(x, lw, lb, w, bias), 1e-4, 1e-4)


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["fold", "normalize"])
def test_offsets_past_2_31(device, variant):
    """x and y as views whose offsets pass 2**31 elements (rows 2**30 apart; x: K = 40
    columns 70e6 apart, read by the statistics kernel and in two K steps of 32 columns by
    the GEMM; y: 5 columns 2**29 apart) in reserved, not committed storage: 32-bit
    ``cols * stride`` would read and write elsewhere (the review's repro, a transposed bf16
    [600000, 4096] view, is test_gpu_transposed_600000x4096). Only the viewed elements'
    pages are touched."""
    before = _rss_mb()
    inputs = adapter.make_inputs(adapter.FAR[0], torch.bfloat16, {"has_bias": True}, device, 5)
    x, g, b, w, bias = (inputs[k] for k in ("x", "ln_weight", "ln_bias", "weight", "bias"))
    assert 2 * x.stride(0) >= 2**31 and 31 * x.stride(1) >= 2**31
    y = adapter.far_view((3, 5), adapter.Y_STRIDES, torch.bfloat16, device)
    assert 2 * y.stride(0) >= 2**31 and 4 * y.stride(1) >= 2**31
    kernel.layernorm_linear(x, g, b, w, bias, out=y, variant=variant)
    fat.assert_close(y, ref.layernorm_linear(x, g, b, w, bias), *fat.tol("gemm", torch.bfloat16))
    mean, rstd = kernel.ln_stats(x)
    fat.assert_close(mean, x.float().mean(-1), 1e-5, 1e-5)
    if device == "cpu":
        assert _rss_mb() - before < 64, "the views' storage was committed"


@pytest.mark.parametrize("device", DEVICES)
def test_shared_stats_and_no_affine(device):
    g = fat.gen(5)
    x = fat.randn([9, 48], torch.float32, device, g, mean=1.0)
    wq, wk = fat.randn([20, 48], torch.float32, device, g), fat.randn([12, 48], torch.float32, device, g)
    stats = kernel.ln_stats(x, 1e-5)
    for w in (wq, wk):
        fat.assert_close(kernel.layernorm_linear(x, None, None, w, None, 1e-5, stats=stats),
                         ref.layernorm_linear(x, None, None, w, None, 1e-5), 1e-4, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous(device):
    g = fat.gen(2)
    x = fat.randn([70, 33], torch.float16, device, g, mean=-2.0).t()  # [33, 70]
    w = fat.randn([70, 45], torch.float16, device, g, std=0.1).t()    # [45, 70]
    lw, lb = fat.randn([70], torch.float16, device, g), fat.randn([70], torch.float16, device, g)
    y = kernel.layernorm_linear(x, lw, lb, w, None, out=fat.poison((33, 45), torch.float16, device))
    fat.assert_close(y, ref.layernorm_linear(x, lw, lb, w), *fat.tol("gemm", torch.float16))


@pytest.mark.parametrize("device", DEVICES)
def test_nan_row(device):
    x = torch.randn(4, 16, device=device)
    x[1, 3] = float("nan")
    x[2, :] = 7.0  # constant row
    w = torch.randn(8, 16, device=device)
    fat.assert_close(kernel.layernorm_linear(x, None, None, w), ref.layernorm_linear(x, None, None, w), 1e-4, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["fold", "normalize"])
def test_module(device, variant, monkeypatch):
    """Inference: the plain kernel, refolded after a parameter update; training: through
    LayerNormLinearFunction, the gradients of x and of the four parameters against float64
    eager, and refolded after an optimizer step (the next forward uses the new weights)."""
    calls = []
    real = kernel.LayerNormLinearFunction.apply
    monkeypatch.setattr(kernel.LayerNormLinearFunction, "apply", lambda *a: calls.append(1) or real(*a))
    ln, lin = torch.nn.LayerNorm(32, device=device), torch.nn.Linear(32, 24, device=device)
    m = kernel.LayerNormLinear.from_modules(ln, lin, variant=variant)
    x = torch.randn(2, 3, 32, device=device) + 1
    with torch.no_grad():
        fat.assert_close(m(x), lin(ln(x)), 1e-4, 1e-4)
        # a changed parameter is refolded
        ln.weight.mul_(2.0)
        lin.bias.add_(1.0)
        fat.assert_close(m(x), lin(ln(x)), 1e-4, 1e-4, name="after a parameter update")
    assert calls == []
    x.requires_grad_(True)
    dy = torch.randn(2, 3, 24, device=device)
    params = [ln.weight, ln.bias, lin.weight, lin.bias]
    got = torch.autograd.grad(m(x), [x] + params, dy)
    assert calls == [1]
    leaves = [t.detach().double().requires_grad_(True) for t in [x] + params]
    want = torch.autograd.grad(F.linear(F.layer_norm(leaves[0], (32,), leaves[1], leaves[2], ln.eps), leaves[3],
                                        leaves[4]), leaves, dy.double())
    for name, gg, ww in zip(("dx", "dgamma", "dbeta", "dW", "db"), got, want):
        fat.assert_close(gg, ww.float(), 1e-4, 1e-4, name=name)
    opt = torch.optim.SGD(params, lr=0.1)
    for p, gg in zip(params, got[1:]):
        p.grad = gg
    opt.step()
    fat.assert_close(m(x), lin(ln(x)), 1e-4, 1e-4, name="after an optimizer step")


@pytest.mark.parametrize("device", DEVICES)
def test_concatenated_qkv(device):
    """The analysis's concat_n case, as its folder note tells it: Q, K and V Linears read one
    norm's output, run as one GEMM over their concatenated weights and split after; outputs
    and every gradient (x, the norm's, the concatenated weight's and bias's, which are the three
    Linears' stacked) those of eager's three Linears, in float64."""
    torch.manual_seed(5)
    ln = torch.nn.LayerNorm(32, device=device)
    q, k, v = (torch.nn.Linear(32, n, device=device) for n in (24, 16, 24))
    with torch.no_grad():
        ln.weight.normal_(1.0, 0.2)
        ln.bias.normal_(0.0, 0.2)
    qkv = torch.nn.Linear(q.in_features, q.out_features + k.out_features + v.out_features, bias=q.bias is not None,
                          device=device)
    with torch.no_grad():
        qkv.weight.copy_(torch.cat([q.weight, k.weight, v.weight]))
        qkv.bias.copy_(torch.cat([q.bias, k.bias, v.bias]))
    layer = kernel.LayerNormLinear.from_modules(ln, qkv)
    x = (torch.randn(2, 3, 32, device=device) + 1).requires_grad_(True)
    outs = layer(x).split([q.out_features, k.out_features, v.out_features], dim=-1)
    dys = [torch.randn_like(o) for o in outs]
    got = torch.autograd.grad(outs, [x, ln.weight, ln.bias, qkv.weight, qkv.bias], dys)
    leaves = [t.detach().double().requires_grad_(True) for t in (x, ln.weight, ln.bias)]
    lins = [[t.detach().double().requires_grad_(True) for t in (m.weight, m.bias)] for m in (q, k, v)]
    h = F.layer_norm(leaves[0], (32,), leaves[1], leaves[2], ln.eps)
    want_outs = [F.linear(h, w, b) for w, b in lins]
    for o, w in zip(outs, want_outs):
        fat.assert_close(o.double(), w, 1e-4, 1e-4)
    want = torch.autograd.grad(want_outs, leaves + [t for wb in lins for t in wb], [d.double() for d in dys])
    dW = torch.cat([want[3], want[5], want[7]])
    db = torch.cat([want[4], want[6], want[8]])
    for name, gg, ww in zip(("dx", "dgamma", "dbeta", "dW", "db"), got, list(want[:3]) + [dW, db]):
        fat.assert_close(gg.double(), ww, 1e-4, 1e-4, name=name)


@pytest.mark.parametrize("device", DEVICES)
def test_module_under_autocast(device):
    """Under autocast the module runs as autocast runs the Linear: the fused kernel in
    autocast's dtype (bf16), y in it, the gradients in the parameters' and x's own dtype
    (fp32), all within bf16's tolerance of eager under autocast; the fold is kept per dtype
    (inference under autocast does not refold every call)."""
    g = fat.gen(31)
    ln, lin = torch.nn.LayerNorm(64, device=device), torch.nn.Linear(64, 40, device=device)
    with torch.no_grad():
        ln.weight.copy_(fat.randn([64], torch.float32, device, g, mean=1.0, std=0.2))
        ln.bias.copy_(fat.randn([64], torch.float32, device, g, std=0.2))
    m = kernel.LayerNormLinear.from_modules(ln, lin)
    x = fat.randn([3, 7, 64], torch.float32, device, g).requires_grad_(True)
    dy = fat.randn([3, 7, 40], torch.bfloat16, device, g)
    params = [x, ln.weight, ln.bias, lin.weight, lin.bias]
    with torch.autocast(device, dtype=torch.bfloat16):
        y = m(x)
        want = lin(ln(x))
    assert y.dtype == want.dtype == torch.bfloat16
    fat.assert_close(y, want, *fat.tol("gemm", torch.bfloat16))
    got = torch.autograd.grad(y, params, dy)
    ref = torch.autograd.grad(want, params, dy)
    for name, gg, ww in zip(("dx", "dgamma", "dbeta", "dW", "db"), got, ref):
        assert gg.dtype == ww.dtype == torch.float32, name
        fat.assert_close(gg, ww, 5e-2, 5e-2, name=name)
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
        key = (m(x), m._folded_key)[1]
        m(x)
        assert m._folded_key == key and key[0] == torch.bfloat16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_conv_bias(device, dtype):
    """A convolution's bias before the norm (params["conv_bias"]: pre_bias): every adversarial
    case through both variants (the constant rows' shared statistics are the sum's) and the
    gradients, pre_bias's among them, on the backward's paths (one-pass, rows longer than its
    block, constant rows, x past 2**31)."""
    params = {"eps": 1e-5, "has_bias": True, "conv_bias": True}
    for i, shapes in enumerate(adapter.adversarial(params)):
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, 60 + i)
    for i, shapes in enumerate([[[33, 70], [45, 70]], [[2, 9, 64], [40, 64]]] + adapter.grad_shapes(params)):
        _fused_grad_case(shapes, dtype, params, device, 80 + i)


@pytest.mark.parametrize("device", DEVICES)
def test_conv_bias_module(device):
    """ConvNeXt's block head as a model runs it: a depthwise conv, a permute to channels-last,
    LayerNorm, Linear. The drop-in takes the conv's bias (the conv then runs without it) and
    gives the block's output and every gradient, the bias's included, within float64 rounding
    of the original block (both in fp32 on the same inputs); its pre_bias is the conv's
    parameter object (an optimizer built after the swap updates it). Wrong sizes refused."""
    torch.manual_seed(3)
    conv = torch.nn.Conv2d(16, 16, 7, padding=3, groups=16, device=device)
    ln, lin = torch.nn.LayerNorm(16, eps=1e-6, device=device), torch.nn.Linear(16, 64, device=device)
    x = torch.randn(2, 16, 9, 9, device=device, requires_grad=True)
    dy = torch.randn(2, 9, 9, 64, device=device)
    want = lin(ln(conv(x).permute(0, 2, 3, 1)))
    params = [conv.weight, conv.bias, ln.weight, ln.bias, lin.weight, lin.bias]
    grads = torch.autograd.grad(want, [x] + params, dy)
    bias = conv.bias
    m = kernel.LayerNormLinear.from_modules(ln, lin, pre_bias=bias)
    conv.register_parameter("bias", None)
    assert m.pre_bias is bias and dict(m.named_parameters())["pre_bias"] is bias
    got = m(conv(x).permute(0, 2, 3, 1))
    fat.assert_close(got, want, 1e-4, 1e-4, name="y")
    params[1] = m.pre_bias
    for name, gg, ww in zip(("dx", "dconv.weight", "dconv.bias", "dgamma", "dbeta", "dW", "db"),
                            torch.autograd.grad(got, [x] + params, dy), grads):
        fat.assert_close(gg, ww, 1e-4, 1e-4, name=name)
    with torch.no_grad():
        fat.assert_close(m(conv(x).permute(0, 2, 3, 1)), want, 1e-4, 1e-4, name="y without autograd")
    with pytest.raises(ValueError, match="pre_bias"):
        kernel.LayerNormLinear.from_modules(ln, lin, pre_bias=torch.zeros(15, device=device))
    with pytest.raises(ValueError, match="pre_bias"):
        kernel.layernorm_linear(torch.randn(3, 16, device=device), ln.weight, ln.bias, lin.weight, lin.bias,
                                pre_bias=torch.zeros(3, device=device))


def _fused_grad_case(shapes, dtype, params, device, seed):
    """fat.run_grad_case without its second pass through adapter.train (the same launches
    with another dy): test_grad_through_train runs that pass."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delattr(adapter, "train")
        fat.run_grad_case(kernel, ref, adapter, shapes, dtype, params, device, seed)


@pytest.mark.parametrize("device", DEVICES)
def test_grad_constant_rows_tiny_eps(device):
    """Rows of equal values at BERT's eps of 1e-12: their gradient is 1e6 times a difference of
    O(1), which eager's fp32 LayerNorm backward on the CPU gives as 0 (it cancels there); the
    check's reference is the chain in fp64 (adapter.quack_fp64), which the kernels match. It
    failed against the fp32 chain (got 1.7e6 where that gave 0)."""
    params = {"eps": 1e-12, "has_bias": True}
    for i, shapes in enumerate(adapter.CONSTANT):
        fat.run_grad_case(kernel, ref, adapter, shapes, "bf16", params, device, 40 + i)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,has_bias", [("fp32", True), ("bf16", True), ("bf16", False), ("fp16", True)])
def test_grad(device, dtype, has_bias):
    """Gradients of x, both LayerNorm parameters, W and b (the adapter's autograd mode), on
    the adversarial shapes that reach the backward's paths:
    ragged M, N and K (the one-pass kernel, several row tiles), a single row, a 3-D input,
    and the adapter's grad_shapes: rows longer than the one-pass block (ATen's LayerNorm
    backward), constant rows in both paths (their stored rstd is 0: the backward needs
    1/sqrt(eps)), x past 2**31 elements; x always a strided view (the adapter's _grad_view)."""
    params = {"eps": 1e-5, "has_bias": has_bias}
    for i, shapes in enumerate([[[33, 70], [45, 70]], [[1, 33], [17, 33]], [[2, 9, 64], [40, 64]]] +
                               adapter.grad_shapes(params)):
        _fused_grad_case(shapes, dtype, params, device, 20 + i)


@pytest.mark.parametrize("device", DEVICES)
def test_grad_through_train(device):
    fat.run_grad_case(kernel, ref, adapter, [[3, 11, 136], [24, 136]], "bf16", {"has_bias": True}, device, 4)


class NoXGrad(Exception):
    pass


@pytest.mark.parametrize("device", DEVICES)
def test_backward_takes_only_what_it_needs(device, monkeypatch):
    """Frozen parameters and an input without a gradient: the backward skips the GEMMs and
    stores it does not need (no dxn GEMM when neither x nor the LayerNorm needs one, no
    normalized input when W does not), and what it computes matches eager; no affine
    LayerNorm, no Linear bias."""
    g = fat.gen(11)
    x = fat.randn([2, 7, 48], torch.float32, device, g, mean=-1.0)
    lw, lb = fat.randn([48], torch.float32, device, g, mean=1.0), fat.randn([48], torch.float32, device, g)
    w, b = fat.randn([20, 48], torch.float32, device, g, std=0.2), fat.randn([20], torch.float32, device, g)
    dy = fat.randn([2, 7, 20], torch.float32, device, g)
    seen = []
    real = kernel._ln_backward
    monkeypatch.setattr(kernel, "_ln_backward", lambda *a: seen.append((a[1] is not None, a[7])) or real(*a))
    for grads, args in (((0,), (x, lw, lb, w, b)), ((3, 4), (x, lw, lb, w, b)), ((1, 2), (x, lw, lb, w, b)),
                        ((0, 3), (x, None, None, w, None))):
        seen.clear()
        leaves = [None if t is None else t.detach().clone().requires_grad_(i in grads) for i, t in enumerate(args)]
        y = kernel.layernorm_linear_train(*leaves)
        got = torch.autograd.grad(y, [leaves[i] for i in grads], dy)
        e = [None if t is None else t.detach().double().requires_grad_(i in grads) for i, t in enumerate(args)]
        want = torch.autograd.grad(ref.layernorm_linear(*e), [e[i] for i in grads], dy.double())
        for i, gg, ww in zip(grads, got, want):
            fat.assert_close(gg, ww.float(), 1e-4, 1e-4, name=f"grad {i} of {grads}")
        need_dxn = any(i in grads for i in (0, 1, 2))
        assert seen == [(need_dxn, (0 in grads, 3 in grads, 1 in grads, 2 in grads))], (grads, seen)


@pytest.mark.parametrize("device", DEVICES)
def test_fold_kernel_paths(device):
    """fold_weights' one pass against torch: rows in several programs, K in several blocks
    (a K loop past MAX_BLOCK_K), a strided weight, each of gamma, beta and the bias absent."""
    g = fat.gen(12)
    for n, k in ((37, 40), (5, 300)):
        w = fat.randn([k, n], torch.float32, device, g).t()  # strided
        lw, lb = fat.randn([k], torch.float32, device, g, mean=1.0), fat.randn([k], torch.float32, device, g)
        bias = fat.randn([n], torch.float32, device, g)
        for gam, bet, bb in ((lw, lb, bias), (None, lb, None), (lw, None, bias), (lw, None, None)):
            wf, bf, s = kernel.fold_weights(gam, bet, w, bb)
            w_ = w * gam if gam is not None else w
            fat.assert_close(wf, w_, 1e-6, 1e-6, name="W'")
            fat.assert_close(s, w_.sum(1), 1e-5, 1e-5, name="s")
            if bet is None and bb is None:
                assert bf is None
            else:
                want = (bb if bb is not None else 0) + (w @ bet if bet is not None else 0)
                fat.assert_close(bf, want, 1e-5, 1e-5, name="b'")


@pytest.mark.parametrize("device", DEVICES)
def test_bench_hooks(device):
    """gemm_only is the Linear of the reference's normalized input, flops is 2*M*N*K, the
    backward's flops twice that."""
    shapes = [[3, 5, 64], [24, 64], [24]]
    inputs = adapter.make_inputs(shapes, torch.float32, {"has_bias": True}, device, 3)
    want = adapter.reference(ref, inputs, {"has_bias": True})[0]
    got = adapter.gemm_only(inputs, {"has_bias": True})
    fat.assert_close(got, want, 1e-5, 1e-5, name="gemm_only")
    assert "_normalized" in inputs
    got = adapter.fused(kernel, inputs, {"has_bias": True})
    assert len(got) == 1 and len(adapter.reference(ref, inputs, {"has_bias": True})) == 1
    fat.assert_close(got[0], want, 1e-4, 1e-4)
    assert adapter.flops(shapes, torch.float32, {}) == 2 * 15 * 24 * 64
    assert adapter.bwd_flops(shapes, torch.float32, {}) == 4 * 15 * 24 * 64


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_gpu_transposed_600000x4096():
    """The review's repro: a transposed bf16 view [600000, 4096] (column stride 600000), whose
    ``cols * stride`` passes 2**31 in the statistics kernel (errors 5.0 and 3.5 with 32-bit
    offsets in add_layernorm's). Checked on every 997th row (eager on all of them would take
    another 5 GB)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(4096, 600000, generator=g, device="cuda", dtype=torch.bfloat16) * 0.5 - 2.3).t()
    assert x.stride() == (1, 600000)
    lw = torch.randn(4096, device="cuda", dtype=torch.bfloat16) * 0.2 + 1
    lb = torch.randn(4096, device="cuda", dtype=torch.bfloat16) * 0.2
    w = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16) * 4096 ** -0.5
    rows = torch.arange(0, 600000, 997, device="cuda")
    want = ref.layernorm_linear(x[rows], lw, lb, w)
    mean, rstd = kernel.ln_stats(x)
    xr = x[rows].float()
    fat.assert_close(mean[rows], xr.mean(-1), 1e-4, 1e-4, name="mean")
    fat.assert_close(rstd[rows], torch.rsqrt(xr.var(-1, unbiased=False) + 1e-5), 1e-4, 1e-4, name="rstd")
    for variant in ("fold", "normalize"):
        y = kernel.layernorm_linear(x, lw, lb, w, variant=variant, stats=(mean, rstd))
        fat.assert_close(y[rows], want, *fat.tol("gemm", torch.bfloat16), name=variant)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["fold", "normalize"])
@pytest.mark.parametrize("has_bias", [True, False])
def test_library_path(monkeypatch, device, variant, has_bias):
    """Where the library path wins the bucket's timing, the normalized input is written once
    (from the statistics, as the backward's normalizing pass writes it) and cuBLAS (ATen's
    addmm) multiplies it by the unfolded weight: y is eager's for both variants, with a
    strided LayerNorm weight and a 3-D x; the training function's gradients too. An out=
    that is not contiguous rows keeps the library path out of the timing."""

    timed = []

    def fake_bench(fn, **kw):
        fn()
        timed.append(fn)
        return 0.0 if len(timed) % n_cands == 0 else 1.0  # each round's last candidate, the library path, wins

    monkeypatch.setattr(kernel, "_GEMM_TUNE", True)
    monkeypatch.setattr(kernel, "_GEMM_HOST", False)  # the GPU-time choice only (no eager-use timings)
    monkeypatch.setattr(kernel, "_GEMM_TUNED", {})
    monkeypatch.setattr(kernel, "_gemm_time_ms", fake_bench)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    g = fat.gen(6)
    dt = torch.bfloat16
    K, N = 72, 40
    x = fat.randn([3, 13, K], dt, device, g, mean=1.5, std=2.0)
    lw = fat.randn([2 * K], dt, device, g, mean=1.0)[::2]  # strided
    lb = fat.randn([K], dt, device, g)
    w = fat.randn([N, K], dt, device, g, std=0.12)
    b = fat.randn([N], dt, device, g) if has_bias else None
    folded = kernel.fold_weights(lw, lb, w, b) if variant == "fold" else None
    n_cands = len(kernel._gemm_candidates(64, K, 2)) + 1
    want = ref.layernorm_linear(x, lw, lb, w, b)
    out = fat.poison((3, 13, N), dt, device)
    kernel.layernorm_linear(x, lw, lb, w, b, out=out, variant=variant, folded=folded)
    assert len(timed) == n_cands and list(kernel._GEMM_TUNED.values()) == [kernel.GEMM_LIBRARY]
    fat.assert_close(out, want, *fat.tol("gemm", dt))
    # training through the same bucket: the forward by the library path saves what the
    # backward reads (x, the statistics), so the gradients are those of the tiles' forward
    def train():
        xs = [t.detach().clone().requires_grad_(True) if t is not None else None for t in (x, lw, lb, w, b)]
        y = kernel.layernorm_linear_train(*xs, variant=variant)
        return y, torch.autograd.grad(y, [t for t in xs if t is not None], dy)

    dy = fat.randn([3, 13, N], dt, device, g)
    y, got = train()
    # (the fold's training forward, which keeps the statistics, tunes a bucket of its own:
    # the statistics computed in the GEMM kernel are no alternative there)
    assert list(kernel._GEMM_TUNED.values()) == [kernel.GEMM_LIBRARY] * (2 if variant == "fold" else 1)
    fat.assert_close(y, want, *fat.tol("gemm", dt))
    monkeypatch.setattr(kernel, "_GEMM_TUNED", {kernel_key: kernel.GEMM_INTERP_TILE for kernel_key in kernel._GEMM_TUNED})
    _, tiles = train()
    for a, e in zip(got, tiles):
        assert torch.equal(a, e)
    # a strided out= (every other column of a wider buffer): the tiles alone are timed
    n = len(timed)
    wide = fat.poison((3, 13, 2 * N), dt, device)
    kernel.layernorm_linear(x, lw, lb, w, b, out=wide[..., ::2], variant=variant, folded=folded)
    assert len(timed) - n == n_cands - 1
    fat.assert_close(wide[..., ::2], want, *fat.tol("gemm", dt))
    assert bool(wide[..., 1::2].isnan().all())
    # the modules' parameters require grad: the plain call (no graph) still takes the library
    # path, whose ATen out= would refuse them under grad mode
    wg = w.detach().clone().requires_grad_(True)
    bg = None if b is None else b.detach().clone().requires_grad_(True)
    fat.assert_close(kernel.layernorm_linear(x, lw, lb, wg, bg, variant=variant, folded=folded), want,
                     *fat.tol("gemm", dt))


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_gpu_tuning_after_cuda_graph_capture():
    """A model warmed up at one M, then captured (statistics and GEMM) at an M of a bucket
    never tuned: the replays are right; the next plain call tunes the bucket."""
    g = fat.gen(12)
    lw, lb = fat.randn([256], torch.bfloat16, "cuda", g, mean=1.0), fat.randn([256], torch.bfloat16, "cuda", g)
    w = fat.randn([384, 256], torch.bfloat16, "cuda", g, std=0.06)
    b = fat.randn([384], torch.bfloat16, "cuda", g)
    folded = kernel.fold_weights(lw, lb, w, b)
    warm = fat.randn([2000, 256], torch.bfloat16, "cuda", g, mean=-2.3, std=0.5)
    kernel.layernorm_linear(warm, lw, lb, w, b, folded=folded)  # warm-up: tunes bucket 2048

    def tuned(bucket):
        return any(k[1] == bucket and k[2] == 384 and k[3] == 256 for k in kernel._GEMM_TUNED)
    assert tuned(2048) and not tuned(1024)
    x = fat.randn([784, 256], torch.bfloat16, "cuda", g, mean=-2.3, std=0.5)
    y = torch.empty(784, 384, dtype=torch.bfloat16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
        kernel.layernorm_linear(x, lw, lb, w, b, out=y, folded=folded)
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(2):
        y.fill_(float("nan"))
        x.copy_(fat.randn([784, 256], torch.bfloat16, "cuda", g, mean=-2.3, std=0.5))
        graph.replay()
        torch.cuda.synchronize()
        fat.assert_close(y, ref.layernorm_linear(x, lw, lb, w, b), *fat.tol("gemm", torch.bfloat16))
    assert not tuned(1024)
    kernel.layernorm_linear(x, lw, lb, w, b, folded=folded)
    assert tuned(1024)


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_gpu_training_peak_memory():
    """A training step's peak memory (forward and backward, bf16 4096 x 768 -> 768, the weight
    folded in the call) is eager's: the forward saves no normalized input, and the backward
    writes d_input over dxn, so it holds no more [M, K] buffers than eager's. (Measured on the
    H200: 3 KB above eager's 45.3 MB, the LayerNorm gradients' own allocations; one [M, K]
    buffer more, 6.3 MB, before d_input went over dxn.)"""
    g = fat.gen(21)
    x = fat.randn([4096, 768], torch.bfloat16, "cuda", g, mean=-2.3, std=0.5)
    lw, lb = fat.randn([768], torch.bfloat16, "cuda", g, mean=1.0), fat.randn([768], torch.bfloat16, "cuda", g)
    w, b = fat.randn([768, 768], torch.bfloat16, "cuda", g, std=0.03), fat.randn([768], torch.bfloat16, "cuda", g)
    dy = fat.randn([4096, 768], torch.bfloat16, "cuda", g)

    def peak(chain):
        leaves = [t.detach().clone().requires_grad_(True) for t in (x, lw, lb, w, b)]
        chain(*leaves)  # warm-up: compiles, tiles
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        torch.autograd.grad(chain(*leaves), leaves, dy)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    fused = peak(lambda *a: kernel.layernorm_linear_train(*a))
    eager = peak(lambda x, lw, lb, w, b: F.linear(F.layer_norm(x, (768,), lw, lb), w, b))
    assert fused <= eager + 64 * 1024, (fused, eager)
