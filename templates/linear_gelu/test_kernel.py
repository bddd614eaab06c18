"""Tests for the linear_gelu template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

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
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_forward(device, dtype, approximate):
    params = {"approximate": approximate, "has_bias": True}
    for i, shapes in enumerate(adapter.adversarial(params)):
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, i)


@pytest.mark.parametrize("device", DEVICES)
def test_no_bias_and_plain_linear(device):
    fat.run_case(kernel, ref, adapter, [[20, 50], [30, 50]], "fp32", {"has_bias": False}, device, 3)
    x, w = torch.randn(5, 40, device=device), torch.randn(24, 40, device=device)
    fat.assert_close(kernel.linear_gelu(x, w, activation=False), F.linear(x, w), 1e-4, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous(device):
    g = fat.gen(2)
    x = fat.randn([70, 33], torch.float32, device, g).t()        # [33, 70], strides (1, 33)
    w = fat.randn([70, 45], torch.float32, device, g).t() * 0.1  # [45, 70] transposed
    b = fat.randn([45], torch.float32, device, g)
    y = kernel.linear_gelu(x, w, b, "tanh", out=fat.poison((33, 45), torch.float32, device))
    fat.assert_close(y, ref.linear_gelu(x, w, b, "tanh"), 1e-4, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_inf(device):
    x = torch.randn(4, 8, device=device)
    w = torch.randn(6, 8, device=device)
    x[1, 2] = float("nan")
    x[2, 3] = float("inf")
    # want: float64 (eager fp32 on the CPU gives NaN for gelu(+inf); the limit is +inf)
    want = ref.linear_gelu(x.double().cpu(), w.double().cpu())
    fat.assert_close(kernel.linear_gelu(x, w), want, 1e-4, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_module_training_falls_back(device):
    lin = torch.nn.Linear(24, 16, device=device)
    m = kernel.LinearGELU.from_linear(lin, "tanh")
    x = torch.randn(3, 24, device=device)
    with torch.no_grad():
        fat.assert_close(m(x), F.gelu(lin(x), approximate="tanh"), 1e-4, 1e-4)
    y = m(x)  # weight requires grad: eager path, gradients flow
    y.sum().backward()
    assert lin.weight.grad is not None
    with pytest.raises(ValueError):
        kernel.linear_gelu(x, torch.randn(16, 23, device=device))


def test_bench_hooks():
    """gemm_only is the Linear before the GELU, flops is 2*M*N*K."""
    shapes = [[3, 5, 64], [24, 64], [24]]
    params = {"has_bias": True, "approximate": "none"}
    inputs = adapter.make_inputs(shapes, torch.float32, params, "cpu", 3)
    want = adapter.reference(ref, inputs, params)[0]
    got = torch.nn.functional.gelu(adapter.gemm_only(inputs, params))
    fat.assert_close(got, want, 1e-5, 1e-5, name="gelu(gemm_only)")
    assert adapter.flops(shapes, torch.float32, {}) == 2 * 15 * 24 * 64


@pytest.mark.parametrize("device", DEVICES)
def test_takes_tma_when_aligned(device, monkeypatch):
    """The TMA kernel runs for aligned fp16/bf16 operands, the pointer kernel otherwise (a
    kernel that is never launched by the tests would go unchecked)."""
    calls = []

    class Spy:
        def __init__(self, real, name):
            self.real, self.name = real, name

        def __getitem__(self, grid):
            calls.append(self.name)
            return self.real[grid]

    for name in ("_linear_gelu_tma_kernel", "_linear_gelu_kernel"):
        monkeypatch.setattr(kernel, name, Spy(getattr(kernel, name), name))
    for shapes, dtype, want in (([[33, 72], [48, 72]], torch.bfloat16, "_linear_gelu_tma_kernel"),
                                ([[33, 70], [48, 70]], torch.bfloat16, "_linear_gelu_kernel"),
                                ([[33, 70], [48, 70]], torch.float16, "_linear_gelu_kernel"),
                                ([[33, 72], [48, 72]], torch.float32, "_linear_gelu_kernel")):
        calls.clear()
        params = {"has_bias": True, "approximate": "none"}
        inputs = adapter.make_inputs(shapes, dtype, params, device, 0)
        got = adapter.fused(kernel, inputs, params)[0]
        assert calls == [want], (shapes, dtype, calls)
        fat.assert_close(got, adapter.reference(ref, inputs, params)[0], *fat.tol("gemm", dtype))


@pytest.mark.parametrize("device", DEVICES)
def test_erf_gelu_dense_grid(device):
    """The epilogue's erf GELU (A&S 7.1.26 with an rsqrt reciprocal) against float64 F.gelu
    over a dense grid and the special values: a wrong coefficient or sign fails it."""
    x = torch.cat([torch.linspace(-10, 10, 4001), torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0])])
    n = x.numel()
    # y = gelu(x @ I^T): x as a [n, 8] input whose first column carries the grid, W = e_0
    a = torch.zeros(n, 8)
    a[:, 0] = x
    w = torch.zeros(8, 8)
    w[:, 0] = 1.0
    y = kernel.linear_gelu(a.to(device), w.to(device), None, "none")[:, 0].cpu().double()
    want = F.gelu(x.double())
    finite = want.isfinite()
    err = (y[finite] - want[finite]).abs()
    bound = 2e-6 * x.double()[finite].abs().clamp(min=1.0)
    assert bool((err <= bound).all()), f"max error {err.max().item():.3g}"
    assert torch.equal(y[~finite].isnan(), want[~finite].isnan())
    assert bool((y[~finite][~want[~finite].isnan()] == want[~finite][~want[~finite].isnan()]).all())
