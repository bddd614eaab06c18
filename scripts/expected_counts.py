"""Writes DIR/EXPECTED.json for a folder of recorded traces (record_models.py, record_corpus.py):
per trace, the forward instances of each catalog pattern and of each generic chain, as
`fuseadvise analyze -et` finds them with the execution trace's exact dataflow, the way the
shared H200 traces' EXPECTED.json was checked (patterns/expected_test.go: the Kineto trace
alone must give the execution trace's counts). patterns/recorded_test.go then holds the
Kineto trace alone to these counts.

  python3 scripts/expected_counts.py [-fuseadvise BIN] [-known] DIR...

It also prints, per trace, where the Kineto trace alone differs (what that test will report),
and for the corpus whether the chains found cover each case's declared ops. With -known it
also writes DIR/KINETO_KNOWN.json, the differences the test excuses: each with both counts
and a reason id; an entry whose counts are unchanged keeps its reason, a new one gets an
empty reason, which the test refuses until someone who looked writes why (reasons: what the
Kineto trace lacks there). Generic chains
are keyed "OPS DTYPE DIMS" (ops comma-joined, dims x-joined), as the Go test keys them.
Exit status 1 when a trace cannot be analyzed, 0 otherwise (differences are reported, not
failed: the Go test judges them).
"""

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def analyze(bin_, trace, et=None):
    cmd = bin_ + ["analyze", "-format", "json"]
    if et:
        cmd += ["-et", et]
    cmd.append(trace)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def generic_key(c):
    return f"{','.join(c['ops'])} {c['dtype']} {'x'.join(str(d) for d in c['dims'])}"


def counts(report):
    """The forward instances per pattern and per generic chain key of one analysis."""
    patterns = {o["pattern"]: o["instances"] for o in report["opportunities"]}
    generic = {}
    for c in report.get("generic_chains") or []:
        k = generic_key(c)
        generic[k] = generic.get(k, 0) + c["instances"]
    return patterns, generic


def known_entries(kpat, kgen, pat, gen):
    """KINETO_KNOWN.json's entries of one trace: "pattern NAME" or "generic KEY" -> both counts."""
    out = {}
    for kind, got, want in (("pattern", kpat, pat), ("generic", kgen, gen)):
        for k in sorted(set(got) | set(want)):
            if got.get(k, 0) != want.get(k, 0):
                out[f"{kind} {k}"] = {"kineto": got.get(k, 0), "et": want.get(k, 0)}
    return out


def merge_known(old, new):
    """new's entries (trace -> key -> counts), each with old's reason where old has the same
    counts, else an empty one; old's reasons table kept."""
    traces = {}
    for name, entries in sorted(new.items()):
        if not entries:
            continue
        traces[name] = {}
        for key, e in sorted(entries.items()):
            prev = old.get("traces", {}).get(name, {}).get(key, {})
            same = prev.get("kineto") == e["kineto"] and prev.get("et") == e["et"]
            traces[name][key] = dict(e, reason=prev.get("reason", "") if same else "")
    return {"reasons": old.get("reasons", {}), "traces": traces}


def differences(got, want):
    return [f"{k}: Kineto {got.get(k, 0)}, execution trace {want.get(k, 0)}"
            for k in sorted(set(got) | set(want)) if got.get(k, 0) != want.get(k, 0)]


def covers(generic, declared, catalog_found):
    """Whether some generic chain's ops hold the declared epilogue (the ops after the GEMM) as
    a contiguous run; when a catalog pattern was found, it may have taken the first of them
    (linear_gelu takes the GELU after the GEMM)."""
    runs = [declared[1:]]
    if catalog_found:
        runs.append(declared[2:])
    chains = [k.split(" ")[0].split(",") for k in generic]
    return any(len(r) >= 2 and any(c[i:i + len(r)] == r for i in range(len(c)))
               for r in runs for c in chains)


def expected_for(bin_, folder):
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    out, known, problems = {}, {}, 0
    for e in manifest["traces"]:
        if "error" in e:
            print(f"{e['name']}: not recorded ({e['error']})", file=sys.stderr)
            continue
        trace = os.path.abspath(os.path.join(folder, e["file"]))
        et = os.path.abspath(os.path.join(folder, e["et_file"]))
        try:
            pat, gen = counts(analyze(bin_, trace, et))
            kpat, kgen = counts(analyze(bin_, trace))
        except (RuntimeError, json.JSONDecodeError) as err:
            print(f"{e['name']}: {err}", file=sys.stderr)
            problems += 1
            continue
        entry = {"mode": e.get("mode", manifest.get("mode", "infer")), "steps": e["steps"],
                 "model": e.get("model") or e.get("case"), "dtype": e["dtype"],
                 "forward_instances": pat, "generic_instances": gen}
        if "ops" in e:
            entry["declared_ops"] = e["ops"]
        out[e["file"]] = entry
        known[e["file"]] = known_entries(kpat, kgen, pat, gen)
        diff = differences(kpat, pat) + differences(kgen, gen)
        line = "Kineto alone matches" if not diff else "Kineto alone differs: " + "; ".join(diff)
        if "ops" in e and not covers(gen, e["ops"], bool(pat)):
            line += f"; no generic chain holds the declared {','.join(e['ops'][1:])}"
        print(f"{e['name']}: {line}", file=sys.stderr)
    return out, known, problems


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-fuseadvise", default="", help="the fuseadvise binary (default: go run ./cmd/fuseadvise)")
    p.add_argument("-known", action="store_true", help="also write DIR/KINETO_KNOWN.json (reasons kept)")
    p.add_argument("dirs", nargs="+")
    a = p.parse_args(argv)
    bin_ = [a.fuseadvise] if a.fuseadvise else ["go", "run", "./cmd/fuseadvise"]
    failed = 0
    for d in a.dirs:
        exp, known, problems = expected_for(bin_, d)
        failed += problems
        write_json(os.path.join(d, "EXPECTED.json"), exp)
        print(f"{d}/EXPECTED.json: {len(exp)} traces", file=sys.stderr)
        path = os.path.join(d, "KINETO_KNOWN.json")
        if a.known and (any(known.values()) or os.path.exists(path)):
            old = json.load(open(path)) if os.path.exists(path) else {}
            merged = merge_known(old, known)
            write_json(path, merged)
            empty = sum(not e["reason"] for t in merged["traces"].values() for e in t.values())
            print(f"{path}: {sum(map(len, merged['traces'].values()))} differences, {empty} without a reason",
                  file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
