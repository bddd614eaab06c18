"""Trims recorded trace pairs to what fuseadvise reads, so that the traces of testdata/models
and testdata/corpus stay small in the repository (docs/recording.md, "Sizes"). The one source
of the trimming: tracerec.record() calls trim_file() on both files it writes, and

  python3 scripts/record_trim.py [-steps N] DIR...   # every pair of DIR/manifest.json, in place

trims a folder recorded before the same way; with -steps N it also cuts each pair to its
first N ProfilerStep spans (the events a recording of N steps has; the recording scripts
record one step), sets the manifest entry's steps and sizes and keeps what was recorded as
recorded_steps. Trimming a trimmed folder changes nothing.

What goes, by file kind (what stays is what trace/parse.go and trace/et.go read):
- Kineto trace (NAME.json.gz): flow events other than the forward-backward ones (ac2g: the
  reader finds a launch's kernels by their correlation argument); instant events; X events
  of categories the reader skips (python_function is kept: with_stack=False records none);
  and, inside args, every key the reader does not read (a kernel's occupancy, registers,
  shared memory, blocks and warps per SM, queued, context; a launch's cbid; a copy's
  bandwidth). Events' ph, cat, name, pid, tid, ts, dur, id, the metadata events and the
  top-level keys (baseTimeNanoseconds, deviceProperties, ...) stay as recorded.
- Execution trace (NAME.et.json.gz): per node its id, name, ctrl_deps, inputs' and outputs'
  values and types, and of its attrs only rf_id (the join key); shapes, strides, op_schema,
  scope, seq_id and the rest go. Every value stays, scalars and lists included: today the
  reader keeps only tensors and strings, but the execution trace is where a scalar Kineto
  did not record (an add's double, say) can be recovered from. The top-level keys stay.
- Kineto events are written metadata first, then by category, name, thread and start (the
  reader sorts what it reads; like records side by side compress better).

Files are written back gzip'd at level 9 with no name or time in the header, so trimming the
same recording gives the same bytes.
"""

import argparse
import gzip
import json
import os
import sys

# The args keys trace/parse.go's parseArgs reads; every other key is skipped there.
KINETO_ARGS = frozenset({
    "External id", "external id", "correlation", "Record function id", "Ev Idx",
    "Profiler Event Index", "Sequence number", "Fwd thread id", "stream", "device", "bytes",
    "Python id", "Python parent id", "grid", "block", "Input Dims", "Input dims", "Input type",
    "Input Strides", "Concrete Inputs", "kernel", "name",
})

# X-event categories the reader turns into ops, launches, activities or Python frames
# (trace/parse.go's classify, lower-cased); the others it counts and skips.
KINETO_CATEGORIES = frozenset({
    "cpu_op", "operator", "user_annotation", "user", "python_function", "cuda_runtime",
    "runtime", "cuda_driver", "kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset",
})

FWD_BWD_FLOWS = frozenset({"fwdbwd", "fwd_bwd", "forward_backward"})

# The execution-trace fields trace/et.go reads.
ET_NODE_KEYS = ("id", "name", "ctrl_deps", "inputs", "outputs", "attrs")
ET_VALUE_KEYS = ("values", "types")
ET_ATTRS = frozenset({"rf_id"})


def keep_event(e):
    ph = e.get("ph")
    if ph in ("s", "f", "t"):
        return e.get("cat") in FWD_BWD_FLOWS
    if ph in ("i", "I"):
        return False
    if ph == "X":
        return str(e.get("cat", "")).lower() in KINETO_CATEGORIES
    return True  # metadata (thread and process names) and anything else


def trim_kineto(doc):
    """The Kineto trace doc (a dict with traceEvents) trimmed; doc is not changed."""
    events = []
    for e in doc["traceEvents"]:
        if not keep_event(e):
            continue
        args = e.get("args")
        if isinstance(args, dict) and e.get("ph") != "M":
            e = dict(e, args={k: v for k, v in args.items() if k in KINETO_ARGS})
        events.append(e)
    events.sort(key=event_order)
    return dict(doc, traceEvents=events)


def event_order(e):
    """Metadata first, then by category, name, thread and start: like records side by side
    compress better (a tenth smaller than in time order), and the reader sorts what it reads
    itself."""
    return (e.get("ph") != "M", str(e.get("cat", "")), str(e.get("name", "")), str(e.get("pid", "")),
            str(e.get("tid", "")), float(e.get("ts", 0) or 0), e.get("ph", ""))


def trim_et_node(n):
    out = {k: n[k] for k in ET_NODE_KEYS if k in n}
    for side in ("inputs", "outputs"):
        if isinstance(out.get(side), dict):
            out[side] = {k: out[side][k] for k in ET_VALUE_KEYS if k in out[side]}
    if "attrs" in out:
        out["attrs"] = [a for a in out["attrs"] if a.get("name") in ET_ATTRS]
    return out


def trim_et(doc):
    """The execution trace doc (a dict with nodes) trimmed; doc is not changed."""
    return dict(doc, nodes=[trim_et_node(n) for n in doc["nodes"]])


def step_spans(events):
    """The ProfilerStep#N annotations of a Kineto trace's events, by start."""
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
             and str(e.get("cat", "")).lower() in ("user_annotation", "user")]
    return sorted(steps, key=lambda e: float(e["ts"]))


