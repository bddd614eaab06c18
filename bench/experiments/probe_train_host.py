"""Where a training call's host time goes, per generated folder (GPU-only probe).

bench's "backward" and "full" modes time one chain's torch.autograd.grad per call. Each such
call also pays the autograd engine's own cost (a graph task, the hand-over to the CUDA
device's engine thread and back), which a model step pays once for all its chains. This probe
separates the two, for the fused and the eager provider built as bench builds them
(bench/harness.py's TrainingCall on the folder's adapter.train / adapter.reference):

  host         us per call to return (median of bursts of 10 calls, each burst started on an
               idle GPU), the figure bench reports as "host"
  engine       the same for a one-op chain (x * 2) of the same first input: the engine's share
  amortized    K copies of the chain on their own leaves, backward (or forward + backward:
               full) in one autograd.grad call, over K (harness.StepCall, as bench's training
               per-call figures are taken): the chain's host cost as a model step pays it
then the top functions of a cProfile of the fused calls of each mode in -profile (comma-separated), by own time.

Usage: python3 bench/experiments/probe_train_host.py [-k K] [-top N] [-profile backward,full] FOLDER...
"""
import argparse
import cProfile
import importlib.util
import io
import pathlib
import pstats
import statistics
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402


def load(folder, name):
    spec = importlib.util.spec_from_file_location(f"_p_{abs(hash(str(folder)))}_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def host_us(fn, bursts=30, k=10):
    for _ in range(5):
        fn()
    times = []
    for _ in range(bursts):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        times.append((time.perf_counter() - t0) / k * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", type=int, default=8)
    ap.add_argument("-top", type=int, default=14)
    ap.add_argument("-profile", default="backward",
                    help="the modes whose fused calls cProfile reports, comma-separated: backward, full")
    ap.add_argument("folders", nargs="+")
    a = ap.parse_args()
    for mode in a.profile.split(","):
        if mode not in ("backward", "full"):
            ap.error(f"-profile: unknown mode {mode!r} (backward, full)")
    for d in a.folders:
        try:
            probe(pathlib.Path(d).resolve(), a)
        except Exception as e:  # noqa: BLE001 -- one folder's failure is reported, the rest run
            print(f"== {d}: failed: {e}")


def probe(folder, a):
    sys.path.insert(0, str(folder))
    sys.modules.pop("fa_testing", None)
    case, fat = load(folder, "case"), load(folder, "fa_testing")
    kernel, ref, adapter = load(folder, "kernel"), load(folder, "reference"), load(folder, "adapter")
    params = case.PARAMS
    inputs = adapter.make_inputs(case.SHAPES, fat.DTYPES[case.DTYPE], params, "cuda", 0)
    names = [n for n in adapter.GRAD_INPUTS if isinstance(inputs.get(n), torch.Tensor)]
    fwds = {"fused": lambda inp: adapter.train(kernel, inp, params),
            "eager": lambda inp: adapter.reference(ref, inp, params)}
    one = names[0]
    engine = harness.training_call(torch, lambda inp: inp[one] * 2, inputs, [one], "backward")
    print(f"== {folder.name}: engine (x*2 backward) {host_us(engine):.1f} us")
    for name, fwd in fwds.items():
        row = []
        for mode in ("backward", "full"):
            row.append(f"{mode} {host_us(harness.training_call(torch, fwd, inputs, names, mode)):.1f}")
        for mode in ("backward", "full"):
            row.append(f"amortized {mode} (k={a.k}) {host_us(harness.StepCall(torch, fwd, inputs, names, mode, a.k)) / a.k:.1f}")
        print(f"   {name:6s} host us: " + ", ".join(row))
    for mode in a.profile.split(","):
        call = harness.training_call(torch, fwds["fused"], inputs, names, mode)
        for _ in range(5):
            call()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            call()
        prof.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(a.top)
        print(f"   cProfile of 300 fused {mode} calls")
        print("\n".join(line for line in s.getvalue().splitlines() if line.strip())[-3500:])
    sys.path.remove(str(folder))


if __name__ == "__main__":
    main()
