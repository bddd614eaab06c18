#!/usr/bin/env bash
# The attention benchmark on one H200, in one device call (under 10 minutes). Prepared here:
#
#   bash scripts/bench-h200.sh prepare .dev          # static fuseadvise + the matrix's folders
#   cp ../shared/traces/h200/gpt2_train_bf16{,.et}.json.gz .dev/
#
# then on the H200 from the repository root, with .dev carried, results under $OUT:
#
#   gpu.txt          the card and its clocks as found (never changed)
#   run.log, run-gpt2.tar   fuseadvise run -pattern attention on the GPT-2 training trace:
#                    analysis, generated folder, verify.json (interpreter), bench.json (all
#                    modes), report and PR folder
#   attention.json   fuseadvise bench -modes all -repeats 1 of the matrix's attention anchors,
#                    in the order below (the targets' cases first), stopped at the deadline
#
# Knobs for measuring in several calls: SKIP_RUN=1 skips the GPT-2 run, FROM=N starts at the
# N-th anchor of the order (0-based), ANCHORS="a b" measures only those anchors (names as in the
# order), BUDGET=S the seconds the call may spend (default 570).
set -uo pipefail
out=${OUT:?OUT must name the folder that comes back}
dev=${DEV:-.dev}
start=$SECONDS
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader \
  | tee "$out/gpu.txt"
export FUSEADVISE_PYTHON=python3 PYTHONUNBUFFERED=1
[ -n "${SKIP_RUN:-}" ] || timeout 270 "$dev/fuseadvise" run -pattern attention -top 1 -et "$dev/gpt2_train_bf16.et.json.gz" \
  -o "$out/run-gpt2" "$dev/gpt2_train_bf16.json.gz" >"$out/run.log" 2>&1
echo "run exit: $? after $((SECONDS - start)) s"
tail -5 "$out/run.log"
[ -n "${SKIP_RUN:-}" ] || { tar -C "$out" -cf "$out/run-gpt2.tar" run-gpt2 && rm -rf "$out/run-gpt2"; }
A=$dev/matrix/anchors
order=(causal-bf16-4x16x1024x64-b38a52c5 causal-bf16-8x12x512x64-4c0ec8b8 causal-bf16-8x12x512x64-c5329c5a
  bf16-8x12x512x64-e6cccde9 causal-bf16-4x16x512x64-ff0206fe causal-bf16-2x16x2048x64-e4755f27
  causal-bf16-4x16x1024x64-44781484 bf16-4x16x1024x64-f821f4d2 additive-bf16-16x12x256x64-a720f351
  causal-bf16-8x12x512x64-7946e953 causal-bf16-4x32x512x96-17081c69 additive-fp32-8x12x512x64-3d09a58e
  bool-fp16-4x12x129x64-893004b5 causal-fp16-4x12x127x64-2371f06f causal-fp16-2x16x256x64-3c152e21
  causal-fp16-1x12x128x64-b317ccba causal-fp16-8x32x1x128-fe6b23de)
[ -z "${ANCHORS:-}" ] || read -ra order <<<"$ANCHORS"
folders=()
for o in "${order[@]:${FROM:-0}}"; do folders+=("$A/attention-$o"); done
left=$((${BUDGET:-570} - (SECONDS - start)))
echo "bench: ${#folders[@]} folders, ${left} s"
"$dev/fuseadvise" bench -modes all -repeats 1 -timeout "${left}s" -o "$out/attention.json" "${folders[@]}" \
  2>"$out/bench.log"
echo "bench exit: $? after $((SECONDS - start)) s"
tail -3 "$out/bench.log"
