#!/usr/bin/env bash
# Creates (or reuses) the Python environment fuseadvise runs its Triton kernels in:
# torch and triton pinned to the GPU machine's versions, plus pytest and numpy.
#
# The venv lives outside the repository, in $FUSEADVISE_VENV (default
# ~/.cache/fuseadvise/venv-<torch>-<triton>), so a warm machine never downloads again and a
# fresh one (CI) builds it once. Prints the venv's python path on stdout as its last line.
set -euo pipefail

TORCH_VERSION=2.11.0
TRITON_VERSION=3.6.0
NUMPY_SPEC='numpy>=1.26,<3'
PYTEST_SPEC='pytest>=8'

cache="${XDG_CACHE_HOME:-$HOME/.cache}/fuseadvise"
venv="${FUSEADVISE_VENV:-$cache/venv-torch$TORCH_VERSION-triton$TRITON_VERSION}"
py="$venv/bin/python"
stamp="$venv/.fuseadvise-ok"

want="torch==$TORCH_VERSION triton==$TRITON_VERSION"
if [ -x "$py" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$py"
  exit 0
fi

# One creator at a time: a second caller waits for the first, then reuses its venv.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
if ! flock -n 9; then
  echo "fuseadvise: waiting for another setup of $venv ..." >&2
  flock 9
fi
if [ -x "$py" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$py"
  exit 0
fi

base_python="${PYTHON:-python3}"
echo "fuseadvise: creating $venv ($want) ..." >&2
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$base_python" -m venv "$venv"
"$py" -m pip install -q --upgrade pip >&2
# torch from PyPI is the CUDA build (several GB with its CUDA libraries, which `import torch`
# loads even without a GPU); it runs on the CPU, which is all Triton's interpreter needs.
"$py" -m pip install -q --progress-bar off "torch==$TORCH_VERSION" "triton==$TRITON_VERSION" \
  "$NUMPY_SPEC" "$PYTEST_SPEC" >&2
"$py" - <<'PY' >&2
import torch, triton
print(f"fuseadvise: torch {torch.__version__}, triton {triton.__version__}")
PY
echo "$want" >"$stamp"
echo "$py"
