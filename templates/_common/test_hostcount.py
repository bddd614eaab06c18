"""The host work of every template's training call, counted (hostcount.py): each case's fused
full call (training forward + backward) may dispatch at most its budget of ATen ops, never an
``.item()``, and the counter itself counts what it should.

Run: ``cd templates && TRITON_INTERPRET=1 python -m pytest -q -s _common/test_hostcount.py``
(-s prints each case's table rows); ``-m gpu`` without TRITON_INTERPRET checks on a GPU that a
steady-state call launches every kernel directly (no cache miss).
"""

import pathlib
import sys
import types

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import fa_testing as fat  # noqa: E402
import hostcount as hc  # noqa: E402

INTERP = pytest.mark.skipif(not fat.INTERPRET, reason="needs TRITON_INTERPRET=1")


@triton.jit
def _add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


@INTERP
def test_counter_counts_ops_launches_and_calls():
    x = torch.arange(6.0)

    def call():
        y = torch.empty_like(x)           # an allocation
        _add_one[(2,)](x, y, 6, BLOCK=4)  # a launch; the interpreter's own ATen ops are not counted
        z = y.view(2, 3)                  # a view
        return (z + x.view(2, 3)).sum()   # a view and two ops that compute

    out, c = hc.count(call)
    assert out.item() == 2 * sum(range(6)) + 6
    assert c.ops == {"empty_like": 1, "view": 2, "add": 1, "sum": 1}
    assert hc.split(c.ops) == (1, 2, 2)
    assert c.launches == {"_add_one": 1}
    assert c.pycalls is not None and c.pycalls >= 6  # empty_like, the launch, view x2, add, sum
    _, again = hc.count(call)
    assert again.pycalls == c.pycalls  # deterministic


@INTERP
def test_counter_sees_item_and_the_backward():
    w = torch.ones(3, requires_grad=True)

    def call():
        loss = (w * 2).sum()
        loss.item()
        return torch.autograd.grad(loss, w)

    _, c = hc.count(call)
    assert c.ops["_local_scalar_dense"] == 1
    assert c.ops["mul"] >= 2  # the forward's and the backward's


def test_gpu_launch_hook_counts_direct_launches_and_misses(monkeypatch):
    """The GPU branch of the launch hook, on stubs: a direct launch (the kernel module's _run,
    given a _COMPILED entry) counts as a launch, one through JITFunction.run as a launch and a
    miss; both are restored afterwards."""
    from triton.runtime.jit import JITFunction

    ran = []
    monkeypatch.setattr(fat, "INTERPRET", False)
    monkeypatch.setattr(JITFunction, "run", lambda self, *a, **k: ran.append(("jit", self.fn.__name__)))

    class Kernel:  # what _name reads of a JITFunction
        def __init__(self, name):
            self.fn = types.SimpleNamespace(__name__=name)

    module = type("Module", (), {})()
    module._run = lambda entry, grid, args, device: ran.append(("direct", entry[3].fn.__name__))
    before = (JITFunction.run, module._run)
    counter = hc.Counter()
    with hc._LaunchHook(counter, counter, module):
        module._run((None, None, None, Kernel("_fwd")), (1, 1, 1), (), 0)
        module._run((None, None, None, Kernel("_fwd")), (1, 1, 1), (), 0)
        JITFunction.run(Kernel("_bwd"), grid=(1, 1, 1), warmup=False)
    assert ran == [("direct", "_fwd"), ("direct", "_fwd"), ("jit", "_bwd")]
    assert counter.launches == {"_fwd": 2, "_bwd": 1} and counter.misses == 1
    assert (JITFunction.run, module._run) == before


@INTERP
@pytest.mark.parametrize("case", hc.CASES, ids=lambda c: c.pattern)
def test_budget(case):
    res = hc.measure(case)
    print()
    print(hc.table([(case, res)]))
    fused = res["fused"]
    if case.budget is None:
        assert "full" not in fused, f"{case.pattern} trains now: give it a budget"
        return
    full = fused["full"]
    n = sum(full.ops.values())
    assert n <= case.budget, (f"{case.pattern}: the fused full call dispatches {n} ATen ops, budget "
                              f"{case.budget}: {dict(full.ops)}")
    for call, c in fused.items():
        assert "_local_scalar_dense" not in c.ops, f"{case.pattern} {call}: an .item() (a device sync)"
    assert sum(full.launches.values()) == sum(fused["fwd"].launches.values()) + sum(fused["bwd"].launches.values())


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
@pytest.mark.parametrize("case", hc.CASES, ids=lambda c: c.pattern)
def test_gpu_launches_direct(case):
    """After a warm-up call, every launch of every call goes through the kernel module's cache
    of compiled kernels (none through JITFunction.run: 12-19 us of host time each), and the
    full call (autograd's device thread included) stays within the budget."""
    res = hc.measure(case, "cuda")
    print()
    print(hc.table([(case, res)]))
    for call, c in res["fused"].items():
        assert c.misses == 0, f"{case.pattern} {call}: {c.misses} launches missed the cache: {dict(c.launches)}"
    if case.budget is not None:
        n = sum(res["fused"]["full"].ops.values())
        assert n <= case.budget, f"{case.pattern}: {n} ATen ops on the GPU, budget {case.budget}"
