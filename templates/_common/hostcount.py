"""The host work of a template's calls, counted: the ATen ops a call dispatches and the Triton
kernels it launches, for the fused chain and for the eager reference, in four calls:

- ``infer``: the inference forward (``adapter.fused``, what bench's forward mode times);
- ``fwd``: the training forward (``adapter.train`` on leaves that require grad);
- ``bwd``: the backward of one such forward (``torch.autograd.grad`` from its saved state);
- ``full``: the training forward and its backward (bench's full mode).

Why counts and not times: on the H200 a fused forward + backward took twice eager's wall time
per call although its GPU time was lower (issue 13). Every dispatched op costs host time
(1-10 us on a GPU: the dispatcher, an allocation, a kernel launch for the ops that compute),
and the count is the same on every machine, so a CPU test can hold it to a budget. The ops are
counted below autograd (a ``TorchDispatchMode``), split into allocations (``empty*``),
views and metadata (``view``, ``as_strided``, ``detach``, ...) and the rest (ops that compute:
on a GPU each is a kernel launch or a copy; ``_local_scalar_dense`` is an ``.item()``, a
device sync). Triton launches are counted by wrapping the interpreter's launch; the ATen ops
the interpreter itself dispatches while it runs a kernel are not counted.

A call is counted after one warm-up call of it, so one-time work (plans, tiles) is left out.
Under the interpreter the host path differs from the GPU's where a module branches on
INTERPRET: ``_launch`` calls ``kernel[grid]`` there instead of the cached direct launch.

Run: ``TRITON_INTERPRET=1 python templates/_common/hostcount.py [--ops] [PATTERN...]`` prints
the table (``--ops``: each call's ops by name); ``test_hostcount.py`` holds the fused full
calls to the budgets in CASES. On a GPU (TRITON_INTERPRET unset) the same command counts the
ATen ops (autograd's device thread included) and the launches, each launch that missed the
kernel module's cache of compiled kernels (``--ops``: "through JITFunction.run"), and no
Python calls.
"""

import collections
import os
import pathlib
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fa_testing as fat  # noqa: E402

# One case per template: the H200 training case it stands for (``traced``: docs/benchmarks/
# run-gpt2_train_bf16 and the matrix's training cases), the shapes counted (``shapes``: the
# traced rank, dtype and params at a few hundred elements, so the interpreter runs them in
# seconds; the host path depends on the layout, not the size), and the budget: the most ATen
# ops the fused full call may dispatch (None: the template has no training path; its
# inference forward is counted). The budgets are the counts measured when they were written.
Case = collections.namedtuple("Case", "pattern dtype traced shapes params budget")
CASES = [
    Case("dropout_add", "bf16", "16x256x768", [[2, 8, 96]], {"has_bias": True, "p": 0.1}, 7),
    Case("add_layernorm", "bf16", "8x512x768", [[2, 8, 96]], {"eps": 1e-5}, 13),
    Case("swiglu", "bf16", "4x512x2816", [[2, 8, 96]], {}, 6),
    Case("rmsnorm_pyops", "fp32", "4x512x1024", [[2, 8, 96]], {"eps": 1e-6, "casting": "llama"}, 5),
    Case("gelu_pyops", "bf16", "8x512x3072", [[2, 8, 96], [96]], {"has_bias": True}, 9),
    Case("bias_gelu", "bf16", "8x512x3072", [[2, 8, 96], [96]], {"approximate": "tanh", "has_bias": True}, 3),
    Case("mask_softmax", "bf16", "8x12x512x512", [[2, 2, 9, 96], [2, 1, 1, 96]],
         {"mask_kind": "additive", "mask_fill": float("-inf"), "scale": 0.125, "p": 0.1}, 3),
    # 11: eager's two autograd nodes, so that the pre-activation is freed before the gradient
    # GEMMs (eager's peak), cost one view (the GELU node hands out y as a view of its input);
    # 13 since the bias gradient is summed in the derivative pass (2026-12-03): its partial
    # sums and the gradient are two allocations where ATen's sum was one op
    Case("linear_gelu", "bf16", "16x256x768x3072", [[2, 8, 64], [48, 64], [48]],
         {"approximate": "tanh", "has_bias": True}, 13),
    # 18 since the bias gradient is summed by _col_sums (2026-12-05): its partial sums and the
    # gradient are two allocations where ATen's sum was one op (and one launch more), for a
    # column sum 5.6 us faster at BERT's 4096x768 on an H100 (docs/templates.md)
    Case("layernorm_linear", "bf16", "16x256x768x3072", [[2, 8, 64], [48, 64], [48]],
         {"has_bias": True, "eps": 1e-5}, 18),
    Case("attention", "bf16", "8x12x512x64 causal p=0.1", [[1, 2, 24, 64]] * 3,
         {"mask_kind": "causal", "mask_fill": "min", "scale": 0.125, "p": 0.1, "bias_kind": "none"}, 8),
    # 5: the forward's four allocations (each row's log-sum-exp and loss, the count, the loss)
    # and the gradient, beside three launches; eager's full call dispatches 8 ops, 6 computing
    Case("cross_entropy", "bf16", "4096x8192 float", [[16, 300], [16]],
         {"reduction": "mean", "ignore_index": -100, "upcast": "float", "label_smoothing": 0.0}, 5),
]

