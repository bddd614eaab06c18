#!/usr/bin/env bash
# Screenshots an HTML report with headless Chromium, to check that it reads at a glance in a
# real browser. Usage: bash scripts/screenshot-report.sh REPORT.html OUT.png [WIDTH,HEIGHT]
# (default 1400,2400). Needs chromium (Debian: apt-get install -y chromium). The browser gets
# a fresh empty profile and no network features; the page itself loads nothing external.
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
	echo "usage: $0 REPORT.html OUT.png [WIDTH,HEIGHT]" >&2
	exit 2
fi
report=$1 out=$2 size=${3:-1400,2400}
if [ ! -f "$report" ]; then
	echo "$0: $report: no such file" >&2
	exit 2
fi
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
	echo "$0: no chromium found (apt-get install -y chromium)" >&2
	exit 2
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
abs=$(cd "$(dirname "$report")" && pwd)/$(basename "$report")
case $out in /*) ;; *) out=$PWD/$out ;; esac
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
	--disable-background-networking --disable-component-update --disable-sync \
	--hide-scrollbars --user-data-dir="$profile" \
	--screenshot="$out" --window-size="$size" "file://$abs" 2>"$profile/stderr" || {
	cat "$profile/stderr" >&2
	exit 1
}
echo "$out" >&2
