"""The generic kernels' rounding of a 16-bit step on the GPU: _round, a conversion to bf16 or
fp16 and back in PTX, gives for every one of the 2**32 fp32 bit patterns the number _round_bits
gives (the interpreter's form, which the verifier's interpreter runs check against eager), and
that number is eager's own conversion (torch's .to(dtype), to nearest even, subnormals kept,
overflow to inf). NaN: a NaN either way (its payload is not kept by the store's conversion).

Runs the helpers of a golden example's kernel (codegen/testdata/golden/generic; both forms are
in every generic kernel that rounds).

  cd templates && python -m pytest -q -m gpu _generic/test_round_gpu.py
"""

import pathlib
import sys

import pytest
import torch
import triton
import triton.language as tl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # generic_golden
from generic_golden import GPU_ONLY, load  # noqa: E402

pytestmark = GPU_ONLY

K = load("table_bf16", "kernel")
_round, _round_bits = K._round, K._round_bits


@triton.jit
def _both(x_ptr, ptx_ptr, bits_ptr, n, DT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(ptx_ptr + offs, _round(y, DT), mask=mask)
    tl.store(bits_ptr + offs, _round_bits(y, DT), mask=mask)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_round_every_fp32(dtype):
    dt = tl.bfloat16 if dtype == torch.bfloat16 else tl.float16
    chunk = 1 << 28
    ptx = torch.empty(chunk, dtype=torch.float32, device="cuda")
    bits = torch.empty_like(ptx)
    for lo in range(0, 1 << 32, chunk):
        pattern = torch.arange(lo, lo + chunk, dtype=torch.int64, device="cuda")
        x = (pattern - (1 << 32) * (pattern >= (1 << 31))).to(torch.int32).view(torch.float32)
        _both[(chunk // 1024,)](x, ptx, bits, chunk, DT=dt, BLOCK=1024)
        eager = x.to(dtype).to(torch.float32)
        nan = x.isnan()
        assert torch.equal(ptx.isnan(), nan) and torch.equal(bits.isnan(), nan), hex(lo)
        for name, got in (("_round", ptx), ("_round_bits", bits)):
            bad = (got.view(torch.int32) != eager.view(torch.int32)) & ~nan
            if bad.any():
                i = bad.nonzero()[0].item()
                pytest.fail(f"{name}({x[i].item()!r} = {hex((lo + i) & 0xFFFFFFFF)}) to {dtype}: "
                            f"{got[i].item()!r}, eager {eager[i].item()!r}")
