// Package pyenv finds the Python interpreter that runs fuseadvise's Triton kernels: the one
// given explicitly, else $FUSEADVISE_PYTHON, else the venv that scripts/setup-python.sh
// creates (torch and triton pinned to the GPU machine's versions).
package pyenv
