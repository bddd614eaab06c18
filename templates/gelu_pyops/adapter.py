"""Uniform test/bench interface for the gelu_pyops template (see docs/templates.md).

SHAPES[0] is the input x (any rank); the bias, when params["has_bias"], has shape [x.shape[-1]].
params["out_dtype"] is y's dtype when it differs from x's (autocast: bf16 x, fp32 y).
"""

import torch

import fa_testing as fat

KIND = "pointwise"
OUTPUTS = ["y"]
GRAD_INPUTS = ["x", "bias"]
# eager's backward through the op chain rounds after every op in fp16/bf16: compare gradients
# with the fp32 chain (quack check) rather than with eager's low-precision gradients
QUACK_GRAD = True
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


def _out(params):
    return fat.DTYPES[params["out_dtype"]] if params.get("out_dtype") else None


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, bias = inputs["x"], inputs["bias"]
    if autograd:
        return (kernel.NewGELUFunction.apply(x, bias, _out(params)),)
    dtype = _out(params) or (x.dtype if bias is None else torch.promote_types(x.dtype, bias.dtype))
    out = fat.poison(x.shape, dtype, x.device) if poison else None
    return (kernel.new_gelu(x, bias, out=out, dtype=dtype),)


def reference(ref, inputs, params):
    return (ref.new_gelu(inputs["x"], inputs["bias"], _out(params)),)


def tolerance(dtype, shapes, params, grad=False):
    # an fp32 output of a 16-bit input is compared at fp32 tolerance (without a bias: with one,
    # eager rounds x + bias to the input's type and the kernel keeps it in fp32)
    if _out(params) and not params.get("has_bias", True) and not grad:
        return fat.tol(KIND, _out(params))
    return fat.tol(KIND, dtype)


def nbytes(shapes, dtype, params):
    """Fewest bytes the fused chain must move: read x (+ bias), write y."""
    es = torch.tensor([], dtype=dtype).element_size()
    ys = torch.tensor([], dtype=_out(params) or dtype).element_size()
    n = 1
    for d in shapes[0]:
        n *= d
    return es * (n + (shapes[0][-1] if params.get("has_bias", True) else 0)) + ys * n
