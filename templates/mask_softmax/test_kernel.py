"""Tests for the mask_softmax template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "_common"))

import pytest  # noqa: E402
import torch  # noqa: E402

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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant,dtype", FORWARD)
def test_forward(device, variant, dtype):
    params = dict(VARIANTS[variant], p=0.0)
    for i, shapes in enumerate(adapter.adversarial(params)):
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
    params = dict(VARIANTS[variant], p=0.0)
    fat.run_grad_case(kernel, ref, adapter, [[2, 2, 5, 40], [2, 1, 1, 40]], dtype, params, device, 5)


@pytest.mark.parametrize("device", DEVICES)
def test_module_and_errors(device):
    m = kernel.MaskSoftmax(0.5, "causal").eval()
    x = torch.randn(2, 4, 4, device=device)
    fat.assert_close(m(x), ref.mask_softmax(x, None, 0.5, "causal"), 1e-6, 1e-6)
    with pytest.raises(ValueError):
        kernel.mask_softmax(x, torch.zeros(3, 4, dtype=torch.bool, device=device), 1.0, "bool")
    with pytest.raises(ValueError):
        kernel.mask_softmax(x, None, 1.0, "bool")
    xd = torch.randn(2, 4, device=device, requires_grad=True)
    y = kernel.MaskSoftmaxFunction.apply(xd, None, 1.0, "none", INF, 0.5, 1)
    with pytest.raises(NotImplementedError):
        y.sum().backward()


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


def test_prune_rows_never_empty():
    # the GPU's autotune configs (pruning never runs under the interpreter's single config)
    import triton
    tiles = [(1, 4), (1, 1), (1, 2), (2, 2), (4, 2), (2, 4), (4, 4), (8, 4), (16, 4), (4, 8), (8, 8), (16, 8),
             (32, 8), (1, 8), (1, 16), (2, 16)]
    configs = [triton.Config({"ROWS": r}, num_warps=w) for r, w in tiles]
    for n in [2 ** k for k in range(14)]:
        kept = kernel._prune_rows(configs, {}, BLOCK_N=n)
        assert kept, n
        for c in kept:
            assert c.kwargs["ROWS"] * n <= 16384, (n, c)
        if n >= 256:  # one row per program stays a candidate where a row fills a tile
            assert any(c.kwargs["ROWS"] == 1 for c in kept), n
