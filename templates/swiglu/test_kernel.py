"""Tests for the swiglu template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

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
    for seed in fat.seeds(2):
        fat.run_case(kernel, ref, adapter, shapes, dtype, {}, device, seed)


@pytest.mark.parametrize("device", DEVICES)
def test_contiguous_and_transposed(device):
    g = fat.gen(2)
    gate = fat.randn([37, 70], torch.float32, device, g)
    up = fat.randn([70, 37], torch.float32, device, g).t()
    fat.assert_close(kernel.swiglu(gate, up, out=fat.poison(gate.shape, gate.dtype, device)),
                     ref.swiglu(gate, up), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_inf(device):
    gate = torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.0, 100.0, -100.0, 2.0, 1.0]], device=device)
    up = torch.tensor([[1.0, 2.0, 3.0, float("inf"), float("nan"), 1.0, -float("inf"), 0.5]], device=device)
    fat.assert_close(kernel.swiglu(gate, up), ref.swiglu(gate, up), 1e-6, 1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_grad(device, dtype):
    fat.run_grad_case(kernel, ref, adapter, [[3, 5, 66]], dtype, {}, device, 9)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input(device):
    with pytest.raises(ValueError):
        kernel.swiglu(torch.randn(3, 4, device=device), torch.randn(3, 5, device=device))
