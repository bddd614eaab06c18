"""Puts the saving fuseadvise's advice claims for each recorded model beside the saving of
torch.compile(model) on the whole step (issue 15, item 2): a markdown table on stdout.

  python3 scripts/compile_vs_advice.py [-fuseadvise BIN] DIR

DIR is a folder of record_models.py's output (manifest.json, timing.json, the traces). For
each model with an eager and a compiled time, the advice is `fuseadvise analyze -format json`
on the Kineto trace alone (what a user runs) and again with the execution trace (-et): its
estimated GPU saving over the chains it counts, the forward's and, on a training step, the
fused backward's (totals.est_saving_us + totals.est_backward_saving_us), per profiled step,
and, on a host-bound step, the host time it estimates fusion removes without the profiler's
cost (totals.host, Kineto alone). Each is set against the eager step measured outside the
profiler; the last column is the share of compile's saving that the advice's GPU saving
covers (Kineto alone / with -et). The last two: the GPU saving of the optimizer's and the
modules' advice, fused=True, the master weights and the drop-in nn.MultiheadAttention
(totals.optimizer_saving_us + totals.master_weights_saving_us +
totals.multihead_attention_saving_us, Kineto alone; compile(model) leaves the optimizer step
and autocast's weight casts as they are, so that saving adds to compile's too) and the
advice's share of compile's saving with it.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from expected_counts import analyze  # noqa: E402


def gpu_saving_ms(totals, steps):
    """The advice's GPU saving per step in ms: the chains' forward and their fused backward."""
    us = (totals.get("est_saving_us") or 0) + (totals.get("est_backward_saving_us") or 0)
    return us / steps / 1e3


def row(name, t, totals, steps, et_totals=None):
    eager, comp = t["eager"]["median_ms"], t["compiled"]["median_ms"]
    compile_pct = 100 * (eager - comp) / eager
    host = totals.get("host") or {}
    host_ms = host.get("est_saving_without_profiler_us", 0) / steps / 1e3
    cells, shares = [], []
    for tot in (totals, et_totals):
        if tot is None:
            cells.append("-")
            shares.append("-")
            continue
        ms = gpu_saving_ms(tot, steps)
        pct = 100 * ms / eager
        cells.append(f"{ms:.3f} ({pct:.1f}%)")
        shares.append(f"{100 * pct / compile_pct:.0f}%" if compile_pct > 0 else "-")
    # the optimizer's and the modules' advice (Kineto alone): fused=True, the master weights (the
    # GEMM weights in bf16, autocast's casts of them gone) and the drop-in nn.MultiheadAttention:
    # other changes than the chains', on top
    opt_ms = sum(totals.get(k) or 0 for k in ("optimizer_saving_us", "master_weights_saving_us",
                                              "multihead_attention_saving_us")) / steps / 1e3
    opt, both = "-", "-"
    if opt_ms > 0:
        opt = f"{opt_ms:.3f} ({100 * opt_ms / eager:.1f}%)"
        if compile_pct > 0:
            both = f"{100 * (100 * (gpu_saving_ms(totals, steps) + opt_ms) / eager) / compile_pct:.0f}%"
    return (f"| {name} | {t['mode']} | {t['dtype']} | {eager:.3f} | {comp:.3f} | {compile_pct:.1f}% | "
            f"{cells[0]} | {cells[1]} | {'yes' if host.get('host_bound') else 'no'} | "
            f"{host_ms:.3f} | {' / '.join(shares)} | {opt} | {both} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-fuseadvise", default="", help="the fuseadvise binary (default: go run ./cmd/fuseadvise)")
    p.add_argument("dir")
    a = p.parse_args(argv)
    bin_ = [a.fuseadvise] if a.fuseadvise else ["go", "run", "./cmd/fuseadvise"]
    with open(os.path.join(a.dir, "timing.json")) as f:
        timing = json.load(f)
    with open(os.path.join(a.dir, "manifest.json")) as f:
        files = {e["name"]: e for e in json.load(f)["traces"] if "error" not in e}
    print(f"Step times on {timing.get('gpu', timing.get('device'))}, torch {timing.get('torch')}: "
          f"{timing.get('method')}.\n")
    print("| model | mode | dtype | eager ms | compiled ms | compile saves | advice's GPU saving, ms "
          "(% of eager) | with -et | host-bound | host saving, ms | advice / compile (Kineto / -et) | "
          "optimizer's and modules' advice, ms (% of eager) | advice with it / compile |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    skipped = []
    for name, t in sorted(timing["models"].items()):
        if not isinstance(t.get("compiled"), dict) or name not in files:
            skipped.append(f"{name}: {t.get('error') or t.get('compiled') or 'no trace'}")
            continue
        e = files[name]
        trace = os.path.abspath(os.path.join(a.dir, e["file"]))
        r = analyze(bin_, trace)
        et = e.get("et_file")
        r_et = analyze(bin_, trace, os.path.abspath(os.path.join(a.dir, et))) if et else None
        steps = max(r["trace"].get("steps") or e["steps"], 1)
        print(row(name, t, r.get("totals") or {}, steps, (r_et or {}).get("totals") if r_et else None))
    if skipped:
        print("\nNot compared:\n")
        for s in skipped:
            print(f"- {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
