#!/usr/bin/env bash
# The GPU check of the generic chains (docs/benchmarks/h200.md, "The generic folders checked
# on the GPU"): `fuseadvise verify -gpu` of every distinct generic folder that `fuseadvise gen`
# writes for the bundled models, the corpus and the shared H200 traces (with the execution
# trace where one is recorded), and of codegen's generic examples.
#
#   scripts/verify-generic-gpu.sh prepare DIR   # here: a static fuseadvise in DIR and the
#                                               # folders in DIR/folders.tgz (pointwise and
#                                               # row folders in A/, GEMM-headed in B/,
#                                               # the examples in EX/)
#   scripts/verify-generic-gpu.sh run DIR OUT [A|B|EX]...  # on the GPU machine (no Go there):
#                                               # verify -gpu each set into OUT/verify-SET.json
#                                               # and OUT/verify-SET.log (TRIALS, default 1;
#                                               # LIMIT seconds a set, default 560)
#
# DIR must reach the GPU machine with the working tree: an untracked folder git does not
# ignore travels with it, but the whole copy is limited to 64 MiB (DIR is about 23 MB; keep
# other build folders out of the tree, or exclude them and name DIR in the call's carry).
# The sets are split so that each fits in one device call of 10 minutes (on an H200 at
# 4053df2: A with EX 275 s, B 406 s). The GPU machine has torch and triton in its python3.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
prepare)
  dir=${2:?usage: verify-generic-gpu.sh prepare DIR}
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$dir" "$work/an" "$work/gen" "$work/A" "$work/B"
  CGO_ENABLED=0 go build -o "$dir/fuseadvise" ./cmd/fuseadvise
  shared=${FUSEADVISE_SHARED:-../shared}
  for t in testdata/models/*.json.gz testdata/corpus/*.json.gz "$shared"/traces/h200/*.json.gz; do
    case "$t" in *.et.json.gz) continue ;; esac
    name=$(basename "$t" .json.gz)
    et=${t%.json.gz}.et.json.gz
    args=()
    [ -f "$et" ] && args=(-et "$et")
    "$dir/fuseadvise" analyze -format json "${args[@]}" -o "$work/an/$name.json" "$t" 2>/dev/null &&
      "$dir/fuseadvise" gen -from "$work/an/$name.json" -o "$work/gen/$name" >/dev/null 2>&1 || true
  done
  # one folder per distinct kernel and case (the same chain in several traces is checked once)
  for f in "$work"/gen/*/generic-*; do
    [ -d "$f" ] || continue
    h=$(cat "$f/kernel.py" "$f/case.py" | md5sum | cut -c1-12)
    set_=A
    grep -q '^KIND = "gemm"' "$f/case.py" && set_=B
    [ -d "$work/$set_/$h" ] || cp -r "$f" "$work/$set_/$h"
  done
  go test ./codegen -count=1 -run TestWriteGenericExamples -examples.out "$work/EX" >/dev/null
  tar czf "$dir/folders.tgz" -C "$work" A B EX
  echo "folders: A $(ls "$work/A" | wc -l), B $(ls "$work/B" | wc -l), EX $(ls "$work/EX" | wc -l)" >&2
  ;;
run)
  dir=${2:?usage: verify-generic-gpu.sh run DIR OUT [A|B|EX]...}
  out=${3:?usage: verify-generic-gpu.sh run DIR OUT [A|B|EX]...}
  shift 3
  sets=("$@")
  [ ${#sets[@]} -gt 0 ] || sets=(A EX B)
  mkdir -p "$out" "$dir/folders"
  tar xzf "$dir/folders.tgz" -C "$dir/folders"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv >&2 || true
  for s in "${sets[@]}"; do
    rc=0
    FUSEADVISE_PYTHON=python3 timeout "${LIMIT:-560}" "$dir/fuseadvise" verify -gpu -trials "${TRIALS:-1}" \
      -format json -o "$out/verify-$s.json" "$dir/folders/$s"/* 2>"$out/verify-$s.log" || rc=$?
    echo "set $s: exit $rc; $(tail -1 "$out/verify-$s.log")" >&2
  done
  ;;
*)
  sed -n '2,17p' "$0" >&2
  exit 2
  ;;
esac
