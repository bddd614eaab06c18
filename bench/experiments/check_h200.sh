#!/usr/bin/env bash
# One GPU call that checks the templates after a change (run from the repository root on the
# H200 machine, python3 with torch and triton there; results under $OUT):
#   the templates' GPU tests (-m gpu), the tile probes of each template group, and the timing
#   functions' own GPU test (PROBES=0: without the tile probes). Prints a short summary last.
set -uo pipefail
out=${OUT:-out/check}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$out/gpu.txt"
( cd templates && timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu -x . ) >"$out/gpu_tests.txt" 2>&1
echo "gpu tests: $(tail -1 "$out/gpu_tests.txt")"
timeout 60 python3 -m pytest -q -p no:cacheprovider bench/test_timing.py >"$out/timing_tests.txt" 2>&1
echo "timing tests: $(tail -1 "$out/timing_tests.txt")"
[ "${PROBES:-1}" = 1 ] || exit 0
for p in bench/experiments/probe_tiles_*.py; do
  echo "== $p"
  timeout 150 python3 "$p" 2>&1 | tail -40
done | tee "$out/probes.txt"
