"""The kernels of one training call, fused against eager, per generated folder (GPU-only probe).

bench's backward mode gives one time for the whole torch.autograd.grad call; this probe says
which kernels make it up: the folder's backward (or full) call as bench builds it
(harness.training_call on adapter.train / adapter.reference), run 10 times after a warm-up
under torch.profiler, each kernel's name and its mean device time a call, largest first.
Not L2-flushed: kernels of one call run back to back as in a step.

Usage: python3 bench/experiments/probe_bwd_kernels.py [-mode backward|full] [-top N] FOLDER...
"""
import argparse
import importlib.util
import pathlib
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402
import probekit  # noqa: E402  (beside this file)

CALLS = 10


def load(folder, name):
    spec = importlib.util.spec_from_file_location(f"_k_{abs(hash(str(folder)))}_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-mode", default="backward", choices=["backward", "full"])
    ap.add_argument("-top", type=int, default=8)
    ap.add_argument("folders", nargs="+")
    a = ap.parse_args()
    for d in a.folders:
        folder = pathlib.Path(d).resolve()
        sys.path.insert(0, str(folder))
        sys.modules.pop("fa_testing", None)
        case, fat = load(folder, "case"), load(folder, "fa_testing")
        kernel, ref, adapter = load(folder, "kernel"), load(folder, "reference"), load(folder, "adapter")
        params = case.PARAMS
        inputs = adapter.make_inputs(case.SHAPES, fat.DTYPES[case.DTYPE], params, "cuda", 0)
        names = [n for n in adapter.GRAD_INPUTS if isinstance(inputs.get(n), torch.Tensor)]
        fwds = {"fused": lambda inp: adapter.train(kernel, inp, params),
                "eager": lambda inp: adapter.reference(ref, inp, params)}
        print(f"== {folder.name} ({a.mode})")
        for name, fwd in fwds.items():
            us = probekit.device_times(harness.training_call(torch, fwd, inputs, names, a.mode), CALLS)
            print(f"   {name}: {sum(us.values()):.1f} us in {len(us)} kernels")
            for k, v in us.most_common(a.top):
                print(f"      {v:8.1f}  {k[:110]}")
        sys.path.remove(str(folder))


if __name__ == "__main__":
    main()
