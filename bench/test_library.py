"""CPU tests of the harness's library ops (adapter.library_ops timed beside fused, eager and
torch.compile), of its torch.compile-to-SDPA signal, and of the backward mode's forward on the
CUDA-graph capture stream. The GPU is faked at its edges as in test_timing.py; the one test
that needs CUDA (a backward captured and replayed) is marked gpu and skipped without it.

Run: python -m pytest -q test_library.py (TestPythonTiming runs it).
"""

import argparse
import contextlib
import importlib.util
import pathlib
import re
import sys
import types

import pytest
import torch

HERE = pathlib.Path(__file__).resolve().parent
COMMON = HERE.parent / "templates" / "_common"


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


harness = load(HERE / "harness.py", "_test_library_harness")
fat = load(COMMON / "fa_testing.py", "_test_library_fa_testing")

# A folder whose providers return their own names, so the fake timing functions can look their
# times up; its library ops: one SDPA backend that raises (a backend refusing the case), two
# that run, FlexAttention, one op whose output is not the reference's, one that is, and one
# the adapter refuses itself.
LIB_ADAPTER = """
GRAD_INPUTS = []
def make_inputs(shapes, dt, params, device, seed):
    return {"q": None}
def fused(kernel, inputs, params, poison=False):
    return "fused"
def reference(ref, inputs, params):
    return "eager"
def nbytes(shapes, dt, params):
    return 1 << 30
def tolerance(dt, shapes, params, grad=False):
    return 0.0, 0.0
def has_backward(params):
    return False
def _raise():
    raise RuntimeError("No available kernel.  Aborting execution.\\nflash: the mask is not supported")
def library_ops(inputs, params):
    ops = {"sdpa_flash": lambda inp: _raise(), "sdpa_efficient": lambda inp: "sdpa_efficient",
           "sdpa_cudnn": lambda inp: "sdpa_cudnn", "flex": lambda inp: "flex", "rms_norm": lambda inp: "wrong",
           "addmm_gelu": lambda inp: "addmm_gelu"}
    return ops, {"sdpa_math": "the math backend is the eager chain itself\\n(second line)"}
"""
# its fa_testing: the GPU check passes; assert_close accepts the reference and the ops that compute it
LIB_FAT = """
DTYPES = {"bf16": None}
def run_case(*a):
    pass
def assert_close(got, want, atol, rtol, name="output"):
    if got == "wrong":
        raise AssertionError(name + ": 3 of 8 elements differ\\nat (0, 1): got 1.5, want 2.0")
"""


def fake_folder(tmp_path, name, adapter, fat_text, pattern="fake", params="{}"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "case.py").write_text(f'PATTERN = "{pattern}"\nDTYPE = "bf16"\nSHAPES = [[4, 8]]\nPARAMS = {params}\n')
    (folder / "kernel.py").write_text("")
    (folder / "reference.py").write_text("")
    (folder / "adapter.py").write_text(adapter)
    (folder / "fa_testing.py").write_text(fat_text)
    return folder


