"""Host cost of the GEMM templates' Python wrappers (linear_gelu, layernorm_linear), launch
stubbed: CPU only, no GPU (prints a table).

Each template's kernel.py is loaded as the tests load it (``load_sibling``, TRITON_INTERPRET
unset, so the wrappers take their GPU path) and called on CPU tensors of decode-size shapes,
with the kernel launches replaced so that nothing runs:

- ``stub``: the module's ``_launch`` and ``_gemm_launch`` replaced by no-ops (the wrapper's own
  code: checks, views, allocations, tile lookup, descriptors);
- ``to-ck``: the real ``_launch`` / ``_gemm_launch`` with every compiled kernel a stub whose
  ``[grid](...)`` does nothing: the wrapper plus the launch path's key building, i.e. the
  host time of a call minus CompiledKernel[grid]'s own (~7.4 us on the H200,
  bench/experiments/probe_launch.py).

Also the number of kernel launches a call makes. Each row is the min and median over
repeats of timeit's per-call mean (the machine may be loaded: take the min).
Each bucket takes its first candidate tile, untimed (``_GEMM_TUNE`` and ``_GEMM_HOST`` off:
nothing to time on a CPU), so the lookup is the untuned one (on the GPU, after the first call
of a bucket, a dict lookup).

Usage: python3 bench/experiments/probe_wrapper_host_gemm.py [--number N] [--repeat R]
"""
import argparse
import os
import pathlib
import statistics
import sys
import timeit

os.environ.pop("TRITON_INTERPRET", None)
ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "templates" / "_common"))

import torch  # noqa: E402
from fa_testing import load_sibling  # noqa: E402


def _load(name):
    return load_sibling(str(ROOT / "templates" / name / "test_kernel.py"), "kernel")


class _StubCK:
    """A CompiledKernel stand-in: ``ck[grid](*args)`` does nothing."""

    def __getitem__(self, grid):
        return _noop


def _noop(*args, **kwargs):
    return None


_STUB_CK = _StubCK()


class _AllCompiled(dict):
    """_COMPILED where every specialization is already compiled: each key gives an entry (the
    launch path's form: launch, head, compiled kernel, kernel) whose launch does nothing."""

    ENTRY = (_noop, (), _STUB_CK, None)

    def get(self, key, default=None):
        return self.ENTRY


class _Counter:
    def __init__(self):
        self.n = 0

    def __call__(self, *args, **kwargs):
        self.n += 1


def _cases():
    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=g).to(dtype)

    lg = _load("linear_gelu")
    ll = _load("layernorm_linear")
    cases = []
    for dt, tag in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        x2 = r(32, 4096, dtype=dt)
        x3 = r(1, 16, 4096, dtype=dt)
        w = r(4096, 4096, dtype=dt)
        b = r(4096, dtype=dt)
        cases.append((lg, "linear_gelu", f"{tag} 32x4096 -> 4096, bias", lambda x=x2, w=w, b=b: lg.linear_gelu(x, w, b)))
        cases.append((lg, "linear_gelu", f"{tag} 1x16x4096 -> 4096, bias, tanh",
                      lambda x=x3, w=w, b=b: lg.linear_gelu(x, w, b, "tanh")))
        y = torch.empty(32, 4096, dtype=dt)
        cases.append((lg, "linear_gelu", f"{tag} 32x4096 -> 4096, bias, out=",
                      lambda x=x2, w=w, b=b, y=y: lg.linear_gelu(x, w, b, out=y)))
    for dt, tag in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        x = r(1, 16, 4096, dtype=dt)
        g_, be = r(4096, dtype=dt), r(4096, dtype=dt)
        w, b = r(4096, 4096, dtype=dt), r(4096, dtype=dt)
        launch, ll._launch = ll._launch, _noop  # fold_weights' one launch: nothing to run here
        folded = ll.fold_weights(g_, be, w, b)
        ll._launch = launch
        cases.append((ll, "layernorm_linear", f"{tag} 1x16x4096 -> 4096, fold, folded=",
                      lambda x=x, g_=g_, be=be, w=w, b=b, f=folded: ll.layernorm_linear(x, g_, be, w, b, folded=f)))
        cases.append((ll, "layernorm_linear", f"{tag} 1x16x4096 -> 4096, normalize",
                      lambda x=x, g_=g_, be=be, w=w, b=b: ll.layernorm_linear(x, g_, be, w, b, variant="normalize")))
        st = (torch.empty(16), torch.empty(16))  # ln_stats would launch: any fp32 vectors of 16
        cases.append((ll, "layernorm_linear", f"{tag} 1x16x4096 -> 4096, fold, folded=, stats=",
                      lambda x=x, g_=g_, be=be, w=w, b=b, f=folded, st=st: ll.layernorm_linear(x, g_, be, w, b, folded=f,
                                                                                             stats=st)))
        y = torch.empty(1, 16, 4096, dtype=dt)
        cases.append((ll, "layernorm_linear", f"{tag} 1x16x4096 -> 4096, fold, folded=, out=",
                      lambda x=x, g_=g_, be=be, w=w, b=b, f=folded, y=y: ll.layernorm_linear(x, g_, be, w, b, folded=f,
                                                                                           out=y)))
    return cases


def _time(fn, number, repeat):
    per = [t / number * 1e6 for t in timeit.repeat(fn, number=number, repeat=repeat)]
    return min(per), statistics.median(per)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--number", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch._C._cuda_getDevice = lambda: 0  # (CPU: no device or stream to ask; the launch path
    torch._C._cuda_getCurrentRawStream = lambda device: 0  # keys on the one, launches on the other)
    cases = _cases()
    for mod in {id(m): m for m, *_ in cases}.values():
        mod._GEMM_TUNE = False  # every bucket its first candidate, untimed (nothing to time on a CPU)
        mod._GEMM_HOST = False
    mods = {id(m): m for m, *_ in cases}
    saved = {k: (m._launch, m._gemm_launch, m._COMPILED) for k, m in mods.items()}
    rows = []
    for mod, name, desc, fn in cases:
        launch, gemm_launch, compiled = saved[id(mod)]
        # launches per call (each bucket takes its first candidate, untimed: _GEMM_TUNE off)
        counter = _Counter()
        mod._launch, mod._gemm_launch = counter, counter
        fn()
        counter.n = 0
        fn()
        launches = counter.n
        mod._launch, mod._gemm_launch = _noop, _noop
        stub = _time(fn, args.number, args.repeat)
        mod._launch, mod._gemm_launch, mod._COMPILED = launch, gemm_launch, _AllCompiled()
        to_ck = _time(fn, args.number, args.repeat)
        mod._COMPILED = compiled
        rows.append((name, desc, launches, stub, to_ck))
    print(f"{'template':<17} {'case':<44} {'launches':>8} {'stub us min/med':>16} {'to-ck us min/med':>17}")
    for name, desc, n, (s0, s1), (c0, c1) in rows:
        print(f"{name:<17} {desc:<44} {n:>8} {s0:>7.2f} / {s1:<6.2f} {c0:>7.2f} / {c1:<6.2f}")


if __name__ == "__main__":
    main()
