#!/usr/bin/env bash
# bench-parse.sh: parse one uncompressed trace with trace.Open (BenchmarkOpen, one
# iteration per process, RUNS=5 processes) and with Python's json.load, side by side,
# reporting wall time, CPU time and peak RSS (/usr/bin/time -v) for each.
#
#   scripts/bench-parse.sh [FILE]     # default: generate a 1 GB trace with internal/tracegen
#
# Set KEEP=1 to keep a generated file. Needs /usr/bin/time and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
file=${1:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -z $file ]]; then
	file=$tmp/big.json
	[[ ${KEEP:-} == 1 ]] && file=${TMPDIR:-/tmp}/fuseadvise-bench-1GB.json
	go run ./internal/tracegen -o "$file" -size "${SIZE:-1GB}"
fi
bytes=$(stat -c %s "$file")
go test -c -o "$tmp/trace.test" ./trace
cat "$file" >/dev/null # warm the page cache for both parsers

measure() { # name, command...
	local name=$1
	shift
	/usr/bin/time -v "$@" >"$tmp/out" 2>"$tmp/time" || { cat "$tmp/out" "$tmp/time"; exit 1; }
	local wall user sys rss
	wall=$(awk -F': ' '/Elapsed \(wall clock\)/{n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$tmp/time")
	user=$(awk -F': ' '/User time/{print $2}' "$tmp/time")
	sys=$(awk -F': ' '/System time/{print $2}' "$tmp/time")
	rss=$(awk -F': ' '/Maximum resident/{print $2}' "$tmp/time")
	printf '%-22s wall %7.2f s  user %7.2f s  sys %6.2f s  peak RSS %7.0f MiB (%.2fx file)  %6.0f MB/s\n' \
		"$name" "$wall" "$user" "$sys" "$((rss / 1024))" "$(echo "$rss*1024/$bytes" | bc -l)" "$(echo "$bytes/1000000/$wall" | bc -l)"
	echo "$wall" >"$tmp/$name.wall"
}

echo "file: $file ($bytes bytes), $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
# Go: RUNS single-iteration runs (the machine may be shared: report the median).
runs=${RUNS:-5}
for i in $(seq "$runs"); do
	(cd trace && FUSEADVISE_BENCH_TRACE=$file measure "go trace.Open #$i" "$tmp/trace.test" -test.run '^$' -test.bench 'Open$' -test.benchtime 1x)
	cat "$tmp/go trace.Open #$i.wall" >>"$tmp/go.walls"
done
median=$(sort -n "$tmp/go.walls" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "go trace.Open median wall of $runs runs: $median s"
measure "python json.load" python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(len(d["traceEvents"]))' "$file"
echo "speedup (median Go wall): $(echo "$(cat "$tmp/python json.load.wall")/$median" | bc -l | cut -c1-5)x"
