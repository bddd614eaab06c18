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
# the adversarial shapes; the entries about memory (a marker, negative, ends them) run in
# test_memory_cases
SHAPES = [s for s in adapter.ADVERSARIAL if min(s[-1]) >= 0]
MEMORY = [s for s in adapter.ADVERSARIAL if min(s[-1]) < 0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
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
    # the interpreter: the 20004 values as 12 rows of 1667 (27 programs; one row takes 313)
    rows = 12 if device == "cpu" else 1
    got = kernel.bias_gelu(x32.to(device).view(rows, -1)).double().cpu().view(-1)
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
@pytest.mark.parametrize("layout", ["transposed", "1d", "fp32_x_bf16_bias"])
def test_grad_layouts(device, layout):
    """The backward's paths beside the contiguous one: x and dy read through their strides,
    a 1-D x (the bias gradient is dz itself), and a bias of another dtype than dz."""
    g = fat.gen(7)
    if layout == "transposed":
        x, b, dy = fat.randn([70, 5], torch.float32, device, g).t(), fat.randn([70], torch.float32, device, g), \
            fat.randn([70, 5], torch.float32, device, g).t()
    elif layout == "1d":
        x, b, dy = (fat.randn([70], torch.float32, device, g) for _ in range(3))
    else:
        x, b = fat.randn([3, 70], torch.float32, device, g), fat.randn([70], torch.bfloat16, device, g)
        dy = fat.randn([3, 70], torch.float32, device, g)
    got = [t.detach().clone().requires_grad_(True) for t in (x, b)]
    want = [t.detach().clone().requires_grad_(True) for t in (x, b)]
    gx, gb = torch.autograd.grad(kernel.BiasGELUFunction.apply(*got, "tanh"), got, dy)
    wx, wb = torch.autograd.grad(torch.nn.functional.gelu(want[0] + want[1], approximate="tanh"), want, dy)
    assert gb.dtype == b.dtype and gx.shape == x.shape
    fat.assert_close(gx, wx, 1e-5, 1e-5, name="dx")
    fat.assert_close(gb, wb, *((1e-5, 1e-5) if b.dtype == torch.float32 else (1e-2, 1e-2)), name="dbias")


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


# --- in place, overlaps, grids, 64-bit offsets -------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_in_place(device, dtype, approximate):
    # out=x: each program reads its tile of x before writing it; with several tiles per row
    # and per column, and a transposed x
    dt = fat.DTYPES[dtype]
    g = fat.gen(21)
    for x in (fat.randn([37, 150], dt, device, g, std=2.0), fat.randn([150, 37], dt, device, g, std=2.0).t()):
        b = fat.randn([x.shape[-1]], dt, device, g)
        want = ref.bias_gelu(x.clone(), b, approximate)
        y = kernel.bias_gelu(x, b, approximate, out=x)
        assert y is x
        fat.assert_close(x, want, *fat.tol("pointwise", dt))


@pytest.mark.parametrize("device", DEVICES)
def test_overlap_refused(device):
    buf = torch.randn(2, 40, 64, device=device)
    x, b = buf[0], torch.randn(64, device=device)
    flat = buf.view(-1)
    for out in (flat[64:64 + 2560].view(40, 64),  # x shifted by a row
                flat[1:2561].view(40, 64),  # by an element
                flat[:2560].view(64, 40).t()):  # x's bytes in another layout
        with pytest.raises(ValueError, match="shares memory with x"):
            kernel.bias_gelu(x, b, out=out)
    both = torch.zeros(40 * 64 + 64, device=device)
    with pytest.raises(ValueError, match="shares memory with bias"):
        kernel.bias_gelu(x, both[:64], out=both[32:32 + 2560].view(40, 64))
    with pytest.raises(ValueError, match="wrong shape, dtype"):
        kernel.bias_gelu(x.half(), b, out=x.half())  # y is fp32 (promoted with the bias)
    y = kernel.bias_gelu(x, b, out=buf[1])  # the other half of the buffer: no overlap
    fat.assert_close(y, ref.bias_gelu(x, b), 1e-5, 1e-5)
    with pytest.raises(ValueError, match="share memory"):  # an expanded out: rows on one row of memory
        kernel.bias_gelu(x, b, out=torch.empty(64, device=device).expand(40, 64))


def _launches(monkeypatch, fn):
    """The (kernel, grid, constexprs) of every launch fn makes, no kernel run (_launch stubbed)."""
    calls = []
    monkeypatch.setattr(kernel, "_launch", lambda k, grid, args, num_warps=4, num_stages=1, **c:
                        calls.append((k, grid, dict(c, num_warps=num_warps), args)))
    fn()
    return calls


@pytest.fixture(params=[True, False], ids=["interpreter-tiles", "gpu-tiles"])
def tiles_of(request, monkeypatch):
    """Runs the test with the interpreter's tiles and with the GPU's (kernel.INTERPRET flipped)."""
    monkeypatch.setattr(kernel, "INTERPRET", request.param)
    kernel._tiles.cache_clear()
    yield request.param
    kernel._tiles.cache_clear()


@pytest.mark.parametrize("shape", [[4194368], [1, 2**26], [2**26, 1], [3, 5, 2**24 + 1]], ids=str)
def test_grid_of_huge_shapes(monkeypatch, tiles_of, shape):
    # CUDA: grid axes 1 and 2 hold at most 65535 programs, axis 0 2**31 - 1. Meta tensors: the
    # wrappers run, no kernel does.
    x = torch.empty(shape, dtype=torch.bfloat16, device="meta", requires_grad=True)
    b = torch.empty(shape[-1], dtype=torch.bfloat16, device="meta", requires_grad=True)
    M, N = (x.numel() // shape[-1], shape[-1])

    def run():
        y = kernel.BiasGELUFunction.apply(x, b, "tanh")
        y.backward(torch.empty_like(y))

    calls = _launches(monkeypatch, run)
    assert [k for k, *_ in calls] == [kernel._bias_gelu_fwd, kernel._bias_gelu_bwd]
    for k, grid, c, args in calls:
        assert tuple(args[3:5] if k is kernel._bias_gelu_fwd else args[4:6]) == (M, N)
        bm, bn = c["BLOCK_M"], c["BLOCK_N"]
        assert grid == ((M + bm - 1) // bm * ((N + bn - 1) // bn),), grid
        assert grid[0] <= 2**31 - 1
        assert bn & (bn - 1) == 0 and bm & (bm - 1) == 0
        if not tiles_of:
            assert bm * bn == 2048  # 4 KB of bf16 per tile


def test_tiles_independent_of_rows(monkeypatch, tiles_of):
    # a new number of rows (batch, sequence length) runs the kernel compiled for another: the
    # same constexprs and warps at every M (and M is not specialized: do_not_specialize), so a
    # CUDA graph captured at an M never run before needs no compilation
    seen = set()
    for M in (1, 2, 16, 17, 3000, 2**20):
        x = torch.empty(M, 768, dtype=torch.bfloat16, device="meta")
        b = torch.empty(768, dtype=torch.bfloat16, device="meta")
        calls = _launches(monkeypatch, lambda: kernel.bias_gelu(x, b))
        assert len(calls) == 1
        seen.add(tuple(sorted(calls[0][2].items())))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [[3, 700], [40, 200], [2100]], ids=str)
def test_many_column_tiles(device, shape):
    # several column tiles per row block (and several row blocks): the 1-D grid's split into
    # row and column blocks
    g = fat.gen(5)
    x = fat.randn(shape, torch.float32, device, g, std=2.0)
    b = fat.randn([shape[-1]], torch.float32, device, g)
    for approximate in ("none", "tanh"):
        fat.assert_close(kernel.bias_gelu(x, b, approximate, out=fat.poison(x.shape, x.dtype, device)),
                         ref.bias_gelu(x, b, approximate), 1e-5, 1e-5)


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not pathlib.Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("marker", [adapter.WIDE_ROWS, adapter.WIDE_COLS], ids=["rows", "cols"])
def test_offsets_past_2_31(device, marker):
    # x is a view into a storage of 2**32 elements (8 GiB of bf16 address space, committed
    # only where written) whose row (column) 2 starts 2**31 + 128 elements in: offsets in
    # 32 bits would wrap onto the storage's NaN start. The test stays small and quick.
    before = _rss_mb()
    inputs = adapter.make_inputs([[3, 67] if marker == adapter.WIDE_ROWS else [67, 3], marker],
                                 torch.bfloat16, {"has_bias": True}, device, 3)
    x = inputs["x"]
    assert x.untyped_storage().nbytes() > 2**33 and max(x.stride()) * 2 > 2**31
    fat.run_case(kernel, ref, adapter, [list(x.shape), marker], "bf16", {"approximate": "none"}, device, 3)
    y = kernel.bias_gelu(x, inputs["bias"], "tanh", out=x)  # in place, at those offsets too
    assert not torch.isnan(y).any()
    if device == "cpu":
        assert _rss_mb() - before < 256, "the test committed the wide storage"


# --- the repros, at full size (GPU) ---------------------------------------------------------


def _close_on_gpu(got, want, atol, rtol, rows=1 << 14):
    """assert_close for tensors too large to copy to the CPU in float64: row chunks on the GPU."""
    g2, w2 = got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])
    for i in range(0, g2.shape[0], rows):
        a, w = g2[i:i + rows].float(), w2[i:i + rows].float()
        bad = ((a - w).abs() > atol + rtol * w.abs()) | (torch.isnan(a) != torch.isnan(w))
        if bool(bad.any()):
            j = bad.nonzero()[0].tolist()
            raise AssertionError(f"{int(bad.sum())} elements differ in rows {i}..; first at {j}: "
                                 f"got {a[tuple(j)].item()}, want {w[tuple(j)].item()}")


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_gpu_repros():
    g = torch.Generator(device="cuda").manual_seed(0)
    tol = fat.tol("pointwise", torch.bfloat16)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)

    # 1-D of 4,194,368 elements: 65537 column blocks of 64 on grid axis 1 before
    x, b = randn(4194368), randn(4194368)
    _close_on_gpu(kernel.bias_gelu(x, b).view(1, -1), ref.bias_gelu(x, b).view(1, -1), *tol)
    # in place on the first call of a shape (the autotuner ran configs on the caller's buffer)
    x, b = randn(4096, 3000), randn(3000)
    want = ref.bias_gelu(x, b)
    kernel.bias_gelu(x, b, out=x)
    _close_on_gpu(x, want, *tol)
    # [600000, 4096] bf16, transposed (column * stride passes 2**31) and not (row * stride)
    b = randn(4096)
    for x in (randn(4096, 600000).t(), randn(600000, 4096)):
        _close_on_gpu(kernel.bias_gelu(x, b, "tanh"), ref.bias_gelu(x, b, "tanh"), *tol)
        del x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", MEMORY, ids=str)
