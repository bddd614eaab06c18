"""Tests for the swiglu template: run under TRITON_INTERPRET=1 on CPU, or on CUDA (mark gpu)."""

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
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_forward(device, dtype, shapes):
    for seed in fat.seeds(2):
        fat.run_case(kernel, ref, adapter, shapes, dtype, {}, device, seed)


@pytest.mark.parametrize("device", DEVICES)
def test_contiguous_and_transposed(device):
    g = fat.gen(2)
    gate = fat.randn([37, 70], torch.float32, device, g)
    up = fat.randn([70, 37], torch.float32, device, g).t()
    fat.assert_close(kernel.swiglu(gate, up, out=fat.poison(gate.shape, gate.dtype, device)),
                     ref.swiglu(gate, up), 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_inf(device):
    gate = torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.0, 100.0, -100.0, 2.0, 1.0]], device=device)
    up = torch.tensor([[1.0, 2.0, 3.0, float("inf"), float("nan"), 1.0, -float("inf"), 0.5]], device=device)
    fat.assert_close(kernel.swiglu(gate, up), ref.swiglu(gate, up), 1e-6, 1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_grad(device, dtype):
    fat.run_grad_case(kernel, ref, adapter, [[3, 5, 66]], dtype, {}, device, 9)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input(device):
    with pytest.raises(ValueError):
        kernel.swiglu(torch.randn(3, 4, device=device), torch.randn(3, 5, device=device))


# --- in place, overlaps, grids, 64-bit offsets -------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_in_place(device, dtype):
    # out=gate and out=up, gate and up separate tensors or the halves of one projection (their
    # rows interleave: the byte ranges overlap, the elements do not)
    dt = fat.DTYPES[dtype]
    g = fat.gen(21)
    proj = fat.randn([37, 300], dt, device, g, std=2.0)
    for half in (0, 1):
        for gate, up in (proj.clone().chunk(2, dim=-1), (proj[:, :150].clone(), proj[:, 150:].t().contiguous().t())):
            want = ref.swiglu(gate.clone(), up.clone())
            out = (gate, up)[half]
            assert kernel.swiglu(gate, up, out=out) is out
            fat.assert_close(out, want, *fat.tol("pointwise", dt))


@pytest.mark.parametrize("device", DEVICES)
def test_overlap_refused(device):
    proj = torch.randn(40, 128, device=device)
    gate, up = proj.chunk(2, dim=-1)
    flat = proj.view(-1)
    for out in (flat[1:].as_strided((40, 64), (128, 1)),  # gate shifted by one element
                flat[63:].as_strided((40, 64), (128, 1)),  # one element into up's rows
                flat[64:].as_strided((40, 64), (1, 40)),  # up's bytes, another layout
                flat[:2560].view(40, 64)):  # the first 20 rows of the buffer
        with pytest.raises(ValueError, match="shares memory with gate"):
            kernel.swiglu(gate, up, out=out)
    buf = torch.randn(40 * 64 + 1, device=device)
    with pytest.raises(ValueError, match="shares memory with up"):
        kernel.swiglu(gate.clone(), buf[1:].view(40, 64), out=buf[:-1].view(40, 64))
    # the halves side by side are disjoint even offset by rows: gate of rows 1.. vs up of rows 0..
    assert kernel._disjoint(gate[1:], up[:-1]) and kernel._disjoint(up, gate)
    assert not kernel._disjoint(gate, flat[1:].as_strided((40, 64), (128, 1)))
    assert not kernel._disjoint(up, flat[128 + 60:].as_strided((39, 64), (128, 1)))
    fat.assert_close(kernel.swiglu(gate, up, out=torch.empty_like(gate)), ref.swiglu(gate, up), 1e-5, 1e-5)
    with pytest.raises(ValueError, match="share memory"):  # an expanded out: rows on one row of memory
        kernel.swiglu(gate, up, out=torch.empty(64, device=device).expand(40, 64))


def test_disjoint_exact():
    # _disjoint against brute force over small strided layouts of one buffer: never True where
    # two elements coincide, and True for every disjoint pair of same-strided halves
    buf = torch.empty(400)
    for n, sm in ((3, 3), (3, 7), (4, 8), (1, 5), (5, 5)):
        m = 4
        for d in range(-40, 41):
            a = buf[100:].as_strided((m, n), (sm, 1))
            b = buf[100 + d:].as_strided((m, n), (sm, 1))
            ea = {100 + i * sm + j for i in range(m) for j in range(n)}
            eb = {100 + d + i * sm + j for i in range(m) for j in range(n)}
            assert kernel._disjoint(a, b) == (not ea & eb), (n, sm, d)


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
    # swiglu on [1, n] with n = 2**26 had 65536 column blocks on grid axis 1; axes 1 and 2 hold
    # at most 65535 programs, axis 0 2**31 - 1 (meta tensors: no kernel runs)
    both = torch.empty(shape[:-1] + [2 * shape[-1]], dtype=torch.bfloat16, device="meta", requires_grad=True)
    gate, up = both.chunk(2, dim=-1)
    M, N = gate.numel() // shape[-1], shape[-1]

    def run():
        y = kernel.SwiGLUFunction.apply(gate, up)
        y.backward(torch.empty_like(y))

    calls = _launches(monkeypatch, run)
    assert [k for k, *_ in calls] == [kernel._swiglu_fwd, kernel._swiglu_bwd]
    for k, grid, c, args in calls:
        assert tuple(args[3:5] if k is kernel._swiglu_fwd else args[5:7]) == (M, N)
        bm, bn = c["BLOCK_M"], c["BLOCK_N"]
        assert grid == ((M + bm - 1) // bm * ((N + bn - 1) // bn),) and grid[0] <= 2**31 - 1


def test_tiles_independent_of_rows(monkeypatch, tiles_of):
    # a new number of rows (batch, sequence length) runs the kernel compiled for another: the
    # same constexprs and warps at every M (and M is not specialized: do_not_specialize), so a
    # CUDA graph captured at an M never run before needs no compilation
    seen = set()
    for M in (1, 2, 16, 17, 3000, 2**20):
        gate, up = torch.empty(M, 2 * 768, dtype=torch.bfloat16, device="meta").chunk(2, dim=-1)
        calls = _launches(monkeypatch, lambda: kernel.swiglu(gate, up))
        assert len(calls) == 1
        seen.add(tuple(sorted(calls[0][2].items())))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [[3, 700], [40, 200], [2100]], ids=str)
def test_many_column_tiles(device, shape):
    g = fat.gen(5)
    gate, up = fat.randn(shape, torch.float32, device, g), fat.randn(shape, torch.float32, device, g)
    fat.assert_close(kernel.swiglu(gate, up, out=fat.poison(gate.shape, gate.dtype, device)), ref.swiglu(gate, up),
                     1e-5, 1e-5)


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not pathlib.Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("marker", [adapter.WIDE_ROWS, adapter.WIDE_COLS], ids=["rows", "cols"])
def test_offsets_past_2_31(device, marker):
    # gate and up side by side in a lazily allocated storage of 2**32 bf16 elements, row
    # (column) 2 at 2**31 + 128
    before = _rss_mb()
    shapes = [[3, 67] if marker == adapter.WIDE_ROWS else [67, 3], marker]
    inputs = adapter.make_inputs(shapes, torch.bfloat16, {}, device, 3)
    assert inputs["gate"].untyped_storage().nbytes() > 2**33 and max(inputs["up"].stride()) * 2 > 2**31
    fat.run_case(kernel, ref, adapter, shapes, "bf16", {}, device, 3)
    fat.run_grad_case(kernel, ref, adapter, shapes, "bf16", {}, device, 3)
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

    gate, up = randn(1, 2 * 2**26).chunk(2, dim=-1)  # [1, n], n = 2**26: 65536 column blocks before
    _close_on_gpu(kernel.swiglu(gate, up), ref.swiglu(gate, up), *tol)
    gate, up = randn(4096, 6000).chunk(2, dim=-1)
    want = ref.swiglu(gate, up)
    kernel.swiglu(gate, up, out=gate)  # in place on the first call of a shape
    _close_on_gpu(gate, want, *tol)
    for gate, up in (randn(4096, 600000).t(), randn(4096, 600000).t()), randn(600000, 8192).chunk(2, dim=-1):
        _close_on_gpu(kernel.swiglu(gate, up), ref.swiglu(gate, up), *tol)  # offsets past 2**31
        del gate, up


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", MEMORY, ids=str)
def test_memory_cases(device, shapes):
    # offsets past 2**31, in place and the refusals, as the verifier runs them
    fat.run_case(kernel, ref, adapter, shapes, "bf16", {}, device, 1)
