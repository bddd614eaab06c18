"""Tests for add_layernorm's tile forward (_add_layernorm_cf_fwd): channels-first on NCHW inputs
(x and the residual read in place in tiles of positions, not copied channels-last first), and
rows of at most CF_SHORT_N contiguous channels, several to a program. Run under
TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

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
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
CL = adapter._channels_last


def _layernorm2d(x, r, w, b, eps):
    """Eager's LayerNorm2d after the add: permute -> layer_norm over C -> permute back."""
    s = x + r
    y = torch.nn.functional.layer_norm(s.permute(0, *range(2, s.dim()), 1), (s.shape[1],), w, b, eps)
    return s, y.permute(0, s.dim() - 1, *range(1, s.dim() - 1))


def _inputs(shape, dtype, device, seed, affine=(True, True)):
    g = fat.gen(seed)
    x = fat.randn(shape, dtype, device, g, mean=-2.3, std=0.5)
    r = fat.randn(shape, dtype, device, g)
    w = fat.randn(shape[1:2], dtype, device, g, mean=1.0, std=0.2) if affine[0] else None
    b = fat.randn(shape[1:2], dtype, device, g, std=0.2) if affine[1] else None
    return x, r, w, b


class _Launches:
    """Records the kernels add_layer_norm launches (and still runs them); while a launch runs,
    ``launching`` is True."""

    def __init__(self, monkeypatch):
        self.calls = []
        self.launching = False
        run = kernel._launch

        def spy(k, grid, args, num_warps=4, **c):
            self.calls.append((k, grid, c))
            self.launching = True
            try:
                return run(k, grid, args, num_warps, **c)
            finally:
                self.launching = False

        monkeypatch.setattr(kernel, "_launch", spy)

    def kernels(self):
        return [k for k, _, _ in self.calls]


