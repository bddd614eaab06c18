"""Tests of one generated kernel folder (copied verbatim by fuseadvise codegen).

- test_traced_scaled: the traced case (case.py) with its shapes scaled to interpreter size.
- test_adversarial: ragged / single-element / prime / one-past-a-block shapes for the pattern.
- test_grad: gradients vs eager, for patterns (and params) with a backward.
- test_traced_full (mark gpu): the traced shapes themselves, on CUDA only.
- test_on_another_gpu (mark gpu, two GPUs): the scaled case on cuda:1 while cuda:0 is current.

Run: ``TRITON_INTERPRET=1 python -m pytest -q <folder>`` on a CPU; ``python -m pytest -q -m gpu
<folder>`` on a GPU.
"""

import inspect
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import pytest  # noqa: E402
import torch  # noqa: E402

import fa_testing as fat  # noqa: E402

case = fat.load_sibling(__file__, "case")
kernel = fat.load_sibling(__file__, "kernel")
ref = fat.load_sibling(__file__, "reference")
adapter = fat.load_sibling(__file__, "adapter")

DEVICES = fat.devices()
SEEDS = fat.seeds(3)


def interp_shapes():
    """The traced shapes at interpreter size, given the case's params when the adapter takes
    them (add_layernorm's channels-first norm keeps its channels)."""
    if len(inspect.signature(adapter.interp_shapes).parameters) > 1:
        return adapter.interp_shapes(case.SHAPES, case.PARAMS)
    return adapter.interp_shapes(case.SHAPES)


@pytest.mark.parametrize("device", DEVICES)
def test_traced_scaled(device):
    shapes = interp_shapes()
    for seed in SEEDS:
        fat.run_case(kernel, ref, adapter, shapes, case.DTYPE, case.PARAMS, device, seed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", adapter.adversarial(case.PARAMS), ids=str)
def test_adversarial(device, shapes):
    for seed in SEEDS[:2]:
        fat.run_case(kernel, ref, adapter, shapes, case.DTYPE, case.PARAMS, device, seed)


@pytest.mark.parametrize("device", DEVICES)
def test_grad(device):
    if not adapter.has_backward(case.PARAMS):
        pytest.skip("forward-only for this pattern / params (see kernel.py)")
    shapes = interp_shapes()
    fat.run_grad_case(kernel, ref, adapter, shapes, case.DTYPE, case.PARAMS, device, 11)


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok(), reason="needs CUDA and TRITON_INTERPRET unset")
def test_traced_full():
    fat.run_case(kernel, ref, adapter, case.SHAPES, case.DTYPE, case.PARAMS, "cuda", 0)


@pytest.mark.gpu
@pytest.mark.skipif(not fat.cuda_ok() or torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_on_another_gpu():
    """A model split over GPUs (Hugging Face's device_map="auto") calls a layer on cuda:1 while
    cuda:0 is current: the kernels run on the tensors' device, forward and gradients right."""
    with torch.cuda.device(0):
        fat.run_case(kernel, ref, adapter, interp_shapes(), case.DTYPE, case.PARAMS, "cuda:1", 0)
        if adapter.has_backward(case.PARAMS):
            fat.run_grad_case(kernel, ref, adapter, interp_shapes(), case.DTYPE, case.PARAMS, "cuda:1", 11)
