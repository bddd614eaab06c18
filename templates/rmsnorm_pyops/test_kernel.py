"""Tests for the rmsnorm_pyops template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "_common"))

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

import fa_testing as fat  # noqa: E402

kernel = fat.load_sibling(__file__, "kernel")
ref = fat.load_sibling(__file__, "reference")
adapter = fat.load_sibling(__file__, "adapter")

DEVICES = fat.devices()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("casting", ["llama", "fp32"])
@pytest.mark.parametrize("shapes", adapter.ADVERSARIAL, ids=str)
def test_forward(device, dtype, casting, shapes):
    for seed in fat.seeds(1 if shapes[0][0] > 64 else 2):  # one program per row: keep it quick
        fat.run_case(kernel, ref, adapter, shapes, dtype, {"eps": 1e-6, "casting": casting}, device, seed)


@pytest.mark.parametrize("device", DEVICES)
def test_row_longer_than_block(device):
    g = fat.gen(4)
    x = fat.randn([5, 1000], torch.float32, device, g, mean=1.0)
    w = fat.randn([1000], torch.float32, device, g)
    y = kernel.rms_norm(x, w, 1e-5, block_n=64, out=fat.poison(x.shape, x.dtype, device))
    fat.assert_close(y, ref.rms_norm(x, w, 1e-5), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_mixed_weight_dtype(device):
    # LlamaRMSNorm with an fp32 weight and bf16 activations returns fp32
    g = fat.gen(6)
    x = fat.randn([7, 96], torch.bfloat16, device, g)
    w = fat.randn([96], torch.float32, device, g)
    y = kernel.rms_norm(x, w)
    assert y.dtype == torch.float32
    fat.assert_close(y, ref.rms_norm(x, w), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous(device):
    g = fat.gen(8)
    x = fat.randn([96, 40], torch.float16, device, g).t()
    w = fat.randn([96], torch.float16, device, g)
    fat.assert_close(kernel.rms_norm(x, w), ref.rms_norm(x, w), *fat.tol("norm", torch.float16))


@pytest.mark.parametrize("device", DEVICES)
def test_nan_inf(device):
    x = torch.randn(4, 16, device=device)
    x[0, 3] = float("nan")
    x[1, 5] = float("inf")
    x[2, :] = 0.0  # all-zero row: rstd = 1/sqrt(eps), y = 0
    w = torch.ones(16, device=device)
    fat.assert_close(kernel.rms_norm(x, w, 1e-6), ref.rms_norm(x, w, 1e-6), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("casting", ["llama", "fp32"])
def test_grad(device, dtype, casting):
    fat.run_grad_case(kernel, ref, adapter, [[3, 5, 150]], dtype, {"eps": 1e-6, "casting": casting}, device, 2)


# (groups, dtype, casting): every dtype and casting with programs of several row tiles and a
# ragged last group (3 groups); one group and one row per program (1, 64) with fp32 "llama"
# and bf16 "fp32". The grouping is the same code whatever the dtype and casting, their math
# the same in every group.
ONE_PASS = [(3, d, c) for d in ("fp32", "bf16") for c in ("llama", "fp32")] + [
    (g, d, c) for g in (1, 64) for d, c in (("fp32", "llama"), ("bf16", "fp32"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("groups,dtype,casting", ONE_PASS)
def test_grad_one_pass(device, dtype, casting, groups, monkeypatch):
    """Rows that fit one block: dx and dweight's partial sums in one pass, programs of several
    row tiles (one group: every row in one program), a ragged last tile and group, one row per
    program; a row of exactly one block, rows of three elements. run_grad_case's second pass,
    through adapter.train (contiguous x and weight, where the first pass gives NaN-padded
    strided views), runs at 3 groups only: the grouping is the same kernel code whatever the
    layout."""
    monkeypatch.setattr(kernel, "DW_GROUPS", groups)
    if groups != 3:
        monkeypatch.delattr(adapter, "train")
    for i, shapes in enumerate(([[37, 70]], [[2, 3, 128]], [[9, 3]])):
        fat.run_grad_case(kernel, ref, adapter, shapes, dtype, {"eps": 1e-6, "casting": casting}, device, 10 + i)


@pytest.mark.parametrize("device", DEVICES)
def test_grad_strided_weight(device):
    # a weight that is a strided view (every other element of a parameter): the backward
    # kernels read it as contiguous, so it is copied first, and its gradient reaches the view
    g = fat.gen(9)
    x0, r = fat.randn([9, 40], torch.float32, device, g), fat.randn([9, 40], torch.float32, device, g)
    w0, dy = fat.randn([80], torch.float32, device, g, mean=1.0), fat.randn([9, 40], torch.float32, device, g)
    got = []
    for fn in ("fused", "eager"):
        x, wb = x0.clone().requires_grad_(True), w0.clone().requires_grad_(True)
        w = wb[::2]
        out = kernel.RMSNormFunction.apply(x, w, 1e-6, "llama") if fn == "fused" else ref.rms_norm(x, w, 1e-6)
        got.append(torch.autograd.grad(out, [x, wb], dy))
    for a, b in zip(*got):
        fat.assert_close(a, b, 1e-4, 1e-4)


def test_backward_launches():
    """Rows that fit one block: one kernel reads dy and x once for dx and dweight, programs of
    whole row tiles, then _sum_parts adds up its [groups, N] partial sums in the weight's type;
    longer rows: the dx kernel, one program per row, the partial-sum kernel and _sum_parts."""
    launches = []
    saved = kernel._launch, kernel.MAX_BLOCK_N, kernel.ROW_TILE, kernel.DW_GROUPS, kernel.DW_MIN_ROWS
    kernel._launch = lambda k, grid, args, num_warps, **c: launches.append((k, grid, num_warps, c))
    kernel.MAX_BLOCK_N, kernel.ROW_TILE, kernel.DW_GROUPS, kernel.DW_MIN_ROWS = 8192, 2048, 512, 4  # the GPU's
    try:
        sums = (kernel._sum_parts, None, None)
        for (m, n), want in (((2048, 1024), [(kernel._rmsnorm_bwd, (512,), 2), sums]),
                             ((100352, 96), [(kernel._rmsnorm_bwd, (483,), 16), sums]),  # 13 tiles of 16 rows each
                             ((3000, 8192), [(kernel._rmsnorm_bwd, (500,), 1), sums]),
                             ((64, 8193), [(kernel._rmsnorm_bwd_dx, (64,), None), (kernel._rmsnorm_bwd_dw, None, None),
                                           sums])):
            x = torch.empty(m, n, device="meta", requires_grad=True)
            w = torch.empty(n, device="meta", requires_grad=True)
            y = kernel.RMSNormFunction.apply(x, w, 1e-6, "llama")
            launches.clear()
            torch.autograd.grad(y, [x, w], torch.empty_like(y))
            assert [(k, grid if g else None) for (k, grid, *_), (_, g, _) in zip(launches, want)] == \
                [(k, g) for k, g, _ in want] and len(launches) == len(want), (m, n)
            assert launches[-1][1] == (-(-n // kernel.SUM_BLOCK_N), 1), (m, n)  # one gradient: dweight
            for (k, grid, warps, c), (_, _, bm) in zip(launches, want):
                if bm is not None:
                    assert c["BLOCK_M"] == bm and c["HAS_DX"] and c["HAS_DW"] and warps == (16 if n == 8192 else 4)
    finally:
        kernel._launch, kernel.MAX_BLOCK_N, kernel.ROW_TILE, kernel.DW_GROUPS, kernel.DW_MIN_ROWS = saved


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("casting", ["llama", "fp32"])
def test_weight_grad_in_row_groups(device, casting, monkeypatch):
    """dweight from per-program partial sums of row groups: groups of several rows with a
    ragged last group, one group, one row per group, columns past one block, a transposed x
    and a dy with a row stride; against float64 (fp32 data: within 1e-5; bf16: the dtype's
    rounding of the result)."""
    g = fat.gen(5)
    for m, n, groups in ((37, 150, 8), (5, 40, 1), (7, 33, 64)):
        monkeypatch.setattr(kernel, "DW_GROUPS", groups)
        for dt in (torch.float32, torch.bfloat16):
            xs = fat.randn([n, m], dt, device, g).t()  # transposed: column stride m
            w = fat.randn([n], dt, device, g, mean=1.0)
            dy = fat.randn([m, 2 * n], dt, device, g)[:, ::2]
            x = xs.detach().requires_grad_(False)
            wl = w.detach().clone().requires_grad_(True)
            y = kernel.RMSNormFunction.apply(x, wl, 1e-6, casting)
            (got,) = torch.autograd.grad(y, [wl], dy)
            x64 = x.double()
            rstd = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
            want = (dy.double() * x64 * rstd).sum(0)  # n in fp32 for both castings
            tol = 1e-5 if dt == torch.float32 else 2e-2
            fat.assert_close(got.double(), want, tol, tol, name=f"dw {m}x{n} groups {groups} {dt}")


@pytest.mark.parametrize("device", DEVICES)
def test_module(device):
    m = kernel.RMSNorm(32, eps=1e-5, device=device)
    with torch.no_grad():
        m.weight.normal_()
    x = torch.randn(3, 32, device=device)
    fat.assert_close(m(x), ref.rms_norm(x, m.weight, 1e-5), 1e-5, 1e-5)
    with pytest.raises(ValueError):
        kernel.rms_norm(x, torch.ones(31, device=device))


# y written cast (out_dtype): the fp32 case's y in the 16-bit type autocast casts it to for
# the GEMMs that read it; rows in one block and in chunks, a transposed view past 2**31, the
# in-place shapes (refused in place: y has another type)
OUT_DTYPE_SHAPES = [[[129, 127]], [[3, 300]], [[1, 1500]]] + adapter.FAR[:1] + adapter.IN_PLACE[:1]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out", ["bf16", "fp16"])
@pytest.mark.parametrize("casting", ["llama", "fp32"])
@pytest.mark.parametrize("shapes", OUT_DTYPE_SHAPES, ids=str)
def test_out_dtype(device, out, casting, shapes):
    fat.run_case(kernel, ref, adapter, shapes, "fp32", {"eps": 1e-6, "casting": casting, "out_dtype": out}, device, 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("casting", ["llama", "fp32"])
def test_out_dtype_grad(device, casting):
    fat.run_grad_case(kernel, ref, adapter, [[3, 5, 150]], "fp32",
                      {"eps": 1e-6, "casting": casting, "out_dtype": "bf16"}, device, 2)


@pytest.mark.parametrize("device", DEVICES)
def test_out_dtype_is_the_cast(device):
    """y in bf16 is eager's fp32 y rounded to nearest even: equal to it as rounded, and wrong
    by more than a bf16 rounding where the kernel truncated instead."""
    g = fat.gen(7)
    x = fat.randn([64, 96], torch.float32, device, g, mean=0.5, std=1.5)
    w = fat.randn([96], torch.float32, device, g, mean=1.0, std=0.2)
    y = kernel.rms_norm(x, w, 1e-6, y_dtype=torch.bfloat16)
    want = ref.rms_norm(x, w, 1e-6)
    assert y.dtype == torch.bfloat16
    exact = (y == want.to(torch.bfloat16)).float().mean().item()
    assert exact > 0.99, f"{exact:.3f} of y equal to eager's y cast to bf16"
    truncated = (want.view(torch.int32) & ~0xFFFF).view(torch.float32)
    assert (y.float() != truncated).any()


@pytest.mark.parametrize("device", DEVICES)
def test_out_dtype_refused(device):
    x = torch.randn(3, 32, device=device, dtype=torch.bfloat16)
    w = torch.ones(32, device=device, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="y_dtype"):
        kernel.rms_norm(x, w, y_dtype=torch.float16)  # eager's y is bf16: no cast to write
    assert kernel.rms_norm(x, w, y_dtype=torch.bfloat16).dtype == torch.bfloat16  # eager's own
    with pytest.raises(ValueError, match="out_dtype"):
        kernel.RMSNorm(32, out_dtype=torch.float64)
    xf, wf = x.float(), w.float()
    with pytest.raises(ValueError, match="wrong shape, dtype"):  # out in eager's type, not the asked one
        kernel.rms_norm(xf, wf, out=torch.empty_like(xf), y_dtype=torch.bfloat16)


class _LlamaRMSNorm(torch.nn.Module):
    """HF's LlamaRMSNorm, as the reference chain runs it."""

    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.variance_epsilon = 1e-6

    def forward(self, x):
        return ref.rms_norm(x, self.weight, self.variance_epsilon)


