"""CPU tests of the benchmark's timing (templates/_common/fa_testing.py), the harness's JSON
fields (harness.py) and a folder's bench.py output. No GPU: the timing loops run against a
simulated GPU (a clock, events and a stream that the fake calls advance); on a machine with
CUDA, test_gpu_smoke also times a real kernel.

Run: python -m pytest -q bench/test_timing.py (go test ./bench runs it with the pinned venv).
"""

import importlib.util
import itertools
import json
import math
import pathlib
import re
import shutil
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
COMMON = REPO / "templates" / "_common"


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fat = load(COMMON / "fa_testing.py", "_test_timing_fa_testing")
harness = load(HERE / "harness.py", "_test_timing_harness")


class SimGPU:
    """A GPU and a host clock: calls run host_us on the host, then gpu_us on the GPU, which
    starts a kernel when both it and the kernel's launch are ready. Events stamp the GPU's
    time when the stream reaches them."""

    def __init__(self):
        self.host = 0.0  # host clock, us
        self.gpu = 0.0  # when the stream is free, us
        self.log = []

    def call(self, host_us, gpu_us, what="call"):
        def fn():
            self.host += host_us
            self.gpu = max(self.gpu, self.host) + gpu_us
            self.log.append(what)
        return fn

    def sync(self):
        self.host = max(self.host, self.gpu)

    def clock(self):  # seconds, as time.perf_counter
        return self.host * 1e-6

    def event(self):
        gpu = self

        class Event:
            def record(self):
                gpu.log.append("event")
                self.t = max(gpu.gpu, gpu.host)

            def elapsed_time(self, end):  # ms, as torch.cuda.Event
                return (end.t - self.t) * 1e-3

        return Event()


def test_quantiles_match_triton():
    from triton.testing import _quantile

    xs = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0]
    assert fat.quantiles(xs) == pytest.approx(_quantile(xs, [0.5, 0.2, 0.8]))
    assert fat.quantiles([7.0]) == [7.0, 7.0, 7.0]
    with pytest.raises(ValueError):
        fat.quantiles([])


def test_rep_counts_as_do_bench():
    # 100 ms of 130 us calls: int(100 / 0.13) = 769; 25 ms of warm-up: 192
    assert fat.rep_counts(0.13, 25, 100) == (192, 769)
    assert fat.rep_counts(500, 25, 100) == (1, 1)  # at least one of each
    w, r = fat.rep_counts(0, 25, 100)  # an estimate of zero does not divide by zero
    assert w >= 1 and r >= 1


def test_loop_calls():
    cases = [
        (2.0, 10_000),  # 20 ms / 2 us
        (3.0, 6667),  # rounded up
        (40.0, 500),
        (1000.0, 20),
        (10_000.0, 10),  # at least WALL_MIN_CALLS
        (0.5, 10_000),  # at most WALL_MAX_CALLS
        (0.0, 10_000),
        (float("nan"), 10),
        (float("inf"), 10),
    ]
    for per_call, want in cases:
        assert fat.loop_calls(per_call) == want, per_call
    assert fat.loop_calls(40.0, target_ms=4) == 100


def test_flush_before_each_timed_call_outside_the_window():
    sim = SimGPU()
    fn = sim.call(host_us=5, gpu_us=40)
    flush = sim.call(host_us=0, gpu_us=130, what="flush")
    med, p20, p80 = fat._event_times_us(fn, flush, sim.event, sim.sync, warmup_ms=25, rep_ms=100)
    # only the call is timed, not the flush before it
    assert (med, p20, p80) == pytest.approx((40, 40, 40))
    # the estimate includes the flush: 5 x (130 + 40) us, so int(100 / 0.17) timed calls
    timed = "".join("F" if w == "flush" else "E" if w == "event" else "c" for w in sim.log)
    timed = timed[timed.rindex("c" * 10) + 10:]  # after the warm-up calls
    assert timed == "FEcE" * int(100 / 0.17)


