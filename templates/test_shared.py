"""Tests of the helpers every template carries (templates/_common/shared.py, copied into each
kernel.py as generated blocks): the alias check and the launch path's argument checks."""

import ast
import functools
import importlib.util
import pathlib

import pytest
import torch
import triton
import triton.language as tl

_spec = importlib.util.spec_from_file_location(
    "_fa_shared", pathlib.Path(__file__).resolve().parent / "_common" / "shared.py")
shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shared)


def test_span_covers_strided_and_empty():
    x = torch.empty(4, 6)
    es = x.element_size()
    assert shared._span(x) == (x.data_ptr(), x.data_ptr() + 24 * es)
    t = x.t()  # same bytes, other strides
    assert shared._span(t) == shared._span(x)
    col = x[:, 2]
    assert shared._span(col) == (x.data_ptr() + 2 * es, x.data_ptr() + (3 * 6 + 2 + 1) * es)
    e = x[:0]
    lo, hi = shared._span(e)
    assert lo == hi


def test_check_alias():
    x = torch.randn(8, 16)
    b = torch.randn(16)
    ok = torch.empty(8, 16)
    shared._check_alias("f", [("out", ok)], [("x", x), ("bias", b)])
    shared._check_alias("f", [("out", None)], [("x", x), ("bias", None)])
    # exactly the input, and allowed in place
    shared._check_alias("f", [("out", x)], [("x", x), ("bias", b)], in_place=("x",))
    cases = [
        ([("out", x)], ()),  # in place not allowed
        ([("out", x[1:])], ("x",)),  # shifted by a row: not element for element
        ([("out", x.t().contiguous().t())], ("x",)),  # a copy: fine, checked below
        ([("out", x.view(16, 8))], ("x",)),  # same bytes, other shape
        ([("out", x[:, :8])], ("x",)),  # part of x
    ]
    x_lo, x_hi = shared._span(x)
    for outs, in_place in cases:
        lo, hi = shared._span(outs[0][1])
        if hi <= x_lo or lo >= x_hi:  # the copy: disjoint from x wherever the allocator put it
            shared._check_alias("f", outs, [("x", x)], in_place=in_place)
            continue
        with pytest.raises(ValueError, match="shares memory with x"):
            shared._check_alias("f", outs, [("x", x)], in_place=in_place)
    # two outputs on one buffer
    buf = torch.empty(2, 8, 16)
    with pytest.raises(ValueError, match="output y shares memory with s"):
        shared._check_alias("f", [("s", buf[0]), ("y", buf.view(16, 16)[4:12])], [("x", x)])
    shared._check_alias("f", [("s", buf[0]), ("y", buf[1])], [("x", x)])
    # an output inside the bias
    with pytest.raises(ValueError, match="bias"):
        shared._check_alias("f", [("out", b.view(1, 16))], [("x", x), ("bias", b)])


@triton.jit
def _axpy(X, Y, n, a, BLOCK: tl.constexpr, NEG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m).to(tl.float32)
    y = a * x
    if NEG:
        y = -y
    tl.store(Y + offs, y, mask=m)


@pytest.mark.skipif(not shared.INTERPRET, reason="needs TRITON_INTERPRET=1")
def test_launch_interpreter():
    x = torch.randn(100)
    y = torch.full_like(x, float("nan"))
    shared._launch(_axpy, (triton.cdiv(100, 32),), (x, y, 100, 2.0), BLOCK=32, NEG=True)
    torch.testing.assert_close(y, -2.0 * x)
    with pytest.raises(TypeError, match="constexprs"):
        shared._launch(_axpy, (4,), (x, y, 100, 2.0), NEG=True, BLOCK=32)


@pytest.mark.skipif(not shared.INTERPRET, reason="needs TRITON_INTERPRET=1")
def test_planned_interpreter():
    """A _Planned launch computes what _launch does with its ints after the call's tensors, on
    every call (its first too), and keeps the grid and constexprs it was planned with."""
    p = shared._Planned(_axpy, (triton.cdiv(100, 32),), (100, 2.0), BLOCK=32, NEG=True)
    assert p.grid == (4, 1, 1) and p.tail == (100, 2.0, 32, True)
    for _ in range(2):
        x = torch.randn(100)
        y = torch.full_like(x, float("nan"))
        p.launch((x, y))
        torch.testing.assert_close(y, -2.0 * x)