@pytest.mark.parametrize("device", DEVICES)
def test_module_out_dtype_three_readers(device):
    """Llama's attention input: the norm's fp32 output read by q, k and v under autocast. With
    out_dtype=bf16 the projections get y in bf16 (autocast casts nothing), their outputs and
    weight gradients are eager's (the same bf16 y), and x's and the norm weight's gradients,
    through y's three gradients summed in bf16 by the engine where eager sums them in fp32, are
    within a few bf16 roundings of that sum's scale of eager's (a sum rounded in bf16 is off by
    up to 2**-9 of its size; the norm's backward subtracts such sums: where they cancel, the
    error stays that size, not a share of the result)."""
    torch.manual_seed(3)
    n = 64
    norm = _LlamaRMSNorm(n).to(device)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.2)
    projs = [torch.nn.Linear(n, n, bias=False).to(device) for _ in range(3)]
    fused = kernel.RMSNorm.from_module(norm, out_dtype=torch.bfloat16)
    seen = []
    hooks = [p.register_forward_pre_hook(lambda m, a: seen.append(a[0].dtype)) for p in projs]
    x0 = torch.randn(4, 8, n, device=device)
    dev = "cuda" if device.startswith("cuda") else "cpu"
    results = []
    for m in (norm, fused):
        x = x0.clone().requires_grad_()
        for p in projs:
            p.weight.grad = None
        with torch.autocast(dev, dtype=torch.bfloat16):
            y = m(x)
            outs = [p(y) for p in projs]
        sum(o.float().pow(2).sum() for o in outs).backward()
        results.append((outs, x.grad, m.weight.grad, [p.weight.grad.clone() for p in projs]))
    for h in hooks:
        h.remove()
    assert seen[:3] == [torch.float32] * 3 and seen[3:] == [torch.bfloat16] * 3, seen
    (eo, ex, ew, ep), (fo, fx, fw, fp) = results
    for a, b in zip(eo, fo):
        fat.assert_close(b, a, 1e-2, 1e-2)
    for a, b in zip(ep, fp):
        fat.assert_close(b, a, 1e-2, 1e-2)
    for got, want in ((fx, ex), (fw, ew)):
        scale = want.abs().max().item()
        fat.assert_close(got, want, 2**-5 * scale, 2e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_module_out_dtype_outside_autocast(device):
    """out_dtype is autocast's cast: without autocast (evaluation in fp32), or under autocast to
    another type, the module returns eager's y, which an fp32 Linear reads as before."""
    torch.manual_seed(4)
    norm = _LlamaRMSNorm(32).to(device)
    lin = torch.nn.Linear(32, 8, bias=False).to(device)
    fused = kernel.RMSNorm.from_module(norm, out_dtype=torch.bfloat16)
    x = torch.randn(3, 32, device=device)
    y = fused(x)
    assert y.dtype == torch.float32
    fat.assert_close(lin(y), lin(norm(x)), 1e-5, 1e-5)
    dev = "cuda" if device.startswith("cuda") else "cpu"
    with torch.autocast(dev, dtype=torch.float16):
        assert fused(x).dtype == torch.float32  # autocast casts to fp16, not to out_dtype
    with torch.autocast(dev, dtype=torch.bfloat16):
        assert fused(x).dtype == torch.bfloat16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("casting", ["llama", "fp32"])
@pytest.mark.parametrize("n,block_n", [(100, None), (1000, 256), (1000, 64)])
def test_in_place(device, casting, n, block_n):
    """out=x: the single-block path and the chunked one (each chunk read before it is written)."""
    g = fat.gen(21)
    x = fat.randn([4, n], torch.bfloat16, device, g, mean=0.5, std=1.5)
    w = fat.randn([n], torch.bfloat16, device, g, mean=1.0)
    want = ref.rms_norm(x, w, 1e-6, casting)
    y = x.clone()
    assert kernel.rms_norm(y, w, 1e-6, casting, out=y, block_n=block_n) is y
    fat.assert_close(y, want, *fat.tol("norm", torch.bfloat16))


@pytest.mark.parametrize("device", DEVICES)
def test_overlapping_outputs_refused(device):
    x = torch.randn(16, 16, device=device)
    w = torch.randn(16, device=device)
    buf = torch.randn(17, 16, device=device)
    xb, shifted = buf[:16], buf[1:]
    refused = {
        "y one row off x": (xb, shifted, None),
        "y over x's bytes, transposed": (x, x.t(), None),
        "y over the weight": (x, w.expand(16, 16), None),
        "y with elements sharing memory": (x, torch.empty(16, device=device).expand(16, 16), None),
        "rstd inside x": (x, torch.empty(16, 16, device=device), x.view(-1)[:16]),
    }
    for what, (xin, out, rstd) in refused.items():
        with pytest.raises(ValueError, match="rmsnorm: output"):
            kernel.rms_norm(xin, w, out=out, rstd=rstd)
            pytest.fail(f"{what}: not refused")
    y = x.clone()
    fat.assert_close(kernel.rms_norm(y, w, out=y), ref.rms_norm(x, w), 1e-5, 1e-5)


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [100, 300])
def test_offsets_past_2_31(device, n):
    """x as a transposed view whose last column lies past 2**31 elements into a reserved (not
    committed) storage: 32-bit ``cols * stride`` would read elsewhere. Only the viewed
    elements' pages are touched."""
    g = fat.gen(23)
    before = _rss_mb()
    x = fat.far_view(fat.randn([3, n], torch.bfloat16, device, g, mean=0.5))
    if x.stride(1) == 1:
        pytest.skip("no room on this GPU for the view's storage")
    assert (n - 1) * x.stride(1) >= 2**31
    w = fat.randn([n], torch.bfloat16, device, g)
    y = kernel.rms_norm(x, w, out=fat.poison(x.shape, x.dtype, device))
    fat.assert_close(y, ref.rms_norm(x, w), *fat.tol("norm", torch.bfloat16))
    # the backward's d_x kernel reads x through the same strides
    dy = fat.randn([3, n], torch.bfloat16, device, g)
    xg = x.requires_grad_(True)
    (dx,) = torch.autograd.grad(kernel.RMSNormFunction.apply(xg, w, 1e-6, "llama"), [xg], dy)
    xc = x.detach().clone().requires_grad_(True)
    (want,) = torch.autograd.grad(ref.rms_norm(xc, w), [xc], dy)
    fat.assert_close(dx, want, 5e-2, 5e-2)
    if device == "cpu":
        assert _rss_mb() - before < 64, "the view's storage was committed"


