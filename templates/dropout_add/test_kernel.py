"""Tests for the dropout_add template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

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
@pytest.mark.parametrize("p", [0.0, 0.3])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_forward(device, dtype, p, shapes):
    for seed in fat.seeds(2 if p == 0 else 1):  # tl.rand is slow in the interpreter
        fat.run_case(kernel, ref, adapter, shapes, dtype, {"p": p, "has_bias": True}, device, seed)


@pytest.mark.parametrize("device", DEVICES)
def test_no_bias(device):
    fat.run_case(kernel, ref, adapter, [[5, 70]], "fp32", {"p": 0.2, "has_bias": False}, device, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_mask_statistics(device):
    p = 0.25
    k1 = kernel.dropout_mask((32, 256), p, 7, device)
    k2 = kernel.dropout_mask((32, 256), p, 7, device)
    k3 = kernel.dropout_mask((32, 256), p, 8, device)
    kept = k1.float().mean().item()
    # 8192 Bernoulli(0.75) draws: std 0.0048; 5 sigma
    assert abs(kept - (1 - p)) < 0.024, kept
    assert torch.equal(k1, k2), "same seed, different mask"
    assert (k1 != k3).float().mean().item() > 0.2, "different seeds, same mask"
    # the kernel's output really has that mask: dropped elements equal the residual
    x = torch.randn(32, 256, device=device) + 3.0
    r = torch.randn(32, 256, device=device)
    y = kernel.dropout_add(x, r, None, p, 7)
    assert torch.equal(y[~k1], r[~k1])
    fat.assert_close(y[k1], r[k1] + x[k1] / (1 - p), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_eval_and_non_contiguous(device):
    g = fat.gen(1)
    x = fat.randn([40, 33], torch.float32, device, g).t()
    r = fat.randn([33, 40], torch.float32, device, g)
    b = fat.randn([40], torch.float32, device, g)
    y = kernel.dropout_add(x, r, b, 0.5, 3, training=False, out=fat.poison(x.shape, x.dtype, device))
    fat.assert_close(y, ref.dropout_add(x, r, b, 0.5, training=False), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_inf(device):
    x = torch.tensor([[float("nan"), float("inf"), -float("inf"), 1.0]], device=device)
    r = torch.tensor([[1.0, -float("inf"), 2.0, float("nan")]], device=device)
    fat.assert_close(kernel.dropout_add(x, r), ref.dropout_add(x, r), 0, 0)


def _fused_grad_case(shapes, dtype, params, device, seed):
    """fat.run_grad_case without its second pass through adapter.train: here that pass makes
    the first pass's call (adapter.fused(autograd=True) and adapter.train both call
    DropoutAddFunction.apply(x, residual, bias, p, seed, True)) again with another dy, the same
    launches. test_grad runs both passes."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delattr(adapter, "train")
        fat.run_grad_case(kernel, ref, adapter, shapes, dtype, params, device, seed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("p", [0.0, 0.4])
def test_grad(device, dtype, p):
    fat.run_grad_case(kernel, ref, adapter, [[3, 5, 66]], dtype, {"p": p, "has_bias": True}, device, 5)


def test_module():
    m = kernel.DropoutAdd(0.5)
    m.eval()
    x, r = torch.randn(3, 4), torch.randn(3, 4)
    if fat.INTERPRET:
        fat.assert_close(m(x, r), x + r, 1e-6, 1e-6)
    with pytest.raises(ValueError):
        kernel.DropoutAdd(1.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_fp32_residual(device, dtype):
    """Autocast's residual stream: x (and the bias) in 16 bits, the residual in fp32, y fp32."""
    params = {"p": 0.3, "has_bias": True, "residual_dtype": "fp32"}
    inputs = adapter.make_inputs([[33, 70]], fat.DTYPES[dtype], params, device, 0)
    assert inputs["residual"].dtype == torch.float32
    y = adapter.fused(kernel, inputs, params, poison=True)[0]
    assert y.dtype == torch.float32
    for shapes in ([[33, 70]], [[2, 3, 129]]):
        fat.run_case(kernel, ref, adapter, shapes, dtype, params, device, 1)
    assert adapter.nbytes([[4, 8]], fat.DTYPES[dtype], params) == 32 * (2 + 4 + 4) + 8 * 2


@pytest.mark.parametrize("device", DEVICES)
def test_mask_independent_of_tiles(device, monkeypatch):
    # the keep-mask is a function of (seed, row, column): every tile choice, the forward, the
    # backward and dropout_mask agree
    shape, p, seed = (2, 75), 0.3, 11
    g = fat.gen(4)
    x, r, dy = (fat.randn(shape, torch.float32, device, g) for _ in range(3))
    b = fat.randn([shape[-1]], torch.float32, device, g)
    got = []
    for tile in [(16, 64, 4), (1, 8, 1), (4, 128, 4), (2, 256, 4), (8, 32, 2)]:
        monkeypatch.setattr(kernel, "_tiles", lambda N, es, min_bn=1, t=tile: t)
        keep = kernel.dropout_mask(shape, p, seed, device)
        y = kernel.dropout_add(x, r, b, p, seed)
        xg = x.clone().requires_grad_(True)
        kernel.DropoutAddFunction.apply(xg, r, b, p, seed, True).backward(dy)
        got.append((tile, keep, y, xg.grad))
    _, keep0, y0, dx0 = got[0]
    assert 0.6 < keep0.float().mean().item() < 0.8
    fat.assert_close(y0, ref.dropout_add(x, r, b, p, keep=keep0), 1e-5, 1e-5)
    fat.assert_close(dx0, dy * keep0 / (1 - p), 1e-5, 1e-5)
    for tile, keep, y, dx in got[1:]:
        assert torch.equal(keep, keep0), f"tiles {tile}: another mask"
        assert torch.equal(y, y0), f"tiles {tile}: another output"
        assert torch.equal(dx, dx0), f"tiles {tile}: another gradient"


# --- the seed: an int, a device tensor, or None (drawn on the device per call) ---------------


def _inputs(device, shape=(24, 72), seed=61):
    """x (mean 3: x + b is never 0, so a dropped element gives y == residual exactly and a
    kept one does not), the residual, a small bias and dy, fp32."""
    g = fat.gen(seed)
    x = fat.randn(shape, torch.float32, device, g, mean=3.0)
    r = fat.randn(shape, torch.float32, device, g)
    b = fat.randn([shape[-1]], torch.float32, device, g, std=0.1)
    dy = fat.randn(shape, torch.float32, device, g)
    return x, r, b, dy


def _assert_rate(keep, p):
    # n Bernoulli(1 - p) draws: 6 standard deviations
    n = keep.numel()
    assert abs(keep.float().mean().item() - (1 - p)) < 6 * ((p * (1 - p) / n) ** 0.5), keep.float().mean().item()


@pytest.mark.parametrize("device", DEVICES)
def test_seed_tensor_same_mask_as_int(device):
    # a seed tensor (read by the kernels on the device) and the same value as an int give the
    # same mask, the output and dropout_mask alike; values past 2**32 use Philox's second key word
    x, r, b, _ = _inputs(device)
    p = 0.3
    for value in (5, 2**40 + 12345, 2**63 - 2):
        t = torch.tensor([value], dtype=torch.int64, device=device)
        keep = kernel.dropout_mask(x.shape, p, t, device)
        assert torch.equal(keep, kernel.dropout_mask(x.shape, p, value, device)), value
        _assert_rate(keep, p)
        y = kernel.dropout_add(x, r, b, p, t)
        assert torch.equal(y, kernel.dropout_add(x, r, b, p, value)), value
        fat.assert_close(y, ref.dropout_add(x, r, b, p, keep=keep), 1e-5, 1e-5)
    t2 = torch.tensor([2**40 + 12345 + 2**32], dtype=torch.int64, device=device)  # another high word
    assert (kernel.dropout_mask(x.shape, p, t2, device) != keep).float().mean().item() > 0.2


@pytest.mark.parametrize("device", DEVICES)
def test_seed_none_draws_on_the_device(device):
    # seed=None draws a seed tensor on x's device for every call (device_seed, torch.randint on
    # the device's generator): two calls differ; each is the reference under the seed that
    # torch.manual_seed reproduces
    x, r, b, _ = _inputs(device)
    p = 0.3
    torch.manual_seed(123)
    y1 = kernel.dropout_add(x, r, b, p)
    y2 = kernel.dropout_add(x, r, b, p)
    torch.manual_seed(123)
    s1, s2 = kernel.device_seed(device), kernel.device_seed(device)
    assert s1.dtype == torch.int64 and s1.shape == (1,) and s1.device == x.device
    for y, s in ((y1, s1), (y2, s2)):
        keep = kernel.dropout_mask(x.shape, p, s, device)
        _assert_rate(keep, p)
        assert torch.equal(y != r, keep), "dropped elements are not those of the drawn seed"
        fat.assert_close(y, ref.dropout_add(x, r, b, p, keep=keep), 1e-5, 1e-5)
    assert ((y1 != r) != (y2 != r)).float().mean().item() > 0.2, "two calls drew the same mask"
    # the module draws its seed the same way
    m = kernel.DropoutAdd(p)
    k1, k2 = m(x, r, b) != r, m(x, r, b) != r
    _assert_rate(k1, p)
    assert (k1 != k2).float().mean().item() > 0.2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("how", ["none", "tensor", "int"])
def test_backward_regenerates_the_forward_mask(device, how):
    # the backward regenerates the forward's mask from the seed it saved (tensor or int):
    # dx is zero exactly where y == residual (dropped), and both are the drawn seed's mask
    x, r, b, dy = _inputs(device)
    p = 0.35
    torch.manual_seed(7)  # the seed that seed=None draws in the forward, reproduced
    keep = kernel.dropout_mask(x.shape, p, 991 if how == "int" else kernel.device_seed(device), device)
    torch.manual_seed(7)
    seed = None if how == "none" else kernel.device_seed(device) if how == "tensor" else 991
    xg, bg = x.clone().requires_grad_(True), b.clone().requires_grad_(True)
    y = kernel.DropoutAddFunction.apply(xg, r, bg, p, seed, True)
    dx, db = torch.autograd.grad(y, (xg, bg), dy)
    assert torch.equal(y.detach() != r, keep), "forward: not the seed's mask"
    assert torch.equal(dx != 0, keep), "backward: another mask than the forward's"
    fat.assert_close(y, ref.dropout_add(x, r, b, p, keep=keep), 1e-5, 1e-5)
    fat.assert_close(dx, dy * keep / (1 - p), 1e-5, 1e-5)
    fat.assert_close(db, (dy * keep / (1 - p)).sum(0), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_seed_tensor_checks(device):
    x, r, b, dy = _inputs(device, (4, 16))
    for bad in (torch.tensor([1], dtype=torch.int32, device=device), torch.tensor([1, 2], device=device)):
        with pytest.raises(ValueError, match="seed tensor"):
            kernel.dropout_add(x, r, b, 0.2, bad)
        with pytest.raises(ValueError, match="seed tensor"):
            kernel.dropout_mask(x.shape, 0.2, bad, device)
    # a seed tensor modified between forward and backward: autograd refuses the backward
    # (the mask would not be the forward's)
    seed = torch.tensor([3], dtype=torch.int64, device=device)
    xg = x.clone().requires_grad_(True)
    y = kernel.DropoutAddFunction.apply(xg, r, b, 0.2, seed, True)
    seed.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward(dy)


def test_seed_paths_launch(monkeypatch):
    # one kernel per seed path (the SEED_PTR constexpr): a seed tensor is passed as a pointer
    # and no int is read from it; p = 0 and eval draw no seed (meta tensors: no kernel runs)
    x = torch.empty(8, 64, device="meta")
    r = torch.empty(8, 64, device="meta")
    drawn = []
    real = kernel.device_seed
    monkeypatch.setattr(kernel, "device_seed", lambda device: drawn.append(device) or real(device))
    calls = _launches(monkeypatch, lambda: (kernel.dropout_add(x, r, None, 0.1),
                                            kernel.dropout_add(x, r, None, 0.1, 5),
                                            kernel.dropout_add(x, r, None, 0.0),
                                            kernel.dropout_add(x, r, None, 0.1, training=False)))
    (_, _, c0, a0), (_, _, c1, a1), (_, _, c2, _), (_, _, c3, _) = calls
    assert c0["SEED_PTR"] and c0["DROPOUT"] and isinstance(a0[-1], torch.Tensor) and a0[-1].dtype == torch.int64
    assert not c1["SEED_PTR"] and a1[-1] == 5
    assert not c2["DROPOUT"] and not c3["DROPOUT"]
    assert len(drawn) == 1


# --- in place, overlaps, grids, 64-bit offsets -------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_in_place(device, dtype):
    # out=x and out=residual: each program reads both tiles before writing y's
    dt = fat.DTYPES[dtype]
    g = fat.gen(21)
    for shape in ([37, 150], [150, 37]):
        x, r = fat.randn(shape, dt, device, g), fat.randn(shape, dt, device, g).t().contiguous().t()
        b = fat.randn([shape[-1]], dt, device, g)
        keep = kernel.dropout_mask(shape, 0.25, 5, device)
        want = ref.dropout_add(x, r, b, 0.25, keep=keep)
        for name in ("x", "residual"):
            xi, ri = x.clone(), r.clone()
            out = xi if name == "x" else ri
            assert kernel.dropout_add(xi, ri, b, 0.25, 5, out=out) is out
            fat.assert_close(out, want, *fat.tol("pointwise", dt), name=f"in place over {name}")


@pytest.mark.parametrize("device", DEVICES)
def test_overlap_refused(device):
    buf = torch.randn(3, 40, 64, device=device)
    x, r = buf[0], buf[1]
    flat = buf.view(-1)
    for out, name in ((flat[1:2561].view(40, 64), "x"), (flat[2560 + 64:5120 + 64].view(40, 64), "residual"),
                      (flat[2560:5120].view(64, 40).t(), "residual")):
        with pytest.raises(ValueError, match=f"shares memory with {name}"):
            kernel.dropout_add(x, r, None, 0.1, 1, out=out)
    b = torch.zeros(40 * 64 + 64, device=device)
    with pytest.raises(ValueError, match="shares memory with bias"):
        kernel.dropout_add(x, r, b[:64], 0.1, 1, out=b[32:32 + 2560].view(40, 64))
    keep = kernel.dropout_mask((40, 64), 0.1, 1, device)
    fat.assert_close(kernel.dropout_add(x, r, None, 0.1, 1, out=buf[2]), ref.dropout_add(x, r, None, 0.1, keep=keep),
                     1e-5, 1e-5)
    with pytest.raises(ValueError, match="share memory"):  # an expanded out: rows on one row of memory
        kernel.dropout_add(x, r, None, 0.1, 1, out=torch.empty(64, device=device).expand(40, 64))


def _launches(monkeypatch, fn):
    """The (kernel, grid, constexprs, args) of every launch fn makes, no kernel run."""
    calls = []
    monkeypatch.setattr(kernel, "_launch", lambda k, grid, args, num_warps=4, num_stages=1, **c:
                        calls.append((k, grid, dict(c, num_warps=num_warps), args)))
    fn()
    return calls


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
def test_backward_of_fp32_residual_is_one_pass(monkeypatch, has_bias):
    # a bf16 branch on an fp32 residual stream (autocast): the backward kernel writes d_x in
    # x's type itself (read dy, write d_x), no fp32 [M, N] gradient cast afterwards; d_residual
    # is dy; with a bias, the kernel's partial sums added up by _sum_parts in the bias' type
    x = torch.empty(64, 768, dtype=torch.bfloat16, device="meta", requires_grad=True)
    r = torch.empty(64, 768, dtype=torch.float32, device="meta", requires_grad=True)
    b = torch.empty(768, dtype=torch.bfloat16, device="meta", requires_grad=True) if has_bias else None
    calls = _launches(monkeypatch, lambda: None)
    y = kernel.DropoutAddFunction.apply(x, r, b, 0.1, 3, True)
    assert y.dtype == torch.float32
    dy = torch.empty_like(y)
    calls.clear()
    grads = []
    ops = _aten_ops(lambda: grads.extend(torch.autograd.grad(y, [x, r] if b is None else [x, r, b], dy)))
    (k, _, c, args), *sums = calls
    assert k is kernel._dropout_add_bwd and args[1].dtype == torch.bfloat16 and c["HAS_DB"] == has_bias
    assert grads[0].dtype == torch.bfloat16 and grads[0].data_ptr() == args[1].data_ptr()
    assert grads[1].data_ptr() == dy.data_ptr()
    assert not [op for op, n in ops if op in ("_to_copy", "copy_") and n == x.numel()], ops
    # the bias gradient: the kernel's partial sums (never d_x's x.numel() terms) added up by
    # _sum_parts into it, in its type: no ATen sum or cast
    assert [s[0] for s in sums] == [kernel._sum_parts] * has_bias
    assert not [op for op, n in ops if op in ("sum", "_to_copy")], ops
    if has_bias:
        assert sums[0][3][0] is args[2] and args[2].numel() < x.numel()
        assert sums[0][3][1] is grads[2] and grads[2].dtype == torch.bfloat16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("programs", [1, 8, 1000])
def test_bias_grad_in_row_groups(device, dtype, programs, monkeypatch):
    """The bias gradient from the backward kernel's partial sums: every row in one program,
    groups of several row tiles with a ragged last one, one tile per program; with an fp32
    residual too (d_x, and so the sum, in x's type); p = 0 (no mask) as well. (In the
    interpreter 81 rows: six row tiles of 16, the last of one row; at 8 programs, three
    groups of two tiles, the last holding the ragged one. 129 on the GPU.) The fp32 residual
    and p = 0 at 8 programs only: the group loop is the same code with either."""
    monkeypatch.setattr(kernel, "DB_PROGRAMS", programs)
    combos = ((None, 0.3), ("fp32", 0.3), (None, 0.0)) if programs == 8 else ((None, 0.3),)
    for i, shapes in enumerate(([[81 if device == "cpu" else 129, 70]], [[3, 43, 24]])):
        for rd, p in combos:
            params = {"p": p, "has_bias": True, "residual_dtype": rd}
            _fused_grad_case(shapes, dtype, params, device, 40 + i)


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
    r = torch.empty(shape, dtype=torch.float32, device="meta")
    M, N = x.numel() // shape[-1], shape[-1]

    def run():
        y = kernel.DropoutAddFunction.apply(x, r, None, 0.1, 3, True)
        y.backward(torch.empty_like(y))
        kernel.dropout_mask(shape, 0.1, 3, "meta")

    calls = _launches(monkeypatch, run)
    names = [kernel._dropout_add_fwd, kernel._dropout_add_bwd, kernel._mask_kernel]
    assert [k for k, *_ in calls] == names
    at = {kernel._dropout_add_fwd: 4, kernel._dropout_add_bwd: 3, kernel._mask_kernel: 1}
    for k, grid, c, args in calls:
        assert tuple(args[at[k]:at[k] + 2]) == (M, N)
        bm, bn = c["BLOCK_M"], c["BLOCK_N"]
        assert bn % 8 == 0  # whole Philox draws
        assert grid == ((M + bm - 1) // bm * ((N + bn - 1) // bn),) and grid[0] <= 2**31 - 1


def test_tiles_independent_of_rows(monkeypatch, tiles_of):
    # a new number of rows (batch, sequence length) runs the kernel compiled for another: the
    # same constexprs and warps at every M (and M is not specialized: do_not_specialize), so a
    # CUDA graph captured at an M never run before needs no compilation
    seen = set()
    for M in (1, 2, 16, 17, 3000, 2**20):
        x = torch.empty(M, 768, dtype=torch.bfloat16, device="meta")
        r = torch.empty(M, 768, dtype=torch.bfloat16, device="meta")
        calls = _launches(monkeypatch, lambda: kernel.dropout_add(x, r, None, 0.1, 5))
        assert len(calls) == 1
        seen.add(tuple(sorted(calls[0][2].items())))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [[3, 700], [40, 200], [2100]], ids=str)
def test_many_column_tiles(device, shape):
    g = fat.gen(5)
    x, r = fat.randn(shape, torch.float32, device, g), fat.randn(shape, torch.float32, device, g)
    b = fat.randn([shape[-1]], torch.float32, device, g)
    keep = kernel.dropout_mask(shape, 0.2, 9, device)
    fat.assert_close(kernel.dropout_add(x, r, b, 0.2, 9, out=fat.poison(x.shape, x.dtype, device)),
                     ref.dropout_add(x, r, b, 0.2, keep=keep), 1e-5, 1e-5)


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not pathlib.Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("marker", [adapter.WIDE_ROWS, adapter.WIDE_COLS], ids=["rows", "cols"])
def test_offsets_past_2_31(device, marker):
    # x and the residual side by side in a lazily allocated storage of 2**32 bf16 elements,
    # row (column) 2 at 2**31 + 128
    before = _rss_mb()
    shapes = [[3, 67] if marker == adapter.WIDE_ROWS else [67, 3], marker]
    params = {"p": 0.3, "has_bias": True}
    inputs = adapter.make_inputs(shapes, torch.bfloat16, params, device, 3)
    assert inputs["x"].untyped_storage().data_ptr() == inputs["residual"].untyped_storage().data_ptr()
    assert inputs["x"].untyped_storage().nbytes() > 2**33 and max(inputs["x"].stride()) * 2 > 2**31
    fat.run_case(kernel, ref, adapter, shapes, "bf16", params, device, 3)
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
    g = torch.Generator(device="cuda").manual_seed(0)
    tol = fat.tol("pointwise", torch.bfloat16)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)

    def check(x, r, b, p, seed, out=None):
        keep = kernel.dropout_mask(x.shape, p, seed, "cuda")
        want = ref.dropout_add(x, r, b, p, keep=keep)
        _close_on_gpu(kernel.dropout_add(x, r, b, p, seed, out=out), want, *tol)

    check(randn(4194368), randn(4194368), None, 0.1, 7)  # 65537 column blocks of 64 before
    x, r = randn(4096, 3000), randn(4096, 3000)
    check(x, r, randn(3000), 0.1, 8, out=r)  # in place on the first call of a shape
    check(randn(4096, 600000).t(), randn(600000, 4096), randn(4096), 0.1, 9)  # offsets past 2**31


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", MEMORY, ids=str)
def test_memory_cases(device, shapes):
    # offsets past 2**31, in place and the refusals, as the verifier runs them
    fat.run_case(kernel, ref, adapter, shapes, "bf16", {"p": 0.3, "has_bias": True}, device, 1)


def _warm_up(fn):
    """fn run once on a side stream (compiles the kernels and lets the caching allocator set
    up), as PyTorch's CUDA-graph notes require before a capture."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_cuda_graph_replays_draw_fresh_masks_gpu():
    """A CUDA graph of the forward (and of forward + backward through DropoutAddFunction),
    the seed drawn on the device inside the graph: each replay draws a new seed, so two
    replays give two different masks, each the reference's for the seed that replay drew
    (read from the graph's seed tensor after the replay), forward and backward alike."""
    x, r, b, dy = _inputs("cuda", (256, 768))
    p = 0.3
    xg = x.clone().requires_grad_(True)

    def step():
        seed = kernel.device_seed(x.device)  # what seed=None does, kept to be read back
        y = kernel.dropout_add(x, r, b, p, seed)
        y_none = kernel.dropout_add(x, r, b, p)  # seed=None
        yg = kernel.DropoutAddFunction.apply(xg, r, b, p, None, True)
        (dx,) = torch.autograd.grad(yg, (xg,), dy)
        return seed, y, y_none, yg.detach(), dx

    _warm_up(step)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        seed, y, y_none, yg, dx = step()
    seen = []
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        keep = kernel.dropout_mask(x.shape, p, seed, "cuda")  # this replay's seed, read on the device
        assert torch.equal(keep, kernel.dropout_mask(x.shape, p, int(seed.item()), "cuda"))
        _assert_rate(keep, p)
        assert torch.equal(y != r, keep)
        fat.assert_close(y, ref.dropout_add(x, r, b, p, keep=keep), 1e-5, 1e-5)
        for out in (y_none, yg):
            _assert_rate(out != r, p)
            fat.assert_close(out, ref.dropout_add(x, r, b, p, keep=out != r), 1e-5, 1e-5)
        assert torch.equal(dx != 0, yg != r), "the backward replayed another mask than the forward"
        fat.assert_close(dx, dy * (yg != r) / (1 - p), 1e-5, 1e-5)
        seen.append((int(seed.item()), keep, y_none != r, yg != r))
    (s0, k0, n0, g0), (s1, k1, n1, g1) = seen
    assert s0 != s1, "the replays drew the same seed"
    for a, c in ((k0, k1), (n0, n1), (g0, g1)):
        assert (a != c).float().mean().item() > 0.2, "two replays gave the same mask"


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_compile_reduce_overhead_fresh_masks_gpu():
    """DropoutAdd under torch.compile(mode="reduce-overhead"): every call a new mask, each the
    reference's for the mask it shows (dropped elements are the residual exactly)."""
    x, r, b, _ = _inputs("cuda", (256, 768))
    p = 0.3
    m = kernel.DropoutAdd(p).train()
    f = torch.compile(lambda x, r, b: m(x, r, b), mode="reduce-overhead")
    ys = [f(x, r, b).clone() for _ in range(4)]  # warm-up, recording, replays
    torch.cuda.synchronize()
    keeps = [y != r for y in ys]
    for y, keep in zip(ys, keeps):
        _assert_rate(keep, p)
        fat.assert_close(y, ref.dropout_add(x, r, b, p, keep=keep), 1e-5, 1e-5)
    for a, c in zip(keeps, keeps[1:]):
        assert (a != c).float().mean().item() > 0.2, "two calls gave the same mask"