CALLS = ("infer", "fwd", "bwd", "full")

# ATen ops that allocate, and ops that only make views or read metadata (no device work)
ALLOC = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
VIEW = {"view", "_unsafe_view", "as_strided", "_reshape_alias", "reshape", "expand", "t", "transpose",
        "permute", "unsqueeze", "squeeze", "slice", "select", "alias", "detach", "unflatten", "flatten",
        "split", "split_with_sizes", "chunk", "unbind", "narrow", "view_as", "lift_fresh",
        "_to_copy_meta", "numpy_T", "diagonal", "movedim", "expand_as", "sym_size", "sym_stride", "is_same_size"}


class Counter(TorchDispatchMode):
    """Counts the ATen ops dispatched while it is active (Counter.ops: name -> count) and the
    Triton launches (Counter.launches: kernel name -> count), leaving out what a launch runs."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()
        self.launches = collections.Counter()
        self.misses = 0  # launches through JITFunction.run on a GPU (a cache miss)
        self.pycalls = None
        self.inside = 0  # > 0 while the interpreter runs a kernel

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.inside:
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    def launched(self, name, miss=False):
        self.launches[name] += 1
        self.misses += miss


def _name(kernel):
    """A JIT or interpreted kernel's function name."""
    return getattr(kernel, "fn", kernel).__name__


class _LaunchHook:
    """While active, every Triton launch is counted by counter (a Counter, or None) and
    flag.inside is above 0 while the interpreter runs one: the ATen ops and Python calls the
    interpreter makes for the kernel are not the call's host work. Under the interpreter a
    launch is InterpretedFunction.run; on a GPU it is the kernel module's direct launch
    (``_run``) or JITFunction.run, the slow path a launch takes when the module's cache of
    compiled kernels misses (counted also as a miss: after a warm-up call there should be none)."""

    def __init__(self, flag, counter=None, kernel=None):
        self.flag, self.counter, self.kernel = flag, counter, kernel
        self.saved = []

    def _wrap(self, owner, name, label, miss=False):
        run, flag, counter = getattr(owner, name), self.flag, self.counter
        self.saved.append((owner, name, run))

        def counted(*args, **kwargs):
            if counter is not None:
                counter.launched(label(args), miss)
            flag.inside += 1
            try:
                return run(*args, **kwargs)
            finally:
                flag.inside -= 1

        setattr(owner, name, counted)

    def __enter__(self):
        if fat.INTERPRET:
            from triton.runtime.interpreter import InterpretedFunction

            self._wrap(InterpretedFunction, "run", lambda a: _name(a[0]))
        else:
            from triton.runtime.jit import JITFunction

            self._wrap(JITFunction, "run", lambda a: _name(a[0]), miss=True)
            if self.kernel is not None and hasattr(self.kernel, "_run"):
                self._wrap(self.kernel, "_run", lambda a: _name(a[0][3]))  # a _COMPILED entry
        return self

    def __exit__(self, *exc):
        for owner, name, run in reversed(self.saved):
            setattr(owner, name, run)
        self.saved = []


class _PyCalls:
    """Counts the Python function calls and calls of builtins (C functions and methods: a
    tensor's stride(), a dict's get) made on this thread while active (sys.setprofile), except
    this file's own and what an interpreter launch runs. CPU autograd runs a backward on the
    calling thread, so its calls are counted; on a GPU it runs on autograd's device thread,
    whose calls are not (count() leaves pycalls None there)."""

    def __init__(self):
        self.inside = 0
        self.calls = 0

    def __enter__(self):
        here = __file__

        def prof(frame, event, arg):
            if event in ("call", "c_call") and not self.inside and frame.f_code.co_filename != here:
                self.calls += 1

        self.prev = sys.getprofile()
        sys.setprofile(prof)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self.prev)


def count(fn, kernel=None, device="cpu"):
    """(the result of fn(), a Counter of one call's ATen ops and Triton launches, with
    .pycalls: its Python and builtin calls, None on a GPU). On the CPU fn is called twice:
    once under the dispatch mode, once under the profiler (each would count the other's
    machinery); both calls must do the same work (a backward is called with retain_graph).
    kernel: the template's kernel module, whose direct launches are counted on a GPU."""
    counter = Counter()
    with _LaunchHook(counter, counter, kernel), counter:
        out = fn()
    if device == "cpu":
        calls = _PyCalls()
        with _LaunchHook(calls, None, kernel), calls:
            out = fn()
        counter.pycalls = calls.calls
    return out, counter


def split(ops):
    """(allocations, views, others) of an ops Counter."""
    alloc = sum(n for k, n in ops.items() if k in ALLOC)
    view = sum(n for k, n in ops.items() if k in VIEW)
    return alloc, view, sum(ops.values()) - alloc - view