HOST = frozenset({"cpu_op", "operator", "user_annotation", "user", "python_function",
                  "cuda_runtime", "runtime", "cuda_driver"})


def cut_steps(kineto, et, n):
    """The pair (kineto, et) cut to the first n steps: the metadata, the host events and flows
    that start before step n+1 starts, the GPU activities those launches correlate with, and
    the execution-trace nodes recorded before step n+1's record function (rf_id below it; the
    thread and process nodes, rf_id 0, stay). Unchanged when the trace has n steps or fewer."""
    steps = step_spans(kineto["traceEvents"])
    if len(steps) <= n:
        return kineto, et
    end = float(steps[n]["ts"])
    end_rf = steps[n]["args"]["Record function id"]
    events, launches, gpu = [], set(), []
    for e in kineto["traceEvents"]:
        ph, cat = e.get("ph"), str(e.get("cat", "")).lower()
        if ph == "X" and cat not in HOST:
            gpu.append(e)
            continue
        if ph != "M" and float(e.get("ts", 0) or 0) >= end:
            continue
        if ph == "X" and cat in ("cuda_runtime", "runtime", "cuda_driver"):
            launches.add(e.get("args", {}).get("correlation"))
        events.append(e)
    events += [e for e in gpu if e.get("args", {}).get("correlation") in launches]

    def rf(node):
        return next((a["value"] for a in node.get("attrs", []) if a.get("name") == "rf_id"), 0)

    nodes = [x for x in et["nodes"] if rf(x) < end_rf]
    return dict(kineto, traceEvents=events), dict(et, nodes=nodes)


def is_et(path):
    return path.endswith(".et.json.gz") or path.endswith(".et.json")


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write(path, doc):
    """Writes doc as compact JSON, one Kineto event per line (the reader splits chunks on the
    writer's event lines), gzip'd without a name or time in the header when path ends in .gz."""
    if "traceEvents" in doc:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        lines = [json.dumps(e, separators=(",", ":")) for e in doc["traceEvents"]]
        text = json.dumps(head, separators=(",", ":"))[:-1]
        text += (',' if head else '') + '"traceEvents":[\n' + ",\n".join(lines) + "\n]}\n"
    else:
        text = json.dumps(doc, separators=(",", ":")) + "\n"
    data = text.encode("utf-8")
    tmp = path + ".tmp"
    if path.endswith(".gz"):
        with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                   compresslevel=9, mtime=0) as f:
            f.write(data)
    else:
        with open(tmp, "wb") as f:
            f.write(data)
    os.replace(tmp, path)


def read_checked(path):
    """The trace at path, checked to be an execution trace when its name ends in
    .et.json[.gz], else a Kineto trace."""
    doc = read(path)
    if is_et(path):
        if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
            raise ValueError(f"{path}: not an execution trace (no nodes array)")
    elif not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Kineto trace (no traceEvents array)")
    return doc


def trim_file(path, out=None):
    """Trims the trace at path into out (default: path itself, in place); out ending in .gz is
    gzip'd. Returns out."""
    doc = read_checked(path)
    out = out or path
    write(out, trim_et(doc) if is_et(path) else trim_kineto(doc))
    return out


def trim_pair(folder, entry, steps):
    """Trims one manifest entry's pair in folder (cut to `steps` steps when given) and updates
    the entry's steps and sizes."""
    kpath, epath = os.path.join(folder, entry["file"]), os.path.join(folder, entry["et_file"])
    kineto, et = read_checked(kpath), read_checked(epath)
    if steps and entry["steps"] > steps:
        kineto, et = cut_steps(kineto, et, steps)
        entry.setdefault("recorded_steps", entry["steps"])
        entry["steps"] = steps
        entry.pop("raw_bytes", None)  # the profiler's JSON of all the recorded steps
    write(kpath, trim_kineto(kineto))
    write(epath, trim_et(et))
    entry["gz_bytes"], entry["et_gz_bytes"] = os.path.getsize(kpath), os.path.getsize(epath)


def trim_folder(folder, steps=0):
    """Trims every recorded pair of folder/manifest.json; returns the bytes of all pairs."""
    mpath = os.path.join(folder, "manifest.json")
    with open(mpath) as f:
        manifest = json.load(f)
    total = 0
    for entry in manifest["traces"]:
        if "error" in entry:
            continue
        trim_pair(folder, entry, steps)
        total += entry["gz_bytes"] + entry["et_gz_bytes"]
    if steps and manifest.get("steps", 0) > steps:
        manifest["steps"] = steps
    with open(mpath, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return total


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-steps", type=int, default=0, help="cut each pair to its first N steps (0: keep all)")
    p.add_argument("dirs", nargs="+")
    a = p.parse_args(argv)
    if a.steps < 0:
        print("record_trim: -steps must be 0 or more", file=sys.stderr)
        return 2
    for d in a.dirs:
        try:
            total = trim_folder(d, a.steps)
        except (OSError, ValueError, KeyError, json.JSONDecodeError, EOFError) as err:
            print(f"record_trim: {d}: {err}", file=sys.stderr)
            return 2
        print(f"{d}: {total} bytes in its traces", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
