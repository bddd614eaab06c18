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
# the adversarial shapes; the entries about memory (a marker, negative, ends them) run in
# test_memory_cases
SHAPES = [s for s in adapter.ADVERSARIAL if min(s[-1]) >= 0]
MEMORY = [s for s in adapter.ADVERSARIAL if min(s[-1]) < 0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("has_bias", [True, False])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
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
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("programs", [1, 8, 1000])
def test_bias_grad_in_row_groups(device, dtype, programs, monkeypatch):
    """The bias gradient from the backward kernel's partial sums: every row in one program,
    groups of several row tiles with a ragged last one, one tile per program; with an fp32 y
    too (the gradient, and so the sum, in x's type). (In the interpreter 81 rows: six row
    tiles of 16, the last of one row; at 8 programs, three groups of two tiles, the last
    holding the ragged one. 129 on the GPU.) The gradients through the fused pass only:
    adapter.train makes the same NewGELUFunction call (test_grad runs both passes)."""
    monkeypatch.setattr(kernel, "DB_PROGRAMS", programs)
    monkeypatch.delattr(adapter, "train")
    for i, shapes in enumerate(([[81 if device == "cpu" else 129, 70]], [[3, 43, 5]])):
        for out in (None, "fp32"):
            fat.run_grad_case(kernel, ref, adapter, shapes, dtype, {"has_bias": True, "out_dtype": out}, device, 30 + i)


@pytest.mark.parametrize("device", DEVICES)
def test_module(device):
    x = torch.randn(3, 4, device=device)
    fat.assert_close(kernel.NewGELU()(x), ref.new_gelu(x), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_module_under_autocast(device, monkeypatch):
    """Under autocast the module returns eager's type: fp32 for a bf16 x where autocast runs
    pow in fp32 (CUDA; checked on the CPU with its autocast made to count as CUDA's), x's
    where it does not; NewGELU(torch.bfloat16) returns bf16 either way (the cast a GEMM
    reading y would make), and its gradient arrives in bf16."""
    g = fat.gen(5)
    x = fat.randn([4, 37], torch.bfloat16, device, g, std=2.0).requires_grad_(True)

    def check(want):
        with torch.autocast(device, dtype=torch.bfloat16):
            y = kernel.NewGELU()(x)
            y16 = kernel.NewGELU(torch.bfloat16)(x)
        assert y.dtype == want and y16.dtype == torch.bfloat16
        eager = ref.new_gelu(x.float())
        fat.assert_close(y, eager.to(want), *fat.tol("pointwise", want))
        fat.assert_close(y16, eager.to(torch.bfloat16), *fat.tol("pointwise", torch.bfloat16))
        dy = fat.randn([4, 37], torch.bfloat16, device, g)
        (dx,) = torch.autograd.grad(y16, x, dy)
        (want_dx,) = torch.autograd.grad(eager, x, dy.float())
        fat.assert_close(dx, want_dx.to(torch.bfloat16), *fat.tol("pointwise", torch.bfloat16))

    check(torch.float32 if device == "cuda" else torch.bfloat16)
    if device == "cpu":
        monkeypatch.setattr(kernel, "_AUTOCAST_FP32_POW", {"cpu"})
        check(torch.float32)
    # outside autocast NewGELU(torch.bfloat16) returns eager's type: an fp32 x's fp32 y, which
    # an fp32 Linear reads
    xf = x.detach().float()
    y = kernel.NewGELU(torch.bfloat16)(xf)
    assert y.dtype == torch.float32
    fat.assert_close(y, ref.new_gelu(xf), *fat.tol("pointwise", torch.float32))


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


def test_tanh_only():
    # the pattern is the tanh GELU: the kernel carries no other branch (no code its wrapper
    # never runs)
    src = pathlib.Path(kernel.__file__).read_text()
    assert "erf" not in src and "APPROX" not in src


# --- in place, overlaps, grids, 64-bit offsets -------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_in_place(device, dtype):
    dt = fat.DTYPES[dtype]
    g = fat.gen(21)
    for x in (fat.randn([37, 150], dt, device, g, std=2.0), fat.randn([150, 37], dt, device, g, std=2.0).t()):
        b = fat.randn([x.shape[-1]], dt, device, g)
        want = ref.new_gelu(x.clone(), b)
        assert kernel.new_gelu(x, b, out=x) is x
        fat.assert_close(x, want, *fat.tol("pointwise", dt))


@pytest.mark.parametrize("device", DEVICES)
def test_overlap_refused(device):
    buf = torch.randn(2, 40, 64, device=device)
    x = buf[0]
    flat = buf.view(-1)
    for out in (flat[64:64 + 2560].view(40, 64), flat[1:2561].view(40, 64), flat[:2560].view(64, 40).t()):
        with pytest.raises(ValueError, match="shares memory with x"):
            kernel.new_gelu(x, out=out)
    both = torch.zeros(40 * 64 + 64, device=device)
    with pytest.raises(ValueError, match="shares memory with bias"):
        kernel.new_gelu(x, both[:64], out=both[32:32 + 2560].view(40, 64))
    xb = x.bfloat16()
    with pytest.raises(ValueError, match="wrong shape, dtype"):
        kernel.new_gelu(xb, out=xb, dtype=torch.float32)  # y fp32: not in place over bf16 x
    fat.assert_close(kernel.new_gelu(x, out=buf[1]), ref.new_gelu(x), 1e-5, 1e-5)
    with pytest.raises(ValueError, match="share memory"):  # an expanded out: rows on one row of memory
        kernel.new_gelu(x, out=torch.empty(64, device=device).expand(40, 64))


def _launches(monkeypatch, fn):
    """The (kernel, grid, constexprs, args) of every launch fn makes, no kernel run."""
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
    # grid axes 1 and 2 hold at most 65535 programs, axis 0 2**31 - 1 (meta tensors: no kernel runs)
    x = torch.empty(shape, dtype=torch.bfloat16, device="meta", requires_grad=True)
    b = torch.empty(shape[-1], dtype=torch.bfloat16, device="meta", requires_grad=True)
    M, N = x.numel() // shape[-1], shape[-1]

    def run():
        y = kernel.NewGELUFunction.apply(x, b, torch.float32)
        y.backward(torch.empty_like(y))

    calls = _launches(monkeypatch, run)
    assert [k for k, *_ in calls] == [kernel._new_gelu_fwd, kernel._new_gelu_bwd, kernel._sum_parts]
    assert calls[2][1][1:] in ((), (1,), (1, 1)) and calls[2][1][0] <= 2**31 - 1  # one bias gradient on axis 0
    for k, grid, c, args in calls[:2]:
        assert tuple(args[3:5] if k is kernel._new_gelu_fwd else args[5:7]) == (M, N)
        bm, bn = c["BLOCK_M"], c["BLOCK_N"]
        tiles_n = (N + bn - 1) // bn
        if k is kernel._new_gelu_fwd:
            assert grid == ((M + bm - 1) // bm * tiles_n,) and grid[0] <= 2**31 - 1
        else:  # the bias gradient's programs: groups of whole row tiles covering M, per column block
            assert c["HAS_DB"]
            rows, groups = args[7], grid[0] // tiles_n
            assert grid == (groups * tiles_n,) and rows % bm == 0 and (groups - 1) * rows < M <= groups * rows
            assert grid[0] <= 2 * kernel.DB_PROGRAMS + tiles_n


def _aten_ops(fn):
    """The ATen ops fn runs: (name of the overload packet, elements of its first argument)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            a = args[0] if args and isinstance(args[0], torch.Tensor) else None
            ops.append((func.overloadpacket.__name__, None if a is None else a.numel()))
            return func(*args, **(kwargs or {}))

    ops = []
    with Log():
        fn()
    return ops


@pytest.mark.parametrize("has_bias", [False, True])
def test_backward_of_fp32_output_is_one_pass(monkeypatch, has_bias):
    # autocast's bf16 x -> fp32 y: the backward kernel writes dx in x's type itself (read dy and
    # x, write dx), no fp32 [M, N] gradient cast afterwards; with a bias, the kernel's partial
    # sums added up by _sum_parts in the bias' type (no ATen sum, no cast)
    x = torch.empty(64, 3072, dtype=torch.bfloat16, device="meta", requires_grad=True)
    b = torch.empty(3072, dtype=torch.bfloat16, device="meta", requires_grad=True) if has_bias else None
    calls = _launches(monkeypatch, lambda: None)
    y = kernel.NewGELUFunction.apply(x, b, torch.float32)
    assert y.dtype == torch.float32
    dy = torch.empty_like(y)
    calls.clear()
    grads = []
    ops = _aten_ops(lambda: grads.extend(torch.autograd.grad(y, [x] if b is None else [x, b], dy)))
    (k, _, c, args), *sums = calls
    assert k is kernel._new_gelu_bwd and args[3].dtype == torch.bfloat16 and c["HAS_DB"] == has_bias
    assert [s[0] for s in sums] == [kernel._sum_parts] * has_bias
    if has_bias:  # the kernel's partial sums (args[4]) into the bias gradient, in its type
        assert sums[0][3][0] is args[4] and sums[0][3][1] is grads[1] and grads[1].dtype == torch.bfloat16
    assert not [op for op, n in ops if op in ("sum", "_to_copy")], ops
    assert grads[0].dtype == torch.bfloat16 and grads[0].data_ptr() == args[3].data_ptr()
    assert not [op for op, n in ops if op in ("_to_copy", "copy_") and n == x.numel()], ops
    assert not has_bias or args[4].numel() < x.numel()  # partial sums, never dx's x.numel() terms


def test_tiles_independent_of_rows(monkeypatch, tiles_of):
    # a new number of rows (batch, sequence length) runs the kernel compiled for another: the
    # same constexprs and warps at every M (and M is not specialized: do_not_specialize), so a
    # CUDA graph captured at an M never run before needs no compilation
    seen = set()
    for M in (1, 2, 16, 17, 3000, 2**20):
        x = torch.empty(M, 768, dtype=torch.bfloat16, device="meta")
        b = torch.empty(768, dtype=torch.bfloat16, device="meta")
        calls = _launches(monkeypatch, lambda: kernel.new_gelu(x, b))
        assert len(calls) == 1
        seen.add(tuple(sorted(calls[0][2].items())))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [[3, 700], [40, 200], [2100]], ids=str)
def test_many_column_tiles(device, shape):
    g = fat.gen(5)
    x = fat.randn(shape, torch.float32, device, g, std=2.0)
    b = fat.randn([shape[-1]], torch.float32, device, g)
    fat.assert_close(kernel.new_gelu(x, b, out=fat.poison(x.shape, x.dtype, device)), ref.new_gelu(x, b), 1e-5, 1e-5)


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not pathlib.Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("marker", [adapter.WIDE_ROWS, adapter.WIDE_COLS], ids=["rows", "cols"])
def test_offsets_past_2_31(device, marker):
    # x in a lazily allocated storage of 2**32 fp16 elements, row (column) 2 at 2**31 + 128
    before = _rss_mb()
    shapes = [[3, 67] if marker == adapter.WIDE_ROWS else [67, 3], marker]
    x = adapter.make_inputs(shapes, torch.float16, {}, device, 3)["x"]
    assert x.untyped_storage().nbytes() > 2**33 and max(x.stride()) * 2 > 2**31
    for has_bias in (True, False):
        fat.run_case(kernel, ref, adapter, shapes, "fp16", {"has_bias": has_bias}, device, 3)
    if device == "cpu":
        assert _rss_mb() - before < 256, "the test committed the wide storage"


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
    # want: F.gelu(tanh) of the bf16 x + b, which rounds once as the kernel does (the op chain
    # rounds after every op: over billions of elements some would differ by more than 1e-2)
    g = torch.Generator(device="cuda").manual_seed(0)
    tol = fat.tol("pointwise", torch.bfloat16)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)

    def want(x, b=None):
        return F.gelu(x if b is None else x + b, approximate="tanh")

    x = randn(1, 2**26)  # 1-D-like: 65536 column blocks of 1024
    _close_on_gpu(kernel.new_gelu(x), want(x), *tol)
    x, b = randn(4096, 3000), randn(3000)
    w = want(x, b)
    kernel.new_gelu(x, b, out=x)  # in place on the first call of a shape
    _close_on_gpu(x, w, *tol)
    b = randn(4096)
    for x in (randn(4096, 600000).t(), randn(600000, 4096)):  # offsets past 2**31
        _close_on_gpu(kernel.new_gelu(x, b), want(x, b), *tol)
        del x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", MEMORY, ids=str)
def test_memory_cases(device, shapes):
    # offsets past 2**31, in place and the refusals, as the verifier runs them
    fat.run_case(kernel, ref, adapter, shapes, "bf16", {"has_bias": True}, device, 1)