def test_plan():
    """BLOCK_N covers the row up to MAX_BLOCK_N, with 1-8 warps and at least 8 elements per
    thread; the launch for huge shapes, without running it: one program per row on grid axis
    0, a row of 2**26 in chunks, more than 2**31 - 1 rows refused."""
    for n in [1, 2, 7, 127, 128, 129, 768, 1000, 4096, 8192, 8193, 2**26]:
        block, warps = kernel._plan(n, kernel.MAX_BLOCK_N)
        assert block == min(triton.next_power_of_2(n), kernel.MAX_BLOCK_N)
        assert 1 <= warps <= 8 and (block < 256 or block >= warps * 256)
    launches = []
    saved = kernel._launch, kernel.MAX_BLOCK_N
    kernel._launch = lambda k, grid, args, num_warps, **c: launches.append((grid, num_warps, c))
    kernel.MAX_BLOCK_N = 8192  # the GPU's plan
    try:
        x = torch.empty(1, 2**26, dtype=torch.bfloat16)  # never written: no pages committed
        kernel.rms_norm(x, torch.ones(2**26, dtype=torch.bfloat16))
        grid, warps, c = launches[-1]
        assert grid == (1,) and c["BLOCK_N"] == 8192 and not c["SINGLE"] and warps == 8
        x = torch.empty(3000, 4096, dtype=torch.float16)
        kernel.rms_norm(x, torch.ones(4096, dtype=torch.float16))
        grid, warps, c = launches[-1]
        assert grid == (3000,) and c["BLOCK_N"] == 4096 and c["SINGLE"] and warps == 8 and not c["STATS"]
        with pytest.raises(ValueError, match="rows"):
            kernel.rms_norm(torch.empty(1, 1).expand(2**31, 1), torch.ones(1))
    finally:
        kernel._launch, kernel.MAX_BLOCK_N = saved