@pytest.mark.skipif(not shared.INTERPRET and not torch.cuda.is_available(), reason="needs TRITON_INTERPRET=1 or CUDA")
@pytest.mark.parametrize("G,K,N,k0,dtypes", [
    (37, 1, 50, 0, (torch.float32,)),                 # [G, N]: groups and columns ragged against the blocks
    (9, 2, 33, 0, (torch.bfloat16, torch.float16)),   # both gradients, each in its own type
    (9, 2, 33, 1, (torch.bfloat16,)),                 # the second gradient alone
    (300, 2, 17, 0, (torch.float32, torch.float32)),  # more groups than one block of the GPU's
    (9, -2, 33, 0, (torch.bfloat16, torch.float32)),  # K < 0: the part stored [K, G, N], passed transposed
])
def test_part_sums(G, K, N, k0, dtypes):
    """_part_sums writes part[:, k0 + i].sum(0) into each out in its type, as the fp32 sum and
    a round-to-nearest cast (within fp32 rounding of the sum's order: one 16-bit ulp at most);
    nothing else is written (NaN canaries around)."""
    torch.manual_seed(0)
    device = "cpu" if shared.INTERPRET else "cuda"
    if K < 0:  # each gradient's groups together (a generic backward's buffers): a strided view
        K = -K
        part = torch.randn(K, G, N, device=device).transpose(0, 1)
    else:
        part = torch.randn(G, K, N, device=device) if K > 1 else torch.randn(G, N, device=device)
    bufs = [torch.full((N + 2,), float("nan"), dtype=dt, device=device) for dt in dtypes]
    shared._part_sums(part, [b[1:-1] for b in bufs], k0)
    for i, b in enumerate(bufs):
        want = (part[:, k0 + i] if K > 1 else part).sum(0).to(b.dtype)
        tol = 1e-5 if b.dtype == torch.float32 else 2.0 ** -7
        torch.testing.assert_close(b[1:-1], want, rtol=tol, atol=1e-5)
        assert b[0].isnan() and b[-1].isnan()


def test_spec_keys():
    assert shared._spec(1) != shared._spec(17)
    assert shared._spec(16) != shared._spec(17)
    assert shared._spec(2**31) != shared._spec(2**31 - 16)
    assert shared._spec(2.0) == shared._spec(3.5)
    assert shared._spec(True) != shared._spec(False)
    x = torch.empty(64)
    assert shared._spec(x) != shared._spec(x[1:])  # 16-byte alignment
    assert shared._spec(x) != shared._spec(x.half())
    assert shared._spec(True) != shared._spec(16) and shared._spec(False) != shared._spec(17)
    assert shared._spec_key((x, 16, 1.0, None)) == (shared._spec(x), shared._spec(16), shared._spec(2.0), None)


