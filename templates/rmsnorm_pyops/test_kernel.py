"""Tests for the rmsnorm_pyops template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

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
@pytest.mark.parametrize("casting", ["llama", "fp32"])
@pytest.mark.parametrize("shapes", adapter.ADVERSARIAL, ids=str)
def test_forward(device, dtype, casting, shapes):
    for seed in fat.seeds(1 if shapes[0][0] > 64 else 2):  # one program per row: keep it quick
        fat.run_case(kernel, ref, adapter, shapes, dtype, {"eps": 1e-6, "casting": casting}, device, seed)


@pytest.mark.parametrize("device", DEVICES)
def test_row_longer_than_block(device):
    g = fat.gen(4)
    x = fat.randn([5, 1000], torch.float32, device, g, mean=1.0)
    w = fat.randn([1000], torch.float32, device, g)
    y = kernel.rms_norm(x, w, 1e-5, block_n=64, out=fat.poison(x.shape, x.dtype, device))
    fat.assert_close(y, ref.rms_norm(x, w, 1e-5), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_mixed_weight_dtype(device):
    # LlamaRMSNorm with an fp32 weight and bf16 activations returns fp32
    g = fat.gen(6)
    x = fat.randn([7, 96], torch.bfloat16, device, g)
    w = fat.randn([96], torch.float32, device, g)
    y = kernel.rms_norm(x, w)
    assert y.dtype == torch.float32
    fat.assert_close(y, ref.rms_norm(x, w), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous(device):
    g = fat.gen(8)
    x = fat.randn([96, 40], torch.float16, device, g).t()
    w = fat.randn([96], torch.float16, device, g)
    fat.assert_close(kernel.rms_norm(x, w), ref.rms_norm(x, w), *fat.tol("norm", torch.float16))


@pytest.mark.parametrize("device", DEVICES)
def test_nan_inf(device):
    x = torch.randn(4, 16, device=device)
    x[0, 3] = float("nan")
    x[1, 5] = float("inf")
    x[2, :] = 0.0  # all-zero row: rstd = 1/sqrt(eps), y = 0
    w = torch.ones(16, device=device)
    fat.assert_close(kernel.rms_norm(x, w, 1e-6), ref.rms_norm(x, w, 1e-6), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("casting", ["llama", "fp32"])
def test_grad(device, dtype, casting):
    fat.run_grad_case(kernel, ref, adapter, [[3, 5, 150]], dtype, {"eps": 1e-6, "casting": casting}, device, 2)


@pytest.mark.parametrize("device", DEVICES)
def test_module(device):
    m = kernel.RMSNorm(32, eps=1e-5, device=device)
    with torch.no_grad():
        m.weight.normal_()
    x = torch.randn(3, 32, device=device)
    fat.assert_close(m(x), ref.rms_norm(x, m.weight, 1e-5), 1e-5, 1e-5)
    with pytest.raises(ValueError):
        kernel.rms_norm(x, torch.ones(31, device=device))