def load(pattern):
    """(kernel, reference, adapter) modules of templates/<pattern>."""
    folder = HERE.parent / pattern
    anchor = str(folder / "adapter.py")
    return tuple(fat.load_sibling(anchor, n) for n in ("kernel", "reference", "adapter"))


def _outputs(o):
    o = o if isinstance(o, (tuple, list)) else (o,)
    return [t for t in o if isinstance(t, torch.Tensor) and t.requires_grad]


def measure(case, device="cpu"):
    """{provider: {call: Counter}} for one case: providers "fused" and "eager", calls CALLS
    (the training calls only where the adapter has ``train`` and a backward for these params).
    Each call is counted after one warm-up call of it."""
    kernel, ref, adapter = load(case.pattern)
    dt = fat.DTYPES[case.dtype]
    inputs = adapter.make_inputs(case.shapes, dt, case.params, device, 0)
    names = [n for n in adapter.GRAD_INPUTS if isinstance(inputs.get(n), torch.Tensor)]
    trains = hasattr(adapter, "train") and adapter.has_backward(case.params)
    forwards = {"fused": lambda inp: adapter.train(kernel, inp, case.params),
                "eager": lambda inp: adapter.reference(ref, inp, case.params)}
    kept = dict(inputs)  # what fused() keeps between calls (layernorm_linear's folded weights), as bench
    infer = {"fused": lambda: adapter.fused(kernel, kept, case.params),
             "eager": lambda: adapter.reference(ref, dict(inputs), case.params)}
    result = {}
    for name, fwd in forwards.items():
        calls = {}
        with torch.no_grad():
            infer[name]()
            calls["infer"] = count(infer[name], kernel, device)[1]
        if trains:
            leaves = dict(inputs)
            for n in names:
                leaves[n] = inputs[n].detach().clone().requires_grad_(True)
            wrt = [leaves[n] for n in names]
            outs = _outputs(fwd(leaves))
            g = fat.gen(1234)
            dys = [fat.randn(list(o.shape), o.dtype, device, g) for o in outs]

            def backward(outs):
                return torch.autograd.grad(outs, wrt, dys, retain_graph=True, allow_unused=True)

            backward(outs)
            outs, calls["fwd"] = count(lambda: _outputs(fwd(leaves)), kernel, device)
            calls["bwd"] = count(lambda: backward(outs), kernel, device)[1]
            calls["full"] = count(lambda: backward(_outputs(fwd(leaves))), kernel, device)[1]
        result[name] = calls
    return result


def table(results):
    """The markdown table of measure()'s results, [(case, result)]: per case and call, the
    fused call's ATen ops (allocations / views / others), Triton launches and Python calls,
    and the eager reference's ATen ops and Python calls."""
    lines = ["| case | call | fused: aten ops (alloc / view / other) | launches | Python calls | "
             "eager: aten ops (alloc / view / other) | Python calls |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for case, res in results:
        label = f"{case.pattern} {case.dtype} {case.traced}"
        for call in CALLS:
            f, e = res["fused"].get(call), res["eager"].get(call)
            if f is None:
                continue
            fa, fv, fo = split(f.ops)
            ea, ev, eo = split(e.ops)
            lines.append(f"| {label} | {call} | {sum(f.ops.values())} ({fa} / {fv} / {fo}) | "
                         f"{sum(f.launches.values())} | {_na(f.pycalls)} | "
                         f"{sum(e.ops.values())} ({ea} / {ev} / {eo}) | {_na(e.pycalls)} |")
            label = ""
    return "\n".join(lines)


def _na(v):
    return "-" if v is None else v


def details(results):
    """Each case's calls, ops by name (most frequent first), fused and eager."""
    out = []
    for case, res in results:
        for name, calls in res.items():
            for call, c in calls.items():
                ops = ", ".join(f"{k} {n}" for k, n in c.ops.most_common())
                launches = ", ".join(f"{k} {n}" for k, n in c.launches.most_common())
                miss = f" ({c.misses} through JITFunction.run)" if c.misses else ""
                out.append(f"{case.pattern} {name} {call}: {ops}"
                           + (f" | launches: {launches}{miss}" if launches else ""))
    return "\n".join(out)


def main(argv):
    if fat.INTERPRET:
        device = "cpu"
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        print("hostcount: needs TRITON_INTERPRET=1 (the CPU) or CUDA", file=sys.stderr)
        return 2
    only = [a for a in argv if not a.startswith("-")]
    unknown = sorted(set(only) - {c.pattern for c in CASES})
    if unknown:
        print(f"hostcount: no case for {', '.join(unknown)} (cases: {', '.join(c.pattern for c in CASES)})",
              file=sys.stderr)
        return 2
    results = []
    for c in CASES:
        if not only or c.pattern in only:
            print(f"hostcount: {c.pattern} ({device})", file=sys.stderr)
            results.append((c, measure(c, device)))
    print(table(results))
    if "--ops" in argv:
        print()
        print(details(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