def _cuda():
    return torch.cuda.is_available() and not shared.INTERPRET


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_launch_gpu_specializations():
    """A cached compiled kernel is reused only for launches Triton would compile the same way:
    sizes 1, 16, 17 (specialized as a constant / by divisibility), misaligned pointers, other
    dtypes, other constexprs: each result right, before and after its cache entry exists."""
    base = torch.randn(4096 + 8, device="cuda")
    for _ in range(2):  # second round: every launch from the cache
        for n in (1, 16, 17, 1000, 4096):
            for off in (0, 1, 4):
                for dt in (torch.float32, torch.float16):
                    x = base[off:off + n].to(dt) if dt != torch.float32 else base[off:off + n]
                    y = torch.full((n + 3,), float("nan"), device="cuda")[3:]  # misaligned output
                    for neg in (False, True):
                        shared._launch(_axpy, (triton.cdiv(n, 256),), (x, y, n, 1.5), BLOCK=256, NEG=neg)
                        want = 1.5 * x.float() * (-1 if neg else 1)
                        torch.testing.assert_close(y, want, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_planned_gpu_specializations():
    """A _Planned launch reuses a compiled kernel only for tensors Triton would compile the same
    way (misaligned pointers, other dtypes: each its own entry) and shares _launch's cache
    entries; each result right, before and after its entry exists."""
    base = torch.randn(4096 + 8, device="cuda")
    for n in (1, 17, 4096):
        plans = {neg: shared._Planned(_axpy, (triton.cdiv(n, 256),), (n, 1.5), BLOCK=256, NEG=neg)
                 for neg in (False, True)}
        for _ in range(2):  # second round: every launch from the plans' entries
            for off in (0, 1, 4):
                for dt in (torch.float32, torch.float16):
                    x = base[off:off + n].to(dt) if dt != torch.float32 else base[off:off + n]
                    y = torch.full((n + 3,), float("nan"), device="cuda")[3:]  # misaligned output
                    for neg, p in plans.items():
                        p.launch((x, y))
                        want = 1.5 * x.float() * (-1 if neg else 1)
                        torch.testing.assert_close(y, want, rtol=1e-6, atol=1e-6)
        for p in plans.values():
            # x fp32 aligned (offset 0 or 4 elements) or not (1), fp16 (a copy: aligned); y misaligned
            assert len(p.entries) == 3
            for entry in p.entries.values():
                assert entry in shared._COMPILED.values()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_launch_gpu_hooks_and_streams():
    """The direct launch path: a launch hook (a profiler's) sees the cached launches, which then
    go through CompiledKernel[grid]; a launch on a side stream runs on that stream; an entry
    keeps its kernel object alive, so a new kernel object never takes a freed one's entry."""
    from triton import knobs
    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    shared._launch(_axpy, (4,), (x, y, 1000, 2.0), BLOCK=256, NEG=False)  # cached now
    seen = []
    # Triton 3.6 passes the hook a LazyDict (its get() gives the dict), older ones a dict
    hook = lambda metadata: seen.append((metadata if isinstance(metadata, dict) else metadata.get())["name"])  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        y.fill_(float("nan"))
        shared._launch(_axpy, (4,), (x, y, 1000, 3.0), BLOCK=256, NEG=False)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    torch.testing.assert_close(y, 3.0 * x)
    assert seen == ["_axpy"], seen
    s = torch.cuda.Stream()
    big = torch.randn(1 << 20, device="cuda")
    out = torch.full_like(big, float("nan"))
    grid = (triton.cdiv(big.numel(), 256),)
    shared._launch(_axpy, grid, (big, out, big.numel(), 1.0), BLOCK=256, NEG=True)  # compiled now,
    out.fill_(float("nan"))  # so that the launch below takes the cached path (a compile outlasts the sleep)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # the side stream busy for some ms: a launch on it waits
        shared._launch(_axpy, grid, (big, out, big.numel(), 1.0), BLOCK=256, NEG=True)
    # read on the default stream, which does not wait for s: still NaN unless the launch went
    # to the default stream (the sleep, 50M cycles, lasts ~25 ms)
    assert out[:1].cpu().isnan().all(), "the launch did not wait for the side stream"
    s.synchronize()
    torch.testing.assert_close(out, -big)
    for entry in shared._COMPILED.values():
        assert entry[-1] is not None, entry  # the kernel, alive as long as its entry


@pytest.mark.parametrize("gpu_best, host, eager", [
    # the library path fastest on the GPU, its host work a call twice a tile's: a tile in eager use
    ("library", {"library": 50.0, "tile": 28.0}, "tile"),
    # host work within a tenth: the GPU's choice everywhere
    ("library", {"library": 30.0, "tile": 29.0}, "library"),
    # GPU-bound (a tile's GPU time above both host figures): the GPU's choice
    ("library", {"library": 50.0, "tile": 28.0, "tile_ms": 0.080}, "library"),
    # a tile fastest on the GPU and cheapest a call: nothing kept apart
    ("tile", {"library": 50.0, "tile": 28.0}, "tile"),
])
def test_gemm_eager_pick(monkeypatch, gpu_best, host, eager):
    """A bucket with a library path keeps, for calls outside a CUDA graph capture and
    torch.compile, the path of the other kind where max(host work, GPU time) a call is lower;
    captures (and compiled code) keep the GPU's fastest; the host work is timed for the GPU's
    fastest and the other kind's fastest only."""
    tiles = shared._gemm_candidates(64, 256, 2)
    lib = shared.GEMM_LIBRARY
    tile_ms = host.get("tile_ms", 0.012)
    gpu = {t: tile_ms + 0.001 * k for k, t in enumerate(tiles)}  # tiles[0] the fastest tile
    gpu[lib] = 0.010 if gpu_best == "library" else 0.5
    timed = []
    monkeypatch.setattr(shared, "_GEMM_TUNE", True)
    monkeypatch.setattr(shared, "_GEMM_HOST", True)
    monkeypatch.setattr(shared, "_GEMM_TUNED", {})
    monkeypatch.setattr(shared, "_GEMM_EAGER", {})
    monkeypatch.setattr(shared, "_gemm_time_ms", lambda fn: fn())
    monkeypatch.setattr(shared, "_gemm_host_us", lambda fns: (
        timed.append(sorted(fns, key=str)) or {t: host["library" if t is lib else "tile"] for t in fns}))
    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    x = torch.empty(8, 256, dtype=torch.float16)
    pick = shared._gemm_tile(shared._gemm_time_ms, 64, 128, 256, x, (True,), gpu.get, library=True)
    want_gpu, want_eager = (lib if gpu_best == "library" else tiles[0]), (lib if eager == "library" else tiles[0])
    assert pick is want_eager  # the tuning call itself is made outside a capture
    assert timed == [sorted([lib, tiles[0]], key=str)]  # two candidates' host work timed, once
    again = shared._gemm_tile(shared._gemm_time_ms, 64, 128, 256, x, (True,), gpu.get, library=True)
    assert again is want_eager
    capturing[0] = True
    assert shared._gemm_tile(shared._gemm_time_ms, 64, 128, 256, x, (True,), gpu.get, library=True) is want_gpu
    # no library path: nothing timed but the GPU
    timed.clear()
    capturing[0] = False
    shared._gemm_tile(shared._gemm_candidates, 64, 128, 256, x, (True,), gpu.get)
    assert timed == []


@pytest.mark.parametrize("alt_host, want_alt", [(20.0, True), (27.0, False)])
def test_gemm_eager_alternatives(monkeypatch, alt_host, want_alt):
    """A caller's eager-use alternative to the fastest tile (the same tile on a kernel that is
    cheaper to launch) is timed on the GPU and the host with it, and kept for calls outside a
    capture where a call of it costs a tenth less; never the GPU-time choice. Untuned under
    the interpreter, an M of M % 5 == 4 runs the alternative, the library's buckets the
    library path."""
    tiles = shared._gemm_candidates(64, 256, 2)
    alt = tiles[0] + (1,)
    gpu = {t: 0.012 + 0.001 * k for k, t in enumerate(tiles)}
    gpu[alt] = 0.013
    ran, timed = [], []
    monkeypatch.setattr(shared, "_GEMM_TUNE", True)
    monkeypatch.setattr(shared, "_GEMM_HOST", True)
    monkeypatch.setattr(shared, "_GEMM_TUNED", {})
    monkeypatch.setattr(shared, "_GEMM_EAGER", {})
    monkeypatch.setattr(shared, "_gemm_time_ms", lambda fn: fn())
    monkeypatch.setattr(shared, "_gemm_host_us", lambda fns: (
        timed.append(sorted(fns, key=str)) or {t: alt_host if t == alt else 28.0 for t in fns}))
    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    x = torch.empty(8, 256, dtype=torch.float16)

    def run(t):
        ran.append(t)
        return gpu[t]

    def alts(t):
        return [t + (1,)]

    pick = shared._gemm_tile(shared._gemm_time_ms, 64, 128, 256, x, (True,), run, alts=alts)
    assert pick == (alt if want_alt else tiles[0])
    assert alt in ran and timed == [sorted([tiles[0], alt], key=str)]
    assert shared._GEMM_TUNED[next(iter(shared._GEMM_TUNED))] is tiles[0]  # the GPU's choice
    capturing[0] = True
    assert shared._gemm_tile(shared._gemm_time_ms, 64, 128, 256, x, (True,), run, alts=alts) == tiles[0]
    # untuned under the interpreter
    monkeypatch.setattr(shared, "_GEMM_TUNE", False)
    monkeypatch.setattr(shared, "INTERPRET", True)
    monkeypatch.setattr(shared, "_GEMM_TUNED", {})
    it = shared.GEMM_INTERP_TILE
    for m, library, want in ((9, False, it + (1,)), (8, False, it), (4, True, it + (1,)), (24, True, shared.GEMM_LIBRARY),
                             (9, True, it + (1,))):
        got = shared._gemm_tile(shared._gemm_time_ms, m, 128, 256, x, (True,), run, library, alts)
        assert got == want, (m, library, got)
    assert shared._gemm_tile(shared._gemm_time_ms, 9, 128, 256, x, (True,), run) == it  # no alternatives


def test_gemm_eager_pick_times_whole_calls(monkeypatch):
    """With the caller's whole call (call), the host work a candidate costs is timed on a
    whole call in which every _gemm_tile lookup gives that candidate (the wrapper's own work
    counts): a path whose launches cost more host work but whose GPU time is lower keeps
    losing to a one-launch alternative once the wrapper's common work is in both."""
    tiles = shared._gemm_candidates(64, 256, 2)
    alt = tiles[0] + (2,)
    gpu = {t: 0.020 for t in tiles}
    gpu[tiles[0]], gpu[alt] = 0.018, 0.034  # the alternative: one launch, slower on the GPU
    monkeypatch.setattr(shared, "_GEMM_TUNE", True)
    monkeypatch.setattr(shared, "_GEMM_HOST", True)
    monkeypatch.setattr(shared, "_GEMM_TUNED", {})
    monkeypatch.setattr(shared, "_GEMM_EAGER", {})
    monkeypatch.setattr(shared, "_gemm_time_ms", lambda fn: fn())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    x = torch.empty(8, 256, dtype=torch.float16)
    launches_us = {tiles[0]: 27.0, alt: 10.0}  # two launches against one
    wrapper_us = 25.0  # the wrapper's own work, the same for both
    seen = []

    def call(t):  # the wrapper: its own lookup gives the forced candidate
        got = shared._gemm_tile(shared._gemm_time_ms, 64, 128, 256, x, (True,), run, False, alts, call)
        seen.append((t, got))
        return wrapper_us + launches_us[got]

    def timing(fns):  # what _gemm_host_us would measure: the host work of each fns entry
        out = {}
        for t, fn in fns.items():
            seen.clear()
            fn()
            out[t] = wrapper_us + launches_us[t] if seen else launches_us[t]
        return out

    def run(t):
        return gpu[t]

    def alts(t):
        return [t + (2,)]

    monkeypatch.setattr(shared, "_gemm_host_us", timing)
    assert shared._gemm_tile(shared._gemm_time_ms, 64, 128, 256, x, (True,), run, False, alts, call) == alt
    assert all(t == got for t, got in seen) and shared._GEMM_FORCED.t == []
    # another thread's lookup meanwhile is not forced
    import threading
    other = []
    shared._GEMM_FORCED.t.append(tiles[1])  # this thread: forced to another tile
    try:
        th = threading.Thread(target=lambda: other.append(
            shared._gemm_tile(shared._gemm_time_ms, 64, 128, 256, x, (True,), run, False, alts, call)))
        th.start()
        th.join()
    finally:
        shared._GEMM_FORCED.t.pop()
    assert other == [alt]  # the bucket's eager-use choice, not a forced one
    # timed on the launches alone, the two-launch path looks cheaper: max(27, 18) < max(10, 34)
    monkeypatch.setattr(shared, "_GEMM_TUNED", {})
    monkeypatch.setattr(shared, "_GEMM_EAGER", {})
    assert shared._gemm_tile(shared._gemm_time_ms, 64, 128, 256, x, (True,), run, False, alts) == tiles[0]


def test_gemm_eager_pick_host_timing_fails(monkeypatch):
    """Host timing that raises (it runs inside a user's first call of the bucket) leaves the
    GPU's choice, for every use, and keeps nothing apart."""
    def broken(fns):
        raise RuntimeError("host timing")

    lib = shared.GEMM_LIBRARY
    monkeypatch.setattr(shared, "_GEMM_TUNE", True)
    monkeypatch.setattr(shared, "_GEMM_HOST", True)
    monkeypatch.setattr(shared, "_GEMM_TUNED", {})
    monkeypatch.setattr(shared, "_GEMM_EAGER", {})
    monkeypatch.setattr(shared, "_gemm_time_ms", lambda fn: fn())
    monkeypatch.setattr(shared, "_gemm_host_us", broken)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    x = torch.empty(8, 256, dtype=torch.float16)
    gpu = lambda t: 0.010 if t is lib else 0.012  # noqa: E731
    assert shared._gemm_tile(shared._gemm_time_ms, 64, 128, 256, x, (True,), gpu, library=True) is lib
    assert shared._GEMM_EAGER == {}


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_gemm_time_is_gpu_time():
    """The GEMM tuner's timer measures the GPU's time, not the host's: a call that spends
    1 ms on the host before one tiny kernel times below one that queues about 25 us of GPU
    work at once (triton's do_bench, which timed the call itself, ranks them the other way);
    the call runs on the current stream's inputs and leaves nothing pending."""
    import time

    x = torch.randn(1024, device="cuda")

    def host_heavy():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1e-3:
            pass
        x.mul_(1.0)

    def gpu_heavy():
        torch.cuda._sleep(50_000)  # about 25 us at the H200's clock
        x.mul_(1.0)

    fast, slow = shared._gemm_time_ms(host_heavy), shared._gemm_time_ms(gpu_heavy)
    assert fast < 0.015 < slow < 1.0, (fast, slow)
    import triton.testing
    assert triton.testing.do_bench(host_heavy, warmup=2, rep=10) > triton.testing.do_bench(gpu_heavy, warmup=2, rep=10)


def _desc_wrapper(launcher, tensordesc_indices, tensordesc_meta):
    """A launcher of the form Triton 3.6's wrap_handle_tensordesc makes (its closure's names)."""
    def inner(*args):
        return launcher, tensordesc_indices, tensordesc_meta
    return inner


def test_tma_direct_matches_triton(monkeypatch):
    """The direct TMA launch hands the C launch function what Triton 3.6's wrapper would
    (make_tensordesc_arg per descriptor, fp4's doubled last dim included), encodes a
    descriptor once per base address, shape, strides and metadata (a new address or stride
    is encoded again), and is refused for a launcher of another form."""
    if not shared._TRITON_3_6:
        pytest.skip("Triton 3.6's launcher layout")
    from triton.backends.nvidia import driver as nvidia
    calls = []

    def fill(*args):
        calls.append(args)
        return ("map", len(calls))

    monkeypatch.setattr(shared, "_TMA_ENCODE", [fill, nvidia.TMA_DTYPE_DEVICE_TO_HOST])
    monkeypatch.setattr(shared, "_TMA_MAPS", {})
    metas = [{"swizzle": 3, "elem_size": 2, "elem_type": 9, "block_size": [64, 32], "fp4_padded": False},
             {"swizzle": 2, "elem_size": 1, "elem_type": 8, "block_size": [16, 64], "fp4_padded": True}]
    c_launch = object()
    entry = (_desc_wrapper(c_launch, {0, 1}, metas), (), None, None)
    launch, tuples = shared._tma_direct(entry, 2)
    assert launch is c_launch
    a, b = torch.empty(100, 40, dtype=torch.bfloat16), torch.empty(30, 64, dtype=torch.uint8)
    descs = [shared._desc(a, [100, 40], [40, 1], [64, 32]), shared._desc(b, [30, 64], [64, 1], [16, 64])]
    got = [x for d, m in zip(descs, tuples) for x in shared._tma_map(d, m)]

    class _Utils:
        fill_tma_descriptor = staticmethod(fill)
    monkeypatch.setattr(triton.runtime.driver, "_active", type("D", (), {"utils": _Utils()})(), raising=False)
    monkeypatch.setattr(type(triton.runtime.driver), "active", property(lambda self: self._active), raising=False)
    want = [x for d, m in zip(descs, metas) for x in nvidia.make_tensordesc_arg(d, m)]
    assert [x for x in got if not isinstance(x, tuple)] == [x for x in want if not isinstance(x, tuple)]
    assert calls[0] == calls[2] and calls[1] == calls[3], calls  # the same encoding as Triton's
    assert calls[1][5] == [30, 128]  # fp4: the last dim doubled
    n = len(calls)
    shared._tma_map(descs[0], tuples[0])  # kept
    assert len(calls) == n
    shared._tma_map(shared._desc(a[1:], [99, 40], [40, 1], [64, 32]), tuples[0])  # another address
    shared._tma_map(shared._desc(a, [100, 40], [48, 1], [64, 32]), tuples[0])  # another stride
    assert len(calls) == n + 2
    # other launchers: no direct path
    assert shared._tma_direct(entry, 1) is None  # the descriptors are not the leading arguments
    assert shared._tma_direct((_desc_wrapper(c_launch, {0, 1}, None), (), None, None), 2) is None
    assert shared._tma_direct((lambda *args: None, (), None, None), 2) is None


@triton.jit
def _tma_copy(in_desc, out_desc, SCALE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    x = in_desc.load([pid_m * BLOCK_M, pid_n * BLOCK_N]).to(tl.float32)
    out_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (x * SCALE).to(out_desc.dtype))


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda() or torch.cuda.get_device_capability()[0] < 9, reason="needs a TMA GPU")
def test_gemm_launch_tma_direct_gpu():
    """_gemm_launch's direct TMA path (kept encodings) is right call after call when the
    tensors' addresses, shapes and strides change, on the current stream, and matches the
    launch through Triton's own wrapper; a launch hook sends it through CompiledKernel[grid]."""
    from triton import knobs
    g = torch.Generator(device="cuda").manual_seed(3)
    bm, bn = 32, 64
    tile = (bm, bn, 16, 1, 4)
    seen = []
    for rows, cols, pad, off in ((64, 128, 0, 0), (96, 128, 0, 0), (64, 128, 64, 0), (64, 128, 0, 64),
                                 (64, 128, 0, 0), (130, 200, 8, 8)):
        base = torch.randn(rows * (cols + pad) + off, generator=g, device="cuda", dtype=torch.bfloat16)
        x = base[off:].view(rows, cols + pad)[:, :cols]
        y = torch.full((rows, cols), float("nan"), dtype=torch.bfloat16, device="cuda")
        grid = ((rows + bm - 1) // bm, (cols + bn - 1) // bn, 1)
        descs = (shared._desc(x, [rows, cols], [cols + pad, 1], [bm, bn]),
                 shared._desc(y, [rows, cols], [cols, 1], [bm, bn]))
        shared._gemm_launch(_tma_copy, grid, descs, (), tile, SCALE=2.0)
        torch.testing.assert_close(y, 2.0 * x, rtol=0, atol=0)
        seen.append(len(shared._TMA_MAPS))
    assert shared._TMA_LAUNCH, "the direct path was not taken"
    assert seen[-1] > seen[0]
    hook = lambda metadata: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        y.fill_(float("nan"))
        shared._gemm_launch(_tma_copy, grid, descs, (), tile, SCALE=2.0)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    torch.testing.assert_close(y, 2.0 * x, rtol=0, atol=0)


class _OnGPU(torch.Tensor):
    """A CPU tensor that says it lives on cuda:1 (for the device guard's test, on a CPU)."""

    def get_device(self):
        return 1


def test_on_their_device(monkeypatch):
    """A call whose tensors are on another GPU than the current one runs with theirs current
    (the launches, their stream and the GEMM tuner all take the current device) and leaves the
    current device as it was; a call on the current device, on the CPU, or under torch.compile
    runs as it is. The device comes from the first tensor (also inside a tuple: fused_backward's
    inputs), a keyword argument, or a CUDA device argument (dropout_mask's)."""
    current, entered = [0], []

    class Device:  # torch.cuda.device, on a machine without CUDA
        def __init__(self, d):
            self.d = d

        def __enter__(self):
            entered.append(self.d)
            self.prev, current[0] = current[0], self.d

        def __exit__(self, *exc):
            current[0] = self.prev

    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: current[0])
    monkeypatch.setattr(torch.cuda, "device", Device)

    @shared._on_their_device
    def where(*args, **kwargs):
        """Where it ran."""
        return current[0]

    assert where.__name__ == "where" and where.__doc__ == "Where it ran."
    on1, cpu = torch.zeros(2).as_subclass(_OnGPU), torch.zeros(2)
    cases = [  # (args, kwargs, the device the call runs on)
        ((on1, cpu), {}, 1),
        ((cpu, on1), {}, 0),            # the first tensor decides (the kernels refuse a mix)
        ((7, "tanh", on1), {}, 1),
        (((on1, cpu), [cpu]), {}, 1),   # fused_backward(inputs, douts)
        ((), {"x": on1}, 1),
        (((4, 8), 0.1, 5, "cuda:1"), {}, 1),
        (((4, 8), 0.1, 5, torch.device("cuda", 1)), {}, 1),
        (((4, 8), 0.1, 5, "cuda"), {}, 0),
        (((4, 8), 0.1, 5, "cpu"), {}, 0),
        ((cpu,), {}, 0),
    ]
    for args, kwargs, want in cases:
        entered.clear()
        assert where(*args, **kwargs) == want, (args, kwargs)
        assert entered == ([want] if want else []), (args, kwargs)
        assert current[0] == 0
    current[0] = 1  # already current: no switch
    assert where(on1) == 1 and entered == []
    current[0] = 0
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert where(on1) == 0 and entered == []