def fake_bench(monkeypatch, gpu, wall, modes=("forward",), graph_replay=lambda fn: fn):
    timing = types.SimpleNamespace(
        QUANTILES=fat.QUANTILES, graph_replay=graph_replay,
        gpu_time_us=lambda fn, w, r: gpu[fn()],
        wall_time_us=lambda fn, ms: {"wall_us": wall[fn()], "host_us": 2.0, "calls": 100})
    monkeypatch.setattr(torch, "compile", lambda f, **kw: lambda inp: "compile")
    monkeypatch.setattr(torch._dynamo, "reset", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(harness.Bench, "copy_time", lambda self, nbytes, graph: None)
    monkeypatch.setattr(harness.Bench, "configs", lambda self, kernel: "")
    monkeypatch.setattr(harness.Bench, "peak_bytes", lambda self, fn: {"fused": 100, "sdpa_efficient": 150}.get(fn(), 200))
    monkeypatch.setattr(sys, "path", list(sys.path))
    args = argparse.Namespace(max_autotune=False, repeats=1, warmup=25.0, rep=100.0, graph_below_us=1.0,
                              wall_ms=20.0, wall_rounds=2, modes=list(modes), step_copies=8)
    b = harness.Bench(args, timing)
    b.copy_bw = 1e12
    return b


def test_library_ops_timed_beside_the_others(tmp_path, monkeypatch):
    """Each library op that runs and computes the reference's output is timed like the other
    providers into the case's "library" entry; a backend that raises on its first call and an
    op whose output differs are refused with the first line of why; the adapter's own refusals
    are kept; the summary fields name the fastest SDPA backend and the fastest other op."""
    folder = fake_folder(tmp_path, "lib-bf16-4x8", LIB_ADAPTER, LIB_FAT)
    gpu = {"fused": [40.0, 39.0, 41.0], "eager": [90.0, 88.0, 92.0], "compile": [50.0, 49.0, 51.0],
           "sdpa_efficient": [35.0, 34.0, 36.0], "sdpa_cudnn": [30.0, 29.5, 30.5], "flex": [45.0, 44.0, 46.0],
           "addmm_gelu": [60.0, 59.0, 61.0]}
    wall = {k: v[0] + 10 for k, v in gpu.items()}
    b = fake_bench(monkeypatch, gpu, wall)
    res = b.run_folder(folder)[0]
    assert res["correct"], res
    lib = res["library"]
    assert lib["sdpa_flash"] == {"refused": "No available kernel.  Aborting execution."}
    assert lib["sdpa_math"] == {"refused": "the math backend is the eager chain itself"}
    assert lib["rms_norm"] == {"refused": "differs from the reference: output 0: 3 of 8 elements differ"}
    assert lib["sdpa_cudnn"] == {"us": 30.0, "p20_us": 29.5, "p80_us": 30.5, "spread_us": [30.0, 30.0],
                                 "wall_us": 40.0, "host_us": 2.0, "wall_spread_us": [40.0, 40.0],
                                 "timing": "graph-replay", "peak_bytes": 200}
    assert lib["sdpa_efficient"]["peak_bytes"] == 150 and lib["flex"]["us"] == 45.0
    assert (res["sdpa_us"], res["sdpa_backend"], res["flex_us"]) == (30.0, "cudnn", 45.0)
    assert (res["library_us"], res["library_op"]) == (60.0, "addmm_gelu")
    # the main providers as before; the library ops only under "library"
    assert res["fused_us"] == 40.0 and res["compile_us"] == 50.0
    assert set(res["timing"]) == {"fused", "eager", "compile"} and set(res["wall_calls"]) == set(res["timing"])
    assert not any(k.startswith(harness.LIB) for k in res)
    assert "compile_sdpa" not in res  # only attention cases record it


def test_library_op_timed_as_a_call_when_capture_fails(tmp_path, monkeypatch):
    """A library op that cannot be captured in a CUDA graph is timed as the plain call, and its
    entry says so."""
    folder = fake_folder(tmp_path, "lib-bf16-4x8", LIB_ADAPTER, LIB_FAT)
    gpu = {"fused": [40.0] * 3, "eager": [90.0] * 3, "compile": [50.0] * 3, "sdpa_efficient": [35.0] * 3,
           "sdpa_cudnn": [30.0] * 3, "flex": [45.0] * 3, "addmm_gelu": [60.0] * 3}
    wall = {k: 1.0 for k in gpu}
    replay = lambda fn: None if fn() == "flex" else fn  # noqa: E731
    res = fake_bench(monkeypatch, gpu, wall, graph_replay=replay).run_folder(folder)[0]
    assert res["library"]["flex"]["timing"] == "call" and res["library"]["sdpa_cudnn"]["timing"] == "graph-replay"


TRAIN_LIB_ADAPTER = """
import torch
GRAD_INPUTS = ["x", "w"]
def make_inputs(shapes, dt, params, device, seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(4, 8, generator=g), "w": torch.randn(8, generator=g)}
def has_backward(params):
    return True
def train(kernel, inputs, params):
    return inputs["x"] * inputs["w"]
def fused(kernel, inputs, params, poison=False):
    return inputs["x"] * inputs["w"]
def reference(ref, inputs, params):
    return inputs["x"] * inputs["w"]
def tolerance(dt, shapes, params, grad=False):
    return 1e-6, 1e-6
def nbytes(shapes, dt, params):
    return 1 << 20
class NoGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        return x * w
    @staticmethod
    def backward(ctx, dy):
        raise RuntimeError("derivative for aten::_addmm_activation is not implemented")
def library_ops(inputs, params):
    return {"mul": lambda inp: torch.mul(inp["x"], inp["w"]),
            "addmm_gelu": lambda inp: NoGrad.apply(inp["x"], inp["w"]),
            "wrong": lambda inp: inp["x"] + inp["w"]}, {}
"""


@pytest.mark.parametrize("p", [0.0, 0.1])
def test_library_ops_train_through_autograd(tmp_path, monkeypatch, p):
    """In the backward and full modes each library op trains through autograd like the eager
    chain: timed with its gradients, an op without a derivative refused with its message's
    first line, an op the forward's check refused not timed again. With dropout (p > 0) a
    library op's backward mode is timed as the plain call, never captured (SDPA's captured
    backward reads an uncaptured forward's Philox state as device pointers); the full mode,
    whose forward is captured with it, and the other providers still are."""
    folder = fake_folder(tmp_path, "trainlib-fp32-4x8", TRAIN_LIB_ADAPTER, params=f'{{"p": {p}}}', fat_text=
                         "import torch\nDTYPES = {'bf16': torch.float32}\ndef run_case(*a):\n    pass\n"
                         "def run_grad_case(*a):\n    pass\n"
                         "def assert_close(g, w, atol, rtol, name='output'):\n"
                         "    assert torch.allclose(g, w), name + ': differs'\n")
    grads = []

    def gpu_time(fn, w, r):
        g = fn()
        if isinstance(g, tuple):
            grads.append(g)
        return [5.0, 4.0, 6.0]

    timing = types.SimpleNamespace(QUANTILES=fat.QUANTILES, graph_replay=lambda fn: fn, gpu_time_us=gpu_time,
                                   wall_time_us=lambda fn, ms: {"wall_us": 1.0, "host_us": 0.5, "calls": 10})
    monkeypatch.setattr(torch, "compile", lambda f, **kw: f)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(harness.Bench, "copy_time", lambda self, nbytes, graph: None)
    monkeypatch.setattr(harness.Bench, "configs", lambda self, kernel: "")
    monkeypatch.setattr(harness.Bench, "peak_bytes", lambda self, fn: 7)
    monkeypatch.setattr(sys, "path", list(sys.path))
    real_make = None

    def cpu_inputs(mod):  # the harness asks for "cuda" inputs: make them on the CPU here
        nonlocal real_make
        real_make = mod.make_inputs
        mod.make_inputs = lambda shapes, dt, params, device, seed: real_make(shapes, dt, params, "cpu", seed)

    args = argparse.Namespace(max_autotune=False, repeats=1, warmup=25.0, rep=100.0, graph_below_us=0.0,
                              wall_ms=20.0, wall_rounds=2, modes=["forward", "backward", "full"], step_copies=2)
    b = harness.Bench(args, timing)
    b.copy_bw = 1e12
    mods, _ = b.load_folder(folder)
    cpu_inputs(mods["adapter"])
    results = b.run_folder(folder)
    assert [r["mode"] for r in results] == ["forward", "backward", "full"]
    # training modes' per-call figures: 2 chains in one grad call, over 2; the forward's alone
    assert "wall_copies" not in results[0] and results[0]["fused_wall_us"] == 1.0
    for r in results[1:]:
        assert r["wall_copies"] == 2 and (r["fused_wall_us"], r["fused_host_us"]) == (0.5, 0.25), r
    fwd = results[0]["library"]
    if p > 0:  # outputs are not compared under dropout: "wrong" is timed, as the others
        assert fwd["wrong"]["us"] == 5.0
        bwd, full = results[1], results[2]
        assert bwd["library"]["mul"]["timing"] == "call" and full["library"]["mul"]["timing"] == "graph-replay"
        assert bwd["timing"] == {"fused": "graph-replay", "eager": "graph-replay", "compile": "graph-replay"}
        return
    assert fwd["wrong"]["refused"].startswith("differs from the reference: output 0: differs")
    assert fwd["mul"]["us"] == 5.0 and fwd["addmm_gelu"]["us"] == 5.0  # its forward runs
    for r in results[1:]:
        lib = r["library"]
        assert lib["mul"]["us"] == 5.0 and lib["mul"]["peak_bytes"] == 7, r
        assert lib["addmm_gelu"] == {"refused": "derivative for aten::_addmm_activation is not implemented"}
        assert lib["wrong"] == fwd["wrong"]  # refused by the forward's check, not timed
        assert (r["library_us"], r["library_op"]) == (5.0, "mul")
    # every timed training provider's gradients are x * w's (fused, eager, compile, mul; 2 modes;
    # and the fused call that decides whether a case is timed back to back in one graph)
    assert len(grads) == 10
    for g in grads[1:]:
        torch.testing.assert_close(g[0], grads[0][0])
        torch.testing.assert_close(g[1], grads[0][1])


def test_library_ops_absent_or_broken():
    """No library_ops: nothing; a library_ops that raises: nothing either (logged); reasons cut
    to their first line."""
    assert harness.library_ops(types.SimpleNamespace(), {}, {}) == ({}, {})

    def broken(inputs, params):
        raise ValueError("bad")

    assert harness.library_ops(types.SimpleNamespace(library_ops=broken), {}, {}) == ({}, {})
    ops, refused = harness.library_ops(types.SimpleNamespace(library_ops=lambda i, p: ({"a": len}, {"b": "x\ny"})), {}, {})
    assert ops == {"a": len} and refused == {"b": "x"}


def test_call_op_passes_the_inputs_dict():
    """A library op gets the inputs dict itself (what adapter.reference gets), extras bound by
    default (an op made in a loop: lambda inp, be=be: ...) untouched."""
    t = torch.ones(2)
    inputs = {"q": t, "k": 2 * t, "mask": None, "flag": True}
    assert harness.call_op(lambda inp: inp["k"], inputs) is inputs["k"]
    assert harness.call_op(lambda inp, call=None, be=1: (inp, call, be), inputs) == (inputs, None, 1)


def test_library_summary():
    lib = {"sdpa_flash": {"refused": "no"}, "sdpa_efficient": {"us": 20.0}, "sdpa_cudnn": {"us": 12.0},
           "flex": {"us": 15.0}, "rms_norm": {"us": 3.0}, "other": {"us": 4.0}}
    assert harness.library_summary(lib) == {"sdpa_us": 12.0, "sdpa_backend": "cudnn", "flex_us": 15.0,
                                            "library_us": 3.0, "library_op": "rms_norm"}
    assert harness.library_summary({"sdpa_flash": {"refused": "no"}}) == {}


def test_library_fields_are_what_go_reads():
    """Every key the harness writes for library ops is a json tag of bench.Case or of
    bench.LibraryOp."""
    gotags = set(re.findall(r'json:"([a-z0-9_]+)', (HERE / "result.go").read_text()))
    fields = harness.provider_fields(harness.LIB + "x", [[1.0, 1.0, 1.0]], [{"wall_us": 2.0, "host_us": 1.0, "calls": 3}])
    entry = harness.library_entry(fields, harness.LIB + "x")
    assert set(entry) == {"us", "p20_us", "p80_us", "spread_us", "wall_us", "host_us", "wall_spread_us"}
    keys = set(entry) | {"timing", "peak_bytes", "refused", "library", "compile_sdpa"}
    keys |= set(harness.library_summary({"sdpa_a": {"us": 1.0}, "flex": {"us": 1.0}, "b": {"us": 1.0}}))
    assert keys - gotags == set()


def sdpa_chain(q, k, v):
    """The chain of Inductor's first fuse_attention pattern: matmul, div, softmax, matmul."""
    return torch.matmul(q, k.transpose(-2, -1)).div(8.0).softmax(dim=-1).matmul(v)


def tril_chain(q, k, v):
    """A causal chain through a tril buffer and masked_fill, which no pattern matches."""
    s = torch.matmul(q, k.transpose(-2, -1)) / 8.0
    keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, device=s.device).tril()
    return s.masked_fill(~keep, float("-inf")).softmax(dim=-1).matmul(v)


