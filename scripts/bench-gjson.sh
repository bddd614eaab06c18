#!/usr/bin/env bash
# Compares the trace package's hand-written JSON scanner with github.com/tidwall/gjson on the
# parser's work: the same records from the traceEvents of the largest shared trace (or
# $FUSEADVISE_BENCH_TRACE, uncompressed), on one core; and encoding/json with gjson on the
# largest shared execution trace. The benchmark lives in
# trace/_gjson_compare_test.go, which the go tool ignores (leading underscore); gjson is not
# a dependency of the module, so this adds the file through -overlay and gjson through a
# temporary copy of go.mod. Usage: bash scripts/bench-gjson.sh [go test flags, e.g. -count 6]
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp go.mod "$tmp/go.mod"
cp go.sum "$tmp/go.sum"
go get -modfile="$tmp/go.mod" github.com/tidwall/gjson@v1.20.2 2>/dev/null
printf '{"Replace": {"%s": "%s"}}\n' "$PWD/trace/gjson_compare_test.go" "$PWD/trace/_gjson_compare_test.go" >"$tmp/overlay.json"
go test -modfile="$tmp/go.mod" -overlay="$tmp/overlay.json" -cpu 1 -run 'GJSONSame' \
	-bench 'Events(Scanner|GJSON)$|ET(Decode|GJSON)$' -benchmem "$@" ./trace