def test_gpu_time_quantiles_of_varying_calls():
    sim = SimGPU()
    durations = itertools.cycle([20.0, 30.0, 40.0, 50.0, 60.0])

    def fn():
        sim.call(1, next(durations))()

    med, p20, p80 = fat._event_times_us(fn, sim.call(1, 100, "flush"), sim.event, sim.sync, 1, 10)
    assert p20 < med < p80
    assert med == pytest.approx(40, abs=1)
    assert 20 <= p20 and p80 <= 60


@pytest.mark.parametrize("host_us,gpu_us,wall", [
    (5.0, 40.0, 40.0),  # GPU-bound: the host runs ahead, the loop takes the GPU's time
    (12.0, 3.0, 12.0),  # host-bound: the GPU waits for each launch
])
def test_wall_and_host_time(host_us, gpu_us, wall):
    sim = SimGPU()
    r = fat._wall_times_us(sim.call(host_us, gpu_us), sim.sync, sim.clock)
    assert r["wall_us"] == pytest.approx(wall, rel=0.01)
    # the host time is the call's own, not the GPU's, even when the GPU is the bottleneck
    assert r["host_us"] == pytest.approx(host_us)
    # the loop runs about WALL_TARGET_MS (its count comes from an estimate of 5 calls)
    assert r["calls"] * r["wall_us"] == pytest.approx(fat.WALL_TARGET_MS * 1e3, rel=0.05)


def test_timing_refuses_without_cuda():
    if fat.cuda_ok():
        pytest.skip("CUDA is available here")
    called = []
    for f in (fat.gpu_time_us, fat.wall_time_us):
        with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
            f(lambda: called.append(1))
    assert not called


def test_flush_writes_then_reads():
    assert fat.FLUSH_BYTES >= 256 << 20  # over 4x the H200's L2
    fl = fat.L2Flush("cpu", 1 << 12)
    fl.written.fill_(7)
    fl()
    assert fl.nbytes == 1 << 12
    assert not fl.written.any()
    assert fl.sink.item() == fl.read.numel()  # the read buffer was summed: every line read


def test_provider_fields():
    gpu = [[10.0, 9.0, 11.0], [12.0, 11.5, 12.5], [11.0, 10.5, 11.8]]
    wall = [{"wall_us": 30.0, "host_us": 8.0, "calls": 600}, {"wall_us": 28.0, "host_us": 9.0, "calls": 700},
            {"wall_us": 35.0, "host_us": 7.5, "calls": 580}]
    f = harness.provider_fields("fused", gpu, wall)
    assert f == {"fused_us": 11.0, "fused_p20_us": 10.5, "fused_p80_us": 11.8, "fused_spread_us": [10.0, 12.0],
                 "fused_wall_us": 30.0, "fused_host_us": 8.0, "fused_wall_spread_us": [28.0, 35.0]}
    # secondary providers: medians only, under their JSON names
    assert harness.provider_fields("compile_max", gpu, wall) == {
        "compile_max_autotune_us": 11.0, "compile_max_autotune_wall_us": 30.0, "compile_max_autotune_host_us": 8.0}
    # ten rounds, one slowed by the host: the per-call spread leaves the slowest and fastest
    # out (20th..80th percentile), so that one slow round does not make a 30% gap noise
    rounds = [{"wall_us": w, "host_us": w, "calls": 100} for w in (28.0, 27.5, 28.2, 47.7, 28.4, 28.1, 27.2,
                                                                   28.3, 28.0, 28.6)]
    f = harness.provider_fields("fused", gpu, rounds)
    assert f["fused_wall_spread_us"] == [28.0, 28.4]  # the third lowest to the third highest
    # a provider whose per-call timing failed keeps its GPU time
    assert set(harness.provider_fields("eager", gpu, [])) == {"eager_us", "eager_p20_us", "eager_p80_us", "eager_spread_us"}


