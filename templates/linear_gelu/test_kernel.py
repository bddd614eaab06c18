"""Tests for the linear_gelu template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "_common"))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

import fa_testing as fat  # noqa: E402

kernel = fat.load_sibling(__file__, "kernel")
ref = fat.load_sibling(__file__, "reference")
adapter = fat.load_sibling(__file__, "adapter")

DEVICES = fat.devices()


@pytest.fixture(autouse=True)
def _untimed_tiles(request, monkeypatch):
    """Every bucket takes its first candidate tile, untimed (on the GPU: one compile per
    kernel, not one per candidate); the tests about tuning (named so) leave tuning as it is."""
    if "tuning" not in request.node.name:
        monkeypatch.setattr(kernel, "_GEMM_TUNE", False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_forward(device, dtype):
    """Every adversarial case, each with both GELUs (the adapter's test mode), the offsets past
    2**31 and the refused outputs included."""
    params = {"approximate": "none", "has_bias": True}
    for i, shapes in enumerate(adapter.adversarial(params)):
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, i)


@pytest.mark.parametrize("device", DEVICES)
def test_no_bias(device):
    fat.run_case(kernel, ref, adapter, [[20, 50], [30, 50]], "fp32", {"has_bias": False, "approximate": "tanh"},
                 device, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous(device):
    g = fat.gen(2)
    x = fat.randn([70, 33], torch.float32, device, g).t()        # [33, 70], strides (1, 33)
    w = fat.randn([70, 45], torch.float32, device, g).t() * 0.1  # [45, 70] transposed
    b = fat.randn([90], torch.float32, device, g)[::2]            # strided bias
    out = fat.poison((45, 33), torch.float32, device).t()         # a transposed out
    y = kernel.linear_gelu(x, w, b, "tanh", out=out)
    assert y is out
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
@pytest.mark.parametrize("approx", ["none", "tanh"])
def test_module_trains_through_the_function(device, approx, monkeypatch):
    """In training LinearGELU runs LinearGELUFunction: the fused forward (the pre-activation
    stored by the same kernel) and the fused GELU derivative; gradients of x, W and b match
    float64 eager (fp32 data: within 1e-4), including a 3-D input and rows past the tile."""
    calls = []
    real = kernel.LinearGELUFunction.apply
    monkeypatch.setattr(kernel.LinearGELUFunction, "apply", lambda *a: calls.append(1) or real(*a))
    g = fat.gen(3)
    lin = torch.nn.Linear(40, 24, device=device)
    m = kernel.LinearGELU.from_linear(lin, approx)
    x = fat.randn([2, 37, 40], torch.float32, device, g).requires_grad_(True)
    with torch.no_grad():
        fat.assert_close(m(x), F.gelu(lin(x), approximate=approx), 1e-4, 1e-4)
    assert calls == []  # inference: the plain kernel
    dy = fat.randn([2, 37, 24], torch.float32, device, g)
    got = torch.autograd.grad(m(x), [x, lin.weight, lin.bias], dy)
    assert calls == [1]
    x64, w64, b64 = (t.detach().double().requires_grad_(True) for t in (x, lin.weight, lin.bias))
    want = torch.autograd.grad(F.gelu(F.linear(x64, w64, b64), approximate=approx), [x64, w64, b64], dy.double())
    for name, gg, ww in zip(("dx", "dW", "db"), got, want):
        fat.assert_close(gg, ww.float(), 1e-4, 1e-4, name=name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("programs", [1, 8, 1000])
def test_bias_grad_in_row_groups(device, dtype, programs, monkeypatch):
    """The bias gradient from the GELU derivative kernel's partial sums: every row in one
    program, groups of several row tiles with a ragged last one, one tile per program; a 3-D x
    too. (In the interpreter 81 rows of 40 columns: tiles of 16 x 64, six row tiles, the last
    of one row; at 8 programs, three groups of two tiles, the last holding the ragged one. 129
    rows on the GPU.) Both GELUs (adapter.fused's autograd mode), and the call bench times
    (adapter.train), against fp64 eager."""
    monkeypatch.setattr(kernel, "DB_PROGRAMS", programs)
    rows = 81 if device == "cpu" else 129
    for i, shapes in enumerate(([[rows, 40], [40, 40]], [[3, 43, 24], [40, 24]])):
        fat.run_grad_case(kernel, ref, adapter, shapes, dtype, {"has_bias": True}, device, 40 + i)


@pytest.fixture
def gpu_tiles(monkeypatch):
    """The GPU's tiles and bias-gradient programs, whatever runs the test (no kernel may run)."""
    monkeypatch.setattr(kernel, "INTERPRET", False)
    monkeypatch.setattr(kernel, "DB_PROGRAMS", kernel.DB_PROGRAMS_GPU)
    kernel._tiles.cache_clear()
    yield
    kernel._tiles.cache_clear()


@pytest.mark.parametrize("has_bias", [False, True])
def test_backward_sums_the_bias_in_the_derivative_pass(monkeypatch, gpu_tiles, has_bias):
    """The GELU node's backward is one derivative launch (with HAS_DB, its programs' partial
    sums in PART, a few hundred rows of fp32, never dz's size) and, with a bias, one
    _sum_parts launch into the bias gradient in its type: no ATen sum over dz (eager's addmm
    backward reads dz a second time for it), no cast. Meta tensors: no kernel runs; the GPU's
    tiles and programs."""
    calls = []
    monkeypatch.setattr(kernel, "_launch", lambda k, grid, args, num_warps=4, num_stages=1, **c:
                        calls.append((k, grid, c, args)))
    M, N = 8192, 3072
    pre = torch.empty(M, N, dtype=torch.bfloat16, device="meta", requires_grad=True)
    y = torch.empty(M, N, dtype=torch.bfloat16, device="meta")
    b = torch.empty(N, dtype=torch.bfloat16, device="meta", requires_grad=True) if has_bias else None
    out = kernel._GELUNodeFunction.apply(pre, y, b, "none")
    from torch.utils._python_dispatch import TorchDispatchMode

    ops = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with Log():
        grads = torch.autograd.grad(out, [pre] + ([b] if has_bias else []), torch.empty_like(out))
    (k, grid, c, args), *sums = calls
    assert k is kernel._gelu_bwd_kernel and c["HAS_DB"] == has_bias and args[2].data_ptr() == grads[0].data_ptr()
    assert [s[0] for s in sums] == [kernel._sum_parts] * has_bias
    assert "sum" not in ops and "_to_copy" not in ops, ops
    if has_bias:  # the partial sums (args[3]) into the bias gradient, in its type
        part = args[3]
        assert sums[0][3][0] is part and sums[0][3][1] is grads[1] and grads[1].dtype == torch.bfloat16
        assert part.dtype == torch.float32 and part.shape[1] == N and 1 < part.shape[0] <= 2 * kernel.DB_PROGRAMS
        assert part.shape[0] * c["BLOCK_M"] <= M and part.numel() * 4 <= M * N * 2 // 2
        tiles_n = -(-N // c["BLOCK_N"])
        assert grid == (part.shape[0] * tiles_n,) and args[6] % c["BLOCK_M"] == 0  # whole row tiles
    else:
        assert grid == (-(-M // c["BLOCK_M"]) * -(-N // c["BLOCK_N"]),)


def test_training_graph_frees_the_pre_activation_first():
    """LinearGELUFunction builds eager's two nodes: the GELU's (saving the pre-activation, and
    giving b its gradient) over the GEMM's (saving x and W), so autograd frees the pre-activation before the gradient GEMMs
    run; the GEMM node's y gradient stays None (no [M, N] of zeros), and a second backward with
    retain_graph gives the same gradients (the pre-activation is not written over)."""
    g = fat.gen(5)
    x = fat.randn([3, 33, 40], torch.float32, "cpu", g).requires_grad_(True)
    w = fat.randn([24, 40], torch.float32, "cpu", g, std=0.2).requires_grad_(True)
    b = fat.randn([24], torch.float32, "cpu", g).requires_grad_(True)
    y = kernel.LinearGELUFunction.apply(x, w, b, "none")
    node = y.grad_fn
    assert type(node).__name__ == "_GELUNodeFunctionBackward", type(node).__name__
    (pre,) = node.saved_tensors
    assert pre.shape == y.shape
    nexts = [type(f).__name__ for f, _ in node.next_functions if f is not None]
    assert nexts == ["_LinearPreFunctionBackward", "AccumulateGrad"], nexts  # b: its gradient from here
    gemm = node.next_functions[0][0]
    assert [t.shape for t in gemm.saved_tensors] == [x.shape, w.shape]
    dy = fat.randn(list(y.shape), torch.float32, "cpu", g)
    first = torch.autograd.grad(y, [x, w, b], dy, retain_graph=True)
    second = torch.autograd.grad(y, [x, w, b], dy)
    for a, c in zip(first, second):
        assert torch.equal(a, c)
    x64, w64, b64 = (t.detach().double().requires_grad_(True) for t in (x, w, b))
    want = torch.autograd.grad(F.gelu(F.linear(x64, w64, b64)), [x64, w64, b64], dy.double())
    for name, gg, ww in zip(("dx", "dW", "db"), first, want):
        fat.assert_close(gg, ww.float(), 1e-4, 1e-4, name=name)


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_gpu_training_peak_memory():
    """A training step's peak memory (forward and backward, bf16 4096 x 768 -> 3072) is eager's:
    the pre-activation is freed before the gradient GEMMs, as eager frees its GELU's input.
    (Measured through bench on the H200 before the two nodes: full mode 187 against 162 MB at
    BERT's 16x256x768x3072, one [M, N] above.)"""
    g = fat.gen(22)
    x = fat.randn([4096, 768], torch.bfloat16, "cuda", g)
    w = fat.randn([3072, 768], torch.bfloat16, "cuda", g, std=0.03)
    b = fat.randn([3072], torch.bfloat16, "cuda", g)
    dy = fat.randn([4096, 3072], torch.bfloat16, "cuda", g)

    def peak(chain):
        leaves = [t.detach().clone().requires_grad_(True) for t in (x, w, b)]
        torch.autograd.grad(chain(*leaves), leaves, dy)  # warm-up: compiles, tiles
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        torch.autograd.grad(chain(*leaves), leaves, dy)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    fused = peak(lambda *a: kernel.LinearGELUFunction.apply(*a, "none"))
    eager = peak(lambda x, w, b: F.gelu(F.linear(x, w, b)))
    assert fused <= eager + 64 * 1024, (fused, eager)


@pytest.mark.parametrize("device", DEVICES)
def test_module_under_autocast(device):
    """Under autocast LinearGELU runs as autocast runs F.linear and the GELU: the fused kernel
    in autocast's dtype (bf16), y in it, the gradients in x's and the parameters' own dtype
    (fp32), within bf16's tolerance of eager under autocast (before, it ran in fp32)."""
    g = fat.gen(5)
    lin = torch.nn.Linear(64, 40, device=device)
    m = kernel.LinearGELU.from_linear(lin, "tanh")
    x = fat.randn([3, 7, 64], torch.float32, device, g).requires_grad_(True)
    dy = fat.randn([3, 7, 40], torch.bfloat16, device, g)
    params = [x, lin.weight, lin.bias]
    with torch.autocast(device, dtype=torch.bfloat16):
        y = m(x)
        want = F.gelu(lin(x), approximate="tanh")
    assert y.dtype == want.dtype == torch.bfloat16
    fat.assert_close(y, want, *fat.tol("gemm", torch.bfloat16))
    for name, gg, ww in zip(("dx", "dW", "db"), torch.autograd.grad(y, params, dy), torch.autograd.grad(want, params, dy)):
        assert gg.dtype == ww.dtype == torch.float32, name
        fat.assert_close(gg, ww, 5e-2, 5e-2, name=name)


@pytest.mark.parametrize("device", DEVICES)
def test_pre_activation_buffer(device):
    """pre= receives x W^T + b exactly as eager's addmm output rounds it (bf16), from the same
    launch as y (the TMA kernel where aligned, the pointer kernel otherwise); a pre that is not
    contiguous, or an out that is not, or a pre overlapping x, is refused."""
    g = fat.gen(4)
    bf = torch.bfloat16
    for k in (72, 70):  # TMA-aligned, then not
        x = fat.randn([33, k], bf, device, g)
        w = fat.randn([48, k], bf, device, g, std=k ** -0.5)
        b = fat.randn([48], bf, device, g)
        pre = fat.poison((33, 48), bf, device)
        y = kernel.linear_gelu(x, w, b, "none", pre=pre)
        lin = F.linear(x.float(), w.float(), b.float())
        fat.assert_close(pre, lin.to(bf), *fat.tol("gemm", bf), name=f"pre K={k}")
        fat.assert_close(y, F.gelu(pre.float()).to(bf), 1e-2, 1e-2, name=f"y from pre K={k}")
    with pytest.raises(ValueError, match="pre must be"):
        kernel.linear_gelu(x, w, b, pre=torch.empty(48, 33, dtype=bf, device=device).t())
    with pytest.raises(ValueError, match="out must be contiguous"):
        kernel.linear_gelu(x, w, b, pre=torch.empty(33, 48, dtype=bf, device=device),
                           out=torch.empty(48, 33, dtype=bf, device=device).t())
    buf = torch.empty(33 * k + 33 * 48, dtype=bf, device=device)
    xa = buf[:33 * k].view(33, k).copy_(x)
    with pytest.raises(ValueError, match="shares memory"):
        kernel.linear_gelu(xa, w, b, pre=buf[33 * k - 1:33 * k - 1 + 33 * 48].view(33, 48))
    with pytest.raises(ValueError):
        kernel.linear_gelu(x, torch.randn(16, 23, device=device, dtype=bf))
    with pytest.raises(ValueError, match="approximate"):
        kernel.linear_gelu(x, w, approximate="fast")


@pytest.mark.parametrize("device", DEVICES)
def test_out_overlapping_an_input_is_refused(device):
    """A GEMM cannot run in place (each output tile reads whole rows of x): every out that
    shares memory with x, the weight or the bias is refused, exactly in place included; an out
    right next to x in one buffer is accepted."""
    g = fat.gen(4)
    buf = fat.randn([160 + 96], torch.float32, device, g)
    x = buf[:160].view(4, 40)
    wbuf = fat.randn([960 + 96], torch.float32, device, g, std=0.15)
    w = wbuf[:960].view(24, 40)
    bbuf = fat.randn([96], torch.float32, device, g)
    bias = bbuf[:24]
    sq = fat.randn([4, 24], torch.float32, device, g)
    refused = {
        "x in place": (sq, w[:, :24], bias, sq),
        "x's first elements": (x, w, bias, buf[:96].view(4, 24)),
        "x's last element": (x, w, bias, buf[159:255].view(4, 24)),
        "x's columns": (x, w, bias, x[:, :24]),
        "inside the weight": (x, w, bias, wbuf[:96].view(4, 24)),
        "over the bias": (x, w, bias, bbuf.view(4, 24)),
    }
    for what, (xi, wi, bi, out) in refused.items():
        with pytest.raises(ValueError, match="linear_gelu: output out shares memory"):
            kernel.linear_gelu(xi, wi, bi, out=out)
            pytest.fail(f"{what}: not refused")
    for out in (buf[160:].view(4, 24), wbuf[960:].view(4, 24)):  # right after x, after the weight
        fat.assert_close(kernel.linear_gelu(x, w, bias, out=out), ref.linear_gelu(x, w, bias), 1e-4, 1e-4)
    with pytest.raises(ValueError, match="wrong shape"):
        kernel.linear_gelu(x, w, bias, out=torch.empty(4, 23, device=device))


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("device", DEVICES)
def test_offsets_past_2_31(device):
    """x and y as views whose offsets pass 2**31 elements (rows 2**30 apart; x: K = 40
    columns 70e6 apart, two K steps of 32 columns; y: 5 columns 2**29 apart) in reserved, not
    committed storage: 32-bit offsets would read and write elsewhere. Only the viewed
    elements' pages are touched."""
    before = _rss_mb()
    shapes = adapter.FAR[0]
    params = {"approximate": "none", "has_bias": True}
    inputs = adapter.make_inputs(shapes, torch.bfloat16, params, device, 5)
    x = inputs["x"]
    assert 2 * x.stride(0) >= 2**31 and 31 * x.stride(1) >= 2**31
    y = adapter.far_view((3, 5), adapter.Y_STRIDES, torch.bfloat16, device)
    assert 2 * y.stride(0) >= 2**31 and 4 * y.stride(1) >= 2**31
    kernel.linear_gelu(x, inputs["weight"], inputs["bias"], out=y)
    fat.assert_close(y, ref.linear_gelu(x, inputs["weight"], inputs["bias"]), *fat.tol("gemm", torch.bfloat16))
    if device == "cpu":
        assert _rss_mb() - before < 64, "the views' storage was committed"


@pytest.mark.parametrize("device", DEVICES)
def test_bench_hooks(device):
    """gemm_only is the Linear before the GELU, flops is 2*M*N*K; outside test mode fused()
    returns the traced GELU only (what bench.py times)."""
    shapes = [[3, 5, 64], [24, 64], [24]]
    params = {"has_bias": True, "approximate": "none"}
    inputs = adapter.make_inputs(shapes, torch.float32, params, device, 3)
    want = adapter.reference(ref, inputs, params)
    assert len(want) == 1
    got = torch.nn.functional.gelu(adapter.gemm_only(inputs, params))
    fat.assert_close(got, want[0], 1e-5, 1e-5, name="gelu(gemm_only)")
    got = adapter.fused(kernel, inputs, params)
    assert len(got) == 1
    fat.assert_close(got[0], want[0], 1e-4, 1e-4)
    assert adapter.flops(shapes, torch.float32, {}) == 2 * 15 * 24 * 64


class Spy:
    """Records the kernels launched (by name) and forwards to the real one."""

    def __init__(self, real, name, calls):
        self.real, self.name, self.calls = real, name, calls
        self.arg_names = real.arg_names

    def __getitem__(self, grid):
        self.calls.append(self.name)
        return self.real[grid]


@pytest.mark.parametrize("device", DEVICES)
def test_takes_tma_when_aligned(device, monkeypatch):
    """The TMA kernel runs for aligned fp16/bf16 operands, the pointer kernel otherwise (a
    kernel that is never launched by the tests would go unchecked)."""
    calls = []
    for name in ("_linear_gelu_tma_kernel", "_linear_gelu_kernel"):
        monkeypatch.setattr(kernel, name, Spy(getattr(kernel, name), name, calls))
    for shapes, dtype, want in (([[33, 72], [48, 72]], torch.bfloat16, "_linear_gelu_tma_kernel"),
                                ([[33, 70], [48, 70]], torch.bfloat16, "_linear_gelu_kernel"),
                                ([[33, 70], [48, 70]], torch.float16, "_linear_gelu_kernel"),
                                ([[33, 72], [48, 72]], torch.float32, "_linear_gelu_kernel")):
        calls.clear()
        params = {"has_bias": True, "approximate": "none"}
        inputs = adapter.make_inputs(shapes, dtype, params, device, 0)
        got = kernel.linear_gelu(inputs["x"], inputs["weight"], inputs["bias"])
        assert calls == [want], (shapes, dtype, calls)
        fat.assert_close(got, adapter.reference(ref, inputs, params)[0], *fat.tol("gemm", dtype))


@pytest.mark.parametrize("device", DEVICES)
def test_layouts_through_the_plan(device, monkeypatch):
    """The per-layout plans (checked once, then looked up): x of 1, 2 and 3 dims, leading dims
    of 1, a 3-D x with no [rows, K] view (copied), 3-D and row-padded outputs, a misaligned x
    of a layout first met aligned (the TMA kernel is chosen per call: the pointer kernel then),
    K = 0, a bias then none; each layout called twice (the second call takes the plan)."""
    calls = []
    for name in ("_linear_gelu_tma_kernel", "_linear_gelu_kernel"):
        monkeypatch.setattr(kernel, name, Spy(getattr(kernel, name), name, calls))
    monkeypatch.setattr(kernel, "_PLANS", {})
    g = fat.gen(14)
    bf = torch.bfloat16
    w = fat.randn([40, 64], bf, device, g, std=0.1)
    b = fat.randn([40], bf, device, g)
    flat = fat.randn([3 * 5 * 64 + 8], bf, device, g)
    tma, ptr = "_linear_gelu_tma_kernel", "_linear_gelu_kernel"
    cases = [  # (x, bias, out or None, the kernel wanted; None: the out is refused)
        (fat.randn([3, 5, 64], bf, device, g), b, None, tma),
        (fat.randn([1, 1, 7, 64], bf, device, g), b, None, tma),
        (fat.randn([64], bf, device, g), None, None, tma),
        (fat.randn([5, 64, 3], bf, device, g).permute(2, 0, 1), b, None, tma),    # no row view: a contiguous copy
        (fat.randn([64, 3, 5], bf, device, g).permute(1, 2, 0), b, None, ptr),    # rows of stride 1, columns 15
        (flat[:960].view(3, 5, 64), b, fat.poison((3, 5, 40), bf, device), tma),
        (flat[1:961].view(3, 5, 64), b, fat.poison((3, 5, 40), bf, device), ptr),  # misaligned x
        (flat[:960].view(3, 5, 64), b, fat.poison((3, 5, 48), bf, device)[..., :40], tma),  # padded out rows
        (flat[:960].view(3, 5, 64), b, fat.poison((3, 5, 41), bf, device)[..., :40], ptr),  # unaligned out rows
        (flat[:960].view(3, 5, 64), None, fat.poison((5, 3, 40), bf, device).transpose(0, 1), None),  # no row view: refused
    ]
    for x, bias, out, want in cases:
        for _ in range(2):
            calls.clear()
            o = None if out is None else out.fill_(float("nan"))
            if want is None:
                with pytest.raises(ValueError, match="viewable"):
                    kernel.linear_gelu(x, w, bias, out=o)
                continue
            kernel._COMPILED.clear()  # a cached launch bypasses kernel[grid], and so the spy
            got = kernel.linear_gelu(x, w, bias, out=o)
            assert got is o or o is None
            assert calls == [want], (tuple(x.shape), x.stride(), calls)
            fat.assert_close(got, ref.linear_gelu(x, w, bias), *fat.tol("gemm", bf))
    x0 = fat.randn([2, 3, 0], bf, device, g)
    for bias in (b, None):
        got = kernel.linear_gelu(x0, fat.randn([40, 0], bf, device, g), bias)
        fat.assert_close(got, ref.linear_gelu(x0, torch.zeros(40, 0, dtype=bf, device=device), bias), 1e-2, 1e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_erf_gelu_dense_grid(device):
    """The epilogue's erf GELU (A&S 7.1.26 with an rsqrt reciprocal) against float64 F.gelu
    over a dense grid and the special values: a wrong coefficient or sign fails it."""
    grid, special = torch.linspace(-10, 10, 4001), torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0])
    x = torch.cat([grid, special])
    n = x.numel()
    if device == "cpu":
        # y = gelu(a @ I^T): the grid in every column of 501 rows of 8 (an eighth of the
        # interpreter's row tiles; the last padded with zeros), then one row per special value
        # in column 0 (its other columns, inf * 0, are not read)
        rows = -(-grid.numel() // 8)
        a = torch.zeros(rows + special.numel(), 8)
        a[:rows].view(-1)[:grid.numel()] = grid
        a[rows:, 0] = special
        out = kernel.linear_gelu(a.to(device), torch.eye(8).to(device), None, "none").cpu().double()
        y = torch.cat([out[:rows].reshape(-1)[:grid.numel()], out[rows:, 0]])
    else:
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


@pytest.mark.skipif(not fat.INTERPRET, reason="needs TRITON_INTERPRET=1 (the tuning is faked)")
def test_tuning_per_bucket(monkeypatch):
    """The tile is tuned once per bucket of M (a power of two, at least 16), N, K, dtype and
    flags, on a scratch output: the caller's out is untouched until the winner writes it;
    a new M in a tuned bucket times nothing. While the stream captures a CUDA graph, an
    untuned bucket gets the first candidate untimed and stays untuned."""
    timed = []
    state = {"out": None}

    def fake_bench(fn, **kw):
        fn()
        out = state["out"]
        assert out is None or bool(out.isnan().all()), "tuning wrote the caller's output"
        timed.append(kw)
        return float(len(timed) % 3)  # some candidate other than the first wins

    monkeypatch.setattr(kernel, "_GEMM_TUNE", True)
    monkeypatch.setattr(kernel, "_GEMM_TUNED", {})
    monkeypatch.setattr(kernel, "_gemm_time_ms", fake_bench)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    g = fat.gen(9)
    w = fat.randn([48, 72], torch.bfloat16, "cpu", g, std=0.1)
    b = fat.randn([48], torch.bfloat16, "cpu", g)

    def call(m):
        x = fat.randn([m, 72], torch.bfloat16, "cpu", g)
        out = state["out"] = fat.poison((m, 48), torch.bfloat16, "cpu")
        kernel.linear_gelu(x, w, b, out=out)
        state["out"] = None
        fat.assert_close(out, ref.linear_gelu(x, w, b), *fat.tol("gemm", torch.bfloat16))

    cands = kernel._gemm_candidates(32, 72, 2) + [kernel.GEMM_LIBRARY]  # a contiguous out: cuBLAS competes
    assert len(cands) > 2 and all(t[2] <= 128 for t in cands)
    call(17)
    assert len(timed) == len(cands)
    assert len(kernel._GEMM_TUNED) == 1
    (key, tile), = kernel._GEMM_TUNED.items()
    assert key[1] == 32 and tile in cands and tile != cands[0]
    call(32)  # same bucket
    assert len(timed) == len(cands)
    call(33)  # bucket 64
    assert len(timed) == len(cands) + len(kernel._gemm_candidates(64, 72, 2)) + 1
    n = len(timed)
    call(1)   # bucket 16 ...
    call(16)  # ... the same
    assert len(kernel._GEMM_TUNED) == 3 and len(timed) > n
    n = len(timed)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    call(100)  # bucket 128, untuned, while "capturing": no timing, not kept
    assert len(timed) == n and len(kernel._GEMM_TUNED) == 3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("has_bias", [True, False])
@pytest.mark.parametrize("approx", ["none", "tanh"])
def test_library_path(monkeypatch, device, has_bias, approx):
    """Where the library path wins the bucket's timing, cuBLAS (ATen's addmm) writes the
    pre-activation and _gelu_fwd_kernel the output: y (in place over the GEMM's output) and,
    for training, the saved pre-activation are eager's, on a 3-D x whose rows span several
    tiles of the pass; LinearGELUFunction's gradients too. An out= that is not contiguous
    rows keeps the library path out of the timing (ATen's out= would copy)."""
    timed = []

    def fake_bench(fn, **kw):
        fn()
        timed.append(fn)
        return 0.0 if len(timed) % n_cands == 0 else 1.0  # each round's last candidate, the library path, wins

    monkeypatch.setattr(kernel, "_GEMM_TUNE", True)
    monkeypatch.setattr(kernel, "_GEMM_HOST", False)  # the GPU-time choice only (no eager-use timings)
    monkeypatch.setattr(kernel, "_GEMM_TUNED", {})
    monkeypatch.setattr(kernel, "_gemm_time_ms", fake_bench)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    g = fat.gen(5)
    dt = torch.bfloat16
    x = fat.randn([3, 13, 72], dt, device, g)
    w = fat.randn([72, 72], dt, device, g, std=0.12)
    b = fat.randn([72], dt, device, g) if has_bias else None
    n_cands = len(kernel._gemm_candidates(64, 72, 2)) + 1
    out = fat.poison((3, 13, 72), dt, device)
    kernel.linear_gelu(x, w, b, approx, out=out)
    assert len(timed) == n_cands
    assert list(kernel._GEMM_TUNED.values()) == [kernel.GEMM_LIBRARY]
    fat.assert_close(out, ref.linear_gelu(x, w, b, approx), *fat.tol("gemm", dt))
    # training: the pre-activation saved, then the gradients through it
    pre = fat.poison((3, 13, 72), dt, device)
    y = kernel.linear_gelu(x, w, b, approx, pre=pre)
    eager_pre = torch.nn.functional.linear(x.float(), w.float(), None if b is None else b.float())
    fat.assert_close(pre, eager_pre.to(dt), *fat.tol("gemm", dt))
    fat.assert_close(y, ref.linear_gelu(x, w, b, approx), *fat.tol("gemm", dt))
    assert [t for t in kernel._GEMM_TUNED.values()] == [kernel.GEMM_LIBRARY] * 2
    # a strided out= (every other column of a wider buffer): the tiles alone are timed
    n = len(timed)
    wide = fat.poison((3, 13, 144), dt, device)
    kernel.linear_gelu(x, w, b, approx, out=wide[..., ::2])
    assert len(timed) - n == n_cands - 1
    fat.assert_close(wide[..., ::2], ref.linear_gelu(x, w, b, approx), *fat.tol("gemm", dt))
    assert bool(wide[..., 1::2].isnan().all())
    # a Linear's parameters require grad: the plain call (no graph) still takes the library
    # path, whose ATen out= would refuse them under grad mode
    wg = w.detach().clone().requires_grad_(True)
    bg = None if b is None else b.detach().clone().requires_grad_(True)
    n = len(timed)
    fat.assert_close(kernel.linear_gelu(x, wg, bg, approx), ref.linear_gelu(x, w, b, approx), *fat.tol("gemm", dt))
    assert len(timed) == n and list(kernel._GEMM_TUNED.values())[0] is kernel.GEMM_LIBRARY


def test_candidates():
    """Decode-size buckets take the small-M tiles (BLOCK_N = 32 among them), others the large
    ones; every candidate fits shared memory (fp32 operands: twice the bytes) and BLOCK_K
    never exceeds K rounded up (at least 32)."""
    small = kernel._gemm_candidates(16, 4096, 2)
    assert small[0] == (16, 32, 256, 4, 4) and all(t in kernel.GEMM_TILES_SMALL_M for t in small)
    assert kernel._gemm_candidates(64, 4096, 2) == small
    large = kernel._gemm_candidates(128, 4096, 2)
    assert large == kernel.GEMM_TILES_LARGE_M
    for bucket in (16, 64, 128, 8192):
        for k in (8, 96, 768, 4096):
            for es in (2, 4):
                for bm, bn, bk, stages, warps in kernel._gemm_candidates(bucket, k, es):
                    assert bk <= max(32, triton.next_power_of_2(k))
                    assert (stages * (bm + bn) * bk + bm * bn) * es <= kernel._GEMM_SMEM
    # the grid: one program per output tile, on axis 0 only (3-D, as _gemm_launch takes it), for any M
    assert kernel._gemm_grid(2**31 - 1, 8, (128, 64, 64, 3, 4)) == (triton.cdiv(2**31 - 1, 128), 1, 1)


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_gpu_relaunch_new_pointers_and_strides():
    """The compiled kernel cached after the first call is right when the next call's pointers,
    strides and M differ (TMA descriptors are rebuilt per call; the pointer kernel gets its
    strides): aligned, row-padded, transposed and fp32 inputs, one after another."""
    g = fat.gen(11)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        w = fat.randn([256, 200], dtype, "cuda", g, std=0.07)
        b = fat.randn([256], dtype, "cuda", g)
        for m in (64, 100, 37, 64):
            for layout in ("plain", "padded", "transposed", "offset"):
                x = fat.randn([m, 200], dtype, "cuda", g)
                if layout == "padded":
                    x = torch.cat([x, torch.zeros(m, 8, dtype=dtype, device="cuda")], 1)[:, :200]
                elif layout == "transposed":
                    x = x.t().contiguous().t()
                elif layout == "offset":
                    x = torch.cat([torch.zeros(8, dtype=dtype, device="cuda"), x.reshape(-1)])[8:].view(m, 200)
                fat.assert_close(kernel.linear_gelu(x, w, b), ref.linear_gelu(x, w, b), *fat.tol("gemm", dtype),
                                 name=f"{dtype} m={m} {layout}")


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_gpu_tuning_after_cuda_graph_capture():
    """A model warmed up at one M, then captured at an M of a bucket never tuned: the capture
    takes the bucket's first candidate untimed (tuning would synchronize and break it) and the
    replays are right; the next plain call tunes the bucket."""
    g = fat.gen(12)
    w = fat.randn([512, 256], torch.bfloat16, "cuda", g, std=0.06)
    b = fat.randn([512], torch.bfloat16, "cuda", g)
    kernel.linear_gelu(fat.randn([2000, 256], torch.bfloat16, "cuda", g), w, b)  # warm-up: tunes bucket 2048

    def tuned(bucket):
        return any(k[1] == bucket and k[2] == 512 and k[3] == 256 for k in kernel._GEMM_TUNED)
    assert tuned(2048) and not tuned(1024)
    x = fat.randn([784, 256], torch.bfloat16, "cuda", g)
    y = torch.empty(784, 512, dtype=torch.bfloat16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
        kernel.linear_gelu(x, w, b, out=y)
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(2):
        y.fill_(float("nan"))
        x.copy_(fat.randn([784, 256], torch.bfloat16, "cuda", g))
        graph.replay()
        torch.cuda.synchronize()
        fat.assert_close(y, ref.linear_gelu(x, w, b), *fat.tol("gemm", torch.bfloat16))
    assert not tuned(1024)
    kernel.linear_gelu(x, w, b)
    assert tuned(1024)


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_gpu_fp32_tf32x3_accuracy():
    """fp32 operands through tf32x3: within fp32 GEMM accuracy of float64 at K = 2048 (eager
    cuBLAS fp32: about 1e-5), far from plain TF32's ~1e-3."""
    g = fat.gen(13)
    x = fat.randn([256, 2048], torch.float32, "cuda", g)
    w = fat.randn([256, 2048], torch.float32, "cuda", g, std=2048 ** -0.5)
    y = kernel.linear_gelu(x, w)
    want = ref.linear_gelu(x.double(), w.double())
    err = (y.double() - want).abs().max().item()
    eager = (ref.linear_gelu(x, w).double() - want).abs().max().item()
    assert err <= max(4 * eager, 2e-5), (err, eager)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("approx", ["none", "tanh"])
def test_library_ops(dtype, approx):
    """bench's library op computes the reference's output where it is offered. On the CPU
    torch._addmm_activation(use_gelu=True) is the erf GELU: an erf case gets "addmm_gelu",
    equal to the reference on 2-D and 3-D inputs, and it is measurably not the tanh GELU (so a
    tanh case is refused on the CPU, as an erf case is on CUDA, where the op is cuBLASLt's
    tanh epilogue); a Linear without a bias is refused."""
    dt = fat.DTYPES[dtype]
    params = {"approximate": approx, "has_bias": True}
    for shapes in ([[33, 70], [45, 70]], [[2, 9, 64], [40, 64]]):
        inputs = adapter.make_inputs(shapes, dt, params, "cpu", 0)
        ops, refused = adapter.library_ops(inputs, params)
        want = adapter.reference(ref, inputs, params)[0]
        if approx == "tanh":
            assert ops == {} and "on cpu is erf" in refused["addmm_gelu"]
            x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
            erf = torch._addmm_activation(b, x.reshape(-1, x.shape[-1]), w.t(), use_gelu=True).view(want.shape)
            assert (erf.float() - want.float()).abs().max() > (1e-6 if dt == torch.float32 else 1e-3)
            continue
        assert refused == {} and set(ops) == {"addmm_gelu"}
        got = ops["addmm_gelu"](inputs)
        assert got.dtype == want.dtype and got.shape == want.shape
        atol, rtol = fat.tol("gemm", dt)
        fat.assert_close(got, want, atol, rtol)
    no_bias = adapter.make_inputs([[4, 8], [3, 8]], dt, {"approximate": approx, "has_bias": False}, "cpu", 0)
    ops, refused = adapter.library_ops(no_bias, {"approximate": approx, "has_bias": False})
    assert ops == {} and "has none" in refused["addmm_gelu"]


def test_library_ops_on_cuda_refuse_erf(monkeypatch):
    """The device decides the GELU: inputs on CUDA offer "addmm_gelu" to a tanh case only
    (the device is faked; nothing runs)."""
    class Fake:
        device = torch.device("cuda")

    for approx, offered in (("tanh", True), ("none", False)):
        ops, refused = adapter.library_ops({"x": Fake(), "weight": Fake(), "bias": Fake()}, {"approximate": approx})
        assert ("addmm_gelu" in ops) is offered
        if not offered:
            assert "on cuda is the tanh approximation" in refused["addmm_gelu"] and "erf" in refused["addmm_gelu"]
