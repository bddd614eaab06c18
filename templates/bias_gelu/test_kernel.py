"""Tests for the bias_gelu template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

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
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shapes", adapter.ADVERSARIAL, ids=str)
def test_forward(device, dtype, approximate, shapes):
    for seed in fat.seeds(2):
        fat.run_case(kernel, ref, adapter, shapes, dtype, {"approximate": approximate, "has_bias": True},
                     device, seed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_no_bias(device, approximate):
    fat.run_case(kernel, ref, adapter, [[3, 5, 67]], "fp32", {"approximate": approximate, "has_bias": False},
                 device, 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_non_contiguous(device, dtype):
    dt = fat.DTYPES[dtype]
    g = fat.gen(3)
    x = fat.randn([67, 129], dt, device, g).t()  # [129, 67], strides (1, 129)
    b = fat.randn([67], dt, device, g)
    y = kernel.bias_gelu(x, b, "tanh", out=fat.poison(x.shape, dt, device))
    fat.assert_close(y, ref.bias_gelu(x, b, "tanh"), *fat.tol("pointwise", dt))
    x3 = fat.randn([4, 9, 33], dt, device, g).permute(1, 0, 2)  # not viewable as [rows, N]
    b3 = fat.randn([33], dt, device, g)
    fat.assert_close(kernel.bias_gelu(x3, b3), ref.bias_gelu(x3, b3), *fat.tol("pointwise", dt))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_nan_inf(device, approximate):
    # want: the reference in float64 (eager fp32 CPU gives NaN for gelu(+inf) with erf; the
    # limit, float64 and this kernel give +inf)
    x = torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.0, 1e30, -1e30, -0.0, 3.0]], device=device)
    b = torch.zeros(8, device=device)
    want = ref.bias_gelu(x.double().cpu(), b.double().cpu(), approximate)
    fat.assert_close(kernel.bias_gelu(x, b, approximate), want, 1e-6, 1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_erf_gelu_dense(device):
    # the kernel's own erf (A&S 7.1.26) over a dense grid: a wrong coefficient or a lost sign
    # shows here even where the random cases would not look
    x = torch.linspace(-10.0, 10.0, 20001, dtype=torch.float64)
    x = torch.cat([x, torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=torch.float64)])
    x32 = x.float()
    got = kernel.bias_gelu(x32.to(device)[None, :]).double().cpu()[0]
    want = torch.nn.functional.gelu(x32.double())  # on the fp32 inputs, in float64
    special = ~torch.isfinite(x32)
    assert torch.equal(torch.isnan(got[special]), torch.isnan(want[special]))
    assert torch.equal(got[special].nan_to_num(), want[special].nan_to_num())
    err = (got - want).abs()[~special]
    bound = 2e-6 * x32.double().abs().clamp(min=1.0)[~special]
    worst = int(torch.argmax(err / bound))
    assert bool((err <= bound).all()), (
        f"max |error| {err[worst].item():.3g} at x = {x32[~special][worst].item()} (bound {bound[worst].item():.3g})")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_grad(device, dtype, approximate):
    fat.run_grad_case(kernel, ref, adapter, [[2, 5, 70]], dtype, {"approximate": approximate, "has_bias": True},
                      device, 4)


@pytest.mark.parametrize("device", DEVICES)
def test_module_and_bad_input(device):
    m = kernel.BiasGELU("tanh")
    x = torch.randn(3, 4, device=device)
    b = torch.randn(4, device=device)
    fat.assert_close(m(x, b), ref.bias_gelu(x, b, "tanh"), 1e-5, 1e-5)
    with pytest.raises(ValueError):
        kernel.bias_gelu(x, torch.randn(5, device=device))
    with pytest.raises(ValueError):
        kernel.BiasGELU("fast")
