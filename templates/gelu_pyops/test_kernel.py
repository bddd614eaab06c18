"""Tests for the gelu_pyops template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "_common"))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fa_testing as fat  # noqa: E402

kernel = fat.load_sibling(__file__, "kernel")
ref = fat.load_sibling(__file__, "reference")
adapter = fat.load_sibling(__file__, "adapter")

DEVICES = fat.devices()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("has_bias", [True, False])
@pytest.mark.parametrize("shapes", adapter.ADVERSARIAL, ids=str)
def test_forward(device, dtype, has_bias, shapes):
    for seed in fat.seeds(2):
        fat.run_case(kernel, ref, adapter, shapes, dtype, {"has_bias": has_bias}, device, seed)


@pytest.mark.parametrize("device", DEVICES)
def test_same_as_gelu_tanh(device):
    x = torch.randn(33, 65, device=device) * 3
    fat.assert_close(kernel.new_gelu(x), F.gelu(x, approximate="tanh"), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous(device):
    g = fat.gen(5)
    x = fat.randn([67, 129], torch.float16, device, g).t()
    fat.assert_close(kernel.new_gelu(x, out=fat.poison(x.shape, x.dtype, device)), ref.new_gelu(x),
                     *fat.tol("pointwise", torch.float16))


@pytest.mark.parametrize("device", DEVICES)
def test_nan_inf(device):
    x = torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.0, 1e30, -1e30, -0.0, 3.0]], device=device)
    fat.assert_close(kernel.new_gelu(x), ref.new_gelu(x.double().cpu()), 1e-6, 1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_grad(device, dtype):
    fat.run_grad_case(kernel, ref, adapter, [[2, 5, 70]], dtype, {"has_bias": True}, device, 4)


@pytest.mark.parametrize("device", DEVICES)
def test_module(device):
    x = torch.randn(3, 4, device=device)
    fat.assert_close(kernel.NewGELU()(x), ref.new_gelu(x), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("has_bias", [False, True])
def test_fp32_output_of_bf16_input(device, has_bias):
    # autocast runs torch.pow in fp32: bf16 x in, fp32 y out
    params = {"has_bias": has_bias, "out_dtype": "fp32"}
    for i, shapes in enumerate(ADV_FP32_OUT):
        fat.run_case(kernel, ref, adapter, shapes, "bf16", params, device, i)
    g = fat.gen(8)
    x = fat.randn([31, 37], torch.bfloat16, device, g, std=2.0)
    y = kernel.new_gelu(x, dtype=torch.float32)
    assert y.dtype == torch.float32
    fat.assert_close(y, ref.new_gelu(x, dtype=torch.float32), 1e-5, 1e-5)  # no bf16 rounding of y
    fat.run_grad_case(kernel, ref, adapter, [[2, 5, 70]], "bf16", params, device, 4)


ADV_FP32_OUT = [[[129, 127]], [[2, 3, 65]]]
