"""Tests for the add_layernorm template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shapes", adapter.ADVERSARIAL, ids=str)
def test_forward(device, dtype, shapes):
    for seed in fat.seeds(1 if shapes[0][0] > 64 else 2):  # one program per row: keep it quick
        fat.run_case(kernel, ref, adapter, shapes, dtype, {"eps": 1e-5}, device, seed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, False)])
def test_row_longer_than_block(device, affine):
    g = fat.gen(4)
    x = fat.randn([5, 1000], torch.float32, device, g, mean=-2.3)
    r = fat.randn([5, 1000], torch.float32, device, g)
    w = fat.randn([1000], torch.float32, device, g) if affine[0] else None
    b = fat.randn([1000], torch.float32, device, g) if affine[1] else None
    out = (fat.poison(x.shape, x.dtype, device), fat.poison(x.shape, x.dtype, device))
    s, y = kernel.add_layer_norm(x, r, w, b, 1e-5, block_n=64, out=out)
    s0, y0 = ref.add_layer_norm(x, r, w, b, 1e-5)
    fat.assert_close(s, s0, 0, 0)
    fat.assert_close(y, y0, 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous(device):
    g = fat.gen(8)
    x = fat.randn([96, 40], torch.bfloat16, device, g, mean=3.0).t()
    r = fat.randn([40, 96], torch.bfloat16, device, g)
    w = fat.randn([96], torch.bfloat16, device, g)
    s, y = kernel.add_layer_norm(x, r, w, None)
    s0, y0 = ref.add_layer_norm(x, r, w, None)
    fat.assert_close(s, s0, 0, 0)
    fat.assert_close(y, y0, *fat.tol("norm", torch.bfloat16))


@pytest.mark.parametrize("device", DEVICES)
def test_nan_inf(device):
    x = torch.randn(4, 16, device=device)
    r = torch.randn(4, 16, device=device)
    x[0, 3] = float("nan")
    x[1, 5] = float("inf")
    x[2, :] = 1.0  # constant row: variance 0, y = bias
    r[2, :] = 0.0
    s, y = kernel.add_layer_norm(x, r, None, None, 1e-5)
    s0, y0 = ref.add_layer_norm(x, r, None, None, 1e-5)
    fat.assert_close(s, s0, 0, 0)
    fat.assert_close(y, y0, 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_grad(device, dtype):
    fat.run_grad_case(kernel, ref, adapter, [[3, 5, 150]], dtype, {"eps": 1e-5}, device, 2)


@pytest.mark.parametrize("device", DEVICES)
def test_module(device):
    ln = torch.nn.LayerNorm(48, device=device)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    m = kernel.AddLayerNorm.from_layer_norm(ln)
    x, r = torch.randn(3, 48, device=device), torch.randn(3, 48, device=device)
    s, y = m(x, r)
    fat.assert_close(y, ln(x + r), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_fp32_residual(device, dtype):
    """Autocast's residual stream: x in 16 bits, the residual, the sum, y and the norm weights
    in fp32."""
    params = {"eps": 1e-5, "residual_dtype": "fp32"}
    inputs = adapter.make_inputs([[33, 70]], fat.DTYPES[dtype], params, device, 0)
    assert inputs["residual"].dtype == torch.float32 and inputs["weight"].dtype == torch.float32
    s, y = adapter.fused(kernel, inputs, params, poison=True)
    assert s.dtype == torch.float32 and y.dtype == torch.float32
    for shapes in ([[33, 70]], [[3, 300]]):
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, 1)
    assert adapter.nbytes([[4, 8]], fat.DTYPES[dtype], params) == 32 * (2 + 4 + 2 * 4) + 2 * 8 * 4


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_broadcast_residual(device, dtype):
    # BERT's embeddings: word embeddings [B, S, H] + position embeddings [1, S, H] -> LayerNorm;
    # the residual's rows repeat every S rows (each row distinct, so a wrong repeat fails)
    for i, shapes in enumerate([[[4, 9, 40], [1, 9, 40]], [[3, 5, 300], [5, 300]], [[2, 3, 4, 8], [1, 1, 4, 8]]]):
        fat.run_case(kernel, ref, adapter, shapes, dtype, {"eps": 1e-5}, device, i)
    fat.run_grad_case(kernel, ref, adapter, [[4, 9, 40], [1, 9, 40]], dtype, {"eps": 1e-5}, device, 3)
    x = torch.zeros(2, 3, 8, device=device)
    with pytest.raises(ValueError):
        kernel.add_layer_norm(x, torch.zeros(2, 1, 8, device=device))  # broadcast in the middle