def _calls(fn):
    """The names a function's body calls (nested closures and lambdas included): plain names,
    and ``Cls.apply`` as ``Cls.forward``."""
    out = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name):
            out.add(f.id)
        elif isinstance(f, ast.Attribute):
            if f.attr == "apply" and isinstance(f.value, ast.Name):
                out.add(f.value.id + ".forward")
            elif f.attr == "launch":  # a _Planned launch
                out.add("_launch")
    return out


def _unguarded_launches(src):
    """The public functions and modules' forwards of a kernel.py (its source) that reach a
    kernel launch without passing through a function decorated with _on_their_device."""
    tree = ast.parse(src)
    funcs, guarded, public = {}, set(), []
    for node in tree.body:
        defs = [(node.name, node)] if isinstance(node, ast.FunctionDef) else []
        if isinstance(node, ast.ClassDef):
            defs = [(f"{node.name}.{m.name}", m) for m in node.body if isinstance(m, ast.FunctionDef)]
            if not node.name.startswith("_") and any(m.name == "forward" for _, m in defs):
                public.append(f"{node.name}.forward")
        for name, fn in defs:
            funcs[name] = fn
            if any(isinstance(d, ast.Name) and d.id == "_on_their_device" for d in fn.decorator_list):
                guarded.add(name)
            if isinstance(node, ast.FunctionDef) and not name.startswith("_"):
                public.append(name)

    @functools.lru_cache(maxsize=None)
    def bare(name):  # launches, somewhere below, outside a guarded function
        if name in guarded:
            return False
        calls = _calls(funcs[name])
        return "_launch" in calls or any(c in funcs and c != name and bare(c) for c in calls - {"_launch"})

    return [name for name in public if name not in guarded and bare(name)]


_KERNELS = sorted(pathlib.Path(__file__).resolve().parent.glob("*/kernel.py")) + sorted(
    (pathlib.Path(__file__).resolve().parents[1] / "codegen" / "testdata" / "golden" / "generic").glob("*/kernel.py"))


@pytest.mark.parametrize("path", _KERNELS, ids=lambda p: p.parent.name)
def test_every_entry_is_on_their_device(path):
    """Every public function of a kernel (catalog templates and the generic goldens) that
    launches a kernel does so inside _on_their_device; so does every module's forward."""
    assert _unguarded_launches(path.read_text()) == []


def test_unguarded_launches_are_found():
    src = ("def _k(): _launch(1)\n"
           "@_on_their_device\ndef good(x): return _k()\n"
           "def bad(x): return _k()\n"
           "def via_good(x): return good(x)\n"
           "class _F:\n    def forward(ctx, x): return _k()\n"
           "def apply_bad(x): return _F.apply(x)\n"
           "class M:\n    def forward(self, x): return _k()\n"
           "def planned(p): p.launch((1,))\n")
    assert _unguarded_launches(src) == ["bad", "apply_bad", "M.forward", "planned"]
