#!/usr/bin/env bash
# Runs every test of the project: the Go packages (parser, detector, generator, verifier,
# bench and report plumbing, CLI end to end) and the Python side (each Triton template's own
# tests in Triton's interpreter on the CPU, and the verifier's mutation suite).
# The Python environment is created on first use by scripts/setup-python.sh (cached outside
# the repository). Exit status is non-zero when any test fails.
#
# After the quick checks, three jobs run side by side, each with its own log, printed when
# it ends: verify (go test ./verify: the mutation suite, the longest), go-test (go test of
# the other packages) and templates (the templates' pytest tests, and the recording scripts'
# CPU checks: scripts/test_recording.py). Each go test has an explicit -timeout, well
# above its measured time (docs/verify.md).
set -euo pipefail
cd "$(dirname "$0")/.."

# The pinned venv first, so the Go tests that run Python use it too.
py=$(bash scripts/setup-python.sh)
export FUSEADVISE_PYTHON="$py"

echo "== gofmt" >&2
unformatted=$(git ls-files -z '*.go' | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
	echo "gofmt: not formatted:" >&2
	echo "$unformatted" >&2
	exit 1
fi
echo "== go mod tidy" >&2
if ! go mod tidy -diff; then
	echo "go.mod/go.sum are not tidy (the diff above): run 'go mod tidy'" >&2
	exit 1
fi
echo "== go vet" >&2
go vet ./...

echo "== python syntax (every tracked .py, the GPU-only experiment scripts included)" >&2
git ls-files -z '*.py' | xargs -0 "$py" -c '
import ast, sys
for f in sys.argv[1:]:
    ast.parse(open(f, encoding="utf-8").read(), f)
'

logs=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -- "$p" 2>/dev/null || true; done; rm -rf "$logs"' EXIT

# job NAME CMD...: runs CMD in the background, its output in $logs/NAME, then its exit
# status and seconds in $logs/NAME.rc. (NAME without spaces.)
names=()
job() {
	local name=$1
	shift
	(
		start=$SECONDS
		set +e
		"$@" >"$logs/$name" 2>&1
		echo "$? $((SECONDS - start))" >"$logs/$name.rc"
	) &
	pids+=($!)
	names+=("$name")
}

others=$(go list ./... | grep -v '/verify$')
echo "== go test ./verify, go test (other packages), templates (TRITON_INTERPRET=1, $("$py" -c 'import torch,triton;print("torch",torch.__version__,"triton",triton.__version__)')): in parallel" >&2
job verify go test -count=1 -timeout 25m ./verify
# shellcheck disable=SC2086
job go-test go test -count=1 -timeout 8m $others
# one torch thread, as verify's runners: the jobs share the cores
job templates env TRITON_INTERPRET=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$py" -m pytest -q -p no:cacheprovider --ignore=templates/_common templates scripts/test_recording.py scripts/test_bench_h200.py
# the host-work budgets of the templates' training calls (templates/_common/hostcount.py): its
# own run, as templates/pytest.ini does not collect _common
job templates-host env TRITON_INTERPRET=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$py" -m pytest -q -p no:cacheprovider templates/_common/test_hostcount.py

# Each job's log as soon as it ends.
failed=()
reported=()
while [ ${#reported[@]} -lt ${#names[@]} ]; do
	for i in "${!names[@]}"; do
		name=${names[$i]}
		[[ " ${reported[*]} " == *" $name "* ]] && continue
		if [ ! -f "$logs/$name.rc" ]; then
			kill -0 "${pids[$i]}" 2>/dev/null && continue
			sleep 1 # it may have ended since the test above
			[ -f "$logs/$name.rc" ] || echo "? ?" >"$logs/$name.rc" # killed before writing its status
		fi
		reported+=("$name")
		read -r rc secs <"$logs/$name.rc"
		cat "$logs/$name" >&2
		if [ "$rc" = 0 ]; then
			echo "== $name: ok (${secs}s)" >&2
		else
			echo "== $name: FAILED (exit $rc, ${secs}s)" >&2
			failed+=("$name")
		fi
	done
	sleep 1
done
wait
pids=()
if [ ${#failed[@]} -gt 0 ]; then
	echo "FAILED: ${failed[*]}" >&2
	exit 1
fi
