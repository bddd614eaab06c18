#!/usr/bin/env bash
# Records the traces of testdata/models and testdata/corpus on a GPU machine, times the models
# eager vs torch.compile there, and lands the results here (docs/recording.md).
#
# On the GPU machine (its python3 has torch, triton and transformers; no network), one device
# call each, each well inside 9 minutes; results go to $OUT (at most 8 files come back, so
# the traces travel as two tar files):
#
#   bash scripts/record-h200.sh traces      # every model's and corpus case's traces
#                                           #  -> $OUT/models.tar, $OUT/corpus.tar, $OUT/traces.log
#   bash scripts/record-h200.sh timing N    # timing batch N (1..3, record_models.py list)
#                                           #  -> $OUT/timing-N.json, $OUT/timing-N.log
#                                           # (MODELS=a,b: those models instead of batch N)
#
# Here, with what came back in FOLDER (the tars, timing-*.json):
#
# RECORD_ARGS is added to every record_models.py and record_corpus.py command: a dry run here
# with RECORD_ARGS="-tiny -device cpu" (and PYTHON naming a python with torch; transformers
# for the models) exercises the same path at small sizes.
#
#   bash scripts/record-h200.sh land FOLDER # unpack into testdata/models and testdata/corpus,
#                                           # cut to one step and trimmed (record_trim.py),
#                                           # merge the timings into testdata/models/timing.json,
#                                           # write both EXPECTED.json and KINETO_KNOWN.json
#                                           # (expected_counts.py -known) and
#                                           # print compile vs the advice (compile_vs_advice.py)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

case "${1:-}" in
traces)
  out=${OUT:?OUT must name the folder that comes back}
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/models" "$work/corpus"
  # each under a time limit of its own, so that the tars below are always written
  rc=0
  timeout -s INT 300 "$py" scripts/record_models.py traces -o "$work/models" ${RECORD_ARGS:-} 2>&1 | tee "$out/traces.log" || rc=1
  timeout -s INT 180 "$py" scripts/record_corpus.py record -o "$work/corpus" ${RECORD_ARGS:-} 2>&1 | tee -a "$out/traces.log" || rc=1
  tar -C "$work/models" -cf "$out/models.tar" .
  tar -C "$work/corpus" -cf "$out/corpus.tar" .
  du -sh "$work/models" "$work/corpus" | tee -a "$out/traces.log"
  exit $rc
  ;;
timing)
  out=${OUT:?OUT must name the folder that comes back}
  n=${2:?usage: record-h200.sh timing N}
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  rc=0
  # the script stops starting compiles at 420 s; the hard limit leaves time to copy the JSON
  which=(-batch "$n")
  if [ -n "${MODELS:-}" ]; then which=(-models "$MODELS"); fi
  timeout -s INT 540 "$py" scripts/record_models.py timing "${which[@]}" -deadline-s 420 -o "$work" ${RECORD_ARGS:-} 2>&1 |
    tee "$out/timing-$n.log" || rc=1
  cp "$work/timing.json" "$out/timing-$n.json" || rc=1
  exit $rc
  ;;
land)
  in=${2:?usage: record-h200.sh land FOLDER}
  for set in models corpus; do
    if [ -f "$in/$set.tar" ]; then
      rm -rf "testdata/$set/"*.json.gz "testdata/$set/manifest.json" "testdata/$set/EXPECTED.json"
      mkdir -p "testdata/$set"
      tar -C "testdata/$set" -xf "$in/$set.tar"
      # small enough for the repository: one step, only what fuseadvise reads (a recording
      # made by today's scripts is already so, and comes through unchanged)
      "$py" scripts/record_trim.py -steps 1 "testdata/$set"
    fi
  done
  shopt -s nullglob
  timings=("$in"/timing-*.json)
  if [ ${#timings[@]} -gt 0 ]; then
    "$py" - testdata/models/timing.json "${timings[@]}" <<'EOF'
import json, os, sys
out, ins = sys.argv[1], sys.argv[2:]
merged = json.load(open(out)) if os.path.exists(out) else {"models": {}}
for p in ins:
    t = json.load(open(p))
    models = t.pop("models")
    merged.update(t)
    merged["models"].update(models)
with open(out, "w") as f:
    json.dump(merged, f, indent=1, sort_keys=True)
    f.write("\n")
print(f"{out}: {len(merged['models'])} models", file=sys.stderr)
EOF
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  bin=$work/fuseadvise
  go build -o "$bin" ./cmd/fuseadvise
  "$py" scripts/expected_counts.py -fuseadvise "$bin" -known testdata/models testdata/corpus
  if [ -f testdata/models/timing.json ]; then
    "$py" scripts/compile_vs_advice.py -fuseadvise "$bin" testdata/models
  fi
  du -sh testdata/models testdata/corpus >&2
  ;;
*)
  sed -n '2,20p' "$0" >&2
  exit 2
  ;;
esac
