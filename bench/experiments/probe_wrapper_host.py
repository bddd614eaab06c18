"""Host cost of the pointwise and row templates' Python wrappers, the launch stubbed (CPU only).

Loads each template's kernel.py, replaces its ``_launch`` with a stub that only counts calls,
and times the public function on CPU tensors of decode-size shapes: what is left is the
wrapper's own work (checks, views, dtype promotion, allocations, argument building), the part
of a fused call's host time that is not the launch itself (~10.5 us on the H200,
probe_launch.py). Prints, per case, the min and median of several timeit repeats in us per
call and the number of launches one call makes. Timings on a loaded machine are noisy: compare
minima.

Usage: python3 bench/experiments/probe_wrapper_host.py [-n CALLS] [-r REPEATS] [-templates DIR] [PATTERN ...]
(TRITON_INTERPRET must be unset: under the interpreter the wrappers pick other tiles.) To
compare with an earlier commit under the same load, put its templates in a folder
(``git archive REV templates | tar -x -C OLD``) and pass ``-templates OLD/templates``.
"""
import argparse
import os
import pathlib
import statistics
import sys
import timeit

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
sys.path.insert(0, str(TEMPLATES / "_common"))
import fa_testing as fat  # noqa: E402


def load(templates, pattern):
    return fat.load_sibling(pathlib.Path(templates) / pattern / "kernel.py", "kernel")


def cases():
    """(pattern, label, make(kernel) -> zero-argument call)."""
    h = torch.float16
    r = torch.randn

    def bias_gelu(k):
        x, b = r(32, 4096, dtype=h), r(4096, dtype=h)
        return lambda: k.bias_gelu(x, b, "tanh")

    def gelu_pyops(k):
        x, b = r(32, 4096, dtype=h), r(4096, dtype=h)
        return lambda: k.new_gelu(x, b)

    def gelu_pyops_nobias(k):
        x = r(32, 4096, dtype=h)
        return lambda: k.new_gelu(x)

    def dropout_add(k):
        x, res, b = r(8, 512, 768, dtype=h), r(8, 512, 768, dtype=h), r(768, dtype=h)
        return lambda: k.dropout_add(x, res, b, 0.1, 1234, True)

    def swiglu(k):
        g, u = r(32, 11008, dtype=h), r(32, 11008, dtype=h)
        return lambda: k.swiglu(g, u)

    def swiglu_chunk(k):
        g, u = r(32, 2 * 11008, dtype=h).chunk(2, -1)
        return lambda: k.swiglu(g, u)

    def add_layernorm(k):
        x, res = r(1, 128, 768, dtype=h), r(1, 128, 768, dtype=h)
        w, b = r(768, dtype=h), r(768, dtype=h)
        return lambda: k.add_layer_norm(x, res, w, b, 1e-5)

    def rmsnorm(k):
        x, w = r(32, 1, 4096, dtype=h), r(4096, dtype=h)
        return lambda: k.rms_norm(x, w, 1e-6, "llama")

    def softmax_additive(k):
        x, m = r(1, 32, 1, 512, dtype=h), r(1, 1, 1, 512, dtype=h)
        return lambda: k.mask_softmax(x, m, 0.125, "additive")

    def softmax_causal(k):
        x = r(1, 32, 128, 128, dtype=h)
        return lambda: k.mask_softmax(x, None, 0.125, "causal")

    return [
        ("bias_gelu", "32x4096 fp16 +bias tanh", bias_gelu),
        ("gelu_pyops", "32x4096 fp16 +bias", gelu_pyops),
        ("gelu_pyops", "32x4096 fp16", gelu_pyops_nobias),
        ("dropout_add", "8x512x768 fp16 +bias p=0.1", dropout_add),
        ("swiglu", "32x11008 fp16", swiglu),
        ("swiglu", "32x11008 fp16 chunk halves", swiglu_chunk),
        ("add_layernorm", "1x128x768 fp16 w+b", add_layernorm),
        ("rmsnorm_pyops", "32x1x4096 fp16 llama", rmsnorm),
        ("mask_softmax", "1x32x1x512 fp16 additive", softmax_additive),
        ("mask_softmax", "1x32x128x128 fp16 causal", softmax_causal),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20000, help="calls per repeat")
    ap.add_argument("-r", type=int, default=7, help="repeats")
    ap.add_argument("-templates", default=str(TEMPLATES), help="the templates folder to load")
    ap.add_argument("patterns", nargs="*")
    a = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        sys.exit("probe_wrapper_host: unset TRITON_INTERPRET")
    torch.manual_seed(0)
    print(f"{'template':<15} {'case':<28} {'min us':>7} {'median':>7} {'launches':>8}")
    for pattern, label, make in cases():
        if a.patterns and pattern not in a.patterns:
            continue
        k = load(a.templates, pattern)
        calls = [0]

        def stub(*args, **kw):
            calls[0] += 1

        k._launch = stub
        fn = make(k)
        fn()
        calls[0] = 0
        fn()
        launches = calls[0]
        for _ in range(200):
            fn()
        ts = [t / a.n * 1e6 for t in timeit.repeat(fn, number=a.n, repeat=a.r)]
        print(f"{pattern:<15} {label:<28} {min(ts):7.2f} {statistics.median(ts):7.2f} {launches:8d}")


if __name__ == "__main__":
    main()
