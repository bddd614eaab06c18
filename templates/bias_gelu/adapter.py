"""Uniform test/bench interface for the bias_gelu template (see docs/templates.md).

SHAPES[0] is the input x (any rank); the bias, when params["has_bias"], has shape [x.shape[-1]].
"""

import torch

import fa_testing as fat

KIND = "pointwise"
OUTPUTS = ["y"]
GRAD_INPUTS = ["x", "bias"]
# adversarial shapes at interpreter size: ragged, a single element, primes, one past a block
ADVERSARIAL = [[[129, 127]], [[1]], [[1, 1]], [[31, 37]], [[2, 3, 65]]]


def adversarial(params):
    return ADVERSARIAL


def has_backward(params):
    return True


def interp_shapes(shapes):
    return [fat.shrink(shapes[0])]


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    x = fat.randn(shapes[0], dtype, device, g, std=2.0)
    n = shapes[0][-1] if shapes[0] else 1
    bias = fat.randn([n], dtype, device, g) if params.get("has_bias", True) else None
    return {"x": x, "bias": bias}


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, bias = inputs["x"], inputs["bias"]
    approx = params.get("approximate", "none")
    if autograd:
        return (kernel.BiasGELUFunction.apply(x, bias, approx),)
    dtype = x.dtype if bias is None else torch.promote_types(x.dtype, bias.dtype)
    out = fat.poison(x.shape, dtype, x.device) if poison else None
    return (kernel.bias_gelu(x, bias, approx, out=out),)


def reference(ref, inputs, params):
    return (ref.bias_gelu(inputs["x"], inputs["bias"], params.get("approximate", "none")),)


def tolerance(dtype, shapes, params, grad=False):
    return fat.tol(KIND, dtype)


def nbytes(shapes, dtype, params):
    """Fewest bytes the fused chain must move: read x (+ bias), write y."""
    es = torch.tensor([], dtype=dtype).element_size()
    n = 1
    for d in shapes[0]:
        n *= d
    return es * (2 * n + (shapes[0][-1] if params.get("has_bias", True) else 0))
