"""What the generic kernels' tests share (test_host.py, test_numbers_gpu.py, test_round_gpu.py):
codegen's golden examples (codegen/testdata/golden/generic: every example's generated folder)
loaded as modules, and the marks of a test that needs a GPU."""

import importlib.util
import os
import pathlib

import pytest
import torch

GOLDEN = pathlib.Path(__file__).resolve().parents[2] / "codegen" / "testdata" / "golden" / "generic"

# a GPU test: marked gpu, skipped without CUDA or under the interpreter
GPU_ONLY = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                       reason="needs CUDA and TRITON_INTERPRET unset"),
]


def load(example, name):
    """GOLDEN/example/name.py as a module of its own name."""
    spec = importlib.util.spec_from_file_location(f"_generic_{example}_{name}", GOLDEN / example / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
