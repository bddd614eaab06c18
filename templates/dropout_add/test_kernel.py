"""Tests for the dropout_add template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

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
@pytest.mark.parametrize("p", [0.0, 0.3])
@pytest.mark.parametrize("shapes", adapter.ADVERSARIAL, ids=str)
def test_forward(device, dtype, p, shapes):
    for seed in fat.seeds(2 if p == 0 else 1):  # tl.rand is slow in the interpreter
        fat.run_case(kernel, ref, adapter, shapes, dtype, {"p": p, "has_bias": True}, device, seed)


@pytest.mark.parametrize("device", DEVICES)
def test_no_bias(device):
    fat.run_case(kernel, ref, adapter, [[5, 70]], "fp32", {"p": 0.2, "has_bias": False}, device, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_mask_statistics(device):
    p = 0.25
    k1 = kernel.dropout_mask((32, 256), p, 7, device)
    k2 = kernel.dropout_mask((32, 256), p, 7, device)
    k3 = kernel.dropout_mask((32, 256), p, 8, device)
    kept = k1.float().mean().item()
    # 8192 Bernoulli(0.75) draws: std 0.0048; 5 sigma
    assert abs(kept - (1 - p)) < 0.024, kept
    assert torch.equal(k1, k2), "same seed, different mask"
    assert (k1 != k3).float().mean().item() > 0.2, "different seeds, same mask"
    # the kernel's output really has that mask: dropped elements equal the residual
    x = torch.randn(32, 256, device=device) + 3.0
    r = torch.randn(32, 256, device=device)
    y = kernel.dropout_add(x, r, None, p, 7)
    assert torch.equal(y[~k1], r[~k1])
    fat.assert_close(y[k1], r[k1] + x[k1] / (1 - p), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_eval_and_non_contiguous(device):
    g = fat.gen(1)
    x = fat.randn([40, 33], torch.float32, device, g).t()
    r = fat.randn([33, 40], torch.float32, device, g)
    b = fat.randn([40], torch.float32, device, g)
    y = kernel.dropout_add(x, r, b, 0.5, 3, training=False, out=fat.poison(x.shape, x.dtype, device))
    fat.assert_close(y, ref.dropout_add(x, r, b, 0.5, training=False), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_inf(device):
    x = torch.tensor([[float("nan"), float("inf"), -float("inf"), 1.0]], device=device)
    r = torch.tensor([[1.0, -float("inf"), 2.0, float("nan")]], device=device)
    fat.assert_close(kernel.dropout_add(x, r), ref.dropout_add(x, r), 0, 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("p", [0.0, 0.4])
def test_grad(device, dtype, p):
    fat.run_grad_case(kernel, ref, adapter, [[3, 5, 66]], dtype, {"p": p, "has_bias": True}, device, 5)


def test_module():
    m = kernel.DropoutAdd(0.5)
    m.eval()
    x, r = torch.randn(3, 4), torch.randn(3, 4)
    if fat.INTERPRET:
        fat.assert_close(m(x, r), x + r, 1e-6, 1e-6)
    with pytest.raises(ValueError):
        kernel.DropoutAdd(1.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_fp32_residual(device, dtype):
    """Autocast's residual stream: x (and the bias) in 16 bits, the residual in fp32, y fp32."""
    params = {"p": 0.3, "has_bias": True, "residual_dtype": "fp32"}
    inputs = adapter.make_inputs([[33, 70]], fat.DTYPES[dtype], params, device, 0)
    assert inputs["residual"].dtype == torch.float32
    y = adapter.fused(kernel, inputs, params, poison=True)[0]
    assert y.dtype == torch.float32
    for shapes in ([[33, 70]], [[2, 3, 129]]):
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, 1)
    assert adapter.nbytes([[4, 8]], fat.DTYPES[dtype], params) == 32 * (2 + 4 + 4) + 8 * 2
