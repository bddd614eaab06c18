#!/usr/bin/env bash
# One GPU call (under 9 minutes) that checks the attention template after a change; run from
# the repository root on the H200 machine (python3 with torch and triton there), results
# under $OUT:
#   gpu.txt              the card and its clocks as found (never changed)
#   gpu_tests.txt        pytest -m gpu templates/attention (graph capture with dropout, S up to
#                        4096, heads past 2**31 elements), at most 170 s
#   attention_probe.jsonl  probe_attention.py: fused vs SDPA's backends vs Flex vs
#                        torch.compile vs eager, causal and dropout, S = 512/1024/2048 bf16,
#                        forward and full; EAGER_ROUNDING off; each tile candidate (330 s budget)
# Prints the tests' summary and the probe's table last. (The loops' instruction counts need no
# GPU: bench/experiments/probe_attention_sass.py, run before the call.)
set -uo pipefail
out=${OUT:-out/check_attention}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader \
  | tee "$out/gpu.txt"
( timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu -x templates/attention ) >"$out/gpu_tests.txt" 2>&1
echo "gpu tests: $(tail -1 "$out/gpu_tests.txt")"
timeout 360 python3 bench/experiments/probe_attention.py --out "$out" --budget-s 330 \
  2>"$out/probe_attention.log" | tee "$out/probe_table.txt"
echo "probe exit: ${PIPESTATUS[0]} (log: probe_attention.log)"