def _positions_split(shape, calls, flat=False):
    """The forward's one launch, of the tile kernel, split the positions of each batch of an NCHW
    shape into tiles: under the interpreter several, the last ragged (what the test shapes are
    chosen for); flat: x and the residual have [rows, C] views, read as one batch of every
    position."""
    (k, grid, c), = calls
    batches, positions = (1, shape[0]) if flat else (shape[0], 1)
    for d in shape[2:]:
        positions *= d
    assert k is kernel._add_layernorm_cf_fwd
    if kernel.INTERPRET:  # (a GPU's tiles hold these shapes whole)
        assert positions > c["BLOCK_P"] and positions % c["BLOCK_P"], (shape, c["BLOCK_P"])
    assert grid == (batches * -(-positions // c["BLOCK_P"]),), (shape, grid, c["BLOCK_P"])


# ragged positions (7x7, 5x3, 3x3), channels not a power of two (96, 3, 130: past 128), 3-D and
# 5-D; each spans several position tiles under the interpreter, the last one ragged
SHAPES = [[2, 96, 7, 7], [3, 3, 5, 3], [2, 130, 3, 3], [2, 24, 7], [2, 5, 3, 1, 3]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_nchw_against_eager(device, dtype, shape, monkeypatch):
    dt = DTYPES[dtype]
    x, r, w, b = _inputs(shape, dt, device, 1)
    launches = _Launches(monkeypatch)
    s, y = kernel.add_layer_norm(x, r, w, b, 1e-6, dim=1)
    _positions_split(shape, launches.calls)
    s0, y0 = _layernorm2d(x, r, w, b, 1e-6)
    fat.assert_close(s, s0, 0, 0, name="s")
    fat.assert_close(y, y0, *fat.tol("norm", dt), name="y")
    # the documented layout: s and y channels_last (C moved last is contiguous), as before
    assert s.movedim(1, -1).is_contiguous() and y.movedim(1, -1).is_contiguous()
    assert s.dtype == y.dtype == dt


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, True), (False, False)], ids=str)
def test_nchw_affine(device, affine, monkeypatch):
    x, r, w, b = _inputs([2, 96, 5, 3], torch.float32, device, 2, affine)
    launches = _Launches(monkeypatch)
    s, y = kernel.add_layer_norm(x, r, w, b, 1e-5, dim=1)
    _positions_split(x.shape, launches.calls)
    s0, y0 = _layernorm2d(x, r, w, b, 1e-5)
    fat.assert_close(s, s0, 0, 0)
    fat.assert_close(y, y0, 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_nchw_stats(device, dtype, monkeypatch):
    """stats=True: fp32 mean and rstd of s over C at each position, in [B, H, W] order."""
    dt = DTYPES[dtype]
    x, r, w, b = _inputs([3, 40, 3, 5], dt, device, 3)
    launches = _Launches(monkeypatch)
    s, y, mean, rstd = kernel.add_layer_norm(x, r, w, b, 1e-6, stats=True, dim=1)
    _positions_split(x.shape, launches.calls)
    var, mu = torch.var_mean(s.float().permute(0, 2, 3, 1).reshape(-1, 40), dim=1, unbiased=False)
    assert mean.dtype == rstd.dtype == torch.float32 and mean.shape == rstd.shape == (45,)
    fat.assert_close(mean, mu, 1e-5, 1e-5, name="mean")
    fat.assert_close(rstd, torch.rsqrt(var + 1e-6), 1e-4, 1e-5, name="rstd")


@pytest.mark.parametrize("device", DEVICES)
def test_nchw_mixed_layouts(device, monkeypatch):
    """One operand NCHW and the other channels_last (or the residual in another dtype: an fp32
    residual stream), into poisoned channels_last outputs: one launch of the tile kernel."""
    x, r, w, b = _inputs([2, 24, 5, 3], torch.float32, device, 4)
    launches = _Launches(monkeypatch)
    for xx, rr in ((x, CL(r)), (CL(x), r), (x.to(torch.bfloat16), r)):
        launches.calls.clear()
        dt = torch.promote_types(xx.dtype, rr.dtype)
        out = tuple(fat.poison([2, 5, 3, 24], dt, device).movedim(-1, 1) for _ in range(2))
        s, y = kernel.add_layer_norm(xx, rr, w, b, 1e-6, dim=1, out=out)
        assert s.data_ptr() == out[0].data_ptr() and y.data_ptr() == out[1].data_ptr()  # (views of them)
        _positions_split(x.shape, launches.calls)
        s0, y0 = _layernorm2d(xx, rr, w, b, 1e-6)
        fat.assert_close(s, s0, 0, 0, name=f"s {xx.stride()} {rr.stride()}")
        fat.assert_close(y, y0, 1e-5, 1e-5, name=f"y {xx.stride()} {rr.stride()}")


@pytest.mark.parametrize("device", DEVICES)
def test_nchw_makes_no_copy(device, monkeypatch):
    """The forward, and the training path's forward, on NCHW x and residual: one launch (the
    tile kernel) and no copy of either (contiguous, reshape, clone, copy_ and to refused while
    the wrapper runs; the interpreter's launch itself may use them). Fails if the
    channels-last copy comes back."""
    x, r, w, b = _inputs([2, 96, 7, 7], torch.float32, device, 5)
    xl, rl, wl, bl = (t.clone().requires_grad_(True) for t in (x, r, w, b))
    launches = _Launches(monkeypatch)

    def refuse(name):
        method = getattr(torch.Tensor, name)

        def fail(*a, **k):
            if launches.launching:
                return method(*a, **k)
            raise AssertionError(f"Tensor.{name} called: the forward copied an input")
        return fail

    with monkeypatch.context() as m:
        for name in ("contiguous", "reshape", "clone", "copy_", "to"):
            m.setattr(torch.Tensor, name, refuse(name))
        s, y = kernel.add_layer_norm(x, r, w, b, 1e-6, dim=1)
        st, yt = kernel.add_layer_norm_train(xl, rl, wl, bl, 1e-6, dim=1)
    assert launches.kernels() == [kernel._add_layernorm_cf_fwd] * 2
    s0, y0 = _layernorm2d(x, r, w, b, 1e-6)
    for got in ((s, y), (st, yt)):
        fat.assert_close(got[0], s0, 0, 0)
        fat.assert_close(got[1], y0, 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_one_batch_nchw(device, monkeypatch):
    """A batch of one: C moved last is a [rows, C] view, its columns H * W apart (the row
    kernel would read each row's elements a memory sector apart): read in tiles of positions."""
    x, r, w, b = _inputs([1, 96, 5, 3], torch.float32, device, 6)
    launches = _Launches(monkeypatch)
    s, y = kernel.add_layer_norm(x, r, w, b, 1e-6, dim=1)
    _positions_split(x.shape, launches.calls, flat=True)
    s0, y0 = _layernorm2d(x, r, w, b, 1e-6)
    fat.assert_close(s, s0, 0, 0)
    fat.assert_close(y, y0, 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_short_contiguous_rows(device, dtype, monkeypatch):
    """Rows of at most CF_SHORT_N contiguous columns (128 under the interpreter): channels_last x
    and residual with dim=1, a contiguous [B, S, N] with dim=-1, and stats; BLOCK_P rows a
    program through the tile kernel (the row kernel would run a warp a row)."""
    dt = DTYPES[dtype]
    launches = _Launches(monkeypatch)
    x, r, w, b = _inputs([2, 40, 5, 3], dt, device, 14)
    s, y, mean, rstd = kernel.add_layer_norm(CL(x), CL(r), w, b, 1e-6, dim=1, stats=True)
    _positions_split(x.shape, launches.calls, flat=True)
    s0, y0 = _layernorm2d(x, r, w, b, 1e-6)
    fat.assert_close(s, s0, 0, 0)
    fat.assert_close(y, y0, *fat.tol("norm", dt))
    var, mu = torch.var_mean(s.float().movedim(1, -1).reshape(-1, 40), dim=1, unbiased=False)
    fat.assert_close(mean, mu, 1e-5, 1e-5, name="mean")
    fat.assert_close(rstd, torch.rsqrt(var + 1e-6), 1e-4, 1e-5, name="rstd")
    launches.calls.clear()
    x, r, w, b = (t.movedim(1, -1).contiguous() if t.dim() > 1 else t for t in _inputs([3, 64, 9], dt, device, 15))
    s, y = kernel.add_layer_norm(x, r, w, b, 1e-5)
    (k, grid, c), = launches.calls
    assert k is kernel._add_layernorm_cf_fwd and grid == (-(-27 // c["BLOCK_P"]),), c
    assert 27 % c["BLOCK_P"] and (27 > c["BLOCK_P"] or not kernel.INTERPRET), c
    s0, y0 = ref.add_layer_norm(x, r, w, b, 1e-5)
    fat.assert_close(s, s0, 0, 0)
    fat.assert_close(y, y0, *fat.tol("norm", dt))
    _check_nchw_grads([2, 40, 5, 3], dt, device, (True, True), 16, layout=CL)


@pytest.mark.parametrize("device", DEVICES)
def test_other_paths_unchanged(device, monkeypatch):
    """Channels past what a tile holds (300 under the interpreter: a block of 512) keep the
    copy and the row kernel; channels_last inputs (a [rows, C] matrix) of more than
    CF_SHORT_N channels the row kernel. (The interpreter's limits, on any device.)"""
    monkeypatch.setattr(kernel, "CF_MAX_BLOCK_N", 256)
    monkeypatch.setattr(kernel, "CF_SHORT_N", 128)
    kernel._cf_plan.cache_clear()
    monkeypatch.setattr(kernel, "_cf_plan", kernel._cf_plan.__wrapped__)  # uncached: the limits restored after
    launches = _Launches(monkeypatch)
    for shape, cl in (([2, 300, 1, 3], False), ([2, 130, 5, 3], True)):
        x, r, w, b = _inputs(shape, torch.float32, device, 7)
        if cl:
            x, r = CL(x), CL(r)
        launches.calls.clear()
        s, y = kernel.add_layer_norm(x, r, w, b, 1e-6, dim=1)
        assert launches.kernels() == [kernel._add_layernorm_fwd], shape
        s0, y0 = _layernorm2d(x, r, w, b, 1e-6)
        fat.assert_close(s, s0, 0, 0)
        fat.assert_close(y, y0, 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("over", ["x", "residual"])
def test_nchw_in_place(device, over, monkeypatch):
    """s over a channels_last operand while the other is NCHW (the tile kernel): computed
    right; s over an NCHW operand: refused, as out must be channels_last (and as before)."""
    x0, r0, w, b = _inputs([2, 40, 5, 3], torch.float32, device, 8)
    s0, y0 = _layernorm2d(x0, r0, w, b, 1e-6)
    launches = _Launches(monkeypatch)
    x, r = (CL(x0), r0) if over == "x" else (x0, CL(r0))
    op = x if over == "x" else r
    y = fat.poison([2, 5, 3, 40], torch.float32, device).movedim(-1, 1)
    s, y = kernel.add_layer_norm(x, r, w, b, 1e-6, dim=1, out=(op, y))
    assert s.data_ptr() == op.data_ptr() and s.stride() == op.stride()
    assert launches.kernels() == [kernel._add_layernorm_cf_fwd]
    fat.assert_close(s, s0, 0, 0)
    fat.assert_close(y, y0, 1e-5, 1e-5)
    # over an NCHW operand, a y over the sum, a y one channel off an input: refused
    x, r = x0.clone(), r0.clone()
    y = fat.poison([2, 5, 3, 40], torch.float32, device).movedim(-1, 1)
    op = x if over == "x" else r
    buf = fat.poison([2, 5, 3, 41], torch.float32, device)
    for out in ((op, y), (y, y)):
        with pytest.raises(ValueError):
            kernel.add_layer_norm(x, r, w, b, 1e-6, dim=1, out=out)
    xb = buf[..., :40].movedim(-1, 1)
    xb.copy_(x0)
    with pytest.raises(ValueError, match="shares memory"):
        kernel.add_layer_norm(xb, r0, w, b, 1e-6, dim=1, out=(CL(x0), buf[..., 1:].movedim(-1, 1)))
    assert torch.equal(x, x0) and torch.equal(r, r0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("affine", [(True, True), (False, False)], ids=str)
def test_nchw_grad(device, dtype, affine, monkeypatch):
    """Gradients through AddLayerNormFunction with NCHW x and residual (leaves): the forward
    reads them in place and saves s, mean and rstd as the row path does; the backward's
    gradients against eager's LayerNorm2d (bf16 against the fp32 chain, within twice eager's
    own error or 5e-2)."""
    launches = _Launches(monkeypatch)
    _check_nchw_grads([2, 40, 5, 3], DTYPES[dtype], device, affine, 9)
    assert launches.kernels()[0] is kernel._add_layernorm_cf_fwd


def _check_nchw_grads(shape, dt, device, affine, seed, layout=None):
    """d_x, d_residual, d_weight, d_bias through the training path with NCHW leaves (or leaves
    in layout(t)'s) against eager's LayerNorm2d (fp32), or for 16 bits against the fp32 chain
    within twice eager's own error (and 5e-2): the CPU's 16-bit LayerNorm backward rounds its
    statistics."""
    x0, r0, w0, b0 = _inputs(shape, dt, device, seed, affine)
    if layout is not None:
        x0, r0 = layout(x0), layout(r0)
    g = fat.gen(seed + 1)
    ds, dy = fat.randn(x0.shape, dt, device, g), fat.randn(x0.shape, dt, device, g)
    grads = {}
    for name, fn, cast in (("fused", kernel.add_layer_norm_train, dt), ("eager", _layernorm2d, dt),
                           ("fp32", _layernorm2d, torch.float32)):
        leaves = [t if t is None else t.detach().to(cast).clone().requires_grad_(True) for t in (x0, r0, w0, b0)]
        outs = fn(*leaves, 1e-6) if name != "fused" else fn(*leaves, 1e-6, dim=1)
        want = [t for t in leaves if t is not None]
        grads[name] = torch.autograd.grad(outs, want, (ds.to(cast), dy.to(cast)))
    for i, (a, e, f) in enumerate(zip(grads["fused"], grads["eager"], grads["fp32"])):
        assert a.dtype == e.dtype and a.shape == e.shape, i
        if dt == torch.float32:
            fat.assert_close(a, e, 1e-4, 1e-4, name=f"{shape} grad {i}")
        else:
            err = (a.float() - f).abs().max().item()
            bound = max(2 * (e.float() - f).abs().max().item(), 5e-2)
            assert err <= bound, (shape, i, err, bound)


@pytest.mark.parametrize("device", DEVICES)
def test_nchw_views_dim_last(device, monkeypatch):
    """dim=-1 on the [B, H, W, C] view of an NCHW tensor (what the training path hands the
    function, and the adapter's NCHW_VIEWS cases): the tile kernel, the same values."""
    launches = _Launches(monkeypatch)
    for shapes in adapter.NCHW_VIEWS:
        params = {"eps": 1e-5}
        inputs = adapter.make_inputs(shapes, torch.float32, params, device, 11)
        assert not inputs["x"].is_contiguous() and inputs["x"].movedim(-1, 1).is_contiguous()
        launches.calls.clear()
        fat.run_case(kernel, ref, adapter, shapes, "fp32", params, device, 11)
        (k, _, c), = launches.calls
        assert k is kernel._add_layernorm_cf_fwd
        assert c["BLOCK_P"] < shapes[0][1] * shapes[0][2] or not kernel.INTERPRET, c
    assert adapter.grad_shapes({}) == [adapter.NCHW_VIEWS[0]]
    assert adapter.grad_shapes({"norm_dim": "1"}) == [adapter.CHANNELS_FIRST_NCHW[0]]


def test_cf_plan(monkeypatch):
    """The GPU's tiles: every channel in one block up to 1024, about 4096 elements, at least 32
    bytes of positions per channel, 4 to 16 warps (32 elements per thread); past 1024 channels
    no tile (the copy), nor where a tile's positions would pass 2**31 (32-bit arithmetic)."""
    monkeypatch.setattr(kernel, "INTERPRET", False)
    monkeypatch.setattr(kernel, "CF_MAX_BLOCK_N", 1024)
    monkeypatch.setattr(kernel, "CF_TILE", 4096)
    monkeypatch.setattr(kernel, "CF_MAX_P", 256)
    kernel._cf_plan.cache_clear()
    try:
        want = {(96, 3136, 4): (128, 32, 4), (192, 784, 2): (256, 16, 4), (384, 196, 4): (512, 8, 4),
                (768, 49, 4): (1024, 8, 8), (768, 49, 2): (1024, 16, 16), (3, 3136, 4): (4, 256, 4),
                (96, 5, 4): (128, 8, 4), (1024, 4, 4): (1024, 4, 4), (1025, 49, 4): None,
                (96, 2**31 - 257, 4): (128, 32, 4), (96, 2**31 - 256, 4): None}  # 32-bit positions
        for args, plan in want.items():
            assert kernel._cf_plan(*args) == plan, args
    finally:
        kernel._cf_plan.cache_clear()


# ConvNeXt's LayerNorm2d sizes the tile kernel is compiled for below: (NCHW shape, dtype,
# channels_last inputs: rows of at most CF_SHORT_N, the tile kernel too)
_SM90_SHAPES = (([32, 96, 56, 56], "fp32", False), ([32, 192, 28, 28], "bf16", False),
                ([32, 384, 14, 14], "fp32", False), ([32, 768, 7, 7], "fp32", False), ([32, 768, 7, 7], "bf16", False),
                ([32, 96, 56, 56], "fp32", True), ([32, 384, 14, 14], "fp32", True))


def _sm90_cf_usage():
    """Per shape of _SM90_SHAPES: [shape, dtype, warps, BLOCK_P, registers, spill bytes, vector
    loads] of the launch add_layer_norm(dim=1, stats=True) makes on NCHW inputs, compiled for
    sm_90 (sm90.capture: nothing runs). Run by sm90.run_isolated (without TRITON_INTERPRET)."""
    import sm90

    out = []
    for shape, dtype, cl in _SM90_SHAPES:
        x, r = (torch.empty(shape, dtype=DTYPES[dtype]) for _ in range(2))
        if cl:
            x, r = CL(x), CL(r)
        w = torch.empty(shape[1], dtype=DTYPES[dtype])
        launch, = sm90.capture(kernel, lambda: kernel.add_layer_norm(x, r, w, w, 1e-6, dim=1, stats=True))
        assert launch.name == "_add_layernorm_cf_fwd", launch.name
        ptx = sm90.compile_sm90(launch).asm["ptx"]
        regs, spills = sm90.ptxas_usage(ptx)
        vectors = ptx.count("ld.global.v4.b32") + ptx.count("ld.global.v2.b32")
        out.append([shape, dtype, cl, launch.num_warps, launch.constexprs["BLOCK_P"], regs, spills, vectors])
    return out


def test_cf_compiles_sm90():
    """Compiled for the H200 (sm_90) on the CPU at ConvNeXt's LayerNorm2d sizes, the tile kernel
    spills nothing, and at 96 channels of 56x56 (a position run of 16 bytes' multiples) its
    loads go along the positions in vectors (channels_last: along the channels). Registers and warps are recorded in the message
    for the GPU probe (bench/experiments/probe_layernorm2d.py) to weigh."""
    import sm90

    usage = sm90.run_isolated(_sm90_cf_usage, pathlib.Path(__file__).parent)
    for shape, dtype, cl, warps, block_p, regs, spills, vectors in usage:
        assert spills == 0 and regs < 255, usage
    assert usage[0][7] > 0 and usage[5][7] > 0, usage  # fp32 [32, 96, 56, 56]: vector loads


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_convnext_shapes_gpu(monkeypatch):
    """ConvNeXt's LayerNorm2d at traced sizes against eager: NCHW inputs, fp32 [32, 96, 56, 56]
    (the size of the 0.58x case of 2026-12-02), bf16 [32, 192, 28, 28], fp32 [8, 768, 7, 7]; and
    channels_last ones (the bench's, rows of at most CF_SHORT_N): each one launch of the tile
    kernel, s, y and the statistics; then the gradients through the training path."""
    launches = _Launches(monkeypatch)
    for shape, dt, cl in (([32, 96, 56, 56], torch.float32, False), ([32, 192, 28, 28], torch.bfloat16, False),
                          ([8, 768, 7, 7], torch.float32, False), ([32, 96, 56, 56], torch.float32, True),
                          ([32, 384, 14, 14], torch.float32, True)):
        x, r, w, b = _inputs(shape, dt, "cuda", 12)
        if cl:
            x, r = CL(x), CL(r)
        launches.calls.clear()
        s, y, mean, rstd = kernel.add_layer_norm(x, r, w, b, 1e-6, dim=1, stats=True)
        assert launches.kernels() == [kernel._add_layernorm_cf_fwd], (shape, cl)
        s0, y0 = _layernorm2d(x, r, w, b, 1e-6)
        name = f"{shape} {dt} channels_last {cl}"
        fat.assert_close(s, s0, 0, 0, name=f"s {name}")
        fat.assert_close(y, y0, *fat.tol("norm", dt), name=f"y {name}")
        assert y.movedim(1, -1).is_contiguous() and s.movedim(1, -1).is_contiguous()
        var, mu = torch.var_mean(s.float().movedim(1, -1).reshape(-1, shape[1]), dim=1, unbiased=False)
        fat.assert_close(mean, mu, 1e-4, 1e-4, name=f"mean {name}")
        fat.assert_close(rstd, torch.rsqrt(var + 1e-6), 1e-3, 1e-4, name=f"rstd {name}")
    _check_nchw_grads([32, 96, 56, 56], torch.float32, "cuda", (True, True), 13)
    _check_nchw_grads([32, 192, 28, 28], torch.bfloat16, "cuda", (True, True), 14)
    _check_nchw_grads([32, 96, 56, 56], torch.float32, "cuda", (True, True), 15, layout=CL)