@pytest.mark.parametrize("chain,want", [(sdpa_chain, True), (tril_chain, False)])
def test_compile_rewrote_to_sdpa(chain, want, monkeypatch):
    """Inductor's rewrite of the eager chain to SDPA is seen (on the CPU: the same joint-graph
    patterns run there), and a chain it leaves alone is not mistaken for one; a second compile
    of the same chain, which Inductor's caches would answer without matching, still counts.
    The chain left alone compiles once and stops where Inductor would generate and build its
    C++ kernels (about 20 s on the CPU), after the pattern passes that would count a rewrite."""
    q, k, v = (torch.randn(2, 4, 16, 64) for _ in range(3))
    if want:
        for _ in range(2):
            torch._dynamo.reset()
            comp = torch.compile(chain)
            assert harness.compile_rewrote_to_sdpa(torch, lambda: comp(q, k, v)) is True
        return
    from torch._inductor.graph import GraphLowering

    class Lowered(Exception):
        """Raised where Inductor would generate code, after its graph passes (the rewrite's)."""

    def lowered(self, *args, **kwargs):
        raise Lowered()

    monkeypatch.setattr(GraphLowering, "compile_to_module", lowered)

    def first_call():
        with pytest.raises(Exception) as e:
            comp(q, k, v)
        cause = e.value
        while cause is not None and not isinstance(cause, Lowered):
            cause = cause.__cause__ or cause.__context__
        assert cause is not None, f"the compile failed before Inductor's lowering: {e.value!r}"

    torch._dynamo.reset()
    comp = torch.compile(chain)
    assert harness.compile_rewrote_to_sdpa(torch, first_call) is False


