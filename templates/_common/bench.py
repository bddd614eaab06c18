"""GPU benchmark of one generated kernel folder (copied verbatim by fuseadvise codegen).

Times, on the traced shapes from case.py, the fused Triton kernel, the eager reference chain
and torch.compile of the reference (default mode), forward only, after a correctness check
on the GPU: each is captured in a CUDA graph and its replay timed with
``triton.testing.do_bench(replay, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])`` (L2 flushed
before every call; GPU time, not the host's launch overhead). Prints one JSON object on stdout; diagnostics go to stderr.

Usage: python bench.py [--no-compile] [--warmup MS] [--rep MS]
"""

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import fa_testing as fat  # noqa: E402

case = fat.load_sibling(__file__, "case")
kernel = fat.load_sibling(__file__, "kernel")
ref = fat.load_sibling(__file__, "reference")
adapter = fat.load_sibling(__file__, "adapter")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--warmup", type=float, default=25.0)
    ap.add_argument("--rep", type=float, default=100.0)
    args = ap.parse_args()

    import torch
    import triton
    from triton.testing import do_bench

    def jsonable(v):  # JSON has no inf / nan
        return str(v) if isinstance(v, float) and (v != v or abs(v) == float("inf")) else v

    result = {"pattern": case.PATTERN, "dtype": case.DTYPE, "shapes": case.SHAPES,
              "params": {k: jsonable(v) for k, v in case.PARAMS.items()},
              "torch": torch.__version__, "triton": triton.__version__}
    if not fat.cuda_ok():
        result["error"] = "needs CUDA (and TRITON_INTERPRET unset)"
        print(json.dumps(result))
        return 2
    result["device"] = torch.cuda.get_device_name()

    # correctness on the GPU before any timing
    try:
        fat.run_case(kernel, ref, adapter, case.SHAPES, case.DTYPE, case.PARAMS, "cuda", 0)
        result["correct"] = True
    except AssertionError as e:
        result["correct"] = False
        result["error"] = str(e)[:2000]
        print(json.dumps(result))
        return 1

    dt = fat.DTYPES[case.DTYPE]
    inputs = adapter.make_inputs(case.SHAPES, dt, case.PARAMS, "cuda", 0)
    params = case.PARAMS

    def fused():
        return adapter.fused(kernel, inputs, params)

    def eager():
        return adapter.reference(ref, inputs, params)

    providers = [("fused", fused), ("eager", eager)]
    if not args.no_compile:
        compiled = torch.compile(lambda inp: adapter.reference(ref, inp, params))
        providers.append(("compile", lambda: compiled(inputs)))

    times = {}
    for name, fn in providers:
        try:
            fn()
            torch.cuda.synchronize()
            replay = fat.graph_replay(fn)  # GPU time only; None: time the call itself
            med, p20, p80 = do_bench(replay or fn, warmup=args.warmup, rep=args.rep, quantiles=[0.5, 0.2, 0.8])
            times[name] = {"median_us": med * 1e3, "p20_us": p20 * 1e3, "p80_us": p80 * 1e3,
                           "timing": "graph-replay" if replay else "call"}
        except Exception as e:  # a failing baseline is reported, not fatal
            times[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
            print(f"bench: {name} failed: {e}", file=sys.stderr)
    result["times"] = times
    f = times["fused"].get("median_us")
    for base in ("eager", "compile"):
        b = times.get(base, {}).get("median_us")
        if f and b:
            result[f"speedup_vs_{base}"] = b / f
    if f and hasattr(adapter, "nbytes"):
        nb = adapter.nbytes(case.SHAPES, dt, params)
        result["bytes"] = nb
        result["fused_gbps"] = nb / (f * 1e-6) / 1e9
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
