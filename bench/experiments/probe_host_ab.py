"""Probe: per-call host and wall time of two generations of the same generic folders, side by
side in one process (GPU-only).

A change to the wrappers' host path is judged by what it buys per call, and the H200 host's
per-call figures drift by tens of percent between runs (the same call measured 39.6 and 60.9 µs
a few seconds apart in probe_gemm_host.py). This probe times both generations and the eager
chain in interleaved rounds (each round times every provider once, by fa_testing.wall_time_us:
a loop of back-to-back calls and bursts of calls started on an idle GPU) and prints the median
over rounds, so a drift affects all three alike.

For each NAME, the folder of that name under DIR_A and under DIR_B (at depth 1 or 2): the
forward (adapter.fused; eager: adapter.reference) and, where the folder has a backward, a
training step (the forward under autograd and torch.autograd.grad of its outputs; eager: the
traced chain the same way). Per provider: host µs / wall µs per call.

Usage: python3 bench/experiments/probe_host_ab.py [-rounds R] DIR_A DIR_B NAME...
"""
import importlib.util
import pathlib
import statistics
import sys

import torch


def load(folder, name, tag):
    spec = importlib.util.spec_from_file_location(f"_ab_{tag}_{abs(hash(str(folder)))}_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def find(root, name):
    for p in [root / name, *root.glob(f"*/{name}")]:
        if (p / "kernel.py").is_file():
            return p
    raise SystemExit(f"probe_host_ab: no folder {name} under {root}")


def providers(folder, tag):
    """(fat, forward calls, training calls) of one generation: name -> zero-argument call."""
    sys.path.insert(0, str(folder))
    try:
        fat = load(folder, "fa_testing", tag)
        case = load(folder, "case", tag)
        kernel = load(folder, "kernel", tag)
        adapter = load(folder, "adapter", tag)
        ref = load(folder, "reference", tag)
    finally:
        sys.path.remove(str(folder))
    dt = fat.DTYPES[case.DTYPE]
    inputs = adapter.make_inputs(case.SHAPES, dt, case.PARAMS, "cuda", 0)
    params = case.PARAMS
    fwd = {"eager": lambda: adapter.reference(ref, inputs, params),
           tag: lambda: adapter.fused(kernel, inputs, params)}
    train = {}
    if getattr(case, "BACKWARD", False):
        tin = {n: (t.detach().requires_grad_(True) if isinstance(t, torch.Tensor) and t.dtype.is_floating_point else t)
               for n, t in inputs.items()}
        leaves = [t for t in tin.values() if isinstance(t, torch.Tensor) and t.requires_grad]

        def step(outs):
            ys = [y for y in outs if isinstance(y, torch.Tensor) and y.requires_grad]
            torch.autograd.grad(ys, leaves, [torch.ones_like(y) for y in ys], allow_unused=True)

        def eager_step():
            d = dict(tin)
            step(adapter.reference(ref, d, params))

        def fused_step():
            d = dict(tin)
            step(adapter.train(kernel, d, params))

        train = {"eager": eager_step, tag: fused_step}
    return fat, fwd, train


def rounds_of(fat, calls, rounds):
    for fn in calls.values():  # warm-up: compiles, tunes, plans
        fn()
        fn()
    torch.cuda.synchronize()
    host = {n: [] for n in calls}
    wall = {n: [] for n in calls}
    for _ in range(rounds):
        for n, fn in calls.items():
            r = fat.wall_time_us(fn, 10.0)
            host[n].append(r["host_us"])
            wall[n].append(r["wall_us"])
    return {n: (statistics.median(host[n]), statistics.median(wall[n])) for n in calls}


def main():
    args = sys.argv[1:]
    rounds = 5
    if args[:1] == ["-rounds"]:
        rounds, args = int(args[1]), args[2:]
    if len(args) < 3:
        raise SystemExit(__doc__.splitlines()[-1])
    root_a, root_b, names = pathlib.Path(args[0]), pathlib.Path(args[1]), args[2:]
    print(f"{'folder':64s} {'call':8s} host/wall µs per call: eager, A, B")
    for name in names:
        fat, fwd_a, train_a = providers(find(root_a, name), "A")
        _, fwd_b, train_b = providers(find(root_b, name), "B")
        for label, calls in (("forward", {**fwd_a, "B": fwd_b["B"]}),
                             ("train", {**train_a, "B": train_b["B"]} if train_a else {})):
            if not calls:
                continue
            r = rounds_of(fat, calls, rounds)
            cells = "  ".join(f"{n} {h:6.1f}/{w:6.1f}" for n, (h, w) in r.items())
            print(f"{name[:64]:64s} {label:8s} {cells}  B/A host {r['B'][0] / r['A'][0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
