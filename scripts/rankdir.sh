#!/usr/bin/env bash
# rankdir.sh N DIR [TRACE]: writes a synthetic job of N ranks into DIR for scale measurements:
# N copies of one recorded Kineto trace (by default the bundled mlp_blocks_infer_fp32), each
# given a distributedInfo rank and world size N, so `fuseadvise analyze DIR` reads them as one
# job's ranks (same GPU, overlapping time windows). See docs/scale.md.
set -euo pipefail
n=${1:?usage: rankdir.sh N DIR [TRACE.json.gz]}
dir=${2:?usage: rankdir.sh N DIR [TRACE.json.gz]}
src=${3:-$(dirname "$0")/../testdata/traces/mlp_blocks_infer_fp32.json.gz}
mkdir -p "$dir"
body=$(mktemp)
trap 'rm -f "$body"' EXIT
# the trace without its opening brace: each rank's file is its own header, then this
zcat -f "$src" | sed '0,/{/s/{//' >"$body"
for ((r = 0; r < n; r++)); do
	{
		printf '{"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d},' "$r" "$n"
		cat "$body"
	} | gzip -1 >"$dir/rank$r.pt.trace.json.gz"
done
echo "$n ranks in $dir" >&2
