"""Tests for the cross_entropy template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

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
REDUCTIONS = ["mean", "sum", "none"]
UPCASTS = ["float", "autocast", "none"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shapes", adapter.ADVERSARIAL, ids=str)
def test_forward(device, dtype, reduction, shapes):
    params = {"reduction": reduction, "ignore_index": -100, "upcast": "float"}
    fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("upcast", UPCASTS)
def test_upcast(device, dtype, upcast):
    params = {"reduction": "mean", "ignore_index": -100, "upcast": upcast}
    fat.run_case(kernel, ref, adapter, [[17, 300]], dtype, params, device, 3)
    x = torch.zeros(2, 5, dtype=fat.DTYPES[dtype], device=device)
    assert kernel.cross_entropy(x, torch.tensor([1, 2], device=device), upcast=upcast).dtype == \
        ref.cross_entropy(x, torch.tensor([1, 2], device=device), upcast=upcast).dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("upcast", ["float", "autocast"])
def test_grad(device, dtype, reduction, upcast):
    params = {"reduction": reduction, "ignore_index": -100, "upcast": upcast}
    fat.run_grad_case(kernel, ref, adapter, [[21, 300]], dtype, params, device, 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("upcast", UPCASTS)
def test_label_smoothing(device, dtype, reduction, upcast):
    # eager's (1 - e) * nll + (e / V) * -sum(log p), forward and gradients, every form
    params = {"reduction": reduction, "ignore_index": -100, "upcast": upcast, "label_smoothing": 0.1}
    fat.run_case(kernel, ref, adapter, [[13, 300]], dtype, params, device, 4)
    fat.run_grad_case(kernel, ref, adapter, [[13, 300]], dtype, params, device, 5)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_autocast_reference_smoothing_is_pytorchs(reduction):
    # the "autocast" reference writes ATen's label-smoothing formula out (its mean over the rows
    # not ignored, ignored rows 0); on fp32 logits, where autocast changes no type, it must be
    # F.cross_entropy itself
    g = fat.gen(11)
    x = fat.randn([9, 70], torch.float32, "cpu", g, std=2.0)
    t = torch.randint(0, 70, (9,), generator=g)
    t[3] = t[7] = -100
    got = ref.cross_entropy(x, t, reduction=reduction, upcast="autocast", label_smoothing=0.2)
    want = F.cross_entropy(x, t, reduction=reduction, label_smoothing=0.2)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_mean_counts_rows_not_ignored(device):
    # 3 of 4 rows ignored: the mean divides by 1, not by 4; the ignored rows' gradient is 0
    x = torch.randn(4, 10, device=device, requires_grad=True)
    t = torch.tensor([3, -100, -100, -100], device=device)
    loss = kernel.CrossEntropyFunction.apply(x, t)
    torch.testing.assert_close(loss, F.cross_entropy(x.detach(), t), rtol=1e-6, atol=1e-6)
    loss.backward()
    assert torch.count_nonzero(x.grad[1:]) == 0
    assert x.grad[0, 3] < 0


@pytest.mark.parametrize("device", DEVICES)
def test_every_row_ignored(device):
    # eager's mean over no rows is NaN, the sum 0, the gradient 0
    x = torch.randn(3, 7, device=device, requires_grad=True)
    t = torch.full((3,), 5, device=device)
    for reduction in REDUCTIONS:
        got = kernel.CrossEntropyFunction.apply(x, t, 5, reduction)
        want = F.cross_entropy(x, t, ignore_index=5, reduction=reduction)
        torch.testing.assert_close(got, want, equal_nan=True)
        got.sum().backward()
        assert torch.count_nonzero(x.grad) == 0
        x.grad = None


@pytest.mark.parametrize("device", DEVICES)
def test_custom_ignore_index(device):
    x = torch.randn(6, 40, device=device)
    t = torch.tensor([0, 39, 7, 7, 12, 1], device=device)
    torch.testing.assert_close(kernel.cross_entropy(x, t, ignore_index=7),
                               F.cross_entropy(x, t, ignore_index=7), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", [40, -1, 1000])
def test_target_out_of_range_is_nan(device, bad):
    # eager stops with a device-side assert; the kernel reads nothing out of bounds and gives
    # NaN for that row, so the mean is NaN and its gradient row too: never silently finite
    x = torch.randn(3, 40, device=device, requires_grad=True)
    t = torch.tensor([1, bad, 2], device=device)
    rows = kernel.cross_entropy(x.detach(), t, reduction="none")
    assert torch.isnan(rows[1]) and torch.isfinite(rows[0]) and torch.isfinite(rows[2])
    loss = kernel.CrossEntropyFunction.apply(x, t)
    assert torch.isnan(loss)
    loss.backward()
    assert torch.isnan(x.grad[1]).all() and torch.isfinite(x.grad[0]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_rows_in_chunks(device):
    # a chunk of 64 over rows of 1000: the online max and sum across chunks, the target in
    # the last one, the largest logit in the first
    g = fat.gen(5)
    x = fat.randn([4, 1000], torch.float32, device, g, std=4.0)
    t = torch.tensor([999, 0, 500, 63], device=device)
    x[0, 0] = 30.0
    got = kernel.cross_entropy(x, t, reduction="none", block_v=64)
    fat.assert_close(got, F.cross_entropy(x, t, reduction="none"), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_logits_and_target(device):
    g = fat.gen(7)
    x = fat.randn([50, 24], torch.bfloat16, device, g, std=2.0).t()  # [24, 50], column-major
    t = torch.randint(0, 50, (48,), generator=g).to(device)[::2]
    fat.assert_close(kernel.cross_entropy(x, t), ref.cross_entropy(x, t), 1e-5, 1e-5)


def test_refusals():
    x = torch.randn(4, 10)
    with pytest.raises(ValueError, match=r"logits \[M, V\]"):
        kernel.cross_entropy(x.view(2, 2, 10), torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(TypeError, match="class indices"):
        kernel.cross_entropy(x, torch.softmax(x, 1))
    with pytest.raises(TypeError, match="class indices"):
        kernel.cross_entropy(x, torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError, match="reduction"):
        kernel.cross_entropy(x, torch.zeros(4, dtype=torch.int64), reduction="batchmean")
    with pytest.raises(ValueError, match="upcast"):
        kernel.CrossEntropy(upcast="fp32")
    with pytest.raises(ValueError, match="label_smoothing"):
        kernel.cross_entropy(x, torch.zeros(4, dtype=torch.int64), label_smoothing=1.5)


@pytest.mark.parametrize("device", DEVICES)
def test_module_as_hf_computes_it(device):
    # HF's causal-LM loss: logits [B, S, V] viewed as [-1, V], labels padded with -100
    g = fat.gen(9)
    logits = fat.randn([2, 9, 33], torch.bfloat16, device, g, std=2.0).requires_grad_()
    labels = torch.randint(0, 33, (2, 9), generator=g).to(device)
    labels[:, -1] = -100
    want = F.cross_entropy(logits.float().view(-1, 33), labels.view(-1), ignore_index=-100)
    (dwant,) = torch.autograd.grad(want, logits)
    got = kernel.CrossEntropy()(logits.view(-1, 33), labels.view(-1))
    (dgot,) = torch.autograd.grad(got, logits)
    assert got.dtype == torch.float32 and dgot.dtype == torch.bfloat16
    fat.assert_close(got, want, 1e-5, 1e-5)
    fat.assert_close(dgot, dwant, *fat.tol("softmax", torch.bfloat16))


def test_backward_saves_no_copy():
    # the logits are saved as they are (no fp32 copy), and an in-place change to them before
    # the backward is caught by autograd, not read silently
    x = torch.randn(5, 20, dtype=torch.bfloat16, requires_grad=True)
    y = x * 1
    loss = kernel.CrossEntropyFunction.apply(y, torch.arange(5))
    with torch.no_grad():
        y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_plan():
    assert kernel._plan(8192, 4096) == (2048, 4)
    assert kernel._plan(50257, 4096) == (2048, 4)
    assert kernel._plan(1000, 4096) == (1024, 2)
    assert kernel._plan(10, 4096) == (16, 1)
    assert kernel._plan(1, 4096) == (1, 1)
    assert kernel._plan(50257, 4096, backward=True) == (4096, 16)
    assert kernel._plan(300, 4096, backward=True) == (512, 2)


def _sm90_usage():
    """Registers and spills of each kernel as the H200 compiles it (run_isolated: without the
    interpreter), at GPT-2's vocabulary, bf16 and fp32, every reduction."""
    import sm90

    out = {}
    for dt in (torch.float32, torch.bfloat16):
        for red in REDUCTIONS:
            x = torch.empty(4096, 50257, dtype=dt)
            t = torch.empty(4096, dtype=torch.int64)
            for launch in sm90.capture(kernel, lambda: kernel._forward(x, t, -100, red, "float", 0.1)):
                out[f"{launch.name} {dt} {red}"] = sm90.ptxas_usage(sm90.compile_sm90(launch).asm["ptx"])
            dl = torch.empty(() if red != "none" else (4096,))
            block, warps = kernel._plan(50257, 4096, backward=True)
            launch = sm90.Launch(kernel._ce_bwd, (4096,), (x, t, torch.empty(4096), dl, torch.empty(()),
                                                           torch.empty(4096, 50257, dtype=dt), 50257, 50257, 1, 1,
                                                           0 if red != "none" else 1, 50257, 1, -100, 0.1),
                                 warps, 1, dict(REDUCTION=kernel.REDUCTION[red], BLOCK_V=block))
            out[f"_ce_bwd {dt} {red}"] = sm90.ptxas_usage(sm90.compile_sm90(launch).asm["ptx"])
    return out


def test_compiles_for_the_h200_without_spills():
    import sm90

    usage = sm90.run_isolated(_sm90_usage, str(pathlib.Path(__file__).parent))
    assert len(usage) == 16, usage  # 2 dtypes x (3 forward + 2 reductions' sums + 3 backward)
    for name, (regs, spills) in usage.items():
        assert spills == 0 and regs <= 128, (name, regs, spills)


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_cuda_graph_gpu():
    # no host synchronization: the whole forward and backward capture, and replay on new values
    x = torch.randn(64, 5000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, 5000, (64,), device="cuda")
    t[::7] = -100
    f = kernel.CrossEntropy()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        f(x, t).backward()
    torch.cuda.current_stream().wait_stream(s)
    x.grad = None
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        loss = f(x, t)
        loss.backward()
    for _ in range(2):
        with torch.no_grad():
            x.normal_()
        g.replay()
        xr = x.detach().clone().requires_grad_()
        want = F.cross_entropy(xr.float(), t)
        want.backward()
        fat.assert_close(loss, want, 1e-5, 1e-5)
        fat.assert_close(x.grad, xr.grad, *fat.tol("softmax", torch.bfloat16))
