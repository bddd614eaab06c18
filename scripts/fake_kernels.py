"""Gives a CPU-recorded Kineto trace one fake GPU kernel per op that does work, so that the
detector's GPU gates (generic chains are regions of ops that launched work) pass on a trace
recorded without a GPU: a dry run of detection, never a measurement.

  python3 scripts/fake_kernels.py IN.json.gz OUT.json.gz

An op gets the kernel unless an op inside it that does work gets one (aten::linear's goes to
its addmm, aten::softmax's to _softmax); views, allocations and scalar reads do no work, nor
does the copy of a 0-dim tensor (the CPU wraps a Python scalar operand so; a GPU op does
not). Each kernel is 5 us long, launched by a cudaLaunchKernel inside its op, and the trace
says it ran on an NVIDIA H200. The execution trace beside it needs no change.
"""

import gzip
import json
import sys

NO_WORK = {
    "aten::view", "aten::as_strided", "aten::empty", "aten::empty_strided", "aten::empty_like",
    "aten::t", "aten::transpose", "aten::expand", "aten::reshape", "aten::_unsafe_view",
    "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::slice", "aten::select",
    "aten::resolve_conj", "aten::resolve_neg", "aten::detach", "aten::alias", "aten::lift_fresh",
    "aten::result_type", "aten::item", "aten::_local_scalar_dense",
}


def does_work(e):
    if e["name"] in NO_WORK:
        return False
    dims = e.get("args", {}).get("Input Dims")
    return not (e["name"] in ("aten::to", "aten::_to_copy", "aten::copy_") and dims and all(d == [] for d in dims))


def fake(trace):
    events = trace["traceEvents"]
    ops = sorted((e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"),
                 key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    inside = [[] for _ in ops]  # the ops nested in each, by index
    stack = []
    for i, e in enumerate(ops):
        while stack and (ops[stack[-1]]["tid"] != e["tid"] or ops[stack[-1]]["ts"] + ops[stack[-1]]["dur"] <= e["ts"]):
            stack.pop()
        for j in stack:
            inside[j].append(i)
        stack.append(i)
    correlation = 10_000_000
    gpu_ts = min((e["ts"] for e in ops), default=0)
    for i, e in enumerate(ops):
        if not does_work(e) or any(does_work(ops[j]) for j in inside[i]):
            continue
        correlation += 1
        ext = e.get("args", {}).get("External id", correlation)
        launch = e["ts"] + e["dur"] * 0.25
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": e["pid"],
                       "tid": e["tid"], "ts": launch, "dur": e["dur"] * 0.5,
                       "args": {"External id": ext, "cbid": 211, "correlation": correlation}})
        gpu_ts = max(gpu_ts, launch + 1)
        events.append({"ph": "X", "cat": "kernel", "name": "fake_" + e["name"].removeprefix("aten::"),
                       "pid": 0, "tid": 7, "ts": gpu_ts, "dur": 5.0,
                       "args": {"External id": ext, "device": 0, "stream": 7, "correlation": correlation,
                                "grid": [128, 1, 1], "block": [128, 1, 1]}})
        gpu_ts += 6
    trace["deviceProperties"] = [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320,
                                  "computeMajor": 9, "computeMinor": 0, "numSms": 132}]
    return trace


def main(argv):
    if len(argv) != 2:
        print("usage: python3 scripts/fake_kernels.py IN.json.gz OUT.json.gz", file=sys.stderr)
        return 2
    with gzip.open(argv[0], "rt") as f:
        trace = json.load(f)
    with gzip.open(argv[1], "wt") as f:
        json.dump(fake(trace), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
