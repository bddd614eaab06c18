"""Tests for the layernorm_linear template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

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
def test_forward(device, dtype, has_bias):
    params = {"eps": 1e-5, "has_bias": has_bias}
    for i, shapes in enumerate(adapter.adversarial(params)):
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, i)


@pytest.mark.parametrize("device", DEVICES)
def test_stats_match_eager(device):
    x = torch.randn(7, 300, device=device) * 3 + 5
    mean, rstd = kernel.ln_stats(x, 1e-5)
    fat.assert_close(mean, x.mean(-1), 1e-5, 1e-5)
    fat.assert_close(rstd, torch.rsqrt(x.var(-1, unbiased=False) + 1e-5), 1e-5, 1e-5)


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
def test_module(device):
    ln, lin = torch.nn.LayerNorm(32, device=device), torch.nn.Linear(32, 24, device=device)
    m = kernel.LayerNormLinear.from_modules(ln, lin)
    x = torch.randn(2, 3, 32, device=device) + 1
    with torch.no_grad():
        fat.assert_close(m(x), lin(ln(x)), 1e-4, 1e-4)
    m(x).sum().backward()  # training: eager fallback, grads flow
    assert lin.weight.grad is not None and ln.weight.grad is not None


def test_bench_hooks():
    """gemm_only is the Linear of the reference's normalized input, flops is 2*M*N*K."""
    shapes = [[3, 5, 64], [24, 64], [24]]
    inputs = adapter.make_inputs(shapes, torch.float32, {"has_bias": True}, "cpu", 3)
    want = adapter.reference(ref, inputs, {"has_bias": True})[0]
    got = adapter.gemm_only(inputs, {"has_bias": True})
    fat.assert_close(got, want, 1e-5, 1e-5, name="gemm_only")
    assert "_normalized" in inputs
    assert adapter.flops(shapes, torch.float32, {}) == 2 * 15 * 24 * 64
