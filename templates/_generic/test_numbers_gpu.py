"""A generic kernel's number inputs on the GPU (case.py's "number": a Python float the trace
does not record, passed at run time): the results are eager's with the same numbers, in eager
use and inside a CUDA graph, including a number first seen while the graph captures (its
tensor is made by a captured fill, not kept: a replay fills it again), and the graph replays
with the numbers it was captured with. Runs the golden example abs_add_sqrt_div_number
(codegen/testdata/golden/generic).

  cd templates && python -m pytest -q -m gpu _generic/test_numbers_gpu.py
"""

import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # generic_golden
from generic_golden import GPU_ONLY, load  # noqa: E402

pytestmark = GPU_ONLY


def _load(name):
    return load("abs_add_sqrt_div_number", name)


def test_numbers_eager_and_graph():
    kernel, ref = _load("kernel"), _load("reference")
    x = torch.randn(64, 4096, device="cuda").to(torch.bfloat16)
    for eps, scale in ((0.5, 1.25), (1e-3, 3.0)):
        torch.testing.assert_close(kernel.fused(x, eps, scale)[0].float(), ref.chain(x, eps, scale)[0].float(),
                                   rtol=1e-2, atol=1e-2)
    kernel.fused(x, 0.5, 1.25)  # warm: compiled, 0.5 and 1.25 kept
    kernel._NUMBER_TENSORS.pop((0.75, x.device), None)
    out = torch.empty_like(x)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kernel.fused(x, 0.5, 0.75, out=[out])  # 0.75 first seen here: a captured fill, not kept
    assert (0.75, x.device) not in kernel._NUMBER_TENSORS
    kernel.fused(x, 0.5, 2.0)  # another call between: its own tensors, the graph's untouched
    for _ in range(2):
        out.zero_()
        g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out.float(), ref.chain(x, 0.5, 0.75)[0].float(), rtol=1e-2, atol=1e-2)