def test_fields_are_what_go_reads():
    """Every key the harness writes is a json tag of bench.Case or bench.Result."""
    gotags = set(re.findall(r'json:"([a-z0-9_]+)', "".join(p.read_text() for p in HERE.glob("result.go"))))
    gpu, wall = [[1.0, 1.0, 1.0]], [{"wall_us": 2.0, "host_us": 1.0, "calls": 10}]
    keys = {"wall_calls", "flush_bytes", "launch_counts", "launches", "eager_launches", "mode",
            "fused_peak_bytes", "eager_peak_bytes", "compile_peak_bytes"}
    for name in harness.KEYS:
        keys |= set(harness.provider_fields(name, gpu, wall))
    assert keys - gotags == set()


def test_timing_path(tmp_path):
    # from the checkout: the templates' copy
    assert harness.timing_path() == COMMON / "fa_testing.py"
    # beside the harness first (fuseadvise bench writes both into one folder)
    (tmp_path / "harness.py").write_text("")
    assert harness.timing_path(tmp_path / "harness.py") is None
    (tmp_path / "fa_testing.py").write_text("")
    assert harness.timing_path(tmp_path / "harness.py") == tmp_path / "fa_testing.py"


@pytest.mark.parametrize("copy_bw,graph", [
    (4e12, True),  # the fake case's 1 MiB: a 0.26 us floor, timed back to back in one graph
    (1e9, False),  # a 1 ms floor: each provider's graph replay, flushed
])
def test_harness_case_json(tmp_path, monkeypatch, copy_bw, graph):
    """run_folder's result for one case, with the GPU faked at its edges (the correctness
    check, the timing functions, the launch count, the copy): every provider gets its GPU
    time and its per-call figures under the names bench.Case reads."""
    import argparse
    import types

    import torch

    folder = tmp_path / "fake-fp32-4x8"
    folder.mkdir()
    for name, text in FAKE_FOLDER.items():
        (folder / name).write_text(text)
    with open(folder / "adapter.py", "a") as f:
        f.write("def gemm_only(inputs, params):\n    return 'gemm_only'\n")
    (folder / "fa_testing.py").write_text("DTYPES = {'fp32': None}\ndef run_case(*a):\n    pass\n")
    gpu = {"fused": [40.0, 39.0, 41.0], "eager": [90.0, 88.0, 92.0], "compile": [50.0, 49.0, 51.0], "gemm_only": [30.0, 29.0, 31.0]}
    wall = {"fused": 45.0, "eager": 120.0, "compile": 80.0, "gemm_only": 33.0}
    timing = types.SimpleNamespace(
        QUANTILES=fat.QUANTILES, graph_replay=lambda fn: fn,
        gpu_time_us=lambda fn, w, r: gpu[fn()],
        wall_time_us=lambda fn, ms: {"wall_us": wall[fn()], "host_us": wall[fn()] / 10, "calls": 500})
    monkeypatch.setattr(torch, "compile", lambda f, **kw: lambda inp: "compile")
    monkeypatch.setattr(torch._dynamo, "reset", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(harness.Bench, "launches", lambda self, fn: 1)
    monkeypatch.setattr(harness.Bench, "copy_time", lambda self, nbytes, graph: 12.5)
    args = argparse.Namespace(max_autotune=False, repeats=3, warmup=25.0, rep=100.0, graph_below_us=30.0, wall_ms=20.0, wall_rounds=2,
                              modes=["forward"], step_copies=8)
    b = harness.Bench(args, timing)
    b.copy_bw = copy_bw
    monkeypatch.setattr(b, "do_bench_cudagraph", lambda fn, rep, quantiles: [v * 1e-3 for v in gpu[fn()]])
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(harness.Bench, "peak_bytes", lambda self, fn: {"fused": 100, "eager": 300, "compile": 200}.get(fn()))
    results = b.run_folder(folder)
    assert len(results) == 1  # forward only: no --modes
    res = results[0]
    assert res["correct"] and res["cuda_graph"] == graph and res["mode"] == "forward"
    assert (res["fused_peak_bytes"], res["eager_peak_bytes"], res["compile_peak_bytes"]) == (100, 300, 200)
    assert res["timing"] == {p: "cudagraph" if graph else "graph-replay" for p in gpu}
    for p in ("fused", "eager", "compile"):
        assert res[f"{p}_us"] == gpu[p][0] and res[f"{p}_p20_us"] == gpu[p][1] and res[f"{p}_spread_us"] == [gpu[p][0]] * 2
        assert res[f"{p}_wall_us"] == wall[p] and res[f"{p}_host_us"] == wall[p] / 10
        assert res[f"{p}_wall_spread_us"] == [wall[p]] * 2
    assert res["gemm_only_us"] == 30.0 and res["gemm_only_wall_us"] == 33.0 and res["gemm_only_host_us"] == 3.3
    assert res["wall_calls"] == {p: 500 for p in gpu}
    assert res["copy_us"] == 12.5 and "launches" not in res  # counted after all timing
    counted = []
    monkeypatch.setattr(harness.Bench, "launches", lambda self, fn: counted.append(fn()) or len(counted))
    assert b.count_launches(folder) == {"launch_counts": folder.name, "launches": 1, "eager_launches": 2}
    assert counted == ["fused", "eager"]


@pytest.mark.parametrize("rounds,fair", [(1, False), (5, True)])
def test_per_call_rounds_share_the_drift(tmp_path, monkeypatch, rounds, fair):
    """Three providers doing the same work on a host that runs a third slower for the first
    20 ms of the per-call timing (of 60 ms). Timed a loop each, one after the other (one
    round), the first provider reads slower; in interleaved rounds with the order turned,
    each provider has a minority of its loops in the slow stretch and their medians agree.
    A harness that times providers one after the other fails the second case."""
    import argparse
    import types

    import torch

    folder = tmp_path / "fake-fp32-4x8"
    folder.mkdir()
    for name, text in FAKE_FOLDER.items():
        (folder / name).write_text(text)
    (folder / "fa_testing.py").write_text("DTYPES = {'fp32': None}\ndef run_case(*a):\n    pass\n")
    clock, loops = [0.0], []

    def wall_time_us(fn, ms):  # 10 us a call, 13.3 in the slow stretch
        us = 10.0 * (4 / 3 if clock[0] < 20.0 else 1.0)
        clock[0] += ms
        loops.append(ms)
        return {"wall_us": us, "host_us": us / 2, "calls": 100}

    timing = types.SimpleNamespace(QUANTILES=fat.QUANTILES, graph_replay=lambda fn: fn,
                                   gpu_time_us=lambda fn, w, r: [40.0, 39.0, 41.0], wall_time_us=wall_time_us)
    monkeypatch.setattr(torch, "compile", lambda f, **kw: lambda inp: "compile")
    monkeypatch.setattr(torch._dynamo, "reset", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(harness.Bench, "copy_time", lambda self, nbytes, graph: 12.5)
    monkeypatch.setattr(harness.Bench, "peak_bytes", lambda self, fn: 100)
    monkeypatch.setattr(sys, "path", list(sys.path))
    args = argparse.Namespace(max_autotune=False, repeats=1, warmup=25.0, rep=100.0, graph_below_us=30.0, wall_ms=20.0,
                              wall_rounds=rounds, modes=["forward"], step_copies=8)
    b = harness.Bench(args, timing)
    b.copy_bw = 1e9
    res = b.run_folder(folder)[0]
    assert loops == [20.0 / rounds] * (3 * rounds)  # fused, eager, compile: one loop each a round
    walls = {p: res[f"{p}_wall_us"] for p in ("fused", "eager", "compile")}
    assert (len(set(walls.values())) == 1) == fair, walls


FAKE_FOLDER = {
    "case.py": 'PATTERN = "fake"\nDTYPE = "fp32"\nSHAPES = [[4, 8]]\nPARAMS = {"p": float("inf")}\n',
    "kernel.py": "",
    "reference.py": "",
    "adapter.py": (
        "def make_inputs(shapes, dt, params, device, seed):\n    return {}\n"
        "def fused(kernel, inputs, params, poison=False):\n    return 'fused'\n"
        "def reference(ref, inputs, params):\n    return 'eager'\n"
        "def nbytes(shapes, dt, params):\n    return 1 << 20\n"
    ),
}


@pytest.fixture
def bench_py(tmp_path, monkeypatch):
    """A folder's bench.py over a fake kernel folder, imported with its own fa_testing."""
    for name, text in FAKE_FOLDER.items():
        (tmp_path / name).write_text(text)
    shutil.copy(COMMON / "fa_testing.py", tmp_path)
    shutil.copy(COMMON / "bench.py", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fa_testing", raising=False)
    mod = load(tmp_path / "bench.py", "_test_timing_bench")
    yield mod
    sys.modules.pop("fa_testing", None)


def run_main(mod, monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", ["bench.py", *args])
    rc = mod.main()
    return rc, json.loads(capsys.readouterr().out)


def test_bench_py_without_cuda(bench_py, monkeypatch, capsys):
    monkeypatch.setattr(bench_py.fat, "cuda_ok", lambda: False)
    rc, out = run_main(bench_py, monkeypatch, capsys)
    assert rc == 2
    assert out["pattern"] == "fake" and "needs CUDA" in out["error"]
    assert out["params"] == {"p": "inf"}  # JSON has no inf
    assert "times" not in out


def test_bench_py_json(bench_py, monkeypatch, capsys):
    import torch

    fat_ = bench_py.fat
    figures = {"fused": ([10.0, 9.5, 10.5], 14.0, 9.0), "eager": ([30.0, 29.0, 31.0], 35.0, 21.0)}
    monkeypatch.setattr(fat_, "cuda_ok", lambda: True)
    monkeypatch.setattr(fat_, "run_case", lambda *a: None)
    monkeypatch.setattr(fat_, "graph_replay", lambda fn: fn)
    monkeypatch.setattr(fat_, "gpu_time_us", lambda fn, w, r: figures[fn()][0])
    monkeypatch.setattr(fat_, "wall_time_us", lambda fn, ms: {"wall_us": figures[fn()][1], "host_us": figures[fn()][2], "calls": 1000})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "Fake GPU")
    rc, out = run_main(bench_py, monkeypatch, capsys, "--no-compile")
    assert rc == 0
    assert out["times"]["fused"] == {"median_us": 10.0, "p20_us": 9.5, "p80_us": 10.5, "timing": "graph-replay",
                                     "wall_us": 14.0, "host_us": 9.0, "calls": 1000}
    assert out["speedup_vs_eager"] == 3.0
    assert out["per_call_speedup_vs_eager"] == 2.5
    assert "speedup_vs_compile" not in out and "per_call_speedup_vs_compile" not in out
    assert out["flush_bytes"] == fat_.FLUSH_BYTES and out["device"] == "Fake GPU"
    assert out["fused_gbps"] == pytest.approx((1 << 20) / 10e-6 / 1e9)


@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA")
def test_gpu_smoke():
    import torch

    x = torch.randn(1 << 24, device="cuda")
    y = torch.empty_like(x)
    fn = lambda: torch.mul(x, 2.0, out=y)  # noqa: E731
    med, p20, p80 = fat.gpu_time_us(fat.graph_replay(fn) or fn, 5, 20)
    assert 0 < p20 <= med <= p80
    # 128 MiB moved: at most ~4.8 TB/s on an H200, and a flushed call cannot be faster
    assert med > 128 * 2**20 / 5e12 * 1e6
    r = fat.wall_time_us(fn, 5)
    assert r["calls"] >= fat.WALL_MIN_CALLS
    assert 0 < r["host_us"] and r["wall_us"] >= med * 0.5
    assert math.isfinite(r["wall_us"])


TRAIN_ADAPTER = """
import torch
GRAD_INPUTS = ["x", "w"]
def make_inputs(shapes, dt, params, device, seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(4, 8, generator=g), "w": torch.randn(8, generator=g), "flag": True}
def has_backward(params):
    return True
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w
    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        CALLS.append("backward")
        return dy * w, (dy * x).sum(0)
CALLS = []
def train(kernel, inputs, params):
    CALLS.append("forward")
    return Scale.apply(inputs["x"], inputs["w"])
def fused(kernel, inputs, params, poison=False):
    return inputs["x"] * inputs["w"]
def reference(ref, inputs, params):
    return inputs["x"] * inputs["w"]
def nbytes(shapes, dt, params):
    return 1 << 20
"""


def test_harness_training_modes(tmp_path, monkeypatch):
    """--modes backward,full: one more result per mode for a chain with a backward, after its
    gradients are checked; "backward" runs only the backward of one saved forward, "full" a
    forward and its backward per call; each provider's gradients are the chain's (here x * w
    through an autograd.Function, the eager product and a fake torch.compile)."""
    import argparse
    import types

    import torch

    folder = tmp_path / "train-fp32-4x8"
    folder.mkdir()
    (folder / "case.py").write_text('PATTERN = "scale"\nDTYPE = "fp32"\nSHAPES = [[4, 8]]\nPARAMS = {}\n')
    (folder / "kernel.py").write_text("")
    (folder / "reference.py").write_text("")
    (folder / "adapter.py").write_text(TRAIN_ADAPTER)
    (folder / "fa_testing.py").write_text(
        "DTYPES = {'fp32': None}\nCHECKED = []\ndef run_case(*a):\n    pass\n"
        "def run_grad_case(*a):\n    CHECKED.append(a[4])\n")
    grads = {}

    def wall(fn, ms):
        g = fn()
        if isinstance(g, tuple):  # a training call: torch.autograd.grad's result
            grads.setdefault(ms, []).append(g)
        return {"wall_us": 1.0, "host_us": 0.5, "calls": 10}

    timing = types.SimpleNamespace(QUANTILES=fat.QUANTILES, graph_replay=lambda fn: None,
                                   gpu_time_us=lambda fn, w, r: (fn(), [5.0, 4.0, 6.0])[1], wall_time_us=wall)
    monkeypatch.setattr(torch, "compile", lambda f, **kw: f)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(harness.Bench, "copy_time", lambda self, nbytes, graph: None)
    monkeypatch.setattr(harness.Bench, "peak_bytes", lambda self, fn: 7)
    args = argparse.Namespace(max_autotune=False, repeats=1, warmup=25.0, rep=100.0, graph_below_us=1.0,
                              wall_ms=20.0, wall_rounds=2, modes=["forward", "backward", "full"], step_copies=1)
    b = harness.Bench(args, timing)
    b.copy_bw = 1e9
    monkeypatch.setattr(sys, "path", list(sys.path))
    # the generator of the upstream gradients: on the CPU here
    results = b.run_folder(folder)
    assert [r["mode"] for r in results] == ["forward", "backward", "full"]
    assert all(r["correct"] for r in results), results
    for r in results[1:]:
        assert r["fused_us"] == 5.0 and r["eager_wall_us"] == 1.0 and r["compile_peak_bytes"] == 7
        assert "floor_us" not in r and "copy_us" not in r
    mods, _ = b.load_folder(folder)
    assert mods["fa_testing"].CHECKED == ["fp32"]  # gradients checked once, before timing
    calls = mods["adapter"].CALLS
    # backward mode: one forward when its call is built, then backwards only
    assert calls[:2] == ["forward", "backward"] and calls.count("forward") < calls.count("backward")
    # every provider's gradients are x * w's: d/dx = dy * w, d/dw = sum(dy * x)
    got = grads[10.0]  # --wall-ms 20 in 2 rounds
    assert len(got) == 12  # 3 providers x 2 modes x 2 rounds
    for g in got[1:]:
        torch.testing.assert_close(g[0], got[0][0])
        torch.testing.assert_close(g[1], got[0][1])


def test_mode_work():
    """Each mode's floor figures: the forward's nbytes and flops, the backward's bwd_nbytes and
    bwd_flops, full mode both summed; FLOPs None for a memory-bound chain, no training figures
    for an adapter without bwd_nbytes."""
    import types

    def adapter(**fns):
        base = {"nbytes": lambda s, d, p: 600}
        return types.SimpleNamespace(**{**base, **fns})

    mem = adapter(bwd_nbytes=lambda s, d, p: 1000)
    assert harness.mode_work(mem, [[4, 8]], None, {}, "forward") == (600, None)
    assert harness.mode_work(mem, [[4, 8]], None, {}, "backward") == (1000, None)
    assert harness.mode_work(mem, [[4, 8]], None, {}, "full") == (1600, None)
    gemm = adapter(flops=lambda s, d, p: 2e9, bwd_nbytes=lambda s, d, p: 1000, bwd_flops=lambda s, d, p: 4e9)
    assert harness.mode_work(gemm, [[4, 8]], None, {}, "forward") == (600, 2e9)
    assert harness.mode_work(gemm, [[4, 8]], None, {}, "backward") == (1000, 4e9)
    assert harness.mode_work(gemm, [[4, 8]], None, {}, "full") == (1600, 6e9)
    # the backward FLOPs alone (an adapter whose forward floor is its bytes): full adds them
    assert harness.mode_work(adapter(bwd_nbytes=lambda s, d, p: 1000, bwd_flops=lambda s, d, p: 4e9),
                             [[4, 8]], None, {}, "full") == (1600, 4e9)
    for mode in ("backward", "full"):
        assert harness.mode_work(adapter(), [[4, 8]], None, {}, mode) is None


@pytest.mark.parametrize("gemm_rate,flops", [
    (None, False),  # memory-bound: bytes over the copy bandwidth
    (1e8, True),  # GEMM-bound: FLOPs over the GEMM rate (longer than the bytes' time here)
])
def test_harness_training_floor(tmp_path, monkeypatch, gemm_rate, flops):
    """--modes backward,full with an adapter that has bwd_nbytes (and bwd_flops): each training
    result records its own floor_us, bytes (and flops), through the forward's floor_us method,
    and the copy of its bytes; the forward keeps its own."""
    import argparse
    import types

    import torch

    text = TRAIN_ADAPTER + "def bwd_nbytes(shapes, dt, params):\n    return 3 << 20\n"
    if flops:
        text += ("def flops(shapes, dt, params):\n    return 1e6\n"
                 "def bwd_flops(shapes, dt, params):\n    return 2e6\n")
    folder = tmp_path / "train-fp32-4x8"
    folder.mkdir()
    (folder / "case.py").write_text('PATTERN = "scale"\nDTYPE = "fp32"\nSHAPES = [[4, 8]]\nPARAMS = {}\n')
    (folder / "kernel.py").write_text("")
    (folder / "reference.py").write_text("")
    (folder / "adapter.py").write_text(text)
    (folder / "fa_testing.py").write_text(
        "DTYPES = {'fp32': None}\ndef run_case(*a):\n    pass\ndef run_grad_case(*a):\n    pass\n")
    timing = types.SimpleNamespace(QUANTILES=fat.QUANTILES, graph_replay=lambda fn: None,
                                   gpu_time_us=lambda fn, w, r: (fn(), [5.0, 4.0, 6.0])[1],
                                   wall_time_us=lambda fn, ms: (fn(), {"wall_us": 1.0, "host_us": 0.5, "calls": 10})[1])
    monkeypatch.setattr(torch, "compile", lambda f, **kw: f)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(harness.Bench, "copy_time", lambda self, nbytes, graph: nbytes / 1e6)
    monkeypatch.setattr(harness.Bench, "peak_bytes", lambda self, fn: 7)
    monkeypatch.setattr(harness.Bench, "gemm_rate", lambda self, dt: gemm_rate)
    args = argparse.Namespace(max_autotune=False, repeats=1, warmup=25.0, rep=100.0, graph_below_us=1.0,
                              wall_ms=20.0, wall_rounds=2, modes=["forward", "backward", "full"], step_copies=1)
    b = harness.Bench(args, timing)
    b.copy_bw = 1e9  # bytes per second: 1 MiB is 1048.576 us
    monkeypatch.setattr(sys, "path", list(sys.path))
    fwd, bwd, full = b.run_folder(folder)
    assert [r["mode"] for r in (fwd, bwd, full)] == ["forward", "backward", "full"]
    mib = (1 << 20) / 1e9 * 1e6  # us
    if flops:  # 1e6, 2e6 and 3e6 FLOPs at 1e8 FLOP/s: 10, 20 and 30 ms, longer than the bytes take
        want = {"forward": (1 << 20, 1e4), "backward": (3 << 20, 2e4), "full": (4 << 20, 3e4)}
        assert (fwd["flops"], bwd["flops"], full["flops"]) == (1e6, 2e6, 3e6)
    else:
        want = {"forward": (1 << 20, mib), "backward": (3 << 20, 3 * mib), "full": (4 << 20, 4 * mib)}
        assert not any("flops" in r for r in (fwd, bwd, full))
    for r in (fwd, bwd, full):
        assert r["correct"], r
        assert (r["bytes"], r["floor_us"]) == (want[r["mode"]][0], pytest.approx(want[r["mode"]][1])), r["mode"]
        assert r["copy_us"] == r["bytes"] / 1e6  # a copy of the mode's bytes


def test_harness_training_without_entry_point(tmp_path, monkeypatch):
    """A chain with a backward whose folder has no adapter.train: the training modes are
    reported as errors, not skipped silently."""
    import argparse
    import types

    folder = tmp_path / "notrain-fp32-4x8"
    folder.mkdir()
    (folder / "case.py").write_text('PATTERN = "scale"\nDTYPE = "fp32"\nSHAPES = [[4, 8]]\nPARAMS = {}\n')
    (folder / "kernel.py").write_text("")
    (folder / "reference.py").write_text("")
    (folder / "adapter.py").write_text(TRAIN_ADAPTER.replace("def train(", "def _train("))
    (folder / "fa_testing.py").write_text("DTYPES = {'fp32': None}\n")
    args = argparse.Namespace(modes=["forward", "full"])
    b = harness.Bench.__new__(harness.Bench)
    b.args = args
    import torch
    b.torch = torch
    monkeypatch.setattr(sys, "path", list(sys.path))
    mods, _ = b.load_folder(folder)
    out = b.run_training(folder, mods, ["full"])
    assert out[0]["mode"] == "full" and not out[0]["correct"] and "adapter.train" in out[0]["error"]


def test_assert_quack_names_a_nan():
    """A NaN in the result fails with its index and values (not an IndexError), a result as
    close to fp32 as eager passes, one twice as far plus the floor fails."""
    import torch
    w32 = torch.linspace(-1, 1, 7, dtype=torch.float64)
    w = w32 + 1e-3
    fat.assert_quack(w32 + 1.5e-3, w, w32)
    with pytest.raises(AssertionError, match="at \\(3,\\): got nan"):
        g = w32.clone()
        g[3] = float("nan")
        fat.assert_quack(g, w, w32)
    with pytest.raises(AssertionError, match="max\\|got-ref\\|"):
        fat.assert_quack(w32 + 3e-3, w, w32)