def test_backward_forward_on_capture_stream(monkeypatch):
    """The backward mode's forward runs once, when the call is built, inside
    on_capture_stream (the stream CUDA-graph captures use), so its backward is captured with
    it; the full mode's forward runs in each call, wherever that is."""
    where, inside = [], [False]

    @contextlib.contextmanager
    def fake(torch_, device):
        inside[0] = True
        yield
        inside[0] = False

    monkeypatch.setattr(harness, "on_capture_stream", fake)

    def fwd(inp):
        where.append(inside[0])
        return inp["x"] * inp["w"]

    inputs = {"x": torch.randn(4, 8), "w": torch.randn(8)}
    call = harness.training_call(torch, fwd, inputs, ["x", "w"], "backward")
    g1, g2 = call(), call()
    assert where == [True]  # one forward, on the capture stream; the calls run backwards only
    torch.testing.assert_close(g1[0], call.dys[0] * inputs["w"])
    torch.testing.assert_close(g2[1], (call.dys[0] * inputs["x"]).sum(0))
    where.clear()
    full = harness.training_call(torch, fwd, inputs, ["x", "w"], "full")
    full()
    assert where == [False, False]  # the upstream gradients' shapes, then the call's own forward


@pytest.mark.parametrize("mode", ["backward", "full"])
def test_step_call(mode, monkeypatch):
    """StepCall: k chains on their own leaves, one torch.autograd.grad over all of them per
    call (the engine's cost once, as in a model step); "backward" k retained backwards from
    forwards run once, "full" k forwards in each call; every chain's gradients are x * w's."""
    forwards, grads = [], []
    real_grad = torch.autograd.grad

    def counted(*a, **kw):
        grads.append(len(a[0]))
        return real_grad(*a, **kw)

    def fwd(inp):
        forwards.append(1)
        return inp["x"] * inp["w"]

    inputs = {"x": torch.randn(4, 8), "w": torch.randn(8)}
    call = harness.StepCall(torch, fwd, inputs, ["x", "w"], mode, 3)
    built = len(forwards)
    monkeypatch.setattr(torch.autograd, "grad", counted)
    for _ in range(2):
        got = call()
        assert len(got) == 6
        for i, c in enumerate(call.calls):
            torch.testing.assert_close(got[2 * i], c.dys[0] * inputs["w"])
            torch.testing.assert_close(got[2 * i + 1], (c.dys[0] * inputs["x"]).sum(0))
    assert grads == [3, 3]  # one grad call of 3 outputs per call
    assert len(forwards) - built == (0 if mode == "backward" else 6)
    w = harness.step_wall_time_us(types.SimpleNamespace(wall_time_us=lambda fn, ms: {"wall_us": 30.0, "host_us": 12.0, "calls": 5}),
                                  call, 3, 20.0)
    assert w == {"wall_us": 10.0, "host_us": 4.0, "calls": 5}


