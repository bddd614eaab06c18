"""What the template probes share (probe_layernorm2d.py, probe_add_layernorm_bwd.py,
probe_rmsnorm_bwd.py; probe_bwd_kernels.py and probe_gemm_tuner.py take device_times): the
paths, --smoke's interpreter switch, a template's modules loaded from their folder, the two
timers, a call's kernels by device time, the correctness test of a variant, and the table
(or JSON lines) every probe prints.

Import it before torch: with --smoke on the command line it sets TRITON_INTERPRET=1, which
Triton reads when it is first imported.
"""

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import time

if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "templates" / "_common"))  # fa_testing
sys.path.insert(0, str(ROOT / "bench"))  # harness

import fa_testing as fat  # noqa: E402


def load_template(pattern, module):
    """templates/PATTERN/MODULE.py as a module of its own ("PATTERN_MODULE"): the template's
    source, whose knobs a probe sets before each variant."""
    spec = importlib.util.spec_from_file_location(f"{pattern}_{module}", ROOT / "templates" / pattern / f"{module}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def arguments(doc, compile_=True, quick=False, kernels=False):
    """The probes' command line: --only, --json, --smoke, and --compile, --quick and --kernels
    where the probe has them."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--only", default="", help="cases whose label contains this")
    if compile_:
        ap.add_argument("--compile", action="store_true", help="also torch.compile of the reference chain")
    if quick:
        ap.add_argument("--quick", action="store_true", help="sweep the knobs one at a time")
    if kernels:
        ap.add_argument("--kernels", action="store_true", help="list each variant's kernels by device time")
    ap.add_argument("--json", action="store_true", help="one JSON object per row instead of the table")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU under TRITON_INTERPRET=1")
    return ap.parse_args()


def device_times(call, calls=10):
    """{kernel name: mean device µs a call} of call() under torch.profiler: three warm-up
    calls, then `calls` calls back to back (not L2-flushed: a call's kernels as a step runs
    them)."""
    import collections

    import torch

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    us = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0:
            us[e.name] += e.device_time / calls
    return us


def gpu_timer(fn, flush=True):
    """fn's GPU time (median, p20, p80 in µs): captured in a CUDA graph and the replay timed by
    fa_testing.gpu_time_us, the harness's method (the L2 flushed before each replay); with
    flush=False, L2-warm (triton's do_bench_cudagraph)."""
    if flush:
        return fat.gpu_time_us(fat.graph_replay(fn) or fn)
    from triton.testing import do_bench_cudagraph
    return [v * 1e3 for v in do_bench_cudagraph(fn, quantiles=list(fat.QUANTILES))]


def wall_timer(fn, flush=True):  # --smoke: the plumbing, not a measurement
    t0 = time.perf_counter()
    fn()
    return [(time.perf_counter() - t0) * 1e6] * 3


def max_diff(got, want):
    """The largest |got - want| over tensors taken pairwise."""
    return max((a.float() - b.float()).abs().max().item() for a, b in zip(got, want))


def wrong(diff, want, atol):
    """Whether a variant's max difference is past atol relative to the reference's magnitude."""
    return not diff <= atol * (1 + max(t.float().abs().max().item() for t in want))


def variant_row(table, args, label, name, step, want, atol, reorder=None):
    """One variant's row: step() checked against want (reorder, if given, maps its results to
    want's order first; wrong past atol), timed (the GPU timer, or the wall timer with
    --smoke), and with --kernels its kernels by device time in the config column."""
    got = step()
    if reorder is not None:
        got = reorder(got)
    diff = max_diff(got, want)
    times = (wall_timer if args.smoke else gpu_timer)(step)
    cfg = ""
    if getattr(args, "kernels", False) and not args.smoke:
        ks = device_times(step, calls=5)
        cfg = "; ".join(f"{k[:48]} {v:.1f}" for k, v in ks.most_common(8))
    table.row(label, name, times, cfg, diff, wrong(diff, want, atol))


class Table:
    """The rows a probe prints: case, variant, median/p20/p80 (µs), GB/s where the probe has a
    byte count, max difference, config; with as_json one JSON object per row instead."""

    def __init__(self, as_json, variant_width=18, bandwidth=False):
        self.as_json, self.width, self.bandwidth = as_json, variant_width, bandwidth

    def header(self):
        if self.as_json:
            return
        gbs = f" {'GB/s':>7s}" if self.bandwidth else ""
        print(f"{'case':22s} {'variant':{self.width}s} {'median':>9s} {'p20':>9s} {'p80':>9s}{gbs}  {'maxdiff':>8s}  config (us)")

    def row(self, case, variant, times, cfg, diff, bad=False, gbs=None):
        if self.as_json:
            med, p20, p80 = times or (None, None, None)
            r = {"case": case, "variant": variant, "median_us": med, "p20_us": p20, "p80_us": p80}
            if self.bandwidth:
                r["gb_per_s"] = gbs
            r.update(config=cfg, max_abs_diff=diff, wrong=bool(bad))
            print(json.dumps(r), flush=True)
            return
        t = "".join(f" {v:9.1f}" for v in times) if times else f" {'-':>9s}" * 3
        g = (f" {gbs:7.0f}" if gbs is not None else f" {'-':>7s}") if self.bandwidth else ""
        d = "-" if diff is None else f"{diff:.1e}"
        print(f"{case:22s} {variant:{self.width}s}{t}{g}  {d:>8s}{' WRONG' if bad else ''}  {cfg}", flush=True)

    def error(self, case, variant, e):
        """A variant that raised: a row, not the end of the probe."""
        self.row(case, variant, None, f"error: {str(e).splitlines()[0][:120]}", None, True)
