#!/usr/bin/env bash
# Runs every test of the project: the Go packages (parser, detector, generator, verifier,
# bench and report plumbing, CLI end to end) and the Python side (each Triton template's own
# tests in Triton's interpreter on the CPU, and the verifier's mutation suite).
# The Python environment is created on first use by scripts/setup-python.sh (cached outside
# the repository). Exit status is non-zero when any test fails.
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
echo "== go test" >&2
go test -count=1 ./...

echo "== python syntax (every tracked .py, the GPU-only experiment scripts included)" >&2
git ls-files -z '*.py' | xargs -0 "$py" -c '
import ast, sys
for f in sys.argv[1:]:
    ast.parse(open(f, encoding="utf-8").read(), f)
'

echo "== templates (TRITON_INTERPRET=1, $("$py" -c 'import torch,triton;print("torch",torch.__version__,"triton",triton.__version__)'))" >&2
TRITON_INTERPRET=1 "$py" -m pytest -q -p no:cacheprovider --ignore=templates/_common templates
