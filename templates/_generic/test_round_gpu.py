"""The generic kernels' rounding of a 16-bit step on the GPU: _round_bf16 and _round_fp16, a
conversion to bf16 or fp16 and back in PTX, give for every one of the 2**32 fp32 bit patterns
the number _round_bits_bf16 and _round_bits_fp16 give (the interpreter's form, which the verifier's interpreter runs check against eager), and
that number is eager's own conversion (torch's .to(dtype), to nearest even, subnormals kept,
overflow to inf). NaN: a NaN either way (its payload is not kept by the store's conversion).
And their tanh: libdevice's on the GPU, the interpreter's formula there too, against torch's in
fp64.

Runs the helpers of golden examples' kernels (codegen/testdata/golden/generic; both forms of a
type's rounding are in every generic kernel that rounds to it).

  cd templates && python -m pytest -q -m gpu _generic/test_round_gpu.py
"""

import math
import pathlib
import sys

import pytest
import torch
import triton
import triton.language as tl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # generic_golden
from generic_golden import GPU_ONLY, load  # noqa: E402

pytestmark = GPU_ONLY

# a golden example whose kernel rounds to each 16-bit type, and its helpers' suffix
ROUNDING = {torch.bfloat16: ("table_bf16", "bf16"), torch.float16: ("table_mean", "fp16")}


@triton.jit
def _both(x_ptr, ptx_ptr, bits_ptr, n, ptx_fn: tl.constexpr, bits_fn: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(ptx_ptr + offs, ptx_fn(y), mask=mask)
    tl.store(bits_ptr + offs, bits_fn(y), mask=mask)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_round_every_fp32(dtype):
    example, suffix = ROUNDING[dtype]
    K = load(example, "kernel")
    ptx_fn, bits_fn = getattr(K, "_round_" + suffix), getattr(K, "_round_bits_" + suffix)
    chunk = 1 << 28
    ptx = torch.empty(chunk, dtype=torch.float32, device="cuda")
    bits = torch.empty_like(ptx)
    for lo in range(0, 1 << 32, chunk):
        pattern = torch.arange(lo, lo + chunk, dtype=torch.int64, device="cuda")
        x = (pattern - (1 << 32) * (pattern >= (1 << 31))).to(torch.int32).view(torch.float32)
        _both[(chunk // 1024,)](x, ptx, bits, chunk, ptx_fn=ptx_fn, bits_fn=bits_fn, BLOCK=1024)
        eager = x.to(dtype).to(torch.float32)
        nan = x.isnan()
        assert torch.equal(ptx.isnan(), nan) and torch.equal(bits.isnan(), nan), hex(lo)
        for name, got in (("_round_" + suffix, ptx), ("_round_bits_" + suffix, bits)):
            bad = (got.view(torch.int32) != eager.view(torch.int32)) & ~nan
            if bad.any():
                i = bad.nonzero()[0].item()
                pytest.fail(f"{name}({x[i].item()!r} = {hex((lo + i) & 0xFFFFFFFF)}) to {dtype}: "
                            f"{got[i].item()!r}, eager {eager[i].item()!r}")


TANH = load("broadcast_affine_tanh", "kernel")


@triton.jit
def _tanh_both(x_ptr, dev_ptr, formula_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(dev_ptr + offs, TANH._tanh(x), mask=mask)
    tl.store(formula_ptr + offs, TANH._tanh_formula(x), mask=mask)


def test_tanh_on_the_gpu():
    """The kernels' tanh on the GPU (libdevice's) within 2 units in the last place of the true
    value, relative, over 2**22 random fp32 values from 1e-30 to 30 and their negatives; the
    interpreter's form (_tanh_formula) compiled for the GPU, whose exp and division are
    approximate there, within 8 (it is the interpreter's, not the GPU's, form: 4 units there,
    test_host.py)."""
    g = torch.Generator().manual_seed(0)
    mag = torch.exp(torch.empty(1 << 22, dtype=torch.float64).uniform_(math.log(1e-30), math.log(30.0), generator=g))
    x = (mag * torch.where(torch.rand(mag.shape, generator=g) < 0.5, -1.0, 1.0)).float().cuda()
    dev, formula = torch.empty_like(x), torch.empty_like(x)
    _tanh_both[(triton.cdiv(x.numel(), 1024),)](x, dev, formula, x.numel(), BLOCK=1024)
    want = torch.tanh(x.double())
    ulp = torch.finfo(torch.float32).eps
    for got, units in ((dev, 2), (formula, 8)):
        rel = ((got.double() - want).abs() / want.abs())[want != 0]
        assert float(rel.max()) <= units * ulp, (units, float(rel.max()))