def test_memory_cases(device, shapes):
    # offsets past 2**31, in place and the refusals, as the verifier runs them
    fat.run_case(kernel, ref, adapter, shapes, "bf16", {"approximate": "tanh", "has_bias": True}, device, 1)


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_gpu_graph_capture_at_new_rows():
    # a CUDA graph captured at an M never run before (1, 16, 17: M == 1 and M % 16 == 0 are
    # what Triton specializes ints on) replays right: no compilation inside the capture, where
    # loading a module is not allowed. One warm-up at another M, as PyTorch asks before a capture.
    g = torch.Generator(device="cuda").manual_seed(1)
    n, dt = 1000, torch.float16
    b = torch.randn(n, device="cuda", dtype=dt, generator=g)
    kernel.bias_gelu(torch.randn(4096, n, device="cuda", dtype=dt, generator=g), b, "tanh")
    torch.cuda.synchronize()
    for m in (1, 16, 17, 3000):
        x = torch.randn(m, n, device="cuda", dtype=dt, generator=g)
        y = torch.empty_like(x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kernel.bias_gelu(x, b, "tanh", out=y)
        x.copy_(torch.randn(m, n, device="cuda", dtype=dt, generator=g))
        graph.replay()
        torch.cuda.synchronize()
        _close_on_gpu(y, ref.bias_gelu(x, b, "tanh"), *fat.tol("pointwise", dt))
