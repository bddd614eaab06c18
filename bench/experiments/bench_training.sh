#!/usr/bin/env bash
# The training check on one H200, in one device call (under 10 minutes). Prepared here:
#
#   bash scripts/bench-h200.sh prepare .dev          # static fuseadvise + the matrix's folders
#
# then on the H200 from the repository root, with .dev carried, results under $OUT:
#
#   gpu.txt          the card and its clocks as found (never changed)
#   gpu_tests.txt    pytest -m gpu over every template (graph capture with device seeds,
#                    huge and strided tensors, long rows; the layernorm_linear fold with large
#                    |mean|/std rows), at most 240 s
#   training.json    fuseadvise bench -modes all -repeats 1 of the training traces' folders
#                    below (one or two per pattern and model) and four anchors' large shapes,
#                    stopped at the deadline
#
# Knobs for measuring in several calls: SKIP_TESTS=1 skips the GPU tests, FOLDERS="a b" measures
# only those folders (paths under the matrix, as listed below), BUDGET=S the seconds the call may
# spend (default 575).
set -uo pipefail
out=${OUT:?OUT must name the folder that comes back}
dev=${DEV:-.dev}
start=$SECONDS
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader \
  | tee "$out/gpu.txt"
export FUSEADVISE_PYTHON=python3 PYTHONUNBUFFERED=1
[ -n "${SKIP_TESTS:-}" ] || ( cd templates && timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu -rfE . ) >"$out/gpu_tests.txt" 2>&1
echo "gpu tests: $(tail -1 "$out/gpu_tests.txt") after $((SECONDS - start)) s"
M=$dev/matrix
folders=(
  bert_train_bf16/layernorm_linear-bf16-16x256x768x3072-ae2fa7d5
  bert_train_bf16/linear_gelu-bf16-16x256x768x3072-58d7444a
  bert_train_bf16/add_layernorm-bf16-16x256x768-270eac28
  bert_train_bf16/dropout_add-bf16-16x256x768-2e77d963
  gpt2_train_bf16/gelu_pyops-bf16-8x512x3072-a5782f4b
  gpt2_train_bf16/add_layernorm-bf16-8x512x768-f0d1c386
  gpt2_train_bf16/dropout_add-bf16-8x512x768-8571ad7e
  llama_train_bf16/rmsnorm_pyops-fp32-4x512x1024-a7fe1ba8
  llama_train_bf16/swiglu-bf16-4x512x2816-3d72da54
  llama_train_bf16/generic-mul_add-fp32-4x16x512x64-18c952c2
  mlp_blocks_train_bf16/linear_gelu-bf16-16x256x2048x8192-d8181e79
  mlp_blocks_train_bf16/layernorm_linear-bf16-16x256x2048x8192-18daa673
  mlp_blocks_train_bf16/add_layernorm-bf16-16x256x2048-e2a9dd44
  convnext_tiny_train_bf16/generic-mul_add-fp32-32x96x56x56-11bb5aff
  convnext_tiny_train_bf16/add_layernorm-fp32-32x96x56x56-6b681f5c
  convnext_tiny_train_bf16/linear_gelu-bf16-32x56x56x96x384-aa30bbec
  gpt2_train_bf16/layernorm_linear-bf16-8x512x768x2304-69bf12c0
  # large shapes, for the backward's floor target (last: the deadline cuts them first)
  anchors/add_layernorm-bf16-8192x4096-46eb2f6d
  anchors/rmsnorm_pyops-bf16-8192x4096-f79bb692
  anchors/dropout_add-bf16-8192x4096-263468d2
  anchors/gelu_pyops-bf16-8192x16384-c3e3fa57
)
[ -z "${FOLDERS:-}" ] || read -ra folders <<<"$FOLDERS"
paths=()
for f in "${folders[@]}"; do [ -d "$M/$f" ] && paths+=("$M/$f") || echo "missing: $f"; done
left=$((${BUDGET:-575} - (SECONDS - start)))
echo "bench: ${#paths[@]} folders, ${left} s"
"$dev/fuseadvise" bench -modes all -repeats 1 -timeout "${left}s" -o "$out/training.json" "${paths[@]}" \
  2>"$out/bench.log"
echo "bench exit: $? after $((SECONDS - start)) s"
tail -3 "$out/bench.log"