def _assert_close_gpu(got, want, atol, rtol, name, chunk=1 << 26):
    """assert_close for tensors too large to copy to the host: compared on the GPU in chunks
    of rows, the first bad chunk then reported through fat.assert_close."""
    g2, w2 = got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])
    step = max(1, chunk // g2.shape[1])
    for i in range(0, g2.shape[0], step):
        a, b = g2[i:i + step].float(), w2[i:i + step].float()
        ok = ((a - b).abs() <= atol + rtol * b.abs()) | (a.isnan() & b.isnan())
        if not bool(ok.all()):
            fat.assert_close(g2[i:i + step], w2[i:i + step], atol, rtol, name=f"{name} rows {i}..")


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_review_repros_gpu():
    """On the GPU: out=x on the first call at a traced size and on the chunked path, and a
    transposed bf16 [600000, 4096] view (stride 600000: cols * stride passes 2**31)."""
    g = fat.gen(31)
    for shape, dt, block_n in (([8192, 4096], torch.bfloat16, None), ([64, 10000], torch.float32, None),
                               ([8, 1000], torch.float16, 256)):
        x = fat.randn(shape, dt, "cuda", g, mean=0.5)
        w = fat.randn(shape[-1:], dt, "cuda", g, mean=1.0)
        want = ref.rms_norm(x, w)
        y = kernel.rms_norm(x, w, out=x, block_n=block_n)
        fat.assert_close(y, want, *fat.tol("norm", dt), name=f"y {shape}")
    x = torch.randn(4096, 600000, device="cuda", dtype=torch.bfloat16).t()
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    assert x.stride() == (1, 600000)
    _assert_close_gpu(kernel.rms_norm(x, w), ref.rms_norm(x, w), *fat.tol("norm", torch.bfloat16), "y")


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_cuda_graph_unseen_rows_gpu():
    """No autotuner and no row count among the arguments: after one call at 5 rows, calls at
    row counts never seen (16, 1) compile nothing and can be captured in a CUDA graph."""
    g = fat.gen(41)
    w = fat.randn([4096], torch.bfloat16, "cuda", g, mean=1.0)
    kernel.rms_norm(fat.randn([5, 4096], torch.bfloat16, "cuda", g), w)
    torch.cuda.synchronize()
    for rows in (16, 1):
        x = fat.randn([rows, 4096], torch.bfloat16, "cuda", g)
        y = torch.empty_like(x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kernel.rms_norm(x, w, out=y)
        graph.replay()
        torch.cuda.synchronize()
        fat.assert_close(y, ref.rms_norm(x, w), *fat.tol("norm", torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_backward_gpu():
    """The one-pass backward on the GPU at traced shapes (llama's fp32 4x512x1024, bf16 rows of
    4096 and 8192) and the chunked one (rows of 10000), against eager or the fp32 chain; then a
    backward captured in a CUDA graph at row counts never run before."""
    cases = (([[4, 512, 1024]], "fp32"), ([[2048, 4096]], "bf16"), ([[64, 8192]], "bf16"), ([[16, 10000]], "fp32"))
    for i, (shapes, dt) in enumerate(cases):
        fat.run_grad_case(kernel, ref, adapter, shapes, dt, {"eps": 1e-6, "casting": "llama"}, "cuda", 60 + i)
    g = fat.gen(61)
    w = fat.randn([1024], torch.float32, "cuda", g, mean=1.0)

    def step(x, wl, dy):  # forward and backward in one capture: autograd runs each backward op
        y = kernel.RMSNormFunction.apply(x, wl, 1e-6, "llama")  # on its forward op's stream
        return torch.autograd.grad(y, [x, wl], dy)

    def leaves(rows):
        x = fat.randn([rows, 1024], torch.float32, "cuda", g).requires_grad_(True)
        return x, w.clone().requires_grad_(True), fat.randn([rows, 1024], torch.float32, "cuda", g)

    step(*leaves(7))  # compiles the kernels, at a row count the captures below do not use
    torch.cuda.synchronize()
    for rows in (5, 2051):
        x, wl, dy = leaves(rows)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            got = step(x, wl, dy)
        graph.replay()
        torch.cuda.synchronize()
        want = torch.autograd.grad(ref.rms_norm(x, wl, 1e-6), [x, wl], dy)
        for a, b in zip(got, want):
            fat.assert_close(a, b, 1e-3, 1e-3, name=f"graph-replayed backward, {rows} rows")


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("casting", ["llama", "fp32"])
def test_library_ops(dtype, casting):
    """bench's library op computes the reference's output where it is offered: F.rms_norm is
    the casting "fp32" chain (and, in fp32, the "llama" one), exactly on the CPU; the "llama"
    chain in fp16/bf16, which rounds once more, is refused, and F.rms_norm does differ from it
    there (so the refusal is needed)."""
    dt = fat.DTYPES[dtype]
    params = {"eps": 1e-6, "casting": casting}
    for shapes in ([[64, 257]], [[2, 3, 129]]):
        inputs = adapter.make_inputs(shapes, dt, params, "cpu", 0)
        ops, refused = adapter.library_ops(inputs, params)
        want = adapter.reference(ref, inputs, params)[0]
        if casting == "llama" and dt != torch.float32:
            assert ops == {} and "rounds the normalised x" in refused["rms_norm"]
            x = inputs["x"]
            got = torch.nn.functional.rms_norm(x, (x.shape[-1],), inputs["weight"], 1e-6)
            assert not torch.equal(got, want)
            continue
        assert refused == {} and set(ops) == {"rms_norm"}
        got = ops["rms_norm"](inputs)
        assert got.dtype == want.dtype and got.shape == want.shape
        fat.assert_close(got, want, 1e-6, 1e-6 if dt == torch.float32 else 0.0)


def test_library_ops_train():
    """F.rms_norm trains through autograd (bench's backward and full modes): its gradients
    are the fp32 chain's."""
    params = {"eps": 1e-6, "casting": "fp32"}
    inputs = adapter.make_inputs([[16, 129]], torch.float32, params, "cpu", 0)
    ops, _ = adapter.library_ops(inputs, params)
    a = {k: v.detach().clone().requires_grad_(True) for k, v in inputs.items()}
    b = {k: v.detach().clone().requires_grad_(True) for k, v in inputs.items()}
    dy = torch.randn(16, 129, generator=fat.gen(3))
    ga = torch.autograd.grad(ops["rms_norm"](a), [a["x"], a["weight"]], dy)
    gb = torch.autograd.grad(adapter.reference(ref, b, params)[0], [b["x"], b["weight"]], dy)
    for x, y in zip(ga, gb):
        fat.assert_close(x, y, 1e-5, 1e-5)
