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
@pytest.mark.parametrize("variant", ["fold", "normalize"])
def test_forward(device, dtype, has_bias, variant):
    params = {"eps": 1e-5, "has_bias": has_bias, "variant": variant}
    for i, shapes in enumerate(adapter.adversarial(params)):
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, i)


@pytest.mark.parametrize("device", DEVICES)
def test_fold_takes_tma_when_aligned(device, monkeypatch):
    """The fold's TMA kernel runs for aligned fp16/bf16 operands, the pointer kernel otherwise
    (a kernel that is never launched by the tests would go unchecked)."""
    calls = []
    for name in ("_fold_tma_kernel", "_ln_linear_kernel"):
        real = getattr(kernel, name)

        class Spy:
            def __init__(self, real, name):
                self.real, self.name = real, name

            def __getitem__(self, grid):
                calls.append(self.name)
                return self.real[grid]

        monkeypatch.setattr(kernel, name, Spy(real, name))
    for shapes, dtype, want in (([[33, 72], [48, 72]], torch.bfloat16, "_fold_tma_kernel"),
                                ([[33, 70], [48, 70]], torch.bfloat16, "_ln_linear_kernel"),
                                ([[33, 72], [48, 72]], torch.float32, "_ln_linear_kernel")):
        calls.clear()
        inputs = adapter.make_inputs(shapes, dtype, {"has_bias": True}, device, 0)
        got = adapter.fused(kernel, inputs, {"eps": 1e-5})[0]
        assert calls == [want], (shapes, dtype, calls)
        fat.assert_close(got, adapter.reference(ref, inputs, {"eps": 1e-5})[0], *fat.tol("gemm", dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fold_constant_row_is_exact(device, dtype):
    """A row of zero variance: eager gives exactly b + W beta; the fold must not amplify the
    cancellation acc - mean * s by 1/sqrt(eps)."""
    g = fat.gen(7)
    x = fat.randn([4, 64], dtype, device, g)
    x[2, :] = 7.0
    lw, lb = fat.randn([64], dtype, device, g, mean=1.0), fat.randn([64], dtype, device, g)
    w, bias = fat.randn([24, 64], dtype, device, g, std=0.2), fat.randn([24], dtype, device, g)
    got = kernel.layernorm_linear(x, lw, lb, w, bias)
    want = ref.layernorm_linear(x, lw, lb, w, bias)
    fat.assert_close(got, want, *fat.tol("gemm", dtype))
    fat.assert_close(got[2], want[2], 1e-6 if dtype == torch.float32 else 1e-2, 1e-5, name="constant row")


@pytest.mark.parametrize("device", DEVICES)
def test_fold_weights(device):
    g = fat.gen(8)
    w, bias = fat.randn([6, 16], torch.float32, device, g), fat.randn([6], torch.float32, device, g)
    lw, lb = fat.randn([16], torch.float32, device, g), fat.randn([16], torch.float32, device, g)
    wf, bf, s = kernel.fold_weights(lw, lb, w, bias)
    fat.assert_close(wf, w * lw, 1e-6, 1e-6, name="W'")
    fat.assert_close(bf, bias + w @ lb, 1e-5, 1e-5, name="b'")
    fat.assert_close(s, (w * lw).sum(1), 1e-5, 1e-5, name="s")
    assert kernel.fold_weights(None, None, w)[1] is None


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
@pytest.mark.parametrize("variant", ["fold", "normalize"])
def test_module(device, variant):
    ln, lin = torch.nn.LayerNorm(32, device=device), torch.nn.Linear(32, 24, device=device)
    m = kernel.LayerNormLinear.from_modules(ln, lin, variant=variant)
    x = torch.randn(2, 3, 32, device=device) + 1
    with torch.no_grad():
        fat.assert_close(m(x), lin(ln(x)), 1e-4, 1e-4)
        # a changed parameter is refolded
        ln.weight.mul_(2.0)
        lin.bias.add_(1.0)
        fat.assert_close(m(x), lin(ln(x)), 1e-4, 1e-4, name="after a parameter update")
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