def test_on_capture_stream_cpu():
    """On a CPU device the block runs as it is (no CUDA call)."""
    ran = []
    with harness.on_capture_stream(torch, "cpu"):
        ran.append(1)
    assert ran == [1]


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA")
def test_gpu_backward_captured():
    """On a GPU the backward mode's call is captured in a CUDA graph (fa_testing.graph_replay,
    and triton's do_bench_cudagraph, which captures on the same stream) and the replay computes
    the same gradients as the plain call; before the forward ran on the capture stream, the
    capture failed and the backward was timed as a plain call."""
    from triton.testing import do_bench_cudagraph

    x = torch.randn(512, 1024, device="cuda")
    w = torch.randn(1024, device="cuda")
    fwd = lambda inp: torch.nn.functional.gelu(inp["x"] * inp["w"]).sum(-1)  # noqa: E731
    call = harness.training_call(torch, fwd, {"x": x, "w": w}, ["x", "w"], "backward")
    want = [g.clone() for g in call()]
    torch.cuda.synchronize()
    assert fat.graph_replay(call) is not None, "the backward could not be captured"
    assert do_bench_cudagraph(call, rep=5) > 0
    g = torch.cuda.CUDAGraph()  # the replay's own gradients
    with torch.cuda.graph(g):
        got = call()
    for a in got:
        a.zero_()
    g.replay()
    torch.cuda.synchronize()
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_folder_bench_py_times_library_ops(tmp_path, monkeypatch, capsys):
    """A folder's own bench.py times each library op like the providers under "library", and
    records a refusal (the adapter's, or the first line of what the op raised)."""
    import json
    import shutil

    (tmp_path / "case.py").write_text('PATTERN = "fake"\nDTYPE = "fp32"\nSHAPES = [[4, 8]]\nPARAMS = {}\n')
    (tmp_path / "kernel.py").write_text("")
    (tmp_path / "reference.py").write_text("")
    (tmp_path / "adapter.py").write_text(
        "def make_inputs(shapes, dt, params, device, seed):\n    return {}\n"
        "def fused(kernel, inputs, params, poison=False):\n    return 'fused'\n"
        "def reference(ref, inputs, params):\n    return 'eager'\n"
        "def nbytes(shapes, dt, params):\n    return 1 << 20\n"
        "def _no(inp):\n    raise RuntimeError('No available kernel.  Aborting execution.\\nmore')\n"
        "def library_ops(inputs, params):\n"
        "    return {'sdpa_cudnn': lambda inp: 'sdpa_cudnn', 'sdpa_flash': _no}, {'flex': 'no dropout\\nsecond line'}\n")
    shutil.copy(COMMON / "fa_testing.py", tmp_path)
    shutil.copy(COMMON / "bench.py", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fa_testing", raising=False)
    mod = load(tmp_path / "bench.py", "_test_library_bench_py")
    figures = {"fused": 10.0, "eager": 30.0, "sdpa_cudnn": 8.0}
    fat_ = mod.fat
    monkeypatch.setattr(fat_, "cuda_ok", lambda: True)
    monkeypatch.setattr(fat_, "run_case", lambda *a: None)
    monkeypatch.setattr(fat_, "graph_replay", lambda fn: fn)
    monkeypatch.setattr(fat_, "gpu_time_us", lambda fn, w, r: [figures[fn()]] * 3)
    monkeypatch.setattr(fat_, "wall_time_us", lambda fn, ms: {"wall_us": figures[fn()] + 5, "host_us": 2.0, "calls": 100})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "Fake GPU")
    monkeypatch.setattr(sys, "argv", ["bench.py", "--no-compile"])
    try:
        assert mod.main() == 0
    finally:
        sys.modules.pop("fa_testing", None)
    out = json.loads(capsys.readouterr().out)
    assert out["library"]["sdpa_cudnn"]["median_us"] == 8.0 and out["library"]["sdpa_cudnn"]["wall_us"] == 13.0
    assert out["library"]["sdpa_flash"] == {"refused": "No available kernel.  Aborting execution."}
    assert out["library"]["flex"] == {"refused": "no dropout"}
    assert set(out["times"]) == {"fused", "eager"}
