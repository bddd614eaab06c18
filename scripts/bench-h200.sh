#!/usr/bin/env bash
# The H200 benchmark matrix behind docs/benchmarks/h200.{json,md}: every kernel folder of the
# benchmark anchors (fuseadvise gen -anchors: the shapes of the project's H200 reference
# timings, plus large and decode-size cases of the other patterns) and of every opportunity
# fuseadvise finds in the shared H200 traces, measured by fuseadvise bench.
#
#   scripts/bench-h200.sh prepare DIR   # here: build a static fuseadvise into DIR and
#                                       # generate the kernel folders into DIR/matrix
#   scripts/bench-h200.sh run DIR OUT   # on the GPU machine (no Go there): bench them all,
#                                       # split over every visible GPU, into OUT/h200.json
#                                       # (ONLY=REGEX: the folders whose name matches)
#   scripts/bench-h200.sh merge OUT.json IN.json...  # runs of subsets into one result
#   scripts/bench-h200.sh predict DIR RESULT.json    # here: its predictions from the current
#                                       # cost model (the folders of DIR/matrix, prepared now)
#
# The GPU machine has torch and triton in its python3 (torch 2.11.0, triton 3.6.0 there).
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
prepare)
  dir=${2:?usage: bench-h200.sh prepare DIR}
  rm -rf "$dir/matrix"
  mkdir -p "$dir/matrix"
  CGO_ENABLED=0 go build -o "$dir/fuseadvise" ./cmd/fuseadvise
  "$dir/fuseadvise" gen -anchors -o "$dir/matrix/anchors" >/dev/null
  traces=${FUSEADVISE_SHARED:-../shared}/traces/h200
  for t in "$traces"/*.json.gz; do
    case "$t" in *.et.json.gz) continue ;; esac
    name=$(basename "$t" .json.gz)
    "$dir/fuseadvise" gen -o "$dir/matrix/$name" "$t" >/dev/null 2>"$dir/matrix/$name.skipped" || true
  done
  # the same case (pattern, dtype, shapes, parameters) found in several traces is measured once
  find "$dir/matrix" -name case.py -print0 | sort -z | xargs -0 md5sum | awk 'seen[$1]++ {print $2}' |
    while read -r c; do rm -rf "$(dirname "$c")"; done
  find "$dir/matrix" -name case.py | wc -l | xargs echo "kernel folders:" >&2
  ;;
run)
  dir=${2:?usage: bench-h200.sh run DIR OUT}
  out=${3:?usage: bench-h200.sh run DIR OUT}
  gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
  # ONLY=REGEX: just the folders whose name matches (e.g. ONLY='^(swiglu|mask_softmax)')
  mapfile -t folders < <(find "$dir/matrix" -name case.py -printf '%h\n' | sort |
    awk -v re="${ONLY:-.}" '{n = $0; sub(/.*\//, "", n)} n ~ re')
  echo "benchmarking ${#folders[@]} kernel folders on $gpus GPU(s)" >&2
  FUSEADVISE_PYTHON=python3 "$dir/fuseadvise" bench -gpus "$gpus" -repeats "${REPEATS:-3}" \
    -timeout "${TIMEOUT:-9m}" -o "$out/h200.json" "${folders[@]}"
  ;;
merge)
  # merge OUT.json IN.json...: one result from runs of subsets of the matrix (ONLY=...) on the
  # same kind of machine; a case measured in several inputs keeps the last input's figures
  out=${2:?usage: bench-h200.sh merge OUT.json IN.json...}
  shift 2
  python3 - "$out" "$@" <<'PY'
import json, statistics, sys
out, ins = sys.argv[1], [json.load(open(f)) for f in sys.argv[2:]]
for r in ins[1:]:
    for k in ("gpu", "torch", "triton"):
        if r[k] != ins[0][k]:
            sys.exit(f"merge: {k} differs between inputs: {ins[0][k]!r} vs {r[k]!r}")
cases = {}  # one entry per case and mode (forward, backward, full)
for r in ins:
    for c in r["cases"]:
        key = (c["name"], c.get("mode", "forward"))
        cases.pop(key, None)
        cases[key] = c
merged = {k: ins[0][k] for k in ("gpu", "torch", "triton")}
# each case's floor was computed with its own run's measured copy bandwidth; the header gives the median
merged["copy_tbps"] = statistics.median(r["copy_tbps"] for r in ins)
# runs timed with different L2 flushes do not merge (absent: do_bench's zero_() flush)
flushes = {r.get("flush_bytes") for r in ins}
if len(flushes) > 1:
    sys.exit(f"merge: the inputs were timed with different L2 flushes: {sorted(map(str, flushes))}")
if ins[0].get("flush_bytes"):
    merged["flush_bytes"] = ins[0]["flush_bytes"]
merged["cases"] = list(cases.values())
json.dump(merged, open(out, "w"), indent=2)
print(f"merge: {len(merged['cases'])} cases from {len(ins)} runs", file=sys.stderr)
PY
  ;;
predict)
  dir=${2:?usage: bench-h200.sh predict DIR RESULT.json}
  res=${3:?usage: bench-h200.sh predict DIR RESULT.json}
  mapfile -t folders < <(find "$dir/matrix" -name case.py -printf '%h\n' | sort)
  "$dir/fuseadvise" bench -predict "$res" -o "$res" "${folders[@]}"
  ;;
*)
  echo "usage: bench-h200.sh prepare DIR | run DIR OUT | merge OUT.json IN.json... | predict DIR RESULT.json" >&2
  exit 2
  ;;
esac
