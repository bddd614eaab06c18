"""Uniform test/bench interface for the linear_gelu template (see docs/templates.md).

SHAPES[0] is x ``[..., K]``, SHAPES[1] the weight ``[N, K]``; the bias (params["has_bias"]) is
``[N]``. Forward only. Weights are scaled by 1/sqrt(K) so outputs stay O(1).
"""

import math

import torch

import fa_testing as fat

KIND = "gemm"
OUTPUTS = ["y"]
GRAD_INPUTS = []


def adversarial(params):
    # ragged M/N/K, a single row, K one past a block (32 in the interpreter), a 3-D input; the
    # last two meet TMA's 16-byte alignment in fp16/bf16 (K and N multiples of 8), so the TMA
    # kernel runs on ragged tiles (M 33, K 72 = 2 blocks + 8, N 48)
    return [
        [[33, 70], [45, 70]],
        [[1, 1], [1, 1]],
        [[1, 33], [17, 33]],
        [[2, 9, 64], [40, 64]],
        [[37, 129], [31, 129]],
        [[33, 72], [48, 72]],
        [[3, 11, 136], [24, 136]],
    ]


def has_backward(params):
    return False


def interp_shapes(shapes):
    x, w = shapes[0], shapes[1]
    k = min(x[-1], 96)
    xs = fat.shrink(x[:-1] + [k], max_last=k, max_rows=40)
    return [xs, [min(w[0], 72), k]] + [list(s) for s in shapes[2:]]


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    x = fat.randn(shapes[0], dtype, device, g)
    n, k = shapes[1]
    w = fat.randn([n, k], dtype, device, g, std=1.0 / math.sqrt(max(k, 1)))
    b = fat.randn([n], dtype, device, g) if params.get("has_bias", True) else None
    return {"x": x, "weight": w, "bias": b}


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    shape = tuple(x.shape[:-1]) + (w.shape[0],)
    out = fat.poison(shape, x.dtype, x.device) if poison else None
    return (kernel.linear_gelu(x, w, b, params.get("approximate", "none"), out=out),)


def reference(ref, inputs, params):
    return (ref.linear_gelu(inputs["x"], inputs["weight"], inputs["bias"], params.get("approximate", "none")),)


def tolerance(dtype, shapes, params, grad=False):
    return fat.tol(KIND, dtype)


def nbytes(shapes, dtype, params):
    es = torch.tensor([], dtype=dtype).element_size()
    m = 1
    for d in shapes[0][:-1]:
        m *= d
    n, k = shapes[1]
    return es * (m * k + n * k + m * n + n)


def flops(shapes, dtype, params):
    """The GEMM's arithmetic, 2*M*N*K: the floor of a GEMM-bound chain is flops over the GEMM rate."""
    m = 1
    for d in shapes[0][:-1]:
        m *= d
    n, k = shapes[1]
    return 2 * m * n * k


def gemm_only(inputs, params):
    """The Linear alone (cuBLAS through F.linear): what the fused kernel is measured against."""
    return torch.nn.functional.linear(inputs["x"], inputs["weight"], inputs["bias"])
