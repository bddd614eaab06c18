"""Prints, as a markdown table, how much of each recorded trace's memory-bound kernel time the
chains found claim (the "coverage" object of `fuseadvise analyze -format json`, defined in
patterns/coverage.go), from the Kineto trace alone and with its execution trace (-et), for
every trace of DIR/manifest.json (docs/recording.md, "Coverage").

  python3 scripts/record_coverage.py [-fuseadvise BIN] DIR

Columns: the memory-bound time and its share of all kernel time; the time claimed by every
chain found and its share (forward kernels), the share counted (the non-overlapping set the
totals sum), the share claimed with the chains' backward kernels; then the claimed shares
with the execution trace. The last row sums the times over the traces.
"""

import argparse
import json
import os
import sys

import expected_counts


def pct(part, whole):
    return f"{100 * part / whole:.1f}%" if whole else "-"


def row(name, k, e):
    total = k["memory_bound_us"] + k["compute_us"] + k["other_us"]
    return (f"| {name} | {k['memory_bound_us']:.0f} | {pct(k['memory_bound_us'], total)} | "
            f"{k['claimed_us']:.0f} | {pct(k['claimed_us'], k['memory_bound_us'])} | "
            f"{pct(k['counted_us'], k['memory_bound_us'])} | "
            f"{pct(k['claimed_with_backward_us'], k['memory_bound_us'])} | "
            f"{pct(e['claimed_us'], e['memory_bound_us'])} | "
            f"{pct(e['claimed_with_backward_us'], e['memory_bound_us'])} |")


KEYS = ("memory_bound_us", "compute_us", "other_us", "claimed_us", "counted_us", "claimed_with_backward_us")


def table(bin_, folder):
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    lines = [
        "| trace | memory-bound µs | of kernel time | claimed µs | claimed | counted | claimed with backward "
        "| claimed, -et | with backward, -et |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    sums = {"k": dict.fromkeys(KEYS, 0.0), "e": dict.fromkeys(KEYS, 0.0)}
    for entry in manifest["traces"]:
        if "error" in entry:
            continue
        trace = os.path.join(folder, entry["file"])
        k = expected_counts.analyze(bin_, trace)["coverage"]
        e = expected_counts.analyze(bin_, trace, os.path.join(folder, entry["et_file"]))["coverage"]
        lines.append(row(entry["name"], k, e))
        for key in KEYS:
            sums["k"][key] += k[key]
            sums["e"][key] += e[key]
    lines.append(row("all", sums["k"], sums["e"]))
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-fuseadvise", default="", help="the fuseadvise binary (default: go run ./cmd/fuseadvise)")
    p.add_argument("dir")
    a = p.parse_args(argv)
    bin_ = [a.fuseadvise] if a.fuseadvise else ["go", "run", "./cmd/fuseadvise"]
    try:
        print("\n".join(table(bin_, a.dir)))
    except (OSError, KeyError, RuntimeError, json.JSONDecodeError) as err:
        print(f"record_coverage: {a.dir}: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
