"""GPU benchmark of one generated kernel folder (copied verbatim by fuseadvise codegen).

Times, on the traced shapes from case.py, the fused Triton kernel, the eager reference chain
and torch.compile of the reference (default mode), forward only, after a correctness check
on the GPU. Two figures per provider (fa_testing.py has the timing functions):

- GPU time (``median_us``, ``p20_us``, ``p80_us``): the provider captured in a CUDA graph and
  its replay timed by ``fa_testing.gpu_time_us`` (warm-up and repetitions of --warmup and
  --rep milliseconds); before every call L2 is emptied without leaving dirty lines, and CUDA
  events around the call alone time it. GPU time, not the host's launch overhead.
- Per call (``wall_us``, ``host_us``, ``calls``): the provider called as an eager model calls
  it, no CUDA graph, by ``fa_testing.wall_time_us``: the wall time per call of ``calls``
  back-to-back calls (a loop of about --wall-ms) with one synchronize at the end, and the
  time one call takes to return (the host's share: Python, checks, allocations, launches).

Library calls: where the adapter defines ``library_ops(inputs, params)`` (F.scaled_dot_product_attention
under each backend, FlexAttention, F.rms_norm, the cuBLASLt GELU epilogue: the library calls that
compute the same forward), each is timed the same way under ``library.<name>``, or recorded as
``{"refused": reason}`` (the adapter's reason, or the first line of what it raised). Unlike the
benchmark harness, bench.py does not compare their outputs with the reference.

Prints one JSON object on stdout; diagnostics go to stderr.

Usage: python bench.py [--no-compile] [--warmup MS] [--rep MS] [--wall-ms MS]
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


def time_provider(fn, warmup_ms, rep_ms, wall_ms):
    """One provider's figures: GPU time of its CUDA-graph replay (or of the call, when it
    cannot be captured) and its per-call wall and host time."""
    import torch

    fn()
    torch.cuda.synchronize()
    replay = fat.graph_replay(fn)  # GPU time only; None: time the call itself
    med, p20, p80 = fat.gpu_time_us(replay or fn, warmup_ms, rep_ms)
    out = {"median_us": med, "p20_us": p20, "p80_us": p80, "timing": "graph-replay" if replay else "call"}
    out.update(fat.wall_time_us(fn, wall_ms))
    return out


def first_line(e):
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(e).__name__


def library_times(inputs, params, args):
    """Each library op of adapter.library_ops timed like the providers, or why not: name ->
    figures, or {"refused": reason}."""
    ops, refused = adapter.library_ops(inputs, params)
    out = {name: {"refused": first_line(why)} for name, why in refused.items()}
    for name, op in ops.items():
        try:
            out[name] = time_provider(lambda op=op: op(inputs), args.warmup, args.rep, args.wall_ms)
        except Exception as e:  # an SDPA backend refusing the case raises on its first call
            out[name] = {"refused": first_line(e)}
            print(f"bench: library op {name} refused: {first_line(e)}", file=sys.stderr)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--warmup", type=float, default=25.0)
    ap.add_argument("--rep", type=float, default=100.0)
    ap.add_argument("--wall-ms", type=float, default=fat.WALL_TARGET_MS,
                    help="length of the per-call loop of back-to-back plain calls")
    args = ap.parse_args()

    import torch
    import triton

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
    result["flush_bytes"] = fat.FLUSH_BYTES

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
            times[name] = time_provider(fn, args.warmup, args.rep, args.wall_ms)
        except Exception as e:  # a failing baseline is reported, not fatal
            times[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
            print(f"bench: {name} failed: {e}", file=sys.stderr)
    result["times"] = times
    if hasattr(adapter, "library_ops"):
        result["library"] = library_times(inputs, params, args)
    for figure, prefix in (("median_us", "speedup_vs_"), ("wall_us", "per_call_speedup_vs_")):
        f = times["fused"].get(figure)
        for base in ("eager", "compile"):
            b = times.get(base, {}).get(figure)
            if f and b:
                result[prefix + base] = b / f
    f = times["fused"].get("median_us")
    if f and hasattr(adapter, "nbytes"):
        nb = adapter.nbytes(case.SHAPES, dt, params)
        result["bytes"] = nb
        result["fused_gbps"] = nb / (f * 1e-6) / 1e9
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
