"""Tests for the mask_softmax template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "_common"))

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

import fa_testing as fat  # noqa: E402

kernel = fat.load_sibling(__file__, "kernel")
ref = fat.load_sibling(__file__, "reference")
adapter = fat.load_sibling(__file__, "adapter")

DEVICES = fat.devices()
INF = float("-inf")
VARIANTS = {
    "bool-inf": {"mask_kind": "bool", "mask_fill": INF, "scale": 0.125},
    "bool-10000": {"mask_kind": "bool", "mask_fill": -10000.0, "scale": 0.5},
    "bool-min": {"mask_kind": "bool", "mask_fill": "min", "scale": 1.0},
    "additive": {"mask_kind": "additive", "mask_fill": INF, "scale": 0.125},
    "causal": {"mask_kind": "causal", "mask_fill": INF, "scale": 0.3},
    "none": {"mask_kind": "none", "mask_fill": INF, "scale": 1.0},
}


# every variant in fp32; the main mask kinds in fp16 / bf16 too (the interpreter is slow)
FORWARD = [(v, "fp32") for v in sorted(VARIANTS)] + [
    (v, d) for v in ("bool-inf", "additive", "causal") for d in ("fp16", "bf16")]


def _forward_shapes(params):
    """adapter.adversarial's shapes at the interpreter's cost (the GPU runs the adapter's own):
    rows of 1500 at 400, both several 128-column chunks (the interpreter's MAX_BLOCK_N) and a
    ragged last one, a third of the chunks; the [2, 3, 9, 129] scores as [2, 2, 3, 129], still
    rank 4 with the mask broadcast over heads and query rows and rows one past a chunk, 12
    rows (one program each) instead of 54. The two took two thirds of test_forward's time."""
    out = []
    for shapes in adapter.adversarial(params):
        shapes = [[400 if d == 1500 else d for d in s] for s in shapes]
        if shapes[0] == [2, 3, 9, 129]:
            shapes = [[2, 2, 3, 129]] + shapes[1:]
        out.append(shapes)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant,dtype", FORWARD)
def test_forward(device, variant, dtype):
    params = dict(VARIANTS[variant], p=0.0)
    shapes_list = adapter.adversarial(params) if device == "cuda" else _forward_shapes(params)
    for i, shapes in enumerate(shapes_list):
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, i)


@pytest.mark.parametrize("device", DEVICES)
def test_fully_masked_rows_match_eager(device):
    x = torch.randn(2, 1, 3, 8, device=device)
    mask = torch.zeros(2, 1, 1, 8, dtype=torch.bool, device=device)
    mask[1] = True  # batch 1 fully masked
    y = kernel.mask_softmax(x, mask, 1.0, "bool", INF)
    assert torch.isnan(y[1]).all() and not torch.isnan(y[0]).any()
    fat.assert_close(y, ref.mask_softmax(x, mask, 1.0, "bool", INF), 1e-6, 1e-6)
    y = kernel.mask_softmax(x, mask, 1.0, "bool", -10000.0)  # finite fill: uniform
    fat.assert_close(y[1], torch.full_like(y[1], 1 / 8), 1e-6, 1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("block_n", [None, 16])
def test_nan_inf_rows(device, block_n):
    x = torch.randn(4, 40, device=device)
    x[0, 5] = float("nan")
    x[1, 7] = float("inf")
    x[2, :] = INF
    x[3, :30] = INF  # -inf in the first chunks only: the online pass must not poison the sum
    y = kernel.mask_softmax(x, block_n=block_n)
    fat.assert_close(y, torch.softmax(x, -1), 1e-6, 1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_causal_kv_cache_offset(device):
    x = torch.randn(1, 2, 3, 10, device=device)  # sq=3 < sk=10
    fat.assert_close(kernel.mask_softmax(x, None, 0.5, "causal"), ref.mask_softmax(x, None, 0.5, "causal"), 1e-6, 1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_scores(device):
    g = fat.gen(3)
    x = fat.randn([2, 9, 3, 40], torch.float16, device, g, std=3).transpose(1, 2)  # [2, 3, 9, 40]
    mask = torch.rand(2, 1, 1, 40, generator=g).lt(0.3).to(device)
    fat.assert_close(kernel.mask_softmax(x, mask, 0.125, "bool", out=fat.poison(x.shape, x.dtype, device)),
                     ref.mask_softmax(x, mask, 0.125, "bool"), *fat.tol("softmax", torch.float16))


@pytest.mark.parametrize("device", DEVICES)
def test_additive_mask_dtype_promotes(device):
    g = fat.gen(9)
    x = fat.randn([2, 3, 4, 40], torch.bfloat16, device, g, std=3)
    mask = fat.randn([2, 1, 1, 40], torch.float32, device, g)
    y = kernel.mask_softmax(x, mask, 0.125, "additive")
    want = ref.mask_softmax(x, mask, 0.125, "additive")
    assert y.dtype == want.dtype == torch.float32
    fat.assert_close(y, want, 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout(device):
    params = {"mask_kind": "bool", "mask_fill": INF, "scale": 0.125, "p": 0.2}
    fat.run_case(kernel, ref, adapter, [[2, 2, 5, 40], [2, 1, 1, 40]], "fp32", params, device, 1)
    k = kernel.dropout_mask((16, 256), 0.2, 3, device)
    assert abs(k.float().mean().item() - 0.8) < 0.03


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["bool-inf", "additive", "causal"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_grad(device, variant, dtype):
    # the adapter's gradient case: the probabilities at p = 0 and at adapter.GRAD_P (dropout)
    params = dict(VARIANTS[variant], p=0.0)
    fat.run_grad_case(kernel, ref, adapter, [[2, 2, 5, 40], [2, 1, 1, 40]], dtype, params, device, 5)


@pytest.mark.parametrize("device", DEVICES)
def test_grad_traced_dropout(device):
    # a traced p > 0 (the adapter adds p = 0), rows chunked and in one block, an fp32 softmax
    params = dict(VARIANTS["bool-10000"], p=0.1)
    fat.run_grad_case(kernel, ref, adapter, [[2, 1, 3, 150], [2, 1, 3, 150]], "bf16", params, device, 8)
    fat.run_grad_case(kernel, ref, adapter, [[2, 3, 33], [2, 1, 33]], "fp16", dict(params, out_dtype="fp32"), device, 9)


# --- dropout: the seed (an int, a device tensor, or None: drawn on the device per call) and the
# backward that regenerates the forward's mask ---------------------------------------------------


def _assert_rate(keep, p):
    # n Bernoulli(1 - p) draws: 6 standard deviations
    n = keep.numel()
    assert abs(keep.float().mean().item() - (1 - p)) < 6 * ((p * (1 - p) / n) ** 0.5), keep.float().mean().item()


def _grads64(x, mask, variant, p, keep, dy):
    """Eager's output and dx in float64 with the kernel's keep mask."""
    v = VARIANTS[variant]
    x64 = x.detach().double().requires_grad_(True)
    m64 = mask.double() if mask is not None and mask.dtype.is_floating_point else mask
    y64 = ref.mask_softmax(x64, m64, v["scale"], v["mask_kind"], v["mask_fill"], p, keep=keep)
    (dx64,) = torch.autograd.grad(y64, x64, dy.double())
    return y64, dx64


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("n", [40, 300])
def test_dropout_grad_fp64(device, variant, n):
    """The dropout backward (p > 0) against eager's gradients in float64 with the same keep
    mask: every mask kind (a finite fill leaves masked positions a probability, which only
    masked_fill's backward zeroes), rows in one block and chunked (n = 300), fully masked
    rows (the mask's first row)."""
    v, p = VARIANTS[variant], 0.3
    params = dict(v, p=p)
    inputs = adapter.make_inputs([[2, 1, 3, n], [2, 1, 3, n]], torch.float32, params, device, n)
    x, mask = inputs["x"], inputs["mask"]
    dy = fat.randn(x.shape, torch.float32, device, fat.gen(n + 1))
    xg = x.clone().requires_grad_(True)
    y = kernel.MaskSoftmaxFunction.apply(xg, mask, v["scale"], v["mask_kind"], v["mask_fill"], p, 17)
    (dx,) = torch.autograd.grad(y, xg, dy)
    keep = kernel.dropout_mask(x.shape, p, 17, device)
    _assert_rate(keep, p)
    y64, dx64 = _grads64(x, mask, variant, p, keep, dy)
    fat.assert_close(y, y64, 1e-5, 1e-5, name="y")
    fat.assert_close(dx, dx64, 1e-5, 1e-5, name="dx")


@pytest.mark.parametrize("device", DEVICES)
def test_seed_tensor_same_mask_as_int(device):
    # a seed tensor (read by the kernels on the device) and the same value as an int give the
    # same mask, in dropout_mask and in the output, for rows in one block and chunked
    p = 0.25
    for n in (40, 300):
        x = fat.randn([2, 3, n], torch.float32, device, fat.gen(n))
        for value in (5, 2**40 + 12345):
            t = torch.tensor([value], dtype=torch.int64, device=device)
            keep = kernel.dropout_mask(x.shape, p, t, device)
            assert torch.equal(keep, kernel.dropout_mask(x.shape, p, value, device)), value
            _assert_rate(keep, p)
            y = kernel.mask_softmax(x, None, 0.5, "causal", p=p, seed=t)
            assert torch.equal(y, kernel.mask_softmax(x, None, 0.5, "causal", p=p, seed=value))
            fat.assert_close(y, ref.mask_softmax(x, None, 0.5, "causal", p=p, keep=keep), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_seed_none_draws_on_the_device(device):
    # seed=None draws a seed tensor on the scores' device for every call (device_seed): two
    # calls differ; each is the reference under the seed that torch.manual_seed reproduces
    x = fat.randn([2, 3, 5, 40], torch.float32, device, fat.gen(3), std=3)
    p = 0.3
    torch.manual_seed(5)
    y1 = kernel.mask_softmax(x, None, 0.5, p=p)
    y2 = kernel.mask_softmax(x, None, 0.5, p=p)
    torch.manual_seed(5)
    s1, s2 = kernel.device_seed(device), kernel.device_seed(device)
    assert s1.dtype == torch.int64 and s1.shape == (1,) and s1.device == x.device
    for y, s in ((y1, s1), (y2, s2)):
        keep = kernel.dropout_mask(x.shape, p, s, device)
        _assert_rate(keep, p)
        assert torch.equal(y != 0, keep), "dropped elements are not those of the drawn seed"
        fat.assert_close(y, ref.mask_softmax(x, None, 0.5, p=p, keep=keep), 1e-5, 1e-5)
    assert ((y1 != 0) != (y2 != 0)).float().mean().item() > 0.2, "two calls drew the same mask"
    m = kernel.MaskSoftmax(0.5, p=p)  # the module draws its seed the same way
    k1, k2 = m(x) != 0, m(x) != 0
    _assert_rate(k1, p)
    assert (k1 != k2).float().mean().item() > 0.2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("how", ["none", "tensor", "int"])
@pytest.mark.parametrize("n", [40, 300])
def test_backward_regenerates_the_forward_mask(device, how, n):
    # the backward regenerates the forward's mask from the seed it saved (tensor or int): the
    # forward's zeros and the gradient are both those of the drawn seed's mask
    x = fat.randn([2, 3, n], torch.float32, device, fat.gen(n), std=3)
    dy = fat.randn([2, 3, n], torch.float32, device, fat.gen(n + 1))
    p = 0.35
    torch.manual_seed(9)  # the seed that seed=None draws in the forward, reproduced
    keep = kernel.dropout_mask(x.shape, p, 991 if how == "int" else kernel.device_seed(device), device)
    torch.manual_seed(9)
    seed = None if how == "none" else kernel.device_seed(device) if how == "tensor" else 991
    xg = x.clone().requires_grad_(True)
    y = kernel.MaskSoftmaxFunction.apply(xg, None, 1.0, "none", INF, p, seed)
    (dx,) = torch.autograd.grad(y, xg, dy)
    assert torch.equal(y.detach() != 0, keep), "forward: not the seed's mask"
    y64, dx64 = _grads64(x, None, "none", p, keep, dy)
    fat.assert_close(dx, dx64, 1e-5, 1e-5, name="dx: another mask than the forward's")


@pytest.mark.parametrize("device", DEVICES)
def test_seed_and_probs_checks(device):
    x = torch.randn(2, 3, 16, device=device)
    for bad in (torch.tensor([1], dtype=torch.int32, device=device), torch.tensor([1, 2], device=device)):
        with pytest.raises(ValueError, match="seed tensor"):
            kernel.mask_softmax(x, None, 1.0, p=0.2, seed=bad)
        with pytest.raises(ValueError, match="seed tensor"):
            kernel.dropout_mask(x.shape, 0.2, bad, device)
    # probs (the pre-dropout probabilities) only with dropout, contiguous, apart from the inputs
    for probs, p in ((torch.empty_like(x), 0.0), (torch.empty(2, 16, 3, device=device).transpose(1, 2), 0.2),
                     (x, 0.2)):
        with pytest.raises(ValueError, match="probs"):
            kernel.mask_softmax(x, None, 1.0, p=p, seed=1, probs=probs)
    probs = fat.poison(x.shape, x.dtype, device)
    y = kernel.mask_softmax(x, None, 1.0, p=0.2, seed=1, probs=probs)
    fat.assert_close(probs, torch.softmax(x, -1), 1e-6, 1e-6, name="probs")
    fat.assert_close(y, probs * kernel.dropout_mask(x.shape, 0.2, 1, device) / 0.8, 1e-6, 1e-6)
    # a seed tensor modified between forward and backward: autograd refuses the backward
    seed = torch.tensor([3], dtype=torch.int64, device=device)
    xg = x.clone().requires_grad_(True)
    y = kernel.MaskSoftmaxFunction.apply(xg, None, 1.0, "none", INF, 0.2, seed)
    seed.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_module_and_errors(device):
    m = kernel.MaskSoftmax(0.5, "causal").eval()
    x = torch.randn(2, 4, 4, device=device)
    fat.assert_close(m(x), ref.mask_softmax(x, None, 0.5, "causal"), 1e-6, 1e-6)
    with pytest.raises(ValueError):
        kernel.mask_softmax(x, torch.zeros(3, 4, dtype=torch.bool, device=device), 1.0, "bool")
    with pytest.raises(ValueError):
        kernel.mask_softmax(x, None, 1.0, "bool")
    # dropout (p > 0) has a backward: y.sum()'s dy is an expanded (stride 0) tensor, read in place
    xd = torch.randn(2, 4, device=device, requires_grad=True)
    y = kernel.MaskSoftmaxFunction.apply(xd, None, 1.0, "none", INF, 0.5, 1)
    y.sum().backward()
    keep = kernel.dropout_mask(xd.shape, 0.5, 1, device)
    x64 = xd.detach().double().requires_grad_(True)
    ref.mask_softmax(x64, None, 1.0, "none", INF, 0.5, keep=keep).sum().backward()
    fat.assert_close(xd.grad, x64.grad, 1e-6, 1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_module_under_autocast(device, monkeypatch):
    """Under autocast the module returns what eager's chain returns: fp32 probabilities where
    autocast runs softmax in fp32 (CUDA), the scores' type where it does not (the CPU). The
    fp32 case is also checked on the CPU, with its autocast made to count as CUDA's, values
    and the scores' gradient (in their own type) against eager's fp32 softmax of the 16-bit
    masked scores; an explicit dtype wins over autocast's."""
    g = fat.gen(43)
    x = fat.randn([2, 3, 7, 40], torch.bfloat16, device, g, std=3).requires_grad_(True)
    m = kernel.MaskSoftmax(0.3, "causal").eval()

    def check(want_fp32):
        with torch.autocast(device, dtype=torch.bfloat16):
            y = m(x)
        want = ref.mask_softmax(x, None, 0.3, "causal", dtype=torch.float32 if want_fp32 else None)
        assert y.dtype == want.dtype == (torch.float32 if want_fp32 else torch.bfloat16)
        fat.assert_close(y, want, *((1e-6, 1e-5) if want_fp32 else fat.tol("softmax", torch.bfloat16)))
        dy = fat.randn(list(y.shape), y.dtype, device, g)
        got, = torch.autograd.grad(y, [x], dy)
        ref_g, = torch.autograd.grad(want, [x], dy)
        assert got.dtype == ref_g.dtype == torch.bfloat16
        fat.assert_close(got, ref_g, 2e-2, 2e-2)

    check(want_fp32=device == "cuda")
    if device == "cpu":
        monkeypatch.setattr(kernel, "_AUTOCAST_FP32_SOFTMAX", {"cpu"})
        check(want_fp32=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            assert kernel.MaskSoftmax(0.3, "causal", dtype=torch.bfloat16).eval()(x).dtype == torch.bfloat16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["causal", "additive"])
def test_fp32_softmax_of_bf16_scores(device, variant):
    # autocast's softmax (and softmax(dtype=torch.float32)): bf16 scores in, fp32 probabilities
    # out, an fp32 additive mask; scale * x is still rounded to bf16 first, as eager does
    params = dict(VARIANTS[variant], p=0.0, out_dtype="fp32", mask_dtype="fp32")
    for i, shapes in enumerate([[[2, 3, 9, 129], [2, 1, 1, 129]], [[3, 5, 37], [3, 1, 37]]]):
        fat.run_case(kernel, ref, adapter, shapes, "bf16", params, device, i)
    g = fat.gen(4)
    x = fat.randn([2, 2, 5, 40], torch.bfloat16, device, g, std=3)
    y = kernel.mask_softmax(x, None, 0.3, "causal", dtype=torch.float32)
    assert y.dtype == torch.float32
    want = ref.mask_softmax(x, None, 0.3, "causal", dtype=torch.float32)
    fat.assert_close(y, want, 1e-6, 1e-5)  # exact up to fp32 rounding: no bf16 on the way out
    fat.run_grad_case(kernel, ref, adapter, [[2, 2, 5, 40], [2, 1, 1, 40]], "bf16",
                      dict(VARIANTS["causal"], p=0.0, out_dtype="fp32"), device, 6)


@pytest.mark.parametrize("device", DEVICES)
def test_rows_per_program_ragged(device):
    # many short rows, a row count that is not a multiple of the rows per program, and rows
    # scaled apart (softmax ignores a shift, not a scale), so a row written to its
    # neighbour's place fails
    g = fat.gen(11)
    for shape in ([1, 1, 7, 3], [3, 5, 11, 17], [2, 1, 13, 64]):
        x = fat.randn(shape, torch.float32, device, g, std=3)
        x *= 1 + torch.arange(shape[-2], device=device, dtype=torch.float32)[:, None]
        y = kernel.mask_softmax(x, None, 0.7, "causal", out=fat.poison(x.shape, x.dtype, device))
        fat.assert_close(y, ref.mask_softmax(x, None, 0.7, "causal"), 1e-6, 1e-6)


def test_plan():
    """The layout from the row length: the configurations the autotuner chose on the H200 for
    the benchmark matrix (docs/benchmarks/h200.md) where they agreed, tiles of at most 16K
    elements with at least one element per thread, one row per program for chunked rows;
    and the launch for huge shapes, without running it (grid axis 0 only)."""
    saved = kernel._launch, kernel.MAX_BLOCK_N
    kernel.MAX_BLOCK_N = 8192  # the GPU's plan
    try:
        assert kernel._plan(129, None, 8192) == (256, 4, 2)  # 8x12x129x129
        assert kernel._plan(512, None, 8192) == (512, 2, 2)  # 8x12x512x512, 1x32x512x512
        assert kernel._plan(1024, None, 8192) == (1024, 1, 1)  # 8x16x1024x1024
        assert kernel._plan(2048, None, 8192) == (2048, 1, 2)  # 4x32x2048x2048
        for n in [1, 2, 5, 37, 64, 100, 128, 129, 300, 1000, 1500, 4096, 8192, 8193, 2**26]:
            block, rows, warps = kernel._plan(n, None, 8192)
            assert block == min(triton.next_power_of_2(n), 8192)
            assert rows in (1, 2, 4, 8, 16, 32) and rows * block <= 16384 and warps * 32 <= rows * block
            assert n <= block or rows == 1
        launches = []
        kernel._launch = lambda k, grid, args, num_warps, **c: launches.append((k, grid, num_warps, c))
        x = torch.empty(1, 2**26, dtype=torch.bfloat16)  # never written: no pages committed
        kernel.mask_softmax(x)
        k, grid, warps, c = launches[-1]
        assert k is kernel._mask_softmax_long and grid == (1,) and c["BLOCK_N"] == 8192 and warps == 16
        x = torch.empty(1, 1, dtype=torch.float16).expand(2**20, 128)  # 2**20 rows, one element stored
        kernel.mask_softmax(x)
        k, grid, warps, c = launches[-1]
        assert k is kernel._mask_softmax_rows and grid == (2**17,) and c["ROWS"] == 8
        with pytest.raises(ValueError, match="rows"):
            kernel.mask_softmax(torch.empty(1, 1).expand(2**31 - 63, 1))
    finally:
        kernel._launch, kernel.MAX_BLOCK_N = saved


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["bool-inf", "additive", "causal"])
@pytest.mark.parametrize("n,block_n", [(100, None), (300, None), (300, 64)])
def test_in_place(device, variant, n, block_n):
    """out=x: short rows (a [ROWS, BLOCK_N] tile loaded whole before any store) and long rows
    (the normalising pass reads each chunk before it writes it)."""
    params = dict(VARIANTS[variant], p=0.0)
    inputs = adapter.make_inputs([[2, 3, 5, n], [2, 1, 1, n]], torch.float32, params, device, 3)
    x = inputs["x"]
    want = ref.mask_softmax(x, inputs["mask"], params["scale"], params["mask_kind"], params["mask_fill"])
    y = x.clone()
    got = kernel.mask_softmax(y, inputs["mask"], params["scale"], params["mask_kind"], params["mask_fill"],
                              out=y, block_n=block_n)
    assert got is y
    fat.assert_close(y, want, 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_overlapping_outputs_refused(device):
    x = torch.randn(2, 16, 16, device=device)
    mask = torch.randn(2, 16, 16, device=device)
    buf = torch.randn(3, 16, 16, device=device)
    xb, shifted = buf[:2], buf[1:]  # shifted: one batch off xb
    refused = {
        "out one batch off x": (xb, shifted, "none"),
        "out over x's bytes, transposed": (x, x.transpose(1, 2), "none"),
        "out over the additive mask": (x, mask, "additive"),
        "out with elements sharing memory": (x, torch.empty(16, device=device).expand(2, 16, 16), "none"),
    }
    for what, (xin, out, kind) in refused.items():
        with pytest.raises(ValueError, match="mask_softmax: output"):
            kernel.mask_softmax(xin, mask, 1.0, kind, out=out)
            pytest.fail(f"{what}: not refused")
    y = x.clone()
    fat.assert_close(kernel.mask_softmax(y, mask, 0.5, "additive", out=y), ref.mask_softmax(x, mask, 0.5, "additive"),
                     1e-6, 1e-6)


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [100, 300])
def test_offsets_past_2_31(device, n):
    """The scores as a transposed view whose last column lies past 2**31 elements into a
    reserved (not committed) storage: 32-bit ``cols * stride`` would read elsewhere. Only the
    viewed elements' pages are touched."""
    g = fat.gen(23)
    before = _rss_mb()
    x = fat.far_view(fat.randn([3, n], torch.float32, device, g, std=3))
    if x.stride(1) == 1:
        pytest.skip("no room on this GPU for the view's storage")
    assert (n - 1) * x.stride(1) >= 2**31
    mask = torch.rand(1, n, generator=g).lt(0.3).to(device)
    y = kernel.mask_softmax(x, mask, 0.125, "bool", out=fat.poison(x.shape, x.dtype, device))
    fat.assert_close(y, ref.mask_softmax(x, mask, 0.125, "bool"), *fat.tol("softmax", torch.float32))
    if device == "cpu":
        assert _rss_mb() - before < 64, "the view's storage was committed"


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_review_repros_gpu():
    """On the GPU: out=x on the first call (short and long rows), and transposed scores
    [600000, 4096] bf16 (stride 600000: cols * stride passes 2**31)."""
    g = fat.gen(31)
    for shape in ([8, 12, 512, 512], [2, 4, 16, 10000]):
        x = fat.randn(shape, torch.float16, "cuda", g, std=3)
        want = ref.mask_softmax(x, None, 0.125, "causal")
        fat.assert_close(kernel.mask_softmax(x, None, 0.125, "causal", out=x), want, *fat.tol("softmax", torch.float16))
    x = torch.randn(4096, 600000, device="cuda", dtype=torch.bfloat16).t()
    assert x.stride() == (1, 600000)
    y = kernel.mask_softmax(x, None, 0.5)
    want = ref.mask_softmax(x, None, 0.5)
    step = 1 << 14
    for i in range(0, x.shape[0], step):
        fat.assert_close(y[i:i + step], want[i:i + step], *fat.tol("softmax", torch.bfloat16), name=f"rows {i}..")


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_cuda_graph_unseen_shapes_gpu():
    """No autotuner and the batch, head and query counts unspecialized: after one call at
    [2, 4, 64, 128], calls at shapes never seen ([3, 4, 16, 128], [1, 4, 1, 128], a decode
    step) compile nothing and can be captured in a CUDA graph."""
    g = fat.gen(41)
    kernel.mask_softmax(fat.randn([2, 4, 64, 128], torch.float16, "cuda", g), None, 0.125, "causal")
    torch.cuda.synchronize()
    for shape in ([3, 4, 16, 128], [1, 4, 1, 128]):
        x = fat.randn(shape, torch.float16, "cuda", g, std=3)
        y = torch.empty_like(x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kernel.mask_softmax(x, None, 0.125, "causal", out=y)
        graph.replay()
        torch.cuda.synchronize()
        fat.assert_close(y, ref.mask_softmax(x, None, 0.125, "causal"), *fat.tol("softmax", torch.float16))


def _warm_up(fn):
    """fn run once on a side stream (compiles the kernels and lets the caching allocator set
    up), as PyTorch's CUDA-graph notes require before a capture."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
@pytest.mark.parametrize("n", [512, 10000])  # rows in one block, rows in chunks
def test_cuda_graph_replays_draw_fresh_masks_gpu(n):
    """A CUDA graph of the forward (and of forward + backward through MaskSoftmaxFunction),
    the seed drawn on the device inside the graph: each replay draws a new seed, so two
    replays give two different masks, each the reference's for the seed that replay drew
    (read from the graph's seed tensor after the replay), the gradient with the forward's."""
    g = fat.gen(71)
    x = fat.randn([2, 4, 16, n], torch.float32, "cuda", g, std=3)
    dy = fat.randn([2, 4, 16, n], torch.float32, "cuda", g)
    p = 0.3
    xg = x.clone().requires_grad_(True)

    def step():
        seed = kernel.device_seed(x.device)  # what seed=None does, kept to be read back
        y = kernel.mask_softmax(x, None, 0.5, p=p, seed=seed)
        y_none = kernel.mask_softmax(x, None, 0.5, p=p)  # seed=None
        yg = kernel.MaskSoftmaxFunction.apply(xg, None, 0.5, "none", INF, p, None)
        (dx,) = torch.autograd.grad(yg, (xg,), dy)
        return seed, y, y_none, yg.detach(), dx

    _warm_up(step)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        seed, y, y_none, yg, dx = step()
    seen = []
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        keep = kernel.dropout_mask(x.shape, p, seed, "cuda")  # this replay's seed, read on the device
        assert torch.equal(keep, kernel.dropout_mask(x.shape, p, int(seed.item()), "cuda"))
        _assert_rate(keep, p)
        assert torch.equal(y != 0, keep)  # scores of std 3 over <= 10000 columns: no probability is 0
        fat.assert_close(y, ref.mask_softmax(x, None, 0.5, p=p, keep=keep), 1e-5, 1e-5)
        for out in (y_none, yg):
            _assert_rate(out != 0, p)
            fat.assert_close(out, ref.mask_softmax(x, None, 0.5, p=p, keep=out != 0), 1e-5, 1e-5)
        x64 = x.double().requires_grad_(True)
        (dx64,) = torch.autograd.grad(ref.mask_softmax(x64, None, 0.5, p=p, keep=yg != 0), x64, dy.double())
        fat.assert_close(dx, dx64, 1e-5, 1e-5, name="dx: the forward's mask")
        seen.append((int(seed.item()), keep, y_none != 0, yg != 0))
    (s0, k0, n0, g0), (s1, k1, n1, g1) = seen
    assert s0 != s1, "the replays drew the same seed"
    for a, c in ((k0, k1), (n0, n1), (g0, g1)):
        assert (a != c).float().mean().item() > 0.2, "two replays gave the same mask"


def _compiled_masks(f, x, p, calls):
    """calls outputs of f(x) (each cloned before the next call: a CUDA-graph replay reuses its
    outputs' memory), each checked against the reference for the mask it shows (dropped
    probabilities are exactly 0), each mask a new one."""
    ys = [f(x).clone() for _ in range(calls)]
    keeps = [y != 0 for y in ys]
    for y, keep in zip(ys, keeps):
        _assert_rate(keep, p)
        fat.assert_close(y, ref.mask_softmax(x, None, 0.5, p=p, keep=keep), 1e-5, 1e-5)
    for a, c in zip(keeps, keeps[1:]):
        assert (a != c).float().mean().item() > 0.2, "two calls gave the same mask"


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fresh_masks(device):
    """MaskSoftmax under torch.compile (Dynamo; the eager backend, so the interpreter runs it
    on a CPU), forward and backward: Dynamo runs the autograd.Function eagerly and traces
    the wrapper's frames, and the shared _launch must launch outside its graphs (traced,
    ``kernel[grid](...)`` returns None on a GPU, which the launch cache then dereferenced;
    under the interpreter Dynamo traced into the interpreter and failed)."""
    torch._dynamo.reset()
    g = fat.gen(74)
    x = fat.randn([2, 3, 8, 40], torch.float32, device, g, std=3)
    dy = fat.randn([2, 3, 8, 40], torch.float32, device, g)
    p = 0.3
    m = kernel.MaskSoftmax(0.5, p=p).train()
    f = torch.compile(lambda x: m(x), backend="eager")
    _compiled_masks(f, x, p, 3)
    xg = x.clone().requires_grad_(True)
    y = f(xg)
    (dx,) = torch.autograd.grad(y, xg, dy)
    x64 = x.double().requires_grad_(True)
    (dx64,) = torch.autograd.grad(ref.mask_softmax(x64, None, 0.5, p=p, keep=y != 0), x64, dy.double())
    fat.assert_close(dx, dx64, 1e-5, 1e-5, name="dx: the forward's mask")


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_compile_reduce_overhead_fresh_masks_gpu():
    """MaskSoftmax under torch.compile(mode="reduce-overhead"): every call a new mask, each the
    reference's for the mask it shows (dropped probabilities are exactly 0). Dynamo runs the
    autograd.Function eagerly and compiles the wrapper's frames: the seed (torch.randint) and
    the outputs' allocations are CUDA-graph replays, each replay drawing a new seed; the
    kernels launch outside the graphs. Calls: warm-up, recording, two replays. Dynamo's graph
    breaks and Inductor's CUDA-graph decisions are printed (shown when the test fails)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    x = fat.randn([2, 4, 64, 128], torch.float32, "cuda", fat.gen(73), std=3)
    p = 0.3
    m = kernel.MaskSoftmax(0.5, p=p).train()
    f = torch.compile(lambda x: m(x), mode="reduce-overhead")
    try:
        _compiled_masks(f, x, p, 4)
    finally:
        torch.cuda.synchronize()
        for kind in ("graph_break", "inductor"):
            print(kind, dict(counters[kind]))
